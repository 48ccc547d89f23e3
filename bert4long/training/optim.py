"""The optimizer used for every bert4long training job: Keras 3's AdamW, as BERT trains.

Linear warmup then linear decay to zero (`bert4long.optimizers.PiecewiseLinear`),
decoupled weight decay skipped for LayerNorm weights and biases, gradient
clipping by global norm and Keras's own ``gradient_accumulation_steps``.
"""
import keras

from bert4long.optimizers import PiecewiseLinear

NO_DECAY = ["bias", "gamma", "beta"]  # LayerNorm scale/offset and every bias (Keras short names)


def make_optimizer(
    learning_rate: float,
    total_steps: int,
    warmup_steps: int | None = None,
    weight_decay: float = 0.01,
    clipnorm: float | None = 1.0,
    gradient_accumulation_steps: int | None = None,
) -> keras.optimizers.AdamW:
    """AdamW with warmup + linear decay over ``total_steps`` optimizer updates.

    ``warmup_steps`` defaults to 10% of ``total_steps``. With gradient accumulation,
    Keras advances the schedule once per update, not per micro-batch.

    Example:
    >>> from bert4long.training import make_optimizer
    >>> optimizer = make_optimizer(1e-4, total_steps=1000)
    >>> round(float(optimizer.learning_rate), 8)   # step 0 of the warmup
    0.0
    """
    if total_steps < 1:
        raise ValueError(f"total_steps={total_steps} must be >= 1.")
    warmup = int(0.1 * total_steps) if warmup_steps is None else int(warmup_steps)
    warmup = min(max(warmup, 1), total_steps)
    schedule = PiecewiseLinear(learning_rate, {warmup: 1.0, max(total_steps, warmup + 1): 0.0})
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=clipnorm,
        gradient_accumulation_steps=gradient_accumulation_steps if (gradient_accumulation_steps or 1) > 1 else None,
    )
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    return optimizer


@keras.saving.register_keras_serializable(package="bert4long")
class SparseSafeLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras's dynamic loss scaling, with overflow seen in sparse gradients too.

    Keras 3.15's ``check_finite`` calls ``ops.isfinite`` on a token embedding's
    ``tf.IndexedSlices`` gradient and gets True even when its values hold ``inf``;
    the overflowed step is then applied and every weight becomes ``nan`` (seen on
    Longformer and ModernBERT under ``mixed_float16``). Here the slices' values are
    checked.

    Example:
    >>> import tensorflow as tf
    >>> from bert4long.training import make_optimizer
    >>> from bert4long.training.optim import SparseSafeLossScaleOptimizer
    >>> optimizer = SparseSafeLossScaleOptimizer(make_optimizer(1e-3, total_steps=10))
    >>> overflow = tf.IndexedSlices(tf.constant([[float("inf")]]), tf.constant([0]), tf.constant([3, 1]))
    >>> bool(optimizer.check_finite([tf.ones((2,)), overflow]))
    False
    """

    def check_finite(self, grads):
        return super().check_finite([getattr(g, "values", g) for g in grads])


def loss_scaled(optimizer: keras.optimizers.Optimizer, model: keras.Model) -> keras.optimizers.Optimizer:
    """``optimizer`` wrapped in `SparseSafeLossScaleOptimizer` when ``model`` computes in ``mixed_float16``
    (what Keras's ``compile`` would wrap in its own `LossScaleOptimizer`), else unchanged."""
    if model.dtype_policy.name != "mixed_float16" or isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    return SparseSafeLossScaleOptimizer(optimizer)
