"""Position-encoding layers computed from a formula (no trained table, so no length limit).

* `SinusoidalPositionEmbedding`: the Transformer sinusoids, interleaved as
  ``[sin(p*w_0), cos(p*w_0), sin(p*w_1), cos(p*w_1), ...]`` with
  ``w_i = 10000^(-2i/dim)`` (the order bert4keras, NEZHA and RoFormer use).
* `RelativePositionEmbedding`: NEZHA's functional relative positions, row
  ``clip(k - q, -m, m) + m`` of the sinusoidal table of ``2m + 1`` rows.

The functions behind them (`sinusoidal_embeddings`, `relative_position_embeddings`, ...) are in
`bert4long.ops.positions`.
"""
import keras
from keras import ops

from bert4long.layers.embeddings import MERGE_MODES, merge_positions, merged_output_shape
from bert4long.ops.positions import (
    check_even_dim,
    check_max_relative_position,
    relative_position_embeddings,
    sinusoidal_embeddings,
)


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
        table = relative_position_embeddings(
            ops.shape(queries)[1], ops.shape(keys)[1], self.max_relative_position, self.output_dim
        )
        return ops.cast(table, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[0][1], input_shape[1][1], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update(max_relative_position=self.max_relative_position, output_dim=self.output_dim)
        return config

