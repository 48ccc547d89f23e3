"""Cut long documents into overlapping windows and remember where each came from.

A model then reads every window of ``maxlen`` tokens, and
`bert4long.data.pool_chunks` turns the per-window outputs back into one
output per document with ``chunk_to_doc``.

>>> from bert4long.data import chunk_documents
>>> ids, segs, doc = chunk_documents([[5, 6, 7, 8, 9], [5]], maxlen=5, overlap=1,
...                                  cls_id=1, sep_id=2)
>>> ids.tolist(), doc.tolist()
([[1, 5, 6, 7, 2], [1, 7, 8, 9, 2], [1, 5, 2, 0, 0]], [0, 0, 1])
"""
import numpy as np


def chunk_spans(length, window, overlap=0):
    """``(start, end)`` of windows of ``window`` tokens covering ``range(length)``.

    Consecutive windows share ``overlap`` tokens; the last window ends at
    ``length`` (it may be shorter). An empty document gives one empty window.
    """
    if window < 1:
        raise ValueError(f"window={window} must be >= 1")
    if not 0 <= overlap < window:
        raise ValueError(f"overlap={overlap} must lie in [0, window={window})")
    step = window - overlap
    spans = [(0, min(window, length))]
    while spans[-1][1] < length:
        start = spans[-1][0] + step
        spans.append((start, min(start + window, length)))
    return spans


def chunk_documents(documents, maxlen, overlap=0, *, cls_id, sep_id, pad_id=0):
    """Every document as windows ``[CLS] + content + [SEP]`` of at most ``maxlen``.

    Args:
        documents: content ids per document (no ``[CLS]``/``[SEP]``).
        maxlen: sequence length, specials included.
        overlap: content tokens shared by consecutive windows of a document.
        cls_id, sep_id, pad_id: special ids.

    Returns:
        ``(token_ids, segment_ids, chunk_to_doc)``: int32 arrays
        ``[num_chunks, maxlen]``, ``[num_chunks, maxlen]`` (zeros) and
        ``[num_chunks]`` (document index of each window, non-decreasing).
        Every document, even an empty one, gets at least one window, so
        pooling gives exactly one row per document.
    """
    if maxlen < 3:
        raise ValueError(f"maxlen={maxlen} leaves no room beside [CLS] and [SEP]; use maxlen >= 3")
    rows, owners = [], []
    for index, doc in enumerate(documents):
        doc = np.asarray(doc, dtype=np.int32)
        for start, end in chunk_spans(len(doc), maxlen - 2, overlap):
            row = np.full(maxlen, pad_id, dtype=np.int32)
            row[0], row[1:end - start + 1], row[end - start + 1] = cls_id, doc[start:end], sep_id
            rows.append(row)
            owners.append(index)
    token_ids = np.stack(rows) if rows else np.zeros((0, maxlen), np.int32)
    return token_ids, np.zeros_like(token_ids), np.asarray(owners, dtype=np.int32)
