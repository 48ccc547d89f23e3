"""`finetune --task multilabel`: scores against scikit-learn, the threshold against a brute-force search, the CLI
run through predict and a SavedModel that plain TensorFlow loads, and refusals in one line before the model is
built."""
import json

import numpy as np
import pytest

from bert4long.cli import main
from bert4long.training.metrics import THRESHOLD_GRID, multilabel_scores, tuned_multilabel_scores

sklearn_metrics = pytest.importorskip("sklearn.metrics")
LABELS = ["x", "y", "z", "w"]


def _sklearn_scores(gold, chosen):
    f1 = {average: sklearn_metrics.f1_score(gold, chosen, average=average, zero_division=0)
          for average in ("micro", "macro", "samples")}
    precision, recall, per_f1, support = sklearn_metrics.precision_recall_fscore_support(
        gold, chosen, average=None, zero_division=0, labels=range(gold.shape[1]))
    return f1, precision, recall, per_f1, support


def _assert_sklearn(scores, gold, chosen):
    f1, precision, recall, per_f1, support = _sklearn_scores(np.asarray(gold, int), np.asarray(chosen, int))
    for average, value in f1.items():
        assert scores[f"{average}_f1"] == pytest.approx(value), average
    for i, label in enumerate(scores["labels"]):
        got = scores["per_class"][label]
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx((precision[i], recall[i], per_f1[i]))
        assert got["support"] == support[i]


def test_scores_are_scikit_learns_with_empty_sets_and_unused_labels(rng):
    gold = rng.random((40, 4)) < 0.3
    chosen = rng.random((40, 4)) < 0.4
    gold[:3], chosen[:2] = False, False          # documents with no label, one also with none chosen
    gold[:, 3], chosen[:, 3] = False, False      # a label never gold nor chosen
    _assert_sklearn(multilabel_scores(gold, chosen, LABELS), gold, chosen)


@pytest.mark.parametrize("metric", ["micro_f1", "macro_f1", "samples_f1"])
def test_the_threshold_is_a_brute_force_search_over_the_grid(rng, metric):
    gold = rng.random((30, 4)) < 0.4
    probabilities = np.clip(gold * 0.3 + rng.random((30, 4)) * 0.7, 0, 1)
    grid = [round(t, 2) for t in np.arange(0.05, 0.951, 0.05)]
    assert list(THRESHOLD_GRID) == grid
    average = metric.split("_")[0]
    best = [sklearn_metrics.f1_score(gold, probabilities >= t, average=average, zero_division=0) for t in grid]
    chosen = tuned_multilabel_scores(gold, probabilities, LABELS, metric, "global")
    assert chosen["threshold"] == grid[int(np.argmax(best))]   # (argmax: the smallest of equals)
    assert chosen[metric] == pytest.approx(max(best))
    per_label = tuned_multilabel_scores(gold, probabilities, LABELS, metric, "per-label")
    for j, threshold in enumerate(per_label["threshold"]):
        scores = [sklearn_metrics.f1_score(gold[:, j], probabilities[:, j] >= t, zero_division=0) for t in grid]
        assert threshold == grid[int(np.argmax(scores))]
    _assert_sklearn(per_label, gold, probabilities >= np.asarray(per_label["threshold"]))


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


WORDS = {"x": "alpha", "y": "beta", "z": "gamma"}


def _documents(seed, count):
    rng = np.random.default_rng(seed)
    documents = []
    for _ in range(count):
        labels = [label for label in WORDS if rng.random() < 0.5]
        documents.append({"text": " ".join(["the", "of", *(WORDS[label] for label in labels), "a"]), "labels": labels})
    return documents


def _finetune(checkpoint, train, out, *extra):
    return ["finetune", "--task", "multilabel", "--checkpoint", checkpoint, "--train", train, "--seq-len", "8",
            "--batch-size", "2", "--no-xla", "--quiet", "--out", str(out), *extra]


@pytest.mark.slow
@pytest.mark.parametrize("threshold, pooling", [("global", "cls"), ("per-label", "chunks")])
def test_finetune_predict_and_export_agree(tiny_bert, tmp_path, threshold, pooling, capsys):
    tf = pytest.importorskip("tensorflow")
    train = _write(tmp_path / "train.jsonl", _documents(0, 10))
    valid = _write(tmp_path / "valid.jsonl", _documents(1, 6))
    run = tmp_path / "run"
    assert main(_finetune(tiny_bert[1], train, run, "--valid", valid, "--epochs", "2", "--threshold", threshold,
                          "--pooling", pooling, "--chunks", "2")) == 0
    record = json.loads((run / "finetune.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert record["threshold"] == metrics["threshold"] == metrics["final"]["threshold"]
    assert record["threshold_option"] == threshold and len(metrics["epochs"]) == 2
    out = tmp_path / "out.jsonl"
    assert main(["predict", "--run", str(run), "--input", valid, "--output", str(out), "--quiet",
                 "--metrics", str(tmp_path / "scores.json")]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    labels = record["labels"]
    probabilities = np.array([[row["probabilities"][label] for label in labels] for row in rows])
    chosen = np.array([[label in row["predicted_labels"] for label in labels] for row in rows])
    np.testing.assert_array_equal(chosen, probabilities >= np.asarray(record["threshold"]))
    gold = np.array([[label in row["labels"] for label in labels] for row in rows])
    scores = json.loads((tmp_path / "scores.json").read_text())
    _assert_sklearn(scores, gold, chosen)
    assert scores["micro_f1"] == pytest.approx(metrics["final"]["micro_f1"])   # the kept weights and threshold
    if pooling == "chunks":   # (the int32 signature serves [batch, length] rows only, whatever the task)
        return
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "saved")]) == 0
    served = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    from bert4long.data.rows import document_rows
    from bert4long.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(str(run))
    ids = document_rows(tokenizer, tokenizer.encode_documents([row["text"] for row in rows]), 8)
    result = served(token_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))
    np.testing.assert_allclose(result["probabilities"].numpy(), probabilities, atol=1e-5)
    np.testing.assert_array_equal(result["chosen"].numpy(), chosen)
    assert result["label_names"].numpy()[0].astype(str).tolist() == labels


@pytest.mark.slow
def test_raw_text_export_gives_predicts_sets(tiny_bert, tmp_path):
    tf = pytest.importorskip("tensorflow")
    train = _write(tmp_path / "train.jsonl", _documents(2, 6))
    run = tmp_path / "run"
    assert main(_finetune(tiny_bert[1], train, run, "--steps", "2", "--multilabel-loss", "mcc")) == 0
    assert json.loads((run / "finetune.json").read_text())["threshold"] == 0.5   # mcc's logit > 0
    out = tmp_path / "out.jsonl"
    assert main(["predict", "--run", str(run), "--input", train, "--output", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "saved"), "--raw-text"]) == 0
    served = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    result = served(texts=tf.constant([row["text"] for row in rows]))
    labels = result["label_names"].numpy()[0].astype(str).tolist()
    assert [[label for label, on in zip(labels, mask) if on] for mask in result["chosen"].numpy()] == \
        [row["predicted_labels"] for row in rows]
    np.testing.assert_allclose(result["probabilities"].numpy(),
                               [[row["probabilities"][label] for label in labels] for row in rows], atol=1e-5)


@pytest.mark.parametrize("line, extra, message", [
    ({"text": "a b", "label": "x"}, (), "train.jsonl:2: a 'label' (one label a document: --task classify)"),
    ({"text": "a b"}, (), "train.jsonl:2: 'labels' is None, not a list of labels"),
    ({"text": "a b", "labels": "x"}, (), "train.jsonl:2: 'labels' is 'x', not a list"),
    ({"text": "a b", "labels": []}, ("--threshold", "global"), "--threshold global is chosen on --valid"),
    ({"text": "a b", "labels": []}, ("--threshold", "1.5"), "is not global, per-label or a number in (0, 1)"),
    ({"text": "a b", "labels": []}, ("--class-weight", "balanced"), "--class-weight is for --task classify"),
])
def test_bad_lines_and_options_are_refused_in_one_line(tiny_bert, tmp_path, capsys, line, extra, message):
    train = _write(tmp_path / "train.jsonl", [{"text": "a b", "labels": ["x", "y"]}, line])
    assert main(_finetune(tiny_bert[1], train, tmp_path / "run", *extra)) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "finetune.json").exists()


def test_multilabel_options_are_refused_for_other_tasks(tiny_bert, tmp_path, capsys):
    train = _write(tmp_path / "train.jsonl", [{"text": "a b", "label": "x"}, {"text": "b", "label": "y"}])
    args = _finetune(tiny_bert[1], train, tmp_path / "run", "--multilabel-loss", "mcc")
    assert main([a for a in args if a not in ("--task", "multilabel")]) == 1
    assert "--multilabel-loss is for --task multilabel" in capsys.readouterr().err


def test_a_training_set_with_no_label_at_all_is_refused_as_nothing_to_learn(tiny_bert, tmp_path, capsys):
    """Every 'labels' list empty is legal line by line, but leaves nothing to learn (was: "give every document a
    label", which an empty list needs not)."""
    train = _write(tmp_path / "train.jsonl", [{"text": "a b", "labels": []}, {"text": "b c", "labels": []}])
    assert main(_finetune(tiny_bert[1], train, tmp_path / "run")) == 1
    err = capsys.readouterr().err
    assert "no label appears in any line (every 'labels' list is empty), so there is nothing to learn; multi-label " \
           "training needs at least one labelled document" in err and len(err.strip().splitlines()) == 1, err
    assert "give every document a label" not in err and not (tmp_path / "run").exists()


def test_a_list_as_a_classify_label_points_to_multilabel(tiny_bert, tmp_path, capsys):
    """--task classify on {"label": ["neg"]} lines: refused in one line (was: classes named "['neg']")."""
    train = _write(tmp_path / "train.jsonl", [{"text": "a b", "label": "pos"}, {"text": "b c", "label": ["neg"]}])
    args = _finetune(tiny_bert[1], train, tmp_path / "run")
    assert main([a for a in args if a not in ("--task", "multilabel")]) == 1
    err = capsys.readouterr().err
    assert "train.jsonl:2: 'label' is ['neg'], not one label (a string or an integer); a document with a list of " \
           "labels is multi-label: give them as 'labels' and pass --task multilabel" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_integer_labels_are_predicted_as_integers_and_scored_by_name(tiny_bert, tmp_path):
    """Labels written as JSON integers come back from predict as integers, beside the input's own ``labels``;
    the scores are scikit-learn's on the same sets."""
    documents = [{**d, "labels": [ord(label) - ord("x") for label in d["labels"]]} for d in _documents(0, 10)]
    train = _write(tmp_path / "train.jsonl", documents)
    run = tmp_path / "run"
    assert main(_finetune(tiny_bert[1], train, run, "--epochs", "1")) == 0
    assert json.loads((run / "finetune.json").read_text())["label_type"] == "integer"
    out = tmp_path / "out.jsonl"
    assert main(["predict", "--run", str(run), "--input", train, "--output", str(out), "--quiet",
                 "--metrics", str(tmp_path / "scores.json")]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["labels"] for row in rows] == [d["labels"] for d in documents]
    assert all(type(label) is int for row in rows for label in row["predicted_labels"])
    assert any(row["predicted_labels"] for row in rows)   # (a run that chose nothing would test no type)
    labels = [0, 1, 2]
    gold = np.array([[label in row["labels"] for label in labels] for row in rows])
    chosen = np.array([[label in row["predicted_labels"] for label in labels] for row in rows])
    _assert_sklearn(json.loads((tmp_path / "scores.json").read_text()), gold, chosen)
