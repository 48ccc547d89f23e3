"""`HuggingFaceTokenizer`: a Hugging Face ``tokenizer.json`` behind bert4keras's API.

RoBERTa, Longformer, BigBird and ModernBERT folders describe their tokenizer
(byte-level BPE, unigram, WordPiece...) in a ``tokenizer.json``. The ``tokenizers``
library runs it exactly as transformers does, special tokens and truncation
included; this class only presents bert4keras's ``encode`` / ``tokenize`` /
``decode``. Special-token strings inside a document (``"<s>"``, ``"[CLS]"``) are
tokenized as text, like transformers' ``split_special_tokens=True``: a document
cannot inject structure.
"""
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from bert4long.tokenizers.base import check_text

if TYPE_CHECKING:
    import tokenizers

# (role, tokenizer_config.json key, usual spellings when the config does not say)
ROLES = (
    ("start", "cls_token", ("[CLS]", "<s>", "<cls>")),
    ("end", "sep_token", ("[SEP]", "</s>", "<sep>")),
    ("pad", "pad_token", ("[PAD]", "<pad>", "<|padding|>")),
    ("unk", "unk_token", ("[UNK]", "<unk>", "<|endoftext|>")),
    ("mask", "mask_token", ("[MASK]", "<mask>")),
)


def token_text(token: str | Mapping[str, Any] | None) -> str | None:
    """A tokenizer_config.json token: a string, or ``{"content": ...}`` in older files."""
    return token.get("content") if isinstance(token, dict) else token


def byte_level_bpe(vocab_file: str, merges_file: str, config: Mapping[str, Any]) -> "tokenizers.Tokenizer":
    """RoBERTa's tokenizer from ``vocab.json`` + ``merges.txt``, assembled as transformers does.

    Byte-level pre-tokenizer and decoder, ``<s> A </s></s> B </s>`` post-processor,
    the config's special tokens registered as special.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    add_prefix_space = bool(config.get("add_prefix_space", False))
    try:
        tokenizer = Tokenizer(models.BPE.from_file(vocab_file, merges_file))
    except Exception as error:   # the tokenizers library raises a bare Exception for files it cannot read
        raise ValueError(f"{vocab_file!r} + {merges_file!r} are not a BPE vocabulary and merges the tokenizers library "
                         f"reads ({str(error).splitlines()[0][:200]}): copy them again from the model's folder or "
                         "hub page") from None
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    vocab = tokenizer.get_vocab()
    cls, sep = token_text(config.get("cls_token", "<s>")), token_text(config.get("sep_token", "</s>"))
    for token in (cls, sep):
        if token not in vocab:
            raise ValueError(f"{vocab_file!r} has no {token!r} token (the tokenizer config's cls/sep token)")
    tokenizer.post_processor = processors.RobertaProcessing(
        (sep, vocab[sep]), (cls, vocab[cls]), trim_offsets=bool(config.get("trim_offsets", True)),
        add_prefix_space=add_prefix_space,
    )
    keys = ("bos_token", "eos_token", "unk_token", "sep_token", "cls_token", "pad_token", "mask_token")
    specials = {token_text(config[k]) for k in keys if k in config} | {cls, sep, "<pad>", "<unk>", "<mask>"}
    tokenizer.add_special_tokens(sorted(t for t in specials if t in vocab))
    return tokenizer


class HuggingFaceTokenizer:
    """A ``tokenizer.json`` with bert4keras's ``encode`` -> ``(token_ids, segment_ids)``.

    Args:
        tokenizer: path of a Hugging Face ``tokenizer.json``, or a
            ``tokenizers.Tokenizer``.
        special_tokens: optional ``{'cls_token': '<s>', ...}`` (a
            ``tokenizer_config.json``'s keys) naming the start, end, padding,
            unknown and mask tokens; others are found by their usual spellings.

    The start/end tokens and segment ids of pairs are placed by the file's own
    post-processor (RoBERTa: ``<s> A </s></s> B </s>``, segment ids all 0;
    BERT: ``[CLS] A [SEP] B [SEP]``, 0s then 1s). ``maxlen`` truncation is the
    reference's ``longest_first``, from the end (``truncate_from='right'``) or
    the start (``'left'``).

    Example:

    >>> from tokenizers import Tokenizer, models, pre_tokenizers, processors
    >>> import tempfile, os
    >>> vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "long": 3, "text": 4}
    >>> tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    >>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok.post_processor = processors.TemplateProcessing(
    ...     single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    >>> path = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
    >>> tok.save(path)
    >>> HuggingFaceTokenizer(path).encode("long text", "[CLS]")
    ([1, 3, 4, 2, 0, 0, 0, 2], [0, 0, 0, 0, 1, 1, 1, 1])
    """

    def __init__(
        self,
        tokenizer: "str | os.PathLike | tokenizers.Tokenizer",
        special_tokens: Mapping[str, Any] | None = None,
    ) -> None:
        import tokenizers

        self.path = None if isinstance(tokenizer, tokenizers.Tokenizer) else os.fspath(tokenizer)
        if self.path is not None:
            try:
                tokenizer = tokenizers.Tokenizer.from_file(self.path)
            except Exception as error:   # the tokenizers library raises a bare Exception for a file it cannot read
                raise ValueError(f"{self.path!r} is not a tokenizer file the tokenizers library reads "
                                 f"({str(error).splitlines()[0][:200]}): copy it again from the model's folder or "
                                 "hub page") from None
        self._tokenizer = tokenizer
        self._tokenizer.encode_special_tokens = True  # "<s>" in a document is text
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        vocab = self._tokenizer.get_vocab(with_added_tokens=True)
        self._vocab_size = max(vocab.values()) + 1
        special_tokens = special_tokens or {}
        for role, key, spellings in ROLES:
            token = token_text(special_tokens.get(key))
            if token is None:
                token = next((t for t in spellings if t in vocab), None)
            setattr(self, f"_token_{role}", token)
            setattr(self, f"_token_{role}_id", vocab.get(token))

    pad_id = property(lambda self: self._token_pad_id)
    unk_id = property(lambda self: self._token_unk_id)
    mask_id = property(lambda self: self._token_mask_id)
    cls_id = property(lambda self: self._token_start_id)
    sep_id = property(lambda self: self._token_end_id)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def special_ids(self) -> list[int]:
        """Ids of the start, end, padding, unknown and mask tokens the vocab has."""
        ids = (getattr(self, f"_token_{role}_id") for role, _, _ in ROLES)
        return sorted({i for i in ids if i is not None})

    @property
    def registered_special_ids(self) -> list[int]:
        """Ids of every token the file registers as special (``<s>``, ``<|endoftext|>``, ``[PAD]``...): text
        never contains them, so MLM masking neither predicts nor draws them."""
        added = self._tokenizer.get_added_tokens_decoder()
        return sorted({i for i, token in added.items() if token.special} | set(self.special_ids))

    @property
    def fingerprint(self) -> str:
        """Hex digest of the tokenizer file and its special tokens."""
        state = [self._tokenizer.to_str(), [getattr(self, f"_token_{role}") for role, _, _ in ROLES]]
        return hashlib.sha256(json.dumps(state).encode("utf-8")).hexdigest()

    def token_to_id(self, token: str) -> int:
        """The token's id; the unknown token's id for a token outside the vocab."""
        index = self._tokenizer.token_to_id(token)
        return self._token_unk_id if index is None else index

    def tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        return [self.token_to_id(token) for token in tokens]

    def id_to_token(self, i: int) -> str | None:
        return self._tokenizer.id_to_token(i)

    def ids_to_tokens(self, ids: Iterable[int]) -> list[str | None]:
        return [self.id_to_token(i) for i in ids]

    def _encode(self, first_text, second_text=None, maxlen=None, truncate_from="right"):
        if truncate_from not in ("right", "left"):
            raise ValueError(f"truncate_from must be 'right' or 'left', got {truncate_from!r}")
        for text in (first_text, second_text):
            check_text(text)
            if text is not None and not isinstance(text, str):
                raise TypeError(f"text must be str, got {type(text).__name__}")
        if maxlen is None:
            return self._tokenizer.encode(first_text, second_text)
        specials = self._tokenizer.num_special_tokens_to_add(second_text is not None)
        if maxlen < specials:
            raise ValueError(
                f"maxlen={maxlen} cannot hold the {specials} special tokens of this input; "
                f"use maxlen >= {specials + 1 + (second_text is not None)}"
            )
        self._tokenizer.enable_truncation(maxlen, strategy="longest_first", direction=truncate_from)
        try:
            return self._tokenizer.encode(first_text, second_text)
        finally:
            self._tokenizer.no_truncation()

    def encode(
        self,
        first_text: str,
        second_text: str | None = None,
        maxlen: int | None = None,
        truncate_from: str = "right",
    ) -> tuple[list[int], list[int]]:
        """``(token_ids, segment_ids)`` of one text or a pair, special tokens placed by the file."""
        encoding = self._encode(first_text, second_text, maxlen, truncate_from)
        return list(encoding.ids), list(encoding.type_ids)

    def tokenize(self, text: str, maxlen: int | None = None) -> list[str]:
        """Tokens of ``text``, special tokens included, cut to ``maxlen``."""
        return list(self._encode(text, None, maxlen).tokens)

    def content_ids(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens (a Python list)."""
        check_text(text)
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def word_piece_ids(self, words: Iterable[str]) -> list[list[int]]:
        """Ids of each word of a text given as words (token labelling), every word read as following a space,
        as transformers' ``is_split_into_words=True`` with ``add_prefix_space=True`` does (byte-level BPE:
        ``Ġword``, the pieces the model saw inside sentences)."""
        words = list(words)
        for word in words:
            check_text(word)
        encodings = self._tokenizer.encode_batch([" " + word for word in words], add_special_tokens=False)
        return [list(e.ids) for e in encodings]

    def encode_documents(self, texts: Iterable[str]) -> list[np.ndarray]:
        """Content ids (no special tokens) of many documents, as int32 arrays (one batched call)."""
        texts = list(texts)
        for text in texts:
            check_text(text)
        encodings = self._tokenizer.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int32) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, special tokens dropped (transformers' ``skip_special_tokens=True``)."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
