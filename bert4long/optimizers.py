"""bert4keras's optimizers and ``extend_with_*`` factories, built on Keras 3's own features.

Each factory takes an optimizer class and returns a subclass taking bert4keras's extra
argument, translated into what Keras 3 optimizers already do:

==========================================  =====================================================
bert4keras                                  Keras 3 feature used
==========================================  =====================================================
`extend_with_weight_decay`                  ``weight_decay`` (decoupled, times the learning rate)
  ``weight_decay_rate``,                    + ``exclude_from_weight_decay(var_list=...)`` for the
  ``exclude_from_weight_decay`` (regexes)   variables whose path matches a pattern
`extend_with_piecewise_linear_lr`           a `PiecewiseLinear` learning-rate schedule
  ``lr_schedule={1000: 1, 2000: 0.1}``
`extend_with_gradient_accumulation`         ``gradient_accumulation_steps``
  ``grad_accum_steps``
`extend_with_exponential_moving_average`    ``use_ema=True`` + ``ema_momentum``; the extra
  ``ema_momentum``, `apply_ema_weights`,    methods swap the averages in and out
  `reset_old_weights`
==========================================  =====================================================

The factories compose (``extend_with_piecewise_linear_lr(AdamW)``), and every class
they make is registered for `.keras` saving under the ``name`` given.

Example:
>>> from bert4long.optimizers import Adam, extend_with_piecewise_linear_lr
>>> AdamLR = extend_with_piecewise_linear_lr(Adam, name="AdamLR")
>>> optimizer = AdamLR(learning_rate=1e-5, lr_schedule={1000: 1, 2000: 0.1})
"""
import re
import types

import keras
from keras import ops

from bert4long.ops.schedules import piecewise_linear

__all__ = [
    "Adam",
    "AdamW",
    "PiecewiseLinear",
    "extend_with_weight_decay",
    "extend_with_piecewise_linear_lr",
    "extend_with_gradient_accumulation",
    "extend_with_exponential_moving_average",
]


def _register(cls, base, name, suffix):
    """Name ``cls`` (default: base name + suffix) and register it for serialization."""
    cls.__name__ = cls.__qualname__ = name or base.__name__ + suffix
    cls.__doc__ = f"{base.__name__} {cls.__doc__}"
    return keras.saving.register_keras_serializable(package="bert4long", name=cls.__name__)(cls)


@keras.saving.register_keras_serializable(package="bert4long")
class PiecewiseLinear(keras.optimizers.schedules.LearningRateSchedule):
    """``learning_rate * piecewise_linear(step, schedule, from_zero)`` (see `bert4long.backend.piecewise_linear`).

    Example:
    >>> from bert4long.optimizers import PiecewiseLinear
    >>> schedule = PiecewiseLinear(1e-3, {10: 1, 20: 0.1})
    >>> [round(float(schedule(step)), 6) for step in (0, 5, 10, 20, 50)]
    [0.0, 0.0005, 0.001, 0.0001, 0.0001]
    """

    def __init__(self, learning_rate, schedule, from_zero=True):
        if not schedule:
            raise ValueError("PiecewiseLinear: the schedule is empty; give {step: multiplier, ...}.")
        self.learning_rate = float(learning_rate)
        self.schedule = {int(step): float(value) for step, value in schedule.items()}
        self.from_zero = from_zero

    def __call__(self, step):
        return self.learning_rate * piecewise_linear(step, self.schedule, self.from_zero)

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "schedule": {str(step): value for step, value in self.schedule.items()},
            "from_zero": self.from_zero,
        }


@keras.saving.register_keras_serializable(package="bert4long")
class Adam(keras.optimizers.Adam):
    """Keras 3 Adam with bert4keras's defaults (``epsilon=1e-6``) and ``bias_correction``.

    ``bias_correction=False`` drops Adam's ``1 - beta^t`` corrections (as bert4keras
    allows). Keras 2's ``lr=`` spelling is accepted for ``learning_rate=``, and so is
    any Keras optimizer argument (``weight_decay``, ``clipnorm``, ``use_ema``, ...).

    Example:
    >>> from bert4long.optimizers import Adam
    >>> optimizer = Adam(learning_rate=2e-5)
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6, bias_correction=True, **kwargs):
        if "lr" in kwargs:  # Keras 2's name, common in bert4keras scripts
            learning_rate = kwargs.pop("lr")
        kwargs.setdefault("name", "Adam")
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, **kwargs)
        self.bias_correction = bias_correction

    def update_step(self, gradient, variable, learning_rate):
        if not self.bias_correction:
            # Keras scales the step by sqrt(1 - beta_2^t) / (1 - beta_1^t): undo it.
            step = ops.cast(self.iterations + 1, variable.dtype)
            correction = (1 - ops.power(ops.cast(self.beta_1, variable.dtype), step)) / ops.sqrt(
                1 - ops.power(ops.cast(self.beta_2, variable.dtype), step)
            )
            learning_rate = ops.cast(learning_rate, variable.dtype) * correction
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config.update(bias_correction=self.bias_correction)
        return config


def extend_with_weight_decay(BaseOptimizer, name=None):  # noqa: N803 -- bert4keras's signature
    """A subclass of ``BaseOptimizer`` with decoupled weight decay (AdamW when ``BaseOptimizer`` is Adam).

    The new class takes ``weight_decay_rate`` (default 0.01) and
    ``exclude_from_weight_decay`` (regular expressions searched in each variable's
    path, e.g. ``['Norm', 'bias']``); each step subtracts
    ``learning_rate * weight_decay_rate * w`` (Keras's ``weight_decay``).

    Example:
    >>> from bert4long.optimizers import Adam, extend_with_weight_decay
    >>> AdamW = extend_with_weight_decay(Adam, name="AdamW")
    >>> optimizer = AdamW(learning_rate=1e-4, weight_decay_rate=0.01, exclude_from_weight_decay=["Norm", "bias"])
    """

    class NewOptimizer(BaseOptimizer):
        """with decoupled weight decay (``weight_decay_rate``, ``exclude_from_weight_decay``)."""

        def __init__(self, *args, weight_decay_rate=0.01, exclude_from_weight_decay=(), **kwargs):
            super().__init__(*args, weight_decay=weight_decay_rate, **kwargs)
            self.weight_decay_rate = weight_decay_rate
            self.exclude_patterns = list(exclude_from_weight_decay)

        def build(self, variables):
            excluded = [v for v in variables if any(re.search(p, v.path) for p in self.exclude_patterns)]
            if excluded:
                self.exclude_from_weight_decay(var_list=excluded)
            super().build(variables)

        def get_config(self):
            config = super().get_config()
            config.pop("weight_decay")
            config.update(weight_decay_rate=self.weight_decay_rate, exclude_from_weight_decay=self.exclude_patterns)
            return config

    return _register(NewOptimizer, BaseOptimizer, name, "WithWeightDecay")


def extend_with_piecewise_linear_lr(BaseOptimizer, name=None):  # noqa: N803
    """A subclass of ``BaseOptimizer`` whose learning rate follows ``lr_schedule``.

    ``lr_schedule={1000: 1, 2000: 0.1}`` multiplies ``learning_rate`` by a factor rising
    linearly from 0 to 1 over the first 1,000 steps, falling to 0.1 at step 2,000 and
    staying there (`PiecewiseLinear`). Steps count batches seen, also under
    gradient accumulation (as in bert4keras).

    Example:
    >>> from bert4long.optimizers import Adam, extend_with_piecewise_linear_lr
    >>> AdamLR = extend_with_piecewise_linear_lr(Adam, name="AdamLR")
    >>> optimizer = AdamLR(learning_rate=1e-5, lr_schedule={1000: 1, 2000: 0.1})
    """

    class NewOptimizer(BaseOptimizer):
        """with a piecewise-linear learning-rate multiplier (``lr_schedule``)."""

        def __init__(self, *args, lr_schedule=None, **kwargs):
            given = kwargs.get("learning_rate", args[0] if args else None)
            if isinstance(given, keras.optimizers.schedules.LearningRateSchedule) or callable(given):
                raise ValueError(
                    f"{type(self).__name__}: learning_rate must be a number (the peak rate); "
                    "the schedule comes from lr_schedule={step: multiplier}."
                )
            super().__init__(*args, **kwargs)
            self.lr_schedule = {int(k): float(v) for k, v in (lr_schedule or {0: 1}).items()}
            self.piecewise_linear = PiecewiseLinear(float(ops.convert_to_numpy(self.learning_rate)), self.lr_schedule)
            self.learning_rate = self.piecewise_linear

        def get_config(self):
            config = super().get_config()
            config.update(
                learning_rate=self.piecewise_linear.learning_rate,
                lr_schedule={str(k): v for k, v in self.lr_schedule.items()},
            )
            return config

    return _register(NewOptimizer, BaseOptimizer, name, "WithPiecewiseLinearLR")


def extend_with_gradient_accumulation(BaseOptimizer, name=None):  # noqa: N803
    """A subclass of ``BaseOptimizer`` that updates every ``grad_accum_steps`` batches with their mean gradient.

    ``k`` batches of ``n`` then train exactly as one batch of ``k * n`` (Keras's
    ``gradient_accumulation_steps``); the optimizer's step count advances once per update.

    Example:
    >>> from bert4long.optimizers import Adam, extend_with_gradient_accumulation
    >>> AdamGA = extend_with_gradient_accumulation(Adam, name="AdamGA")
    >>> optimizer = AdamGA(learning_rate=1e-5, grad_accum_steps=4)
    """

    class NewOptimizer(BaseOptimizer):
        """with gradient accumulation (``grad_accum_steps``)."""

        def __init__(self, *args, grad_accum_steps=2, **kwargs):
            if int(grad_accum_steps) != grad_accum_steps or grad_accum_steps < 2:
                raise ValueError(f"grad_accum_steps must be an integer >= 2, got {grad_accum_steps!r}.")
            super().__init__(*args, gradient_accumulation_steps=int(grad_accum_steps), **kwargs)
            self.grad_accum_steps = int(grad_accum_steps)

        def get_config(self):
            config = super().get_config()
            config.pop("gradient_accumulation_steps")
            config.update(grad_accum_steps=self.grad_accum_steps)
            return config

    return _register(NewOptimizer, BaseOptimizer, name, "WithGradientAccumulation")


def extend_with_exponential_moving_average(BaseOptimizer, name=None):  # noqa: N803
    """A subclass of ``BaseOptimizer`` keeping a moving average of the weights (``ema_momentum``, default 0.999).

    After each update ``average = ema_momentum * average + (1 - ema_momentum) * w``
    (Keras's ``use_ema``; the average starts at the first updated weights). The model
    keeps its raw weights, also after ``fit()``: `apply_ema_weights()` copies the
    averages into the model (e.g. to evaluate or save) and `reset_old_weights()`
    restores the raw weights.

    Example:
    >>> from bert4long.optimizers import Adam, extend_with_exponential_moving_average
    >>> AdamEMA = extend_with_exponential_moving_average(Adam, name="AdamEMA")
    >>> optimizer = AdamEMA(learning_rate=1e-5, ema_momentum=0.9999)
    """

    class NewOptimizer(BaseOptimizer):
        """with an exponential moving average of the weights (``ema_momentum``)."""

        def __init__(self, *args, ema_momentum=0.999, **kwargs):
            kwargs["use_ema"] = True
            super().__init__(*args, ema_momentum=ema_momentum, **kwargs)
            self._ema_state = types.SimpleNamespace(model_weights=None, old_weights=None)  # not tracked

        def build(self, variables):
            super().build(variables)
            self._ema_state.model_weights = list(variables)

        def finalize_variable_values(self, var_list):
            """Keep the raw weights at the end of ``fit()`` (bert4keras's behaviour)."""

        def apply_ema_weights(self, bias_correction=True):
            """Back up the model's weights, then load the moving averages into the model.

            ``bias_correction`` is accepted for bert4keras compatibility: Keras's average
            starts from the first weights rather than from zeros, so it has no bias to correct.
            """
            weights = self._ema_state.model_weights
            if weights is None:
                raise ValueError("apply_ema_weights: the optimizer has not been used yet; train the model first.")
            self._ema_state.old_weights = [ops.convert_to_numpy(w) for w in weights]
            super().finalize_variable_values(weights)

        def reset_old_weights(self):
            """Restore the weights backed up by `apply_ema_weights`."""
            if self._ema_state.old_weights is None:
                raise ValueError("reset_old_weights: call apply_ema_weights() first.")
            for weight, value in zip(self._ema_state.model_weights, self._ema_state.old_weights):
                weight.assign(value)
            self._ema_state.old_weights = None

        def get_config(self):
            config = super().get_config()
            config.pop("use_ema")
            return config

    return _register(NewOptimizer, BaseOptimizer, name, "WithEMA")


AdamW = extend_with_weight_decay(Adam, name="AdamW")
