"""Start TensorFlow without its start-up noise (CUDA probing, oneDNN notices, absl's preamble).

TensorFlow 2.21 writes some of those lines through absl before ``TF_CPP_MIN_LOG_LEVEL``
is read, so the import and the device set-up run with the stderr file descriptor parked
in a temporary file, replayed if the import fails. Nothing is hidden when TensorFlow was
imported before bert4long, after `show_tensorflow_logs` (the command line's
``--verbose``), or when the user set ``TF_CPP_MIN_LOG_LEVEL`` below 3 (that asks
for TensorFlow's logs).
"""
import contextlib
import os
import sys
import tempfile
import warnings

_SHOW_LOGS = False


def show_tensorflow_logs():
    """Let TensorFlow's start-up logs through from now on (call it before TensorFlow starts)."""
    global _SHOW_LOGS
    _SHOW_LOGS = True


@contextlib.contextmanager
def quiet_startup(started=None):
    """Run the block (an import that starts TensorFlow) with stderr parked; replay it if the block fails.

    ``started``: whether TensorFlow has started already (then nothing is parked); default: it is imported.
    """
    started = "tensorflow" in sys.modules if started is None else started
    if started or _SHOW_LOGS or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3") in ("0", "1", "2"):
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", module="keras")
    warnings.filterwarnings("ignore", module="tensorflow")
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:   # no stderr descriptor (an embedded interpreter): nothing to park
        yield
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)


def import_tensorflow_quietly():
    """Import TensorFlow (and create its devices) with the start-up logs silenced (see `quiet_startup`).

    Example:
    >>> from bert4long.tf_startup import import_tensorflow_quietly
    >>> import_tensorflow_quietly()
    >>> import sys; "tensorflow" in sys.modules
    True
    """
    with quiet_startup():
        import tensorflow as tf

        tf.config.list_physical_devices()
        tf.constant(0)  # creates the devices: their probing logs land in the sink too
