"""In-graph range checks of integer inputs (token, segment and position ids).

`checked_ids` attaches ``tf.debugging`` assertions, which raise
``InvalidArgumentError`` eagerly, inside `tf.function` and in a SavedModel.
XLA (``jit_compile=True``) drops every assertion, and its gathers clamp an
out-of-range index to the last row, which would give plausible wrong numbers.
Keras's ``fit``/``evaluate``/``predict`` are covered by the check before the
compiled step (`bert4long.checked_model`); for a call inside a jit-compiled
function bert4long does not control, `poison_rows` makes the rows of bad ids NaN
(they spread to the whole example through attention) instead of a clamped value.
"""
import tensorflow as tf
from keras import ops


def checked_ids(ids, limit, message):
    """``(ids as int32, assertions, bad)``: ``bad`` is True where ``ids`` is outside ``[0, limit)``.

    Run the lookup under ``tf.control_dependencies(assertions)``.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.range_checks import checked_ids
    >>> checked_ids(np.array([[1, 7]]), 8, "ids")[2].numpy().tolist()
    [[False, False]]
    """
    ids = ops.cast(ids, "int32")
    bad = ops.logical_or(ids < 0, ids >= limit)
    assertions = [tf.debugging.assert_equal(ops.any(bad), False, message=message)]
    return ids, assertions, bad


def poison_rows(vectors, bad):
    """``vectors`` ``[..., dim]`` with the rows where ``bad`` ``[...]`` is True set to NaN."""
    nan = ops.cast(float("nan"), vectors.dtype)
    return vectors + ops.expand_dims(ops.where(bad, nan, ops.cast(0.0, vectors.dtype)), -1)
