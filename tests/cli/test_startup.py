"""``bert4long --help`` builds every parser, and a refused argument is reported, without importing TensorFlow or
Keras.

Each command runs in a fresh interpreter under ``-X importtime``, which lists every
module imported; none may be TensorFlow's or Keras's. (How fast it answers is
measured by benchmarks/startup.py, not here.)
"""
import pathlib
import subprocess
import sys

import pytest
from paths import ROOT

from bert4long.cli import COMMANDS
from bert4long.pretrained import checkpoint

ROOT = pathlib.Path(ROOT)
HEAVY = {"tensorflow", "keras", "tf_keras", "torch", "transformers"}


def imported_packages(*argv, status=0):
    """The top-level packages ``bert4long ARGV`` imports, and its stdout and stderr (it must exit with ``status``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bert4long.cli", *argv],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == status, done.stderr[-2000:]
    lines = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "bert4long.cli" in lines   # the importtime listing is there to read
    messages = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("import time:"))
    return {line.split(".")[0] for line in lines}, done.stdout, messages


@pytest.mark.parametrize("argv", [["--help"], *[[name, "--help"] for name in COMMANDS]], ids=" ".join)
def test_help_imports_no_tensorflow(argv):
    packages, printed, _ = imported_packages(*argv)
    assert printed.startswith("usage: bert4long"), printed[:500]
    heavy = packages & HEAVY
    assert not heavy, f"`bert4long {' '.join(argv)}` imports {sorted(heavy)}: import them inside the run_ function"


@pytest.mark.slow
def test_argument_errors_come_before_tensorflow(tmp_path):
    """Options argparse cannot check alone (a missing checkpoint, two lengths of training, a flag that needs another)
    are refused by the command's check (`bert4long.cli.CHECKS`) before TensorFlow starts."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "a b c", "label": "x"}\n', encoding="utf-8")
    refusals = {("finetune", "--checkpoint", str(tmp_path / "missing.ckpt"), "--train", str(train)): "no such checkpoint",
                ("finetune", "--checkpoint", checkpoint(), "--train", str(train), "--steps", "5", "--epochs", "2"):
                    "both say how long to train",
                ("finetune", "--checkpoint", checkpoint(), "--train", str(train), "--early-stopping", "2"):
                    "--early-stopping needs --valid",
                ("pretrain", "--corpus", str(tmp_path)): "pretrain needs --checkpoint"}
    for argv, message in refusals.items():
        packages, _, messages = imported_packages(*argv, status=1)
        assert message in messages, messages[-2000:]
        assert not packages & HEAVY, f"`bert4long {' '.join(argv)}` imports {sorted(packages & HEAVY)} before refusing"


def test_a_predict_window_too_short_for_cls_and_sep_is_refused_before_tensorflow(tmp_path):
    """``predict --seq-len 2`` leaves no room beside [CLS] and [SEP]: argparse refuses it naming the option and its
    minimum (was: an error naming ``maxlen``, after the model had loaded)."""
    packages, _, messages = imported_packages("predict", "--checkpoint", checkpoint(), "--input", str(tmp_path),
                                              "--output", str(tmp_path / "out.jsonl"), "--seq-len", "2", status=2)
    assert "argument --seq-len: must be a window of at least 3 tokens ([CLS], one token, [SEP]), got 2" in messages
    assert not packages & HEAVY, sorted(packages & HEAVY)
