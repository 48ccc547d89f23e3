"""Tokenizers with bert4keras's API: ``encode(first, second, maxlen)`` -> ``(token_ids, segment_ids)``.

- `Tokenizer`: BERT WordPiece from a ``vocab.txt``, output-exact with Google's reference.
- `SpTokenizer`: a sentencepiece ``.model`` (ALBERT and others), as bert4keras's.
- `XLMRobertaTokenizer`: XLM-RoBERTa's ``sentencepiece.bpe.model`` with fairseq's ids.
- `HuggingFaceTokenizer`: a Hugging Face ``tokenizer.json`` (RoBERTa, Longformer, ModernBERT...).
- `load_tokenizer(folder)`: whichever of these a checkpoint folder's files call for.
"""
from bert4long.tokenizers.base import TokenizerBase, truncated_lengths
from bert4long.tokenizers.folders import load_tokenizer
from bert4long.tokenizers.huggingface_tokenizer import HuggingFaceTokenizer
from bert4long.tokenizers.sentencepiece_tokenizer import SpTokenizer
from bert4long.tokenizers.wordpiece import (
    CJK_RANGES,
    SPECIAL_TOKENS,
    Tokenizer,
    is_cjk_character,
    is_punctuation,
    is_special,
    load_vocab,
    save_vocab,
)
from bert4long.tokenizers.xlm_roberta import XLMRobertaTokenizer

__all__ = [
    "CJK_RANGES",
    "SPECIAL_TOKENS",
    "HuggingFaceTokenizer",
    "SpTokenizer",
    "Tokenizer",
    "TokenizerBase",
    "XLMRobertaTokenizer",
    "is_cjk_character",
    "is_punctuation",
    "is_special",
    "load_tokenizer",
    "load_vocab",
    "save_vocab",
    "truncated_lengths",
]
