"""Scores a practitioner reads: per-class precision/recall/F1, macro-F1, the confusion matrix and the majority-class
baseline for classification; micro-, macro- and example-based F1 for multi-label classification, with the decision
threshold chosen on validation (`tuned_multilabel_scores`); entity-level F1 (seqeval's chunk definition, BIO/IOBES)
and token accuracy for token labelling. Pure Python and NumPy on label names; `format_scores` prints them as a small
table.
"""
import time
from collections import Counter
from collections.abc import Callable, Sequence

import keras
import numpy as np


def _ratio(numerator, denominator):
    return numerator / denominator if denominator else 0.0


def _f1(precision, recall):
    return _ratio(2 * precision * recall, precision + recall)


def classification_scores(gold: Sequence, predicted: Sequence, labels: Sequence) -> dict:
    """Accuracy, macro-F1, per-class precision/recall/F1/support, the confusion matrix (rows: gold, columns:
    predicted, in ``labels``' order) and the majority-class baseline (the accuracy of always answering the most
    frequent gold label).

    >>> s = classification_scores(["a", "a", "a", "b"], ["a", "b", "a", "b"], ["a", "b"])
    >>> s["accuracy"], round(s["macro_f1"], 4), s["majority_baseline"], s["confusion"]
    (0.75, 0.7333, 0.75, [[2, 1], [0, 1]])
    >>> s["per_class"]["b"]
    {'precision': 0.5, 'recall': 1.0, 'f1': 0.6666666666666666, 'support': 1}
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions: give one prediction per example")
    if not gold:
        raise ValueError("no examples to score: the labelled input is empty")
    index = {label: i for i, label in enumerate(labels)}
    confusion = [[0] * len(labels) for _ in labels]
    for g, p in zip(gold, predicted):
        confusion[index[g]][index[p]] += 1
    per_class = {}
    for i, label in enumerate(labels):
        correct, support = confusion[i][i], sum(confusion[i])
        precision = _ratio(correct, sum(row[i] for row in confusion))
        recall = _ratio(correct, support)
        per_class[label] = {"precision": precision, "recall": recall, "f1": _f1(precision, recall),
                            "support": support}
    majority, count = Counter(gold).most_common(1)[0]
    return {
        "examples": len(gold),
        "accuracy": _ratio(sum(confusion[i][i] for i in range(len(labels))), len(gold)),
        "macro_f1": sum(c["f1"] for c in per_class.values()) / len(labels),
        "majority_baseline": count / len(gold),
        "majority_label": majority,
        "per_class": per_class,
        "labels": list(labels),
        "confusion": confusion,
    }


THRESHOLD_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))   # 0.05, 0.10, ..., 0.95


def _label_counts(gold, chosen):
    """Per-label true positives, false positives and false negatives of bool ``[..., N, labels]`` matrices."""
    return (gold & chosen).sum(-2), (~gold & chosen).sum(-2), (gold & ~chosen).sum(-2)


def _f1_of_counts(tp, fp, fn):
    """``2tp / (2tp + fp + fn)``, 0 where nothing is gold or chosen (scikit-learn's ``zero_division=0``)."""
    total = 2 * tp + fp + fn
    return np.where(total > 0, 2 * tp / np.maximum(total, 1), 0.0)


def multilabel_scores(gold: np.typing.ArrayLike, chosen: np.typing.ArrayLike, labels: Sequence) -> dict:
    """Micro-F1 (with its precision and recall), macro-F1, example-based F1 (scikit-learn's ``average='samples'``) and
    per-label precision/recall/F1/support of the label sets ``chosen`` against ``gold`` (0/1 ``[N, labels]``). A
    ratio with nothing to count is 0 (scikit-learn's ``zero_division=0``): a label never gold nor chosen has F1 0, and
    so has a document with no gold and no chosen label.

    >>> s = multilabel_scores([[1, 0], [1, 1]], [[1, 1], [1, 0]], ["a", "b"])
    >>> s["micro_f1"], s["macro_f1"], round(s["samples_f1"], 4), s["per_class"]["b"]["f1"]
    (0.6666666666666666, 0.5, 0.6667, 0.0)
    """
    gold, chosen = np.asarray(gold).astype(bool), np.asarray(chosen).astype(bool)
    if gold.shape != chosen.shape or gold.ndim != 2 or not len(gold):
        raise ValueError(f"gold {gold.shape} and chosen {chosen.shape} label sets differ or are empty: give one 0/1 "
                         "row per example, one column per label")
    tp, fp, fn = _label_counts(gold, chosen)
    per_class = {label: {"precision": _ratio(int(tp[i]), int(tp[i] + fp[i])),
                         "recall": _ratio(int(tp[i]), int(tp[i] + fn[i])),
                         "f1": float(_f1_of_counts(tp[i], fp[i], fn[i])), "support": int(tp[i] + fn[i])}
                 for i, label in enumerate(labels)}
    per_example = _f1_of_counts(*_label_counts(gold.T, chosen.T))
    return {
        "examples": len(gold),
        "micro_f1": float(_f1_of_counts(tp.sum(), fp.sum(), fn.sum())),
        "micro_precision": _ratio(int(tp.sum()), int(tp.sum() + fp.sum())),
        "micro_recall": _ratio(int(tp.sum()), int(tp.sum() + fn.sum())),
        "macro_f1": sum(c["f1"] for c in per_class.values()) / len(labels),
        "samples_f1": float(per_example.mean()),
        "per_class": per_class,
        "labels": list(labels),
    }


def tuned_multilabel_scores(gold, probabilities, labels, metric="micro_f1", threshold="global") -> dict:
    """`multilabel_scores` of the labels whose probability is at least a threshold, recorded as ``threshold``:
    ``'global'``, the value of `THRESHOLD_GRID` with the best ``metric`` (the smallest of equals); ``'per-label'``,
    for each label the grid value with its best F1 (the smallest of equals); a number, that threshold.

    >>> tuned_multilabel_scores([[1, 0], [0, 1]], [[0.7, 0.2], [0.3, 0.4]], ["a", "b"])["threshold"]
    0.35
    """
    gold, probabilities = np.asarray(gold).astype(bool), np.asarray(probabilities)
    if threshold == "per-label":
        grid = np.asarray(THRESHOLD_GRID)[:, None, None]
        f1 = _f1_of_counts(*_label_counts(gold[None], probabilities[None] >= grid))   # [grid, labels]
        threshold = [THRESHOLD_GRID[i] for i in f1.argmax(0)]
    elif threshold == "global":
        threshold = max(THRESHOLD_GRID, key=lambda t: multilabel_scores(gold, probabilities >= t, labels)[metric])
    return {**multilabel_scores(gold, probabilities >= np.asarray(threshold), labels), "threshold": threshold}


def _split(tag):
    """``(prefix, type)`` of a tag as seqeval reads it: ``B-PER`` -> ``('B', 'PER')``, ``O`` -> ``('O', '_')``."""
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _ends(prev, tag, prev_type, type_):
    return (prev in ("E", "S") or (prev in ("B", "I") and tag in ("B", "S", "O"))
            or (prev not in ("O", ".") and prev_type != type_))


def _starts(prev, tag, prev_type, type_):
    return (tag in ("B", "S") or (prev in ("E", "S", "O") and tag in ("E", "I"))
            or (tag not in ("O", ".") and prev_type != type_))


def entities(sequences: Sequence[Sequence[str]]) -> set:
    """The chunks ``(type, sentence, start, end)`` (end inclusive) of tag sequences, by seqeval's default
    (conlleval) rules: an ``I-`` without a ``B-`` still starts a chunk, a change of type ends one.

    >>> sorted(entities([["B-PER", "I-PER", "O", "I-LOC"], ["S-ORG", "B-PER", "I-LOC"]]))
    [('LOC', 0, 3, 3), ('LOC', 1, 2, 2), ('ORG', 1, 0, 0), ('PER', 0, 0, 1), ('PER', 1, 1, 1)]
    """
    found = set()
    for sentence, tags in enumerate(sequences):
        prev, prev_type, begin = "O", "", 0
        for i, tag in enumerate([*tags, "O"]):
            prefix, type_ = _split(tag)
            if _ends(prev, prefix, prev_type, type_):
                found.add((prev_type, sentence, begin, i - 1))
            if _starts(prev, prefix, prev_type, type_):
                begin = i
            prev, prev_type = prefix, type_
    return found


def tagging_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Entity-level micro precision/recall/F1 (seqeval's ``f1_score`` default), per entity type, and token
    accuracy, for one tag list per document.

    >>> s = tagging_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    >>> s["entity_f1"], s["token_accuracy"]
    (0.0, 0.6666666666666666)
    """
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted tags differ in length: give one predicted tag per gold tag")
    true, found = entities(gold), entities(predicted)
    per_type = {}
    for type_ in sorted({e[0] for e in true | found}):
        t = {e for e in true if e[0] == type_}
        f = {e for e in found if e[0] == type_}
        precision, recall = _ratio(len(t & f), len(f)), _ratio(len(t & f), len(t))
        per_type[type_] = {"precision": precision, "recall": recall, "f1": _f1(precision, recall), "support": len(t)}
    precision, recall = _ratio(len(true & found), len(found)), _ratio(len(true & found), len(true))
    tokens = sum(len(g) for g in gold)
    return {
        "documents": len(gold),
        "entity_precision": precision,
        "entity_recall": recall,
        "entity_f1": _f1(precision, recall),
        "token_accuracy": _ratio(sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p)), tokens),
        "per_type": per_type,
    }


def scores_from_ids(predicted, gold, labels, weights=None, owner=None) -> dict:
    """`classification_scores` of label ids ``[N]``, or (with token ``weights`` and window ``owner``, as
    `bert4long.data.tagging.encode_tagged` gives them) `tagging_scores` of each document's tags ``[windows, len]``.

    >>> scores_from_ids(np.array([0, 1]), np.array([0, 0]), ["a", "b"])["accuracy"]
    0.5
    """
    predicted, gold = np.asarray(predicted), np.asarray(gold)
    if weights is None:
        return classification_scores([labels[i] for i in gold], [labels[i] for i in predicted], labels)
    docs = range(int(owner.max()) + 1) if len(owner) else []
    keep = np.asarray(weights) > 0
    tags = [[[labels[i] for i in ids[owner == d][keep[owner == d]]] for d in docs] for ids in (gold, predicted)]
    return tagging_scores(*tags)


def score_scalars(scores: dict) -> dict[str, float]:
    """The numbers of `classification_scores` (accuracy, macro-F1, each class's F1 as ``f1/LABEL``), of
    `multilabel_scores` (micro-, macro- and example-based F1, each label's F1) or of
    `tagging_scores` (entity F1, precision and recall, token accuracy, each entity type's F1), by name: what a
    TensorBoard log plots.

    >>> score_scalars(classification_scores(["a", "b"], ["a", "a"], ["a", "b"]))
    {'accuracy': 0.5, 'macro_f1': 0.3333333333333333, 'f1/a': 0.6666666666666666, 'f1/b': 0.0}
    """
    if "samples_f1" in scores:
        names, per = ("micro_f1", "macro_f1", "samples_f1"), scores["per_class"]
    elif "macro_f1" in scores:
        names, per = ("accuracy", "macro_f1"), scores["per_class"]
    else:
        names, per = ("entity_f1", "entity_precision", "entity_recall", "token_accuracy"), scores["per_type"]
    return {**{name: scores[name] for name in names}, **{f"f1/{key}": value["f1"] for key, value in per.items()}}


class EpochScores(keras.callbacks.Callback):
    """Calls ``on_epoch(epoch, train_logs)`` after every ``steps_per_epoch`` training batches and, with ``every``,
    ``on_step(step, train_logs)`` after every ``every`` batches that end no epoch (an epoch's end is scored once);
    ``train_logs`` (loss, accuracy) are the epoch's so far (`fit_resumable` restarts the compiled metrics at each
    epoch's start), with ``seconds``, the epoch's time so far.

    ``start(step)`` tells it the global step the ``fit`` starts from (a resumed run).
    """

    def __init__(self, steps_per_epoch: int, on_epoch: Callable[[int, dict], None], every: int | None = None,
                 on_step: Callable[[int, dict], None] | None = None):
        super().__init__()
        self.steps_per_epoch, self.on_epoch, self.step = max(1, int(steps_per_epoch)), on_epoch, 0
        self.every, self.on_step = every, on_step
        self.epoch_began = None

    def start(self, step):
        self.step = int(step)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.epoch_began is None:
            self.epoch_began = time.perf_counter()
        logs = {k: float(v) for k, v in (logs or {}).items()}
        logs["seconds"] = time.perf_counter() - self.epoch_began
        if self.step % self.steps_per_epoch == 0:
            self.on_epoch(self.step // self.steps_per_epoch, logs)
            self.epoch_began = time.perf_counter()
        elif self.every and self.step % self.every == 0:
            self.on_step(self.step, logs)


def _table(header, rows):
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     for r in [header, *rows])


def format_classification(scores: dict) -> str:
    """A small table: one row per class, the confusion matrix, and the summary line."""
    labels = scores["labels"]
    rows = [(label, f"{c['precision']:.3f}", f"{c['recall']:.3f}", f"{c['f1']:.3f}", c["support"])
            for label, c in scores["per_class"].items()]
    confusion = [(f"gold {label}", *counts) for label, counts in zip(labels, scores["confusion"])]
    return "\n".join([
        _table(("class", "precision", "recall", "f1", "support"), rows),
        _table(("confusion", *(f"pred {label}" for label in labels)), confusion),
        f"accuracy {scores['accuracy']:.3f}  macro-F1 {scores['macro_f1']:.3f}  majority baseline "
        f"{scores['majority_baseline']:.3f} ({scores['majority_label']})  on {scores['examples']} examples",
    ])


def format_multilabel(scores: dict) -> str:
    """A small table: one row per label, then micro-, macro- and example-based F1 and the threshold."""
    rows = [(label, f"{c['precision']:.3f}", f"{c['recall']:.3f}", f"{c['f1']:.3f}", c["support"])
            for label, c in scores["per_class"].items()]
    threshold = scores.get("threshold")
    return "\n".join([
        _table(("label", "precision", "recall", "f1", "support"), rows),
        f"micro-F1 {scores['micro_f1']:.3f} (P {scores['micro_precision']:.3f}, R {scores['micro_recall']:.3f})  "
        f"macro-F1 {scores['macro_f1']:.3f}  samples-F1 {scores['samples_f1']:.3f}  on {scores['examples']} examples"
        + ("" if threshold is None else f"  threshold {threshold}"),
    ])


def format_scores(scores: dict) -> str:
    """`format_classification`, `format_multilabel` or `format_tagging`, for the scores given."""
    if "samples_f1" in scores:
        return format_multilabel(scores)
    return format_classification(scores) if "macro_f1" in scores else format_tagging(scores)


def format_tagging(scores: dict) -> str:
    """A small table: one row per entity type, then entity F1 and token accuracy."""
    rows = [(t, f"{c['precision']:.3f}", f"{c['recall']:.3f}", f"{c['f1']:.3f}", c["support"])
            for t, c in scores["per_type"].items()]
    return "\n".join([
        _table(("entity", "precision", "recall", "f1", "support"), rows),
        f"entity F1 {scores['entity_f1']:.3f}  (P {scores['entity_precision']:.3f}, R "
        f"{scores['entity_recall']:.3f})  token accuracy {scores['token_accuracy']:.3f}  on {scores['documents']} "
        "documents",
    ])
