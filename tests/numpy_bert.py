"""An independent float64 numpy BERT written from the paper's equations.

It reads checkpoints with `tf.train.load_checkpoint` by the original Google
names and shares no code with bert4long, so tests can pin the package against it.
"""
import math

import numpy as np
import tensorflow as tf

_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def read_weights(checkpoint_prefix):
    reader = tf.train.load_checkpoint(checkpoint_prefix)
    return {name: reader.get_tensor(name).astype("float64")
            for name in reader.get_variable_to_shape_map() if "adam" not in name and name != "global_step"}


def position_rows(table, length, alpha=None):
    """Rows for positions 0..length-1; hierarchical when alpha is given (0-based formula)."""
    n = table.shape[0]
    if alpha is None:
        return table[:length]
    u = (table - alpha * table[0]) / (1.0 - alpha)
    return np.stack([alpha * u[k // n] + (1.0 - alpha) * u[k % n] for k in range(length)])


def bert_forward(w, token_ids, segment_ids, num_heads, num_layers, alpha=None, layout="bert",
                 attention_keep=None):
    """Returns dict with 'sequence', 'pooled', 'nsp', 'mlm' (probabilities), 'mlm_logits'.

    attention_keep: optional bool [batch, L, L] (query, key) on top of key padding.
    """
    token_ids = np.asarray(token_ids)
    batch, length = token_ids.shape
    h = w["bert/embeddings/word_embeddings"][token_ids]
    h = h + w["bert/embeddings/token_type_embeddings"][np.asarray(segment_ids)]
    h = h + position_rows(w["bert/embeddings/position_embeddings"], length, alpha)[None]
    h = layer_norm(h, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
    if layout == "albert":
        h = h @ w["bert/encoder/embedding_hidden_mapping_in/kernel"] + w["bert/encoder/embedding_hidden_mapping_in/bias"]
    keep = np.broadcast_to((token_ids != 0)[:, None, :], (batch, length, length))
    if attention_keep is not None:
        keep = keep & attention_keep
    for i in range(num_layers):
        if layout == "albert":
            p, att, ffn_in, ffn_out, n1, n2 = ("bert/encoder/transformer/group_0/inner_group_0/", "attention_1/",
                                              "ffn_1/intermediate/", "ffn_1/intermediate/output/", "LayerNorm/",
                                              "LayerNorm_1/")
        else:
            p, att, ffn_in, ffn_out, n1, n2 = (f"bert/encoder/layer_{i}/", "attention/", "intermediate/",
                                              "output/", "attention/output/LayerNorm/", "output/LayerNorm/")

        def dense(x, name, p=p):  # p bound now: the function is only called within this iteration
            return x @ w[p + name + "kernel"] + w[p + name + "bias"]

        hidden = h.shape[-1]
        d = hidden // num_heads
        q, k, v = (dense(h, att + f"self/{n}/").reshape(batch, length, num_heads, d).transpose(0, 2, 1, 3)
                   for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        scores = np.where(keep[:, None], scores, -np.inf)
        ctx = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        h = layer_norm(h + dense(ctx, att + "output/dense/"), w[p + n1 + "gamma"], w[p + n1 + "beta"])
        f = dense(gelu(dense(h, ffn_in + "dense/")), ffn_out + "dense/")
        h = layer_norm(h + f, w[p + n2 + "gamma"], w[p + n2 + "beta"])
    out = {"sequence": h}
    if "bert/pooler/dense/kernel" in w:
        pooled = np.tanh(h[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
        out["pooled"] = pooled
        if "cls/seq_relationship/output_weights" in w:
            out["nsp"] = softmax(pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"])
    if "cls/predictions/output_bias" in w:
        t = gelu(h @ w["cls/predictions/transform/dense/kernel"] + w["cls/predictions/transform/dense/bias"])
        t = layer_norm(t, w["cls/predictions/transform/LayerNorm/gamma"], w["cls/predictions/transform/LayerNorm/beta"])
        logits = t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
        out["mlm_logits"] = logits
        out["mlm"] = softmax(logits)
    return out
