"""Position encodings computed from a formula (no trained table, so no length limit).

* `SinusoidalPositionEmbedding`: the Transformer sinusoids, interleaved as
  ``[sin(p*w_0), cos(p*w_0), sin(p*w_1), cos(p*w_1), ...]`` with
  ``w_i = 10000^(-2i/dim)`` (the order bert4keras, NEZHA and RoFormer use).
* `apply_rotary`: RoFormer's rotary position embedding (RoPE) applied to
  queries or keys: each pair ``(x_2i, x_2i+1)`` is rotated by the angle ``p*w_i``.
* `apply_rotary_half`: the same rotation in the rotate-half layout (GPT-NeoX,
  Hugging Face Llama and ModernBERT): ``x_i`` pairs with ``x_(i + dim/2)``, and
  the base ``theta`` of the frequencies is a parameter.
* `RelativePositionEmbedding`: NEZHA's functional relative positions, row
  ``clip(k - q, -m, m) + m`` of the sinusoidal table of ``2m + 1`` rows.
"""
import keras
import numpy as np
from keras import ops

from bert4long.layers.embeddings import MERGE_MODES, merge_positions, merged_output_shape


def check_even_dim(dim, what):
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0 or dim % 2:
        raise ValueError(
            f"{what} needs a positive even size (sin/cos pairs), got {dim!r}: choose an even "
            "attention_key_size (hidden_size / num_attention_heads)."
        )
    return dim


def check_max_relative_position(value):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(
            f"max_relative_position must be a positive int (NEZHA's configs use 64), got {value!r}: "
            "set it in the config JSON or pass max_relative_position=64 to build_transformer_model."
        )
    return value


def sinusoidal_embeddings(positions, dim):
    """Interleaved sinusoids ``[..., dim]`` for float or int ``positions`` of any shape.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.positions import sinusoidal_embeddings
    >>> np.round(sinusoidal_embeddings(np.array([0.0, 1.0]), 4).numpy().astype("float64"), 3).tolist()
    [[0.0, 1.0, 0.0, 1.0], [0.841, 0.54, 0.01, 1.0]]
    """
    check_even_dim(dim, "Sinusoidal position embedding")
    frequencies = ops.power(10000.0, -2.0 * ops.arange(dim // 2, dtype="float32") / dim)
    angles = ops.expand_dims(ops.cast(positions, "float32"), -1) * frequencies
    pairs = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # [..., dim/2, 2]
    return ops.reshape(pairs, tuple(ops.shape(angles)[:-1]) + (dim,))


def apply_rotary(x, sinusoids):
    """Rotate each pair ``(x_2i, x_2i+1)`` of ``x [batch, length, heads, dim]`` by its angle.

    ``sinusoids`` is ``[1 or batch, length, dim]`` from `sinusoidal_embeddings`
    (``sin`` at even, ``cos`` at odd indices). The dot product of a rotated query
    at position ``m`` and a rotated key at ``n`` depends only on ``m - n``.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.positions import apply_rotary, sinusoidal_embeddings
    >>> x = np.ones((1, 3, 2, 4), "float32")
    >>> tuple(apply_rotary(x, sinusoidal_embeddings(np.arange(3)[None], 4)).shape)
    (1, 3, 2, 4)

    Reference: Su et al., RoFormer: Enhanced Transformer with Rotary Position
    Embedding (2021), https://arxiv.org/abs/2104.09864.
    """
    dtype = x.dtype
    shape = ops.shape(x)
    dim = x.shape[-1]
    pairs = ops.reshape(ops.cast(x, "float32"), tuple(shape[:-1]) + (dim // 2, 2))
    angles = ops.reshape(ops.cast(sinusoids, "float32"), tuple(ops.shape(sinusoids)[:-1]) + (1, dim // 2, 2))
    sin, cos = angles[..., 0], angles[..., 1]  # broadcast over heads
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = ops.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return ops.cast(ops.reshape(rotated, shape), dtype)


def apply_rotary_half(x, theta=10000.0):
    """Rotary position embedding of ``x [batch, length, heads, dim]`` in the rotate-half layout.

    Position ``p`` rotates the pair ``(x_i, x_(i + dim/2))`` by the angle
    ``p * theta^(-2i/dim)``: ``x_i cos - x_(i+dim/2) sin`` and
    ``x_(i+dim/2) cos + x_i sin``, in float32 (the layout and arithmetic of
    Hugging Face's ``apply_rotary_pos_emb``; `apply_rotary` is RoFormer's
    interleaved layout with ``theta = 10000``). Positions are ``0 .. length - 1``.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers.positions import apply_rotary_half
    >>> x = np.ones((1, 3, 2, 4), "float32")
    >>> np.round(apply_rotary_half(x, theta=160000.0).numpy()[0, 1, 0].astype("float64"), 4).tolist()
    [-0.3012, 0.9975, 1.3818, 1.0025]

    Reference: Su et al., RoFormer (2021), https://arxiv.org/abs/2104.09864.
    """
    dim = check_even_dim(x.shape[-1], "apply_rotary_half")
    # the inverse frequencies rounded to float32 as transformers computes them
    exponents = np.arange(0, dim, 2, dtype="float32") / np.float32(dim)
    inverse_frequencies = np.float32(1.0) / np.power(np.float32(theta), exponents)
    angles = ops.cast(ops.arange(ops.shape(x)[1]), "float32")[:, None] * inverse_frequencies  # [length, dim/2]
    cos, sin = ops.cos(angles)[None, :, None, :], ops.sin(angles)[None, :, None, :]
    x32 = ops.cast(x, "float32")
    first, second = x32[..., : dim // 2], x32[..., dim // 2 :]
    rotated = ops.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return ops.cast(rotated, x.dtype)


@keras.saving.register_keras_serializable(package="bert4long")
class SinusoidalPositionEmbedding(keras.layers.Layer):
    """Fixed sinusoidal position embedding of any length (bert4keras's layer of that name).

    Args:
        output_dim: embedding size (even).
        merge_mode: ``'add'``, ``'mul'`` (``x * (1 + p)``), ``'zero'`` (return the
            ``[1, length, output_dim]`` embeddings only) or ``'concat'``.
        custom_position_ids: if True the layer is called on ``[x, position_ids]``.

    Call arguments:
        inputs: ``[batch, length, dim]`` (or ``[x, position_ids]``).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import SinusoidalPositionEmbedding
    >>> layer = SinusoidalPositionEmbedding(8, merge_mode="zero")
    >>> tuple(layer(np.zeros((2, 5000, 8), "float32")).shape)
    (1, 5000, 8)

    Reference: Vaswani et al., Attention Is All You Need (2017).
    """

    def __init__(self, output_dim: int, merge_mode: str = "add", custom_position_ids: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        if merge_mode not in MERGE_MODES:
            raise ValueError(f"merge_mode must be one of {MERGE_MODES}, got {merge_mode!r}.")
        self.output_dim = check_even_dim(output_dim, "SinusoidalPositionEmbedding")
        self.merge_mode = merge_mode
        self.custom_position_ids = custom_position_ids

    def call(self, inputs):
        if self.custom_position_ids:
            inputs, position_ids = inputs
        else:
            position_ids = ops.arange(ops.shape(inputs)[1])[None]
        embeddings = ops.cast(sinusoidal_embeddings(position_ids, self.output_dim), self.compute_dtype)
        return merge_positions(inputs, embeddings, self.merge_mode)

    def compute_output_shape(self, input_shape):
        return merged_output_shape(input_shape, self.output_dim, self.merge_mode, self.custom_position_ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            output_dim=self.output_dim, merge_mode=self.merge_mode, custom_position_ids=self.custom_position_ids
        )
        return config


@keras.saving.register_keras_serializable(package="bert4long")
class RelativePositionEmbedding(keras.layers.Layer):
    """NEZHA's functional relative position embedding ``[q_length, k_length, output_dim]``.

    Entry ``[i, j]`` is row ``clip(j - i, -m, m) + m`` of the sinusoidal table of
    ``2m + 1`` rows (``m = max_relative_position``): distances beyond ``m`` share
    one row, so any length works. bert4keras stores the same table as a frozen
    weight; here it is computed, so nothing is saved or loaded for it.

    Args:
        max_relative_position: clipping distance ``m`` (64 in NEZHA's configs).
        output_dim: embedding size (the attention key size; even).

    Call arguments:
        inputs: ``[queries, keys]``, tensors whose axis 1 is the length.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import RelativePositionEmbedding
    >>> layer = RelativePositionEmbedding(max_relative_position=64, output_dim=8)
    >>> x = np.zeros((1, 300, 8), "float32")
    >>> tuple(layer([x, x]).shape)
    (300, 300, 8)

    Reference: Wei et al., NEZHA: Neural Contextualized Representation for
    Chinese Language Understanding (2019), https://arxiv.org/abs/1909.00204;
    Shaw et al., Self-Attention with Relative Position Representations (2018).
    """

    def __init__(self, max_relative_position: int, output_dim: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_relative_position = check_max_relative_position(max_relative_position)
        self.output_dim = check_even_dim(output_dim, "RelativePositionEmbedding")

    def call(self, inputs):
        queries, keys = inputs
        m = self.max_relative_position
        distance = ops.arange(ops.shape(keys)[1])[None, :] - ops.arange(ops.shape(queries)[1])[:, None]
        table = sinusoidal_embeddings(ops.arange(2 * m + 1), self.output_dim)
        return ops.cast(ops.take(table, ops.clip(distance, -m, m) + m, axis=0), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[0][1], input_shape[1][1], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update(max_relative_position=self.max_relative_position, output_dim=self.output_dim)
        return config

