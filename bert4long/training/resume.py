"""Interrupt-safe training state: atomic periodic checkpoints and exact resume.

Layout under ``out_dir/checkpoints/``::

    step-000200/ckpt.index, ckpt.data-*, run.json   one complete training state each
    latest                                           name of the newest complete one

A state is written into a new hidden temporary folder (``.tmp-step-*``, made by
`bert4long.output_folders.temporary`) and renamed into place only when complete, and
``latest`` is replaced atomically afterwards, so neither a ``kill -9`` nor a full
disk during a write can leave a partial state where `RunDirectory.restore` looks.
``run.json`` records the model configuration; resuming with a different one is
refused. Old states are pruned only while the output folder's record says bert4long
wrote them (`bert4long.output_folders.remove_written`).
"""
import errno
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from bert4long.output_folders import is_disk_full, note_written, remove_written, temporary, write_text_atomically

POINTER = "latest"


def fingerprint(*arrays: np.typing.ArrayLike) -> str:
    """A short hash of arrays' contents (e.g. the packed training data), to tell a changed data set on resume.

    Example:
    >>> import numpy as np
    >>> from bert4long.training.resume import fingerprint
    >>> fingerprint(np.arange(4)) == fingerprint(np.arange(4)), fingerprint(np.arange(4)) == fingerprint(np.arange(5))
    (True, False)
    """
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def _write_state(checkpoint, prefix):
    """Write the TF checkpoint files (separate so tests can simulate a full disk here)."""
    checkpoint.write(prefix)


class RunDirectory:
    """Periodic training checkpoints of one run in ``out_dir`` (see module docstring).

    Args:
        out_dir: the run's output folder.
        config: JSON-able dict of the model and the settings that matter (learning rate,
            data, vocab, lengths, batch); a resume must match it.
        keep: how many complete states to keep.
        accept_changes: resume even when ``config`` differs from the saved one (the
            differences are printed and the new settings are recorded).

    Example:
    >>> import tensorflow as tf, tempfile
    >>> from bert4long.training import RunDirectory
    >>> step = tf.Variable(0)
    >>> run = RunDirectory(tempfile.mkdtemp(), {"hidden_size": 16})
    >>> run.save(tf.train.Checkpoint(step=step), 10)
    >>> run.latest_step()
    10
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        config: Mapping[str, Any],
        keep: int = 2,
        accept_changes: bool = False,
    ) -> None:
        self.out_dir = os.path.abspath(out_dir)
        self.directory = os.path.join(self.out_dir, "checkpoints")
        self.config = json.loads(json.dumps(config))
        self.keep = keep
        self.accept_changes = accept_changes

    def _state_dir(self, step):
        return os.path.join(self.directory, f"step-{int(step):09d}")

    def _states(self):
        """The steps of the state folders here, oldest first (a folder named otherwise is not a state)."""
        names = os.listdir(self.directory) if os.path.isdir(self.directory) else []
        return sorted(int(n[5:]) for n in names if n[5:].isdigit() and os.path.basename(self._state_dir(n[5:])) == n)

    def latest_step(self) -> int | None:
        """The step of the newest complete state, or None."""
        pointer = os.path.join(self.directory, POINTER)
        if os.path.isfile(pointer):
            with open(pointer, encoding="utf-8") as f:
                name = f.read().strip()
            if os.path.isfile(os.path.join(self.directory, name, "run.json")):
                return int(name.split("-")[1])
        steps = [s for s in self._states() if os.path.isfile(os.path.join(self._state_dir(s), "run.json"))]
        return max(steps) if steps else None

    def state_record(self, step: int) -> dict[str, Any]:
        """The ``run.json`` of the state at ``step``: its ``config`` and what `save` was given as ``extra``."""
        with open(os.path.join(self._state_dir(step), "run.json"), encoding="utf-8") as f:
            return json.load(f)

    def check_config(self, step: int) -> None:
        saved = self.state_record(step)["config"]
        # a setting the saved run did not record (an older bert4long) is not compared; it is recorded from now on
        different = sorted(k for k in saved if saved.get(k) != self.config.get(k))
        if not different:
            return
        details = ", ".join(f"{k}: saved {saved.get(k)!r} vs now {self.config.get(k)!r}" for k in different)
        if self.accept_changes:
            print(f"resuming {self.out_dir!r} with changed settings ({details})", flush=True)
            return
        raise ValueError(
            f"Cannot resume from {self.out_dir!r}: it holds a run with a different configuration ({details}). "
            "Run again with the saved settings, pass --accept-changes (accept_changes=True) to continue with the "
            "new ones, or choose a new --out folder to start a new run (this one stays as it is)."
        )

    def restore(self, checkpoint: tf.train.Checkpoint) -> int:
        """Restore the newest state into ``checkpoint``; return its step (0 if there is none)."""
        step = self.latest_step()
        if step is None:
            return 0
        self.check_config(step)
        state = self._state_dir(step)
        try:
            # every object given must be in the file; values it holds beyond them (an optimizer, when only the
            # model is restored) are left unread without a warning
            checkpoint.read(os.path.join(state, "ckpt")).assert_existing_objects_matched().expect_partial()
        except (AssertionError, ValueError) as error:
            raise ValueError(
                f"Cannot resume from {self.out_dir!r}: its saved state (step {step}) does not match this model "
                f"({str(error).splitlines()[0][:300]}). It was written by another model, optimizer setting (such as "
                "--accumulate) or bert4long version: run with the settings it was saved with, or choose a new --out "
                "folder to start a new run (this one stays as it is)."
            ) from None
        except (IndexError, tf.errors.OpError) as error:   # a truncated or corrupted file
            raise ValueError(
                f"Cannot resume from {self.out_dir!r}: the saved state {state!r} is damaged "
                f"({type(error).__name__}: {str(error).splitlines()[0][:200]}). Delete that folder to resume from the "
                "checkpoint before it, or choose a new --out folder to start over."
            ) from None
        return step

    def save(self, checkpoint: tf.train.Checkpoint, step: int, extra: Mapping[str, Any] | None = None) -> None:
        """Write a complete state for ``step`` atomically, then prune old ones."""
        os.makedirs(self.directory, exist_ok=True)
        final = self._state_dir(step)
        try:
            with temporary(self.directory, f".tmp-step-{int(step):09d}-", folder=True) as tmp:
                _write_state(checkpoint, os.path.join(tmp, "ckpt"))
                write_text_atomically(os.path.join(tmp, "run.json"),
                                      json.dumps({"step": int(step), "config": self.config, **(extra or {})}, indent=2))
                if os.path.lexists(final):
                    remove_written(final)
                os.replace(tmp, final)
            note_written(final)
            write_text_atomically(os.path.join(self.directory, POINTER), os.path.basename(final))
        except BaseException as error:
            if not (isinstance(error, OSError) or is_disk_full(error)):
                raise
            previous = self.latest_step()
            reason = "the disk is full" if is_disk_full(error) else (error.strerror or str(error))
            raise OSError(
                getattr(error, "errno", None) or errno.ENOSPC,
                f"Could not write the training checkpoint for step {step} in {self.directory!r} ({reason}). "
                + (f"The previous checkpoint (step {previous}) is intact: free some space and run the same "
                   "command again to resume from it." if previous is not None else "No earlier checkpoint exists."),
            ) from error
        self._prune()

    def _prune(self):
        for step in self._states()[: -self.keep]:
            remove_written(self._state_dir(step))
