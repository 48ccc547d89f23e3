"""A fine-tuning run's folder says how it ran and how it went: finetune.json holds the settings used (resolved),
metrics.json names the kept epoch and the metric that chose it, logs/validation plots every validation score per
epoch, the set is scored once an epoch and no more, and the help's defaults are the parser's."""
import glob
import itertools
import json
import os
import re

import pytest

from bert4long.cli import build_parser, main
from bert4long.output_folders import MARKER
from bert4long.precision import default_precision
from bert4long.training.metrics_record import MetricsRecord


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _scripted_run(tiny_bert, tmp_path, monkeypatch, macro_f1, *extra):
    """A 3-epoch classify run whose validation scores are scripted (``macro_f1`` per epoch, each per-class F1 a
    tenth of it), every call counted: ``(run folder, scores calls)``."""
    from bert4long.training.metrics import classification_scores

    train = _write(tmp_path / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])
    scripted, calls = iter(macro_f1), []

    def scores(self):
        calls.append(1)
        value = next(scripted)
        scores = classification_scores(["a", "b"], ["a", "a"], ["a", "b"])
        scores["per_class"]["b"]["f1"] = value / 10
        return {**scores, "macro_f1": value}

    monkeypatch.setattr(MetricsRecord, "scores", scores)
    run = tmp_path / "run"
    assert main(["finetune", "--checkpoint", tiny_bert[1], "--train", train, "--valid", train, "--seq-len", "8",
                 "--batch-size", "2", "--epochs", "3", "--no-xla", "--quiet", "--out", str(run), *extra]) == 0
    return run, calls


@pytest.mark.slow
def test_the_run_records_its_settings_kept_epoch_and_validation_curves(tiny_bert, tmp_path, monkeypatch, capsys):
    tensorboard = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    import tensorflow as tf

    run, calls = _scripted_run(tiny_bert, tmp_path, monkeypatch, [0.4, 0.7, 0.5], "--seed", "7",
                               "--precision", "auto", "--class-weight", "balanced")
    assert len(calls) == 3   # was 5: the last weights scored again, then the kept ones
    assert "kept epoch 2's weights: macro_f1 0.700 (the last weights: 0.500)" in capsys.readouterr().out
    settings = json.loads((run / "finetune.json").read_text())
    assert {key: settings[key] for key in ("epochs", "steps", "steps_per_epoch", "seed", "select_metric",
                                           "early_stopping", "warmup_steps", "class_weight", "class_weight_option",
                                           "global_cls", "jit_compile")} == {
        "epochs": 3, "steps": 9, "steps_per_epoch": 3, "seed": 7, "select_metric": "macro_f1",
        "early_stopping": None, "warmup_steps": 1, "class_weight": {"a": 1.0, "b": 1.0},
        "class_weight_option": "balanced", "global_cls": True, "jit_compile": False}
    assert settings["precision"] == default_precision()   # what --precision auto chose, not 'auto'
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["selected_epoch"] == 2 and metrics["select_metric"] == "macro_f1"
    assert metrics["final"] == metrics["epochs"][1]["valid"]
    events = tensorboard.EventAccumulator(str(run / "logs" / "validation"))
    events.Reload()
    curves = {tag: [(e.step, round(float(tf.make_ndarray(e.tensor_proto)), 6)) for e in events.Tensors(tag)]
              for tag in events.Tags()["tensors"]}
    assert curves["macro_f1"] == [(3, 0.4), (6, 0.7), (9, 0.5)]   # at the training step: epochs of 3 steps
    assert curves["f1/b"] == [(3, 0.04), (6, 0.07), (9, 0.05)] and curves["accuracy"][0] == (3, 0.5)
    assert set(curves) == {"accuracy", "macro_f1", "f1/a", "f1/b"}
    files = json.loads((run / MARKER).read_text())["files"]
    written = glob.glob(str(run / "logs" / "validation" / "events.out.tfevents.*"))
    assert written and all(files[os.path.relpath(path, run)] == {"growing": True} for path in written)
    assert glob.glob(str(run / "logs" / "train" / "events.out.tfevents.*"))   # the training scalars stay


@pytest.mark.slow
def test_the_last_epoch_kept_is_named_and_its_scores_reused(tiny_bert, tmp_path, monkeypatch, capsys):
    run, calls = _scripted_run(tiny_bert, tmp_path, monkeypatch, itertools.count(1))
    assert len(calls) == 3   # was 4: scored again at the end with the same weights
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["selected_epoch"] == 3 and metrics["select_metric"] == "macro_f1"   # was: not named
    assert metrics["final"]["macro_f1"] == 3
    assert json.loads((run / "finetune.json").read_text())["class_weight_option"] == "none"


@pytest.mark.slow
def test_a_run_without_validation_names_its_last_epoch(tiny_bert, tmp_path):
    train = _write(tmp_path / "train.jsonl", [{"text": f"w{i} w3", "label": "ab"[i % 2]} for i in range(4)])
    run = tmp_path / "run"
    assert main(["finetune", "--checkpoint", tiny_bert[1], "--train", train, "--seq-len", "8", "--batch-size", "2",
                 "--steps", "3", "--no-xla", "--quiet", "--out", str(run)]) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["selected_epoch"] == 1.5 and metrics["final"] is None
    assert json.loads((run / "finetune.json").read_text())["epochs"] == 1.5


def _wrong_defaults(parser):
    """``(option, claimed, real)`` for every help text saying ``(default X...)`` where X reads as a value (a number,
    one of the option's choices, or the text of a default that is not None; ``(default: ...)`` is prose) and the
    parser's default is another."""
    wrong = []
    for action in parser._actions:
        for claim in re.findall(r"\(default ([^);,\s]+)", (action.help or "").replace("%%", "%")):
            real = parser.get_default(action.dest)
            number = re.fullmatch(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?", claim)
            if not number and claim not in (action.choices or ()) and real is None:
                continue
            if (float(claim) if number else claim) != real:
                wrong.append((action.option_strings[0], claim, real))
    return wrong


@pytest.mark.parametrize("command", ["finetune", "predict"])
def test_every_default_the_help_states_is_the_parsers(command):
    assert _wrong_defaults(build_parser().commands[command]) == []   # was: --steps (default 1000), None


def test_the_default_check_can_fail():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=None, help="steps (default 1000)")
    parser.add_argument("--task", choices=["a", "b"], help="(default a)")
    parser.add_argument("--rate", type=float, default=5e-5, help="(default 5e-5)")
    parser.add_argument("--out", default="run", help="(default other)")
    parser.add_argument("--warmup", type=int, help="(default 10%% of --steps)")
    assert _wrong_defaults(parser) == [("--steps", "1000", None), ("--task", "a", None), ("--out", "other", "run")]


@pytest.mark.slow
def test_a_resume_with_another_valid_file_or_select_metric_is_refused_or_says_what_changed(tiny_bert, tmp_path, capsys):
    """--valid (its path and what was read from it) and --select-metric choose the kept weights: a resume with
    others is refused naming them, and --accept-changes says what changed (was: epochs scored on two sets, the best
    chosen across both, with no word)."""
    train = _write(tmp_path / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])
    valid = _write(tmp_path / "valid.jsonl", [{"text": "w1 w2", "label": "a"}, {"text": "w3 w4", "label": "b"}])
    other = _write(tmp_path / "other.jsonl", [{"text": "w5 w6", "label": "b"}, {"text": "w7", "label": "a"}])
    common = ["finetune", "--checkpoint", tiny_bert[1], "--train", train, "--seq-len", "8", "--batch-size", "2",
              "--no-xla", "--quiet", "--out", str(tmp_path / "run")]
    assert main([*common, "--valid", valid, "--epochs", "1"]) == 0
    capsys.readouterr()
    for changed, named in ((["--valid", other], "valid: saved "), (["--valid", valid, "--select-metric", "accuracy"],
                                                                     "select_metric: saved 'macro_f1' vs now 'accuracy'")):
        assert main([*common, *changed, "--epochs", "2"]) == 1
        err = capsys.readouterr().err
        assert "Cannot resume from" in err and named in err and len(err.strip().splitlines()) == 1, err
    assert main([*common, "--valid", other, "--epochs", "2", "--accept-changes"]) == 0
    out = capsys.readouterr().out
    assert "with changed settings (valid: saved " + repr(os.path.abspath(valid)) + " vs now " + \
           repr(os.path.abspath(other)) + ", valid_fingerprint: saved " in out, out
