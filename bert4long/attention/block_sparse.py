"""BigBird's block-sparse attention as the published checkpoints compute it (Hugging Face `BigBirdBlockSparseAttention`)."""
import math

import numpy as np
from keras import ops

from bert4long.attention.base import AttentionKernel, masked_softmax, register_attention_kernel, softmax_attention
from bert4long.attention.blocks import check_positive_int, pad_to_multiple, to_blocks


def masked_softmax_attention(q, k, v, keep):
    """Softmax attention of ``q [..., q, d]`` over ``k, v [..., k, d]`` (float32 scores), ``keep`` broadcast to scores."""
    scores = ops.cast(ops.einsum("...qd,...kd->...qk", q, k), "float32") / math.sqrt(q.shape[-1])
    probs = masked_softmax(scores, keep)
    return ops.einsum("...qk,...kd->...qd", ops.cast(probs, v.dtype), v)


@register_attention_kernel()
class BlockSparseAttention(AttentionKernel):
    """BigBird-ITC block-sparse attention with the reference's exact pattern and rules.

    The sequence is padded to ``n`` blocks of ``block_size``. The first and
    last blocks are global (they attend to every token and every block attends
    to them); block ``i`` of the others attends to blocks ``i - 1, i, i + 1`` and
    to ``num_random_blocks`` random blocks. This is what Hugging Face's
    `BigBirdBlockSparseAttention` (transformers 5.x) computes, with its rules:

    * inputs of at most ``(5 + 2 * num_random_blocks) * block_size`` tokens use
      full attention (the reference switches its ``attention_type`` to
      ``original_full`` for them), with dropout on the probabilities; the
      block-sparse path applies none, as the reference;
    * the random blocks in inference (``training=False``): the reference leaves
      its random-block table at zeros, so each random slot is the first block
      once more (its keys are counted ``1 + num_random_blocks`` times in the
      softmax); reproduced here;
    * the random blocks in training: drawn as the reference draws them
      (`reference_random_blocks`: numpy seeded with the layer index, per head),
      which needs the padded length when the graph is built (a static
      ``sequence_length``); with an unknown length the inference pattern is used;
    * padding queries give zero rows (not in the full-attention case).

    Unlike `BigBirdAttention` (``attention='bigbird'``, our design for BERT
    checkpoints), the global blocks are the first and the last, no block is
    de-duplicated, and the pattern follows the reference rather than a hash.

    Args:
        block_size: tokens per block (64 in the released models).
        num_random_blocks: random key blocks per query block (3 in the released models).
        num_heads: heads (only for the per-head training pattern; 0 disables it).
        max_position: ``max_position_embeddings`` (the reference's training pattern
            for 1,024, 3,072 and 4,096 tokens depends on it).
        **kwargs: `AttentionKernel` arguments; ``seed`` is the layer index.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.block_sparse import BlockSparseAttention
    >>> q = np.random.rand(1, 100, 2, 8).astype("float32")
    >>> BlockSparseAttention(block_size=8, num_random_blocks=2)(q, q, q, np.ones((1, 100), bool)).shape
    TensorShape([1, 100, 2, 8])

    Reference: Zaheer et al., Big Bird: Transformers for Longer Sequences (2020);
    transformers' ``modeling_big_bird.py``.
    """

    supports_bias = False
    padding_changes_outputs = True
    options_within_length = ("block_size",)

    def __init__(self, block_size=64, num_random_blocks=3, num_heads=0, max_position=4096, **kwargs):
        super().__init__(**kwargs)
        self.block_size = check_positive_int(block_size, "block_size", "block_sparse")
        if not isinstance(num_random_blocks, int) or num_random_blocks < 0:
            raise ValueError(f"attention='block_sparse': num_random_blocks must be a non-negative integer, "
                             f"got {num_random_blocks!r}.")
        self.num_random_blocks = num_random_blocks
        self.num_heads = num_heads
        self.max_position = max_position
        if self.causal:
            raise ValueError("attention='block_sparse' is BigBird's bidirectional encoder attention: no causal mask.")

    @property
    def length_multiple(self):
        return self.block_size

    def keys_per_query(self, length):
        """Three window blocks, the first and last blocks and the random blocks of a query block."""
        return min(length, self.block_size * (5 + self.num_random_blocks))

    @property
    def full_attention_length(self):
        """Inputs up to this many tokens get full attention (the reference's switch)."""
        return (5 + 2 * self.num_random_blocks) * self.block_size

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        key_mask = ops.not_equal(ops.convert_to_tensor(key_mask), 0)
        length = q.shape[1]
        if length is not None:  # a static length: the path is known when the graph is built
            if length <= self.full_attention_length:
                return self.full_attention(q, k, v, key_mask, training)
            return self.sparse_attention(q, k, v, key_mask, training)
        return ops.cond(
            ops.shape(q)[1] <= self.full_attention_length,
            lambda: self.full_attention(q, k, v, key_mask, training),
            lambda: self.sparse_attention(q, k, v, key_mask, training),
        )

    def full_attention(self, q, k, v, key_mask, training):
        return softmax_attention(q, k, v, key_mask[:, None, None, :], self.probs_dropout, training)

    def random_blocks(self, num_blocks, training):
        """Random key blocks ``[heads or 1, num_blocks, num_random_blocks]`` of each query block (rows 0, n-1 unused)."""
        r = self.num_random_blocks
        static_blocks = num_blocks if isinstance(num_blocks, int) else None
        if training and self.num_heads and static_blocks is not None:
            table = reference_random_blocks(static_blocks, self.block_size, r, self.num_heads, self.seed or 0,
                                            self.max_position)
            table = np.pad(table, [(0, 0), (1, 1), (0, 0)])
            return ops.convert_to_tensor(table, "int32")
        return ops.zeros((1, num_blocks, r), "int32")  # the reference in inference: block 0 in every slot

    def sparse_attention(self, q, k, v, key_mask, training):
        block, r = self.block_size, self.num_random_blocks
        length = ops.shape(q)[1]
        q, k, v = (pad_to_multiple(t, block) for t in (q, k, v))
        mask = pad_to_multiple(key_mask, block)
        n = ops.shape(q)[1] // block
        rows = ops.arange(n)[:, None]
        # columns: first block, window i-1, i, i+1, last block, then the random blocks
        window = ops.concatenate([ops.zeros_like(rows), rows - 1, rows, rows + 1, ops.zeros_like(rows) + n - 1], 1)
        valid = ops.concatenate([
            ops.ones_like(rows, "bool"),
            rows != 1,  # block 1's left neighbour is the first block, already there
            ops.ones_like(rows, "bool"),
            rows != n - 2,  # block n-2's right neighbour is the last block
            ops.ones_like(rows, "bool"),
            ops.ones((n, r), "bool"),
        ], 1)
        randoms = self.random_blocks(n, training)  # [heads or 1, n, r]
        heads = ops.shape(q)[2]
        indices = ops.concatenate([ops.broadcast_to(window[None], (ops.shape(randoms)[0], n, 5)), randoms], -1)
        indices = ops.clip(ops.broadcast_to(indices, (heads, n, 5 + r)), 0, n - 1)  # [h, n, w]
        flat = indices + (ops.arange(heads) * n)[:, None, None]

        def per_head_blocks(x):  # [b, n * block, h, d] -> [b, h * n, block, d]
            x = ops.transpose(to_blocks(x, block), (0, 3, 1, 2, 4))
            return ops.reshape(x, (ops.shape(x)[0], heads * n, block, x.shape[-1]))

        def gathered(x):  # -> [b, h, n, w * block, d]
            x = ops.take(per_head_blocks(x), flat, axis=1)
            return ops.reshape(x, (ops.shape(x)[0], heads, n, (5 + r) * block, x.shape[-1]))

        mask_blocks = ops.reshape(ops.broadcast_to(ops.reshape(mask, (-1, 1, n, block)), (ops.shape(mask)[0], heads, n,
                                                                                      block)), (-1, heads * n, block))
        keep = ops.reshape(ops.take(mask_blocks, flat, axis=1), (-1, heads, n, 1, (5 + r) * block))
        keep = ops.logical_and(keep, ops.repeat(valid, block, axis=1)[None, None, :, None, :])
        q_blocks = ops.transpose(to_blocks(q, block), (0, 3, 1, 2, 4))  # [b, h, n, block, d]
        out = masked_softmax_attention(q_blocks, gathered(k), gathered(v), keep)
        out = ops.reshape(ops.transpose(out, (0, 2, 3, 1, 4)), ops.shape(v))  # [b, n * block, h, d]
        # the first and the last block attend to every token
        edges = ops.concatenate([q[:, :block], q[:, -block:]], 1)
        edge_out = masked_softmax_attention(*(ops.transpose(t, (0, 2, 1, 3)) for t in (edges, k, v)),
                                            mask[:, None, None, :])
        edge_out = ops.transpose(edge_out, (0, 2, 1, 3))
        out = ops.concatenate([edge_out[:, :block], out[:, block:-block], edge_out[:, block:]], 1)
        out = out * ops.cast(mask, out.dtype)[:, :, None, None]
        return out[:, :length]

    def get_config(self):
        config = super().get_config()
        config.update(block_size=self.block_size, num_random_blocks=self.num_random_blocks, num_heads=self.num_heads,
                      max_position=self.max_position)
        return config


def reference_random_blocks(num_blocks, block_size, num_random_blocks, num_heads, seed, max_position):
    """The reference's training-time random blocks ``[heads, num_blocks - 2, num_random_blocks]``.

    transformers draws them in training with numpy's legacy generator seeded by the
    layer index (`numpy.random.seed(layer)` before every forward pass, so the
    "random" blocks are the same at every step for a given length): for 1,024,
    3,072 and 4,096 tokens from the paper's fixed plan over ``max_position``
    (`_fixed_plan`), otherwise per head from a plan over the length (`_length_plan`).
    Only lengths above the full-attention switch (more than ``2r + 5`` blocks) apply.
    Rows are the query blocks ``1 .. num_blocks - 2``.

    Example:
    >>> from bert4long.attention.block_sparse import reference_random_blocks
    >>> reference_random_blocks(12, 4, 2, num_heads=2, seed=0, max_position=128).shape
    (2, 10, 2)
    """
    rng = np.random.RandomState(seed)  # the same stream as numpy.random.seed(seed)
    if num_blocks * block_size in (1024, 3072, 4096):
        rows = [_fixed_plan(rng, max_position // block_size, block_size, num_random_blocks)[: num_blocks - 2]
                for _ in range(num_heads)]
        return np.stack(rows)
    return _length_plan(rng, num_blocks, num_random_blocks, num_heads)


def _fixed_plan(rng, num_blocks, block_size, r, last_index=1024):
    """The paper's plan: block ``i`` draws ``r`` blocks among ``1 .. last``, away from its window."""
    table = np.zeros((num_blocks - 2, r), dtype=np.int32)
    middle = np.arange(1, num_blocks - 1, dtype=np.int32)
    last = num_blocks - 1
    if last_index > 2 * block_size:
        last = last_index // block_size - 1
    for i in range(1, num_blocks - 1):
        start, end = i - 2, i
        if i == 1:
            choices = middle[2:last]
        elif i == 2:
            choices = middle[3:last]
        elif i in (num_blocks - 3, num_blocks - 2) or start > last:
            choices = middle[:last]
        elif end + 1 == last:
            choices = middle[:start]
        else:
            choices = np.concatenate((middle[:start], middle[end + 1 : last]))
        table[i - 1, :] = rng.permutation(choices)[:r]
    return table


def _length_plan(rng, num_blocks, r, num_heads):
    """Per-head random blocks for other lengths: each block ``1 .. n - 1`` draws among the first ``2r + 5``.

    The reference plans over the length; block-sparse lengths always have more
    than ``2r + 5`` blocks (shorter inputs get full attention), where its plan
    draws every row, in order and head by head, from blocks ``0 .. 2r + 4``.
    """
    span = 2 * r + 5
    tables = np.zeros((num_heads, num_blocks, r), dtype=np.int32)
    for row in range(1, num_blocks):
        for head in range(num_heads):
            tables[head, row] = _row_blocks(rng, row, 0, span, r)
    return tables[:, 1 : num_blocks - 1]


def _row_blocks(rng, row, to_start, to_end, count):
    """``count`` blocks of ``to_start .. to_end - 1`` in a random order, outside row's window and the global blocks."""
    order = rng.permutation(np.arange(to_start, to_end, dtype=np.int32))
    illegal = [*range(row - 1, row + 2), 0, to_end - 1]
    if row == 1:
        illegal.append(to_end - 2)
    if row == to_end - 2:
        illegal.append(1)
    chosen = [block for block in order if block not in illegal][:count]
    return np.array(chosen, dtype=np.int32)
