"""The command line's quiet start of Keras and TensorFlow (no CUDA probing, oneDNN notices, absl's preamble).

Quieting TensorFlow is the ``bert4long`` command's business: `bert4long.cli.main` calls this
module, the library never does (importing bert4long leaves TensorFlow's logs and the
warning filters as the user has them).

TensorFlow 2.21 writes some of those lines through absl before ``TF_CPP_MIN_LOG_LEVEL``
is read, so the import and the device set-up run with the stderr file descriptor parked
in a temporary file, replayed if the import fails. Nothing is hidden when TensorFlow was
imported already, after `show_tensorflow_logs` (the command line's ``--verbose``), or
when the user set ``TF_CPP_MIN_LOG_LEVEL`` below 3 (that asks for TensorFlow's logs).
"""
import contextlib
import os
import sys
import tempfile
import warnings

_SHOW_LOGS = False


class BackendMissing(ImportError):
    """Keras's backend (``KERAS_BACKEND``) does not import: its package is not installed; the message names both and
    the fix."""


def show_tensorflow_logs():
    """Let TensorFlow's start-up logs through from now on (call it before TensorFlow starts)."""
    global _SHOW_LOGS
    _SHOW_LOGS = True


def quiet():
    """Whether TensorFlow's logs are to be hidden: neither `show_tensorflow_logs` nor a ``TF_CPP_MIN_LOG_LEVEL``
    below 3 asked for them."""
    return not _SHOW_LOGS and os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3") not in ("0", "1", "2")


@contextlib.contextmanager
def quiet_startup():
    """Run the block (an import that starts TensorFlow) with stderr parked; replay it if the block fails, unless
    with a refused argument (`ValueError`, `FileNotFoundError`) or a missing backend (`BackendMissing`): the command's
    own message says it all. Nothing is parked when TensorFlow has started already."""
    if "tensorflow" in sys.modules or not quiet():
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
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
        except BaseException as error:
            os.dup2(saved, 2)
            if not isinstance(error, (ValueError, FileNotFoundError, BackendMissing)):
                sink.seek(0)
                sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)


def start_keras_quietly(before_devices=None):
    """Import Keras with the start-up logs silenced (see `quiet_startup`); where Keras runs on TensorFlow, TensorFlow's
    devices are created in the same block, after ``before_devices()`` when given (what must run before TensorFlow's
    runtime starts: a `tf.distribute.MultiWorkerMirroredStrategy`, whose collective ops are set at start-up).
    Another backend starts no TensorFlow: a command that needs it says so
    (`bert4long.tensorflow_only.require_tensorflow`), and a TF checkpoint imports it when it is read. A backend whose
    package is not installed raises `BackendMissing` (one line) rather than Keras's import traceback.

    Example:
    >>> from bert4long.cli.tf_startup import start_keras_quietly
    >>> start_keras_quietly()
    >>> import sys; "tensorflow" in sys.modules
    True
    """
    with quiet_startup(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the import's deprecation notices (this block only)
        try:
            import keras
        except ModuleNotFoundError as error:
            missing = (error.name or "").split(".")[0]
            if not missing or missing == "keras":
                raise
            chosen = os.environ.get("KERAS_BACKEND")
            raise BackendMissing(f"{f'KERAS_BACKEND={chosen}' if chosen else 'the Keras backend of ~/.keras/keras.json'}"
                                 f" needs the {missing!r} package, which is not installed ({error}): install it (pip "
                                 f"install {missing}) or set KERAS_BACKEND=tensorflow") from None

        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            tf.config.list_physical_devices()
            if before_devices is not None:
                before_devices()
            tf.constant(0)  # creates the devices: their probing logs land in the sink too
