"""Schedules of the training step (learning-rate multipliers)."""
from keras import ops


def piecewise_linear(t, schedule, from_zero=True):
    """Piecewise-linear function of the step ``t`` (bert4keras's learning-rate multiplier).

    ``schedule={1000: 1, 2000: 0.1}`` rises linearly from 0 to 1 over steps 0-1000
    (from 0 only when ``from_zero`` and no step 0 is given), falls to 0.1 at step 2000
    and stays there.

    Example:
    >>> from bert4long.ops.schedules import piecewise_linear
    >>> [round(float(piecewise_linear(t, {10: 1, 20: 0.1})), 3) for t in (0, 5, 10, 15, 30)]
    [0.0, 0.5, 1.0, 0.55, 0.1]
    """
    points = sorted((int(k), float(v)) for k, v in schedule.items())
    if not points:
        raise ValueError("piecewise_linear: the schedule is empty; give at least one {step: value}.")
    if from_zero and points[0][0] != 0:
        points = [(0, 0.0)] + points
    t = ops.cast(t, "float32")
    value = ops.zeros_like(t) + points[0][1]
    for (t0, v0), (t1, v1) in zip(points[:-1], points[1:]):
        segment = v0 + (v1 - v0) * (t - t0) / (t1 - t0)
        value = ops.where(t >= t0, segment, value)
    return ops.where(t >= points[-1][0], ops.zeros_like(t) + points[-1][1], value)
