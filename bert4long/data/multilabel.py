"""Multi-label documents: .jsonl lines ``{"text": "...", "labels": ["...", ...]}``, ``labels`` a list (empty: a
document with none of the labels), checked line by line, and their label sets as 0/1 rows.

>>> label_sets([{"labels": ["b", "a"]}, {"labels": []}], ["t.jsonl:1", "t.jsonl:2"])
[['b', 'a'], []]
>>> multi_hot([["b", "a"], []], ["a", "b", "c"]).tolist()
[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
>>> label_sets([{"label": "a"}], ["t.jsonl:1"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
ValueError: t.jsonl:1: a 'label' (one label a document: --task classify); a multi-label line gives its ...
"""
import os

import numpy as np

from bert4long.data.corpus import read_documents

FORM = '{"text": "...", "labels": ["...", ...]}'


def label_sets(records, where):
    """Each record's ``labels`` as a list of strings (integers are read as their text), refused naming ``where[i]``
    (its ``file:line``) when the record has a ``label`` or no ``labels`` list."""
    sets = []
    for record, place in zip(records, where):
        if "label" in record:
            raise ValueError(f"{place}: a 'label' (one label a document: --task classify); a multi-label line gives "
                             f"its 'labels' as a list: {FORM}")
        given = record.get("labels")
        if not isinstance(given, list) or not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in given):
            raise ValueError(f"{place}: 'labels' is {given!r}, not a list of labels (an empty list for none): each "
                             f"line must be {FORM}")
        sets.append([str(x) for x in given])
    return sets


def multi_hot(sets, labels, where=None, fix="fix the data, or add them to --labels"):
    """float32 ``[N, len(labels)]``: 1 where a document's set holds the label (a label given twice counts once); an
    unknown label is refused naming ``where[i]`` (its ``file:line``; default: the document's number) and ``fix``."""
    index = {label: i for i, label in enumerate(labels)}
    out = np.zeros((len(sets), len(labels)), "float32")
    for i, names in enumerate(sets):
        unknown = sorted(set(names) - set(index))
        if unknown:
            place = where[i] if where is not None else f"document {i + 1}"
            raise ValueError(f"{place}: unknown label(s) {unknown[:10]}; the labels are {list(labels)}: {fix}")
        out[i, [index[name] for name in names]] = 1.0
    return out


def read_multilabel(path, errors="strict"):
    """``(texts, label sets, where, integer_labels)`` of a multi-label .jsonl (`label_sets`; ``where``: each
    document's path:line; ``integer_labels``: some label is given and every one is a JSON integer); a line with no
    text is skipped, as `read_documents` skips it."""
    texts, _, sources, _, records = read_documents(path, text_format="jsonl", errors=errors, with_records=True)
    folder = os.path.dirname(os.path.abspath(path))
    where = [os.path.join(folder, source) for source in sources]
    sets = label_sets(records, where)
    given = [label for record in records for label in record["labels"]]
    return texts, sets, where, bool(given) and all(isinstance(label, int) for label in given)
