"""Hold out the end of every document: the tokens MLM accuracy is measured on, never trained on.

>>> from bert4long.data import hold_out
>>> hold_out([[1, 2, 3, 4], [5, 6]], 0.25)
([[1, 2, 3], [5]], [[4], [6]])
"""
import math


def hold_out(token_ids, share):
    """``(train, held_out)``: the last ``ceil(share * len)`` tokens of every document are held out; a document
    held out whole leaves nothing to train on (it is not in ``train``), and ``share`` 0 holds out nothing.

    >>> hold_out([[1, 2, 3, 4], [5]], 0.5)
    ([[1, 2]], [[3, 4], [5]])
    >>> hold_out([[1, 2]], 0)
    ([[1, 2]], [])
    """
    if not share:
        return list(token_ids), []
    train, held = [], []
    for ids in token_ids:
        cut = len(ids) - math.ceil(share * len(ids))
        if cut > 0:
            train.append(ids[:cut])
        held.append(ids[cut:])
    return train, held
