"""Position-wise feed-forward block."""
from collections.abc import Callable

import keras
from keras import ops

from bert4long.layers.activations import get_activation


@keras.saving.register_keras_serializable(package="bert4long")
class FeedForward(keras.layers.Layer):
    """``Dense(units, activation) -> Dense(dim)`` applied at every position.

    With ``gated=True`` it is a gated linear unit (GeGLU for ``'gelu'``, as
    ModernBERT): the first projection has ``2 * units`` outputs ``[a, g]`` and
    the second is applied to ``activation(a) * g``.

    Args:
        units: inner size (``intermediate_size``).
        activation: activation name (``'gelu'`` is the erf form) or callable.
        use_bias: whether both projections have biases.
        gated: a gated linear unit (see above) instead of ``activation(Dense(x))``.
        chunk_size: if set, apply the block to slices of ``chunk_size`` positions
            one after another (Reformer's chunked feed-forward), so the
            ``[length, units]`` intermediate never exists for the whole sequence at once.
            Same numbers as unchunked.
        kernel_initializer: initializer of both kernels.

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import FeedForward
    >>> tuple(FeedForward(16)(np.zeros((2, 5, 8), "float32")).shape)
    (2, 5, 8)
    >>> tuple(FeedForward(16, gated=True)(np.zeros((2, 5, 8), "float32")).shape)
    (2, 5, 8)

    Reference (gated): Shazeer, GLU Variants Improve Transformer (2020), https://arxiv.org/abs/2002.05202.
    """

    def __init__(
        self,
        units: int,
        activation: str | Callable = "gelu",
        use_bias: bool = True,
        chunk_size: int | None = None,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        gated: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.activation = activation
        self.use_bias = use_bias
        self.gated = gated
        self.chunk_size = chunk_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        common = dict(use_bias=self.use_bias, kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy)
        self.intermediate_dense = keras.layers.Dense(
            self.units * (2 if self.gated else 1), activation=None if self.gated else get_activation(self.activation),
            name="intermediate", **common
        )
        self.output_dense = keras.layers.Dense(input_shape[-1], name="output", **common)
        self.intermediate_dense.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.units,))

    def _block(self, x):
        x = self.intermediate_dense(x)
        if self.gated:
            x, gate = ops.split(x, 2, axis=-1)
            x = get_activation(self.activation)(x) * gate
        return self.output_dense(x)

    def call(self, inputs):
        if not self.chunk_size:
            return self._block(inputs)
        shape = ops.shape(inputs)
        padding = (-shape[1]) % self.chunk_size
        x = ops.pad(inputs, [[0, 0], [0, padding], [0, 0]])
        chunks = ops.reshape(x, (shape[0], -1, self.chunk_size, inputs.shape[-1]))
        chunks = ops.transpose(chunks, (1, 0, 2, 3))
        outputs = ops.map(keras.remat(self._block), chunks)
        outputs = ops.reshape(ops.transpose(outputs, (1, 0, 2, 3)), (shape[0], -1, inputs.shape[-1]))
        return outputs[:, : shape[1]]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            activation=(self.activation if isinstance(self.activation, str)
                        else keras.saving.serialize_keras_object(self.activation)),
            use_bias=self.use_bias,
            chunk_size=self.chunk_size,
            gated=self.gated,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config
