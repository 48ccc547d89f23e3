"""`load_tokenizer(folder)` against transformers' own tokenizers on the same folder.

Each folder is written here, offline, by transformers itself from a tiny
vocabulary trained in the test (`tokenizers`' trainers): RoBERTa / Longformer
byte-level BPE (with a tokenizer.json, and as vocab.json + merges.txt alone),
BERT WordPiece (cased and uncased), and a ModernBERT-style byte-level BPE with
``[CLS]``/``[SEP]`` templates. Ids, segment ids, tokens and truncation must be
transformers' (``split_special_tokens=True``: special-token text in a document is
text), and so must the decoded text except for WordPiece, which keeps bert4keras's
``decode`` (no spaces between CJK characters, ``[UNK]`` kept).
"""
import json
import os

import pytest

from bert4long.tokenizers import (
    HuggingFaceTokenizer,
    SpTokenizer,
    Tokenizer,
    load_tokenizer,
)

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Long documents need long models!",
    "Paris and Berlin are cities; ROME is too. Numbers: 2,048 tokens, 4096 positions.",
    "三国演义是一部长篇小说。刘备、关羽、张飞在桃园结义。",
    "Café déjà vu, naïve résumé — über Straße. Emoji 😀🎉 and symbols © ® ™.",
] * 8
TEXTS = [
    "The quick brown fox.",
    "  Leading and trailing spaces, tabs\tand\nnewlines  ",
    "三国演义，长篇小说。",
    "Café déjà vu 😀 naïve ÉCOLE",
    "literal <s> and </s> and <mask> and [CLS] [SEP] [MASK] <pad> in a document",
    "unseen ☃ ꙮ characters",
    "",
    "word " * 30,
]
PAIRS = [(TEXTS[0], TEXTS[4]), (TEXTS[7], TEXTS[2]), (TEXTS[3], TEXTS[7])]
PLAIN_PAIRS = [(TEXTS[0], TEXTS[1]), *PAIRS[1:]]  # no literal special tokens


def _train_byte_level_bpe(special_tokens):
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=400, min_frequency=1, special_tokens=special_tokens,
                            show_progress=False)
    return bpe


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (folder, transformers reference tokenizer)."""
    root = tmp_path_factory.mktemp("tokenizer_folders")
    out = {}

    bpe_files = root / "bpe_files"
    bpe_files.mkdir()
    _train_byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"]).save_model(str(bpe_files))
    vocab, merges = str(bpe_files / "vocab.json"), str(bpe_files / "merges.txt")
    for name, cls in (("roberta", transformers.RobertaTokenizer), ("longformer", transformers.LongformerTokenizer)):
        folder = root / name
        cls(vocab=vocab, merges=merges).save_pretrained(folder)
        out[name] = (folder, transformers.AutoTokenizer.from_pretrained(folder))
    out["roberta_vocab_merges"] = (bpe_files, transformers.RobertaTokenizer(vocab=vocab, merges=merges))

    split = tokenizers.pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    words = {w for line in CORPUS for w, _ in split(line)}
    chars = {c for line in CORPUS for c in line if not c.isspace()}
    for name, lower in (("bert_uncased", True), ("bert_cased", False)):
        case = str.lower if lower else str
        pieces = sorted({case(w) for w in words if len(w) > 3} | {case(c) for c in chars}
                        | {"##" + case(c) for c in chars} | {"##s", "##ed", "the", "doc", "##ument"})
        vocab_list = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *pieces]
        folder = root / name
        folder.mkdir()
        (folder / "vocab.txt").write_text("\n".join(vocab_list) + "\n", encoding="utf-8")
        transformers.BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=lower).save_pretrained(folder)
        out[name] = (folder, transformers.AutoTokenizer.from_pretrained(folder))

    # ModernBERT's tokenizer.json: byte-level BPE, [CLS] A [SEP] (B [SEP]) templates, <|padding|> pad.
    specials = ["<|endoftext|>", "<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    modern = _train_byte_level_bpe(specials)
    ids = {t: modern.token_to_id(t) for t in specials}
    modern._tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=modern._tokenizer, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
        unk_token="[UNK]", mask_token="[MASK]", bos_token="<|endoftext|>", eos_token="<|endoftext|>",
    )
    folder = root / "modernbert"
    fast.save_pretrained(folder)
    out["modernbert"] = (folder, transformers.AutoTokenizer.from_pretrained(folder))
    return out


def _reference_encode(ref, first, second=None, maxlen=None, side="right"):
    ref.truncation_side = side
    enc = ref(first, second, truncation=maxlen is not None, max_length=maxlen, split_special_tokens=True,
              return_token_type_ids=True)
    ref.truncation_side = "right"
    return enc["input_ids"], enc["token_type_ids"]


EXPECTED_CLASS = {"roberta": HuggingFaceTokenizer, "longformer": HuggingFaceTokenizer,
                  "roberta_vocab_merges": HuggingFaceTokenizer, "bert_uncased": Tokenizer,
                  "bert_cased": Tokenizer, "modernbert": HuggingFaceTokenizer}


@pytest.mark.parametrize("name", list(EXPECTED_CLASS))
def test_ids_equal_transformers(folders, name):
    folder, ref = folders[name]
    tok = load_tokenizer(folder)
    assert type(tok) is EXPECTED_CLASS[name]
    for text in TEXTS:
        ids, segments = tok.encode(text)
        assert (ids, segments) == _reference_encode(ref, text), text
        assert tok.tokenize(text) == ref.convert_ids_to_tokens(ids), text
        if name not in ("bert_uncased", "bert_cased"):  # WordPiece keeps bert4keras's decode (CJK unspaced)
            assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True), text
    for first, second in PAIRS:
        assert tok.encode(first, second) == _reference_encode(ref, first, second)
        for maxlen in (8, 13):
            for side in ("right", "left"):
                ids, segments = tok.encode(first, second, maxlen=maxlen, truncate_from=side)
                want_ids, want_segments = _reference_encode(ref, first, second, maxlen, side)
                if isinstance(tok, Tokenizer):  # bert4keras's rule: an odd cut takes the extra token
                    assert len(ids) == len(want_ids)  # from the first text, transformers' from the second
                    continue
                assert (ids, segments) == (want_ids, want_segments), (first, second, maxlen, side)
        assert tok.encode(first, maxlen=6) == _reference_encode(ref, first, None, 6)
    for token in ("the", "Ġthe", "[CLS]", "<s>", "</s>", "[MASK]", "<mask>", "no-such-token"):
        expected = ref.convert_tokens_to_ids(token)
        assert tok.token_to_id(token) == (expected if expected is not None else ref.unk_token_id), token
    assert [tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id, tok.unk_id] == \
        [ref.cls_token_id, ref.sep_token_id, ref.pad_token_id, ref.mask_token_id, ref.unk_token_id]
    # the literal special-token strings of TEXTS[4] never became the special tokens
    content = tok.encode(TEXTS[4])[0][1:-1]
    assert not set(content) & {ref.cls_token_id, ref.sep_token_id, ref.mask_token_id, ref.pad_token_id}


def test_cased_vocab_detected_without_a_config(folders, tmp_path):
    folder = tmp_path / "cased"
    folder.mkdir()
    (folder / "vocab.txt").write_bytes((folders["bert_cased"][0] / "vocab.txt").read_bytes())
    assert load_tokenizer(folder).tokenize("Paris Berlin") == ["[CLS]", "Paris", "Berlin", "[SEP]"]
    (folder / "vocab.txt").write_bytes((folders["bert_uncased"][0] / "vocab.txt").read_bytes())
    assert load_tokenizer(folder).tokenize("Paris Berlin") == ["[CLS]", "paris", "berlin", "[SEP]"]


def test_encode_documents_and_content_ids(folders):
    tok = load_tokenizer(folders["roberta"][0])
    docs = tok.encode_documents(TEXTS)
    assert [d.tolist() for d in docs] == [tok.encode(t)[0][1:-1] for t in TEXTS]
    assert tok.content_ids(TEXTS[0]) == docs[0].tolist()
    assert tok.special_ids == sorted({tok.cls_id, tok.sep_id, tok.pad_id, tok.unk_id, tok.mask_id})
    assert len(tok.fingerprint) == 64 and tok.fingerprint == load_tokenizer(folders["roberta"][0]).fingerprint


def test_sentencepiece_folder(tmp_path):
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(tmp_path / "spiece"), vocab_size=120, pad_id=0,
        unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], hard_vocab_limit=False,
        minloglevel=2,
    )
    os.remove(tmp_path / "spiece.vocab")
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, SpTokenizer)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "spiece.model"))
    ids, segments = tok.encode(TEXTS[0], TEXTS[2])
    assert ids == [2, *processor.encode(TEXTS[0]), 3, *processor.encode(TEXTS[2]), 3]
    assert segments == [0] * (len(processor.encode(TEXTS[0])) + 2) + [1] * (len(processor.encode(TEXTS[2])) + 1)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"cls_token": "[MASK]", "sep_token": "[SEP]"}))
    assert load_tokenizer(tmp_path).encode("x")[0][0] == 4


def test_bad_folders_and_inputs(folders, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer files: expected one of tokenizer\.json, vocab\.txt"):
        load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match="no tokenizer folder"):
        load_tokenizer(tmp_path / "missing")
    tok = load_tokenizer(folders["modernbert"][0])
    with pytest.raises(TypeError, match="decode it first"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="cannot hold the 3 special tokens"):
        tok.encode("a", "b", maxlen=2)
    with pytest.raises(ValueError, match="truncate_from"):
        tok.encode("a", truncate_from="middle")


@pytest.fixture(scope="module")
def xlm_roberta_folder(tmp_path_factory):
    """A folder holding only a sentencepiece.bpe.model (XLM-RoBERTa's layout: <unk> <s> </s> first, no padding)."""
    import sentencepiece

    folder = tmp_path_factory.mktemp("xlm_roberta")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_prefix=str(folder / "sentencepiece.bpe"), vocab_size=150,
        hard_vocab_limit=False, minloglevel=2,
    )
    os.remove(folder / "sentencepiece.bpe.vocab")
    return folder


def test_xlm_roberta_sentencepiece_folder_has_fairseq_ids(xlm_roberta_folder):
    from bert4long.tokenizers import XLMRobertaTokenizer

    ref = transformers.XLMRobertaTokenizer.from_pretrained(xlm_roberta_folder)
    tok = load_tokenizer(xlm_roberta_folder)
    assert type(tok) is XLMRobertaTokenizer
    assert tok.vocab_size == len(ref) == tok.sp_model.get_piece_size() + 2
    assert [tok.cls_id, tok.pad_id, tok.sep_id, tok.unk_id, tok.mask_id] == \
        [ref.cls_token_id, ref.pad_token_id, ref.sep_token_id, ref.unk_token_id, ref.mask_token_id]
    for text in [*TEXTS, "Paris and Berlin", "numbers 2,048 and 4096"]:
        ids, segments = tok.encode(text)
        assert segments == [0] * len(ids)
        if text == TEXTS[4]:  # "<s>" in a document is text (as in fairseq); transformers' unigram matches it as
            assert not set(ids[1:-1]) & set(tok.special_ids) - {tok.unk_id}  # a piece, split_special_tokens or not
            continue
        want = ref(text, split_special_tokens=True)["input_ids"]
        assert ids == want, text
        assert tok.decode(ids) == ref.decode(want, skip_special_tokens=True), text
    for first, second in PLAIN_PAIRS:
        ids, segments = tok.encode(first, second)
        assert ids == ref(first, second, split_special_tokens=True)["input_ids"] and set(segments) == {0}
        for maxlen in (8, 13):  # bert4keras's cut: an odd one takes the extra token from the first text
            want = ref(first, second, truncation=True, max_length=maxlen, split_special_tokens=True)["input_ids"]
            assert len(tok.encode(first, second, maxlen=maxlen)[0]) == len(want)
        assert tok.encode(first, maxlen=6)[0] == ref(first, truncation=True, max_length=6)["input_ids"]
    for token in ("<s>", "</s>", "<pad>", "<unk>", "<mask>", "▁the", "no-such-token"):
        assert tok.token_to_id(token) == ref.convert_tokens_to_ids(token), token
    assert tok.ids_to_tokens(range(tok.vocab_size)) == ref.convert_ids_to_tokens(list(range(len(ref))))
    assert tok.encode_documents(TEXTS[:2])[0].tolist() == tok.encode(TEXTS[0])[0][1:-1]


def test_xlm_roberta_model_file_of_another_layout_is_refused(xlm_roberta_folder, tmp_path):
    import shutil

    import sentencepiece

    shutil.copy(xlm_roberta_folder / "sentencepiece.bpe.model", tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "camembert"}))
    with pytest.raises(ValueError, match=r"config\.json names 'camembert'.*tokenizer\.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlm-roberta"}))
    assert load_tokenizer(tmp_path).vocab_size == len(transformers.XLMRobertaTokenizer.from_pretrained(tmp_path))
    sentencepiece.SentencePieceTrainer.train(  # ALBERT-like pieces: <pad> <unk> first
        sentence_iterator=iter(CORPUS), model_prefix=str(tmp_path / "sentencepiece.bpe"), vocab_size=120,
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, hard_vocab_limit=False, minloglevel=2,
    )
    with pytest.raises(ValueError, match=r"not XLM-RoBERTa's \['<unk>', '<s>', '</s>'\]"):
        load_tokenizer(tmp_path)
