"""Pack consecutive documents into full sequences (RoBERTa's FULL-SENTENCES).

The documents are laid end to end, each followed by ``[SEP]``, and the stream
is cut into sequences ``[CLS] + seq_len - 1 tokens``: no padding except in the
last sequence.

>>> from bert4long.data import pack_documents
>>> pack_documents([[5, 6, 7], [8, 9]], seq_len=4, cls_id=1, sep_id=2).tolist()
[[1, 5, 6, 7], [1, 2, 8, 9], [1, 2, 0, 0]]
"""
import numpy as np


def pack_documents(documents, seq_len, *, cls_id, sep_id, pad_id=0, drop_remainder=False):
    """int32 ``[num_sequences, seq_len]`` packed from content-id ``documents``.

    ``drop_remainder=True`` drops the last, partly padded sequence.
    """
    if seq_len < 2:
        raise ValueError(f"seq_len={seq_len} cannot hold [CLS] and one token; use seq_len >= 2")
    pieces = []
    for doc in documents:
        pieces += [np.asarray(doc, dtype=np.int32), np.array([sep_id], np.int32)]
    stream = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
    width = seq_len - 1
    rows = -(-len(stream) // width)
    if drop_remainder:
        rows = len(stream) // width
    body = np.full(rows * width, pad_id, dtype=np.int32)
    body[: min(len(stream), rows * width)] = stream[: rows * width]
    return np.concatenate([np.full((rows, 1), cls_id, np.int32), body.reshape(rows, width)], axis=1)


def pack_for(tokenizer, documents, seq_len, drop_remainder=False):
    """`pack_documents` with ``tokenizer``'s ``[CLS]``, ``[SEP]`` and padding ids (padding 0 if it has none).

    >>> from types import SimpleNamespace
    >>> tokenizer = SimpleNamespace(cls_id=0, sep_id=2, pad_id=1)   # RoBERTa's <s>, </s>, <pad>
    >>> pack_for(tokenizer, [[5, 6, 7], [8, 9]], seq_len=4).tolist()
    [[0, 5, 6, 7], [0, 2, 8, 9], [0, 2, 1, 1]]
    """
    return pack_documents(documents, seq_len, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                          pad_id=tokenizer.pad_id or 0, drop_remainder=drop_remainder)
