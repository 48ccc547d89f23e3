"""`LayerNormalization`: bert4keras's (conditional) layer normalization."""
from collections.abc import Callable

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="bert4long")
class LayerNormalization(keras.layers.Layer):
    """Layer normalization over the last axis, optionally conditioned on a vector.

    bert4keras's layer (same arguments, same numbers): ``x - mean`` (if
    ``zero_mean``), divided by ``sqrt(mean(x**2) + epsilon)`` (if
    ``unit_variance``; 0 where that is 0), times ``gamma`` plus ``beta``. With
    ``conditional=True`` the layer takes ``[x, cond]`` and adds
    ``Dense(cond) @ W_gamma`` to ``gamma`` and ``Dense(cond) @ W_beta`` to
    ``beta`` (Conditional Layer Normalization, Su 2019; ``W_gamma``, ``W_beta``
    start at zero, so the layer starts as a plain LayerNorm). Statistics and the
    affine part are computed in float32 under mixed precision.

    Args:
        zero_mean, unit_variance: subtract the mean / divide by the RMS.
        epsilon: added to the variance; None takes ``keras.config.epsilon()``.
        scale, offset: True for a trained ``gamma`` / ``beta``, False or None
            for none, a number for that constant.
        center: bert4keras <= 0.10's name for ``offset`` (wins when given).
        conditional: whether the call takes ``[x, cond]``; ``cond`` is
            ``[batch, features]`` (broadcast over the positions of ``x``).
        hidden_units: if set, ``cond`` first goes through a bias-free
            ``Dense(hidden_units, hidden_activation)``.
        hidden_activation, hidden_initializer: that layer's activation and
            kernel initializer.

    Call arguments:
        inputs: ``x``, or ``[x, cond]`` when ``conditional``. The Keras mask of
        ``x`` passes through.

    Example (bert4keras's ``task_relation_extraction.py``):

    >>> import keras, numpy as np
    >>> from bert4long.layers import LayerNormalization
    >>> x, subject = keras.Input((None, 8)), keras.Input((16,))
    >>> y = LayerNormalization(conditional=True)([x, subject])
    >>> model = keras.Model([x, subject], y)
    >>> model.predict([np.ones((2, 3, 8)), np.ones((2, 16))], verbose=0).shape
    (2, 3, 8)
    """

    def __init__(
        self,
        zero_mean: bool = True,
        unit_variance: bool = True,
        epsilon: float | None = None,
        scale: bool = True,
        offset: bool = True,
        conditional: bool = False,
        hidden_units: int | None = None,
        hidden_activation: str | Callable = "linear",
        hidden_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        center: bool | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.zero_mean = zero_mean
        self.unit_variance = unit_variance
        self.epsilon = keras.config.epsilon() if epsilon is None else epsilon
        self.scale = scale
        self.offset = offset if center is None else center
        self.conditional = conditional
        self.hidden_units = hidden_units
        self.hidden_activation = keras.activations.get(hidden_activation)
        self.hidden_initializer = keras.initializers.get(hidden_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        x_shape, cond_shape = input_shape if self.conditional else (input_shape, None)
        if x_shape[-1] is None:
            raise ValueError(f"LayerNormalization needs a known last axis, got input shape {x_shape}")
        features = x_shape[-1]
        if self.offset is True:
            self.beta = self.add_weight(name="beta", shape=(features,), initializer="zeros", dtype="float32")
        if self.scale is True:
            self.gamma = self.add_weight(name="gamma", shape=(features,), initializer="ones", dtype="float32")
        if not self.conditional:
            return
        if cond_shape is None or len(cond_shape) != 2:
            raise ValueError(
                "a conditional LayerNormalization is called on [x, cond] with cond shaped "
                f"[batch, features], got input shapes {input_shape}"
            )
        if self.hidden_units is not None:
            self.hidden_dense = keras.layers.Dense(
                self.hidden_units, activation=self.hidden_activation, use_bias=False,
                kernel_initializer=self.hidden_initializer, name="hidden_dense", dtype="float32",
            )
            self.hidden_dense.build(cond_shape)
            cond_shape = (cond_shape[0], self.hidden_units)
        for role, setting in (("beta", self.offset), ("gamma", self.scale)):
            if setting is not False and setting is not None:
                dense = keras.layers.Dense(features, use_bias=False, kernel_initializer="zeros",
                                           name=f"{role}_dense", dtype="float32")
                dense.build(cond_shape)
                setattr(self, f"{role}_dense", dense)

    def call(self, inputs):
        x, cond = inputs if self.conditional else (inputs, None)
        dtype = x.dtype
        x = ops.cast(x, "float32")
        if self.zero_mean:
            x = x - ops.mean(x, axis=-1, keepdims=True)
        if self.unit_variance:
            variance = ops.mean(ops.square(x), axis=-1, keepdims=True)
            x = ops.divide_no_nan(x, ops.sqrt(variance + self.epsilon))
        if cond is not None:
            cond = ops.cast(cond, "float32")
            if self.hidden_units is not None:
                cond = self.hidden_dense(cond)
            for _ in range(len(x.shape) - 2):  # [batch, features] -> [batch, 1, ..., features]
                cond = ops.expand_dims(cond, 1)
        for role, setting, apply in (("gamma", self.scale, ops.multiply), ("beta", self.offset, ops.add)):
            if setting is False or setting is None:
                continue
            value = getattr(self, role) if setting is True else setting
            if cond is not None:
                value = value + getattr(self, f"{role}_dense")(cond)
            x = apply(x, value)
        return ops.cast(x, dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0] if self.conditional else input_shape)

    def compute_mask(self, inputs, mask=None):
        if self.conditional and mask is not None:
            return mask[0]
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            zero_mean=self.zero_mean,
            unit_variance=self.unit_variance,
            epsilon=self.epsilon,
            scale=self.scale,
            offset=self.offset,
            conditional=self.conditional,
            hidden_units=self.hidden_units,
            hidden_activation=keras.activations.serialize(self.hidden_activation),
            hidden_initializer=keras.initializers.serialize(self.hidden_initializer),
        )
        return config
