"""Runs that collide or change under the user (issue 18, point 4): one run per --out, changed settings
refused unless accepted, --steps raised to continue, SIGTERM and Ctrl-C save a checkpoint and stop with
one line."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from paths import child_env
from safety_files import snapshot

from bert4long.cli import main
from bert4long.data.masking import MLMMasker
from bert4long.output_folders import MARKER
from bert4long.training import (
    RunDirectory,
    RunInProgress,
    RunLock,
    TrainingInterrupted,
    build_mlm_model,
    compile_mlm,
    fit_resumable,
    make_optimizer,
    mlm_batches,
)
from bert4long.training.interrupt import sigterm_stops
from bert4long.training.lock import LOCK_NAME

MASKER = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=3)
SEQS = (np.arange(8 * 12).reshape(8, 12) % 50 + 5).astype("int32")


def _data(start):
    return mlm_batches(SEQS, MASKER, 4, seed=1, start_step=start)


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        (folder / f"doc{i}.txt").write_text(" ".join(f"w{j}" for j in rng.integers(0, 50, 40)))
    return folder


def _lock_of(pid, folder):
    with open(os.path.join(folder, LOCK_NAME), "w") as f:
        json.dump({"pid": pid, "host": socket.gethostname()}, f)


def test_a_second_run_on_the_same_out_is_refused_and_a_stale_lock_is_taken_over(tiny_bert, corpus, tmp_path,
                                                                                   capsys):
    config, checkpoint, _ = tiny_bert
    out = tmp_path / "run"
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)   # lives until killed
    try:
        out.mkdir()
        _lock_of(other.pid, out)
        with pytest.raises(RunInProgress, match=rf"Another run is writing to '.*run' \(process {other.pid} on "):
            RunLock(out).acquire()
        before = snapshot(tmp_path)
        argv = ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus),
                "--seq-len", "16", "--out", str(out), "--overwrite"]
        assert main(argv) == 1   # refused before anything is read or removed, --overwrite included
        err = capsys.readouterr().err.strip()
        assert "Another run is writing to" in err and len(err.splitlines()) == 1, err
        assert snapshot(tmp_path) == before
    finally:
        other.kill()
        other.wait()
    with RunLock(out) as lock:   # that process is gone: its lock is taken over, with a message
        assert lock.held and json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
        with RunLock(out):       # the holder itself may take it again (the command, then the training loop)
            pass
        assert (out / LOCK_NAME).exists()
    assert "Taking over the lock" in capsys.readouterr().out and not (out / LOCK_NAME).exists()


@pytest.mark.slow
def test_changed_settings_are_refused_listed_and_accepted_on_request_and_steps_can_be_raised(tiny_bert, corpus,
                                                                                              tmp_path, capsys):
    config, checkpoint, _ = tiny_bert
    common = ["pretrain", "--config", config, "--checkpoint", checkpoint, "--seq-len", "16", "--batch-size", "2",
              "--save-every", "2", "--out", str(tmp_path / "run"), "--no-xla", "--quiet", "--eval-sequences", "1"]
    assert main([*common, "--corpus", str(corpus), "--steps", "2"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    saved = snapshot(tmp_path / "run")
    other = tmp_path / "other"
    other.mkdir()
    for i in range(3):
        (other / f"{i}.txt").write_text(" ".join(f"w{j}" for j in range(i, 40)))
    inputs = snapshot(corpus)
    assert main([*common, "--corpus", str(other), "--steps", "4", "--learning-rate", "0.5"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "different configuration (" in err and "--accept-changes" in err
    for changed in ("corpus: saved", "data_fingerprint: saved", "learning_rate: saved 5e-05 vs now 0.5"):
        assert changed in err, (changed, err)
    assert "steps" not in err   # not a setting that must match: raising it continues a finished run
    after = snapshot(tmp_path / "run")   # unchanged, but for the other corpus's token cache (and its record)
    saved.pop(MARKER), after.pop(MARKER)
    assert {k: after.get(k) for k in saved} == saved and all(k.startswith("corpus_cache/") for k in after.keys() - saved)
    assert snapshot(corpus) == inputs

    assert main([*common, "--corpus", str(corpus), "--steps", "3", "--learning-rate", "1e-4",
                 "--accept-changes"]) == 0
    out = capsys.readouterr().out
    assert "with changed settings (learning_rate: saved 5e-05 vs now 0.0001)" in out
    assert "resumed from step 2" in out and "2 -> 3" in out, out
    assert RunDirectory(str(tmp_path / "run"), {}).latest_step() == 3


def _model(tiny_bert):
    model, _, _ = build_mlm_model(tiny_bert[0], tiny_bert[1])
    compile_mlm(model, make_optimizer(1e-3, 4, warmup_steps=1), jit_compile=False)
    return model


class _CtrlC(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.slow
def test_ctrl_c_saves_the_state_after_the_current_step(tiny_bert, tmp_path):
    straight = _model(tiny_bert)
    fit_resumable(straight, _data, 4, str(tmp_path / "a"), {}, save_every=2, verbose=0, tensorboard=False)
    interrupted = _model(tiny_bert)
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted, match=r"^SIGINT \(Ctrl-C\) received: stopped after step 2 of 4 and saved a "
                                                  r"checkpoint in '.*b/checkpoints'; run the same command") as caught:
        fit_resumable(interrupted, _data, 4, str(tmp_path / "b"), {}, save_every=4, callbacks=[_CtrlC()],
                      verbose=0, tensorboard=False)
    assert caught.value.exit_code == 130 and RunDirectory(str(tmp_path / "b"), {}).latest_step() == 2
    assert signal.getsignal(signal.SIGINT) is handler   # restored
    assert not (tmp_path / "b" / LOCK_NAME).exists()
    # what was saved is exactly the uninterrupted run's state after step 2 (weights, moments, step)
    a = tf.train.load_checkpoint(str(tmp_path / "a" / "checkpoints" / "step-000000002" / "ckpt"))
    b = tf.train.load_checkpoint(str(tmp_path / "b" / "checkpoints" / "step-000000002" / "ckpt"))
    names = set(a.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert names == set(b.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"} and any("iteration" in n for n in names)
    for name in names:
        np.testing.assert_allclose(a.get_tensor(name), b.get_tensor(name), rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_143_with_one_line(tiny_bert, corpus, tmp_path):
    config, checkpoint, _ = tiny_bert
    command = [sys.executable, "-m", "bert4long.cli", "pretrain", "--config", config, "--checkpoint", checkpoint,
               "--corpus", str(corpus), "--seq-len", "16", "--batch-size", "2", "--steps", "100000",
               "--save-every", "100000", "--out", str(tmp_path / "run"), "--no-xla", "--eval-sequences", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=child_env())
    for line in process.stdout:   # wait until training runs (or the process ends: the assertions then say why)
        if line.startswith("steps 1-"):
            break
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate()
    assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("bert4long pretrain: SIGTERM received: stopped after "
                                                           "step "), err[-3000:]
    step = RunDirectory(str(tmp_path / "run"), {}).latest_step()
    assert f"stopped after step {step} of 100000 and saved a checkpoint" in lines[-1] and 0 < step < 100000
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_sigterm_outside_training_stops_cleanly():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingInterrupted, match="SIGTERM received: pretrain stopped outside a training step") as \
            caught, sigterm_stops("pretrain"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)   # the handler raises at the next bytecode
    assert caught.value.exit_code == 143 and signal.getsignal(signal.SIGTERM) is previous


@pytest.mark.slow
def test_a_resume_refuses_fewer_steps_and_changed_training_settings_without_advising_deletion(tiny_bert, corpus,
                                                                                               tmp_path, capsys):
    config, checkpoint, _ = tiny_bert
    common = ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus), "--seq-len", "16",
              "--batch-size", "2", "--save-every", "2", "--out", str(tmp_path / "run"), "--no-xla", "--quiet",
              "--eval-sequences", "1"]
    assert main([*common, "--steps", "4"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    finished = snapshot(tmp_path / "run")
    assert main([*common, "--steps", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already done 4 steps" in err and "--steps 4 or more" in err, err
    for option, value, key in (("--weight-decay", "0.1", "weight_decay"), ("--clipnorm", "5", "clipnorm"),
                               ("--warmup-steps", "1", "warmup_steps"), ("--accumulate", "2", "accumulate"),
                               ("--precision", "mixed_bfloat16", "precision")):
        assert main([*common, "--steps", "6", option, value]) == 1, option
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{key}: saved" in err and "delete" not in err, err
    assert snapshot(tmp_path / "run") == finished


def test_an_unreadable_lock_is_judged_by_age_and_a_takeover_never_removes_a_fresh_lock(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    lock_path = folder / LOCK_NAME
    lock_path.write_text('{"pid": 12')   # cut short (a lock naming no possible process: tests/safety/test_safety_ties.py)
    with pytest.raises(RunInProgress, match="lock file"):   # recent: maybe being written by a live run
        RunLock(folder).acquire()
    os.utime(lock_path, (time.time() - 120, time.time() - 120))
    with RunLock(folder) as lock:   # old and unreadable: taken over
        assert lock.held and json.loads(lock_path.read_text())["pid"] == os.getpid()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock_of(dead.pid, folder)
    stale = RunLock(folder)._holder()
    _lock_of(os.getpid() + 1_000_000, folder)   # another process took the lock over meanwhile
    fresh = lock_path.read_text()
    RunLock(folder)._take_over(stale)   # judged on the old content: must not remove the new lock
    assert lock_path.read_text() == fresh
    assert sorted(os.listdir(folder)) == [LOCK_NAME]   # no takeover guard left behind
