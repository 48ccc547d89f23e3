"""`pretrain` and `finetune --distribute mirrored` run as a user runs them, on two logical CPU devices: XLA is left
out and the run says why, they train, and a run killed (``kill -9``) after a checkpoint resumes to the weights and
training state of a run never interrupted. `pretrain --distribute multiworker` runs as two worker processes on
loopback: both exit 0, only the chief writes, a job whose chief was killed resumes on both workers to the weights of
an uninterrupted job, and workers that would go on from different steps are refused.

A process makes its two logical CPU devices before TensorFlow starts (``RUN``), as a machine with two GPUs has them;
the rest is the command line itself.
"""
import os
import signal
import subprocess
import sys

import pytest
from paths import ROOT, child_env
from subprocesses import loopback_workers
from tiny_runs import (
    assert_same_arrays,
    finetune_args,
    keras_file_weights,
    pretrain_args,
    training_state,
)

RUN = """
import os, signal, sys
import tensorflow as tf
devices, kill_at, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
if devices > 1:   # logical CPU devices, as a machine with that many GPUs has them
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
from bert4long.cli import finetune, main, mlm
for module in (mlm, finetune):   # kill -9 just after the checkpoint of step kill_at (0: never)
    module.saved_line = lambda s, folder, said=module.saved_line: (said(s, folder), s == kill_at and
                                                                  os.kill(os.getpid(), signal.SIGKILL))
sys.exit(main(argv))
"""
ENV = child_env(TF_CPP_MIN_LOG_LEVEL="3")


def _run(argv, kill_at=0):
    return subprocess.run([sys.executable, "-c", RUN, "2", str(kill_at), *argv], cwd=ROOT, capture_output=True,
                          text=True, env=ENV)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_mirrored_trains_says_why_xla_is_out_and_resumes_after_kill_9(tiny_bert, data, tmp_path, command):
    def argv(out):
        if command == "pretrain":
            return [*pretrain_args(tiny_bert, data, out, steps=4), "--distribute", "mirrored"]
        return [*finetune_args(tiny_bert, data["train"], out, steps=4), "--distribute", "mirrored"]

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
    assert_same_arrays(keras_file_weights(tmp_path / "straight" / final), keras_file_weights(tmp_path / "killed" / final))
    assert_same_arrays(training_state(tmp_path / "straight"), training_state(tmp_path / "killed"))


def _workers(argv_of, kill_chief_at=0):
    """Two loopback workers of one job (``argv_of(index)``: worker ``index``'s command line); the chief (worker 0)
    kills itself after the checkpoint of step ``kill_chief_at`` (0: never), and then worker 1, waiting on a
    collective that will never come, is killed too, as a scheduler ends a job that lost a worker."""
    processes = [subprocess.Popen([sys.executable, "-c", RUN, "1", str(kill_chief_at if index == 0 else 0),
                                   *argv_of(index)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env={**ENV, "TF_CONFIG": config})
                 for index, config in enumerate(loopback_workers(2))]
    if kill_chief_at:
        ended = [processes[0].communicate()]
        processes[1].kill()
        ended.append(processes[1].communicate())
    else:
        ended = [process.communicate() for process in processes]
    return [(process.returncode, out, err) for process, (out, err) in zip(processes, ended)]


@pytest.mark.slow
def test_multiworker_trains_writes_on_the_chief_resumes_together_and_refuses_a_split_resume(tiny_bert, data, tmp_path):
    def argv(out, steps=4):
        return [a for a in pretrain_args(tiny_bert, data, out, steps=steps) if a != "--quiet"] + [
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
    assert_same_arrays(keras_file_weights(tmp_path / "straight" / "model.keras"),
                       keras_file_weights(tmp_path / "killed" / "model.keras"))

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

    assert main([*finetune_args(tiny_bert, data["train"], tmp_path / "run"), "--distribute", "multiworker"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("bert4long finetune: error: finetune --distribute multiworker is not supported yet")
    assert "--distribute mirrored" in err[-1] and not os.path.lexists(tmp_path / "run")
