"""BigBird (ITC) block-sparse attention: window, global and random key blocks."""
import numpy as np
from keras import ops

from bert4long.attention.base import AttentionKernel, register_attention_kernel
from bert4long.attention.blocks import (
    block_attention,
    check_positive_int,
    dedupe,
    gather_blocks,
    pad_to_multiple,
    to_blocks,
)

_PRIME = 2147483647  # 2**31 - 1


def random_blocks(seed, num_blocks, num_random, num_global, half_window):
    """Random key blocks ``[num_blocks, num_random]`` of each query block: a pure function of its arguments.

    Block ``j`` gets an integer hash of ``(seed, i, j)`` and the ``num_random``
    blocks with the smallest hashes are taken, window and global blocks sorting
    last, so a pattern is reproducible from the layer config for any length.
    The hash needs 64-bit integers, which JAX lacks by default: a block count known
    when the call is traced (every call on JAX and PyTorch, and on TensorFlow unless the
    length is dynamic) is hashed with NumPy, a dynamic one in-graph; the numbers are the same.
    """
    xp = np if isinstance(num_blocks, int) else ops
    cast = (lambda x, dtype: np.asarray(x).astype(dtype)) if xp is np else ops.cast
    rows = xp.arange(num_blocks, dtype="int64")[:, None]
    cols = xp.arange(num_blocks, dtype="int64")[None, :]
    h = (rows * 1000003 + cols * 7919 + (seed or 0) * 104729 + 12345) % _PRIME
    for _ in range(3):
        h = (h * h + 2654435761) % _PRIME
    excluded = xp.where(xp.logical_or(cols < num_global, xp.abs(rows - cols) <= half_window), _PRIME, 0)
    key = (cast(excluded, "int64") + h) * cast(num_blocks, "int64") + cols
    order = xp.argsort(cast(key, "float64"), axis=-1)
    return xp.take(order, xp.arange(num_random) % num_blocks, axis=1)  # repeats when too few blocks


@register_attention_kernel()
class BigBirdAttention(AttentionKernel):
    """BigBird-ITC block-sparse attention (memory ``O(length * block_size * blocks per row)``).

    The sequence is padded to a multiple of ``block_size`` and cut into blocks.
    Each query block attends to ``num_window_blocks`` blocks centred on itself,
    to the first ``num_global_blocks`` blocks and to ``num_random_blocks``
    random blocks; the global blocks attend to everything. A key block chosen
    twice is counted once, so when every block is selected the result is full
    attention. The random choice is `random_blocks(seed, ...)`: a pure function
    of the ``seed`` stored in the config and of the number of blocks, so a saved
    model reproduces it at any length. (Original BigBird makes the first and the
    last block global; here the global blocks are the first ones, which stay
    put when the padded length changes.)

    Args:
        block_size: tokens per block (64 in BigBird).
        num_window_blocks: odd number of blocks in the sliding window (3 in BigBird).
        num_global_blocks: number of leading global blocks.
        num_random_blocks: random key blocks per query block (3 in BigBird).
        **kwargs: `AttentionKernel` arguments; ``seed`` also seeds the random blocks.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.bigbird import BigBirdAttention
    >>> q = np.random.rand(1, 100, 2, 8).astype("float32")
    >>> BigBirdAttention(block_size=16, seed=1)(q, q, q, np.ones((1, 100), bool)).shape
    TensorShape([1, 100, 2, 8])

    Reference: Zaheer et al., Big Bird: Transformers for Longer Sequences (2020).
    """

    supports_bias = False
    padding_changes_outputs = True
    options_within_length = ("block_size",)

    def __init__(self, block_size=64, num_window_blocks=3, num_global_blocks=1, num_random_blocks=3, **kwargs):
        super().__init__(**kwargs)
        self.block_size = check_positive_int(block_size, "block_size", "bigbird")
        if check_positive_int(num_window_blocks, "num_window_blocks", "bigbird") % 2 == 0:
            raise ValueError(
                f"attention='bigbird': num_window_blocks counts the block itself and its two sides and "
                f"must be odd, got {num_window_blocks}."
            )
        self.num_window_blocks = num_window_blocks
        self.num_global_blocks = num_global_blocks and check_positive_int(
            num_global_blocks, "num_global_blocks", "bigbird"
        )
        self.num_random_blocks = num_random_blocks and check_positive_int(
            num_random_blocks, "num_random_blocks", "bigbird"
        )

    @property
    def length_multiple(self):
        return self.block_size

    def keys_per_query(self, length):
        """The window, global and random blocks of a query block."""
        return min(length, self.block_size * (self.num_window_blocks + self.num_global_blocks + self.num_random_blocks))

    def block_pattern(self, num_blocks):
        """Key-block indices ``[num_blocks, blocks per row]`` of each query block and their validity."""
        half = self.num_window_blocks // 2
        rows = ops.arange(num_blocks)[:, None]
        parts = [rows + ops.arange(-half, half + 1)[None, :]]
        if self.num_global_blocks:
            global_blocks = ops.arange(self.num_global_blocks)[None]
            parts.append(ops.broadcast_to(global_blocks, (num_blocks, self.num_global_blocks)))
        if self.num_random_blocks:
            randoms = random_blocks(self.seed, num_blocks, self.num_random_blocks, self.num_global_blocks, half)
            parts.append(ops.cast(randoms, "int32"))
        indices = ops.concatenate(parts, axis=1)
        valid = ops.logical_and(indices >= 0, indices < num_blocks)
        indices = ops.clip(indices, 0, num_blocks - 1)
        return indices, dedupe(indices, valid)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        block = self.block_size
        length = ops.shape(q)[1]
        q, k, v = (pad_to_multiple(t, block) for t in (q, k, v))
        mask = pad_to_multiple(ops.cast(key_mask, "bool"), block)
        positions = ops.arange(ops.shape(q)[1])
        q_blocks = to_blocks(q, block)
        indices, valid = self.block_pattern(ops.shape(q_blocks)[1])
        keep = ops.logical_and(gather_blocks(to_blocks(mask, block), indices), ops.repeat(valid, block, axis=1))
        keep = keep[:, :, None, None, :]  # [batch, n, heads, block, keys]
        if self.causal:
            k_positions = gather_blocks(to_blocks(positions, block, axis=0), indices, axis=0)  # [n, keys]
            q_positions = to_blocks(positions, block, axis=0)  # [n, block]
            keep = ops.logical_and(keep, k_positions[:, None, None, :] <= q_positions[:, None, :, None])
        k_sparse, v_sparse = (gather_blocks(to_blocks(t, block), indices) for t in (k, v))
        out = block_attention(self, q_blocks, k_sparse, v_sparse, keep, training)
        out = ops.reshape(out, ops.shape(v)[:3] + (out.shape[-1],))
        if self.num_global_blocks:  # global query blocks attend to every key
            num_global = self.num_global_blocks * block
            keep = mask[:, None, None, :]
            if self.causal:
                keep = ops.logical_and(keep, positions[None, :] <= positions[:num_global, None])
            global_out = block_attention(self, q[:, :num_global], k, v, keep, training)
            out = ops.concatenate([global_out, out[:, num_global:]], axis=1)
        return out[:, :length]

    def get_config(self):
        config = super().get_config()
        config.update(
            block_size=self.block_size,
            num_window_blocks=self.num_window_blocks,
            num_global_blocks=self.num_global_blocks,
            num_random_blocks=self.num_random_blocks,
        )
        return config
