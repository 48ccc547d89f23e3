"""Interrupt safety: atomic checkpoints, kill -9 and resume, config mismatch, disk full, NaN loss."""
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from paths import child_env

from bert4long.data.masking import MLMMasker
from bert4long.training import (
    RunDirectory,
    TrainingDiverged,
    build_mlm_model,
    compile_mlm,
    fit_resumable,
    make_optimizer,
    mlm_batches,
    resume,
)

MASKER = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=3)
SEQS = (np.arange(8 * 12).reshape(8, 12) % 50 + 5).astype("int32")

TRAIN = textwrap.dedent("""
    import sys, time, numpy as np, keras
    from bert4long.data.masking import MLMMasker
    from bert4long.training import build_mlm_model, compile_mlm, fit_resumable, make_optimizer, mlm_batches
    config, checkpoint, out, slow = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    keras.utils.set_random_seed(0)
    masker = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=3)
    seqs = (np.arange(8 * 12).reshape(8, 12) % 50 + 5).astype("int32")
    model, builder, _ = build_mlm_model(config, checkpoint, hierarchical_position=True)
    compile_mlm(model, make_optimizer(1e-3, 12, warmup_steps=2), jit_compile=False)
    class Slow(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(slow)
    fit_resumable(model, lambda s: mlm_batches(seqs, masker, 4, seed=3, start_step=s), steps=12, out_dir=out,
                  config={"model": "tiny"}, save_every=3, callbacks=[Slow()], verbose=0, tensorboard=False)
    builder.save_weights_as_checkpoint(out + "/final.ckpt")
    print("DONE")
""")


def _run(args, **kwargs):
    return subprocess.Popen([sys.executable, "-c", TRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **kwargs)


@pytest.mark.slow
def test_kill_and_resume_matches_uninterrupted_run(tmp_path):
    """Data order, masks, dropout steps and optimizer state are all restored: exact same weights."""
    from bert4long.testing import write_tiny_checkpoint

    config, checkpoint, _ = write_tiny_checkpoint(str(tmp_path / "ckpt"), seed=5, hidden_dropout_prob=0.2)
    env = child_env()
    straight = _run([config, checkpoint, str(tmp_path / "a"), "0"], env=env)
    killed = _run([config, checkpoint, str(tmp_path / "b"), "0.5"], env=env)
    state = tmp_path / "b" / "checkpoints"
    while killed.poll() is None and not (state / "latest").exists():   # (no deadline: however loaded the machine)
        time.sleep(0.2)
    time.sleep(0.7)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    saved = RunDirectory(str(tmp_path / "b"), {}).latest_step()
    assert saved is not None and saved < 12
    resumed = _run([config, checkpoint, str(tmp_path / "b"), "0"], env=env)
    out_resumed, _ = resumed.communicate()
    out_straight, _ = straight.communicate()
    assert "DONE" in out_straight, out_straight[-2000:]
    assert f"resumed from step {saved}" in out_resumed and "DONE" in out_resumed, out_resumed[-2000:]
    a = tf.train.load_checkpoint(str(tmp_path / "a" / "final.ckpt"))
    b = tf.train.load_checkpoint(str(tmp_path / "b" / "final.ckpt"))
    for name in a.get_variable_to_shape_map():
        np.testing.assert_array_equal(a.get_tensor(name), b.get_tensor(name), err_msg=name)


@pytest.fixture
def compiled(tiny_bert):
    config, checkpoint, _ = tiny_bert
    model, _, _ = build_mlm_model(config, checkpoint)
    compile_mlm(model, make_optimizer(1e-3, 4), jit_compile=False)
    return model


@pytest.mark.slow
def test_resume_with_other_config_is_refused(compiled, tmp_path):
    data = lambda s: mlm_batches(SEQS, MASKER, 4, start_step=s)  # noqa: E731
    fit_resumable(compiled, data, 2, str(tmp_path), {"hidden_size": 16}, save_every=2, verbose=0, tensorboard=False)
    with pytest.raises(ValueError, match=r"different configuration \(hidden_size: saved 16 vs now 32\).*--out"):
        fit_resumable(compiled, data, 4, str(tmp_path), {"hidden_size": 32}, save_every=2, verbose=0)


@pytest.mark.slow
def test_resume_into_a_model_with_other_variables_is_refused(compiled, tiny_bert, tmp_path):
    data = lambda s: mlm_batches(SEQS, MASKER, 4, start_step=s)  # noqa: E731
    fit_resumable(compiled, data, 2, str(tmp_path), {"model": "tiny"}, save_every=2, verbose=0, tensorboard=False)
    other, _, _ = build_mlm_model(tiny_bert[0], tiny_bert[1], attention="sliding_window",
                                  attention_config={"window": 4})  # adds global Q/K/V variables
    compile_mlm(other, make_optimizer(1e-3, 4), jit_compile=False)
    with pytest.raises(ValueError, match=r"does not match this model.*another model.*or bert4long version.*--out"):
        fit_resumable(other, data, 4, str(tmp_path), {"model": "tiny"}, save_every=2, verbose=0, tensorboard=False)


def test_disk_full_keeps_previous_checkpoint(tmp_path, monkeypatch):
    step = tf.Variable(1)
    run = RunDirectory(str(tmp_path), {"k": 1})
    checkpoint = tf.train.Checkpoint(step=step)
    run.save(checkpoint, 1)

    def full_disk(ckpt, prefix):
        with open(prefix + ".data-00000-of-00001", "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(resume, "_write_state", full_disk)
    step.assign(2)
    with pytest.raises(OSError, match=r"disk is full.*previous checkpoint \(step 1\) is intact"):
        run.save(checkpoint, 2)
    assert run.latest_step() == 1
    assert not [n for n in os.listdir(run.directory) if n.startswith(".tmp")]
    step.assign(99)
    assert run.restore(checkpoint) == 1 and int(step.numpy()) == 1


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_last_good_checkpoint(compiled, tmp_path):
    data = lambda s: mlm_batches(SEQS, MASKER, 4, start_step=s)  # noqa: E731
    fit_resumable(compiled, data, 2, str(tmp_path), {}, save_every=2, verbose=0, tensorboard=False)

    class Poison(keras.callbacks.Callback):   # weights blow up during step 3 (after the resume)
        def on_train_batch_begin(self, batch, logs=None):
            kernel = self.model.get_layer("MLM-Dense").kernel
            kernel.assign(kernel * np.nan)

    with pytest.raises(TrainingDiverged, match=r"NaN/inf at step 3.*last good checkpoint \(step 2\)"):
        fit_resumable(compiled, data, 4, str(tmp_path), {}, save_every=1, callbacks=[Poison()], verbose=0,
                      tensorboard=False)
    assert RunDirectory(str(tmp_path), {}).latest_step() == 2


@pytest.mark.slow
def test_model_only_restore_of_a_full_state_is_quiet(compiled, tiny_bert, tmp_path):
    """Restoring just the model (as an export does) reads its trained weights and leaves the saved optimizer
    values unread without TensorFlow's 'Value in checkpoint could not be found' warnings (logged when the
    restored model is deleted)."""
    import gc
    import logging

    data = lambda s: mlm_batches(SEQS, MASKER, 4, start_step=s)  # noqa: E731
    fit_resumable(compiled, data, 2, str(tmp_path), {"model": "tiny"}, save_every=2, verbose=0, tensorboard=False)
    fresh, _, _ = build_mlm_model(tiny_bert[0], tiny_bert[1])
    assert RunDirectory(str(tmp_path), {"model": "tiny"}).restore(tf.train.Checkpoint(model=fresh)) == 2
    for trained, restored in zip(compiled.weights, fresh.weights):
        np.testing.assert_array_equal(trained.numpy(), restored.numpy(), err_msg=trained.path)
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("tensorflow").addHandler(handler)
    try:
        del fresh
        gc.collect()
    finally:
        logging.getLogger("tensorflow").removeHandler(handler)
    assert not [m for m in messages if "could not be found" in m], messages[:3]


@pytest.mark.slow
def test_the_custom_loop_checkpoints_every_interval_and_resumes(compiled, tmp_path, monkeypatch, capsys):
    """`fit_resumable`'s `fit_distributed` path (MultiWorkerMirroredStrategy's; forced here on one device) saves at
    every --save-every interval and resumes from the last; the one-fit path counts the same steps."""
    from bert4long.training import loop

    monkeypatch.setattr(loop, "needs_custom_loop", lambda model: True)
    data = lambda s: mlm_batches(SEQS, MASKER, 4, start_step=s)  # noqa: E731
    saved = []
    summary = fit_resumable(compiled, data, 3, str(tmp_path), {}, save_every=2, verbose=0, tensorboard=False,
                            keep=5, on_save=lambda step, _: saved.append(step))
    assert saved == [2, 3] and summary["steps"] == 3 and np.isfinite(summary["logs"]["loss"])
    summary = fit_resumable(compiled, data, 5, str(tmp_path), {}, save_every=2, verbose=0, tensorboard=False,
                            keep=5, on_save=lambda step, _: saved.append(step))
    assert saved == [2, 3, 4, 5] and summary["start_step"] == 3 and "resumed from step 3" in capsys.readouterr().out
