"""Position encodings as functions of positions (sinusoids, rotary, relative).

* `sinusoidal_embeddings`: the Transformer sinusoids, interleaved as
  ``[sin(p*w_0), cos(p*w_0), sin(p*w_1), cos(p*w_1), ...]`` with
  ``w_i = 10000^(-2i/dim)`` (the order bert4keras, NEZHA and RoFormer use).
* `apply_rotary`: RoFormer's rotary position embedding (RoPE) applied to
  queries or keys: each pair ``(x_2i, x_2i+1)`` is rotated by the angle ``p*w_i``.
* `apply_rotary_half`: the same rotation in the rotate-half layout (GPT-NeoX,
  Hugging Face Llama and ModernBERT), with an optional RoPE scaling.
* `rope_frequencies`: RoPE's frequencies under a scaling (``linear`` position interpolation, ``dynamic``
  NTK, ``yarn``; the descriptions are checked by `bert4long.rope_scaling`).
* `apply_rotary_position_embeddings`: bert4keras's form of the rotation (GlobalPointer).
* `relative_position_embeddings`: NEZHA's functional relative positions.

The layers built on them are in `bert4long.layers.positions`.
"""
import math

import numpy as np
from keras import ops

from bert4long.ops.sequences import align
from bert4long.rope_scaling import resolve_rope_scaling


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
    >>> from bert4long.ops.positions import sinusoidal_embeddings
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
    >>> from bert4long.ops.positions import apply_rotary, sinusoidal_embeddings
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


def rope_frequencies(dim, theta, scaling=None, length=None):
    """``(inverse frequencies [dim / 2] float32, attention factor)`` of RoPE with base ``theta``.

    With ``scaling`` (`bert4long.rope_scaling.resolve_rope_scaling`) the frequencies are transformers' (``modeling_rope_utils``):
    ``linear`` divides them by ``factor``; ``dynamic`` raises the base to
    ``theta * (factor * L / L0 - factor + 1) ** (dim / (dim - 2))`` for a ``length`` ``L`` (a tensor is fine:
    no Python branch on it) beyond ``L0 = original_max_position_embeddings``; ``yarn`` blends the
    frequencies and the interpolated ones (``/ factor``) along a ramp between the dimensions that turn
    ``beta_fast`` and ``beta_slow`` times over ``L0``, and scales cos and sin by its attention factor
    (``0.1 ln(factor) + 1``; with ``mscale`` and ``mscale_all_dim`` the ratio of that scale with each).

    Example:
    >>> from bert4long.ops.positions import rope_frequencies
    >>> frequencies, attention_factor = rope_frequencies(4, 100.0, {"rope_type": "linear", "factor": 2.0})
    >>> [round(float(f), 4) for f in frequencies], attention_factor
    ([0.5, 0.05], 1.0)

    Reference: Peng et al., YaRN: Efficient Context Window Extension of Large Language Models (2023),
    https://arxiv.org/abs/2309.00071.
    """
    scaling = resolve_rope_scaling(scaling)
    # rounded to float32 as transformers computes them
    exponents = np.arange(0, dim, 2, dtype="float32") / np.float32(dim)
    wavelengths = np.power(np.float32(theta), exponents)
    if scaling is None:
        return np.float32(1.0) / wavelengths, 1.0
    rope_type, factor = scaling["rope_type"], scaling["factor"]
    if rope_type == "linear":
        return np.float32(1.0) / wavelengths / np.float32(factor), 1.0
    original = scaling["original_max_position_embeddings"]
    if rope_type == "dynamic":
        if dim <= 2:
            raise ValueError(f"dynamic RoPE scaling needs a rotary size of at least 4, got {dim}: use linear or yarn.")
        length = ops.cast(length, "float32")
        growth = ops.where(length > original, factor * length / original - (factor - 1.0), 1.0)
        base = theta * ops.power(growth, dim / (dim - 2))
        return 1.0 / ops.power(base, exponents), 1.0

    def turning_dim(rotations):  # the dimension whose wavelength fits `rotations` times in `original`
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(turning_dim(scaling["beta_fast"])), 0)
    high = min(math.ceil(turning_dim(scaling["beta_slow"])), dim - 1)
    high = high + 0.001 if high == low else high
    ramp = np.clip((np.arange(dim // 2, dtype="float32") - np.float32(low)) / np.float32(high - low), 0, 1)
    extrapolated = np.float32(1.0) - ramp   # share of the unscaled frequency (high frequencies: all)
    frequencies = (np.float32(1.0) / (np.float32(factor) * wavelengths) * (np.float32(1.0) - extrapolated)
                   + np.float32(1.0) / wavelengths * extrapolated)

    def magnitude(mscale=1.0):   # YaRN's attention scale of a factor
        return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0

    attention_factor = scaling["attention_factor"]
    if attention_factor is None and scaling["mscale"] and scaling["mscale_all_dim"]:
        attention_factor = magnitude(scaling["mscale"]) / magnitude(scaling["mscale_all_dim"])
    return frequencies, magnitude() if attention_factor is None else attention_factor


def apply_rotary_half(x, theta=10000.0, scaling=None):
    """Rotary position embedding of ``x [batch, length, heads, dim]`` in the rotate-half layout.

    Position ``p`` rotates the pair ``(x_i, x_(i + dim/2))`` by the angle
    ``p * theta^(-2i/dim)``: ``x_i cos - x_(i+dim/2) sin`` and
    ``x_(i+dim/2) cos + x_i sin``, in float32 (the layout and arithmetic of
    Hugging Face's ``apply_rotary_pos_emb``; `apply_rotary` is RoFormer's
    interleaved layout with ``theta = 10000``). Positions are ``0 .. length - 1``.
    ``scaling`` (a `resolve_rope_scaling` description) stretches the frequencies (`rope_frequencies`).

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.positions import apply_rotary_half
    >>> x = np.ones((1, 3, 2, 4), "float32")
    >>> np.round(apply_rotary_half(x, theta=160000.0).numpy()[0, 1, 0].astype("float64"), 4).tolist()
    [-0.3012, 0.9975, 1.3818, 1.0025]
    >>> np.round(apply_rotary_half(x, 160000.0, {"rope_type": "linear", "factor": 2.0}).numpy()[0, 2, 0, 0], 4)
    np.float32(-0.3012)

    Reference: Su et al., RoFormer (2021), https://arxiv.org/abs/2104.09864.
    """
    dim = check_even_dim(x.shape[-1], "apply_rotary_half")
    inverse_frequencies, attention_factor = rope_frequencies(dim, theta, scaling, ops.shape(x)[1])
    angles = ops.cast(ops.arange(ops.shape(x)[1]), "float32")[:, None] * inverse_frequencies  # [length, dim/2]
    cos = ops.cos(angles)[None, :, None, :] * attention_factor
    sin = ops.sin(angles)[None, :, None, :] * attention_factor
    x32 = ops.cast(x, "float32")
    first, second = x32[..., : dim // 2], x32[..., dim // 2 :]
    rotated = ops.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return ops.cast(rotated, x.dtype)


def relative_position_embeddings(q_length, k_length, max_relative_position, dim):
    """NEZHA's relative position table ``[q_length, k_length, dim]`` (float32).

    Entry ``[i, j]`` is row ``clip(j - i, -m, m) + m`` of the sinusoidal table of
    ``2m + 1`` rows (``m = max_relative_position``).

    Example:
    >>> from bert4long.ops.positions import relative_position_embeddings
    >>> tuple(relative_position_embeddings(3, 5, 2, 4).shape)
    (3, 5, 4)
    """
    m = max_relative_position
    distance = ops.arange(k_length)[None, :] - ops.arange(q_length)[:, None]
    table = sinusoidal_embeddings(ops.arange(2 * m + 1), dim)
    return ops.take(table, ops.clip(distance, -m, m) + m, axis=0)


def apply_rotary_position_embeddings(sinusoidal, *tensors):
    """Rotate ``tensors`` (``[b, n, ..., d]``) by RoPE angles from ``sinusoidal`` (``[b|1, n, d]``).

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.positions import apply_rotary_position_embeddings, sinusoidal_embeddings
    >>> q = np.ones((1, 3, 4), "float32")
    >>> tuple(apply_rotary_position_embeddings(sinusoidal_embeddings(np.arange(3.0), 4)[None], q).shape)
    (1, 3, 4)
    """
    if not tensors:
        raise ValueError("apply_rotary_position_embeddings: give at least one tensor to rotate.")
    rank = len(tensors[0].shape)
    sinusoidal = align(sinusoidal, [0, 1, rank - 1], rank)
    cos = ops.repeat(sinusoidal[..., 1::2], 2, axis=-1)
    sin = ops.repeat(sinusoidal[..., ::2], 2, axis=-1)
    outputs = []
    for x in tensors:
        rotated = ops.reshape(ops.stack([-x[..., 1::2], x[..., ::2]], axis=-1), ops.shape(x))
        outputs.append(x * ops.cast(cos, x.dtype) + rotated * ops.cast(sin, x.dtype))
    return outputs[0] if len(outputs) == 1 else outputs
