"""`Loss`: bert4keras's layer that adds a loss computed from its inputs."""
import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert4long")
class Loss(keras.layers.Layer):
    """A layer that adds ``compute_loss(inputs, mask)`` to the model's losses.

    Subclass it and write `compute_loss`; compile the model with ``loss=None`` and
    feed the targets as extra model inputs (bert4keras's pattern for losses that
    need several tensors, e.g. a seq2seq loss masked by the segment ids). A
    non-scalar loss is averaged. As in bert4keras, where every model input was
    a float, `compute_loss` sees integer inputs (token ids, segment ids) cast
    to ``keras.config.floatx()``, so ``loss * y_mask`` works on int32 segment
    ids; the layer's outputs keep their dtypes.

    Args:
        output_axis: what the layer returns: ``None`` all inputs, an int one of
            them, a list of ints several.

    Call arguments:
        inputs: a tensor or a list of tensors. mask: their Keras masks (passed on).

    Example:
    >>> import keras
    >>> from keras import ops
    >>> from bert4long.layers.loss import Loss
    >>> class MSE(Loss):
    ...     def compute_loss(self, inputs, mask=None):
    ...         y_true, y_pred = inputs
    ...         return ops.mean(ops.square(y_true - y_pred))
    >>> x, y = keras.Input((3,)), keras.Input((1,))
    >>> output = MSE(output_axis=1)([y, keras.layers.Dense(1)(x)])
    >>> model = keras.Model([x, y], output)
    >>> model.compile(optimizer="adam")
    """

    def __init__(self, output_axis: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.output_axis = output_axis
        self.supports_masking = True

    def compute_loss(self, inputs, mask=None):
        raise NotImplementedError("Subclass Loss and write compute_loss(self, inputs, mask=None).")

    def _select(self, items):
        if self.output_axis is None:
            return items
        if isinstance(self.output_axis, (list, tuple)):
            return [items[i] for i in self.output_axis]
        return items[self.output_axis]

    def call(self, inputs, mask=None):
        loss = self.compute_loss(keras.tree.map_structure(_as_float, inputs), mask)
        self.add_loss(ops.mean(loss))
        return self._select(inputs)

    def compute_output_shape(self, input_shape):
        return self._select(input_shape)

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else self._select(mask)

    def get_config(self):
        config = super().get_config()
        config.update(output_axis=self.output_axis)
        return config


def _as_float(x):
    """Integer tensors as ``floatx`` (bert4keras's float inputs); others unchanged."""
    if "int" in keras.backend.standardize_dtype(x.dtype):
        return ops.cast(x, keras.config.floatx())
    return x
