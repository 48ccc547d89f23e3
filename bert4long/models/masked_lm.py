"""A BERT with a full-vocabulary MLM output whose training step runs the head on the weighted positions only.

The bert4keras way to train a masked LM is the full model (probabilities at every
position), sparse categorical cross-entropy, and a 0/1 mask as the sample weight.
Positions with weight 0 add nothing to the loss or the gradients, yet a plain
training step still runs the vocabulary projection (hidden x 30,522 for BERT) at
all of them: at 15% masking that is most of the head's work thrown away.

`MaskedLMModel` is the Keras model `build_transformer_model(..., with_mlm=True)`
returns. Its forward pass is the full model (``predict``, ``model(x)``: probabilities at
every position) except inside the steps Keras makes for ``fit`` and ``evaluate``
(``make_train_function``, ``make_test_function``), where it stops at the encoder's
hidden states and `compute_loss` runs the head: no hand-written step, one code path on
TensorFlow (also under XLA and `tf.distribute`), JAX and PyTorch. The positions are
sorted weighted first (`keras.ops.top_k`) and split into `head_chunks` chunks of one
static size (JAX and XLA compile fixed shapes). The head runs on the first chunk, a
fifth of the positions by default, which holds every weighted position up to that
share (BERT masks 15%); when more are weighted, the next chunks run too, one after the
other and recomputed in the backward pass (`keras.remat`): no weighted position is left
out and, under XLA, which reserves memory for a computation whether it runs or not, they
reserve no more than the first chunk. Each chunk's loss is the compiled loss on its
rows, weighted so that the chunks add up to its reduction over the whole tensor
(`REDUCTIONS_OVER_ALL_ELEMENTS` divide by every element, not by the rows kept), plus the
model's own losses (``self.losses``, summed): loss values, gradients and weighted
metrics are those of Keras's step (tested to float32 rounding). The compiled weighted
metrics are updated inside `compute_loss`, on the same rows and weights;
`compute_metrics` then only reads them.

The head runs at every position, as Keras's step does and with its numbers, when
anything else is asked of the model: another loss (only sparse categorical
cross-entropy without ``ignore_class`` runs on rows), ``loss_weights``, or unweighted
``metrics`` (they would see every position); and, inside a step, no sample weight or
``y``, or a sample weight that is not ``[batch, length]``. Set
``model.head_on_weighted_positions = False`` to always take Keras's step; changing it or
`head_chunks` (1: every position) makes the next step trace again.

    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model(vocab_size=100, hidden_size=16, num_hidden_layers=1,
    ...                                 num_attention_heads=2, intermediate_size=32, with_mlm=True)
    >>> type(model).__name__, model.head_chunks
    ('MaskedLMModel', 5)
"""
import inspect
from types import SimpleNamespace

import keras
from keras import ops

from bert4long.models.checked import CheckedModel, whole_numbers_checked

HEAD_INPUT_LAYER = "MLM-Dense"  # the first layer of the MLM head; its input is the encoder's output
REDUCTIONS_OVER_ALL_ELEMENTS = ("sum_over_batch_size", "mean")
REDUCTIONS = ("sum", "mean_with_sample_weight", *REDUCTIONS_OVER_ALL_ELEMENTS)  # each adds up over chunks
HEAD_CHUNKS = 5  # the head runs on a fifth of the positions: room for BERT's 15% and short sequences' rounding


def loss_object(loss):
    """The compiled ``loss`` as a `keras.losses.Loss` the head can run on gathered rows (sparse categorical
    cross-entropy without ``ignore_class``, whose mask would change the element count; the name and the function
    are Keras's default `SparseCategoricalCrossentropy`), or None for any other loss."""
    if isinstance(loss, str) or inspect.isfunction(loss):
        names = ("sparse_categorical_crossentropy", keras.losses.sparse_categorical_crossentropy)
        return keras.losses.SparseCategoricalCrossentropy() if loss in names else None
    if type(loss) is keras.losses.SparseCategoricalCrossentropy and loss.ignore_class is None \
            and loss.reduction in REDUCTIONS:
        return loss
    return None


def read(variable):
    """A variable's value as a tensor on every backend (TensorFlow's ``value`` is the variable itself, which a loop
    would read inside)."""
    return ops.cast(variable, variable.dtype)


def loop_while(start, stop, carry, keep_going, body):
    """``carry = body(i, carry)`` for ``i = start, start + 1, ...`` while ``i < stop`` (Python ints) and
    ``keep_going(i)`` (a tensor, true for the first ``i`` only), differentiable and compiled by XLA on every
    backend: JAX's while loop has no gradient, so there a `keras.ops.fori_loop` (a scan) runs `keras.ops.cond`
    each time; TensorFlow's gradient of a `keras.ops.cond` holding a loop or `keras.remat` fails, so elsewhere a
    `keras.ops.while_loop` stops, with the ``maximum_iterations`` XLA sizes its gradient's accumulators by."""
    if keras.backend.backend() == "jax":
        return ops.fori_loop(start, stop, lambda i, c: ops.cond(keep_going(i), lambda: body(i, c), lambda: c), carry)
    return ops.while_loop(lambda i, _: ops.logical_and(i < stop, keep_going(i)), lambda i, c: (i + 1, body(i, c)),
                          (start, carry), maximum_iterations=max(stop - start, 0))[1]


def weighted_first(weights, chunks):
    """Row indices ``[chunks, ceil(rows / chunks)]`` into ``weights`` ``[rows]`` and a padding row after them: the
    rows with a non-zero weight first, then the others, then the padding row (index ``rows``) filling the last
    chunk. ``chunks`` is a Python int, so their number is static even where ``rows`` is not (TensorFlow).

    >>> import numpy as np
    >>> from keras import ops
    >>> ops.convert_to_numpy(weighted_first(np.array([0.0, 1.0, 0.0, 1.0, 0.0], "float32"), 3)).tolist()
    [[1, 3], [0, 2], [4, 5]]
    """
    rows = ops.shape(weights)[0]
    _, order = ops.top_k(ops.cast(ops.not_equal(weights, 0), "float32"), rows)
    size = (rows + chunks - 1) // chunks
    padding = ops.full((chunks * size - rows,), rows, "int32")
    return ops.reshape(ops.concatenate([ops.cast(order, "int32"), padding]), (chunks, size))


@keras.saving.register_keras_serializable(package="bert4long")
class MaskedLMModel(CheckedModel):
    """Functional model with an MLM output; see the module docstring for its training step."""

    @property
    def head_on_weighted_positions(self):
        """Whether Keras's steps run the head on the weighted positions only (else at every position)."""
        return self.__dict__.get("_head_on_weighted", True)

    @head_on_weighted_positions.setter
    def head_on_weighted_positions(self, value):
        self.__dict__["_head_on_weighted"] = bool(value)
        self.train_function = self.test_function = None  # traced again with the new choice

    @property
    def head_chunks(self):
        """Into how many chunks of equal size a batch's positions are split for the head, the weighted ones first:
        the first chunk runs always, the others only when it cannot hold every weighted position."""
        return self.__dict__.get("_head_chunks", HEAD_CHUNKS)

    @head_chunks.setter
    def head_chunks(self, value):
        if int(value) != value or value < 1:
            raise ValueError(f"head_chunks is a number of chunks, 1 or more, got {value!r}.")
        self.__dict__["_head_chunks"] = int(value)
        self.train_function = self.test_function = None

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        arguments = inspect.signature(keras.Model.compile).bind(self, *args, **kwargs).arguments
        self.__dict__["_compiled_with"] = {k: arguments.get(k) for k in ("loss", "loss_weights", "metrics")}

    def compile_from_config(self, config):
        """Recompile a loaded model through `compile` above (Keras skips an overridden `compile`)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def runs_head_on_rows(self):
        """Whether Keras's steps run the head on the weighted rows under this compilation (module docstring)."""
        compiled = self.__dict__.get("_compiled_with", {})
        return bool(self.head_on_weighted_positions and len(self.outputs) == 1 and not compiled.get("metrics")
                    and compiled.get("loss_weights") is None and loss_object(compiled.get("loss")) is not None)

    def _parts(self):
        """(encoder, head) sub-models sharing this model's layers; kept off Keras's attribute tracking."""
        parts = self.__dict__.get("_mlm_parts")
        if parts is None:
            hidden = self.get_layer(HEAD_INPUT_LAYER).input
            encoder = keras.Model(self.inputs, hidden)
            head = keras.models.clone_model(  # the same layers re-applied to rows of any length
                keras.Model(hidden, self.outputs[0]), input_tensors=keras.Input((None, hidden.shape[-1])),
                clone_function=lambda layer: layer)
            parts = SimpleNamespace(encoder=encoder, head=head)
            self.__dict__["_mlm_parts"] = parts  # a plain object: Keras neither tracks nor saves it
        return parts

    def _in_step(self, function):
        """``function`` (a step Keras made) run with the forward pass ending at the hidden states, when
        `runs_head_on_rows`; the choice is made here, before the step is traced."""
        on_rows = self.runs_head_on_rows()
        if on_rows:
            self._parts()  # built outside any trace

        def step(*args):
            previous = self.__dict__.get("_step_on_rows", False)
            self.__dict__["_step_on_rows"] = on_rows
            try:
                return function(*args)
            finally:
                self.__dict__["_step_on_rows"] = previous

        return step

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        super().make_train_function(force)
        self.train_function = self._in_step(self.train_function)
        return self.train_function

    def make_test_function(self, force=False):
        if self.test_function is not None and not force:
            return self.test_function
        super().make_test_function(force)
        self.test_function = self._in_step(self.test_function)
        return self.test_function

    def _gives_hidden(self):
        return self.__dict__.get("_step_on_rows", False)

    def call(self, inputs, training=None, mask=None, **kwargs):
        if self._gives_hidden():
            return self._parts().encoder(whole_numbers_checked(self, inputs), training=training)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's loss; inside a step on rows (``y_pred`` the hidden states), the head on the weighted rows,
        with the compiled metrics updated on the same rows (`compute_metrics` then only reads them)."""
        if not self._gives_hidden():
            return super().compute_loss(x, y, y_pred, sample_weight, training=training)
        if self.head_chunks == 1 or sample_weight is None or y is None or keras.tree.is_nested(y) \
                or len(y.shape) != 2 or len(sample_weight.shape) != 2:  # every position
            predictions = self._parts().head(y_pred, training=training)
            super().compute_metrics(x, y, ops.stop_gradient(predictions), sample_weight)
            return super().compute_loss(x, y, predictions, sample_weight, training=training)
        self._build_metrics(x, y, sample_weight)
        loss, values = self._gathered_loss(x, y_pred, y, sample_weight, training)
        for variable, value in zip(self.metrics_variables, values):
            variable.assign(value)
        for extra in self.losses:
            loss = loss + ops.cast(ops.sum(extra), loss.dtype)
        return loss

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if self._gives_hidden():
            return self.get_metrics_result()  # updated in compute_loss, on the rows the head saw
        return super().compute_metrics(x, y, y_pred, sample_weight)

    def _gathered_loss(self, x, hidden, y, sample_weight, training):
        """``(compiled loss, metric values)`` with the head run on `head_chunks` chunks of rows, the weighted rows
        first (`weighted_first`): the first chunk always, the others only when it cannot hold every weighted row,
        recomputed in the backward pass (`keras.remat`), so that under XLA, where a branch reserves its memory
        whether it runs or not, they keep no more than the first chunk does."""
        labels, weights = ops.reshape(y, (-1,)), ops.reshape(sample_weight, (-1,))
        chunks = weighted_first(weights, self.head_chunks)
        share = ops.cast(ops.shape(chunks)[1], weights.dtype) / ops.cast(ops.shape(weights)[0], weights.dtype)
        rows, labels, weights_ = (ops.concatenate([t, ops.zeros_like(t[:1])])  # and the padding row
                                  for t in (ops.reshape(hidden, (-1, hidden.shape[-1])), labels, weights))
        chunk = self._chunk_loss(labels, weights_, share, ops.sum(weights), training)
        head = [read(w) for w in self._parts().head.weights]

        def add(loss, values, index, recompute=False):
            extra, predictions = (keras.remat if recompute else (lambda f: f))(chunk(index))(rows, *head)
            rows_y, rows_weights = (ops.take(t, index, axis=0)[None] for t in (labels, weights_))
            return loss + extra, self._metric_values(values, x, rows_y, predictions, rows_weights)

        loss, values = add(0.0, [read(v) for v in self.metrics_variables], chunks[0])

        weighted, size = ops.sum(ops.cast(ops.not_equal(weights, 0), "int32")), ops.shape(chunks)[1]
        return loop_while(1, self.head_chunks, (loss, values),  # chunk i holds weighted rows if those before are full
                          lambda i: i * size < weighted,
                          lambda i, carry: add(*carry, ops.take(chunks, i, axis=0), recompute=True))

    def _chunk_loss(self, labels, weights, share, weight_sum, training):
        """``chunk(index)``: ``(rows, *head weights) -> (loss, probabilities)`` on the rows ``index``: the compiled
        loss, weighted so that the chunks add up to its reduction over every row (times ``share``, a chunk's rows
        over all rows, where that divides by every element; times the chunk's share of the weights for
        ``mean_with_sample_weight``). The head reads its weights from the arguments (a `keras.StatelessScope`):
        `keras.remat` on TensorFlow differentiates no variable read inside `keras.ops.cond`."""
        loss_fn = loss_object(self.__dict__["_compiled_with"]["loss"])
        head = self._parts().head

        def chunk(index):
            def run(rows, *head_weights):
                with keras.StatelessScope(state_mapping=list(zip(head.weights, head_weights))):
                    predictions = head(ops.take(rows, index, axis=0)[None], training=training)
                rows_y, rows_weights = (ops.take(t, index, axis=0)[None] for t in (labels, weights))
                scaled = rows_weights * share if loss_fn.reduction in REDUCTIONS_OVER_ALL_ELEMENTS else rows_weights
                loss = ops.cast(loss_fn(rows_y, predictions, scaled), keras.config.floatx())
                if loss_fn.reduction == "mean_with_sample_weight":
                    loss = loss * ops.cast(ops.divide_no_nan(ops.sum(rows_weights), weight_sum), loss.dtype)
                return loss, predictions

            return run

        return chunk

    def _metric_values(self, values, x, y, predictions, weights):
        """The values of ``metrics_variables`` (now ``values``) after the compiled metrics see these rows, in a
        `keras.StatelessScope`: nothing is assigned inside `keras.ops.cond` or a loop, `compute_loss` assigns."""
        with keras.StatelessScope(state_mapping=list(zip(self.metrics_variables, values))) as scope:
            super().compute_metrics(x, y, ops.stop_gradient(predictions), weights)
        return [scope.get_current_value(v) for v in self.metrics_variables]

    def _build_metrics(self, x, y, weights):
        """Build the compiled metrics before `_metric_values` reads ``metrics_variables``: TensorFlow's Keras builds
        them on their first update, in the first traced step. This update, on one row, is dropped."""
        if all(getattr(metric, "built", True) for metric in self.metrics):
            return
        with keras.StatelessScope():
            probabilities = ops.zeros((1, 1, self.outputs[0].shape[-1]), self.outputs[0].dtype)
            super().compute_metrics(x, y[:, :1], probabilities, weights[:, :1])
