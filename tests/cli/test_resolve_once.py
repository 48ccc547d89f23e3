"""Resolve once: a command reads its checkpoint's config file and opens its checkpoint once.

`count_reads` counts, in this process, the opens of the config file (``bert_config.json`` / ``config.json``)
and of the checkpoint (``tf.train.load_checkpoint``, ``safetensors.safe_open``) in the checkpoint's folder
while a command runs; run this file as a script to print the counts of a 2-step ``pretrain`` on a tiny
Google-layout checkpoint and on a tiny Hugging Face folder, with the family detections and argument checks
(``python tests/cli/test_resolve_once.py``).
"""
import builtins
import collections
import contextlib
import json
import os
import sys

import pytest

from bert4long.cli import main

CONFIG_NAMES = ("bert_config.json", "config.json")
# Functions that decide a checkpoint's family, and the argument checks, counted by `count_calls`.
WATCHED = ("config_family", "family_of_model_type", "family", "check_pretrain_arguments", "resolve_model_options",
           "resolve_source")


@contextlib.contextmanager
def count_reads(folder):
    """``Counter`` of ``"config"`` (reads of a config file in ``folder``) and ``"checkpoint"`` (checkpoints of
    ``folder`` opened: a TF checkpoint's ``.index``, read once by its reader, or a ``model.safetensors``) while the
    block runs."""
    import safetensors

    folder = os.path.realpath(folder)
    counts = collections.Counter()
    inside = lambda path: os.path.realpath(os.fspath(path)).startswith(folder + os.sep)  # noqa: E731
    real_open, real_safe_open = builtins.open, safetensors.safe_open

    def counted_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and "r" in mode and inside(file):
            name = os.path.basename(os.fspath(file))
            if name in CONFIG_NAMES or name.endswith(".index"):
                counts["config" if name in CONFIG_NAMES else "checkpoint"] += 1
        return real_open(file, mode, *args, **kwargs)

    def counted_safe_open(path, *args, **kwargs):
        if inside(path):
            counts["checkpoint"] += 1
        return real_safe_open(path, *args, **kwargs)

    builtins.open, safetensors.safe_open = counted_open, counted_safe_open
    try:
        yield counts
    finally:
        builtins.open, safetensors.safe_open = real_open, real_safe_open


def count_calls(names=WATCHED):
    """``Counter`` of ``"module.function"`` for the bert4long functions named ``names`` called in the block
    (a profile hook: slow, for the report, not for tests)."""
    calls = collections.Counter()

    def hook(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name in names and "bert4long" in code.co_filename:
            calls[f"{os.path.basename(code.co_filename)[:-3]}.{code.co_name}"] += 1

    sys.setprofile(hook)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def write_corpus(folder):
    os.makedirs(folder, exist_ok=True)
    for i in range(4):
        with open(os.path.join(folder, f"doc{i}.txt"), "w", encoding="utf-8") as f:
            f.write(" ".join(f"w{(i * 7 + j) % 40}" for j in range(60)))
    return folder


def write_tiny_huggingface_folder(folder):
    """A BERT folder saved by transformers (``config.json``, ``model.safetensors``) with a WordPiece vocab.txt."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from bert4long.testing import write_tiny_checkpoint

    _, _, vocab = write_tiny_checkpoint(folder + "_vocab")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    transformers.BertForMaskedLM(config).save_pretrained(folder)
    with open(vocab, encoding="utf-8") as src, open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as dst:
        dst.write(src.read())
    return folder


def pretrain_argv(checkpoint, corpus, out, config=None):
    return ["pretrain", "--checkpoint", checkpoint, *(["--config", config] if config else []), "--corpus", corpus,
            "--seq-len", "16", "--batch-size", "2", "--steps", "2", "--save-every", "2", "--head-steps", "1",
            "--eval-sequences", "1", "--no-xla", "--quiet", "--out", out]


@pytest.fixture(scope="module")
def google_layout(tmp_path_factory):
    from bert4long.testing import write_tiny_checkpoint

    root = tmp_path_factory.mktemp("resolve_google")
    config, prefix, _ = write_tiny_checkpoint(str(root / "model"))
    return {"checkpoint": prefix, "config": config, "folder": str(root / "model"),
            "corpus": write_corpus(str(root / "corpus"))}


@pytest.fixture(scope="module")
def huggingface_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("resolve_hf")
    folder = write_tiny_huggingface_folder(str(root / "model"))
    return {"checkpoint": folder, "config": None, "folder": folder, "corpus": write_corpus(str(root / "corpus"))}


# Before the source was resolved once (main 0adf7f1): Google layout config 6, checkpoint 2; Hugging Face folder
# config 11, checkpoint 2.
EXPECTED = {"google_layout": {"config": 1, "checkpoint": 1}, "huggingface_folder": {"config": 1, "checkpoint": 1}}


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_pretrain_reads_the_config_once_and_opens_the_checkpoint_once(layout, request, tmp_path, capsys):
    source = request.getfixturevalue(layout)
    argv = pretrain_argv(source["checkpoint"], source["corpus"], str(tmp_path / "run"), source["config"])
    with count_reads(source["folder"]) as counts:
        status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    assert "steps" in out and os.path.isfile(os.path.join(tmp_path, "run", "model.keras"))
    assert dict(counts) == EXPECTED[layout]


def test_count_reads_sees_every_open(google_layout):
    """The counter itself: two reads of the config and two readers of the checkpoint count as two each."""
    from bert4long.checkpoints.config import read_config
    from bert4long.checkpoints.layout import open_checkpoint

    with count_reads(google_layout["folder"]) as counts:
        read_config(google_layout["config"])
        read_config(google_layout["config"])
        open_checkpoint(google_layout["checkpoint"])
        open_checkpoint(google_layout["checkpoint"])
    assert dict(counts) == {"config": 2, "checkpoint": 2}


def measure(root):
    """Print, for a 2-step pretrain on each tiny layout, the reads and the calls of `WATCHED` functions."""
    from bert4long.testing import write_tiny_checkpoint

    corpus = write_corpus(os.path.join(root, "corpus"))
    config, prefix, _ = write_tiny_checkpoint(os.path.join(root, "google"))
    layouts = {"google layout": (prefix, config, os.path.join(root, "google")),
               "huggingface folder": (write_tiny_huggingface_folder(os.path.join(root, "hf")), None,
                                      os.path.join(root, "hf"))}
    for name, (checkpoint, config_path, folder) in layouts.items():
        with count_reads(folder) as counts, count_calls() as calls:
            status = main(pretrain_argv(checkpoint, corpus, os.path.join(root, name.replace(" ", "_")), config_path))
        print(json.dumps({"layout": name, "status": status, **counts, "calls": dict(sorted(calls.items()))}),
              file=sys.__stdout__)


if __name__ == "__main__":
    import tempfile

    measure(tempfile.mkdtemp())


@pytest.mark.parametrize("command", ["evaluate", "info", "predict", pytest.param("export", marks=pytest.mark.slow)])
def test_other_commands_read_the_config_once_and_open_the_checkpoint_once(command, google_layout, tmp_path, capsys):
    """Before (main 0adf7f1): evaluate config 4 / checkpoint 2, info 2 / 2, predict 3 / 3, export 4 / 2."""
    documents = tmp_path / "documents.jsonl"
    documents.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w{i + 2}"}) + "\n" for i in range(3)))
    prefix, corpus = google_layout["checkpoint"], google_layout["corpus"]
    argv = {"evaluate": ["evaluate", "--checkpoint", prefix, "--corpus", corpus, "--seq-len", "16",
                         "--max-sequences", "2"],
            "info": ["info", prefix],
            "predict": ["predict", "--checkpoint", prefix, "--input", str(documents), "--output",
                        str(tmp_path / "embeddings.jsonl"), "--quiet"],
            "export": ["export", "--checkpoint", prefix, "--out", str(tmp_path / "served")]}[command]
    with count_reads(google_layout["folder"]) as counts:
        status = main(argv)
    assert status == 0, capsys.readouterr().err[-3000:]
    assert dict(counts) == {"config": 1, "checkpoint": 1}


def test_a_source_builds_what_the_paths_build_reading_nothing_again(google_layout):
    import numpy as np

    from bert4long.checkpoints.source import resolve_source
    from bert4long.models import build_transformer_model

    config, prefix = google_layout["config"], google_layout["checkpoint"]
    source = resolve_source(checkpoint=prefix, config=config)
    assert source.reader.shape("bert/embeddings/word_embeddings") == (64, 16)   # opened here, once
    with count_reads(google_layout["folder"]) as counts:
        from_source = build_transformer_model(source, with_mlm=True)
    assert dict(counts) == {}
    from_paths = build_transformer_model(config, prefix, with_mlm=True)
    ids = np.array([[2, 9, 17, 4, 30, 3, 0, 0]], "int32")
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(from_source.predict([ids, ids * 0], verbose=0),
                                  from_paths.predict([ids, ids * 0], verbose=0))
    loaded = from_paths.get_layer("Embedding-Token").get_weights()[0]
    np.testing.assert_array_equal(loaded, source.reader.get("bert/embeddings/word_embeddings"))


def test_resolve_source_refuses_a_bad_config_naming_it(tmp_path):
    from bert4long.checkpoints.source import resolve_source

    bad = tmp_path / "bert_config.json"
    bad.write_text('{"hidden_size": 30, "num_attention_heads": 4}')
    with pytest.raises(ValueError, match="num_attention_heads = 4 does not divide hidden_size = 30"):
        resolve_source(config=str(bad))


def test_a_source_with_another_checkpoint_or_model_is_refused(google_layout):
    from bert4long.checkpoints.source import resolve_source
    from bert4long.models import build_transformer_model

    source = resolve_source(config=google_layout["config"], open_reader=False)
    for extra in ({"checkpoint_path": google_layout["checkpoint"]}, {"model": "nezha"}):
        with pytest.raises(ValueError, match="a Source names its own checkpoint and model"):
            build_transformer_model(source, **extra)


@pytest.fixture
def writes_after_defaults(monkeypatch):
    """The names written onto a command's parsed options after `fill_defaults`, the one step that may write them
    (every `argparse.Namespace` made while the test runs records the writes once that step has run on it)."""
    import argparse

    import bert4long.cli as cli

    writes, frozen = [], []

    class WatchedNamespace(argparse.Namespace):
        def __setattr__(self, name, value):
            if any(self is options for options in frozen):
                writes.append(name)
            super().__setattr__(name, value)

    fill_defaults = cli.fill_defaults

    def fill_then_freeze(args, given):
        fill_defaults(args, given)
        frozen.append(args)

    monkeypatch.setattr(argparse, "Namespace", WatchedNamespace)
    monkeypatch.setattr(cli, "fill_defaults", fill_then_freeze)
    return writes, frozen


def written_after_defaults(argv, watched, capsys):
    """The names ``bert4long argv`` wrote onto its parsed options after `fill_defaults` (it must succeed)."""
    writes, frozen = watched
    status = main(argv)
    assert status == 0, capsys.readouterr().err[-3000:]
    assert len(frozen) == 1, "the command's options were not watched"
    written = list(writes)
    writes.clear(), frozen.clear()
    return written


def test_the_watch_sees_a_write(writes_after_defaults, google_layout, capsys, monkeypatch):
    import bert4long.cli as cli

    fill_then_freeze = cli.fill_defaults

    def fill_then_write(args, given):
        fill_then_freeze(args, given)
        args.seq_len = 8

    monkeypatch.setattr(cli, "fill_defaults", fill_then_write)
    assert written_after_defaults(["info", google_layout["checkpoint"]], writes_after_defaults, capsys) == ["seq_len"]


@pytest.mark.parametrize("command", [pytest.param("pretrain", marks=pytest.mark.slow),
                                     pytest.param("demo", marks=pytest.mark.slow),   # ~20 s on 2 CPU cores
                                     "evaluate", "info", "predict", "export"])
def test_no_command_writes_onto_its_parsed_options(command, writes_after_defaults, google_layout, tmp_path, capsys):
    """What a command derives (the `Source`, the model options, the output folder, the demo's settings) is passed down
    in `bert4long.cli.resolved.Resolved`, never written onto the options the user typed."""
    documents = tmp_path / "documents.jsonl"
    documents.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w{i + 2}"}) + "\n" for i in range(3)))
    prefix, corpus = google_layout["checkpoint"], google_layout["corpus"]
    argv = {"pretrain": pretrain_argv(prefix, corpus, str(tmp_path / "run")),
            "demo": ["pretrain", "--demo", "--checkpoint", prefix, "--corpus", corpus, "--seq-len", "32", "--steps",
                     "1", "--batch-size", "2", "--eval-sequences", "2", "--no-xla", "--out", str(tmp_path / "demo")],
            "evaluate": ["evaluate", "--checkpoint", prefix, "--corpus", corpus, "--seq-len", "16",
                         "--max-sequences", "2"],
            "info": ["info", prefix],
            "predict": ["predict", "--checkpoint", prefix, "--input", str(documents), "--output",
                        str(tmp_path / "embeddings.jsonl"), "--quiet"],
            "export": ["export", "--checkpoint", prefix, "--out", str(tmp_path / "served")]}[command]
    assert written_after_defaults(argv, writes_after_defaults, capsys) == []


@pytest.mark.slow   # a finetune, a predict and an export: ~15 s on 2 CPU cores
def test_finetune_and_the_commands_that_read_its_run_write_nothing_onto_their_options(
        writes_after_defaults, google_layout, tmp_path, capsys):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"w{i} w{i + 3} w{i + 5}", "label": "ab"[i % 2]}) + "\n"
                             for i in range(6)))
    run = str(tmp_path / "run")
    for argv in (["finetune", "--checkpoint", google_layout["checkpoint"], "--train", str(train), "--seq-len", "16",
                  "--batch-size", "2", "--epochs", "1", "--no-xla", "--quiet", "--out", run],
                 ["predict", "--run", run, "--input", str(train), "--output", str(tmp_path / "predicted.jsonl"),
                  "--quiet"],
                 ["export", "--run", run, "--raw-text", "--out", str(tmp_path / "served")]):
        assert written_after_defaults(argv, writes_after_defaults, capsys) == [], argv[0]
