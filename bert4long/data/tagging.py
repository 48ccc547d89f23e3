"""Token-labelling data: ``.jsonl`` lines ``{"tokens": [...], "tags": [...]}``, one tag per word, turned into
word-piece windows with a label and a weight per piece.

Every word's first piece carries the word's tag (weight 1); its other pieces and ``[CLS]``/``[SEP]``/padding
have weight 0, so loss and accuracy count each word once. A document longer than ``seq_len - 2`` pieces
becomes several windows (none is cut away); ``owner`` says which document each window came from. A tokenizer
with ``word_piece_ids`` (`bert4long.tokenizers.HuggingFaceTokenizer`) reads every word as following a space,
as transformers' ``is_split_into_words=True`` does; others tokenize each word alone (``content_ids``).

>>> from bert4long.data.tagging import encode_tagged
>>> class Pieces:                                   # a stand-in tokenizer: "tokyo" is two pieces
...     cls_id, sep_id, pad_id, unk_id = 1, 2, 0, 3
...     def content_ids(self, word):
...         return [10, 11] if word == "tokyo" else [12]
>>> ids, labels, weights, owner = encode_tagged(Pieces(), [["in", "tokyo"]], [["O", "LOC"]], ["O", "LOC"], 6)
>>> ids.tolist(), labels.tolist(), weights.tolist()
([[1, 12, 10, 11, 2, 0]], [[0, 0, 1, 1, 0, 0]], [[0.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
"""
import json
import os

import numpy as np


def read_tagged(path, require_tags=True, with_records=False):
    """``(words, tags, sources)`` from a ``.jsonl`` file; tags are strings (``0`` and ``"0"`` are the same tag);
    ``with_records``: each line's JSON object too, fourth.

    A line that is not a JSON object with a list of strings ``"tokens"`` and, when ``require_tags``, a list
    ``"tags"`` of the same length raises ``ValueError`` naming ``file:line``.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {str(path)!r}; pass a .jsonl file with one "
                                '{"tokens": [...], "tags": [...]} object a line')
    words, tags, sources, records = [], [], [], []
    example = '{"tokens": ["Paris", "is", "big"], "tags": ["LOC", "O", "O"]}'
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not a JSON object ({error}); each line must look like {example}") from None
            tokens = record.get("tokens") if isinstance(record, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
                raise ValueError(f"{where}: expected a list of strings under 'tokens'; each line must look like "
                                 f"{example}")
            line_tags = record.get("tags")
            if line_tags is None and not require_tags:
                line_tags = ["O"] * len(tokens)
            if not isinstance(line_tags, list) or len(line_tags) != len(tokens):
                found = f"{len(line_tags)} tags" if isinstance(line_tags, list) else f"'tags' = {line_tags!r}"
                raise ValueError(f"{where}: {len(tokens)} tokens but {found}; give a list 'tags' with one tag per "
                                 "token")
            words.append(tokens)
            tags.append([str(t) for t in line_tags])
            sources.append(where)
            records.append(record)
    if not words:
        raise ValueError(f"{str(path)!r} holds no lines; each line must look like {example}")
    return (words, tags, sources, records) if with_records else (words, tags, sources)


def encode_tagged(tokenizer, words, tags, tag_names, seq_len, sources=None):
    """int32 ``token_ids``, int32 ``labels``, float32 ``weights`` ``[windows, seq_len]`` and int32 ``owner``
    ``[windows]`` (see the module doc). An unknown tag raises ``ValueError`` naming its source and the tags."""
    if seq_len < 3:
        raise ValueError(f"seq_len={seq_len} leaves no room beside [CLS] and [SEP]; use seq_len >= 3")
    index = {name: i for i, name in enumerate(tag_names)}
    rows, owners = [], []
    for doc, (doc_words, doc_tags) in enumerate(zip(words, tags)):
        pieces, labels, weights = [], [], []
        if hasattr(tokenizer, "word_piece_ids"):  # byte-level BPE: a word inside a text starts with its space
            word_ids = tokenizer.word_piece_ids(doc_words)
        else:
            word_ids = [tokenizer.content_ids(word) for word in doc_words]
        for word_pieces, tag in zip(word_ids, doc_tags):
            if tag not in index:
                where = sources[doc] if sources else f"document {doc}"
                raise ValueError(f"{where}: unknown tag {tag!r}; the tags are {list(tag_names)} (add it to the "
                                 "labels file)")
            ids = list(word_pieces) or [tokenizer.unk_id]
            pieces += ids
            labels += [index[tag]] * len(ids)
            weights += [1.0] + [0.0] * (len(ids) - 1)
        width = seq_len - 2
        for start in range(0, max(len(pieces), 1), width):
            row = np.full((3, seq_len), 0, np.float64)
            row[0, :] = tokenizer.pad_id or 0
            piece = pieces[start:start + width]
            row[0, 0], row[0, 1:len(piece) + 1], row[0, len(piece) + 1] = tokenizer.cls_id, piece, tokenizer.sep_id
            row[1, 1:len(piece) + 1] = labels[start:start + width]
            row[2, 1:len(piece) + 1] = weights[start:start + width]
            rows.append(row)
            owners.append(doc)
    table = np.stack(rows)
    return (table[:, 0].astype(np.int32), table[:, 1].astype(np.int32), table[:, 2].astype(np.float32),
            np.asarray(owners, np.int32))
