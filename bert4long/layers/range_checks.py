"""Range checks of integer inputs (token, segment and position ids).

`checked_ids` asserts the ids (`bert4long.ops.checks.checked`): ``InvalidArgumentError`` on TensorFlow
eagerly, inside `tf.function` and in a SavedModel; ``ValueError`` on JAX and PyTorch when the ids are
concrete. XLA (``jit_compile=True``, and every compiled JAX step) drops the assertion, and its gathers clamp an
out-of-range index to the last row, which would give plausible wrong numbers. Keras's
``fit``/``evaluate``/``predict`` are covered by the check before the compiled step
(`bert4long.models.checked`); for a call inside a compiled function bert4long does not control,
`poison_rows` makes the rows of bad ids NaN (they spread to the whole example through attention) instead
of a clamped value.
"""
from keras import ops

from bert4long.ops.checks import checked


def checked_ids(ids, limit, message):
    """``(ids as int32, bad)``: the ids once asserted to lie in ``[0, limit)``; ``bad`` is True where they do not.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.range_checks import checked_ids
    >>> np.asarray(checked_ids(np.array([[1, 7]]), 8, "ids")[1]).tolist()
    [[False, False]]
    """
    ids = ops.cast(ids, "int32")
    bad = ops.logical_or(ids < 0, ids >= limit)
    return checked(ids, ops.logical_not(ops.any(bad)), message), bad


def poison_rows(vectors, bad):
    """``vectors`` ``[..., dim]`` with the rows where ``bad`` ``[...]`` is True set to NaN."""
    nan = ops.cast(float("nan"), vectors.dtype)
    return vectors + ops.expand_dims(ops.where(bad, nan, ops.cast(0.0, vectors.dtype)), -1)
