"""finetune's evaluations between epochs (--eval-every), its held-out --test set, one clock in the progress lines,
and what a finished run leaves on disk (--keep-checkpoints, one copy of the kept weights)."""
import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from bert4long.cli import main
from bert4long.training.metrics_record import MetricsRecord


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _train(tmp_path):
    return _write(tmp_path / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])


def _base(tiny_bert, train, run, *extra):
    return ["finetune", "--checkpoint", tiny_bert[1], "--train", train, "--seq-len", "8", "--batch-size", "2",
            "--no-xla", "--learning-rate", "1e-2", "--out", str(run), *extra]


@pytest.mark.slow
def test_evaluations_between_epochs_choose_the_kept_weights_and_test_is_scored_once_with_them(
        tiny_bert, tmp_path, monkeypatch, capsys):
    import keras

    from bert4long.training.metrics import classification_scores

    train = _train(tmp_path)
    test = _write(tmp_path / "test.jsonl", [{"text": f"w{i} w3", "label": "ab"[i % 2]} for i in range(5)])
    scripted, weights = iter([0.4, 0.5, 0.9, 0.6]), []   # steps 2 (between), 3 (epoch 1), 4 (between), 6 (epoch 2)

    def scores(self):
        weights.append([w.copy() for w in self.model.get_weights()])
        return {**classification_scores(["a", "b"], ["a", "a"], ["a", "b"]), "macro_f1": next(scripted)}

    monkeypatch.setattr(MetricsRecord, "scores", scores)
    run = tmp_path / "run"
    assert main(_base(tiny_bert, train, run, "--valid", train, "--test", test, "--epochs", "2", "--eval-every", "2",
                      "--save-every", "2")) == 0
    out = capsys.readouterr().out
    assert len(weights) == 4   # each evaluation once; the end scores nothing again
    metrics = json.loads((run / "metrics.json").read_text())
    assert [(e["step"], e["epoch"]) for e in metrics["evaluations"]] == [(2, 0.6667), (4, 1.3333)]
    assert [(e["step"], e["epoch"]) for e in metrics["epochs"]] == [(3, 1), (6, 2)]
    assert metrics["selected_step"] == 4 and metrics["selected_epoch"] == 1.3333
    assert metrics["final"] == metrics["evaluations"][1]["valid"]
    assert metrics["test"]["examples"] == 5 and set(metrics["test"]) >= {"macro_f1", "accuracy", "per_class"}
    assert "step 4 (epoch 1.3333): valid macro-F1 0.900" in out and "kept step 4 (epoch 1.3333)'s weights" in out
    assert "test (" in out and "kept weights; not used to choose them" in out
    kept = keras.models.load_model(str(run / "classifier.keras")).get_weights()
    for a, b in zip(kept, weights[2], strict=True):   # the weights scored at step 4
        np.testing.assert_array_equal(a, b)
    assert not (run / "best.weights.h5").exists()   # the kept weights exist once, in classifier.keras
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step-000000006"]   # default: 1
    # one clock: bert4long's epochs, although checkpoints are saved every 2 steps of 3-step epochs
    assert "epoch 1/2: steps 1-3 of 6" in out and "epoch 2/2: steps 4-6 of 6" in out
    assert "Epoch " not in out and "checkpoint saved: step 4" in out
    settings = json.loads((run / "finetune.json").read_text())
    assert settings["eval_every"] == 2 and settings["test"] == test and settings["keep_checkpoints"] == 1
    tensorboard = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = tensorboard.EventAccumulator(str(run / "logs" / "validation"))
    events.Reload()
    assert [e.step for e in events.Tensors("macro_f1")] == [2, 3, 4, 6]


@pytest.mark.slow
def test_keep_checkpoints_0_removes_the_state_once_finished_and_a_rerun_is_refused(tiny_bert, tmp_path, capsys):
    train, run = _train(tmp_path), tmp_path / "run"
    assert main(_base(tiny_bert, train, run, "--epochs", "1", "--keep-checkpoints", "0", "--quiet")) == 0
    assert "removed (--keep-checkpoints 0)" in capsys.readouterr().out
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith(".")) == [
        "classifier.keras", "finetune.json", "logs", "metrics.json", "vocab.txt"]
    assert main(_base(tiny_bert, train, run, "--epochs", "2", "--quiet")) == 1
    err = capsys.readouterr().err
    assert "checkpoints were removed (--keep-checkpoints 0)" in err and "pass --overwrite" in err, err
    assert main(["predict", "--run", str(run), "--input", train, "--output", str(tmp_path / "p.jsonl")]) == 0


@pytest.mark.parametrize("extra, message", [
    (["--eval-every", "2"], "--eval-every 2 needs --valid (the set it scores): pass --valid"),
    (["--eval-every", "0"], "argument --eval-every: must be a positive integer (1 or more), got 0"),
    (["--keep-checkpoints", "-1"], "argument --keep-checkpoints: must be an integer >= 0"),
    (["--test", "missing.jsonl"], "--test 'missing.jsonl': no such file; pass a .jsonl file"),
])
def test_bad_options_are_refused_naming_the_fix(tiny_bert, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) if message.startswith("argument") else contextlib.nullcontext():
        assert main(_base(tiny_bert, _train(tmp_path), tmp_path / "run", *extra)) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_their_refusals_come_before_tensorflow(tmp_path):
    from test_startup import HEAVY, imported_packages

    from bert4long.pretrained import checkpoint

    train = _write(tmp_path / "train.jsonl", [{"text": "a b c", "label": "x"}])
    run = tmp_path / "run"
    run.mkdir()
    (run / "finetune.json").write_text("{}")   # a finished run whose checkpoints are gone
    for extra, message in ((["--eval-every", "5"], "--eval-every 5 needs --valid"),
                           (["--test", str(tmp_path / "none.jsonl")], "no such file"),
                           (["--out", str(run)], "checkpoints were removed (--keep-checkpoints 0)")):
        packages, _, messages = imported_packages("finetune", "--checkpoint", checkpoint(), "--train", train, *extra,
                                                  status=1)
        assert message in messages and not packages & HEAVY, messages[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("available_gib, warning, others", [
    (3.5, "warning: that is more than the memory available: lower --batch-size to 3 (the most that fits by this "
          "estimate, with that headroom)", []),
    (4.4, "warning: that is within 15% of the memory available, and the estimate can be that much below the peak: "
          "lower --batch-size to 3 (the most", []),   # 4 rows: 4.0 GiB, 4.6 with the headroom
    (8.0, "warning: 2 other bert4long training run(s) are running on this machine (process 4242, 4343): the memory "
          "available now does not count what they will take as they grow, so this estimate cannot tell whether the "
          "runs fit together", [4242, 4343]),   # (was: told it fits, as each of three runs side by side was)
])
def test_the_memory_of_the_longest_batch_is_estimated_before_training_and_a_batch_that_fits_named(
        tiny_bert, tmp_path, monkeypatch, capsys, available_gib, warning, others):
    from bert4long.training import memory

    asked = []

    def estimate(config, parameters, kernel, length, batch):   # 1 GiB a row
        asked.append((length, batch))
        return batch * 2**30

    monkeypatch.setattr(memory, "training_step_bytes", estimate)
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: int(available_gib * 2**30))
    monkeypatch.setattr(memory, "other_training_runs", lambda: others)
    train = _write(tmp_path / "train.jsonl", [{"text": " ".join(["w5"] * (i + 1)), "label": "ab"[i % 2]}
                                              for i in range(8)])
    assert main(_base(tiny_bert, train, tmp_path / "run", "--steps", "1", "--batch-size", "4", "--quiet")) == 0
    out = capsys.readouterr().out
    assert asked[0] == (8, 4)   # the longest bucket (--seq-len 8; the shortest rows are 3 tokens), 4 rows
    assert "memory: about 4.0 GiB at the peak, a step on the longest batch (4 x 8 tokens" in out, out
    assert f"against {available_gib} GiB available now" in out and warning in out, out
    assert ("other bert4long training run" in out) == bool(others) and ("lower --batch-size" in out) != bool(others)
    assert out.index("memory: about") < out.index("checkpoint saved: step 1")   # before the first step


def test_other_training_runs_are_the_live_bert4long_pretrain_and_finetune_processes():
    """`other_training_runs` finds another process whose command line is ``bert4long finetune`` (or ``pretrain``), and
    neither this process nor a process of another command."""
    from bert4long.training.memory import other_training_runs

    if not os.path.isdir("/proc"):
        pytest.skip("no /proc to read processes from")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    runs = [subprocess.Popen([*sleep, "bert4long", "finetune"]), subprocess.Popen([*sleep, "bert4long", "predict"])]
    try:
        deadline = time.monotonic() + 10
        while runs[0].pid not in other_training_runs() and time.monotonic() < deadline:
            time.sleep(0.05)
        found = other_training_runs()
        assert runs[0].pid in found and runs[1].pid not in found and os.getpid() not in found, found
    finally:
        for run in runs:
            run.kill()
            run.wait()
    assert runs[0].pid not in other_training_runs()


@pytest.mark.slow
def test_info_estimates_the_batch_it_is_given(tiny_bert, capsys):
    lines = {}
    for batch in ("1", "64"):
        assert main(["info", tiny_bert[1], "--batch-size", batch]) == 0
        lines[batch] = capsys.readouterr().out
    assert "ESTIMATE for one training step, batch 64 (--batch-size)" in lines["64"]
    row = {batch: next(line for line in out.splitlines() if line.strip().startswith("full "))
           for batch, out in lines.items()}
    assert row["1"] != row["64"]   # 64 rows need more
    with pytest.raises(SystemExit):
        main(["info", tiny_bert[1], "--batch-size", "0"])
    assert "argument --batch-size: must be a positive integer (1 or more), got 0" in capsys.readouterr().err
