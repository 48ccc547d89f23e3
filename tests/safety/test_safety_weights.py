"""Issue 36 part B: every weight and every input is checked once, where it is read.

A tokenizer of another size than the table it feeds, a NaN weight, a weight stored as integers, a position
record or an integer config key that is not what bert4long writes, a damaged sentencepiece model: each is one
line naming the file, the key or tensor and the fix, from Python and from the command line, before any model is
built. Every file is tiny and written here.
"""
import ast
import json
import os
import pathlib
import shutil

import numpy as np
import pytest
from paths import ROOT
from safetensors.numpy import load_file, save_file

from bert4long.checkpoints.tf_format import CheckpointReader, write_checkpoint
from bert4long.cli import build_parser, main
from bert4long.cli.inputs import choose_tokenizer
from bert4long.cli.resolved import source_for
from bert4long.models import build_transformer_model
from bert4long.position_alpha import DEFAULT_ALPHA
from bert4long.testing import write_tiny_checkpoint

sentencepiece = pytest.importorskip("sentencepiece")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = ["The quick brown fox jumps over the lazy dog. Long documents need long models, and long models need data.",
          "Paris and Berlin are cities; Rome is one too. A city has streets, and streets have long names."] * 6
TABLE = 200   # rows of the tokenizer test's word-embedding table
WORD_EMBEDDINGS = "roberta.embeddings.word_embeddings.weight"


def refused(capsys, argv):
    """``(exit status, the one line on stderr)`` of a command that must fail with one line."""
    status = main(argv)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return status, err


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path, content):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f)


def train_sentencepiece(prefix, **options):
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_prefix=str(prefix),
                                             vocab_size=120, hard_vocab_limit=False, minloglevel=2, **options)
    return str(prefix) + ".model"


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny Google checkpoint: (folder, config, prefix)."""
    folder = tmp_path_factory.mktemp("bert")
    config, prefix, _ = write_tiny_checkpoint(str(folder), seed=5)
    return folder, config, prefix


def copy_folder(source, target, leave_out=()):
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*leave_out))
    return target


# ------------------------------------------------------------------ 1. a tokenizer of another size than its table
def vocab_txt(folder, size):
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                                                + [f"w{i}" for i in range(size - 5)]) + "\n")
    return folder / "vocab.txt", size


def tokenizer_json(folder, size):
    vocab = {"[UNK]": 0, "[PAD]": 1, "[CLS]": 2, "[SEP]": 3, **{f"w{i}": i + 4 for i in range(size - 4)}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json", size


def spiece_model(folder, size):
    path = train_sentencepiece(folder / "spiece")
    return path, sentencepiece.SentencePieceProcessor(model_file=path).get_piece_size()


def xlm_roberta_model(folder, size):
    path = train_sentencepiece(folder / "sentencepiece.bpe")
    return path, sentencepiece.SentencePieceProcessor(model_file=path).get_piece_size() + 2  # fairseq's <pad>, <mask>


@pytest.fixture(scope="module")
def wide_bert(tmp_path_factory):
    """A tiny Google checkpoint whose table has `TABLE` rows, without its vocab.txt."""
    folder = tmp_path_factory.mktemp("wide")
    write_tiny_checkpoint(str(folder), seed=6, vocab_size=TABLE)
    os.remove(folder / "vocab.txt")
    return folder


@pytest.mark.parametrize("write, size", [
    (vocab_txt, TABLE - 50), (vocab_txt, TABLE + 1), (spiece_model, None), (xlm_roberta_model, None),
    (tokenizer_json, TABLE + 1)], ids=lambda p: getattr(p, "__name__", str(p)))
def test_a_tokenizer_of_another_size_than_its_table_is_refused(wide_bert, tmp_path, capsys, write, size):
    folder = copy_folder(wide_bert, tmp_path / "model")
    path, entries = write(folder, size)
    prefix = str(folder / "bert_model.ckpt")
    status, err = refused(capsys, ["evaluate", "--checkpoint", prefix, "--corpus", "x", "--seq-len", "16"])
    assert status == 1 and f"{str(path)!r} has {entries} entries but the model's vocabulary has {TABLE}" in err, err
    assert "Use the tokenizer that came with this checkpoint" in err


def test_a_tokenizer_json_table_may_be_padded_by_fewer_than_128_rows_and_no_more(wide_bert, tmp_path, capsys):
    """ModernBERT pads its table beyond its tokenizer.json (50,368 rows, 50,280 ids): at most 127 rows are padding."""
    folder = copy_folder(wide_bert, tmp_path / "model")
    argv = ["evaluate", "--checkpoint", str(folder / "bert_model.ckpt"), "--corpus", "x", "--seq-len", "16"]
    tokenizer_json(folder, TABLE - 127)
    args = build_parser().parse_args(argv)
    assert choose_tokenizer(args, source_for(args)).tokenizer.vocab_size == TABLE - 127
    path, entries = tokenizer_json(folder, TABLE - 128)
    status, err = refused(capsys, argv)
    assert status == 1 and f"{str(path)!r} has {entries} entries but the model's vocabulary has {TABLE}" in err, err
    assert "128 rows of the table would never be read" in err and "padded by at most 127 rows" in err, err


@pytest.fixture(scope="module")
def xlm_roberta(tiny_family, tmp_path_factory):
    """The tiny XLM-RoBERTa folder (transformers' own classes) with only its sentencepiece.bpe.model."""
    tiny = tiny_family("xlm-roberta")
    folder = copy_folder(tiny.checkpoint, tmp_path_factory.mktemp("xlmr") / "model",
                         leave_out=("tokenizer.json", "tokenizer_config.json", "spm"))
    shutil.copy(os.path.join(tiny.checkpoint, "spm", "sentencepiece.bpe.model"), folder)
    return folder, tiny


def test_an_xlm_roberta_sentencepiece_model_smaller_than_its_table_is_refused(xlm_roberta, tmp_path, capsys):
    source, tiny = xlm_roberta
    folder = copy_folder(source, tmp_path / "model")
    tensors = load_file(folder / "model.safetensors")
    tensors[WORD_EMBEDDINGS] = np.concatenate([tensors[WORD_EMBEDDINGS], tensors[WORD_EMBEDDINGS][:5]])
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    write_json(folder / "config.json", {**read_json(folder / "config.json"), "vocab_size": tiny.vocab_size + 5})
    status, err = refused(capsys, ["evaluate", "--checkpoint", str(folder), "--corpus", "x", "--seq-len", "16"])
    assert status == 1 and f"sentencepiece.bpe.model' has {tiny.vocab_size} entries but the model's vocabulary " \
                           f"has {tiny.vocab_size + 5}" in err, err


# ------------------------------------------------------------------ 4. pretrain with XLM-R's sentencepiece model alone
@pytest.mark.slow   # a 2-step pretrain: ~12 s on 2 CPU cores
def test_pretrain_reads_an_xlm_roberta_folder_with_only_its_sentencepiece_model(xlm_roberta, tmp_path, capsys):
    folder, tiny = xlm_roberta
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(tiny.corpus)
    out = tmp_path / "run"
    status = main(["pretrain", "--checkpoint", str(folder), "--corpus", str(corpus), "--seq-len", "16", "--steps",
                   "2", "--batch-size", "2", "--holdout", "0", "--no-xla", "--quiet", "--out", str(out)])
    assert status == 0, capsys.readouterr().err[-2000:]
    assert "tokenizer: XLMRobertaTokenizer" in capsys.readouterr().out
    assert (out / "bert_model.ckpt.index").exists() and (out / "sentencepiece.bpe.model").exists()


# ------------------------------------------------------------------ 5. a damaged tokenizer file
@pytest.mark.parametrize("name, content, says", [
    ("sentencepiece.bpe.model", b"", "is not a sentencepiece model"),
    ("spiece.model", b"\x00not a model\x01", "is not a sentencepiece model"),
    ("tokenizer.json", b'{"model": 1}', "is not a tokenizer file the tokenizers library reads"),
    ("tokenizer.json", b"{not json", "is not a tokenizer file the tokenizers library reads"),
    ("tokenizer_config.json", b"[1, 2]", "holds a JSON list, not an object")])
def test_a_damaged_tokenizer_file_is_one_line_naming_it(bert, tmp_path, capsys, name, content, says):
    source, _, _ = bert
    folder = copy_folder(source, tmp_path / "model", leave_out=("vocab.txt",))
    if name == "tokenizer_config.json":
        train_sentencepiece(folder / "spiece")
    (folder / name).write_bytes(content)
    status, err = refused(capsys, ["evaluate", "--checkpoint", str(folder / "bert_model.ckpt"), "--corpus", "x",
                                   "--seq-len", "16"])
    assert status == 1 and f"{str(folder / name)!r}" in err and says in err, err


# ------------------------------------------------------------------ 2, 3. weights: NaN or inf, integers for floats
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_weight_in_a_google_checkpoint_is_refused(bert, tmp_path, capsys, bad):
    _, config, prefix = bert
    variables = {name: CheckpointReader(prefix).get(name) for name in CheckpointReader(prefix).names()}
    variables["bert/encoder/layer_1/output/LayerNorm/gamma"][3] = bad
    write_checkpoint(tmp_path / "bert_model.ckpt", variables)
    shutil.copy(config, tmp_path)
    with pytest.raises(ValueError, match=r"variable 'bert/encoder/layer_1/output/LayerNorm/gamma' holds 1 NaN or "
                                         r"infinite value\(s\) of 16 \(first at index \(3,\)\)"):
        build_transformer_model(str(tmp_path / "bert_config.json"), str(tmp_path / "bert_model.ckpt"))
    status, err = refused(capsys, ["info", str(tmp_path / "bert_model.ckpt")])
    assert status == 1 and "bert_model.ckpt" in err and "LayerNorm/gamma' holds 1 NaN" in err, err


@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_a_non_finite_weight_in_model_safetensors_is_refused(xlm_roberta, tmp_path, capsys, bad):
    folder = copy_folder(xlm_roberta[0], tmp_path / "model")
    tensors = load_file(folder / "model.safetensors")
    tensors[WORD_EMBEDDINGS][7, 2] = bad
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    where = rf"Weights file '{folder / 'model.safetensors'}': tensor '{WORD_EMBEDDINGS}' holds 1 NaN"
    with pytest.raises(ValueError, match=where):
        build_transformer_model(checkpoint_path=str(folder))
    status, err = refused(capsys, ["info", str(folder)])
    assert status == 1 and f"tensor '{WORD_EMBEDDINGS}' holds 1 NaN" in err, err


def test_a_safetensors_weight_of_another_type_or_shape_is_refused_and_integer_buffers_are_not(xlm_roberta, tmp_path):
    folder = copy_folder(xlm_roberta[0], tmp_path / "model")
    good = load_file(folder / "model.safetensors")
    good["roberta.embeddings.position_ids"] = np.arange(66, dtype="int64")[None]   # transformers' buffer
    save_file(good, folder / "model.safetensors", metadata={"format": "pt"})
    build_transformer_model(checkpoint_path=str(folder))   # the integer buffer is skipped, as before
    norm = "roberta.encoder.layer.1.output.LayerNorm.weight"
    for tensor, value, message in [
            (WORD_EMBEDDINGS, good[WORD_EMBEDDINGS].view("int32"),   # the same bytes, declared I32
             rf"'bert/embeddings/word_embeddings' \(safetensors key '{WORD_EMBEDDINGS}'\) .* holds int32 data, but "
             r"layer 'Embedding-Token' weight 'embeddings' takes floating-point values"),
            (norm, good[norm][:-1], rf"Shape mismatch: .*'{norm}'\) has shape \(31,\)")]:   # (a shape held already)
        save_file({**good, tensor: value}, folder / "model.safetensors", metadata={"format": "pt"})
        with pytest.raises(ValueError, match=message):
            build_transformer_model(checkpoint_path=str(folder))


def test_an_integer_variable_in_a_google_checkpoint_is_refused(bert, tmp_path):
    _, config, prefix = bert
    variables = {name: CheckpointReader(prefix).get(name) for name in CheckpointReader(prefix).names()}
    variables["bert/embeddings/LayerNorm/beta"] = np.zeros(16, "int32")
    write_checkpoint(tmp_path / "bert_model.ckpt", variables)
    with pytest.raises(ValueError, match=r"'bert/embeddings/LayerNorm/beta' in .* holds int32 data, but layer "
                                         r"'Embedding-Norm' weight 'beta' takes floating-point values"):
        build_transformer_model(config, str(tmp_path / "bert_model.ckpt"))


# ------------------------------------------------------------------ 6, 7. the position-extension record
def with_record(config, record, folder, **changes):
    path = folder / "bert_config.json"
    write_json(path, {**read_json(config), **changes, "bert4long_position_extension": record})
    return str(path)


RECORDS = [  # (record, the key the message names, what it says the valid values are)
    ("hierarchical", " = ", "must be a JSON object"),
    (["copy", 64], " = ", "must be a JSON object"),
    (True, " = ", "must be a JSON object"),
    ({"method": "copy", "length": "2048", "trained_positions": 16}, ".length = ", "must be a whole number >= 1 (a number"),
    ({"method": "copy", "length": 0, "trained_positions": 16}, ".length = ", "must be a whole number >= 1"),
    ({"method": "copy", "length": -64, "trained_positions": 16}, ".length = ", "must be a whole number >= 1"),
    ({"method": "interpolate", "length": 40.5, "trained_positions": 16}, ".length = ", "must be a whole number >= 1"),
    ({"method": "interpolate", "trained_positions": 16}, ".length (missing)", "must be a whole number >= 1"),
    ({"method": "copy", "length": 64, "trained_positions": "16"}, ".trained_positions = ", "must be a whole number"),
    ({"method": "copy", "length": 64, "trained_positions": 0}, ".trained_positions = ", "must be a whole number >= 1"),
    ({"method": "copy", "length": 64}, ".trained_positions (missing)", "must be a whole number >= 1"),
    ({"method": "copy", "length": 64, "trained_positions": 16, "materialized": "yes"}, ".materialized = ",
     "must be true or false"),
    ({"method": "hierarchical", "alpha": 0.5, "trained_positions": 16}, ".alpha = ", "must be a number in (0, 1) and not 0.5"),
    ({"method": "hierarchical", "alpha": "0.3", "trained_positions": 16}, ".alpha = ", "must be a number in (0, 1)"),
    ({"method": "hierarchical", "alpha": True, "trained_positions": 16}, ".alpha = ", "must be a number in (0, 1)"),
    ({"method": "linear", "trained_positions": 16}, ".method = ", "must be one of hierarchical, copy, interpolate"),
    ({"method": "hierarchical", "alhpa": 0.3, "trained_positions": 16}, ".alhpa = ", "is not a key of the record"),
]


@pytest.mark.parametrize("record, key, valid", RECORDS, ids=[json.dumps(r[0])[:60] for r in RECORDS])
def test_a_position_record_bert4long_did_not_write_is_refused_where_the_config_is_read(
        bert, tmp_path, capsys, record, key, valid):
    _, config, prefix = bert
    path = with_record(config, record, tmp_path)
    message = f"Config file {path!r}: bert4long_position_extension{key}"
    with pytest.raises(ValueError) as error:
        build_transformer_model(path, prefix)
    assert message in str(error.value) and valid in str(error.value), error.value
    status, err = refused(capsys, ["info", prefix, "--config", path])
    assert status == 1 and message in err and valid in err and "Fix or remove that key" in err, err


def test_trained_positions_must_describe_the_config_s_table(bert, tmp_path):
    """The table's rows are the trained ones, or (``extend``'s materialised table) at least as many."""
    _, config, _ = bert
    record = {"method": "copy", "length": 40, "trained_positions": 8, "materialized": True}
    build_transformer_model(with_record(config, record, tmp_path), return_keras_model=False)
    for record, valid in [({"method": "copy", "length": 64, "trained_positions": 512}, "must be the 16 trained positions"),
                          ({"method": "copy", "length": 64, "trained_positions": 64, "materialized": True},
                           "must be at most the 16 positions")]:
        with pytest.raises(ValueError, match=rf"trained_positions = {record['trained_positions']} {valid} of the table "
                                             "the config describes"):
            build_transformer_model(with_record(config, record, tmp_path), return_keras_model=False)


def test_alpha_has_one_range_for_the_command_line_and_the_library(bert, tmp_path, capsys):
    """The position study read alpha 0.6 and 0.8: a record of 0.6 is read by every command, and the command line
    accepts what the library accepts (0.5 refused by both)."""
    _, config, prefix = bert
    path = with_record(config, {"method": "hierarchical", "alpha": 0.6, "trained_positions": 16}, tmp_path)
    assert main(["info", prefix, "--config", path]) == 0
    assert "hierarchical (alpha 0.6)" in capsys.readouterr().out
    parser = build_parser()
    given = parser.parse_args(["export", "--checkpoint", prefix, "--out", "o", "--hierarchical-position", "0.8"])
    bare = parser.parse_args(["export", "--checkpoint", prefix, "--out", "o", "--hierarchical-position"])
    assert (given.hierarchical_position, bare.hierarchical_position) == (0.8, DEFAULT_ALPHA)
    assert build_transformer_model(config, prefix, hierarchical_position=0.8).get_layer("Embedding-Position").alpha == 0.8
    with pytest.raises(SystemExit):
        parser.parse_args(["extend", "--checkpoint", prefix, "--method", "hierarchical", "--max-position", "64",
                           "--alpha", "0.5", "--out", "o"])
    assert "alpha must be in (0, 1) and not 0.5" in capsys.readouterr().err


def test_the_default_alpha_is_written_once():
    """Every module imports `bert4long.position_alpha.DEFAULT_ALPHA`; no other code writes the number."""
    package = pathlib.Path(ROOT) / "bert4long"
    written = [f"{path.relative_to(package.parent)}:{node.lineno}" for path in sorted(package.rglob("*.py"))
               if path.name != "position_alpha.py"
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.Constant) and node.value == DEFAULT_ALPHA and isinstance(node.value, float)]
    assert not written, f"alpha's default written outside bert4long/position_alpha.py: {written}"


# ------------------------------------------------------------------ 8. integer config keys
INTEGERS = [("num_hidden_layers", 2.0, "(an integer: 2, not 2.0)"), ("num_hidden_layers", "2", "(a number, not a string)"),
            ("num_hidden_layers", True, "(a number, not true)"), ("hidden_size", 16.0, "(an integer: 16, not 16.0)"),
            ("max_position_embeddings", 16.0, "(an integer"), ("type_vocab_size", 2.0, "(an integer"),
            ("intermediate_size", 32.5, "must be a whole number >= 1"), ("pad_token_id", "0", "(a number, not a string)")]


@pytest.mark.parametrize("key, value, says", INTEGERS)
def test_an_integer_config_key_given_otherwise_is_refused(bert, tmp_path, capsys, key, value, says):
    _, config, prefix = bert
    path = tmp_path / "bert_config.json"
    write_json(path, {**read_json(config), key: value})
    message = f"Config file {str(path)!r}: {key} = {value!r} must be a whole number"
    with pytest.raises(ValueError) as error:
        build_transformer_model(str(path), prefix)
    assert message in str(error.value) and says in str(error.value), error.value
    status, err = refused(capsys, ["info", prefix, "--config", str(path)])
    assert status == 1 and message in err and says in err, err


@pytest.mark.parametrize("change, says", [({"num_hidden_layers": 2.0}, "num_hidden_layers = 2.0 must be a whole number"),
                                          ({"vocab_size": 0}, "vocab_size = 0 must be a whole number >= 1"),
                                          (None, "holds a JSON list, not an object")])
def test_a_hugging_face_config_json_is_checked_where_it_is_read(xlm_roberta, tmp_path, capsys, change, says):
    folder = copy_folder(xlm_roberta[0], tmp_path / "model")
    write_json(folder / "config.json", [1, 2] if change is None else {**read_json(folder / "config.json"), **change})
    with pytest.raises(ValueError, match=f"Config file '{folder / 'config.json'}'"):
        build_transformer_model(checkpoint_path=str(folder))
    status, err = refused(capsys, ["info", str(folder)])
    assert status == 1 and says in err, err
