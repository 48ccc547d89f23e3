"""The ``bert4long`` command's entry point: ``bert4long.cli.main``.

``python -m bert4long_command ARGS`` is the same as ``bert4long ARGS``. The command
line is parsed before TensorFlow starts (``--help`` answers at once); a command that
runs starts it quietly (`bert4long.tf_startup`), with its logs under ``--verbose``.
"""
import sys


def main(argv=None):
    from bert4long.cli import main as run_command

    return run_command(sys.argv[1:] if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
