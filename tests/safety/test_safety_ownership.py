"""Ownership by record, not by name (issue 36, part A): a command deletes or replaces only what the marker records
as bert4long's. The demo and a pretrain run never take each other's folder; files named like bert4long's
temporaries are the user's; a temporary is always a new file; a user's TensorBoard event file is theirs; no output
inside a checkpoint's folder or the installed bert4long. Every case hashes the user's files before and after."""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest
from paths import ROOT, child_env
from safety_files import snapshot

from bert4long import pretrained
from bert4long.cli import main
from bert4long.data.corpus import Corpus, save_corpus_cache
from bert4long.output_folders import MARKER, atomic_write
from bert4long.testing import write_tiny_checkpoint


def _umasked(mode):
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def _pretrain(tiny_bert, corpus, out, *extra, steps=2):
    config, checkpoint, _ = tiny_bert
    return ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus), "--seq-len", "16",
            "--batch-size", "2", "--save-every", "1", "--steps", str(steps), "--out", str(out), "--no-xla", "--quiet",
            "--eval-sequences", "1", *extra]


@pytest.fixture(scope="module")
def finished(tiny_bert, tmp_path_factory):
    """``(corpus, run)``: a corpus folder and a finished 2-step `pretrain` run on it (tests work on copies)."""
    root = tmp_path_factory.mktemp("ownership")
    corpus = root / "corpus"
    corpus.mkdir()
    for d in range(6):
        (corpus / f"doc{d}.txt").write_text(" ".join(f"w{(i * (d + 3)) % 40}" for i in range(300)))
    assert main(_pretrain(tiny_bert, corpus, root / "run")) == 0
    return corpus, root / "run"


@pytest.fixture
def corpus(finished):
    return finished[0]


@pytest.fixture
def run(finished, tmp_path):
    """A copy of the finished run, in this test's folder."""
    shutil.copytree(finished[1], tmp_path / "run", symlinks=True)
    return tmp_path / "run"


def _demo(tiny_bert, corpus, out):
    return ["pretrain", "--demo", "--checkpoint", tiny_bert[1], "--corpus", str(corpus), "--steps", "2",
            "--batch-size", "2", "--eval-sequences", "4", "--no-xla", "--out", str(out)]


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _only(found, names):
    return {name: found.get(name) for name in names}


@pytest.mark.slow
def test_the_demo_and_a_pretrain_run_never_take_each_others_folder(tiny_bert, corpus, run, tmp_path, capsys):
    demo = tmp_path / "demo"
    assert main(_demo(tiny_bert, corpus, demo)) == 0, capsys.readouterr().err
    capsys.readouterr()
    written = {folder: snapshot(folder) for folder in (run, demo)}
    assert main(_demo(tiny_bert, corpus, run)) == 1   # was: the run's checkpoint, config and vocab replaced, exit 0
    err = _one_line_error(capsys)
    assert "holds the output of an earlier `bert4long pretrain`: pass --overwrite to replace it, or choose" in err
    assert main(_pretrain(tiny_bert, corpus, demo)) == 1
    err = _one_line_error(capsys)
    assert "holds the output of an earlier `bert4long pretrain --demo`: pass --overwrite to replace it" in err
    assert {folder: snapshot(folder) for folder in (run, demo)} == written
    short = tmp_path / "short.jsonl"   # a demo over its own folder passes the folder check, as before: it stops
    short.write_text('{"text": "w1 w2 w3"}\n' * 3)   # later, at the corpus (a pretrain resume: the tests below)
    assert main(_demo(tiny_bert, short, demo)) == 1
    assert "no held-out document reaches 64 tokens" in _one_line_error(capsys)
    assert {folder: snapshot(folder) for folder in (run, demo)} == written


LOOKALIKES = ["draft.tmp-3.md", "results.tmp-2024.csv", "model.keras.tmp-999.keras",
              os.path.join("old.tmp-step-archive", "a.txt"), os.path.join("old.tmp-step-archive", "b.txt"),
              os.path.join("corpus_cache", "tmpmydata.tmp"),
              os.path.join("checkpoints", ".tmp-step-000000009-4242", "run.json"),
              os.path.join("checkpoints", "step-000000000-notes", "plan.txt"),   # named like a state
              os.path.join("checkpoints", "step-000000001", "mine.txt")]   # in a state the resume prunes


@pytest.mark.slow
def test_names_that_look_like_bert4longs_are_the_users(tiny_bert, corpus, run, tmp_path, capsys):
    """A plain resume leaves files (and links) named like temporaries or training states alone, and keeps a state
    holding a file of the user's; --overwrite refuses, naming them."""
    outside = tmp_path / "outside"
    for name in LOOKALIKES:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(f"mine: {name}")
    outside.mkdir()
    (outside / "kept.txt").write_text("mine")
    os.symlink(outside / "kept.txt", run / "summary.json.tmp-77")
    os.symlink(outside, run / "checkpoints" / ".tmp-step-000000008-77")
    names = [*LOOKALIKES, "summary.json.tmp-77", os.path.join("checkpoints", ".tmp-step-000000008-77") + "/"]
    users, theirs = _only(snapshot(run), names), snapshot(outside)
    assert main(_pretrain(tiny_bert, corpus, run, steps=3)) == 0, capsys.readouterr().err   # was: all deleted
    assert _only(snapshot(run), names) == users and snapshot(outside) == theirs
    capsys.readouterr()
    before = snapshot(run)
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 1
    err = _one_line_error(capsys)
    assert "also holds files it did not write (draft.tmp-3.md, model.keras.tmp-999.keras, results.tmp-2024.csv" in err
    assert "and 6 more); nothing was changed" in err, err
    assert snapshot(run) == before and snapshot(outside) == theirs


# A run killed (as by kill -9) while writing: a training state, three files and one more created but not yet
# recorded with its inode.
KILLED = """
import contextlib, os, sys
from bert4long.output_folders import OutputFolder, temporary

run = sys.argv[1]
output = OutputFolder(run, "pretrain", resume=True)
output.open_run()
hold = OutputFolder.hold_temporary
with output.writing(), contextlib.ExitStack() as stack:
    state = stack.enter_context(temporary(os.path.join(run, "checkpoints"), ".tmp-step-000000003-", folder=True))
    with open(os.path.join(state, "ckpt.index"), "w") as f:
        f.write("half written")
    for name in ("model.keras.tmp-", "summary.json.tmp-", "bert_config.json.tmp-"):
        with open(stack.enter_context(temporary(run, name)), "w") as f:
            f.write("half written")
    OutputFolder.hold_temporary = lambda self, path, folder, inode=None: (
        os._exit(9) if inode is not None else hold(self, path, folder))
    stack.enter_context(temporary(run, "vocab.txt.tmp-"))
"""


@pytest.mark.slow
def test_only_the_temporaries_a_killed_run_recorded_go(tiny_bert, corpus, run, tmp_path, capsys):
    """The next start removes what the killed run recorded, while it is still what it created: not a user's file
    put in its place, not a link, and nothing a damaged marker names outside the folder."""
    outside = tmp_path / "outside"
    killed = subprocess.run([sys.executable, "-c", KILLED, str(run)], cwd=ROOT, capture_output=True, text=True,
                            env=child_env())
    assert killed.returncode == 9, killed.stderr[-2000:]
    marker = json.loads((run / MARKER).read_text())
    temporaries = {name.split(".tmp-")[0]: run / name for name in marker["temporaries"]}
    assert sorted(temporaries) == ["bert_config.json", "checkpoints/", "model.keras", "summary.json", "vocab.txt"]
    outside.mkdir()
    (outside / "kept.txt").write_text("mine")
    (tmp_path / "mine.json").write_text("my summary")
    os.replace(tmp_path / "mine.json", temporaries["summary.json"])   # the user's file, under the recorded name
    os.remove(temporaries["bert_config.json"])
    os.symlink(outside / "kept.txt", temporaries["bert_config.json"])
    inode = os.stat(outside / "kept.txt").st_ino
    marker["temporaries"].update({os.path.join("..", "outside", "kept.txt"): {"folder": False, "inode": inode},
                                  str(outside / "kept.txt"): {"folder": False, "inode": inode}})
    (run / MARKER).write_text(json.dumps(marker))
    names = [str(temporaries[k].relative_to(run)) for k in ("summary.json", "bert_config.json")]
    users, theirs = _only(snapshot(run), names), snapshot(outside)

    assert main(_pretrain(tiny_bert, corpus, run, steps=3)) == 0, capsys.readouterr().err
    for name in ("checkpoints/", "model.keras", "vocab.txt"):
        assert not os.path.lexists(temporaries[name]), name
    assert _only(snapshot(run), names) == users and snapshot(outside) == theirs
    assert json.loads((run / MARKER).read_text())["temporaries"] == {}
    capsys.readouterr()
    before = snapshot(run)
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 1
    err = _one_line_error(capsys)
    assert all(name in err for name in names), err
    assert snapshot(run) == before and snapshot(outside) == theirs


@pytest.mark.slow
def test_a_temporary_is_a_new_file_never_an_existing_name(tiny_bert, tmp_path, capsys):
    """predict --output and atomic_write leave a file or link at the old temporary name (NAME.tmp-PID) alone; the
    file renamed into place has open()'s permissions (the corpus cache's too, not mkstemp's 0o600)."""
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    (work / "docs.jsonl").write_text('{"text": "w1 w2 w3"}\n')
    (work / f"out.jsonl.tmp-{os.getpid()}").write_text("the user's draft")
    outside.write_text("mine")
    os.symlink(outside, work / f"model.keras.tmp-{os.getpid()}.keras")
    before = snapshot(work)
    config, checkpoint, vocab = tiny_bert
    assert main(["predict", "--checkpoint", checkpoint, "--config", config, "--vocab", vocab, "--input",
                 str(work / "docs.jsonl"), "--output", str(work / "out.jsonl"), "--quiet"]) == 0, \
        capsys.readouterr().err   # was: the draft truncated, filled and renamed onto out.jsonl
    atomic_write(work / "model.keras", lambda tmp: open(tmp, "w").write("model"), suffix=".keras")
    after = snapshot(work)
    assert {k: v for k, v in after.items() if k not in ("out.jsonl", "model.keras")} == before
    assert outside.read_text() == "mine" and (work / "model.keras").read_text() == "model"
    assert len((work / "out.jsonl").read_text().splitlines()) == 1
    cache = tmp_path / "cache" / "corpus-x.npz"
    save_corpus_cache(Corpus([np.arange(3)], [None], ["a:1"], {}), str(cache))
    for path in (work / "out.jsonl", work / "model.keras", cache):
        assert path.stat().st_mode & 0o777 == _umasked(0o666), path
    assert os.listdir(cache.parent) == ["corpus-x.npz"]


@pytest.mark.slow
def test_a_users_event_files_in_logs_are_theirs(tiny_bert, corpus, run, capsys):
    """The event files bert4long's writer made are recorded by name and replaced by --overwrite; a user's are
    refused, named, and kept."""
    pytest.importorskip("tensorboard")
    own = sorted(str(p.relative_to(run)) for p in run.glob("logs/**/events.out.tfevents.*"))
    assert own and all(json.loads((run / MARKER).read_text())["files"][name] == {"growing": True} for name in own)
    mine = [os.path.join("logs", "events.out.tfevents.1700000000.laptop.1.v2"),
            os.path.join("logs", "train", "events.out.tfevents.1700000001.laptop.2.v2")]
    for name in mine:
        (run / name).write_bytes(b"my experiment")
    capsys.readouterr()
    before = snapshot(run)
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 1   # was: deleted with the run's own
    err = _one_line_error(capsys)
    assert all(name in err for name in mine), err
    assert snapshot(run) == before
    for name in mine:
        (run / name).unlink()
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 0, capsys.readouterr().err
    assert not any((run / name).exists() for name in own) and list(run.glob("logs/train/events.out.tfevents.*"))


def test_no_output_inside_a_checkpoints_folder_or_the_installed_bert4long(tmp_path, capsys):
    """A checkpoint given as a prefix stands for its folder; the package (its built-in model's folder included)
    is never an output. Refused in one line before any work; nothing is written."""
    model = tmp_path / "model"
    write_tiny_checkpoint(str(model), seed=3)
    prefix = str(model / "bert_model.ckpt")
    (tmp_path / "corpus.txt").write_text(" ".join(f"w{i % 40}" for i in range(300)))
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": f"w{i} w{i + 1}", "label": "ab"[i % 2]}) + "\n"
                                                  for i in range(4)))
    corpus, train = ["--corpus", str(tmp_path / "corpus.txt")], ["--train", str(tmp_path / "train.jsonl")]
    quick = ["--seq-len", "16", "--steps", "1", "--batch-size", "2", "--no-xla", "--quiet"]
    commands = {"pretrain": ["pretrain", "--checkpoint", prefix, *corpus, *quick, "--eval-sequences", "1"],
                "finetune": ["finetune", "--checkpoint", prefix, *train, *quick],
                "export": ["export", "--checkpoint", prefix],
                "extend": ["extend", "--checkpoint", prefix, "--method", "copy", "--max-position", "32"]}
    before = snapshot(tmp_path)
    for name, argv in commands.items():
        assert main([*argv, "--out", str(model / name)]) == 1, name   # was: written inside the model's folder
        assert f"is inside the folder of the input {prefix!r}" in _one_line_error(capsys), name
    assert snapshot(tmp_path) == before
    package = pretrained.path()
    shipped, out = snapshot(package), os.path.join(package, f"run-{uuid.uuid4().hex}")
    try:
        for name in ("pretrain", "export"):
            assert main([*commands[name], "--out", out]) == 1, name
            assert "is inside the installed bert4long" in _one_line_error(capsys), name
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(out)
    assert snapshot(package) == shipped and snapshot(tmp_path) == before
