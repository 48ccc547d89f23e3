"""Longformer's attention as the published checkpoints compute it (Hugging Face `LongformerSelfAttention`)."""
import keras
from keras import ops

from bert4long.attention.base import register_attention_kernel
from bert4long.attention.sliding_window import SlidingWindowAttention
from bert4long.ops.checks import checked


@register_attention_kernel()
class LongformerAttention(SlidingWindowAttention):
    """`SlidingWindowAttention` with the reference Longformer's conventions.

    The window and global rules are `SlidingWindowAttention`'s (token ``i``
    attends to ``|i - j| <= window // 2`` and to the global tokens; a global
    key is counted once; global tokens attend to every token with their own
    projections), which is what Hugging Face's `LongformerSelfAttention`
    computes. Three things differ from that kernel, all to equal the reference:

    * the global projections ``query_global`` / ``key_global`` /
      ``value_global`` of the `MultiHeadAttention` are checkpoint weights, so
      they are not copied from the local ones after loading
      (`default_global_projections` is ``'trained'``);
    * the rows of padding queries (``key_mask == 0``) are zero, as the
      reference zeroes their attention probabilities;
    * the only global tokens are the ones the mask marks 2 (no fixed
      ``global_tokens``), at most ``max_global_tokens`` per example (the
      reference has no limit): more is an error naming the option (outside
      XLA, which drops assertions; there the extra tokens attend locally).

    Args:
        window: Longformer's ``attention_window`` of this layer (both sides, even).
        max_global_tokens: global slots per example.
        **kwargs: `AttentionKernel` arguments.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.longformer import LongformerAttention
    >>> kernel = LongformerAttention(window=4, max_global_tokens=2)
    >>> q = np.random.rand(1, 10, 2, 4).astype("float32")
    >>> mask = np.array([[2] + [1] * 7 + [0, 0]], "int32")  # token 0 global, two padding tokens
    >>> global_q = np.random.rand(1, 2, 2, 4).astype("float32")  # queries of the 2 global slots
    >>> out = kernel(q, q, q, mask, global_qkv=(global_q, q, q))
    >>> tuple(out.shape), float(np.abs(out[0, 8:]).max())
    ((1, 10, 2, 4), 0.0)

    Reference: Beltagy et al., Longformer: The Long-Document Transformer (2020);
    transformers' ``modeling_longformer.py``.
    """

    default_global_projections = "trained"   # the checkpoint's query_global / key_global / value_global

    def __init__(self, window=512, max_global_tokens=32, **kwargs):
        kwargs.pop("global_tokens", None)  # from a saved config: always none
        kwargs.pop("dilation", None)
        super().__init__(window=window, global_tokens=(), max_global_tokens=max_global_tokens, **kwargs)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None, global_qkv=None):
        key_mask = ops.convert_to_tensor(key_mask)
        if "int" in keras.backend.standardize_dtype(key_mask.dtype):
            marked = ops.max(ops.sum(ops.cast(ops.equal(key_mask, 2), "int32"), axis=1))
            key_mask = checked(key_mask, ops.less_equal(marked, self.max_global_tokens), (
                f"More tokens are marked global (2) in an example than max_global_tokens={self.max_global_tokens}: "
                "build the model with a larger max_global_tokens."))
        out = super().attend(q, k, v, key_mask, bias=bias, hidden=hidden, training=training, global_qkv=global_qkv)
        real = ops.cast(ops.not_equal(key_mask, 0), out.dtype)
        return out * real[:, :, None, None]

    def get_config(self):
        config = super().get_config()
        del config["global_tokens"], config["dilation"]
        return config
