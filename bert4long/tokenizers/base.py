"""What every bert4long tokenizer shares: bert4keras's ``tokenize`` / ``encode`` API.

A subclass supplies ``content_ids(text)`` (ids without the start/end tokens),
``token_to_id``, ``id_to_token`` and the attributes ``_token_start``,
``_token_end`` (token strings or None) with their ids ``_token_start_id``,
``_token_end_id``; `TokenizerBase` adds the start/end tokens, pairs, segment
ids (``_join``, BERT's layout unless a subclass says otherwise) and bert4keras's
truncation (``truncate_sequences``: one token at a time from the longer text).
"""
from collections.abc import Iterable, Sequence

import numpy as np


def check_text(text: object) -> None:
    """Raise a TypeError naming the fix when ``text`` is bytes, not str."""
    if isinstance(text, (bytes, bytearray)):
        raise TypeError(
            f"text must be str, got {type(text).__name__}: decode it first, "
            "e.g. text.decode('utf-8')"
        )


class TokenizerBase:
    """bert4keras's tokenizer API on top of a subclass's ``content_ids``."""

    pad_id = property(lambda self: self._token_pad_id)
    unk_id = property(lambda self: self._token_unk_id)
    mask_id = property(lambda self: self._token_mask_id)
    cls_id = property(lambda self: self._token_start_id)
    sep_id = property(lambda self: self._token_end_id)

    def tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        return [self.token_to_id(token) for token in tokens]

    def ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token(i) for i in ids]

    def encode_documents(self, texts: Iterable[str]) -> list[np.ndarray]:
        """Content ids (no start/end tokens) of many documents, as int32 arrays."""
        return [np.asarray(self.content_ids(text), dtype=np.int32) for text in texts]

    def _wrap(self, ids):
        start = [] if self._token_start is None else [self._token_start_id]
        end = [] if self._token_end is None else [self._token_end_id]
        return start + ids + end

    def tokenize(self, text: str, maxlen: int | None = None) -> list[str]:
        """Tokens of ``text`` with the start/end tokens, cut to ``maxlen`` tokens."""
        ids = self.content_ids(text)
        if maxlen is not None:
            ids = ids[: max(0, maxlen - self._num_specials(maxlen, 1))]
        return self.ids_to_tokens(self._wrap(ids))

    def _join(self, first, second=None):
        """``(token_ids, segment_ids)`` of content ids with the start/end tokens: ``[CLS] A [SEP]`` or
        ``[CLS] A [SEP] B [SEP]``, segment ids 0 then 1."""
        token_ids = self._wrap(first)
        segment_ids = [0] * len(token_ids)
        if second is not None:
            second_ids = self._wrap(second)[self._token_start is not None:]
            token_ids += second_ids
            segment_ids += [1] * len(second_ids)
        return token_ids, segment_ids

    def _num_specials(self, maxlen, num_texts):
        specials = len(self._join([], [] if num_texts == 2 else None)[0])
        if maxlen < specials:
            raise ValueError(
                f"maxlen={maxlen} cannot hold the {specials} special tokens of "
                f"{num_texts} text(s); use maxlen >= {specials + num_texts}"
            )
        return specials

    def _as_content_ids(self, text):
        """Content ids from a string, or from tokens given with their specials."""
        check_text(text)
        if isinstance(text, str):
            return self.content_ids(text)
        tokens = list(text)
        if self._token_start is not None and tokens[:1] == [self._token_start]:
            tokens = tokens[1:]
        if self._token_end is not None and tokens[-1:] == [self._token_end]:
            tokens = tokens[:-1]
        return self.tokens_to_ids(tokens)

    def encode(
        self,
        first_text: str | Sequence[str],
        second_text: str | Sequence[str] | None = None,
        maxlen: int | None = None,
        truncate_from: str = "right",
    ) -> tuple[list[int], list[int]]:
        """``(token_ids, segment_ids)`` of one text or a pair, bert4keras style.

        ``first_text``/``second_text`` are strings or token lists (from
        `tokenize`). With ``maxlen``, tokens are removed one at a time from the
        longer text (the first on ties) at its end (``truncate_from='right'``)
        or start (``'left'``); the start and end tokens are always kept.
        """
        if truncate_from not in ("right", "left"):
            raise ValueError(f"truncate_from must be 'right' or 'left', got {truncate_from!r}")
        first = self._as_content_ids(first_text)
        second = None if second_text is None else self._as_content_ids(second_text)
        if maxlen is not None:
            budget = maxlen - self._num_specials(maxlen, 1 if second is None else 2)
            keep_first, keep_second = truncated_lengths(
                budget, len(first), None if second is None else len(second)
            )
            first = _keep(first, keep_first, truncate_from)
            if second is not None:
                second = _keep(second, keep_second, truncate_from)
        return self._join(first, second)


def _keep(ids, count, truncate_from):
    """The first (``'right'``) or last (``'left'``) ``count`` of ``ids``."""
    return ids[:count] if truncate_from == "right" else ids[len(ids) - count:]


def truncated_lengths(budget: int, first_len: int, second_len: int | None = None) -> tuple[int, int | None]:
    """Lengths kept by bert4keras's ``truncate_sequences``: pop one token at a
    time from the longer sequence (the first on ties) until the sum fits."""
    if second_len is None:
        return min(first_len, budget), None
    excess = first_len + second_len - budget
    if excess <= 0:
        return first_len, second_len
    shift = min(excess, abs(first_len - second_len))
    if first_len >= second_len:
        first_len -= shift
    else:
        second_len -= shift
    rest = excess - shift
    return first_len - (rest + 1) // 2, second_len - rest // 2
