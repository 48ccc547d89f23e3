"""BERT WordPiece tokenizer with bert4keras's API and the reference output.

`Tokenizer` produces exactly the tokens of Google BERT's ``tokenization.py``
``FullTokenizer`` (clean-up of control characters, one token per CJK
character, accent stripping when lower-casing, punctuation splitting, greedy
longest-match WordPiece with ``##`` continuations, ``[UNK]`` for words longer
than ``word_maxlen`` characters). Text that contains ``[CLS]`` or ``[MASK]``
is tokenized as text (``[``, ``cls``, ``]``), as the reference does.

Speed comes from two things: the basic tokenizer is a handful of C-level
``re``/``str`` passes over the whole text instead of a Python loop over
characters, and the WordPiece ids of every distinct word are cached.

Example:

>>> from bert4long.tokenizers import Tokenizer
>>> tok = Tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4,
...                  "un": 5, "##aff": 6, "##able": 7, "!": 8}, do_lower_case=True)
>>> tok.tokenize("Unaffable!")
['[CLS]', 'un', '##aff', '##able', '!', '[SEP]']
>>> tok.encode("Unaffable!")
([2, 5, 6, 7, 8, 3], [0, 0, 0, 0, 0, 0])
"""
import functools
import hashlib
import itertools
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

from bert4long.tokenizers.base import TokenizerBase, check_text

# Code-point ranges that BERT treats as CJK ideographs (one token each).
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def is_cjk_character(ch: str) -> bool:
    """True for the CJK ideographs that BERT splits one per token."""
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in CJK_RANGES)


def is_punctuation(ch: str) -> bool:
    """BERT's punctuation: ASCII symbols plus every Unicode ``P*`` category."""
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_special(token: str) -> bool:
    """bert4keras's convention: ``[CLS]``, ``[SEP]``, ``[unused1]``... are special."""
    return bool(token) and token[0] == "[" and token[-1] == "]"


def _is_removed(ch):
    """Characters the reference deletes: NUL, U+FFFD and ``C*`` except tab/newlines."""
    return ch in "\x00\ufffd" or (
        ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")
    )


def _is_whitespace(ch):
    """Word separators: the reference's ``_is_whitespace`` (space, tab, newlines,
    ``Zs``) plus what its ``str.split()`` splits on (U+2028, U+2029...)."""
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs" or ch.isspace()


def _ranges(predicate):
    """``(first, last)`` code-point runs where ``predicate(chr(code))``."""
    runs = []
    for keep, group in itertools.groupby(range(0x110000), lambda c: predicate(chr(c))):
        if keep:
            codes = list(group)
            runs.append((codes[0], codes[-1]))
    return runs


def _class_body(runs):
    return "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in runs
    )


def _char_class(predicate):
    """A regex matching one code point where ``predicate``.

    ``re`` tests a class with code points above U+FFFF range by range, so the
    astral part sits behind a one-range look-ahead: BMP text pays one bitmap
    lookup per character.
    """
    runs = _ranges(predicate)
    bmp = [(lo, min(hi, 0xFFFF)) for lo, hi in runs if lo <= 0xFFFF]
    astral = [(max(lo, 0x10000), hi) for lo, hi in runs if hi > 0xFFFF]
    parts = [f"[{_class_body(bmp)}]"] if bmp else []
    if astral:
        parts.append(f"(?=[\U00010000-\U0010FFFF])[{_class_body(astral)}]")
    return "(?:" + "|".join(parts) + ")"


@functools.cache
def _patterns():
    """Compiled regexes (built once per process, ~0.5 s)."""
    space = _ranges(lambda ch: _is_whitespace(ch) and not _is_removed(ch))
    ascii_punct = [(c, c) for c in range(128) if is_punctuation(chr(c))]
    cjk = _class_body(CJK_RANGES)
    punct = _char_class(is_punctuation)
    return {
        "removed": re.compile(_char_class(_is_removed)),
        # The reference's first split: on whitespace, around CJK characters.
        # ASCII punctuation is split here too: lower-casing was done on the
        # whole text and NFD never reorders across an ASCII character, so this
        # only makes the word cache smaller.
        "word": re.compile(
            f"[{cjk}]|[{_class_body(ascii_punct)}]|[^{_class_body(space + ascii_punct)}{cjk}]+"
        ),
        "punct": re.compile(f"({punct})"),
        "nonspacing": re.compile(_char_class(lambda ch: unicodedata.category(ch) == "Mn")),
    }


def load_vocab(
    dict_path: str | os.PathLike,
    encoding: str = "utf-8",
    simplified: bool = False,
    startswith: Sequence[str] | None = None,
) -> dict[str, int] | tuple[dict[str, int], list[int]]:
    """Read a BERT ``vocab.txt`` (one token per line; the id is the line number).

    With ``simplified=True`` also drop tokens the tokenizer can never produce
    (multi-character tokens containing CJK or punctuation) and return
    ``(token_dict, keep_tokens)``: ``keep_tokens[new_id]`` is the original id,
    ready to slice the embedding matrix. ``startswith`` tokens come first.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w").write("[PAD]\\n[UNK]\\n[CLS]\\n[SEP]\\n中国\\n中\\n")
    >>> load_vocab(path, simplified=True, startswith=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    ({'[PAD]': 0, '[UNK]': 1, '[CLS]': 2, '[SEP]': 3, '中': 4}, [0, 1, 2, 3, 5])
    """
    try:
        with open(dict_path, encoding=encoding, newline="\n") as reader:
            lines = reader.read().split("\n")  # not splitlines(): tokens may hold U+2028
        if lines and lines[-1] == "":
            lines.pop()
    except UnicodeDecodeError as err:
        raise ValueError(
            f"vocab file {dict_path!r} is not valid {encoding} ({err}); "
            "pass the right `encoding=`"
        ) from None
    token_dict = {}
    for index, line in enumerate(lines):
        token_dict[line.strip()] = index  # as the reference: a duplicate keeps its last line
    if not simplified:
        return token_dict
    new_dict, keep_tokens = {}, []
    for token in list(startswith or []) + sorted(token_dict, key=token_dict.get):
        if token in new_dict:
            continue
        if token not in token_dict:
            raise ValueError(f"startswith token {token!r} is not in vocab {dict_path!r}")
        if len(token) > 1 and any(
            is_cjk_character(ch) or is_punctuation(ch) for ch in token.removeprefix("##")
        ) and token not in (startswith or []):
            continue
        new_dict[token] = len(new_dict)
        keep_tokens.append(token_dict[token])
    return new_dict, keep_tokens


def save_vocab(dict_path: str | os.PathLike, token_dict: Mapping[str, int], encoding: str = "utf-8") -> None:
    """Write ``token_dict`` (e.g. a simplified one) as a ``vocab.txt``."""
    with open(dict_path, "w", encoding=encoding) as writer:
        for token in sorted(token_dict, key=token_dict.get):
            writer.write(token + "\n")


class Tokenizer(TokenizerBase):
    """BERT WordPiece tokenizer, output-exact with Google's ``FullTokenizer``.

    Args:
        token_dict: a ``{token: id}`` dict or the path of a ``vocab.txt``.
        do_lower_case: lower-case and strip accents (uncased and Chinese BERTs).
        word_maxlen: words longer than this (in characters) become ``[UNK]``
            (the reference's ``max_input_chars_per_word=100``).
        token_start, token_end: the tokens around every sequence.
        cache_size: distinct words whose ids are kept (the cache is emptied
            when it grows past this).

    Example:

    >>> import os
    >>> from bert4long import pretrained
    >>> tok = Tokenizer(os.path.join(pretrained.path(), "vocab.txt"), do_lower_case=True)   # the built-in model's
    >>> tok.tokenize("Héllo, [MASK] world!")
    ['[CLS]', 'hel', '##l', '##o', ',', '[', 'ma', '##s', '##k', ']', 'world', '!', '[SEP]']
    """

    VERSION = 1  # bump when the algorithm's output changes (invalidates corpus caches)

    def __init__(
        self,
        token_dict: Mapping[str, int] | str | os.PathLike,
        do_lower_case: bool = False,
        word_maxlen: int = 100,
        token_start: str | None = "[CLS]",
        token_end: str | None = "[SEP]",
        cache_size: int = 1 << 19,
    ) -> None:
        source = "token_dict"
        if isinstance(token_dict, (str, os.PathLike)):
            source = token_dict = os.fspath(token_dict)
            token_dict = load_vocab(token_dict)
        for role, token in (("unknown", "[UNK]"), ("start", token_start), ("end", token_end)):
            if token is not None and token not in token_dict:
                raise ValueError(
                    f"vocab {source!r} has no {token!r} token (the {role} token); "
                    f"a BERT WordPiece vocab contains {', '.join(SPECIAL_TOKENS)}"
                )
        self._token_dict = dict(token_dict)
        self._vocab_size = max(token_dict.values()) + 1
        self._id_to_token = [None] * self._vocab_size
        for token, index in token_dict.items():
            self._id_to_token[index] = token
        self._do_lower_case = do_lower_case
        self._word_maxlen = word_maxlen
        self._cache_size = cache_size
        self._cache = {}
        self._token_start, self._token_end = token_start, token_end
        self._token_pad, self._token_unk, self._token_mask = "[PAD]", "[UNK]", "[MASK]"
        # bert4keras's attribute names; None where the vocab lacks the token.
        for role in ("pad", "unk", "mask", "start", "end"):
            token = getattr(self, f"_token_{role}")
            setattr(self, f"_token_{role}_id", token_dict.get(token) if token else None)
        # Longest vocab entry, to bound the greedy longest-match search.
        self._piece_maxlen = max(len(t.removeprefix("##")) for t in token_dict)
        patterns = _patterns()
        self._remove = patterns["removed"].sub
        self._words = patterns["word"].findall
        self._word_spans = patterns["word"].finditer
        self._punct_split = patterns["punct"].split
        self._strip_marks = patterns["nonspacing"].sub

    # --- vocabulary --------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def token_dict(self) -> dict[str, int]:
        return dict(self._token_dict)

    @property
    def special_ids(self) -> list[int]:
        """Ids of ``[PAD] [UNK] [CLS] [SEP] [MASK]`` present in the vocab."""
        return sorted({self._token_dict[t] for t in SPECIAL_TOKENS if t in self._token_dict})

    @property
    def fingerprint(self) -> str:
        """Hex digest of everything that decides the output (vocab and settings)."""
        state = [self.VERSION, sorted(self._token_dict.items(), key=lambda kv: kv[1]),
                 self._do_lower_case, self._word_maxlen, self._token_start, self._token_end]
        return hashlib.sha256(json.dumps(state, ensure_ascii=False).encode("utf-8")).hexdigest()

    def token_to_id(self, token: str) -> int:
        return self._token_dict.get(token, self._token_unk_id)

    def id_to_token(self, i: int) -> str | None:
        return self._id_to_token[i]

    def ids_to_tokens(self, ids: Iterable[int]) -> list[str | None]:
        return [self._id_to_token[i] for i in ids]

    # --- the algorithm -------------------------------------------------------------
    def _prepare(self, text):
        """Reference clean-up (+ lower-casing), then its first split into words.

        Lower-casing the whole text at once equals the reference's per-word
        lower-casing: word boundaries (spaces, CJK) are neither cased nor
        case-ignorable, so even Greek final sigma comes out the same.
        """
        check_text(text)
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        text = self._remove("", text)
        if self._do_lower_case:
            text = text.lower()
        return self._words(text)

    def _normalize_word(self, word):
        if self._do_lower_case and not word.isascii():
            word = self._strip_marks("", unicodedata.normalize("NFD", word))
        return word

    def _wordpiece(self, piece):
        """Greedy longest-match-first WordPiece of one punctuation-free piece."""
        if len(piece) > self._word_maxlen:
            return [self._token_unk_id]
        vocab, ids, start, n = self._token_dict, [], 0, len(piece)
        while start < n:
            end = min(n, start + self._piece_maxlen)
            while end > start:
                index = vocab.get(piece[start:end] if start == 0 else "##" + piece[start:end])
                if index is not None:
                    break
                end -= 1
            else:
                return [self._token_unk_id]
            ids.append(index)
            start = end
        return ids

    def _word_ids(self, word):
        ids = []
        for piece in self._punct_split(self._normalize_word(word)):
            if piece:
                ids.extend(self._wordpiece(piece))
        return tuple(ids)

    def _ids_of_words(self, words):
        cache = self._cache
        pieces = list(map(cache.get, words))
        if None in pieces:
            if len(cache) > self._cache_size:
                cache.clear()
            for i, ids in enumerate(pieces):
                if ids is None:
                    word = words[i]
                    ids = cache.get(word)
                    if ids is None:
                        ids = cache[word] = self._word_ids(word)
                    pieces[i] = ids
        return list(itertools.chain.from_iterable(pieces))

    def content_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` without ``[CLS]``/``[SEP]`` (a Python list)."""
        return self._ids_of_words(self._prepare(text))

    def decode(self, ids: Iterable[int]) -> str:
        """Readable text: specials dropped, ``##`` pieces glued, CJK unspaced."""
        text = ""
        for token in self.ids_to_tokens(ids):
            if is_special(token) and token != self._token_unk:
                continue
            if token.startswith("##"):
                text += token[2:]
            elif text and (
                (len(token) == 1 and (is_cjk_character(token) or is_punctuation(token)))
                or is_cjk_character(text[-1])
                or (is_punctuation(text[-1]) and text[-1] in "([{'\"-/")
            ):
                text += token
            else:
                text += (" " if text else "") + token
        return text

    # --- offsets -----------------------------------------------------------------------
    def _tokens_with_offsets(self, text):
        """Every token of ``text`` (no specials) with its original character indices."""
        kept = [i for i, ch in enumerate(text) if self._remove("", ch)]
        cleaned = "".join(text[i] for i in kept)
        origin = kept
        if self._do_lower_case:  # per-character lower() has the whole text's lengths
            origin = [o for o, ch in zip(kept, cleaned) for _ in ch.lower()]
            cleaned = cleaned.lower()
        out = []
        for match in self._word_spans(cleaned):
            word_origin = origin[match.start():match.end()]
            chars, char_origin = "", []
            for ch, o in zip(match.group(), word_origin):
                norm = self._normalize_word(ch)
                chars += norm
                char_origin += [o] * len(norm)
            if chars != self._normalize_word(match.group()):  # reordered marks: whole word
                chars = self._normalize_word(match.group())
                char_origin = [word_origin[0]] * len(chars)
            start = 0
            for piece in filter(None, self._punct_split(chars)):
                piece_origin = char_origin[start:start + len(piece)]
                start += len(piece)
                offset = 0
                for token in self.ids_to_tokens(self._wordpiece(piece)):
                    if token == self._token_unk:
                        out.append((token, sorted(set(piece_origin))))
                        break
                    stem = token.removeprefix("##") if offset else token
                    out.append((token, sorted(set(piece_origin[offset:offset + len(stem)]))))
                    offset += len(stem)
        return out

    def rematch(self, text: str, tokens: Sequence[str]) -> list[list[int]]:
        """Original character indices of each token (``[]`` for specials).

        ``tokens`` come from `tokenize` on ``text`` (possibly truncated).

        >>> tok = Tokenizer({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "cafe": 3, "!": 4},
        ...                 do_lower_case=True)
        >>> tok.rematch("Café!", tok.tokenize("Café!"))
        [[], [0, 1, 2, 3], [4], []]
        """
        computed = self._tokens_with_offsets(text)
        mapping, j = [], 0
        for token in tokens:
            if is_special(token) and token != self._token_unk:
                mapping.append([])
                continue
            while j < len(computed) and computed[j][0] != token:
                j += 1
            if j == len(computed):
                raise ValueError(f"token {token!r} does not come from this text, in order")
            mapping.append(computed[j][1])
            j += 1
        return mapping
