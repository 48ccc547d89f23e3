"""Output folders and file faults (issue 18, points 1 and 5): nothing the user did not ask to replace is
touched, an unwritable --out fails before any work, a full disk leaves no half-written or temporary files,
and a damaged checkpoint is named. Every case hashes the inputs before and after."""
import argparse
import errno
import os
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from safety_files import snapshot

import bert4long
from bert4long.checkpoints import tf_format
from bert4long.checkpoints.tf_format import CheckpointReader, write_checkpoint
from bert4long.cli import main
from bert4long.output_folders import MARKER, OutputFolder, atomic_write
from bert4long.testing import write_tiny_checkpoint
from bert4long.training import RunDirectory, resume


@pytest.fixture
def model_dir(tmp_path):
    """A user's folder: a tiny checkpoint, its config and vocab, and a notes file of their own."""
    folder = tmp_path / "model"
    write_tiny_checkpoint(str(folder), seed=3)
    (folder / "notes.txt").write_text("my notes")
    return folder


def _error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err   # one line, no traceback
    return err


def test_export_extend_convert_pretrain_refuse_folders_they_did_not_make(model_dir, tmp_path, capsys, monkeypatch):
    ckpt = str(model_dir / "bert_model.ckpt")
    users = tmp_path / "users"
    users.mkdir()
    (users / "thesis.tex").write_text("months of work")
    before = snapshot(tmp_path)
    cases = [
        (["export", "--checkpoint", ckpt, "--out", str(users)], "already holds files bert4long did not write"),
        (["export", "--checkpoint", ckpt, "--out", str(model_dir)], "is the folder of the input"),
        (["extend", "--checkpoint", ckpt, "--method", "copy", "--max-position", "32", "--out", str(model_dir)],
         "is the folder of the input"),
        (["extend", "--checkpoint", ckpt, "--method", "copy", "--max-position", "32", "--out", str(users),
          "--overwrite"], "--overwrite replaces only folders bert4long made"),
        (["pretrain", "--checkpoint", ckpt, "--corpus", str(users), "--seq-len", "16", "--out", str(model_dir)],
         "is the folder of the input"),
        (["pretrain", "--checkpoint", ckpt, "--corpus", str(users), "--seq-len", "16", "--out", str(users / "run")],
         "is inside the input folder"),
        (["convert", "--checkpoint", str(model_dir), "--out", str(model_dir / "converted")],
         "is inside the input folder"),
        (["finetune", "--checkpoint", ckpt, "--train", str(users / "thesis.tex"), "--labels",
          str(users / "thesis.tex"), "--seq-len", "16", "--out", str(tmp_path)], "contains the input"),
    ]
    for argv, expected in cases:
        assert main(argv) == 1, argv
        assert expected in _error(capsys), argv
    monkeypatch.chdir(users)   # `--out .` in a folder of the user's
    assert main(["export", "--checkpoint", ckpt, "--out", "."]) == 1
    assert "already holds files bert4long did not write (thesis.tex)" in _error(capsys)
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_export_writes_a_marked_readable_folder_and_overwrites_only_with_overwrite(model_dir, tmp_path, capsys):
    ckpt = str(model_dir / "bert_model.ckpt")
    before = snapshot(model_dir)
    served = tmp_path / "served"
    assert main(["export", "--checkpoint", ckpt, "--out", str(served)]) == 0, capsys.readouterr().err
    assert (served / "saved_model.pb").is_file() and (served / MARKER).is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert served.stat().st_mode & 0o777 == 0o777 & ~umask        # as mkdir makes it, not 0700
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []   # no staging left beside
    exported = snapshot(served)
    assert main(["export", "--checkpoint", ckpt, "--out", str(served)]) == 1
    assert "holds the output of an earlier `bert4long export`: pass --overwrite" in _error(capsys)
    assert snapshot(served) == exported
    (served / "notes.txt").write_text("the user's")   # added later: --overwrite must not take it
    assert main(["export", "--checkpoint", ckpt, "--out", str(served), "--overwrite"]) == 1
    assert "also holds files it did not write (notes.txt); nothing was changed" in _error(capsys)
    (served / "notes.txt").unlink()
    (served / "saved_model.pb").write_bytes(b"edited")   # a file bert4long wrote, changed since: kept as well
    assert main(["export", "--checkpoint", ckpt, "--out", str(served), "--overwrite"]) == 1
    assert "also holds files it did not write (saved_model.pb); nothing was changed" in _error(capsys)
    assert (served / "saved_model.pb").read_bytes() == b"edited"
    (served / "saved_model.pb").unlink()   # gone: --overwrite replaces the rest
    assert main(["export", "--checkpoint", ckpt, "--out", str(served), "--overwrite"]) == 0
    assert (served / "saved_model.pb").is_file() and (served / "variables").is_dir()
    assert snapshot(model_dir) == before


def test_output_folder_staging_failure_leaves_the_target_as_it_was(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), OutputFolder(target, "export") as staging:
        (open(os.path.join(staging, "part"), "w")).close()
        raise RuntimeError("failed half way")
    assert not target.exists() and os.listdir(tmp_path) == []
    target.mkdir()   # an empty folder is accepted; staging happens inside it and leaves nothing else
    with OutputFolder(target, "export") as staging:
        open(os.path.join(staging, "saved_model.pb"), "w").close()
    assert sorted(os.listdir(target)) == [MARKER, "saved_model.pb"]

    run = tmp_path / "run"   # a training run's folder: resumed as it is, or started over with overwrite
    OutputFolder(run, "pretrain", resume=True).open_run()
    (run / "checkpoints").mkdir()
    assert OutputFolder(run, "pretrain", resume=True).state == "resume"
    with pytest.raises(ValueError, match=r"earlier `bert4long pretrain`: pass --overwrite"):
        OutputFolder(run, "finetune", resume=True)
    OutputFolder(run, "pretrain", resume=True, overwrite=True).open_run()
    assert sorted(os.listdir(run)) == [MARKER, "checkpoints"]   # no file was recorded; the empty folder stays


def test_unwritable_out_fails_before_any_work(model_dir, tmp_path, capsys):
    ckpt = str(model_dir / "bert_model.ckpt")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "w1 w2 w3"}\n')
    before = snapshot(tmp_path)
    inputs = snapshot(model_dir)
    assert main(["pretrain", "--checkpoint", ckpt, "--corpus", str(corpus), "--seq-len", "16", "--out", str(corpus)]) == 1
    assert "is a file, not a folder" in _error(capsys)
    assert main(["export", "--checkpoint", ckpt, "--out", str(corpus / "served")]) == 1
    assert f"cannot be made there: {str(corpus)!r} is a file" in _error(capsys)
    assert snapshot(tmp_path) == before
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    if os.geteuid() == 0:   # root writes through permission bits: use a read-only file system
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(readonly)], check=False).returncode:
            pytest.skip("needs a read-only folder: not root-free and mount is not allowed")
    else:
        readonly.chmod(0o555)
    try:
        assert main(["pretrain", "--checkpoint", ckpt, "--corpus", str(corpus), "--seq-len", "16", "--out",
                     str(readonly / "run")]) == 1
        out, err = capsys.readouterr()
        assert "Cannot write the output folder" in err and "Choose a folder you can write to" in err, err
        assert "MLM accuracy" not in out and "head" not in out   # no model was loaded or evaluated
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(readonly)], check=False)
    assert main(["pretrain", "--checkpoint", ckpt, "--corpus", str(tmp_path / "missing"), "--seq-len", "16", "--out",
                 str(tmp_path / "run")]) == 1   # failed before writing anything: no folder is left behind
    assert "no such file or folder" in _error(capsys) and not (tmp_path / "run").exists()
    readonly.rmdir()
    assert snapshot(tmp_path) == before and snapshot(model_dir) == inputs and corpus.read_text() == '{"text": "w1 w2 w3"}\n'


def _enospc(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(None, None, "x.data-00000-of-00001.tempstate1; No space left on device "
                                                       "[Op:SaveV2]")


def test_full_disk_keeps_every_previous_file_and_removes_temporaries(tmp_path, monkeypatch):
    # a training checkpoint (TensorFlow's SaveV2 reports ENOSPC as ResourceExhaustedError)
    run = RunDirectory(str(tmp_path / "run"), {"k": 1})
    step = tf.Variable(1)
    checkpoint = tf.train.Checkpoint(step=step)
    run.save(checkpoint, 1)
    saved = snapshot(tmp_path / "run")
    monkeypatch.setattr(resume, "_write_state", lambda ckpt, prefix: _enospc())
    with pytest.raises(OSError) as caught:
        run.save(checkpoint, 2)
    message = str(caught.value)
    assert caught.value.errno == errno.ENOSPC and "\n" not in message
    assert "the disk is full" in message and "previous checkpoint (step 1) is intact" in message
    assert snapshot(tmp_path / "run") == saved   # no .tmp-step-*, `latest` unchanged

    # a Google checkpoint written over an older one
    prefix = str(tmp_path / "ckpt" / "bert_model.ckpt")
    write_checkpoint(prefix, {"a": np.ones(3, "float32")})
    old = snapshot(tmp_path / "ckpt")
    def half_written(prefix, *args):   # the data file half written when the disk fills
        with open(prefix + ".data-00000-of-00001", "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tf_format, "write_bundle", half_written)
    with pytest.raises(OSError, match=r"Could not write the checkpoint .*bert_model.ckpt': the disk is full"):
        write_checkpoint(prefix, {"a": np.zeros(3, "float32")})
    assert snapshot(tmp_path / "ckpt") == old

    # model.keras / bert_config.json: the half-written temporary file goes, the old file stays
    path = tmp_path / "model.keras"
    path.write_text("old model")

    def half_then_full(tmp):
        with open(tmp, "w") as f:
            f.write("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"model.keras': the disk is full \(nothing was left half written\)"):
        atomic_write(str(path), half_then_full, suffix=".keras")
    assert path.read_text() == "old model" and sorted(os.listdir(tmp_path)) == ["ckpt", "model.keras", "run"]


@pytest.mark.slow
def test_a_full_disk_under_export_and_predict_is_one_line_naming_the_output(model_dir, tmp_path, capsys, monkeypatch):
    """export's SavedModel (TensorFlow's ResourceExhaustedError) and predict's --output (ENOSPC while it is written)
    say it as pretrain and finetune do, leaving no half-written output or temporary behind (was: a traceback)."""
    import keras

    from bert4long.cli import predict

    prefix, inputs = str(model_dir / "bert_model.ckpt"), snapshot(model_dir)
    monkeypatch.setattr(type(keras.export.ExportArchive()), "write_out", _enospc)   # (its backend's class)
    served = tmp_path / "served"
    assert main(["export", "--checkpoint", prefix, "--out", str(served)]) == 1
    assert f"Could not write {str(served)!r}: the disk is full (nothing was left half written). Free some space and " \
           "run the command again." in _error(capsys)
    documents = tmp_path / "docs.jsonl"
    documents.write_text('{"text": "w1 w2"}\n{"text": "w3"}\n')

    def full(*args, **kwargs):   # the first batch's answers, then no space for them
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(predict, "_predict_batch", full)
    scored = tmp_path / "scored.jsonl"
    assert main(["predict", "--checkpoint", prefix, "--input", str(documents), "--output", str(scored)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"bert4long predict: error: [Errno 28] Could not write {str(scored)!r}: the disk is "
                              "full (nothing was left half written)") and "Traceback" not in "".join(err), err
    assert sorted(os.listdir(tmp_path)) == ["docs.jsonl", "model"] and snapshot(model_dir) == inputs


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="a real full disk needs a tmpfs")
def test_a_real_full_disk_keeps_the_previous_training_checkpoint(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=False).returncode:
        pytest.skip("mount is not allowed here")
    try:
        weights = tf.Variable(np.zeros(1000, "float32"))
        run = RunDirectory(str(disk), {"k": 1})
        run.save(tf.train.Checkpoint(w=weights), 1)
        saved = snapshot(disk)
        big = tf.train.Checkpoint(w=weights, more=tf.Variable(np.zeros(200_000, "float32")))   # 800 kB
        with pytest.raises(OSError, match=r"the disk is full\). The previous checkpoint \(step 1\) is intact"):
            run.save(big, 2)
        assert snapshot(disk) == saved
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_damaged_checkpoint_is_named_in_one_error(tmp_path, capsys):
    _, prefix, _ = write_tiny_checkpoint(str(tmp_path / "model"), seed=4)
    data = prefix + ".data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    damaged = snapshot(tmp_path / "model")
    assert main(["info", str(tmp_path / "model")]) == 1   # info reads the data file too
    assert f"Checkpoint data file {data!r} is damaged or truncated" in _error(capsys)
    with pytest.raises(ValueError, match=r"data-00000-of-00001' is damaged or truncated: reading '.*' failed "
                                         r"\(.* is truncated: '.*' needs bytes \d+-\d+ of it\.\)\. Copy or download"):
        CheckpointReader(prefix).check()
    assert main(["export", "--checkpoint", prefix, "--out", str(tmp_path / "served")]) == 1
    assert "is damaged or truncated" in _error(capsys) and not (tmp_path / "served").exists()
    assert snapshot(tmp_path / "model") == damaged

    run = RunDirectory(str(tmp_path / "run"), {})
    step = tf.Variable(np.zeros(4096, "float32"))
    run.save(tf.train.Checkpoint(step=step), 5)
    state = tmp_path / "run" / "checkpoints" / "step-000000005"
    data = next(state.glob("ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"saved state '.*step-000000005' is damaged \(IndexError: Read less bytes"
                                         r".*Delete that folder"):
        run.restore(tf.train.Checkpoint(step=step))


def test_a_predict_output_file_may_not_be_an_input_or_inside_an_input_folder(tmp_path):
    from bert4long.cli.output_guard import checked_output

    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text("a document")
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "a document"}\n')
    before = snapshot(tmp_path)
    for given, output, expected in [(docs, docs, "is the input"), (texts, texts / "out.jsonl", "is inside the input"),
                                    (docs, texts, "is a folder")]:
        args = argparse.Namespace(command="predict", input=str(given), output=str(output), run=None,
                                  checkpoint=None, config=None, vocab=None)
        with pytest.raises(ValueError, match=expected):
            checked_output(args)
    checked_output(argparse.Namespace(command="predict", input=str(docs), output=str(tmp_path / "p.jsonl")))
    assert snapshot(tmp_path) == before


def test_write_checkpoint_shards_data_under_a_size_limit(tmp_path):
    """``max_shard_bytes`` splits the data file; TF's own reader reads every tensor back through the one index,
    and a rewrite with another shard count leaves no stale shard behind."""
    rng = np.random.default_rng(0)
    variables = {f"layer_{i}/kernel": rng.normal(size=(64, 64)).astype("float32") for i in range(5)}   # 16 KiB each
    variables["big"] = rng.normal(size=(128, 128)).astype("float32")   # 64 KiB: larger than the limit
    prefix = str(tmp_path / "bert_model.ckpt")
    write_checkpoint(prefix, variables, max_shard_bytes=40_000)
    data = sorted(f for f in os.listdir(tmp_path) if ".data-" in f)
    assert len(data) == 4 and data[0].endswith("-of-00004")   # big | layer_0, layer_1 | layer_2, layer_3 | layer_4
    sizes = sorted(os.path.getsize(tmp_path / f) for f in data)
    assert sizes[:-1] == [16384, 32768, 32768] and sizes[-1] == 65536   # only the one larger variable exceeds it
    reader = tf.train.load_checkpoint(prefix)
    for name, value in variables.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    write_checkpoint(prefix, variables)   # one file again: the four shards go
    assert sorted(os.listdir(tmp_path)) == ["bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
    np.testing.assert_array_equal(tf.train.load_checkpoint(prefix).get_tensor("big"), variables["big"])


def test_every_shipped_file_is_under_five_megabytes():
    """The built-in model is committed to git; the project keeps each file under 5 MB (its data file is sharded)."""
    folder = os.path.join(os.path.dirname(bert4long.__file__), "pretrained")
    sizes = {os.path.join(root, f): os.path.getsize(os.path.join(root, f))
             for root, _, files in os.walk(folder) for f in files}
    assert sizes and max(sizes.values()) < 5 * 10**6, max(sizes.items(), key=lambda kv: kv[1])
