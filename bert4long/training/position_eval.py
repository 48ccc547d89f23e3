"""MLM accuracy by position region: how well a model reads text beyond the positions it was trained on.

`masked_counts` predicts the masked positions of held-out sequences under a fixed masking
seed and counts, per sequence, predictions and correct ones before and from a boundary
(the trained length), over all masked positions and over the ``[MASK]``-replaced ones only.
``split=L`` reads every sequence as independent ``L``-token windows instead (no position
extension: the baseline a longer reading must beat). `accuracy_with_error` pools the counts
and gives a standard error clustered by group (document or window).
"""
from typing import Any

import numpy as np

from bert4long.training.mlm import mlm_batches

REGIONS = ("lt_all", "lt_mask", "ge_all", "ge_mask")


def _predict_split(predict, tokens, positions, split):
    """Argmax predictions at ``positions`` with each ``split``-token window read on its own."""
    predicted = np.zeros(positions.shape, "int32")
    for start in range(0, tokens.shape[1], split):
        inside = (positions >= start) & (positions < start + split)
        local = np.where(inside, positions - start, 0).astype("int32")
        window = np.ascontiguousarray(tokens[:, start:start + split])
        logits = np.asarray(predict((window, np.zeros_like(window), local)))
        predicted = np.where(inside, logits.argmax(-1), predicted)
    return predicted


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
    prediction / those whose input token is ``[MASK]``. The masking is a pure function of
    ``(seed, sequence index)``, so every model and ``split`` sees the same masked tokens.

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
    import tensorflow as tf

    sequences = np.asarray(sequences, dtype="int32")

    def predict(x):
        return model(x, training=False)

    if compiled:  # a few batches: tf.function without an XLA compile, one trace for every length
        spec = tf.TensorSpec([None, None], tf.int32)
        predict = tf.function(predict, input_signature=[(spec, spec, spec)])
    steps = -(-len(sequences) // batch_size)
    counts = {f"{kind}_{region}": np.zeros(len(sequences), "int64") for kind in ("n", "correct") for region in REGIONS}
    batches = mlm_batches(sequences, masker, batch_size, seed=seed, shuffle=False)
    for step, ((tokens, _segments, positions), labels, weights) in enumerate(batches.take(steps)):
        tokens, positions, labels, weights = (t.numpy() for t in (tokens, positions, labels, weights))
        if split:
            predicted = _predict_split(predict, tokens, positions, split)
        else:
            predicted = np.asarray(predict((tokens, np.zeros_like(tokens), positions))).argmax(-1)
        keep = weights > 0
        correct = (predicted == labels) & keep
        is_mask = np.take_along_axis(tokens, positions, axis=1) == masker.mask_id
        rows = np.arange(step * batch_size, (step + 1) * batch_size)
        inside = rows < len(sequences)   # the last batch wraps around to the first sequences
        for region, where in (("lt", positions < boundary), ("ge", positions >= boundary)):
            for kind, chosen in (("all", keep), ("mask", keep & is_mask)):
                counts[f"n_{region}_{kind}"][rows[inside]] += (where & chosen).sum(1)[inside]
                counts[f"correct_{region}_{kind}"][rows[inside]] += (where & chosen & correct).sum(1)[inside]
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
