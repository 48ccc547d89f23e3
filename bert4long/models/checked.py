"""`CheckedModel`: a Keras model whose inputs are range-checked before every compiled step.

Keras casts the values given for an integer input to int32, so a float id 5.7 would be read as 5:
`CheckedModel.call` asserts first that such values are whole numbers (`whole_number_checks`, an
``InvalidArgumentError`` on TensorFlow eagerly, in `tf.function` and in ``fit``; a ``ValueError`` on JAX
and PyTorch when the values are concrete), and `check_inputs` refuses them on the host before a compiled
step, where XLA drops assertions.

The embedding, position and gather layers assert their ids
(`bert4long.layers.range_checks`), which is an error eagerly, in `tf.function`
and in a SavedModel on TensorFlow, and on JAX and PyTorch wherever the ids are concrete
(`bert4long.ops.checks`). A compiled step has no such check: XLA drops assertions, and inside ``jax.jit``
there are no values to check, so with ``jit_compile=True`` (JAX's default)
``fit``/``evaluate``/``predict`` (and the ``*_on_batch`` methods) would clamp a
bad id silently. `CheckedModel` overrides the public ``make_train_function``,
``make_test_function`` and ``make_predict_function``: when the step is
jit-compiled, each batch is checked on the host first (`check_inputs`, a
min/max per input) and a bad batch raises ``ValueError`` naming the input, the
value, where it is, and the fix. Batches then reach Keras's compiled step one
at a time, the path ``train_on_batch`` takes; ``steps_per_execution`` keeps its
meaning.

Every model `build_transformer_model` and the training builders return is a
`CheckedModel`. The limits come from the model's own layers (found by their
public names): ``Input-Token`` below ``Embedding-Token``'s rows,
``Input-Segment`` below ``Embedding-Segment``'s, ``Input-Position`` and the
length below what ``Embedding-Position`` can place, ``Input-Masked-Positions``
below the length.

    >>> import numpy as np
    >>> from bert4long.models import build_transformer_model
    >>> model = build_transformer_model(vocab_size=10, hidden_size=8, num_hidden_layers=1,
    ...                                 num_attention_heads=2, intermediate_size=16, max_position=8)
    >>> model.compile(loss="mse", jit_compile=True)
    >>> try:
    ...     model.predict([np.array([[1, 12]]), np.array([[0, 0]])], verbose=0)
    ... except ValueError as error:
    ...     print(str(error).split(":")[0])
    Input 'Input-Token' holds 12 (example 0, position 1), outside [0, 10)
"""
import itertools

import keras
import numpy as np
from keras import ops

from bert4long.ops.checks import checked

FIXES = {
    "Input-Token": "token ids must come from this model's vocabulary (vocab_size {limit}): use the checkpoint's own "
                   "vocab.txt, or a model whose vocab_size matches the tokenizer",
    "Input-Segment": "segment ids must be below type_vocab_size {limit}",
    "Input-Position": "position ids must be below the {limit} positions the model can place",
    "Input-Masked-Positions": "masked positions must index the sequence ({limit} tokens in this batch)",
    "Input-Attention-Mask": "the attention mask holds 0 (padding), 1 (local) or 2 (global)",
}


WHOLE_IDS = ("ids are integers (a float id would be cut to the one below it); pass an integer array, e.g. "
             "np.asarray(ids, dtype='int32').")


def _walk(layer):
    for inner in getattr(layer, "layers", ()):
        yield inner
        yield from _walk(inner)


def input_limits(model):
    """``({input name: exclusive upper limit}, max_length or None)`` read from ``model``'s layers.

    ``Input-Masked-Positions``' limit is the batch's length, so it is not listed.
    """
    layers = {layer.name: layer for layer in _walk(model)}
    limits = {}
    for input_name, layer_name in (("Input-Token", "Embedding-Token"), ("Input-Segment", "Embedding-Segment")):
        if layer_name in layers:
            limits[input_name] = layers[layer_name].input_dim
    position = layers.get("Embedding-Position")
    max_length = getattr(position, "max_length", None)
    if max_length is not None:
        limits["Input-Position"] = max_length
    limits["Input-Attention-Mask"] = 3
    return limits, max_length


def named_inputs(model, x):
    """``[(input name, tensor)]`` for a batch ``x`` given as a list, tuple, dict or single tensor."""
    names = [tensor.name for tensor in model.inputs]
    if isinstance(x, dict):
        return [(name, x[name]) for name in names if name in x]
    flat = list(x) if isinstance(x, (list, tuple)) else [x]
    return list(zip(names, flat)) if len(flat) == len(names) else []


def _first_outside(values, limit):
    """The first value outside ``[0, limit)`` and where it is, in words."""
    index = tuple(int(i) for i in np.argwhere((values < 0) | (values >= limit))[0])
    where = f"example {index[0]}" + (f", position {index[-1]}" if len(index) > 1 else "")
    return int(values[index]), where


def whole_numbers_checked(model, x):
    """``x`` with the floating-point values it gives for ``model``'s integer inputs asserted to be whole numbers.

    Keras casts them to the inputs' int32, which would read 5.7 as 5; the assertions
    (`bert4long.ops.checks.checked`) raise ``InvalidArgumentError`` on TensorFlow instead, eagerly, in
    `tf.function` and in a non-XLA ``fit``, and ``ValueError`` on JAX and PyTorch for concrete values (a
    compiled step drops them: `check_inputs` covers it). Integer inputs are returned as they are.
    """
    integer = {tensor.name for tensor in model.inputs if "int" in keras.backend.standardize_dtype(tensor.dtype)}

    def whole(name, value):
        if name not in integer or value is None:
            return value
        value = value if hasattr(value, "dtype") else np.asarray(value)
        if not keras.backend.is_float_dtype(keras.backend.standardize_dtype(value.dtype)):
            return value
        value = ops.convert_to_tensor(value)
        return checked(value, ops.all(ops.equal(value, ops.round(value))),
                       f"Input {name!r} holds a value that is not a whole number: {WHOLE_IDS}")

    names = [tensor.name for tensor in model.inputs]
    if isinstance(x, dict):
        return {name: whole(name, value) for name, value in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(whole(name, value) for name, value in zip(names, x)) if len(x) == len(names) else x
    return whole(names[0], x) if len(names) == 1 else x


def check_inputs(model, x, limits=None):
    """Raise ``ValueError`` if batch ``x`` holds an id ``model`` cannot embed or a sequence it cannot place.

    ``x`` may hold `tf.distribute` per-replica values (TensorFlow). Costs one numpy min and max
    per input, on the host (a device-resident batch is copied there first).
    """
    limits, max_length = limits or input_limits(model)
    strategy = getattr(model, "distribute_strategy", None)  # TensorFlow's only
    named = [(name, np.asarray(local)) for name, value in named_inputs(model, x)
             for local in (strategy.experimental_local_results(value) if strategy else [value]) if local is not None]
    if not named:
        return
    token = next((t for n, t in named if n == "Input-Token"), named[0][1])
    length = token.shape[-1] if token.ndim else 0
    if max_length is not None and length > max_length and "Input-Position" not in dict(named):
        raise ValueError(
            f"Input 'Input-Token' has {length} tokens per sequence, more than the {max_length} positions this model "
            "can place: truncate or split the input (bert4long.data.chunk_documents), or use a model that places "
            "more (hierarchical_position=True places n*n for n trained positions)."
        )
    if token.ndim > 1 and length == 0 and token.shape[0]:
        raise ValueError("Input 'Input-Token' has 0 tokens per sequence: give each sequence at least one token "
                         "(a tokenizer's encode adds [CLS] and [SEP]).")
    for name, values in named:
        limit = length if name == "Input-Masked-Positions" else limits.get(name)
        if limit is not None and np.issubdtype(values.dtype, np.floating) and values.size \
                and not np.all(values == np.round(values)):
            index = tuple(int(i) for i in np.argwhere(values != np.round(values))[0])
            raise ValueError(f"Input {name!r} holds {values[index]!r} at {index}, not a whole number: {WHOLE_IDS}")
        if limit is None or values.size == 0 or (values.min() >= 0 and values.max() < limit):
            continue
        value, where = _first_outside(values, limit)
        raise ValueError(f"Input {name!r} holds {value} ({where}), outside [0, {limit}): "
                         + FIXES[name].format(limit=limit) + ".")


class _CheckedBatches:
    """Iterate ``iterator``, checking each batch's inputs first."""

    def __init__(self, model, iterator, limits):
        self.model, self.iterator, self.limits = model, iter(iterator), limits

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.iterator)
        check_inputs(self.model, keras.utils.unpack_x_y_sample_weight(batch)[0], self.limits)
        return batch


@keras.saving.register_keras_serializable(package="bert4long")
class CheckedModel(keras.Model):
    """Functional model that refuses float ids that are not whole numbers and range-checks each batch before a
    jit-compiled step (see the module docstring)."""

    def call(self, inputs, training=None, mask=None, **kwargs):
        return super().call(whole_numbers_checked(self, inputs), training=training, mask=mask, **kwargs)

    def _checked_step(self, function):
        """``function`` (Keras's step: ``(data)`` on TensorFlow and PyTorch, ``(state, data)`` on JAX), with the
        batches of ``data`` checked on the host first."""
        limits = input_limits(self)

        def checked_step(*args):
            *state, data = args
            if isinstance(data, list):  # the batches of one call, as TensorFlow's predict and PyTorch pass them
                for batch in data:
                    check_inputs(self, keras.utils.unpack_x_y_sample_weight(batch)[0], limits)
                return function(*state, data)
            batches = _CheckedBatches(self, data, limits)
            first = next(batches)  # StopIteration / OutOfRangeError end the epoch, as in Keras's own function
            return function(*state, itertools.chain([first], batches))

        return checked_step

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        super().make_train_function(force)
        if self.jit_compile:
            self.train_function = self._checked_step(self.train_function)
        return self.train_function

    def make_test_function(self, force=False):
        if self.test_function is not None and not force:
            return self.test_function
        super().make_test_function(force)
        if self.jit_compile:
            self.test_function = self._checked_step(self.test_function)
        return self.test_function

    def make_predict_function(self, force=False):
        if self.predict_function is not None and not force:
            return self.predict_function
        super().make_predict_function(force)
        if self.jit_compile:
            self.predict_function = self._checked_step(self.predict_function)
        return self.predict_function
