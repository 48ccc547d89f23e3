"""`fit_resumable`: one Keras ``model.fit`` checkpointed by a callback, resumable after any interruption."""
import contextlib
import glob
import importlib.util
import math
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from bert4long.output_folders import check_unlinked, note_written
from bert4long.training.interrupt import (
    TrainingInterrupted,
    signal_name,
    signals_to,
)
from bert4long.training.lock import RunLock
from bert4long.training.resume import RunDirectory

# What a run whose loss became NaN/inf is told to change (`TrainingDiverged`).
DIVERGED_FIX = "Lower --learning-rate (or enable gradient clipping) and run again."


def tensorboard_installed() -> bool:
    """Whether the ``tensorboard`` package is there to read the event files (TensorFlow does not install it)."""
    return importlib.util.find_spec("tensorboard") is not None


class ScalarLog:
    """A TensorBoard event file of scalars in ``folder``, named with a token of this run and recorded as
    bert4long's once made (`note_written`): an event file of yours beside it is never taken for one of bert4long's."""

    def __init__(self, folder: str) -> None:
        suffix = f".bert4long-{secrets.token_hex(8)}.v2"
        check_unlinked(folder)
        self.writer = tf.summary.create_file_writer(folder, filename_suffix=suffix)
        note_written(*glob.glob(os.path.join(glob.escape(folder), "*" + suffix)), growing=True)

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        """``scalars`` (tag -> value) at ``step``, flushed to the file."""
        with self.writer.as_default():
            for name, value in scalars.items():
                tf.summary.scalar(name, value, step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class SpanSummaries(keras.callbacks.Callback):
    """TensorBoard's training scalars (``epoch_loss``, ..., ``epoch_learning_rate``) in ``folder`` at the end of every
    span of ``span`` steps (an epoch, or a checkpoint interval), at the global training step, one `ScalarLog` per
    ``fit``."""

    def __init__(self, folder: str, start: int, span: int) -> None:
        super().__init__()
        self.folder, self.step, self.span = folder, start, span
        self.log = None

    def on_train_begin(self, logs=None):
        self.log = ScalarLog(self.folder)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.span == 0:
            rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            scalars = {**{k: float(v) for k, v in (logs or {}).items()}, "learning_rate": rate}
            self.log.write(self.step, {f"epoch_{name}": value for name, value in scalars.items()})

    def on_train_end(self, logs=None):
        self.log.close()


class Progress(keras.callbacks.Callback):
    """The run's one clock: at the start of each span of ``span`` steps a line (``epoch 2/5: steps 166-330 of 825``
    where the spans are epochs, else ``steps 101-200 of 1000``), then a Keras progress bar over the span's steps
    (``verbose`` 1: redrawn in place; 2: one line at its end; 0: nothing). The compiled metrics restart with each
    span, so the bar (and a callback reading the logs at a span's end) gives that span's means. Keras's own counter
    is off (``fit(verbose=0)``): the run is one Keras epoch, its steps counted here."""

    def __init__(self, start: int, steps: int, span: int, epochs: bool, verbose: int) -> None:
        super().__init__()
        self.step, self.steps, self.span, self.epochs, self.verbose = start, steps, span, epochs, verbose
        self.bar, self.first = None, None

    def on_train_batch_begin(self, batch, logs=None):
        if self.first is not None:
            return
        self.first = self.step - self.step % self.span + 1
        if batch:   # (Keras reset them at the run's start)
            self.model.reset_metrics()
        last = min(self.first + self.span - 1, self.steps)
        head = f"steps {self.first}-{last} of {self.steps}"
        if self.epochs:
            head = f"epoch {self.step // self.span + 1}/{math.ceil(self.steps / self.span)}: {head}"
        _log(head, self.verbose)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        logs = {k: float(v) for k, v in (logs or {}).items()}
        if self.verbose and self.bar is None:
            self.bar = keras.utils.Progbar(min(self.first + self.span - 1, self.steps) - self.first + 1,
                                           verbose=self.verbose, stateful_metrics=list(logs), unit_name="step")
        if self.bar is not None:
            self.bar.update(self.step - self.first + 1, list(logs.items()))
        if self.step % self.span == 0 or self.step == self.steps:
            self.bar, self.first = None, None


class Checkpoints(keras.callbacks.Callback):
    """Saves the training state (`RunDirectory.save`) every ``save_every`` steps, at every epoch's end (``epoch_steps``)
    and at ``steps``, after the callbacks before it ran: a step where one of them stopped the run (early stopping;
    not ``stopper``'s signal) is saved and recorded as stopped. Nothing is saved after a non-finite loss (``guard``)."""

    def __init__(self, save: Callable[[int, dict], None], start: int, steps: int, save_every: int,
                 epoch_steps: int | None, guard: "_StopOnNonFinite", stopper: "StopOnSignal") -> None:
        super().__init__()
        self.save, self.step, self.steps, self.save_every = save, start, steps, save_every
        self.epoch_steps, self.guard, self.stopper = epoch_steps, guard, stopper
        self.logs = {}

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.guard.bad_step is not None:
            return
        self.logs = {k: float(v) for k, v in (logs or {}).items()}
        early = bool(self.model.stop_training) and self.stopper.received is None
        epoch_end = bool(self.epoch_steps) and self.step % self.epoch_steps == 0
        if self.save_every and (self.step % self.save_every == 0 or epoch_end or self.step == self.steps or early):
            self.save(self.step, {"logs": self.logs, **({"stopped_early": True} if early else {})})


class StopOnSignal(keras.callbacks.Callback):
    """Ask ``fit`` to stop at the next step boundary once `received` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.received = None

    def on_train_batch_end(self, batch, logs=None):
        if self.received is not None:
            self.model.stop_training = True


class TrainingDiverged(FloatingPointError):
    """The loss became NaN or infinite; the last good checkpoint was kept. ``what`` says what happened, ``fix`` what to
    change (by default `DIVERGED_FIX`; a command that knows a likelier cause raises it again with its own)."""

    def __init__(self, what: str, fix: str = "") -> None:
        self.what, self.fix = what, fix or DIVERGED_FIX
        super().__init__(f"{what} {self.fix}")


class _StopOnNonFinite(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.bad_step = None

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            self.bad_step = int(self.model.optimizer.iterations.numpy())
            self.model.stop_training = True


def progress_verbosity(verbose: str | int = "auto") -> int:
    """Keras's ``verbose`` for ``verbose``: ``'auto'`` is 1 (a progress bar redrawn in place) when stdout is a
    terminal and 2 (one plain line per epoch) when it is not; other values are kept.

    Keras's own ``'auto'`` is 1 everywhere, and its progress bar redraws with backspaces, carriage returns and
    colour codes whenever ``posix`` is imported, so a redirected log got one long line of redraws.

    Example:
    >>> from bert4long.training.loop import progress_verbosity
    >>> progress_verbosity(0), progress_verbosity()   # (doctest output is not a terminal)
    (0, 2)
    """
    if verbose != "auto":
        return verbose
    return 1 if getattr(sys.stdout, "isatty", lambda: False)() else 2


def _log(message, verbose):
    if verbose:
        print(message, flush=True)


def needs_custom_loop(model: keras.Model) -> bool:
    """Keras 3's ``fit`` cannot start under `MultiWorkerMirroredStrategy` (it reduces the first batch with
    ``strategy.reduce``, which fails on a per-replica batch: keras-team/keras#20585), so that strategy
    trains through `fit_distributed` instead; every other strategy uses ``model.fit``."""
    return isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy)


def fit_distributed(model: keras.Model, dataset: tf.data.Dataset, steps: int) -> dict[str, list[float]]:
    """Run ``steps`` training steps of a compiled ``model`` with ``strategy.run`` (one `tf.function` step).

    The step is Keras's own: ``model.compute_loss`` with the compiled loss (which
    Keras scales by the number of replicas) and the optimizer's all-reduced
    ``apply_gradients`` (clipping, accumulation and schedules included), as
    ``model.fit`` does under `tf.distribute`. Returns ``{"loss": [...]}``, the
    global loss of each step.
    """
    strategy = model.distribute_strategy

    def replica_step(x, y, sample_weight=None):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            # Keras already divides the compiled loss by the number of replicas under a strategy.
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return tf.distribute.get_replica_context().all_reduce("SUM", loss)  # across every worker's replicas

    @tf.function
    def train_step(batch):
        return strategy.experimental_local_results(strategy.run(replica_step, args=batch))[0]

    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    return {"loss": [float(train_step(next(iterator))) for _ in range(steps)]}


def fit_resumable(
    model: keras.Model,
    make_dataset: Callable[[int], tf.data.Dataset],
    steps: int,
    out_dir: str | os.PathLike,
    config: Mapping[str, Any],
    save_every: int = 100,
    tokens_per_step: int | None = None,
    callbacks: Iterable[keras.callbacks.Callback] = (),
    verbose: str | int = "auto",
    tensorboard: bool = True,
    keep: int = 2,
    accept_changes: bool = False,
    on_save: Callable[[int, str], None] | None = None,
    epoch_steps: int | None = None,
) -> dict[str, Any]:
    """Train ``model`` (compiled) for ``steps`` batches, checkpointing every ``save_every`` and at every epoch's end.

    ``make_dataset(start_step)`` must return the (endless) batches from
    ``start_step`` on. If ``out_dir`` already holds a state of this ``config``,
    training resumes from its step (optimizer, schedule, dropout RNG and data
    position included) and says so; a saved ``config`` that differs is refused
    unless ``accept_changes``. ``steps`` may be raised to continue a finished
    run; a run a callback stopped (early stopping) is recorded as stopped, and a
    rerun trains no further. A NaN/inf loss stops training with `TrainingDiverged`, keeping the last
    good checkpoint. SIGTERM or Ctrl-C stops at the next step boundary, saves a
    checkpoint there and raises `TrainingInterrupted`. While it checkpoints, the
    run holds ``out_dir``'s lock (`RunLock`): a second run on the same folder is
    refused. ``save_every=0`` never checkpoints (e.g. on non-chief workers); ``keep``
    complete states are kept (1: only the last). ``epoch_steps``: the steps of an epoch, the unit the progress
    lines count in (`Progress`: ``epoch 2/5: steps ...``; without it, ``save_every`` steps) and a checkpoint at each
    epoch's end; the whole run is one ``model.fit``, so Keras's own epoch counter never speaks. ``verbose='auto'``
    draws a progress bar on a terminal and one plain line per epoch (or interval) otherwise (`progress_verbosity`).
    ``on_save(step, directory)`` is called after every checkpoint written (the CLI prints a line, even when quiet).

    Returns a dict: ``start_step``, ``steps`` (the step reached: fewer than asked when a callback stopped
    the run), ``seconds``, ``tokens_per_second``, ``logs`` (the last step's Keras logs), ``checkpoints``.

    Example:
    >>> from bert4long.training import fit_resumable
    >>> summary = fit_resumable(model, lambda start: mlm_batches(seqs, masker, 8, start_step=start),
    ...                         steps=1000, out_dir="run", config={"seq_len": 512})  # doctest: +SKIP
    """
    run = RunDirectory(out_dir, config, keep=keep, accept_changes=accept_changes)
    verbose = progress_verbosity(verbose)
    with (RunLock(run.out_dir) if save_every else contextlib.nullcontext()), signals_to(StopOnSignal()) as stopper:
        return _fit_run(model, make_dataset, steps, run, save_every, tokens_per_step, [stopper, *callbacks],
                        verbose, tensorboard, on_save, epoch_steps)


def _start_step(run, checkpoint, steps):
    """The step the run goes on from (its newest state restored into ``checkpoint``), and ``steps``, or the step
    reached when the saved run was stopped early (nothing left to train)."""
    start = run.restore(checkpoint)
    if start > steps:
        raise ValueError(f"This run in {run.out_dir!r} has already done {start} steps, more than --steps {steps}: "
                         f"pass --steps {start} or more to continue it (its step-{start} checkpoint is kept), or choose "
                         "a new --out folder for a shorter run.")
    if start and run.state_record(start).get("stopped_early"):
        print(f"this run stopped early at step {start} (a callback ended it, such as early stopping): nothing left "
              "to train; choose a new --out folder to train again", flush=True)
        return start, start
    if start:
        print(f"resumed from step {start} ({run.directory})", flush=True)
    return start, steps


def _fit_run(model, make_dataset, steps, run, save_every, tokens_per_step, callbacks, verbose, tensorboard, on_save,
             epoch_steps):
    stopper = callbacks[0]
    optimizer = model.optimizer
    with model.distribute_strategy.scope():   # the optimizer's slots are mirrored like the weights they follow
        optimizer.build(model.trainable_variables)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
        start, steps = _start_step(run, checkpoint, steps)
    _check_workers_agree(model.distribute_strategy, start, run.out_dir)

    def save(step, extra):
        run.save(checkpoint, step, extra=extra)
        if on_save is not None:
            on_save(step, run.directory)

    span = epoch_steps or save_every or steps
    guard = _StopOnNonFinite()
    saver = Checkpoints(save, start, steps, save_every, epoch_steps, guard, stopper)
    extra = [stopper, guard, Progress(start, steps, span, bool(epoch_steps), verbose), *callbacks[1:]]
    if tensorboard and not tensorboard_installed():
        _log("TensorBoard logs skipped: pip install tensorboard to get them.", verbose)
    elif tensorboard:
        extra.append(SpanSummaries(os.path.join(run.out_dir, "logs", "train"), start, span))
    begin = time.perf_counter()
    if start >= steps:
        step = start
    elif needs_custom_loop(model):
        step = _fit_custom(model, make_dataset, start, steps, save_every or steps, guard, saver)
    else:
        model.fit(make_dataset(start), steps_per_epoch=steps - start, epochs=1, callbacks=[*extra, saver], verbose=0,
                  shuffle=False)
        step = saver.step
    if guard.bad_step is not None:
        last = run.latest_step()
        raise TrainingDiverged(
            f"The loss became NaN/inf at step {guard.bad_step}; training stopped. "
            + (f"The last good checkpoint (step {last}) is kept in {run.directory!r}." if last is not None
               else "No checkpoint had been written yet."))
    if stopper.received is not None:
        if save_every and run.latest_step() != step:
            save(step, {"logs": saver.logs})
        raise TrainingInterrupted(
            f"{signal_name(stopper.received)} received: stopped after step {step} of {steps} and "
            + (f"saved a checkpoint in {run.directory!r}; run the same command again to resume."
               if save_every else "saved nothing (this process writes no checkpoints)."),
            stopper.received)
    seconds = time.perf_counter() - begin
    done = step - start
    return {
        "start_step": start,
        "steps": step,
        "seconds": seconds,
        "tokens_per_second": (done * tokens_per_step / seconds) if tokens_per_step and done else math.nan,
        "logs": saver.logs,
        "checkpoints": run.directory,
    }


def _check_workers_agree(strategy, start, out_dir):
    """Under `tf.distribute.MultiWorkerMirroredStrategy` each worker restores the newest state it finds in its own
    ``out_dir``: refuse in one line, on every worker, unless all of them go on from the same step (workers that
    all-reduced the gradients of different weights would train on with no error)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    each = tf.function(lambda: strategy.run(lambda: tf.constant([start], tf.int64)))()   # (eager run: a warning)
    steps = strategy.gather(each, axis=0).numpy().tolist()
    if min(steps) != max(steps):
        raise ValueError(f"The workers would go on from different steps ({', '.join(map(str, steps))}; this one from "
                         f"{start}, in {out_dir!r}): every worker resumes from the chief's checkpoints, so give every "
                         "worker the same --out on a file system they share, or a new --out to start again")


def _fit_custom(model, make_dataset, start, steps, interval, guard, saver):
    """`fit_distributed` in intervals of ``interval`` steps from ``start``, each ended by ``saver`` (`Checkpoints`);
    stops at a non-finite loss (``guard.bad_step``) or a signal (``saver.stopper``). Returns the step reached."""
    step = start
    while step < steps and saver.stopper.received is None:
        length = min(interval - step % interval, steps - step)
        losses = fit_distributed(model, make_dataset(step), length)["loss"]
        bad = [i for i, loss in enumerate(losses) if not np.isfinite(loss)]
        if bad:
            guard.bad_step = step + bad[0] + 1
            return step
        step += length
        saver.step, saver.logs = step, {"loss": losses[-1]}
        if saver.save_every:
            saver.save(step, {"logs": saver.logs})
    return step
