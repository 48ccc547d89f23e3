"""NEZHA's relative attention: full attention with relative position embeddings on keys and values."""
import math

from keras import ops

from bert4long.attention.base import FullAttention, register_attention_kernel
from bert4long.ops.positions import check_max_relative_position, relative_position_embeddings


@register_attention_kernel()
class TypicalRelativeAttention(FullAttention):
    """Full softmax attention with NEZHA's relative positions (bert4keras's ``'typical_relative'``).

    ``softmax((q_i.k_j + q_i.r_ij) / sqrt(d)) @ (v_j + r_ij)``, masked and dropped
    as `FullAttention`, where ``r_ij`` is row ``clip(j - i, -m, m) + m`` of the
    sinusoidal table of ``2m + 1`` rows (`relative_position_embeddings`), computed
    per call (a ``[length, length, head_dim]`` tensor), so any length works.
    `MultiHeadAttention` uses it for `RelativePositions` (NEZHA); the
    query/key and value sizes per head must be equal.

    Args:
        max_relative_position: clipping distance ``m`` (64 in NEZHA's configs).
        **kwargs: `AttentionKernel` arguments.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.relative import TypicalRelativeAttention
    >>> q = np.random.rand(1, 5, 2, 4).astype("float32")
    >>> TypicalRelativeAttention(max_relative_position=2)(q, q, q, np.ones((1, 5), bool)).shape
    TensorShape([1, 5, 2, 4])

    Reference: Wei et al., NEZHA (2019), https://arxiv.org/abs/1909.00204;
    Shaw et al., Self-Attention with Relative Position Representations (2018).
    """

    # Not recomputed in eager mode: NEZHA's attention ran outside the kernel seam until it became this
    # kernel, and its eager gradients stay bit-identical to those (a follow-up may turn it on).
    recompute_eagerly = False

    def __init__(self, max_relative_position=64, **kwargs):
        super().__init__(**kwargs)
        self.max_relative_position = check_max_relative_position(max_relative_position)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        relative = relative_position_embeddings(ops.shape(q)[1], ops.shape(k)[1], self.max_relative_position,
                                                q.shape[-1])
        relative = ops.cast(relative, self.compute_dtype)
        scores = ops.einsum("bqhd,bkhd->bhqk", q, k) + ops.einsum("bqhd,qkd->bhqk", q, relative)
        scores = ops.cast(scores, "float32") / math.sqrt(q.shape[-1])
        probs = ops.cast(self.attention_probs(scores, key_mask, bias, training), v.dtype)
        return ops.einsum("bhqk,bkhd->bqhd", probs, v) + ops.einsum("bhqk,qkd->bqhd", probs, relative)

    def get_config(self):
        config = super().get_config()
        config.update(max_relative_position=self.max_relative_position)
        return config
