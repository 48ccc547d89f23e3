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
