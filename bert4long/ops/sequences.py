"""Sequence masking and axis alignment (bert4keras's backend helpers that layers use)."""
import keras
from keras import ops


def align(tensor, axes, ndim=None):
    """Insert unit axes so that axis ``i`` of ``tensor`` becomes axis ``axes[i]`` (batched expand_dims).

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.sequences import align
    >>> tuple(align(np.ones((2, 5)), [0, 2], 4).shape)
    (2, 1, 5, 1)
    """
    rank = len(tensor.shape)
    if len(axes) != rank:
        raise ValueError(f"align: got {len(axes)} axes for a rank-{rank} tensor; give one axis per tensor axis.")
    ndim = ndim or max(axes) + 1
    axes = [a % ndim for a in axes]
    for axis in range(ndim):
        if axis not in axes:
            tensor = ops.expand_dims(tensor, axis)
    return tensor


def sequence_masking(x, mask=None, value=0, axis=None, bias=None, return_mask=False):
    """Replace the padded positions of ``x`` by ``value`` (bert4keras semantics).

    Args:
        x: tensor with sequence axes.
        mask: ``[batch, length]`` (bool or 0/1), True on real tokens.
        value: the fill value (``-np.inf`` before a softmax, or ``'-inf'``/``'inf'``).
        axis: sequence axis of ``x`` (default 1), or a list of axes that are all
            masked by the same ``mask`` (e.g. ``[2, 3]`` for a score matrix).
        bias: an extra bool mask (AND-ed) or an additive float bias.
        return_mask: also return the broadcast bool mask.

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.sequences import sequence_masking
    >>> np.asarray(sequence_masking(np.ones((1, 3)), np.array([[1, 1, 0]]), -1.0)).tolist()
    [[1.0, 1.0, -1.0]]
    """
    if isinstance(value, str):
        value = float(value)
    if mask is not None:
        axes = [1] if axis is None else (list(axis) if isinstance(axis, (list, tuple)) else [axis])
        rank = len(x.shape)
        axes = [a % rank for a in axes]
        mask = ops.cast(mask, "bool")
        full_mask = None
        for a in axes:
            aligned = align(mask, [0, a], rank)
            full_mask = aligned if full_mask is None else ops.logical_and(full_mask, aligned)
        mask = full_mask
        if bias is not None and keras.backend.standardize_dtype(bias.dtype) == "bool":
            mask = ops.logical_and(mask, bias)
        elif bias is not None:
            x = x + bias
        x = ops.where(mask, x, ops.cast(value, x.dtype))
    elif bias is not None:
        if keras.backend.standardize_dtype(bias.dtype) == "bool":
            mask = bias
            x = ops.where(mask, x, ops.cast(value, x.dtype))
        else:
            x = x + bias
    return (x, mask) if return_mask else x
