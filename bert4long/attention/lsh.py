"""Reformer LSH attention: angular hashing, sorted chunks, several hash rounds."""
import math

from keras import ops

from bert4long.attention.base import AttentionKernel, masked_softmax, register_attention_kernel
from bert4long.attention.blocks import (
    attention_scores,
    check_positive_int,
    gather_blocks,
    merge_axes,
    neighbour_blocks,
    pad_to_multiple,
    seeded_normal,
    to_blocks,
)


def take_positions(x, order, rounds_in_x=False):
    """``x[b, (r,) order[b, r, l, h], h, ...]`` -> ``[b, r, L, h, ...]``: one gather with ``[b, r, L, h]`` indices."""
    batch, rounds, length, heads = ops.shape(order)
    rows = ops.arange(batch)[:, None, None, None]
    if rounds_in_x:
        rows = rows * rounds + ops.arange(rounds)[None, :, None, None]
    index = (rows * length + order) * heads + ops.arange(heads)
    trailing = x.shape[4 if rounds_in_x else 3:]
    return ops.take(ops.reshape(x, (-1, *trailing)), index, axis=0)


@register_attention_kernel()
class LSHAttention(AttentionKernel):
    """Reformer's locality-sensitive-hashing attention (memory ``O(num_hashes * length * bucket_size)``).

    Each hash round draws a random rotation ``R`` and puts a vector ``x`` in
    bucket ``argmax([x R, -x R])`` (angular LSH). Reformer shares queries and
    keys; a pretrained BERT has separate ``K``, so here queries and keys are
    hashed with the *same* rotations, queries are sorted by (bucket, position)
    and keys likewise, and the sorted queries of chunk ``c`` (``bucket_size``
    tokens) attend to the sorted keys of chunks ``c - 1``, ``c``, ``c + 1``
    (both neighbours, since the query and key orders differ) plus their own
    key, which guarantees a non-empty softmax. Rounds are combined with weights
    ``softmax(logsumexp)`` over rounds, as in Reformer (a key found in several
    rounds is not discounted). With one bucket and one chunk covering the
    sequence this is exactly full attention.

    The rotations are a non-trainable weight drawn from ``seed`` in
    `build_kernel` (saved with the model).

    Args:
        bucket_size: chunk length of the sorted sequence (Reformer's ``chunk_length``).
        num_buckets: buckets per round: 1 or an even number (Reformer: ``2 * length / bucket_size``).
        num_hashes: hash rounds (more rounds: closer to full attention).
        **kwargs: `AttentionKernel` arguments; ``seed`` seeds the rotations.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.lsh import LSHAttention
    >>> kernel = LSHAttention(bucket_size=16, num_buckets=4, seed=0)
    >>> kernel.build_kernel(num_heads=2, head_dim=8, hidden_dim=16)
    >>> q = np.random.rand(1, 50, 2, 8).astype("float32")
    >>> kernel(q, q, q, np.ones((1, 50), bool)).shape
    TensorShape([1, 50, 2, 8])

    Reference: Kitaev et al., Reformer: The Efficient Transformer (2020).
    """

    supports_bias = False
    padding_changes_outputs = True
    options_within_length = ("bucket_size",)

    def __init__(self, bucket_size=64, num_buckets=32, num_hashes=2, **kwargs):
        super().__init__(**kwargs)
        self.bucket_size = check_positive_int(bucket_size, "bucket_size", "lsh")
        if check_positive_int(num_buckets, "num_buckets", "lsh") % 2 and num_buckets != 1:
            raise ValueError(f"attention='lsh': num_buckets must be 1 or even, got {num_buckets}.")
        self.num_buckets = num_buckets
        self.num_hashes = check_positive_int(num_hashes, "num_hashes", "lsh")

    @property
    def length_multiple(self):
        return self.bucket_size

    def keys_per_query(self, length):
        """Its sorted chunk and the one before, in each hash round."""
        return self.num_hashes * 2 * self.bucket_size

    def build_kernel(self, num_heads, head_dim, hidden_dim, value_dim=None):
        shape = (self.num_hashes, head_dim, max(self.num_buckets // 2, 1))
        self.rotations = self.add_weight(shape=shape, initializer="zeros", trainable=False, name="rotations")
        self.rotations.assign(seeded_normal((self.seed or 0, 2), shape))

    def sort_order(self, x):
        """Permutation ``[b, hashes, L, h]`` sorting ``x [b, L, h, d]`` by (bucket, position) in each round."""
        rotated = ops.einsum("blhd,rdk->brlhk", ops.cast(x, "float32"), self.rotations)
        buckets = ops.argmax(ops.concatenate([rotated, -rotated], axis=-1), axis=-1)
        if self.num_buckets == 1:
            buckets = ops.zeros_like(buckets)
        length = ops.shape(x)[1]
        return ops.argsort(ops.cast(buckets, "int32") * length + ops.arange(length)[:, None], axis=2)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        if not hasattr(self, "rotations"):
            raise ValueError("attention='lsh' needs build_kernel(num_heads, head_dim, hidden_dim) first.")
        chunk = self.bucket_size
        length = ops.shape(q)[1]
        q, k, v = (pad_to_multiple(t, chunk) for t in (q, k, v))
        mask = pad_to_multiple(ops.cast(key_mask, "bool"), chunk)
        q_order, k_order = self.sort_order(q), self.sort_order(k)

        def sort(x, order):  # [b, L, h(, d)] -> sorted [b, hashes, L, h(, d)], in chunks
            return to_blocks(take_positions(x, order), chunk, axis=2)

        mask = ops.broadcast_to(mask[:, :, None], ops.shape(q)[:3])
        q_sorted, own_k, own_v, own_keep = sort(q, q_order), sort(k, q_order), sort(v, q_order), sort(mask, q_order)
        indices, valid = neighbour_blocks(ops.shape(q_sorted)[2], (-1, 0, 1))
        k_near, v_near, keep = (gather_blocks(sort(t, k_order), indices, 2) for t in (k, v, mask))
        keep = ops.logical_and(keep, ops.repeat(valid, chunk, axis=1)[None, None, :, :, None])
        q_positions = ops.moveaxis(to_blocks(q_order, chunk, axis=2), -1, 3)[..., None]  # [b, r, n, h, c, 1]
        k_positions = ops.moveaxis(gather_blocks(to_blocks(k_order, chunk, axis=2), indices, 2), -1, 3)[..., None, :]
        keep = ops.logical_and(ops.moveaxis(keep, -1, 3)[..., None, :], k_positions != q_positions)
        if self.causal:
            keep = ops.logical_and(keep, k_positions <= q_positions)
        own_scores = ops.sum(ops.cast(q_sorted, "float32") * ops.cast(own_k, "float32"), -1) / math.sqrt(q.shape[-1])
        scores = ops.concatenate([attention_scores(q_sorted, k_near), ops.moveaxis(own_scores, -1, 3)[..., None]], -1)
        keep = ops.concatenate([keep, ops.moveaxis(own_keep, -1, 3)[..., None]], -1)
        # lse: each round's weight in the combination
        probs, lse = masked_softmax(scores, keep, self.probs_dropout, training, logsumexp=True)
        probs = ops.cast(probs, v.dtype)
        out = ops.einsum("...hqk,...khd->...qhd", probs[..., :-1], v_near)
        out = out + ops.moveaxis(probs[..., -1], 3, -1)[..., None] * own_v  # [b, r, n, c, h, dv]
        out, lse = merge_axes(out, 2), merge_axes(ops.moveaxis(lse, 3, -1), 2)
        unsort = ops.argsort(q_order, axis=2)
        out, lse = take_positions(out, unsort, rounds_in_x=True), take_positions(lse, unsort, rounds_in_x=True)
        weights = ops.exp(lse - ops.logsumexp(lse, axis=1, keepdims=True))  # softmax over rounds
        return ops.sum(out * ops.cast(weights[..., None], out.dtype), axis=1)[:, :length]

    def get_config(self):
        config = super().get_config()
        config.update(bucket_size=self.bucket_size, num_buckets=self.num_buckets, num_hashes=self.num_hashes)
        return config
