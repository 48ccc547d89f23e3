"""GlobalPointer heads for span extraction (bert4keras's `GlobalPointer`, `EfficientGlobalPointer`)."""
import math

import keras
import numpy as np
from keras import ops

from bert4long.ops.positions import apply_rotary_position_embeddings, sinusoidal_embeddings
from bert4long.ops.sequences import sequence_masking


@keras.saving.register_keras_serializable(package="bert4long")
class GlobalPointer(keras.layers.Layer):
    """Score every span ``(start, end)`` of a sequence for each of ``heads`` entity types.

    For head ``h`` the score of span ``(m, n)`` is ``q_{h,m} . k_{h,n} / sqrt(head_size)``
    with ``q``, ``k`` projections of the token states, rotated by RoPE when ``RoPE``
    (so the score knows the span's length). Padded positions and, with ``tril_mask``,
    spans ending before they start score ``-inf``. Train with
    ``bert4long.backend.multilabel_categorical_crossentropy`` on the flattened scores;
    predict the spans scoring > 0.

    Args:
        heads: number of entity types.
        head_size: size of the query/key projections.
        RoPE: rotary position encoding of queries and keys.
        use_bias: bias in the projections.
        tril_mask: mask the spans with end < start.
        kernel_initializer: initializer of the projections.

    Call arguments:
        inputs: ``[batch, length, dim]``; mask: ``[batch, length]`` Keras mask.
        Returns ``[batch, heads, length, length]``.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.global_pointer import GlobalPointer
    >>> tuple(GlobalPointer(heads=3, head_size=8)(np.zeros((2, 5, 16), "float32")).shape)
    (2, 3, 5, 5)

    Reference: https://kexue.fm/archives/8373
    """

    def __init__(
        self,
        heads: int,
        head_size: int,
        RoPE: bool = True,  # noqa: N803
        use_bias: bool = True,
        tril_mask: bool = True,
        kernel_initializer: str | keras.initializers.Initializer = "lecun_normal",
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.heads = heads
        self.head_size = head_size
        self.RoPE = RoPE
        self.use_bias = use_bias
        self.tril_mask = tril_mask
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.dense = keras.layers.Dense(
            self.head_size * self.heads * 2, use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer, name="dense",
        )
        self.dense.build(input_shape)

    def compute_mask(self, inputs, mask=None):
        return None

    def rotate(self, qw, kw):
        """Apply RoPE (positions 0..length-1) to ``[batch, length, ..., head_size]`` tensors."""
        if not self.RoPE:
            return qw, kw
        positions = ops.arange(ops.shape(qw)[1], dtype="float32")
        sinusoidal = ops.expand_dims(sinusoidal_embeddings(positions, self.head_size), 0)
        return apply_rotary_position_embeddings(sinusoidal, qw, kw)

    def finish(self, logits, mask):
        """Mask padded positions and (with ``tril_mask``) spans with end < start to ``-inf``."""
        bias = None
        if self.tril_mask:
            length = ops.shape(logits)[-1]
            bias = ops.cast(ops.triu(ops.ones((length, length))), "bool")
        return sequence_masking(logits, mask, -np.inf, [2, 3], bias)

    def call(self, inputs, mask=None):
        x = self.dense(inputs)
        x = ops.reshape(x, tuple(ops.shape(x)[:2]) + (self.heads, 2 * self.head_size))
        qw, kw = self.rotate(x[..., : self.head_size], x[..., self.head_size :])
        logits = ops.einsum("bmhd,bnhd->bhmn", qw, kw) / math.sqrt(self.head_size)
        return self.finish(logits, mask)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.heads, input_shape[1], input_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(
            heads=self.heads,
            head_size=self.head_size,
            RoPE=self.RoPE,
            use_bias=self.use_bias,
            tril_mask=self.tril_mask,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package="bert4long")
class EfficientGlobalPointer(GlobalPointer):
    """GlobalPointer with one shared query/key projection plus a per-head start/end bias.

    Score of span ``(m, n)`` for head ``h``: ``q_m . k_n / sqrt(head_size) + (b_{h,m}^start +
    b_{h,n}^end)`` where ``[q, k]`` interleave in one projection ``p`` of the tokens and
    the biases are a projection of ``p`` (as in bert4keras). Same arguments and output.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.global_pointer import EfficientGlobalPointer
    >>> tuple(EfficientGlobalPointer(heads=3, head_size=8)(np.zeros((2, 5, 16), "float32")).shape)
    (2, 3, 5, 5)

    Reference: https://kexue.fm/archives/8877
    """

    def build(self, input_shape):
        self.p_dense = keras.layers.Dense(
            self.head_size * 2, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer, name="p_dense"
        )
        self.q_dense = keras.layers.Dense(
            self.heads * 2, use_bias=self.use_bias, kernel_initializer=self.kernel_initializer, name="q_dense"
        )
        self.p_dense.build(input_shape)
        self.q_dense.build(tuple(input_shape[:-1]) + (self.head_size * 2,))

    def call(self, inputs, mask=None):
        x = self.p_dense(inputs)
        qw, kw = self.rotate(x[..., ::2], x[..., 1::2])
        logits = ops.einsum("bmd,bnd->bmn", qw, kw) / math.sqrt(self.head_size)
        bias = ops.transpose(self.q_dense(x), (0, 2, 1)) / 2
        logits = logits[:, None] + bias[:, ::2, None] + bias[:, 1::2, :, None]
        return self.finish(logits, mask)
