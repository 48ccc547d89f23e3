"""SIGTERM and Ctrl-C during training: finish the current step, save a checkpoint, stop with one line."""
import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def signal_name(signum: int) -> str:
    """``'SIGTERM'``, ``'SIGINT (Ctrl-C)'``, ..."""
    return signal.Signals(signum).name + (" (Ctrl-C)" if signum == signal.SIGINT else "")


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving its state; ``exit_code`` is ``128 + signal``."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


@contextlib.contextmanager
def signals_to(stopper):
    """While inside, SIGTERM/SIGINT set ``stopper.received`` (``training.loop.StopOnSignal``) instead of killing;
    a second one stops at once.

    Signal handlers live in the main thread only; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield stopper
        return

    def handler(signum, frame):
        if stopper.received is not None:
            raise KeyboardInterrupt(f"second {signal_name(signum)}: stopped without saving")
        stopper.received = signum

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield stopper
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextlib.contextmanager
def sigterm_stops(command: str = "bert4long", resumes: bool = True) -> Iterator[None]:
    """While inside, SIGTERM raises `TrainingInterrupted` (a clean stop) instead of killing the process at once;
    `signals_to` replaces this during training steps, so there the step finishes and is saved first. ``resumes``: the
    command goes on from its checkpoints when run again (else the message says a rerun starts over)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise TrainingInterrupted(
            f"SIGTERM received: {command} stopped outside a training step (nothing new to save); run the same "
            "command again to continue." if resumes else f"SIGTERM received: {command} stopped; it keeps no "
            "checkpoint of its work, so running the same command again starts it over.", signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
