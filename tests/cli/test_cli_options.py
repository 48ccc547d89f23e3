"""The command line's options and their checks: every refusal happens before a model is built (most before
anything is read), and names the option, the value and the fix."""
import json
import os
import subprocess
import sys

import pytest
from paths import ROOT

from bert4long.cli import build_parser, given_options, main
from bert4long.cli.inputs import choose_tokenizer, lower_case_for
from bert4long.cli.options import model_kwargs, resolve_model_options
from bert4long.cli.resolved import fill_defaults, resolve, source_for
from bert4long.tokenizers import load_tokenizer
from bert4long.tokenizers.casing import vocab_is_cased


def refused(capsys, argv):
    """(exit status, stderr) of ``bert4long argv`` run in this process."""
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse refuses with status 2
        status = stop.code
    return status, capsys.readouterr().err


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text(" ".join(f"w{i % 30}" for i in range(200)))
    return str(path)


@pytest.fixture
def common(tiny_bert, corpus_file, tmp_path):
    _, checkpoint, _ = tiny_bert
    return ["pretrain", "--checkpoint", checkpoint, "--corpus", corpus_file, "--out", str(tmp_path / "run")]


@pytest.mark.parametrize("option, value", [("--save-every", "-1"), ("--learning-rate", "-1"), ("--accumulate", "0"),
                                           ("--warmup-steps", "-5"), ("--batch-size", "0"), ("--steps", "0"),
                                           ("--seq-len", "2"), ("--holdout", "1"), ("--clipnorm", "nan0")])
def test_every_number_is_range_checked(capsys, common, option, value):
    status, err = refused(capsys, [*common, option, value])
    assert status == 2 and f"argument {option}" in err and value in err, err
    assert "must be" in err or "expected" in err


def test_chunks_and_warmup_beyond_steps_are_refused(capsys, tiny_bert, tmp_path, common):
    _, checkpoint, _ = tiny_bert
    status, err = refused(capsys, ["finetune", "--checkpoint", checkpoint, "--train", "x.jsonl", "--chunks", "0"])
    assert status == 2 and "argument --chunks: must be a positive integer" in err
    status, err = refused(capsys, [*common, "--steps", "10", "--warmup-steps", "20"])
    assert status == 1 and "--warmup-steps 20 is more than --steps 10" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize("value, reason", [("0.5", "identical"), ("1.2", "outweighs"), ("0", "positive"),
                                           ("x", "expected a number")])
def test_hierarchical_alpha_is_checked(capsys, common, value, reason):
    status, err = refused(capsys, [*common, "--hierarchical-position", value])
    assert status == 2 and "--hierarchical-position" in err and reason in err, err


def test_hierarchical_position_bare_is_0_4_and_maps_to_the_model():
    parser = build_parser()
    bare = parser.parse_args(["export", "--checkpoint", "c", "--out", "o", "--hierarchical-position"])
    given = parser.parse_args(["export", "--checkpoint", "c", "--out", "o", "--hierarchical-position", "0.3"])
    assert bare.hierarchical_position == 0.4 and given.hierarchical_position == 0.3
    assert model_kwargs(given, resolve_model_options(given, source_for(given))) == {
        "sequence_length": None, "hierarchical_position": 0.3}
    copy = parser.parse_args(["export", "--checkpoint", "c", "--out", "o", "--seq-len", "64", "--model", "RoBERTa",
                              "--position-extension", "interpolate", "--attention", "sliding_window",
                              "--attention-config", "window=8", "global_tokens=[0,1]"])
    assert model_kwargs(copy, resolve_model_options(copy, source_for(copy), seq_len=64)) == {
        "sequence_length": None, "model": "roberta", "position_extension": "interpolate",
        "position_extension_length": 64, "attention": "sliding_window",
        "attention_config": {"window": 8, "global_tokens": [0, 1]}}


@pytest.mark.parametrize("extra, message", [
    (["--model", "gpt"], "--model 'gpt' is unknown: choose one of ['albert', 'albert_unshared', 'bert', 'electra'"),
    (["--attention", "linear"], "Unknown attention 'linear'. Choose one of ['bigbird', "),
    (["--attention", "sliding_window", "--attention-config", "windw=8"],
     "sliding_window has no option 'windw'; its options (with defaults): window=512, dilation=1"),
    (["--attention", "sliding_window", "--attention-config", "window=7"], "window"),
    (["--attention", "sliding_window", "--attention-config", "window=64"], "window=64 is larger than --seq-len 24"),
    (["--attention", "chunked", "--attention-config", "block_size=0"], "block_size"),
    (["--attention", "chunked", "--attention-config", "block_size"], "expects KEY=VALUE, got 'block_size'"),
    (["--seq-len", "40"], ("--seq-len 40 is longer than the 16 positions this model can place (trained: 16): add "
                          "--hierarchical-position")),
    (["--max-position", "40"], "--max-position sets the length of --position-extension copy/interpolate"),
    (["--hierarchical-position", "--position-extension", "copy"], "--hierarchical-position conflicts with"),
])
def test_model_options_are_checked_before_the_model_is_built(capsys, common, tmp_path, extra, message):
    argv = [*common, "--seq-len", "24", "--hierarchical-position"] if "--seq-len" not in extra else [*common]
    if "--position-extension" in extra or "--max-position" in extra:
        argv = [*common, "--seq-len", "24"]
    status, err = refused(capsys, [*argv, *extra])
    assert status == 1 and message in err, err
    if "window=7" in extra or "block_size=0" in extra:  # the kernel's own reason, then its options
        assert "Its options (with defaults):" in err
    assert not (tmp_path / "run").exists()


def test_demo_runs_only_when_asked(capsys, tmp_path):
    status, err = refused(capsys, ["pretrain", "--steps", "5000", "--seq-len", "512", "--out", str(tmp_path / "r")])
    assert status == 1 and "pretrain needs --checkpoint and --corpus; for the built-in demo pass --demo" in err
    status, err = refused(capsys, ["pretrain", "--demo", "--corpus", str(tmp_path)])
    assert status == 1 and "--demo on your own model needs both --checkpoint and --corpus" in err


def test_demo_keeps_the_options_given(tmp_path):
    from bert4long import pretrained
    from bert4long.cli.demo import DEMO_SETTINGS, demo_length

    parser = build_parser()
    argv = ["--demo", "--steps", "4", "--out", str(tmp_path / "d")]
    only_out = ["--out", str(tmp_path / "d")]   # the main job with its folder named: no --demo needed
    args, given = parser.parse_args(["pretrain", *only_out]), given_options(parser.commands["pretrain"], only_out)
    fill_defaults(args, given)
    assert resolve(args, given).demo is True and args.checkpoint == pretrained.checkpoint()
    args, given = parser.parse_args(["pretrain", *argv]), given_options(parser.commands["pretrain"], argv)
    fill_defaults(args, given)
    resolved = resolve(args, given)
    assert resolved.demo is True
    assert (args.steps, args.out) == (4, str(tmp_path / "d"))                      # given
    assert (args.batch_size, args.learning_rate) == (DEMO_SETTINGS["batch_size"], DEMO_SETTINGS["learning_rate"])
    assert args.checkpoint == pretrained.checkpoint()
    assert demo_length(args, given, resolved.source.trained_positions) == 4 * 128  # 4x the built-in's positions


def test_wrong_paths_are_named(capsys, tiny_bert, corpus_file, tmp_path):
    _config, checkpoint, _ = tiny_bert
    wrong = str(tmp_path / "nowhere" / "bert_model.ckpt")
    status, err = refused(capsys, ["pretrain", "--checkpoint", wrong, "--corpus", corpus_file])
    assert status == 1 and f"--checkpoint {wrong!r}: no such checkpoint" in err and "vocab" not in err
    status, err = refused(capsys, ["pretrain", "--checkpoint", checkpoint + ".index", "--corpus", corpus_file])
    assert f"pass the prefix {checkpoint!r} without the suffix" in err
    status, err = refused(capsys, ["evaluate", "--checkpoint", checkpoint, "--corpus", corpus_file, "--seq-len", "16",
                                   "--vocab", str(tmp_path / "v.txt")])
    assert status == 1 and f"--vocab {str(tmp_path / 'v.txt')!r}: no such file" in err
    roberta = tmp_path / "roberta"   # a folder without any tokenizer file
    roberta.mkdir()
    (roberta / "config.json").write_text(json.dumps({"model_type": "roberta", "max_position_embeddings": 514,
                                                     "pad_token_id": 1}))
    status, err = refused(capsys, ["predict", "--checkpoint", str(roberta), "--input", corpus_file,
                                   "--output", str(tmp_path / "o.jsonl")])
    assert status == 1 and f"no tokenizer in {str(roberta)!r}" in err and "vocab.json + merges.txt" in err
    assert "tokenizer.json" in err and "--vocab" in err


def test_binary_corpus_error_names_an_option_that_exists(capsys, tiny_bert, tmp_path):
    _, checkpoint, _ = tiny_bert
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("w1 w2 w3")
    (folder / "b.bin").write_bytes(b"\x89PNG\xff\xfe")
    status, err = refused(capsys, ["evaluate", "--checkpoint", checkpoint, "--corpus", str(folder), "--seq-len", "16"])
    assert status == 1 and "b.bin: invalid UTF-8" in err and "--errors skip" in err
    args = build_parser().parse_args(["evaluate", "--checkpoint", checkpoint, "--corpus", str(folder),
                                      "--errors", "skip"])
    assert args.errors == "skip"


def test_casing_follows_the_vocab_unless_overridden(tmp_path):
    from argparse import Namespace

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Paris", "Berlin", "paris", "berlin"]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    args = Namespace(vocab=str(vocab), checkpoint=None, config=None, lower_case=None)
    assert choose_tokenizer(args).tokenizer.tokenize("Paris Berlin") == ["[CLS]", "Paris", "Berlin", "[SEP]"]
    args.lower_case = True  # --uncased
    assert choose_tokenizer(args).tokenizer.tokenize("Paris Berlin") == ["[CLS]", "paris", "berlin", "[SEP]"]
    assert not vocab_is_cased(words[:5] + [f"w{i}" for i in range(200)])
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "vocab.txt").write_text(vocab.read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    args = Namespace(vocab=None, checkpoint=str(folder), config=None, lower_case=None)
    assert lower_case_for(args, str(folder / "vocab.txt")) is True  # the checkpoint says so


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
FILLER = [f"w{i}" for i in range(199)]


@pytest.mark.parametrize("pieces, config, expected", [
    (["Paris", "paris", *FILLER], None, "paris"),  # one capitalised piece among 206 (issue 28): uncased
    (["Paris", "paris", *(w.upper() for w in FILLER)], None, "Paris"),  # clearly cased
    (["paris", "x", *FILLER], None, "paris"),  # clearly uncased
    (["Paris", "paris", *FILLER], {"do_lower_case": False}, "Paris"),  # the folder's tokenizer_config.json
], ids=["one-capital-in-206", "cased", "uncased", "config"])
def test_command_line_and_load_tokenizer_agree_on_casing(tmp_path, pieces, config, expected):
    from argparse import Namespace

    (tmp_path / "vocab.txt").write_text("\n".join(SPECIALS + pieces) + "\n")
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    args = Namespace(vocab=str(tmp_path / "vocab.txt"), checkpoint=None, config=None, lower_case=None)
    command_line, library = choose_tokenizer(args).tokenizer, load_tokenizer(tmp_path)
    assert command_line.tokenize("Paris") == library.tokenize("Paris") == ["[CLS]", expected, "[SEP]"]


def test_labels_and_tags_are_checked_before_training(capsys, tiny_bert, tmp_path):
    _, checkpoint, _ = tiny_bert
    train, valid, labels = tmp_path / "train.jsonl", tmp_path / "valid.jsonl", tmp_path / "labels.txt"
    train.write_text('{"text": "w1 w2", "label": 0}\n{"text": "w3", "label": 1}\n')
    valid.write_text('{"text": "w1 w2", "label": 1}\n\n{"text": "w3", "label": 2}\n')
    labels.write_text("0\n1\n")
    base = ["finetune", "--checkpoint", checkpoint, "--train", str(train), "--labels", str(labels),
            "--seq-len", "16", "--out", str(tmp_path / "run")]
    status, err = refused(capsys, [*base, "--valid", str(valid)])
    assert status == 1 and f"{valid}:3: unknown label '2'; known labels: ['0', '1']" in err, err
    assert not (tmp_path / "run").exists()
    train.write_text('{"text": "w1 w2", "label": 0}\n{"text": "w3", "label": 1\n')
    status, err = refused(capsys, base)
    assert status == 1 and f"{train}:2: not a JSON object" in err, err
    tags = tmp_path / "tags.jsonl"
    tags.write_text('{"tokens": ["w1", "w2"], "tags": ["A", "B"]}\n{"tokens": ["w1", "w2"], "tags": ["A"]}\n')
    status, err = refused(capsys, ["finetune", "--task", "tokens", "--checkpoint", checkpoint, "--train", str(tags),
                                   "--seq-len", "16", "--out", str(tmp_path / "run")])
    assert status == 1 and f"{tags}:2: 2 tokens but 1 tags; give a list 'tags' with one tag per token" in err


def test_predict_refuses_input_without_text(capsys, tiny_bert, tmp_path):
    _, checkpoint, _ = tiny_bert
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "blank.jsonl").write_text("  \n")   # (an empty document is answered: tests/safety/test_safety_ties.py)
    status, err = refused(capsys, ["predict", "--checkpoint", checkpoint, "--input", str(folder),
                                   "--output", str(tmp_path / "out.jsonl")])
    assert status == 1 and "holds no documents" in err and not (tmp_path / "out.jsonl").exists()
    (tmp_path / "run").mkdir()
    status, err = refused(capsys, ["predict", "--run", str(tmp_path / "run"), "--input", str(folder),
                                   "--output", str(tmp_path / "out.jsonl")])
    assert status == 1 and "holds no finetune.json" in err


@pytest.mark.slow
def test_tensorflow_start_up_logs_are_silenced(tiny_bert, tmp_path):
    _, checkpoint, _ = tiny_bert
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run([sys.executable, "-m", "bert4long.cli", "info", os.path.dirname(checkpoint)], env=env,
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == "", done.stderr[-2000:]  # no oneDNN, CUDA probing or absl lines
    assert done.stdout.startswith("config:") and "an ESTIMATE for one training step" in done.stdout
    assert "sliding_window" in done.stdout and "chunked" in done.stdout
