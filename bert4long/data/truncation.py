"""Fit one long document into one sequence: keep its head, its tail, or both.

Sun et al. (2019), "How to Fine-Tune BERT for Text Classification?", found
``head+tail`` (the first 128 and the last 382 tokens) best on long reviews.

>>> from bert4long.data import truncate
>>> truncate(list(range(10, 20)), maxlen=7, strategy="head+tail", head_len=2, cls_id=1, sep_id=2)
array([ 1, 10, 11, 17, 18, 19,  2], dtype=int32)
"""
import numpy as np

STRATEGIES = ("head", "tail", "head+tail")
RAW_TEXT_STRATEGIES = STRATEGIES + ("chunks",)   # what a raw-text SavedModel does with a long text


def truncate(token_ids, maxlen, strategy="head", head_len=128, *, cls_id, sep_id):
    """``[CLS] + kept content + [SEP]`` with at most ``maxlen`` tokens.

    Args:
        token_ids: the document's content ids, without ``[CLS]``/``[SEP]``
            (e.g. from ``Tokenizer.content_ids``).
        maxlen: length of the output, specials included.
        strategy: ``"head"`` keeps the first ``maxlen - 2`` tokens, ``"tail"``
            the last ones, ``"head+tail"`` the first ``head_len`` and the last
            ``maxlen - 2 - head_len``.
        head_len: head size for ``"head+tail"`` (128 + 382 at ``maxlen=512``).
        cls_id, sep_id: the special token ids.

    Returns:
        int32 array; documents that fit are returned whole.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    budget = maxlen - 2
    if budget < 1:
        raise ValueError(f"maxlen={maxlen} leaves no room beside [CLS] and [SEP]; use maxlen >= 3")
    if strategy == "head+tail" and not 0 <= head_len <= budget:
        raise ValueError(f"head_len={head_len} must lie in [0, maxlen - 2 = {budget}]")
    ids = np.asarray(token_ids, dtype=np.int32)
    if len(ids) > budget:
        if strategy == "head":
            ids = ids[:budget]
        elif strategy == "tail":
            ids = ids[len(ids) - budget:]
        else:
            ids = np.concatenate([ids[:head_len], ids[len(ids) - (budget - head_len):]])
    return np.concatenate([[cls_id], ids, [sep_id]]).astype(np.int32)
