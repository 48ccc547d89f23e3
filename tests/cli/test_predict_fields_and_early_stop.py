"""`predict` writes back the input's fields, checks --metrics like --output, and a rerun of an early-stopped
`finetune` trains no further."""
import itertools
import json

import keras
import numpy as np
import pytest

from bert4long.cli import main
from bert4long.cli.run_folder import load_run_model, read_run_settings
from bert4long.training.metrics_record import MetricsRecord
from bert4long.training.resume import RunDirectory


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


@pytest.fixture(scope="module")
def classifier_run(tiny_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    train = _write(folder / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])
    run = str(folder / "run")
    assert main(["finetune", "--checkpoint", tiny_bert[1], "--train", train, "--seq-len", "8", "--batch-size", "2",
                 "--steps", "2", "--out", run, "--no-xla", "--quiet"]) == 0
    return run


@pytest.mark.slow
def test_predict_checks_the_metrics_file_like_its_output(classifier_run, tmp_path, capsys):
    labelled = _write(tmp_path / "labelled.jsonl", [{"text": "w1 w2", "label": "a", "id": 7, "meta": {"x": [1]}},
                                                    {"text": "w5 w3 w9", "label": "b", "id": 8, "meta": None}])
    mine = tmp_path / "mine.json"
    mine.write_text("my scores\n")

    def predict(metrics, *extra, given=labelled, output="out.jsonl"):
        return main(["predict", "--run", classifier_run, "--input", given, "--output", str(tmp_path / output),
                     "--metrics", str(metrics), "--quiet", *extra])

    assert predict(mine) == 1   # was: replaced without a word
    assert f"Output file '{mine}' exists already: pass --overwrite" in capsys.readouterr().err
    assert mine.read_text() == "my scores\n" and not (tmp_path / "out.jsonl").exists()
    assert predict(tmp_path / "out.jsonl") == 1
    assert "is also --output" in capsys.readouterr().err
    assert predict(labelled) == 1
    assert "is the input" in capsys.readouterr().err
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("w1 w2 w3")
    assert predict(folder / "scores.json", given=str(folder), output="folder.jsonl") == 1
    assert "is inside the input folder" in capsys.readouterr().err
    assert predict(tmp_path / "scores.json", given=str(folder), output="folder.jsonl") == 1   # nothing to score
    assert "is not labelled on every line" in capsys.readouterr().err
    assert predict(mine, "--overwrite") == 0
    assert json.loads(mine.read_text())["examples"] == 2
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [{k: row[k] for k in ("text", "label", "id", "meta")} for row in rows] == [
        json.loads(line) for line in open(labelled, encoding="utf-8")]   # every input field, as given
    assert all(row["predicted_label"] in "ab" and row["source"] for row in rows)


@pytest.mark.slow
def test_predict_keeps_a_token_labellers_input_fields_and_scores_only_tagged_input(tiny_bert, tmp_path, capsys):
    train = _write(tmp_path / "train.jsonl", [{"tokens": [f"w{i}", "w2", f"w{i + 3}"], "tags": ["B-X", "O", "O"]}
                                              for i in range(4)])
    run = str(tmp_path / "run")
    assert main(["finetune", "--task", "tokens", "--checkpoint", tiny_bert[1], "--train", train, "--seq-len", "8",
                 "--batch-size", "2", "--steps", "2", "--out", run, "--no-xla", "--quiet"]) == 0
    given = _write(tmp_path / "words.jsonl", [{"tokens": ["w1", "w2"], "id": "a"}, {"tokens": ["w4"] * 9, "id": "b"}])
    capsys.readouterr()
    assert main(["predict", "--run", run, "--input", given, "--output", str(tmp_path / "out.jsonl"), "--quiet"]) == 0
    assert "entity F1" not in capsys.readouterr().out   # was: untagged words scored against all-"O" tags
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(row["id"], row["tokens"], len(row["predicted_tags"])) for row in rows] == [
        ("a", ["w1", "w2"], 2), ("b", ["w4"] * 9, 9)]   # input order; a 9-word document over two windows


@pytest.mark.slow
def test_rerunning_an_early_stopped_run_trains_no_further(tiny_bert, tmp_path, capsys, monkeypatch):
    """Scripted scores: epoch 1 is best and --early-stopping 2 stops after epoch 3 (step 9 of 15). The same
    command again finds the stop recorded: no step past 9, the same epochs, the same final weights."""
    train = _write(tmp_path / "train.jsonl", [{"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]} for i in range(6)])
    scripted = itertools.chain([0.9, 0.5, 0.4], itertools.repeat(0.4))

    def scores(self):
        from bert4long.training.metrics import classification_scores

        return {**classification_scores(["a", "b"], ["a", "a"], ["a", "b"]), "macro_f1": next(scripted)}

    monkeypatch.setattr(MetricsRecord, "scores", scores)
    run = tmp_path / "run"
    command = ["finetune", "--checkpoint", tiny_bert[1], "--train", train, "--valid", train, "--seq-len", "8",
               "--batch-size", "2", "--no-xla", "--quiet", "--learning-rate", "1e-2", "--epochs", "5",
               "--early-stopping", "2", "--out", str(run)]
    assert main(command) == 0
    assert "early stop" in capsys.readouterr().out
    first = [w.numpy() for w in keras.models.load_model(str(run / "classifier.keras")).weights]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "stopped early at step 9" in out and "steps                        9 -> 9" in out, out
    assert RunDirectory(str(run), {}).latest_step() == 9   # was: resumed and trained on to step 15
    assert [e["epoch"] for e in json.loads((run / "metrics.json").read_text())["epochs"]] == [1, 2, 3]
    for a, b in zip(first, keras.models.load_model(str(run / "classifier.keras")).weights):
        np.testing.assert_array_equal(a, b.numpy())


@pytest.mark.slow
def test_predict_reads_a_run_at_a_shorter_seq_len_and_refuses_a_longer_one(classifier_run, tmp_path, capsys):
    """``--seq-len 4`` on a run fine-tuned at 8 reads [CLS], the first 2 pieces and [SEP] (test-time truncation):
    the probabilities the model itself gives those ids; 16 is refused before anything runs (it was ignored)."""
    from bert4long.tokenizers import load_tokenizer

    given = _write(tmp_path / "in.jsonl", [{"text": "w1 w2 w3 w4 w5 w6"}])
    output = tmp_path / "out.jsonl"
    assert main(["predict", "--run", classifier_run, "--input", given, "--output", str(output), "--seq-len", "4",
                 "--quiet"]) == 0
    probabilities = json.loads(output.read_text())["probabilities"]
    ids = load_tokenizer(classifier_run).encode("w1 w2 w3 w4 w5 w6", maxlen=4)[0]
    assert len(ids) == 4
    model = load_run_model(classifier_run, read_run_settings(classifier_run, ""))
    logits = model.predict([np.array([ids]), np.zeros((1, 4), "int32")], verbose=0)[0].astype("float64")
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose([probabilities["a"], probabilities["b"]], expected, atol=1e-5)
    assert main(["predict", "--run", classifier_run, "--input", given, "--output", str(tmp_path / "long.jsonl"),
                 "--seq-len", "16", "--quiet"]) == 1
    assert "--seq-len 16 is longer than the 8 tokens" in capsys.readouterr().err
