"""`load_tokenizer`: the right tokenizer for a checkpoint folder, from the files it holds."""
import glob
import os

from bert4long.tokenizers.casing import lower_case_of, read_json
from bert4long.tokenizers.huggingface_tokenizer import (
    HuggingFaceTokenizer,
    byte_level_bpe,
    token_text,
)
from bert4long.tokenizers.sentencepiece_tokenizer import SpTokenizer
from bert4long.tokenizers.wordpiece import Tokenizer, load_vocab
from bert4long.tokenizers.xlm_roberta import MODEL_FILE as XLM_ROBERTA_MODEL_FILE
from bert4long.tokenizers.xlm_roberta import XLMRobertaTokenizer

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json + merges.txt", "*.model")


def _check_xlm_roberta(folder, config):
    """Refuse a ``sentencepiece.bpe.model`` that the folder says is not XLM-RoBERTa's (CamemBERT's has other ids)."""
    named = {"tokenizer_config.json": config.get("tokenizer_class"),
             "config.json": read_json(os.path.join(folder, "config.json")).get("model_type")}
    for file, name in named.items():
        if name is not None and not str(name).lower().replace("-", "").startswith("xlmroberta"):
            raise ValueError(
                f"{folder!r}: {XLM_ROBERTA_MODEL_FILE} is read with XLM-RoBERTa's fairseq ids, but {file} names "
                f"{name!r}, whose ids may differ: save the tokenizer as a tokenizer.json "
                "(transformers: AutoTokenizer.from_pretrained(folder).save_pretrained(folder)) and load that"
            )


def is_wordpiece_folder(folder: str | os.PathLike) -> bool:
    """True when ``folder``'s tokenizer is WordPiece: a ``vocab.txt``, and no ``tokenizer.json`` of another model."""
    if not os.path.isfile(os.path.join(folder, "vocab.txt")):
        return False
    model = read_json(os.path.join(folder, "tokenizer.json")).get("model")
    return (model.get("type") if isinstance(model, dict) else None) in (None, "WordPiece")


def load_tokenizer(folder: str | os.PathLike) -> Tokenizer | SpTokenizer | XLMRobertaTokenizer | HuggingFaceTokenizer:
    """The tokenizer of a checkpoint folder, with bert4keras's API.

    - WordPiece (a ``vocab.txt``, with or without a WordPiece ``tokenizer.json``):
      bert4long's `Tokenizer`, lower-casing as `bert4long.tokenizers.casing.lower_case_of`
      decides (the folder's ``tokenizer_config.json``, else the vocab), as the command line does.
    - Any other ``tokenizer.json`` (RoBERTa / Longformer / BigBird / ModernBERT):
      `HuggingFaceTokenizer`, run by the ``tokenizers`` library.
    - ``vocab.json`` + ``merges.txt`` alone (older RoBERTa / Longformer folders):
      RoBERTa's byte-level BPE, assembled with ``tokenizers`` as transformers does.
    - XLM-RoBERTa's ``sentencepiece.bpe.model`` alone: `XLMRobertaTokenizer` (fairseq's
      ids: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, pieces + 1, ``<mask>`` last);
      refused when ``tokenizer_config.json`` or ``config.json`` names another model.
    - Another sentencepiece ``*.model`` alone (ALBERT's ``spiece.model``): `SpTokenizer`
      with ``[CLS]``/``[SEP]`` (or the ``cls_token``/``sep_token`` of
      ``tokenizer_config.json``).

    Every one returns ``encode(first, second=None, maxlen=None)`` ->
    ``(token_ids, segment_ids)``, ``tokenize``, ``token_to_id``, ``id_to_token`` and
    ``decode``.

    Example:

    >>> from bert4long import pretrained
    >>> tok = load_tokenizer(pretrained.path())   # the built-in model's folder: its vocab.txt, uncased
    >>> tok.tokenize("Hello, world!")
    ['[CLS]', 'hel', '##l', '##o', ',', 'world', '!', '[SEP]']
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no tokenizer folder {folder!r}")
    config = read_json(os.path.join(folder, "tokenizer_config.json"))
    tokenizer_json = os.path.join(folder, "tokenizer.json")
    if is_wordpiece_folder(folder):
        token_dict = load_vocab(os.path.join(folder, "vocab.txt"))
        return Tokenizer(token_dict, do_lower_case=lower_case_of(folder, token_dict))
    if os.path.isfile(tokenizer_json):
        return HuggingFaceTokenizer(tokenizer_json, special_tokens=config)
    vocab_json, merges = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    if os.path.isfile(vocab_json) and os.path.isfile(merges):
        return HuggingFaceTokenizer(byte_level_bpe(vocab_json, merges, config), special_tokens=config)
    xlm_roberta_model = os.path.join(folder, XLM_ROBERTA_MODEL_FILE)
    if os.path.isfile(xlm_roberta_model):
        _check_xlm_roberta(folder, config)
        return XLMRobertaTokenizer(xlm_roberta_model)
    models = sorted(glob.glob(os.path.join(folder, "*.model")))
    if models:
        return SpTokenizer(models[0], token_start=token_text(config.get("cls_token", "[CLS]")),
                           token_end=token_text(config.get("sep_token", "[SEP]")))
    raise FileNotFoundError(
        f"{folder!r} has no tokenizer files: expected one of {', '.join(TOKENIZER_FILES)} "
        f"(found {sorted(os.listdir(folder))[:10]}); copy them from the model's hub page "
        "or from the folder the checkpoint came from"
    )
