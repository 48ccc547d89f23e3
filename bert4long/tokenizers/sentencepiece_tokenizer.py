"""`SpTokenizer`: a sentencepiece model behind bert4keras's tokenizer API.

English ALBERT, T5-style and many multilingual checkpoints ship a sentencepiece
``.model`` instead of a WordPiece ``vocab.txt``. The pieces come from the
``sentencepiece`` library itself (``pip install sentencepiece``); this module
only adds bert4keras's ``encode`` / ``tokenize`` / ``decode`` conventions.
"""
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping

from bert4long.tokenizers.base import TokenizerBase, check_text


class SpTokenizer(TokenizerBase):
    """bert4keras's ``SpTokenizer``: sentencepiece pieces, ``[CLS]``/``[SEP]`` around them.

    Args:
        sp_model_path: path of a sentencepiece ``.model`` file.
        token_start, token_end: the pieces put around every text (ALBERT's
            ``[CLS]``/``[SEP]``); None for none.
        pre_tokenize: optional function ``text -> list of words``; the words
            are joined with spaces before sentencepiece sees them.
        token_translate: optional ``{piece: piece}`` applied after tokenizing
            (and reversed before decoding).

    ``token_to_id`` of a piece the model lacks gives the unknown piece's id and
    ``id_to_token`` of an id past the vocabulary gives ``''``, as in bert4keras.
    ``decode`` hands every piece, specials included, to sentencepiece.

    Example:

    >>> import io, sentencepiece as spm
    >>> model = io.BytesIO()
    >>> spm.SentencePieceTrainer.train(
    ...     sentence_iterator=iter(["the cat sat on the mat"] * 50), model_writer=model,
    ...     vocab_size=16, user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "sp.model")
    >>> _ = open(path, "wb").write(model.getvalue())
    >>> tok = SpTokenizer(path)
    >>> tok.tokenize("the cat")[0], tok.tokenize("the cat")[-1]
    ('[CLS]', '[SEP]')
    >>> tok.decode(tok.encode("the cat")[0][1:-1])
    'the cat'
    """

    def __init__(
        self,
        sp_model_path: str | os.PathLike,
        token_start: str | None = "[CLS]",
        token_end: str | None = "[SEP]",
        pre_tokenize: Callable[[str], Iterable[str]] | None = None,
        token_translate: Mapping[str, str] | None = None,
    ) -> None:
        import sentencepiece

        self.path = os.fspath(sp_model_path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"no sentencepiece model at {self.path!r}")
        try:
            self.sp_model = sentencepiece.SentencePieceProcessor(model_file=self.path)
        except (RuntimeError, OSError) as error:   # an empty, truncated or foreign file
            raise ValueError(f"{self.path!r} is not a sentencepiece model ({str(error).splitlines()[0][:200]}): the "
                             "file is empty or damaged; copy it again from the model's folder or hub page") from None
        self._vocab_size = self.sp_model.get_piece_size()
        self._token_start, self._token_end = token_start, token_end
        self._pre_tokenize = pre_tokenize
        self._token_translate = dict(token_translate or {})
        self._token_translate_inv = {v: k for k, v in self._token_translate.items()}
        pad_id = self.sp_model.pad_id()  # -1 when the model has no padding piece
        self._token_pad = self.sp_model.id_to_piece(pad_id) if pad_id >= 0 else None
        self._token_unk = self.sp_model.id_to_piece(self.sp_model.unk_id())
        self._token_mask = "[MASK]"
        self._set_special_ids()

    def _set_special_ids(self):
        """``_token_{role}_id`` of each ``_token_{role}`` (None where the token is None)."""
        for role in ("pad", "unk", "mask", "start", "end"):
            token = getattr(self, f"_token_{role}")
            setattr(self, f"_token_{role}_id", None if token is None else self.token_to_id(token))

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def fingerprint(self) -> str:
        """Hex digest of everything that decides the ids (the model's pieces, the class's id layout, the start/end
        tokens and the translations): a corpus cache's key."""
        pre = self._pre_tokenize
        state = [type(self).__name__, self._token_start, self._token_end, sorted(self._token_translate.items()),
                 None if pre is None else f"{getattr(pre, '__module__', '')}.{getattr(pre, '__qualname__', repr(pre))}"]
        digest = hashlib.sha256(self.sp_model.serialized_model_proto())
        digest.update(json.dumps(state, ensure_ascii=False).encode("utf-8"))
        return digest.hexdigest()

    def token_to_id(self, token: str) -> int:
        return self.sp_model.piece_to_id(token)

    def id_to_token(self, i: int) -> str:
        return self.sp_model.id_to_piece(i) if i < self._vocab_size else ""

    def _tokenize(self, text):
        check_text(text)
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        if self._pre_tokenize is not None:
            text = " ".join(self._pre_tokenize(text))
        pieces = self.sp_model.encode(text, out_type=str)
        return [self._token_translate.get(piece) or piece for piece in pieces]

    def tokenize(self, text: str, maxlen: int | None = None) -> list[str]:
        """Pieces of ``text`` (as sentencepiece spells them, unknown ones included)
        between the start/end tokens, cut to ``maxlen``."""
        pieces = self._tokenize(text)
        if maxlen is not None:
            pieces = pieces[: max(0, maxlen - self._num_specials(maxlen, 1))]
        start = [] if self._token_start is None else [self._token_start]
        end = [] if self._token_end is None else [self._token_end]
        return start + pieces + end

    def content_ids(self, text: str) -> list[int]:
        """Ids of ``text``'s pieces, without the start/end tokens."""
        return self.tokens_to_ids(self._tokenize(text))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, through sentencepiece's own detokenizer."""
        pieces = [self._token_translate_inv.get(token) or token for token in self.ids_to_tokens(ids)]
        return self.sp_model.decode_pieces(pieces)
