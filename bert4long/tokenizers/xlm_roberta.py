"""`XLMRobertaTokenizer`: XLM-RoBERTa's ``sentencepiece.bpe.model`` with fairseq's ids.

XLM-RoBERTa (and BGE-M3, multilingual-e5...) was trained by fairseq, whose
dictionary puts ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 first and then
sentencepiece's pieces, each one place later than in the ``.model`` (piece 3 of
sentencepiece is id 4), and ``<mask>`` last. Read as a plain sentencepiece model,
every id would be off by one.
"""
import os
from collections.abc import Callable, Iterable, Mapping

from bert4long.tokenizers.sentencepiece_tokenizer import SpTokenizer

MODEL_FILE = "sentencepiece.bpe.model"  # the name fairseq and transformers give XLM-RoBERTa's model
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0 to 3
SENTENCEPIECE_SPECIALS = ("<unk>", "<s>", "</s>")  # pieces 0 to 2 of the .model, which fairseq's ids assume
MASK = "<mask>"  # the last id


class XLMRobertaTokenizer(SpTokenizer):
    """XLM-RoBERTa's tokenizer: sentencepiece's pieces, fairseq's ids, RoBERTa's pairs.

    Args:
        sp_model_path: path of XLM-RoBERTa's ``sentencepiece.bpe.model``; its
            pieces 0 to 2 must be ``<unk>``, ``<s>``, ``</s>`` (the layout
            fairseq's offset assumes), else a ValueError.
        pre_tokenize, token_translate: as `SpTokenizer`'s.

    Ids: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 (also every piece
    sentencepiece does not know), piece ``i`` of the model ``i + 1``, ``<mask>``
    ``vocab_size - 1``; the vocabulary is the model's pieces + 2 (250,002 for
    XLM-RoBERTa). ``encode`` gives ``<s> A </s>`` and ``<s> A </s></s> B </s>``
    with segment ids all 0 (the model has one segment), as transformers'
    ``XLMRobertaTokenizer``. ``decode`` drops the special tokens.

    Example:

    >>> import io, os, tempfile, sentencepiece as spm
    >>> model = io.BytesIO()
    >>> spm.SentencePieceTrainer.train(sentence_iterator=iter(["the cat sat on the mat"] * 50),
    ...                                model_writer=model, vocab_size=15, minloglevel=2)
    >>> path = os.path.join(tempfile.mkdtemp(), "sentencepiece.bpe.model")
    >>> _ = open(path, "wb").write(model.getvalue())
    >>> tok = XLMRobertaTokenizer(path)
    >>> ids, segments = tok.encode("the cat", "mat")
    >>> tok.ids_to_tokens(ids)
    ['<s>', '▁', 't', 'h', 'e', '▁', 'c', 'at', '</s>', '</s>', '▁mat', '</s>']
    >>> ids[1:8] == [i + 1 for i in tok.sp_model.encode("the cat")], set(segments), tok.vocab_size, tok.mask_id
    (True, {0}, 17, 16)
    >>> tok.decode(ids)
    'the cat mat'
    """

    def __init__(
        self,
        sp_model_path: str | os.PathLike,
        pre_tokenize: Callable[[str], Iterable[str]] | None = None,
        token_translate: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(sp_model_path, "<s>", "</s>", pre_tokenize, token_translate)
        first = [self.sp_model.id_to_piece(i) for i in range(min(3, self.sp_model.get_piece_size()))]
        if tuple(first) != SENTENCEPIECE_SPECIALS or self.sp_model.pad_id() >= 0:
            raise ValueError(
                f"{os.fspath(sp_model_path)!r} starts with pieces {first} (padding id {self.sp_model.pad_id()}), "
                f"not XLM-RoBERTa's {list(SENTENCEPIECE_SPECIALS)} without padding: fairseq's ids would not fit it. "
                "Load this tokenizer from its tokenizer.json (transformers' save_pretrained writes one), "
                "or rename the file if it is a plain sentencepiece model"
            )
        self._vocab_size += 2  # fairseq's <pad> before the pieces, <mask> after them
        self._token_pad, self._token_unk, self._token_mask = "<pad>", "<unk>", MASK
        self._set_special_ids()

    @property
    def special_ids(self) -> list[int]:
        """Ids of ``<s> <pad> </s> <unk> <mask>``."""
        return [*range(len(FAIRSEQ_SPECIALS)), self._vocab_size - 1]

    def token_to_id(self, token: str) -> int:
        if token in FAIRSEQ_SPECIALS:
            return FAIRSEQ_SPECIALS.index(token)
        if token == MASK:
            return self._vocab_size - 1
        piece = self.sp_model.piece_to_id(token)
        return piece + 1 if piece > 0 else FAIRSEQ_SPECIALS.index("<unk>")

    def id_to_token(self, i: int) -> str:
        if 0 <= i < len(FAIRSEQ_SPECIALS):
            return FAIRSEQ_SPECIALS[i]
        if i == self._vocab_size - 1:
            return MASK
        return self.sp_model.id_to_piece(i - 1) if len(FAIRSEQ_SPECIALS) <= i < self._vocab_size else ""

    def _join(self, first, second=None):
        """``<s> A </s>`` or ``<s> A </s></s> B </s>``, segment ids all 0."""
        token_ids = self._wrap(first) + ([] if second is None else [self._token_end_id, *self._wrap(second)[1:]])
        return token_ids, [0] * len(token_ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` without the special tokens, through sentencepiece's detokenizer."""
        specials = set(self.special_ids)
        return super().decode(i for i in ids if int(i) not in specials)
