"""Ties and gaps said, not hidden (issue 36, part C): a tie is no improvement for early stopping and the best
epoch, `predict` answers every document (one with no text too), one-class training data and a run folder
`finetune` cannot have written are refused in one line, a lock naming no possible process is stale, and what
`predict` and `finetune` read is checked (labels, folders, UTF-8) before the model is built."""
import itertools
import json
import os
import re
import shutil
import socket
from pathlib import Path

import keras
import pytest

from bert4long.cli import build_parser, main, run_folder
from bert4long.training.lock import LOCK_NAME, RunInProgress, RunLock
from bert4long.training.metrics_record import MetricsRecord


def _write(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def _refused(capsys, argv):
    """``main(argv)`` fails with a one-line error, no traceback; returns that line and stdout."""
    assert main(argv) == 1, argv
    captured = capsys.readouterr()
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith(f"bert4long {argv[0]}: error: ") and "Traceback" not in captured.err, captured.err
    return error, captured.out


def _finetune(checkpoint, train, out, *extra):
    return ["finetune", "--checkpoint", checkpoint, "--train", str(train), "--seq-len", "8", "--batch-size", "2",
            "--no-xla", "--quiet", "--out", str(out), *extra]


def _settings_run(folder, **changes):
    """A run folder holding only the finetune.json a two-label classifier run writes (with ``changes``): what
    `predict` and `export` read, and refuse, before they load a model."""
    folder.mkdir()
    settings = {"task": "classify", "labels": ["a", "b"], "seq_len": 8, "pooling": "cls", "chunks": 4,
                "lower_case": True, **changes}
    (folder / "finetune.json").write_text(json.dumps({k: v for k, v in settings.items() if v is not None}))
    return str(folder)


@pytest.fixture(scope="module")
def classifier_run(tiny_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ties")
    train = _write(folder / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])
    run = folder / "run"
    assert main(_finetune(tiny_bert[1], train, run, "--steps", "2")) == 0
    return str(run)


@pytest.mark.slow
def test_a_tie_is_no_improvement_so_a_plateau_stops_early_and_the_first_of_equals_is_kept(tiny_bert, tmp_path,
                                                                                          capsys, monkeypatch):
    """Every epoch scores the same: epoch 1 stays the best, --early-stopping 2 stops after epoch 3 (was: each tie
    a new best, so the run never stopped and the last of equals was kept), and the final model is epoch 1's."""
    train = _write(tmp_path / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])
    scripted = itertools.repeat(0.5)

    def scores(self):
        from bert4long.training.metrics import classification_scores

        return {**classification_scores(["a", "b"], ["a", "a"], ["a", "b"]), "macro_f1": next(scripted)}

    monkeypatch.setattr(MetricsRecord, "scores", scores)
    run = tmp_path / "run"
    assert main(_finetune(tiny_bert[1], train, run, "--valid", train, "--learning-rate", "1e-2", "--epochs", "5",
                          "--early-stopping", "2")) == 0
    out = capsys.readouterr().out
    assert "epoch 2: " in out and "(equal to epoch 1's macro_f1: no improvement)" in out, out
    assert "no better macro_f1 for 2 epochs: early stop" in out and "kept epoch 1's weights" in out, out
    assert re.search(r"steps +0 -> 9\n", out), out   # the step reached, not the 15 asked for
    record = json.loads((run / "metrics.json").read_text())
    assert [e["epoch"] for e in record["epochs"]] == [1, 2, 3] and record["selected_epoch"] == 1
    assert record["selected_step"] == 3 and not (run / "best.weights.h5").exists()   # classifier.keras: epoch 1's
    help_text = " ".join(build_parser().commands["finetune"].format_help().split())
    assert "(an equal score is no improvement)" in help_text and "the first of epochs with equal scores" in help_text


@pytest.mark.slow
def test_predict_answers_every_document_one_with_no_text_included(classifier_run, tiny_bert, tmp_path, capsys):
    given = [{"text": "w1 w2", "label": "a"}, {"text": "", "label": "b"}, {"text": "   ", "label": "a"},
             {"text": "w5", "label": "b"}]
    labelled = _write(tmp_path / "labelled.jsonl", given)
    output, metrics = tmp_path / "out.jsonl", tmp_path / "scores.json"
    assert main(["predict", "--run", classifier_run, "--input", labelled, "--output", str(output), "--metrics",
                 str(metrics), "--quiet"]) == 0
    assert "wrote 4 result(s)" in capsys.readouterr().out   # was: 2, the empty texts dropped without a word
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [{"text": r["text"], "label": r["label"]} for r in rows] == given   # one line each, in input order
    assert [r["source"] for r in rows] == [f"labelled.jsonl:{n}" for n in (1, 2, 3, 4)]
    assert all(r["predicted_label"] in ("a", "b") and set(r["probabilities"]) == {"a", "b"} for r in rows)
    assert json.loads(metrics.read_text())["examples"] == 4   # the scores count them
    all_empty = _write(tmp_path / "empty.jsonl", [{"text": ""}, {"text": "\n"}])
    assert main(["predict", "--run", classifier_run, "--input", all_empty, "--output", str(tmp_path / "e.jsonl"),
                 "--quiet"]) == 0   # was: "holds no text files"
    assert "(2 with no tokens: the model read [CLS] [SEP] alone)" in capsys.readouterr().out
    assert len((tmp_path / "e.jsonl").read_text().splitlines()) == 2
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("")
    (folder / "b.txt").write_text("w1 w2 w3")
    assert main(["predict", "--checkpoint", tiny_bert[1], "--input", str(folder), "--output",
                 str(tmp_path / "embed.jsonl"), "--quiet"]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (tmp_path / "embed.jsonl").read_text().splitlines()]
    assert [r["source"] for r in rows] == ["a.txt", "b.txt"] and len(rows[0]["embedding"]) == len(rows[1]["embedding"])
    blank = _write(tmp_path / "blank.jsonl", ["", "  "])
    err, _ = _refused(capsys, ["predict", "--run", classifier_run, "--input", blank, "--output",
                               str(tmp_path / "b.jsonl")])
    assert f"--input {blank!r} holds no documents" in err
    err, _ = _refused(capsys, ["predict", "--run", classifier_run, "--input", labelled, "--output",
                               str(tmp_path / "s.jsonl"), "--errors", "skip"])
    assert "--errors skip would leave documents out of --output" in err and "--errors replace" in err
    (folder / "c.txt").write_bytes(b"w1 caf\xe9")   # not UTF-8: read with --errors replace, answered
    assert main(["predict", "--run", classifier_run, "--input", str(folder), "--output", str(tmp_path / "r.jsonl"),
                 "--errors", "replace", "--quiet"]) == 0
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 3
    run = tmp_path / "edited"   # a finetune.json of three labels beside a model of two outputs
    shutil.copytree(classifier_run, run)
    settings = json.loads((run / "finetune.json").read_text())
    (run / "finetune.json").write_text(json.dumps({**settings, "labels": ["a", "b", "c"]}))
    err, _ = _refused(capsys, ["predict", "--run", str(run), "--input", labelled, "--output", str(tmp_path / "x")])
    assert f"{run / 'finetune.json'} lists 3 labels but {run / 'classifier.keras'} has 2 outputs" in err   # was: cut
    err, _ = _refused(capsys, ["export", "--run", str(run), "--out", str(tmp_path / "served")])
    assert f"{run / 'finetune.json'} lists 3 labels" in err


@pytest.mark.slow
def test_one_class_training_data_is_refused_up_front_unless_allowed(tiny_bert, tmp_path, capsys):
    checkpoint = tiny_bert[1]
    one = _write(tmp_path / "one.jsonl", [{"text": f"w{i} w3", "label": "a"} for i in range(4)])
    both = tmp_path / "both.txt"
    both.write_text("a\nb\n")
    single = tmp_path / "single.txt"
    single.write_text("a\n")
    out = tmp_path / "run"
    err, printed = _refused(capsys, _finetune(checkpoint, one, out, "--steps", "1"))   # was: trained, loss 0
    assert f"--train {one!r} holds one label only, 'a'" in err and "--allow-one-class" in err, err
    assert "training examples" not in printed and not out.exists()   # before the model is built
    err, _ = _refused(capsys, _finetune(checkpoint, one, out, "--steps", "1", "--allow-one-class"))
    assert "a model with one output answers it whatever it reads" in err   # a one-output head learns nothing
    err, _ = _refused(capsys, _finetune(checkpoint, one, out, "--steps", "1", "--labels", str(single),
                                        "--allow-one-class"))
    assert f"--labels {str(single)!r} lists one label only, 'a'" in err
    err, _ = _refused(capsys, _finetune(checkpoint, one, out, "--steps", "1", "--labels", str(both)))
    assert f"--train {one!r} holds one label only, 'a': the model would learn to answer it" in err
    tags = _write(tmp_path / "tags.jsonl", [{"tokens": ["w1", "w2"], "tags": ["O", "O"]}] * 3)
    err, _ = _refused(capsys, _finetune(checkpoint, tags, out, "--steps", "1", "--task", "tokens"))
    assert f"--train {tags!r} holds one tag only, 'O'" in err
    assert main(_finetune(checkpoint, one, out, "--steps", "1", "--labels", str(both), "--allow-one-class")) == 0
    assert json.loads((out / "finetune.json").read_text())["labels"] == ["a", "b"]   # --labels makes the head
    assert keras.models.load_model(str(out / "classifier.keras")).outputs[0].shape[-1] == 2
    assert "--allow-one-class" in build_parser().commands["finetune"].format_help()


@pytest.mark.parametrize("labels", [["a"], [], "ab", ["a", "a"], ["a", 1], None])
def test_a_run_folder_finetune_cannot_have_written_is_refused_in_one_line(tmp_path, capsys, labels):
    """A finetune.json edited to one label (or none, a string, repeats, a number, no labels at all): `predict` and
    `export` refuse it naming the file (was: a traceback, or a one-way classifier answering one label; labels that
    are not the model's outputs: `test_predict_answers_every_document_one_with_no_text_included`)."""
    run = Path(_settings_run(tmp_path / "run", labels=labels))
    given = _write(tmp_path / "in.jsonl", [{"text": "w1 w2"}, {"text": "w3 w4 w5"}])
    err, _ = _refused(capsys, ["predict", "--run", str(run), "--input", given, "--output", str(tmp_path / "o.jsonl")])
    assert f"{run / 'finetune.json'}" in err and "fine-tune again" in err, err
    assert not (tmp_path / "o.jsonl").exists()
    err, _ = _refused(capsys, ["export", "--run", str(run), "--out", str(tmp_path / "served")])
    assert f"{run / 'finetune.json'}" in err


def test_a_damaged_finetune_json_is_refused_naming_it(tmp_path, capsys):
    run = Path(_settings_run(tmp_path / "run"))
    given = _write(tmp_path / "in.jsonl", [{"text": "w1 w2"}])
    settings = json.loads((run / "finetune.json").read_text())
    for text in ("{not json", "[1]", json.dumps({**settings, "task": ["x"]}), json.dumps({**settings, "chunks": 0})):
        (run / "finetune.json").write_text(text)
        err, _ = _refused(capsys, ["predict", "--run", str(run), "--input", given, "--output",
                                   str(tmp_path / "o.jsonl")])
        assert f"{run / 'finetune.json'}" in err and "bert4long finetune" in err, err


@pytest.mark.parametrize("pid", [2**40, 2**31, -5, 0, "12", "", None, True, 1.5])
def test_a_lock_naming_no_possible_process_is_taken_over(tmp_path, capsys, pid):
    """A whole lock whose pid cannot be a process (was: OverflowError for a huge pid, a refusal for the rest)."""
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
    with RunLock(tmp_path) as lock:
        assert lock.held and json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert "it names no process that can be running" in capsys.readouterr().out


def test_a_lock_of_a_possible_process_elsewhere_is_still_refused(tmp_path):
    for holder, where in (({"pid": 5, "host": "another-machine"}, "process 5 on another-machine"),
                          ({"pid": 5}, "process 5 on an unnamed host")):
        (tmp_path / LOCK_NAME).write_text(json.dumps(holder))
        with pytest.raises(RunInProgress, match=f"{where}, lock file .*delete the lock file"):
            RunLock(tmp_path).acquire()


def test_predict_checks_labels_and_output_folders_before_the_model(tmp_path, capsys, monkeypatch):
    def no_model(path):
        raise AssertionError(f"the model {path} was loaded before the inputs were checked")

    monkeypatch.setattr(run_folder, "load_final_model", no_model)
    classifier_run = _settings_run(tmp_path / "run")
    unknown = _write(tmp_path / "unknown.jsonl", [{"text": "w1", "label": "a"}, {"text": "w2", "label": "zzz"}])
    output = tmp_path / "out.jsonl"
    for extra in (["--metrics", str(tmp_path / "m.json")], []):
        err, _ = _refused(capsys, ["predict", "--run", classifier_run, "--input", unknown, "--output", str(output),
                                   *extra])
        assert f"--input {unknown!r} holds label(s) ['zzz'] the run was not trained on" in err
    known = _write(tmp_path / "known.jsonl", [{"text": "w1", "label": "a"}])
    for option, path in (("output", tmp_path / "missing" / "out.jsonl"), ("metrics", tmp_path / "gone" / "m.json")):
        paths = {"output": str(output), "metrics": str(tmp_path / "m.json"), option: str(path)}
        err, _ = _refused(capsys, ["predict", "--run", classifier_run, "--input", known, "--output", paths["output"],
                                   "--metrics", paths["metrics"]])
        assert f"--{option} {str(path)!r}: no folder {str(path.parent)!r}" in err and "create the folder" in err
    assert not output.exists()


def test_text_inputs_that_are_not_utf8_are_refused_naming_the_option_file_and_line(tiny_bert, tmp_path, capsys):
    from bert4long.cli.inputs import read_labels

    checkpoint = tiny_bert[1]
    train = _write(tmp_path / "train.jsonl", [{"text": f"w{i} w3", "label": "ab"[i % 2]} for i in range(4)])
    bad_labels = tmp_path / "labels.txt"
    bad_labels.write_bytes(b"a\n\xff\xfeb\n")
    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_bytes(b'{"text": "w1", "label": "a"}\n{"text": "w2 \xe9", "label": "b"}\n')
    bad_tags = tmp_path / "tags.jsonl"
    bad_tags.write_bytes(b'{"tokens": ["w1"], "tags": ["O"]}\n{"tokens": ["w\xff"], "tags": ["B-X"]}\n')
    out = tmp_path / "run"
    err, _ = _refused(capsys, _finetune(checkpoint, train, out, "--labels", str(bad_labels)))
    assert err.endswith(f"--labels {str(bad_labels)!r}: line 2 is not UTF-8 (byte b'\\xff' at column 1): save it as "
                        "UTF-8"), err   # was: "'utf-8' codec can't decode byte 0xff ...", naming no file
    err, _ = _refused(capsys, _finetune(checkpoint, bad_jsonl, out))
    assert f"--train {str(bad_jsonl)!r}: line 2 is not UTF-8" in err
    err, _ = _refused(capsys, _finetune(checkpoint, train, out, "--valid", str(bad_jsonl)))
    assert f"--valid {str(bad_jsonl)!r}: line 2 is not UTF-8" in err
    err, _ = _refused(capsys, _finetune(checkpoint, bad_tags, out, "--task", "tokens"))
    assert f"--train {str(bad_tags)!r}: line 2 is not UTF-8" in err
    predict = ["predict", "--run", _settings_run(tmp_path / "cls"), "--output", str(tmp_path / "o.jsonl"), "--input"]
    err, _ = _refused(capsys, [*predict, str(bad_jsonl)])
    assert f"--input {str(bad_jsonl)!r}: line 2 is not UTF-8 (byte b'\\xe9' at column 14): save it as UTF-8" in err
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "latin1.txt").write_bytes(b"w1 caf\xe9")
    err, _ = _refused(capsys, [*predict, str(folder)])
    assert f"--input {str(folder / 'latin1.txt')!r}: line 1 is not UTF-8" in err and "--errors replace" in err
    bom = tmp_path / "bom.txt"
    bom.write_text("a\nb\n", encoding="utf-8-sig")
    assert read_labels(str(bom)) == ["a", "b"]   # was: "\ufeffa", then "unknown label 'a'"


@pytest.mark.slow
def test_what_an_attacker_tries_next_holds(tiny_bert, tmp_path, capsys):
    """A line that is no JSON object, integer labels (the same class as their strings), a training file with no
    text or no tags, and a damaged metrics.json on resume: one line each, or a run that counts every line."""
    checkpoint = tiny_bert[1]
    out = tmp_path / "run"
    not_object = _write(tmp_path / "list.jsonl", [{"text": "w1", "label": "a"}, "[1, 2]"])
    err, _ = _refused(capsys, _finetune(checkpoint, not_object, out))
    assert f"{not_object}:2: expected a JSON object with a string 'text' field" in err
    no_text = _write(tmp_path / "no_text.jsonl", [{"text": "", "label": "a"}, {"text": " ", "label": "b"}])
    err, printed = _refused(capsys, _finetune(checkpoint, no_text, out))
    assert f"--train {no_text!r} holds no document with text (skipped: {{'empty': 2}})" in err, err
    assert "training examples" not in printed   # (was: Keras's "units=0" once the model was being built)
    no_tags = _write(tmp_path / "no_tags.jsonl", [{"tokens": [], "tags": []}])
    err, _ = _refused(capsys, _finetune(checkpoint, no_tags, out, "--task", "tokens"))
    assert f"--train {no_tags!r} holds no tag: give every token a tag" in err
    numbers = _write(tmp_path / "numbers.jsonl", [{"text": "w1 w2", "label": 1}, {"text": "w3", "label": 2},
                                                  {"text": "w4 w2", "label": "1"}, {"text": "w5", "label": 2}])
    assert main(_finetune(checkpoint, numbers, out, "--steps", "2")) == 0
    assert json.loads((out / "finetune.json").read_text())["labels"] == ["1", "2"]
    assert main(["predict", "--run", str(out), "--input", numbers, "--output", str(tmp_path / "o.jsonl"),
                 "--metrics", str(tmp_path / "m.json"), "--quiet"]) == 0
    assert json.loads((tmp_path / "m.json").read_text())["examples"] == 4
    capsys.readouterr()
    (out / "metrics.json").write_text("[1]")
    err, _ = _refused(capsys, _finetune(checkpoint, numbers, out, "--steps", "3"))   # was: AttributeError
    assert f"{out / 'metrics.json'} is not the metrics.json `bert4long finetune` writes" in err
