"""``bert4long --help`` builds every parser without importing TensorFlow or Keras.

Each help runs in a fresh interpreter under ``-X importtime``, which lists every
module imported; none may be TensorFlow's or Keras's. (How fast it answers is
measured by benchmarks/startup.py, not here.)
"""
import pathlib
import subprocess
import sys

import pytest

from bert4long.cli import COMMANDS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def imported_packages(*argv):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bert4long_command", *argv],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: bert4long"), done.stdout[:500]
    lines = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "bert4long.cli" in lines   # the importtime listing is there to read
    return {line.split(".")[0] for line in lines}


@pytest.mark.parametrize("argv", [["--help"], *[[name, "--help"] for name in COMMANDS]], ids=" ".join)
def test_help_imports_no_tensorflow(argv):
    heavy = imported_packages(*argv) & {"tensorflow", "keras", "tf_keras", "torch", "transformers"}
    assert not heavy, f"`bert4long {' '.join(argv)}` imports {sorted(heavy)}: import them inside the run_ function"
