"""Small layers used by the output heads (pooler, masked-LM)."""
import keras
from keras import ops

from bert4long.layers.range_checks import checked_ids, poison_rows


@keras.saving.register_keras_serializable(package="bert4long")
class TakeToken(keras.layers.Layer):
    """Select the hidden state at one position (the ``[CLS]`` token by default).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import TakeToken
    >>> tuple(TakeToken()(np.zeros((2, 5, 8), "float32")).shape)
    (2, 8)
    """

    def __init__(self, index: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.index = index

    def call(self, inputs):
        return inputs[:, self.index]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(index=self.index)
        return config


@keras.saving.register_keras_serializable(package="bert4long")
class GatherPositions(keras.layers.Layer):
    """Gather ``[batch, P, dim]`` hidden states at ``positions`` ``[batch, P]``.

    The masked-LM head uses it to project only the masked tokens to the
    vocabulary: at 4,096 tokens a full-sequence softmax costs hundreds of MB a sample.
    A position outside ``[0, length)`` is an error (NaN rows under XLA, see
    `bert4long.layers.range_checks`).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import GatherPositions
    >>> x = np.arange(12, dtype="float32").reshape(1, 6, 2)
    >>> GatherPositions()([x, np.array([[4, 1]])]).numpy().tolist()
    [[[8.0, 9.0], [2.0, 3.0]]]
    """

    def call(self, inputs):
        x, positions = inputs
        positions, bad = checked_ids(positions, ops.shape(x)[1], (
            f"Layer {self.name!r} got a position outside the sequence: masked positions must be at least 0 and "
            "below the number of tokens in the batch."))
        return poison_rows(ops.take_along_axis(x, positions[..., None], axis=1), bad)

    def compute_output_shape(self, input_shape):
        x_shape, positions_shape = input_shape
        return tuple(positions_shape[:2]) + (x_shape[-1],)


@keras.saving.register_keras_serializable(package="bert4long")
class BiasAdd(keras.layers.Layer):
    """Add a trainable bias over the last axis (the masked-LM output bias).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import BiasAdd
    >>> tuple(BiasAdd()(np.zeros((2, 3), "float32")).shape)
    (2, 3)
    """

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(input_shape[-1],), initializer="zeros")

    def call(self, inputs):
        return inputs + ops.cast(self.bias, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
