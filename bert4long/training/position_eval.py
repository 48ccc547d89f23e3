"""MLM accuracy by position region: how well a model reads text beyond the positions it was trained on.

`masked_predictions` predicts the masked positions of held-out sequences under a fixed masking
seed and keeps one record per token (for paired comparisons of two models); `masked_counts` counts,
per sequence, predictions and correct ones before and from a boundary
(the trained length), over all masked positions and over the ``[MASK]``-replaced ones only.
``split=L`` reads every sequence as independent ``L``-token windows instead (no position
extension: the baseline a longer reading must beat). `accuracy_with_error` pools the counts
and gives a standard error clustered by group (document or window).
"""
from typing import Any

import numpy as np

from bert4long.training.mlm import mlm_batches

REGIONS = ("lt_all", "lt_mask", "ge_all", "ge_mask")


def mlm_reader(model, compiled=True):
    """``predict((token_ids, segment_ids, positions)) -> logits`` of an MLM model at inference, a `tf.function`
    traced once for every length when ``compiled`` (a few batches: no XLA compile)."""
    import tensorflow as tf

    def predict(x):
        return model(x, training=False)

    if not compiled:
        return predict
    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.function(predict, input_signature=[(spec, spec, spec)])


def predicted_at(predict, tokens, positions, split=None):
    """Argmax predictions ``[batch, P]`` at ``positions`` of ``tokens`` ``[batch, length]`` (`mlm_reader`), the
    sequences read whole, or (``split``) each ``split``-token window on its own.

    >>> import numpy as np
    >>> echo = lambda x: np.eye(16)[np.take_along_axis(x[0], x[2], axis=1)]   # a "model" predicting its input
    >>> predicted_at(echo, np.arange(8)[None] + 5, np.array([[1, 6]]), split=4).tolist()
    [[6, 11]]
    """
    if not split:
        return np.asarray(predict((tokens, np.zeros_like(tokens), positions))).argmax(-1)
    predicted = np.zeros(positions.shape, "int32")
    for start in range(0, tokens.shape[1], split):
        inside = (positions >= start) & (positions < start + split)
        local = np.where(inside, positions - start, 0).astype("int32")
        window = np.ascontiguousarray(tokens[:, start:start + split])
        logits = np.asarray(predict((window, np.zeros_like(window), local)))
        predicted = np.where(inside, logits.argmax(-1), predicted)
    return predicted


def masked_predictions(
    model: Any,
    sequences: np.typing.ArrayLike,
    masker: Any,
    split: int | None = None,
    batch_size: int = 8,
    seed: int = 12345,
    compiled: bool = True,
) -> dict[str, np.ndarray]:
    """One record per masked token of ``sequences``: flat arrays ``sequence``, ``position``, ``is_mask``, ``correct``.

    ``is_mask``: the input token there is ``[MASK]`` (not a random or unchanged one). The masking is a pure
    function of ``(seed, sequence index)``, so every model and ``split`` gets the same records in the same
    order, and two models' ``correct`` arrays pair token by token.

    Example:
    >>> import numpy as np
    >>> from bert4long.data.masking import MLMMasker
    >>> from bert4long.training.position_eval import masked_predictions
    >>> masker = MLMMasker(vocab_size=16, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=3)
    >>> guess_nine = lambda x, training: np.eye(16)[np.full(x[2].shape, 9)]   # a "model" always saying 9
    >>> records = masked_predictions(guess_nine, np.full((3, 8), 9, "int32"), masker, compiled=False)
    >>> bool(records["correct"].all()), sorted(set(records["sequence"].tolist()))
    (True, [0, 1, 2])
    """
    sequences = np.asarray(sequences, dtype="int32")
    predict = mlm_reader(model, compiled)
    steps = -(-len(sequences) // batch_size)
    parts = {"sequence": [], "position": [], "is_mask": [], "correct": []}
    batches = mlm_batches(sequences, masker, batch_size, seed=seed, shuffle=False)
    for step, ((tokens, _segments, positions), labels, weights) in enumerate(batches.take(steps)):
        tokens, positions, labels, weights = (t.numpy() for t in (tokens, positions, labels, weights))
        predicted = predicted_at(predict, tokens, positions, split)
        rows = np.broadcast_to(np.arange(step * batch_size, (step + 1) * batch_size)[:, None], positions.shape)
        keep = (weights > 0) & (rows < len(sequences))   # the last batch wraps around to the first sequences
        parts["sequence"].append(rows[keep])
        parts["position"].append(positions[keep])
        parts["is_mask"].append(np.take_along_axis(tokens, positions, axis=1)[keep] == masker.mask_id)
        parts["correct"].append((predicted == labels)[keep])
    return {name: np.concatenate(values) for name, values in parts.items()}


def masked_counts(
    model: Any,
    sequences: np.typing.ArrayLike,
    masker: Any,
    boundary: int,
    split: int | None = None,
    batch_size: int = 8,
    seed: int = 12345,
    compiled: bool = True,
) -> dict[str, np.ndarray]:
    """Per-sequence ``n_<region>`` and ``correct_<region>`` counts (int arrays ``[N]``) for `REGIONS`.

    ``lt``/``ge``: masked positions before / from ``boundary``; ``all``/``mask``: every
    prediction / those whose input token is ``[MASK]``. Counted from `masked_predictions`'s records.

    Example:
    >>> import numpy as np
    >>> from bert4long.data.masking import MLMMasker
    >>> from bert4long.training.position_eval import masked_counts
    >>> masker = MLMMasker(vocab_size=16, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=3)
    >>> guess_nine = lambda x, training: np.eye(16)[np.full(x[2].shape, 9)]   # a "model" always saying 9
    >>> counts = masked_counts(guess_nine, np.full((3, 8), 9, "int32"), masker, boundary=4, compiled=False)
    >>> int(counts["n_lt_all"].sum() + counts["n_ge_all"].sum()) == int(counts["correct_lt_all"].sum()
    ...                                                                 + counts["correct_ge_all"].sum())
    True
    """
    records = masked_predictions(model, sequences, masker, split=split, batch_size=batch_size, seed=seed,
                                 compiled=compiled)
    return counts_by_region(records, boundary, len(np.asarray(sequences)))


def counts_by_region(records: dict[str, np.ndarray], boundary: int, sequences: int) -> dict[str, np.ndarray]:
    """`masked_counts`'s per-sequence counts from `masked_predictions`'s ``records``."""
    counts = {}
    for region, where in (("lt", records["position"] < boundary), ("ge", records["position"] >= boundary)):
        for kind, chosen in (("all", where), ("mask", where & records["is_mask"])):
            counts[f"n_{region}_{kind}"] = np.bincount(records["sequence"][chosen], minlength=sequences)
            counts[f"correct_{region}_{kind}"] = np.bincount(
                records["sequence"][chosen & records["correct"]], minlength=sequences)
    return counts


def accuracy_with_error(n: np.typing.ArrayLike, correct: np.typing.ArrayLike,
                        groups: np.typing.ArrayLike | None = None) -> tuple[float, float]:
    """Pooled accuracy ``sum(correct) / sum(n)`` and its standard error, clustered by ``groups``.

    The ratio estimator's error: items of one group (say the windows of one document) count as
    one draw, so correlated windows do not shrink the error. ``nan`` where nothing was counted.

    >>> acc, se = accuracy_with_error([10, 10, 10, 10], [5, 6, 4, 5])
    >>> round(acc, 3), round(se, 3)
    (0.5, 0.041)
    """
    n, correct = np.asarray(n, "float64"), np.asarray(correct, "float64")
    if groups is not None:
        labels, index = np.unique(np.asarray(groups), return_inverse=True)
        n, correct = np.bincount(index, n, len(labels)), np.bincount(index, correct, len(labels))
    total = n.sum()
    if total == 0:
        return float("nan"), float("nan")
    accuracy = correct.sum() / total
    k = len(n)
    if k < 2:
        return float(accuracy), float("nan")
    residual = correct - accuracy * n
    return float(accuracy), float(np.sqrt(k / (k - 1) * (residual ** 2).sum()) / total)
