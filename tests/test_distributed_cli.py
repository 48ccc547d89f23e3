"""`pretrain` and `finetune --distribute mirrored` run as a user runs them, on two logical CPU devices: XLA is left
out and the run says why, they train, and a run killed (``kill -9``) after a checkpoint resumes to the weights and
training state of a run never interrupted.

A process makes its two logical CPU devices before TensorFlow starts (``RUN``), as a machine with two GPUs has them;
the rest is the command line itself.
"""
import os
import signal
import subprocess
import sys

import pytest

from tests import test_safety_untried as untried
from tests.test_safety_untried import _finetune, _pretrain, _same, _state, _weights

data = untried.data   # the safety suite's inputs: a corpus folder and a classify .jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = """
import os, signal, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from bert4long.cli import main, mlm, tasks
kill_at, argv = int(sys.argv[1]), sys.argv[2:]
for module in (mlm, tasks):   # kill -9 just after the checkpoint of step kill_at (0: never)
    module.saved_line = lambda s, folder, said=module.saved_line: (said(s, folder), s == kill_at and
                                                                  os.kill(os.getpid(), signal.SIGKILL))
sys.exit(main(argv))
"""


def _run(argv, kill_at=0):
    return subprocess.run([sys.executable, "-c", RUN, str(kill_at), *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_mirrored_trains_says_why_xla_is_out_and_resumes_after_kill_9(tiny_bert, data, tmp_path, command):
    def argv(out):
        if command == "pretrain":
            return [*_pretrain(tiny_bert, data, out, steps=4), "--distribute", "mirrored"]
        return [*_finetune(tiny_bert, data["train"], out, steps=4), "--distribute", "mirrored"]

    argv_without_no_xla = [[a for a in argv(tmp_path / name) if a != "--no-xla"] for name in ("straight", "killed")]
    straight = _run(argv_without_no_xla[0])
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "without XLA; XLA left out: 2 replicas on CPU devices" in straight.stdout, straight.stdout
    killed = _run(argv_without_no_xla[1], kill_at=2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = _run(argv_without_no_xla[1])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 2" in resumed.stdout, resumed.stdout
    final = "classifier.keras" if command == "finetune" else "model.keras"
    _same(_weights(tmp_path / "straight" / final), _weights(tmp_path / "killed" / final))
    _same(_state(tmp_path / "straight"), _state(tmp_path / "killed"))
