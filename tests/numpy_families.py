"""Independent float64 numpy NEZHA, RoFormer and ELECTRA written from their papers.

Like `numpy_bert`, it reads checkpoints by their original names with
`tf.train.load_checkpoint` and shares no code with bert4long. Rotary positions
are written with complex numbers (RoFormer's formulation), NEZHA's relative
positions with an explicit index table, so neither copies the package's form.
"""
import math

import numpy as np
from numpy_bert import gelu, layer_norm, softmax


def nezha_relative_table(length, max_relative_position, dim):
    """``[L, L, dim]``: entry ``[i, j]`` is the sinusoid of ``clip(j - i, -m, m) + m`` (NEZHA, eq. 3-4)."""
    m = max_relative_position
    rows = np.arange(2 * m + 1)[:, None] / 10000.0 ** (2 * np.arange(dim // 2)[None, :] / dim)
    table = np.zeros((2 * m + 1, dim))
    table[:, 0::2], table[:, 1::2] = np.sin(rows), np.cos(rows)
    index = np.array([[min(max(j - i, -m), m) + m for j in range(length)] for i in range(length)])
    return table[index]


def rotate(x):
    """RoPE on ``x [batch, L, heads, d]``: pair ``(x_2i, x_2i+1)`` as ``x_2i + i x_2i+1`` times ``e^{i p theta_i}``."""
    length, d = x.shape[1], x.shape[-1]
    theta = 10000.0 ** (-2.0 * np.arange(d // 2) / d)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * np.arange(length)[None, :, None, None] * theta)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def encoder_forward(w, token_ids, segment_ids, num_heads, num_layers, positions="absolute",
                    max_relative_position=None, prefix="bert/", attention_keep=None):
    """Sequence output of a post-LN BERT encoder.

    positions: ``'absolute'`` (trained table, BERT/ELECTRA), ``'relative'`` (NEZHA)
    or ``'rotary'`` (RoFormer). ``prefix``: ``'bert/'`` or ``'electra/'``.
    attention_keep: optional bool ``[batch, L, L]`` (query, key) on top of key padding.
    """
    token_ids = np.asarray(token_ids)
    batch, length = token_ids.shape
    h = w[prefix + "embeddings/word_embeddings"][token_ids]
    h = h + w[prefix + "embeddings/token_type_embeddings"][np.asarray(segment_ids)]
    if positions == "absolute":
        h = h + w[prefix + "embeddings/position_embeddings"][:length][None]
    h = layer_norm(h, w[prefix + "embeddings/LayerNorm/gamma"], w[prefix + "embeddings/LayerNorm/beta"])
    if prefix + "embeddings_project/kernel" in w:
        h = h @ w[prefix + "embeddings_project/kernel"] + w[prefix + "embeddings_project/bias"]
    hidden = h.shape[-1]
    d = hidden // num_heads
    relative = nezha_relative_table(length, max_relative_position, d) if positions == "relative" else None
    keep = np.broadcast_to((token_ids != 0)[:, None, :], (batch, length, length))
    keep = (keep if attention_keep is None else keep & attention_keep)[:, None]
    for i in range(num_layers):
        p = f"{prefix}encoder/layer_{i}/"

        def dense(x, name, p=p):  # p bound now: the function is only called within this iteration
            return x @ w[p + name + "kernel"] + w[p + name + "bias"]

        q, k, v = (dense(h, f"attention/self/{n}/").reshape(batch, length, num_heads, d)
                   for n in ("query", "key", "value"))
        if positions == "rotary":
            q, k = rotate(q), rotate(k)
        scores = np.einsum("bihd,bjhd->bhij", q, k)
        if relative is not None:
            scores = scores + np.einsum("bihd,ijd->bhij", q, relative)
        probs = softmax(np.where(keep, scores / math.sqrt(d), -np.inf))
        ctx = np.einsum("bhij,bjhd->bihd", probs, v)
        if relative is not None:
            ctx = ctx + np.einsum("bhij,ijd->bihd", probs, relative)
        attention = dense(ctx.reshape(batch, length, hidden), "attention/output/dense/")
        norm = p + "attention/output/LayerNorm/"
        h = layer_norm(h + attention, w[norm + "gamma"], w[norm + "beta"])
        f = dense(gelu(dense(h, "intermediate/dense/")), "output/dense/")
        h = layer_norm(h + f, w[p + "output/LayerNorm/gamma"], w[p + "output/LayerNorm/beta"])
    return h


def bert_heads(w, h):
    """Pooled output and MLM logits (tied token embeddings) from the Google ``bert/`` and ``cls/`` names."""
    pooled = np.tanh(h[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    t = gelu(h @ w["cls/predictions/transform/dense/kernel"] + w["cls/predictions/transform/dense/bias"])
    t = layer_norm(t, w["cls/predictions/transform/LayerNorm/gamma"], w["cls/predictions/transform/LayerNorm/beta"])
    return pooled, t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]


def electra_discriminator(w, h):
    """Replaced-token probability ``[batch, L, 1]`` (google-research/electra ``discriminator_predictions``)."""
    t = gelu(h @ w["discriminator_predictions/dense/kernel"] + w["discriminator_predictions/dense/bias"])
    logits = t @ w["discriminator_predictions/dense_1/kernel"] + w["discriminator_predictions/dense_1/bias"]
    return 1.0 / (1.0 + np.exp(-logits))
