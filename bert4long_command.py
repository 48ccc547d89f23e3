"""The ``bert4long`` command's entry point.

It lives outside the ``bert4long`` package because ``import bert4long`` loads
TensorFlow (the package registers its Keras classes on import), and
TensorFlow's start-up logs can only be silenced before that import. The
command is ``bert4long.cli.main``; ``python -m bert4long_command ARGS`` is
the same as ``bert4long ARGS``.
"""
import os
import sys
import tempfile
import warnings


def quiet_tensorflow(verbose):
    """Start TensorFlow with its start-up logs (CUDA probing, CPU features, absl's preamble) silenced, unless
    ``verbose``. TensorFlow 2.21 writes some of them through absl before ``TF_CPP_MIN_LOG_LEVEL`` is read, so
    the import and the device set-up run with the stderr file descriptor parked in a temporary file, which
    is replayed if the import fails. A TF_CPP_MIN_LOG_LEVEL set by the user is kept."""
    if verbose or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", module="keras")
    warnings.filterwarnings("ignore", module="tensorflow")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
            tf.constant(0)  # creates the devices: their probing logs land in the sink too
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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet_tensorflow("--verbose" in argv)
    from bert4long.cli import main as run_command

    return run_command(argv)


if __name__ == "__main__":
    sys.exit(main())
