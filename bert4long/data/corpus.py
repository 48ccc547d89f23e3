"""Read documents from text/JSONL files and tokenize them once, with a disk cache.

Formats (``text_format``):

* ``"file"``: each file is one document (``"auto"`` for non-``.jsonl`` files);
* ``"paragraphs"``: documents separated by blank lines;
* ``"jsonl"``: one JSON object per line with a ``text`` field and an optional
  ``label`` (``"auto"`` for ``.jsonl``/``.json`` files).

Skipped documents are counted in `Corpus.skipped` and logged, never dropped
silently: ``"empty"`` (only whitespace), ``"too_short"`` (fewer than
``min_tokens`` tokens), ``"invalid_utf8"`` (with ``errors="skip"``). A label
always travels with its own document, so a skip cannot shift labels.

>>> import os, tempfile
>>> from bert4long import pretrained
>>> from bert4long.tokenizers import Tokenizer
>>> from bert4long.data import load_corpus
>>> folder = tempfile.mkdtemp()
>>> _ = open(os.path.join(folder, "a.txt"), "w").write("First document.\\n\\nSecond one.")
>>> tok = Tokenizer(os.path.join(pretrained.path(), "vocab.txt"), do_lower_case=True)
>>> corpus = load_corpus(folder, tok, text_format="paragraphs", cache_dir=folder)
>>> [tok.decode(ids) for ids in corpus.token_ids], corpus.sources
(['first document.', 'second one.'], ['a.txt:1', 'a.txt:3'])
"""
import dataclasses
import hashlib
import json
import logging
import os
import pathlib

import numpy as np

from bert4long.output_folders import atomic_write

LOGGER = logging.getLogger("bert4long.data")
FORMATS = ("auto", "file", "paragraphs", "jsonl")
CACHE_VERSION = 2


@dataclasses.dataclass
class Corpus:
    """Tokenized documents: content ids (no ``[CLS]``/``[SEP]``), their labels
    (``str`` or ``None``), where each came from (``"file:line"``), the
    number of documents skipped per reason, the cache file `load_corpus`
    read them from or keeps them in (None without a cache folder), and whether
    every label was written as a JSON integer (``integer_labels``)."""

    token_ids: list
    labels: list
    sources: list
    skipped: dict
    cache_path: str | None = None
    integer_labels: bool = False

    def __len__(self):
        return len(self.token_ids)


def list_files(paths):
    """Files named by ``paths`` (files or folders, searched recursively, sorted;
    hidden files skipped)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for path in map(pathlib.Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {str(path)!r}; pass a folder of text files "
                                    "(one document each) or a .jsonl file (one JSON object a line)")
    if not files:
        where = ", ".join(repr(str(p)) for p in paths)
        raise ValueError(f"{where} holds no files (hidden files are skipped): add text files "
                         "(one document each) or a .jsonl file to it")
    return files


def _decode(data, source, errors, skipped):
    """Text of ``data``, or None when it is skipped as invalid UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        if errors == "replace":
            return data.decode("utf-8", errors="replace")
        if errors == "skip":
            skipped["invalid_utf8"] = skipped.get("invalid_utf8", 0) + 1
            return None
        line = data[: err.start].count(b"\n")
        raise ValueError(
            f"{source}: invalid UTF-8 byte {data[err.start:err.start + 1]!r} on line +{line} of the "
            "document; fix the file or pass errors='skip' (count the document as skipped) "
            "or errors='replace' (on the command line: --errors skip / --errors replace)"
        ) from None


def _raw_documents(path, text_format, root, text_field, label_field):
    """``(bytes, label, source, record)`` for every document in one file (``record``: the JSON object of a .jsonl
    line, else ``{}``)."""
    name = os.path.relpath(path, root) if root else str(path)
    data = path.read_bytes()
    if text_format == "file":
        yield data, None, name, {}
        return
    lines = data.split(b"\n")
    if text_format == "paragraphs":
        start, block = None, []
        for number, line in enumerate(lines + [b""], start=1):
            if line.strip():
                start = number if start is None else start
                block.append(line)
            elif block:
                yield b"\n".join(block), None, f"{name}:{start}", {}
                start, block = None, []
        return
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        source, where = f"{name}:{number}", f"{path}:{number}"
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{where}: not a JSON object ({err}); each line must be "
                             f'{{"{text_field}": "..."}}') from None
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise ValueError(f"{where}: expected a JSON object with a string {text_field!r} field; "
                             f'each line must be {{"{text_field}": "..."}}')
        label = record.get(label_field)
        if isinstance(label, (list, dict)):
            raise ValueError(f"{where}: {label_field!r} is {label!r}, not one label (a string or an integer); a "
                             "document with a list of labels is multi-label: give them as 'labels' and pass --task "
                             "multilabel")
        yield record[text_field].encode("utf-8"), None if label is None else str(label), source, record


def is_jsonl(path):
    """True for a file ``text_format='auto'`` reads as JSON lines: a ``.jsonl`` or ``.json`` file."""
    return pathlib.Path(path).suffix in (".jsonl", ".json")


def read_documents(paths, text_format="auto", text_field="text", label_field="label", errors="strict",
                   with_records=False, keep_empty=False):
    """``(texts, labels, sources, skipped)`` read from ``paths``; see the module doc.

    ``errors``: what to do with bytes that are not UTF-8: ``"strict"`` raises
    naming the file and line, ``"skip"`` skips the document (counted),
    ``"replace"`` turns them into U+FFFD (which the tokenizer removes).
    ``with_records``: also return each document's JSON object (``{}`` for a
    document that is not a .jsonl line), fifth: what `predict` writes back.
    ``keep_empty``: keep documents with no text (`predict` answers every one) instead of skipping them.
    """
    if text_format not in FORMATS:
        raise ValueError(f"text_format must be one of {FORMATS}, got {text_format!r}")
    if errors not in ("strict", "skip", "replace"):
        raise ValueError(f"errors must be 'strict', 'skip' or 'replace', got {errors!r}")
    files = list_files(paths)
    root = os.path.commonpath([str(f.parent) for f in files])
    texts, labels, sources, skipped, records = [], [], [], {}, []
    for path in files:
        fmt = text_format
        if fmt == "auto":
            fmt = "jsonl" if is_jsonl(path) else "file"
        for data, label, source, record in _raw_documents(path, fmt, root, text_field, label_field):
            text = _decode(data, os.path.join(root, source), errors, skipped)
            if text is None:
                continue
            if not text.strip() and not keep_empty:
                skipped["empty"] = skipped.get("empty", 0) + 1
                continue
            texts.append(text)
            labels.append(label)
            sources.append(source)
            records.append(record)
    return (texts, labels, sources, skipped, records) if with_records else (texts, labels, sources, skipped)


def read_texts(paths, text_format="auto", text_field="text", errors="strict"):
    """The non-empty documents in ``paths`` as strings, as `read_documents` reads them;
    a ``ValueError`` when none is left.

    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.txt").write_text("One document.")
    >>> read_texts(folder)
    ['One document.']
    """
    texts, _, _, skipped = read_documents(paths, text_format, text_field, errors=errors)
    if not texts:
        where = paths if isinstance(paths, (str, os.PathLike)) else ", ".join(map(str, paths))
        raise ValueError(f"{str(where)!r} holds no text (skipped: {skipped}): add documents with text "
                         f'(non-empty text files, or .jsonl lines {{"{text_field}": "..."}})')
    return texts


def _cache_key(files, tokenizer, settings):
    digest = hashlib.sha256()
    digest.update(json.dumps([CACHE_VERSION, tokenizer.fingerprint, settings]).encode())
    for path in files:
        digest.update(str(path.resolve()).encode("utf-8", "surrogateescape") + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:24]


def load_corpus(paths, tokenizer, *, cache_dir=None, write_cache=True, min_tokens=1, text_format="auto",
                text_field="text", label_field="label", errors="strict"):
    """Read and tokenize documents into a `Corpus`, once.

    With ``cache_dir``, the ids are stored in ``cache_dir/corpus-<key>.npz``
    (written atomically; ``write_cache=False`` only reads it); the key hashes the files'
    paths and bytes, the tokenizer's vocab and settings, and the arguments here, so a
    second call reads the cache and a change to any of them tokenizes again. Documents
    with fewer than ``min_tokens`` tokens are skipped (counted as ``"too_short"``).
    """
    settings = dict(min_tokens=min_tokens, text_format=text_format, text_field=text_field,
                    label_field=label_field, errors=errors)
    cache_path = None
    if cache_dir is not None:
        cache_path = os.path.join(cache_dir, f"corpus-{_cache_key(list_files(paths), tokenizer, settings)}.npz")
        if os.path.exists(cache_path):
            with np.load(cache_path) as saved:
                flat, offsets = saved["flat"], saved["offsets"]
                ids = [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
                labels = [str(l) if has else None for l, has in zip(saved["labels"], saved["has_label"])]
                corpus = Corpus(ids, labels, saved["sources"].tolist(), json.loads(str(saved["skipped"])), cache_path,
                                bool(saved["integer_labels"]))
            LOGGER.info("read %d tokenized documents from %s", len(corpus), cache_path)
            return corpus
    texts, labels, sources, skipped, records = read_documents(paths, text_format, text_field, label_field, errors,
                                                              with_records=True)
    given = [record[label_field] for record in records if record.get(label_field) is not None]
    token_ids = tokenizer.encode_documents(texts)
    keep = [i for i, ids in enumerate(token_ids) if len(ids) >= min_tokens]
    if len(keep) < len(token_ids):
        skipped["too_short"] = len(token_ids) - len(keep)
    corpus = Corpus([token_ids[i] for i in keep], [labels[i] for i in keep],
                    [sources[i] for i in keep], skipped, cache_path,
                    bool(given) and all(isinstance(v, int) and not isinstance(v, bool) for v in given))
    if skipped:
        LOGGER.warning("skipped documents: %s (kept %d)", skipped, len(corpus))
    if cache_path is not None and write_cache:
        save_corpus_cache(corpus, cache_path)
    return corpus


def save_corpus_cache(corpus, cache_path):
    """Write ``corpus`` where `load_corpus` reads it back (atomically)."""
    os.makedirs(os.path.dirname(cache_path), exist_ok=True)
    lengths = [len(ids) for ids in corpus.token_ids]
    arrays = dict(
        flat=np.concatenate(corpus.token_ids or [np.zeros(0, np.int32)]).astype(np.int32),
        offsets=np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]),
        labels=np.array([l or "" for l in corpus.labels], dtype=str),
        has_label=np.array([l is not None for l in corpus.labels], dtype=bool),
        sources=np.array(corpus.sources, dtype=str),
        skipped=np.array(json.dumps(corpus.skipped)),
        integer_labels=np.array(corpus.integer_labels),
    )

    def write(tmp):
        with open(tmp, "wb") as out:
            np.savez(out, **arrays)

    atomic_write(cache_path, write)
