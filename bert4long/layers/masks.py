"""Attention masks computed from the model inputs."""
import keras
from keras import ops

from bert4long.attention.base import MASKED_SCORE


@keras.saving.register_keras_serializable(package="bert4long")
class PaddingMask(keras.layers.Layer):
    """Bool ``[batch, length]`` mask, True where ``token_ids != pad_token_id``.

    Args:
        pad_token_id: the padding id (0 for BERT vocabularies, 1 for RoBERTa's).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import PaddingMask
    >>> PaddingMask()(np.array([[5, 7, 0]])).numpy().tolist()
    [[True, True, False]]
    """

    def __init__(self, pad_token_id: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pad_token_id = pad_token_id

    def call(self, token_ids):
        return ops.not_equal(token_ids, self.pad_token_id)

    def get_config(self):
        config = super().get_config()
        config.update(pad_token_id=self.pad_token_id)
        return config

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(token_ids.shape, dtype="bool")


@keras.saving.register_keras_serializable(package="bert4long")
class UniLMMask(keras.layers.Layer):
    """Additive ``[batch, 1, length, length]`` bias for UniLM sequence-to-sequence.

    A token attends to every token whose running segment count is not larger
    than its own: the first segment (segment id 0) is read bidirectionally, the
    second segment left to right (Dong et al., 2019; bert4keras's ``unilm``).

    Example:
    >>> import numpy as np
    >>> from bert4long.layers import UniLMMask
    >>> bias = UniLMMask()(np.array([[0, 0, 1, 1]]))
    >>> (bias.numpy()[0, 0] == 0).astype(int).tolist()
    [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    """

    def call(self, segment_ids):
        idxs = ops.cumsum(ops.cast(segment_ids, "int32"), axis=1)
        keep = ops.less_equal(idxs[:, None, :], idxs[:, :, None])
        return ops.where(keep, 0.0, MASKED_SCORE)[:, None]

    def compute_output_spec(self, segment_ids):
        batch, length = segment_ids.shape
        return keras.KerasTensor((batch, 1, length, length), dtype="float32")
