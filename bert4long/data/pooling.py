"""Pool per-window outputs back into one output per document.

``mode`` is ``"mean"`` or ``"max"`` over a document's windows, or
``"first"``: the output of its first window (what head truncation would see).

>>> import numpy as np
>>> from bert4long.data import pool_chunks
>>> pool_chunks(np.array([[1.0], [3.0], [5.0]]), np.array([0, 0, 1]), 2, "mean").tolist()
[[2.0], [5.0]]
"""
import numpy as np

MODES = ("mean", "max", "first")


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def pool_chunks(chunk_outputs, chunk_to_doc, num_documents, mode="mean"):
    """NumPy pooling of ``chunk_outputs [num_chunks, ...]`` into ``[num_documents, ...]``.

    A document without any window raises ``ValueError`` (its row would be
    undefined); `chunk_documents` always gives each document a window.
    """
    _check_mode(mode)
    outputs = np.asarray(chunk_outputs)
    owners = np.asarray(chunk_to_doc)
    counts = np.bincount(owners, minlength=num_documents)
    if len(counts) != num_documents or not counts.all():
        missing = np.flatnonzero(counts[:num_documents] == 0).tolist() or "indices >= num_documents"
        raise ValueError(f"chunk_to_doc does not cover documents 0..{num_documents - 1}: {missing}")
    if mode == "first":
        first = np.full(num_documents, len(owners))
        np.minimum.at(first, owners, np.arange(len(owners)))
        return outputs[first]
    if mode == "max":
        pooled = np.full((num_documents,) + outputs.shape[1:], -np.inf, dtype=outputs.dtype)
        np.maximum.at(pooled, owners, outputs)
        return pooled
    pooled = np.zeros((num_documents,) + outputs.shape[1:], dtype=np.result_type(outputs, np.float32))
    np.add.at(pooled, owners, outputs)
    return pooled / counts.reshape((-1,) + (1,) * (outputs.ndim - 1))


def pool_chunks_ops(chunk_outputs, chunk_to_doc, num_documents, mode="mean"):
    """`pool_chunks` with ``keras.ops``: runs in a model, under ``tf.function``.

    ``num_documents`` is the number of output rows: an int, or a scalar int tensor
    (a serving batch's size).
    """
    _check_mode(mode)
    from keras import ops  # (here: pool_chunks and MODES need no Keras)

    outputs = ops.convert_to_tensor(chunk_outputs)
    owners = ops.cast(chunk_to_doc, "int32")
    if mode == "first":
        positions = ops.arange(ops.shape(owners)[0], dtype="int32")
        first = -ops.segment_max(-positions, owners, num_segments=num_documents)
        return ops.take(outputs, first, axis=0)
    if mode == "max":
        return ops.segment_max(outputs, owners, num_segments=num_documents)
    totals = ops.segment_sum(outputs, owners, num_segments=num_documents)
    counts = ops.segment_sum(ops.ones_like(owners, dtype=outputs.dtype), owners,
                             num_segments=num_documents)
    return totals / ops.reshape(counts, (-1,) + (1,) * (len(outputs.shape) - 1))

