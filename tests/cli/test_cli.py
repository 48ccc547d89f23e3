"""The bert4long command end to end on a tiny checkpoint and corpus (one subprocess per command)."""
import shutil
import subprocess
import sys

import numpy as np
import pytest
from paths import child_env

from bert4long.checkpoints.tf_format import CheckpointReader


def bert4long(*args, cwd):
    command = [shutil.which("bert4long")] if shutil.which("bert4long") else [sys.executable, "-m", "bert4long.cli"]
    env = child_env()
    return subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture
def corpus(tmp_path, rng):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(6):
        (folder / f"doc{i}.txt").write_text(" ".join(f"w{j % 30}" for j in rng.integers(0, 60, 50)))
    return folder


@pytest.mark.slow
def test_pretrain_resume_info_export(tiny_bert, corpus, tmp_path, capsys, monkeypatch):
    config, checkpoint, _ = tiny_bert
    common = ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus), "--seq-len", "24",
              "--hierarchical-position", "--batch-size", "2", "--save-every", "2", "--out", "run", "--no-xla",
              "--quiet", "--eval-sequences", "2"]
    first = bert4long(*common, "--steps", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    second = bert4long(*common, "--steps", "2", cwd=tmp_path)       # same command again: nothing left to do
    assert "resumed from step 2" in second.stdout, second.stdout + second.stderr[-2000:]
    assert "MLM accuracy at 24 tokens" in second.stdout and "tokens/s" in second.stdout
    reader = CheckpointReader(str(tmp_path / "run" / "bert_model.ckpt"))
    assert reader.shape("bert/embeddings/position_embeddings") == (16, 16)   # hierarchical adds no rows
    assert "cls/predictions/output_bias" in reader

    from bert4long.cli import main  # the command's own process is tested above; these run in this one

    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["info", str(tmp_path / "run")]) == 0
    info = capsys.readouterr()
    assert "up to 256 tokens with the position extension its config records, hierarchical (alpha 0.4)" in info.out, \
        info.err[-2000:]
    assert "bert/encoder/layer_1/output/dense/kernel [32, 16]" in info.out

    exported = bert4long("export", "--checkpoint", str(tmp_path / "run" / "bert_model.ckpt"), "--hierarchical-position",
                         "--out", "served", cwd=tmp_path)
    assert exported.returncode == 0 and "sequence_output" in exported.stdout, exported.stderr[-2000:]
    assert (tmp_path / "served" / "saved_model.pb").exists()

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(empty)]) == 1
    assert "holds no files" in capsys.readouterr().err
    assert main([*[a if a != "24" else "20" for a in common], "--steps", "4"]) == 1
    other = capsys.readouterr().err
    assert "different configuration" in other and "seq_len" in other


def test_help_lists_every_command():
    from bert4long.cli import COMMANDS, build_parser

    text = build_parser().format_help()
    for name in ("pretrain", "finetune", "evaluate", "export", "info", "extend", "convert"):
        assert name in text and name in COMMANDS
    assert np.all([callable(run) for _, run, _ in COMMANDS.values()])


def test_corpus_errors_name_the_path_and_the_fix(tiny_bert, tmp_path, capsys):
    from bert4long.cli import main
    from bert4long.data.corpus import read_texts

    config, checkpoint, _ = tiny_bert
    missing = str(tmp_path / "nowhere")
    assert main(["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", missing]) == 1
    err = capsys.readouterr().err
    assert f"no such file or folder: {missing!r}; pass a folder of text files" in err and ".jsonl" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"empty' holds no files .*add text files"):
        read_texts(empty)
    (empty / "blank.txt").write_text(" \n")
    with pytest.raises(ValueError, match=r"empty' holds no text \(skipped: \{'empty': 1\}\): add documents"):
        read_texts(empty)
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"c.jsonl:2: expected a JSON object with a string 'text' field; "
                                         r'each line must be \{"text": "..."\}'):
        read_texts(bad)
    assert str(tmp_path) in str(pytest.raises(ValueError, read_texts, bad).value)  # the full path, not just the name
    bad.write_text('{"text": "fine"}\n{"text": "also fine"}\n')
    assert read_texts(bad) == ["fine", "also fine"]


def test_extend_and_convert_commands(tiny_bert, tmp_path, capsys):
    import tensorflow as tf

    from bert4long.cli import main

    config, checkpoint, _ = tiny_bert
    out = tmp_path / "long"
    assert main(["extend", "--checkpoint", checkpoint, "--method", "copy", "--max-position", "40",
                 "--out", str(out)]) == 0  # --config found beside the checkpoint
    assert dict(tf.train.list_variables(str(out / "bert_model.ckpt")))["bert/embeddings/position_embeddings"][0] == 40
    assert main(["extend", "--checkpoint", checkpoint, "--method", "hierarchical", "--max-position", "300",
                 "--out", str(tmp_path / "too_long")]) == 1
    assert "at most n*n = 256" in capsys.readouterr().err

    hf = tmp_path / "hf"
    hf.mkdir()
    assert main(["convert", "--checkpoint", str(hf), "--out", str(tmp_path / "g")]) == 1  # no config.json
    assert "Not a Hugging Face model folder" in capsys.readouterr().err
