"""--overwrite replaces only what bert4long wrote, and only once every input has been read and the model built
(issue 27, point 1). Every case hashes the inputs and the user's files before and after."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from paths import ROOT, child_env
from safety_files import snapshot

from bert4long.cli import main
from bert4long.output_folders import MARKER


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(6):
        (folder / f"doc{i}.txt").write_text(" ".join(f"w{(i * 7 + j) % 50}" for j in range(40)))
    return folder


def _pretrain(tiny_bert, corpus, out, *extra, steps=2):
    config, checkpoint, _ = tiny_bert
    return ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus), "--seq-len", "16",
            "--batch-size", "2", "--save-every", "1", "--steps", str(steps), "--out", str(out), "--no-xla", "--quiet",
            "--eval-sequences", "1", *extra]


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.slow
def test_a_failing_overwrite_leaves_the_earlier_run_as_it_was(tiny_bert, corpus, tmp_path, capsys):
    """A bad corpus file or a wrong --model fails before anything in --out is moved or deleted."""
    run = tmp_path / "run"
    assert main(_pretrain(tiny_bert, corpus, run)) == 0, capsys.readouterr().err
    capsys.readouterr()
    finished, inputs = snapshot(run), snapshot(corpus)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": \n')   # a broken line
    assert main(_pretrain(tiny_bert, bad, run, "--overwrite")) == 1
    assert "bad.jsonl" in _one_line_error(capsys)
    assert snapshot(run) == finished
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite", "--model", "albert")) == 1
    _one_line_error(capsys)
    assert snapshot(run) == finished and snapshot(corpus) == inputs
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 0   # a good one replaces it
    assert json.loads((run / MARKER).read_text())["files"]


@pytest.mark.slow
def test_user_files_at_any_depth_are_refused_by_name_and_kept(tiny_bert, corpus, tmp_path, capsys):
    """Files added to a finished run (top level, in logs/, in checkpoints/), also across a resume, block
    --overwrite; the message names them, and nothing is changed."""
    run = tmp_path / "run"
    assert main(_pretrain(tiny_bert, corpus, run)) == 0, capsys.readouterr().err
    (run / "NOTES.txt").write_text("what I tried")
    assert main(_pretrain(tiny_bert, corpus, run, steps=3)) == 0   # a resume does not adopt the notes
    capsys.readouterr()
    os.makedirs(run / "logs", exist_ok=True)
    (run / "logs" / "my_plot.png").write_bytes(b"png")
    (run / "checkpoints" / "keep.txt").write_text("mine")
    before = snapshot(run)
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 1
    err = _one_line_error(capsys)
    for name in ("NOTES.txt", os.path.join("logs", "my_plot.png"), os.path.join("checkpoints", "keep.txt")):
        assert name in err, err
    assert snapshot(run) == before
    for path in (run / "NOTES.txt", run / "logs" / "my_plot.png", run / "checkpoints" / "keep.txt"):
        path.unlink()
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 0
    assert "resumed" not in capsys.readouterr().out   # started over


@pytest.mark.slow
def test_overwrite_after_kill_9_refuses_files_added_since_and_replaces_the_rest(tiny_bert, corpus, tmp_path, capsys):
    run = tmp_path / "run"
    command = [sys.executable, "-m", "bert4long.cli", *_pretrain(tiny_bert, corpus, run, steps=400)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=child_env())
    while not list((run / "checkpoints").glob("step-*")) and process.poll() is None:
        time.sleep(0.5)
    assert process.poll() is None, process.communicate()[0][-2000:]
    process.send_signal(signal.SIGKILL)
    process.wait()
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "notes.md").write_text("mine")
    before = snapshot(run)
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 1
    assert os.path.join("logs", "notes.md") in _one_line_error(capsys)
    assert snapshot(run) == before
    (run / "logs" / "notes.md").unlink()
    assert main(_pretrain(tiny_bert, corpus, run, "--overwrite")) == 0, capsys.readouterr().err


@pytest.mark.slow
def test_export_may_not_write_into_or_over_the_run_it_reads(tiny_bert, corpus, tmp_path, capsys):
    run = tmp_path / "run"
    config, checkpoint, vocab = tiny_bert
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w{i + 2}", "label": "ab"[i % 2]}) + "\n"
                             for i in range(8)))
    assert main(["finetune", "--config", config, "--checkpoint", checkpoint, "--train", str(train), "--seq-len", "16",
                 "--batch-size", "2", "--steps", "2", "--out", str(run), "--no-xla", "--quiet"]) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    finished = snapshot(run)
    for out in (run, run / "served"):
        assert main(["export", "--run", str(run), "--out", str(out), "--overwrite"]) == 1
        assert "run" in _one_line_error(capsys)
        assert snapshot(run) == finished


@pytest.mark.slow
def test_an_input_reached_through_a_link_inside_out_is_an_input(tiny_bert, corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(_pretrain(tiny_bert, corpus, run)) == 0
    os.symlink(corpus, run / "data")
    before, inputs = snapshot(run), snapshot(corpus)
    capsys.readouterr()
    assert main(_pretrain(tiny_bert, run / "data", run, "--overwrite")) == 1
    assert "contains the input" in _one_line_error(capsys)
    assert snapshot(run) == before and snapshot(corpus) == inputs

