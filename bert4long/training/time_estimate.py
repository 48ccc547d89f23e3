"""`EpochTimeEstimate`: how long an epoch and the run will take, measured on a few real training steps."""
import time
from collections.abc import Callable

import keras
import numpy as np


class EpochTimeEstimate(keras.callbacks.Callback):
    """Times training steps and, after ``measure`` of them, calls ``report`` once with a line such as ``about 283
    s/epoch, 14.2 min for 3 epochs (from 3 timed steps; ...)``.

    Batches differ in length, so the estimate is per padded token: the timed steps' seconds over their tokens,
    times the tokens of an epoch. The first step of each batch shape is not timed (it traces and compiles); the
    line says how many shapes the epoch has still to compile (on the speeches at 1,536 tokens: an estimate of 232
    s/epoch against 304 s measured for the first epoch, which compiled 6 more shapes).

    Args:
        epoch_shapes: ``epoch -> [steps_per_epoch, ...]`` padded shape of every batch of that epoch, in training
            order (`bert4long.data.length_batches.epoch_shapes`).
        batch_size: rows per batch.
        steps: the step the run ends at.
        measure: steps to time before reporting.
        report: called with the line (default ``print``).

    Example:
    >>> import numpy as np
    >>> from bert4long.training.time_estimate import EpochTimeEstimate
    >>> lines = []
    >>> estimate = EpochTimeEstimate(lambda epoch: np.array([[8], [16]]), 2, steps=4, measure=1, report=lines.append)
    >>> estimate.timed = [(0.5, 32)]   # 0.5 s for a batch of 2 x 16 tokens
    >>> estimate.report_estimate()
    >>> print(lines[0].replace("; ", ";\\n"))
    about 1 s/epoch, 0.0 min for 2 epochs (from 1 timed steps, compiling left out;
    this epoch still compiles 2 more batch shapes)
    """

    def __init__(self, epoch_shapes: Callable[[int], np.ndarray], batch_size: int, steps: int, measure: int = 3,
                 report: Callable[[str], None] = print):
        super().__init__()
        self.epoch_shapes, self.batch_size, self.steps = epoch_shapes, batch_size, steps
        self.measure, self.report = measure, report
        self.step, self.first, self.timed, self.seen, self.began, self.done = 0, None, [], set(), None, False
        self.epoch, self.shapes = 0, np.asarray(epoch_shapes(0))   # the batches of the epoch being read

    def start(self, step):
        """The global step the next ``fit`` starts from (the first call: where this run starts)."""
        self.step = int(step)
        self.first = self.step if self.first is None else self.first

    def _shape(self, step):
        epoch, index = divmod(step, len(self.shapes))
        if epoch != self.epoch:
            self.epoch, self.shapes = epoch, np.asarray(self.epoch_shapes(epoch))
        return tuple(int(n) for n in self.shapes[index])

    def on_train_batch_begin(self, batch, logs=None):
        self.began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        seconds, shape = time.perf_counter() - self.began, self._shape(self.step)
        self.step += 1
        if self.done:
            return
        if shape in self.seen:
            self.timed.append((seconds, self.batch_size * int(np.prod(shape))))
        self.seen.add(shape)
        if len(self.timed) >= self.measure:
            self.report_estimate()

    def report_estimate(self):
        """Report the estimate from the steps timed so far (once)."""
        per_token = sum(s for s, _ in self.timed) / sum(t for _, t in self.timed)
        epoch = per_token * self.batch_size * float(np.prod(self.shapes, axis=1).sum())
        steps_per_epoch, left = len(self.shapes), self.steps - (self.first or 0)
        epochs = left // steps_per_epoch
        span = f"{epochs} epoch{'s' * (epochs != 1)}" if left % steps_per_epoch == 0 else f"{left} steps"
        unseen = len({tuple(int(n) for n in shape) for shape in self.shapes} - self.seen)
        compiling = f"; this epoch still compiles {unseen} more batch shape{'s' * (unseen != 1)}" if unseen else ""
        self.report(f"about {epoch:.0f} s/epoch, {epoch * left / steps_per_epoch / 60:.1f} min for {span} (from "
                    f"{len(self.timed)} timed steps, compiling left out{compiling})")
        self.done = True
