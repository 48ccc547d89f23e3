"""The main job (`bert4long.cli.demo`) and the position-region accuracy it prints (`training.position_eval`)."""
import json
import os

import numpy as np
import pytest
from data_packages import require

from bert4long.cli import main


@pytest.fixture(scope="module")
def tiny_mlm(tiny_bert):
    from bert4long.tokenizers import Tokenizer
    from bert4long.training import build_mlm_model, masker_for

    config, checkpoint, vocab = tiny_bert
    model, builder, _ = build_mlm_model(config, checkpoint, hierarchical_position=0.4)
    tokenizer = Tokenizer(vocab)
    rng = np.random.default_rng(0)
    sequences = rng.integers(5, builder.vocab_size, size=(6, 4 * builder.max_position)).astype("int32")
    return model, builder, sequences, masker_for(tokenizer, sequences.shape[1])


def test_region_counts_add_up_to_the_plain_mlm_accuracy(tiny_mlm):
    """An independent count (`evaluate_mlm`, same masking seed) of the same predictions."""
    from bert4long.training import evaluate_mlm
    from bert4long.training.position_eval import masked_counts

    model, builder, sequences, masker = tiny_mlm
    counts = masked_counts(model, sequences, masker, boundary=builder.max_position, batch_size=3, seed=7)
    reference = evaluate_mlm(model, sequences, masker, batch_size=3, seed=7)
    n = counts["n_lt_all"].sum() + counts["n_ge_all"].sum()
    assert n == reference["predictions"] and counts["n_ge_all"].sum() > counts["n_lt_all"].sum() > 0
    assert (counts["correct_lt_all"].sum() + counts["correct_ge_all"].sum()) / n == pytest.approx(
        reference["mlm_accuracy"])
    assert (counts["n_lt_mask"] <= counts["n_lt_all"]).all()


def test_split_windows_read_independently():
    """A stand-in model that predicts the most common token of what it reads: with ``split`` each window reads
    only itself (its own value), at its own positions; without, the whole row (one value for all windows)."""
    from bert4long.data.masking import MLMMasker
    from bert4long.training.position_eval import masked_counts

    def most_common(x, training=False):
        tokens, _segments, positions = (np.asarray(t) for t in x)
        assert positions.max() < tokens.shape[1]          # positions inside the window read
        mode = np.array([np.bincount(row, minlength=16).argmax() for row in tokens])
        return np.eye(16)[np.repeat(mode[:, None], positions.shape[1], axis=1)]

    masker = MLMMasker(vocab_size=16, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=12)
    rows = np.repeat(np.array([[7] * 16 + [8] * 16 + [9] * 16 + [10] * 16]), 4, axis=0).astype("int32")
    split = masked_counts(most_common, rows, masker, boundary=16, split=16, batch_size=2, compiled=False)
    whole = masked_counts(most_common, rows, masker, boundary=16, batch_size=2, compiled=False)
    assert (split["correct_ge_all"] == split["n_ge_all"]).all() and (split["correct_lt_all"] == split["n_lt_all"]).all()
    assert whole["correct_ge_all"].sum() + whole["correct_lt_all"].sum() < 0.5 * (whole["n_ge_all"].sum()
                                                                                  + whole["n_lt_all"].sum())
    assert split["n_ge_all"].sum() > 0 and (split["n_ge_all"] == whole["n_ge_all"]).all()   # the same masking


@pytest.mark.slow
def test_demo_on_your_checkpoint_and_corpus(tiny_bert, tmp_path, capsys):
    """The command the main job ends with, on a tiny checkpoint and a folder of text files."""
    _, checkpoint, _ = tiny_bert
    corpus = tmp_path / "texts"
    corpus.mkdir()
    for d in range(6):
        (corpus / f"{d}.txt").write_text(" ".join(f"w{(i * (d + 3)) % 40}" for i in range(700)))
    out = tmp_path / "mine"
    assert main(["pretrain", "--demo", "--checkpoint", checkpoint, "--corpus", str(corpus), "--steps", "2",
                 "--batch-size", "2", "--eval-sequences", "4", "--no-xla", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for line in ("zero-shot split", "zero-shot copy", "zero-shot hierarchical", "trained   hierarchical",
                 "trained   copy", "the last 1 of the 6 documents", "reading 64 tokens at once vs its own split",
                 "hierarchical vs copy after the same 2 steps",
                 "± standard error over the 4 windows",
                 "bert4long pretrain --demo --checkpoint"):
        assert line in text, text
    assert f"Saved {out} (" in text and "MB)" in text
    results = json.loads((out / "demo_results.json").read_text())
    assert results["trained_length"] == 16 and results["seq_len"] == 64 and results["windows"] == 4
    assert os.path.exists(out / "bert_model.ckpt.index") and os.path.exists(out / "vocab.txt")


def test_demo_refuses_a_corpus_without_long_documents(tiny_bert, tmp_path, capsys):
    _, checkpoint, _ = tiny_bert
    corpus = tmp_path / "short.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": "w1 w2 w3"}) for _ in range(3)))
    status = main(["pretrain", "--demo", "--checkpoint", checkpoint, "--corpus", str(corpus), "--out",
                   str(tmp_path / "x")])
    assert status == 1
    assert "no held-out document reaches 64 tokens: pass a smaller --seq-len" in capsys.readouterr().err


@pytest.mark.slow
def test_the_main_job_on_the_built_in_model(tmp_path, capsys):
    """`bert4long pretrain --demo` end to end on the built-in model and the articles shipped with it (a few steps)."""
    out = tmp_path / "demo"
    assert main(["pretrain", "--demo", "--steps", "2", "--eval-sequences", "8", "--no-xla", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "8 windows of 512 tokens (4x) from 13 English Wikipedia articles the model never saw" in text
    assert "positions >= 128" in text and "docs/results.md" in text
    assert json.loads((out / "demo_results.json").read_text())["trained_length"] == 128


def test_the_shipped_articles_are_the_ones_the_built_in_model_was_kept_from():
    """The main job's texts ship with the package; where gensim's test data is installed, they are the articles
    `benchmarks.make_wikipedia_articles` strips from it, in the same order (the held-out indices hold)."""
    from bert4long import pretrained

    articles = pretrained.wikipedia_articles()
    assert len(articles) == 106 and "Trojan War" in articles[5]
    require("gensim")   # its test data only (installed --no-deps: not importable)
    from benchmarks.make_wikipedia_articles import wikipedia_articles

    assert articles == wikipedia_articles()


@pytest.mark.slow
def test_a_demo_stopped_by_sigterm_says_a_rerun_starts_over(tiny_bert, tmp_path, capsys, monkeypatch):
    """The main job keeps no checkpoint: SIGTERM's line says a rerun starts over (was: "run the same command again
    to continue", which started over too)."""
    import signal

    from bert4long.cli import demo

    def stop(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the demo")

    monkeypatch.setattr(demo, "_compare", stop)
    corpus = tmp_path / "texts.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": " ".join(f"w{j % 30}" for j in range(80))}) for _ in range(3)))
    assert main(["pretrain", "--demo", "--checkpoint", tiny_bert[1], "--corpus", str(corpus), "--out",
                 str(tmp_path / "x")]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "SIGTERM received: pretrain stopped; it keeps no checkpoint of its work, so running the same command " \
           "again starts it over." in err and "to continue" not in err, err
