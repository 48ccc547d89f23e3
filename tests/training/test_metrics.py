"""The metrics a fine-tune prints against independent references: scikit-learn for classification, seqeval for
entity-level F1."""
import numpy as np
import pytest

from bert4long.training.metrics import classification_scores, format_classification, format_tagging, tagging_scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classification_scores_match_sklearn(seed):
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    labels = ["democrat", "republican", "other"]
    gold = [labels[i] for i in rng.choice(3, 40, p=[0.6, 0.3, 0.1])]
    predicted = [labels[i] for i in rng.choice(3, 40)]
    scores = classification_scores(gold, predicted, labels)
    precision, recall, f1, support = metrics.precision_recall_fscore_support(gold, predicted, labels=labels,
                                                                            zero_division=0)
    for i, label in enumerate(labels):
        assert scores["per_class"][label] == pytest.approx(
            {"precision": precision[i], "recall": recall[i], "f1": f1[i], "support": support[i]})
    assert scores["accuracy"] == pytest.approx(metrics.accuracy_score(gold, predicted))
    assert scores["macro_f1"] == pytest.approx(metrics.f1_score(gold, predicted, labels=labels, average="macro",
                                                                zero_division=0))
    assert scores["confusion"] == metrics.confusion_matrix(gold, predicted, labels=labels).tolist()
    assert scores["majority_baseline"] == max(gold.count(label) for label in labels) / 40
    assert "macro-F1" in format_classification(scores)


def test_a_class_never_predicted_scores_zero_not_nan():
    scores = classification_scores(["a", "b", "b"], ["b", "b", "b"], ["a", "b"])
    assert scores["per_class"]["a"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert scores["macro_f1"] == pytest.approx(0.4)


def _random_tags(rng, n):
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-PER", "S-LOC", "I-MISC", "B-MISC", "E-LOC"]
    return [str(t) for t in rng.choice(tags, n, p=[0.4] + [0.6 / 9] * 9)]


@pytest.mark.parametrize("seed", range(5))
def test_entity_f1_matches_seqeval(seed):
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 15, 12)
    gold = [_random_tags(rng, n) for n in lengths]
    predicted = [[g if rng.random() < 0.7 else t for g, t in zip(doc, _random_tags(rng, len(doc)))] for doc in gold]
    scores = tagging_scores(gold, predicted)
    assert scores["entity_f1"] == pytest.approx(seqeval.f1_score(gold, predicted))
    assert scores["entity_precision"] == pytest.approx(seqeval.precision_score(gold, predicted))
    assert scores["entity_recall"] == pytest.approx(seqeval.recall_score(gold, predicted))
    report = seqeval.classification_report(gold, predicted, output_dict=True, zero_division=0)
    for type_, row in scores["per_type"].items():
        if type_ in report:
            assert row["f1"] == pytest.approx(report[type_]["f1-score"])
            assert row["support"] == report[type_]["support"]
    assert scores["token_accuracy"] == pytest.approx(seqeval.accuracy_score(gold, predicted))
    assert "entity F1" in format_tagging(scores)


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="one prediction per example"):
        classification_scores(["a"], [], ["a"])
    with pytest.raises(ValueError, match="one predicted tag per gold tag"):
        tagging_scores([["O", "B-X"]], [["O"]])
