"""Documents as fixed-shape rows for a classifier: the head of each document, or its first windows.

>>> from types import SimpleNamespace
>>> from bert4long.data import document_rows
>>> tokenizer = SimpleNamespace(cls_id=1, sep_id=2, pad_id=0)
>>> document_rows(tokenizer, [[5, 6, 7, 8], [9]], seq_len=4).tolist()
[[1, 5, 6, 2], [1, 9, 2, 0]]
>>> document_rows(tokenizer, [[5, 6, 7, 8], [9]], seq_len=4, chunks=2).tolist()
[[[1, 5, 6, 2], [1, 7, 8, 2]], [[1, 9, 2, 0], [0, 0, 0, 0]]]
"""
import numpy as np

from bert4long.data.chunking import chunk_documents
from bert4long.data.truncation import truncate


def document_rows(tokenizer, token_ids, seq_len, chunks=None):
    """int32 ``[N, seq_len]``: each document's head (`truncate`) between ``[CLS]`` and ``[SEP]``; with ``chunks``,
    ``[N, chunks, seq_len]``: its first ``chunks`` windows (`chunk_documents`), padding rows after the last.
    Padding is the tokenizer's ``pad_id`` (0 if it has none)."""
    pad = tokenizer.pad_id or 0
    if chunks is None:
        out = np.full((len(token_ids), seq_len), pad, "int32")
        for i, doc in enumerate(token_ids):
            row = truncate(doc, seq_len, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
            out[i, : len(row)] = row
        return out
    windows, _, owner = chunk_documents(token_ids, seq_len, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                                        pad_id=pad)
    out = np.full((len(token_ids), chunks, seq_len), pad, "int32")
    for doc in range(len(token_ids)):
        mine = windows[owner == doc][:chunks]
        out[doc, : len(mine)] = mine
    return out
