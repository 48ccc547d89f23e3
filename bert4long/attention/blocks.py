"""Helpers shared by the block-sparse and chunked attention kernels.

Every kernel keeps shapes static by padding the sequence to a multiple of its
block and slicing back; the padding amount is computed from ``ops.shape`` so
lengths may be unknown (None) when a functional model is built. Sequences are
``[batch, length, heads, head_dim]``; blocked sequences ``[..., blocks, block, heads, head_dim]``.
"""
import math

import numpy as np
from keras import ops

from bert4long.attention.base import masked_softmax


def check_positive_int(value, name, kernel):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"attention={kernel!r}: {name} must be a positive integer, got {value!r} "
            f"(attention_config={{'{name}': ...}})."
        )
    return value


def pad_to_multiple(x, multiple, axis=1):
    """Pad ``axis`` of ``x`` with zeros (False for bools) up to a multiple of ``multiple``."""
    length = ops.shape(x)[axis]
    padding = (-length) % multiple
    widths = [[0, 0] for _ in range(len(x.shape))]
    widths[axis] = [0, padding]
    return ops.pad(x, widths)


def to_blocks(x, block, axis=1):
    """Split ``axis`` (a multiple of ``block``) into ``[blocks, block]``."""
    shape = ops.shape(x)
    return ops.reshape(x, (*shape[:axis], shape[axis] // block, block, *shape[axis + 1:]))


def merge_axes(x, axis):
    """Merge ``axis`` and ``axis + 1`` (inverse of `to_blocks`)."""
    shape = ops.shape(x)
    return ops.reshape(x, (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2:]))


def dedupe(indices, valid):
    """Invalidate a column of ``indices [n, s]`` that repeats a valid column to its left.

    Keeps attention exact when two selections (window, global, random) pick the
    same block: each key block is counted once.
    """
    width = indices.shape[-1]
    same = ops.equal(ops.expand_dims(indices, -1), ops.expand_dims(indices, -2))
    same = ops.logical_and(same, ops.expand_dims(valid, -1))  # [n, s(earlier), s(later)]
    earlier = ops.arange(width)[:, None] < ops.arange(width)[None, :]
    repeated = ops.any(ops.logical_and(same, earlier), axis=-2)
    return ops.logical_and(valid, ops.logical_not(repeated))


def neighbour_blocks(num_blocks, offsets):
    """Indices ``[n, len(offsets)]`` of blocks ``i + offset`` and their validity (in range, not repeated)."""
    rows = ops.arange(num_blocks)[:, None]
    indices = rows + ops.convert_to_tensor(list(offsets), "int32")[None, :]
    valid = ops.logical_and(indices >= 0, indices < num_blocks)
    indices = ops.clip(indices, 0, ops.maximum(num_blocks - 1, 0))
    return indices, dedupe(indices, valid)


def gather_blocks(x_blocks, indices, axis=1):
    """Gather blocks ``indices [n, s]`` from ``x_blocks`` (blocks at ``axis``, block size next).

    Returns ``[..., n, s * block, ...]``: for each block, its selected key blocks laid end to end.
    """
    return merge_axes(ops.take(x_blocks, indices, axis=axis), axis + 1)


def attention_scores(q, k):
    """Scaled float32 scores ``[..., heads, q, k]`` of ``q [..., q, heads, d]``, ``k [..., k, heads, d]``."""
    scores = ops.einsum("...qhd,...khd->...hqk", q, k)
    return ops.cast(scores, "float32") / math.sqrt(q.shape[-1])


def block_attention(kernel, q, k, v, keep, training=None):
    """Softmax attention of ``q [..., q, h, d]`` over ``k, v [..., k, h, d]``.

    ``keep`` broadcasts to ``[..., h, q, k]``; probabilities from `masked_softmax`
    with the ``kernel``'s dropout.
    """
    probs = masked_softmax(attention_scores(q, k), keep, kernel.probs_dropout, training)
    return ops.einsum("...hqk,...khd->...qhd", ops.cast(probs, v.dtype), v)


def seeded_normal(seed, shape):
    """Float32 standard-normal array, a pure function of ``(seed, shape)``."""
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def gather_positions(x, positions):
    """``x [batch, length, ...]`` at ``positions [batch, n]`` (clipped into range) -> ``[batch, n, ...]``."""
    positions = ops.minimum(positions, ops.shape(x)[1] - 1)
    positions = ops.reshape(positions, (*ops.shape(positions), *([1] * (len(x.shape) - 2))))
    return ops.take_along_axis(x, ops.broadcast_to(positions, (*ops.shape(positions)[:2], *ops.shape(x)[2:])), axis=1)
