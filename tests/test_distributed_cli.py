"""`pretrain` and `finetune --distribute mirrored` run as a user runs them, on two logical CPU devices: XLA is left
out and the run says why, they train, and a run killed (``kill -9``) after a checkpoint resumes to the weights and
training state of a run never interrupted. `pretrain --distribute multiworker` runs as two worker processes on
loopback: both exit 0, only the chief writes, a job whose chief was killed resumes on both workers to the weights of
an uninterrupted job, and workers that would go on from different steps are refused.

A process makes its two logical CPU devices before TensorFlow starts (``RUN``), as a machine with two GPUs has them;
the rest is the command line itself.
"""
import json
import os
import signal
import socket
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


WORKER = """
import os, signal, sys
from bert4long.cli import main, mlm
kill_at, argv = int(sys.argv[1]), sys.argv[2:]
mlm.saved_line = lambda s, folder, said=mlm.saved_line: (said(s, folder), s == kill_at and
                                                         os.kill(os.getpid(), signal.SIGKILL))
sys.exit(main(argv))
"""


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _workers(argv_of, kill_chief_at=0):
    """Two loopback workers of one job (``argv_of(index)``: worker ``index``'s command line); the chief (worker 0)
    kills itself after the checkpoint of step ``kill_chief_at`` (0: never), and then worker 1, waiting on a
    collective that will never come, is killed too, as a scheduler ends a job that lost a worker."""
    cluster = [f"localhost:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        config = json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})
        processes.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, str(kill_chief_at if index == 0 else 0), *argv_of(index)], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": config}))
    if kill_chief_at:
        processes[0].wait()
        processes[1].kill()
    return [(p.returncode, *p.communicate()) if p.returncode is not None else (p.wait(), *p.communicate())
            for p in processes]


def test_multiworker_trains_writes_on_the_chief_resumes_together_and_refuses_a_split_resume(tiny_bert, data, tmp_path):
    def argv(out, steps=4):
        return [a for a in _pretrain(tiny_bert, data, out, steps=steps) if a != "--quiet"] + [
            "--distribute", "multiworker"]

    ended = _workers(lambda index: argv(tmp_path / "straight"))
    assert [rc for rc, _, _ in ended] == [0, 0], [err[-2000:] for _, _, err in ended]
    assert all("nan" not in out for _, out, _ in ended), ended[0][1][-1500:]   # (the loop keeps no accuracy)
    ended = _workers(lambda index: argv(tmp_path / "killed"), kill_chief_at=2)
    assert ended[0][0] == -signal.SIGKILL, ended[0][2][-2000:]
    assert (tmp_path / "killed" / "checkpoints" / "latest").read_text().strip() == "step-000000002"
    ended = _workers(lambda index: argv(tmp_path / "killed"))
    assert [rc for rc, _, _ in ended] == [0, 0], [err[-2000:] for _, _, err in ended]
    assert all("resumed from step 2" in out for _, out, _ in ended), [out[-1000:] for _, out, _ in ended]
    _same(_weights(tmp_path / "straight" / "model.keras"), _weights(tmp_path / "killed" / "model.keras"))

    # each worker its own --out (no shared file system): worker 1 writes nothing, and a resume cannot agree
    ended = _workers(lambda index: argv(tmp_path / f"own-{index}", steps=2))
    assert [rc for rc, _, _ in ended] == [0, 0], [err[-2000:] for _, _, err in ended]
    assert (tmp_path / "own-0" / "model.keras").exists() and not (tmp_path / "own-1").exists()
    ended = _workers(lambda index: argv(tmp_path / f"own-{index}", steps=4))
    assert [rc for rc, _, _ in ended] == [1, 1]
    for _, _, err in ended:
        assert err.strip().splitlines()[-1].startswith(
            "bert4long pretrain: error: The workers would go on from different steps (2, 0;"), err[-2000:]
        assert "the same --out on a file system they share" in err


def test_finetune_refuses_multiworker_in_one_line_before_any_work(tiny_bert, data, tmp_path, capsys):
    from bert4long.cli import main

    assert main([*_finetune(tiny_bert, data["train"], tmp_path / "run"), "--distribute", "multiworker"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bert4long finetune: error: finetune --distribute multiworker is not supported yet")
    assert "--distribute mirrored" in err[-1] and not os.path.lexists(tmp_path / "run")
