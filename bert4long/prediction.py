"""A model's answers for padded rows, read in batches by length: what `predict`, validation scoring
(`bert4long.training.metrics_record`) and the exported model's callers share.

>>> from bert4long.prediction import sigmoid
>>> sigmoid([0.0]).tolist()
[0.5]
"""


def sigmoid(logits):
    """float64 ``1 / (1 + exp(-logits))``: a multi-label model's probabilities."""
    import numpy as np

    return 1 / (1 + np.exp(-np.asarray(logits, "float64")))



def model_inputs(model, token_ids):
    """What ``model`` takes for ``token_ids``: ``(token_ids, segment_ids)``, or the ids alone (ModernBERT)."""
    from bert4long.training import takes_segment_ids

    return (token_ids, token_ids * 0) if takes_segment_ids(model) else (token_ids,)



def predicted_ids(model, rows, shapes, batch_size, answer=None):
    """``model``'s argmax (or ``answer(outputs)``, one fixed-shape answer a row, e.g. `sigmoid`) for every row of
    ``rows`` (padded ids), read in batches by length (`sorted_batches`, each cut to its rows' padded ``shapes``) and
    put back in row order; a token past its batch's length (padding) gets 0."""
    import numpy as np

    from bert4long.data.length_batches import cut, sorted_batches

    out = None
    for index in sorted_batches(shapes, batch_size):
        outputs = np.asarray(model.predict_on_batch(model_inputs(model, cut(rows[index], shapes[index]))))
        ids = outputs.argmax(-1) if answer is None else answer(outputs)
        if out is None:
            out = np.zeros((len(rows), *(rows.shape[1:ids.ndim] if answer is None else ids.shape[1:])), ids.dtype)
        for i, row in zip(index, ids):
            out[(i, *(slice(0, n) for n in row.shape))] = row
    return out
