"""Performer (FAVOR+) linear attention with positive orthogonal random features."""
import numpy as np
from keras import ops

from bert4long.attention.base import AttentionKernel, register_attention_kernel
from bert4long.attention.blocks import check_positive_int, merge_axes, pad_to_multiple, seeded_normal, to_blocks


def orthogonal_features(seed, num_features, head_dim):
    """``[num_features, head_dim]`` Gaussian rows, orthogonal within each group of ``head_dim``.

    Rows are rescaled to chi-distributed norms so that each is marginally
    ``N(0, I)`` (FAVOR+'s orthogonal random features).
    """
    groups = []
    for index in range(-(-num_features // head_dim)):
        q, _ = np.linalg.qr(seeded_normal((seed, 0, index), (head_dim, head_dim)))
        groups.append(q.T)
    norms = np.linalg.norm(seeded_normal((seed, 1), (num_features, head_dim)), axis=1)
    return (np.concatenate(groups)[:num_features] * norms[:, None]).astype("float32")


@register_attention_kernel()
class PerformerAttention(AttentionKernel):
    """FAVOR+ linear attention: time and memory linear in the length.

    ``softmax(q k^T / sqrt(d))`` is approximated by ``phi(q) phi(k)^T`` with
    positive random features ``phi(x) = exp(w x - |x|^2 / 2) / sqrt(m)``
    (``x`` scaled by ``d ** -0.25``) over ``num_features`` orthogonal Gaussian
    directions ``w``, stored as a non-trainable weight (saved with the model)
    drawn from ``seed``; `redraw` draws new ones. Padded keys get ``phi = 0``.
    With ``causal=True`` the key/value sums become prefix sums, computed per
    block of ``block_size`` tokens (exact within a block, carried across blocks)
    so memory stays ``O(length)``.

    The attention probabilities are never formed, so ``dropout_rate`` (accepted
    for the common interface) has no effect, and a dense ``bias`` cannot be applied.

    Args:
        num_features: number of random features ``m`` (error falls like ``1 / sqrt(m)``).
        block_size: block of the causal prefix sums.
        **kwargs: `AttentionKernel` arguments; ``seed`` seeds the features.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.performer import PerformerAttention
    >>> kernel = PerformerAttention(num_features=64, seed=0)
    >>> kernel.build_kernel(num_heads=2, head_dim=8, hidden_dim=16)
    >>> q = np.random.rand(1, 50, 2, 8).astype("float32")
    >>> kernel(q, q, q, np.ones((1, 50), bool)).shape
    TensorShape([1, 50, 2, 8])

    Reference: Choromanski et al., Rethinking Attention with Performers (2021).
    """

    supports_bias = False
    options_within_length = ("block_size",)

    def __init__(self, num_features=256, block_size=64, **kwargs):
        super().__init__(**kwargs)
        self.num_features = check_positive_int(num_features, "num_features", "performer")
        self.block_size = check_positive_int(block_size, "block_size", "performer")

    @property
    def length_multiple(self):
        return self.block_size if self.causal else 1   # (only the causal prefix sums go block by block)

    def training_memory_bytes(self, batch, heads, length, layers=1, bytes_per_float=4):
        """No scores: the random features of each query and key, ``2 * num_features`` floats per token and head."""
        return layers * batch * heads * length * 2 * self.num_features * bytes_per_float

    def build_kernel(self, num_heads, head_dim, hidden_dim, value_dim=None):
        self.features = self.add_weight(
            shape=(self.num_features, head_dim), initializer="zeros", trainable=False, name="features"
        )
        self.redraw(self.seed or 0)

    def redraw(self, seed):
        """Draw new random features from ``seed`` (e.g. every few training steps)."""
        self.features.assign(orthogonal_features(seed, *self.features.shape))

    def feature_map(self, x, is_query, mask=None):
        """Positive random features ``[b, L, h, m]`` of ``x [b, L, h, d]`` (float32).

        A stabiliser is subtracted inside the exponential (per row for queries,
        per batch and head for keys); it cancels in the normalised output.
        """
        x = ops.cast(x, "float32") * x.shape[-1] ** -0.25
        logits = ops.einsum("blhd,md->blhm", x, ops.cast(self.features, "float32"))
        logits = logits - ops.sum(x * x, axis=-1, keepdims=True) / 2
        if is_query:
            stabiliser = ops.max(logits, axis=-1, keepdims=True)
        else:  # padded keys get exp(-inf) = 0
            logits = ops.where(mask[:, :, None, None], logits, -np.inf)
            stabiliser = ops.max(logits, axis=(1, 3), keepdims=True)
            stabiliser = ops.where(ops.isfinite(stabiliser), stabiliser, 0.0)
        return ops.exp(logits - ops.stop_gradient(stabiliser)) / np.sqrt(self.num_features)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        if not hasattr(self, "features"):
            raise ValueError("attention='performer' needs build_kernel(num_heads, head_dim, hidden_dim) first.")
        phi_q = self.feature_map(q, True)
        phi_k = self.feature_map(k, False, ops.cast(key_mask, "bool"))
        values = ops.cast(v, "float32")
        values = ops.concatenate([values, ops.ones_like(values[..., :1])], axis=-1)  # last column: normaliser
        if self.causal:
            out = self._causal(phi_q, phi_k, values)
        else:
            out = ops.einsum("blhm,bhmd->blhd", phi_q, ops.einsum("blhm,blhd->bhmd", phi_k, values))
        return ops.cast(out[..., :-1] / ops.maximum(out[..., -1:], 1e-30), v.dtype)

    def _causal(self, phi_q, phi_k, values):
        """Prefix-sum linear attention, exact inside each block and carried across blocks."""
        length, block = ops.shape(phi_q)[1], self.block_size
        phi_q, phi_k, values = (to_blocks(pad_to_multiple(t, block), block) for t in (phi_q, phi_k, values))
        states = ops.einsum("bnlhm,bnlhd->bnhmd", phi_k, values)
        earlier = ops.cumsum(states, axis=1) - states  # sums over the previous blocks
        lower = ops.cast(ops.arange(block)[:, None] >= ops.arange(block)[None, :], "float32")
        inside = ops.einsum("bnqhm,bnkhm->bnhqk", phi_q, phi_k) * lower
        out = ops.einsum("bnhqk,bnkhd->bnqhd", inside, values) + ops.einsum("bnqhm,bnhmd->bnqhd", phi_q, earlier)
        return merge_axes(out, 1)[:, :length]

    def get_config(self):
        config = super().get_config()
        config.update(num_features=self.num_features, block_size=self.block_size)
        return config
