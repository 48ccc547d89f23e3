"""A BERT with a full-vocabulary MLM output whose training step projects only the weighted positions.

The bert4keras way to train a masked LM is the full model (probabilities at every
position), sparse categorical cross-entropy, and a 0/1 mask as the sample weight.
Positions with weight 0 add nothing to the loss or the gradients, yet a plain
training step still runs the vocabulary projection (hidden x 30,522 for BERT) at
all of them: at 15% masking that is most of the head's work thrown away.

`MaskedLMModel` is the Keras model `build_transformer_model(..., with_mlm=True)`
returns. Its `train_step` / `test_step` run the encoder, gather the rows whose
sample weight is non-zero, and run the MLM head on those rows only. The loss is
the compiled loss object itself applied to the gathered rows and rescaled to the
full-tensor reduction, so loss values, gradients and weighted metrics are those of
the plain step (tested to float32 rounding). The step falls back to Keras's own
when anything else is asked of it: another loss, ``loss_weights``, unweighted
``metrics`` (they would see every position), no sample weight, XLA
(``jit_compile=True``: the number of gathered rows is not static), or a backend other than
TensorFlow (JAX compiles every step; on PyTorch the gathered step is not written yet), where
the loss and gradients are the same and the head runs at every position.
Set ``model.head_on_weighted_positions = False`` to always take Keras's step.

    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model(vocab_size=100, hidden_size=16, num_hidden_layers=1,
    ...                                 num_attention_heads=2, intermediate_size=32, with_mlm=True)
    >>> type(model).__name__
    'MaskedLMModel'
"""
import inspect
from types import SimpleNamespace

import keras

from bert4long.models.checked import CheckedModel

HEAD_INPUT_LAYER = "MLM-Dense"  # the first layer of the MLM head; its input is the encoder's output
REDUCTIONS_OVER_ALL_ELEMENTS = ("sum_over_batch_size", "mean")


@keras.saving.register_keras_serializable(package="bert4long")
class MaskedLMModel(CheckedModel):
    """Functional model with an MLM output; see the module docstring for its training step."""

    head_on_weighted_positions = True

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        arguments = inspect.signature(keras.Model.compile).bind(self, *args, **kwargs).arguments
        self._split().compiled_with = {k: arguments.get(k) for k in ("loss", "loss_weights", "metrics")}

    def compile_from_config(self, config):
        """Recompile a loaded model through `compile` above (Keras skips an overridden `compile`)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def _split(self):
        """(encoder, head) sub-models sharing this model's layers; kept off Keras's attribute tracking."""
        parts = self.__dict__.get("_mlm_parts")
        if parts is None:
            hidden = self.get_layer(HEAD_INPUT_LAYER).input
            encoder = keras.Model(self.inputs, hidden)
            head = keras.models.clone_model(  # the same layers re-applied to rows of any length
                keras.Model(hidden, self.outputs[0]), input_tensors=keras.Input((None, hidden.shape[-1])),
                clone_function=lambda layer: layer)
            parts = SimpleNamespace(encoder=encoder, head=head, compiled_with={})
            self.__dict__["_mlm_parts"] = parts  # a plain object: Keras neither tracks nor saves it
        return parts

    def weighted_loss(self, y, sample_weight):
        """The loss object to run on gathered rows, or None where Keras's own step must run."""
        if not self.head_on_weighted_positions or self.jit_compile or sample_weight is None or y is None:
            return None
        if keras.backend.backend() != "tensorflow":
            return None
        compiled = self._split().compiled_with
        if compiled.get("loss_weights") is not None or compiled.get("metrics"):
            return None
        if len(self.outputs) != 1 or keras.tree.is_nested(y) or len(y.shape) != 2 or len(sample_weight.shape) != 2:
            return None
        loss = compiled.get("loss")
        if loss in ("sparse_categorical_crossentropy", keras.losses.sparse_categorical_crossentropy):
            return keras.losses.SparseCategoricalCrossentropy()
        if type(loss) is keras.losses.SparseCategoricalCrossentropy and loss.ignore_class is None:
            return loss
        return None

    def _weighted_forward(self, x, y, sample_weight, loss_fn, training):
        """Encoder on every position, head on the weighted ones: (loss, gathered y, y_pred, weights)."""
        import tensorflow as tf  # the gathered step is TensorFlow's (`weighted_loss`)

        parts = self._split()
        where = tf.where(tf.not_equal(sample_weight, 0))
        hidden = parts.encoder(x, training=training)
        y_pred = parts.head(tf.gather_nd(hidden, where)[None], training=training)
        y_rows = tf.gather_nd(y, where)[None]
        weights = tf.gather_nd(sample_weight, where)[None]
        loss = loss_fn(y_rows, y_pred, sample_weight=weights)
        if loss_fn.reduction in REDUCTIONS_OVER_ALL_ELEMENTS:  # Keras divides by every element, not the rows kept
            kept = tf.cast(tf.shape(where)[0], loss.dtype)
            loss = loss * kept / tf.cast(tf.size(sample_weight), loss.dtype)
        for extra in self.losses:
            loss = loss + tf.cast(tf.reduce_sum(extra), loss.dtype)
        return loss, y_rows, y_pred, weights

    def _track_loss(self, loss, x):
        """Keras's loss tracker, fed as its own step feeds it (per-replica loss scaled back up)."""
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        batch = tf.shape(tf.nest.flatten(x)[0])[0]
        self._loss_tracker.update_state(loss * tf.cast(replicas, loss.dtype), sample_weight=batch)

    def train_step(self, *args):
        """``(data)``, or ``(state, data)`` on JAX, as Keras's own step."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(args[-1])
        loss_fn = self.weighted_loss(y, sample_weight)
        if loss_fn is None:
            return super().train_step(*args)
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss, y_rows, y_pred, weights = self._weighted_forward(x, y, sample_weight, loss_fn, training=True)
            self._track_loss(loss, x)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables))
        return self.compute_metrics(x, y_rows, y_pred, sample_weight=weights)

    def test_step(self, *args):
        """``(data)``, or ``(state, data)`` on JAX, as Keras's own step."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(args[-1])
        loss_fn = self.weighted_loss(y, sample_weight)
        if loss_fn is None:
            return super().test_step(*args)
        loss, y_rows, y_pred, weights = self._weighted_forward(x, y, sample_weight, loss_fn, training=False)
        self._track_loss(loss, x)
        return self.compute_metrics(x, y_rows, y_pred, sample_weight=weights)
