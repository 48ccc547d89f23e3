"""The command line's one data road: per-epoch shuffled order, held-out slices, token-labelling data, and an
interrupted CLI run that resumes to bit-identical weights."""
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from paths import ROOT, child_env

from bert4long.data.masking import MLMMasker
from bert4long.data.order import epoch_permutation, example_order
from bert4long.data.packing import pack_documents
from bert4long.data.tagging import encode_tagged, read_tagged
from bert4long.training import mlm_batches


def test_each_epoch_reads_every_example_once_in_its_own_order():
    count = 11
    read = [int(i) for i in example_order(count, seed=7).take(3 * count)]
    epochs = [read[i * count:(i + 1) * count] for i in range(3)]
    assert all(sorted(e) == list(range(count)) for e in epochs)      # a permutation per epoch
    assert epochs[0] != epochs[1] != epochs[2] and epochs[0] != list(range(count))
    assert epochs[1] == epoch_permutation(count, 7, 1).tolist()      # a pure function of (seed, epoch)
    assert epochs[1] != epoch_permutation(count, 8, 1).tolist()
    assert [int(i) for i in example_order(count, seed=7, start=16).take(5)] == read[16:21]  # resume anywhere
    assert [int(i) for i in example_order(count, shuffle=False).take(13)] == list(range(11)) + [0, 1]


def test_two_sorted_sources_are_mixed_from_the_first_batch():
    """Sequences of source A (ids 10..19) then source B (ids 30..39), in file order: in order, the first half
    of an epoch would be all A. Shuffled, both appear in the first quarter, and every batch of an epoch
    together reads each sequence exactly once."""
    a = [np.full(7, 10 + i % 10, np.int32) for i in range(16)]
    b = [np.full(7, 30 + i % 10, np.int32) for i in range(16)]
    sequences = pack_documents(a + b, 8, cls_id=2, sep_id=3, drop_remainder=True)
    assert len(sequences) == 36 and (sequences[:16, 1] < 20).all()
    no_mask = MLMMasker(vocab_size=64, mask_id=4, special_ids=range(63), max_predictions=1)  # masks only id 63: none
    batches = [x[0].numpy() for x, _, _ in mlm_batches(sequences, no_mask, 4, seed=3).take(9)]
    first_quarter = np.concatenate(batches[:2])
    assert (first_quarter[:, 1:] < 20).any() and (first_quarter[:, 1:] >= 30).any()
    epoch = np.concatenate(batches)
    assert sorted(map(bytes, epoch)) == sorted(map(bytes, sequences))  # each sequence once per epoch


def test_hold_out_takes_the_end_of_every_document():
    from bert4long.cli.mlm import hold_out

    train, held = hold_out([list(range(100)), list(range(100, 110))], 0.05)
    assert train == [list(range(95)), list(range(100, 109))] and held == [list(range(95, 100)), [109]]
    assert hold_out([[1, 2]], 0) == ([[1, 2]], [])


def test_token_labelling_data(tmp_path):
    path = tmp_path / "tags.jsonl"
    path.write_text('{"tokens": ["w1", "w2", "w3"], "tags": ["B", 0, "B"]}\n\n{"tokens": ["w4"]}\n')
    with pytest.raises(ValueError, match=r"tags.jsonl:3: 1 tokens but 'tags' = None"):
        read_tagged(str(path))
    words, tags, sources = read_tagged(str(path), require_tags=False)
    assert tags == [["B", "0", "B"], ["O"]] and sources[1].endswith("tags.jsonl:3")

    class Pieces:  # every word is two pieces: its number, then 50 + its number
        cls_id, sep_id, pad_id, unk_id = 2, 3, 0, 1

        def content_ids(self, word):
            return [int(word[1:]), 50 + int(word[1:])]

    ids, labels, weights, owner = encode_tagged(Pieces(), words[:1], tags[:1], ["0", "B"], 5, sources)
    # 6 pieces in windows of 3: [CLS] p p p [SEP]
    assert ids.tolist() == [[2, 1, 51, 2, 3], [2, 52, 3, 53, 3]] and owner.tolist() == [0, 0]
    assert labels.tolist() == [[0, 1, 1, 0, 0], [0, 0, 1, 1, 0]]
    assert weights.tolist() == [[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]]
    with pytest.raises(ValueError, match=r"tags.jsonl:1: unknown tag 'B'; the tags are \['0'\]"):
        encode_tagged(Pieces(), words[:1], tags[:1], ["0"], 5, sources)


@pytest.mark.slow
def test_interrupted_cli_run_resumes_bit_identical(tiny_bert, tmp_path, monkeypatch, capsys):
    """One text file is the corpus (a slice held out). Run B stops right after its first checkpoint, as if
    killed there (tests/training/test_resume.py kills a real process); rerunning the same command ends with exactly
    run A's weights. Run B's corpus comes from the cache written by its first attempt."""
    from bert4long.cli import main
    from bert4long.training import resume

    config, checkpoint, _ = tiny_bert
    corpus = tmp_path / "one.txt"
    rng = np.random.default_rng(0)
    corpus.write_text(" ".join(f"w{i}" for i in rng.integers(0, 40, 400)))

    def command(out):
        return ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(corpus),
                "--seq-len", "16", "--batch-size", "2", "--steps", "4", "--save-every", "2", "--no-xla", "--quiet",
                "--eval-sequences", "1", "--seed", "5", "--out", str(tmp_path / out)]

    assert main(command("a")) == 0
    out = capsys.readouterr().out
    assert "corpus: 1 documents" in out and "MLM accuracy at 16 tokens" in out
    assert out.count("checkpoint saved: step") == 2  # also under --quiet

    save = resume.RunDirectory.save

    def save_then_die(self, state, step, extra=None):
        save(self, state, step, extra)
        raise KeyboardInterrupt

    monkeypatch.setattr(resume.RunDirectory, "save", save_then_die)
    assert main(command("b")) == 130   # the CLI's Ctrl-C exit (one line, no traceback)
    monkeypatch.setattr(resume.RunDirectory, "save", save)
    assert main(command("b")) == 0
    assert "resumed from step 2" in capsys.readouterr().out
    assert len(list((tmp_path / "b" / "corpus_cache").iterdir())) == 1
    a = tf.train.load_checkpoint(str(tmp_path / "a" / "bert_model.ckpt"))
    b = tf.train.load_checkpoint(str(tmp_path / "b" / "bert_model.ckpt"))
    for name in a.get_variable_to_shape_map():
        np.testing.assert_array_equal(a.get_tensor(name), b.get_tensor(name), err_msg=name)
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["start_step"] == 2


@pytest.mark.slow
def test_finetune_integer_labels_then_predict(tiny_bert, tmp_path, capsys):
    """Integer labels with a labels file "0"/"1", trained through the shuffled order, then `predict` over a
    folder writes one line per document with a label and probabilities that sum to 1."""
    from bert4long.cli import main

    _, checkpoint, _ = tiny_bert
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": " ".join(f"w{(i * 3 + j) % 30}" for j in range(20)),
                                         "label": i % 2}) + "\n" for i in range(6)))
    (tmp_path / "labels.txt").write_text("0\n1\n")
    assert main(["finetune", "--checkpoint", checkpoint, "--train", str(train), "--valid", str(train),
                 "--labels", str(tmp_path / "labels.txt"), "--seq-len", "16", "--batch-size", "4", "--steps", "2",
                 "--save-every", "2", "--out", str(tmp_path / "run"), "--no-xla", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "epoch 2: train loss" in out and "macro-F1" in out and "majority baseline" in out
    record = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [e["epoch"] for e in record["epochs"]] == [1, 2]   # 6 documents in batches of 4: an epoch is 1 step
    assert set(record["epochs"][0]["valid"]["per_class"]) == {"0", "1"}
    assert main(["predict", "--run", str(tmp_path / "run"), "--input", str(train), "--output",
                 str(tmp_path / "scored.jsonl"), "--metrics", str(tmp_path / "scores.json"), "--quiet"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert [row["label"] for row in rows] == [i % 2 for i in range(6)]   # the input's fields, as they were given
    assert all(row["text"] == json.loads(line)["text"] for row, line in zip(rows, train.read_text().splitlines()))
    assert all(type(row["predicted_label"]) is int for row in rows)   # the type of the training labels, as "label"
    gold, predicted = [str(row["label"]) for row in rows], [str(row["predicted_label"]) for row in rows]
    metrics = pytest.importorskip("sklearn.metrics")
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["macro_f1"] == pytest.approx(metrics.f1_score(gold, predicted, average="macro", labels=["0", "1"],
                                                                zero_division=0))
    assert scores["confusion"] == record["final"]["confusion"]   # the same weights, the same documents
    assert scores["macro_f1"] == pytest.approx(record["final"]["macro_f1"])
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.txt").write_text("w1 w2 w3 " * (5 + 20 * i))  # up to 183 tokens: longer than 16
    assert main(["predict", "--run", str(tmp_path / "run"), "--input", str(docs),
                 "--output", str(tmp_path / "out.jsonl"), "--batch-size", "2"]) == 0
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [line["source"] for line in lines] == ["d0.txt", "d1.txt", "d2.txt"]
    assert all(line["predicted_label"] in (0, 1) and type(line["predicted_label"]) is int and "label" not in line
               and abs(sum(line["probabilities"].values()) - 1) < 1e-5 for line in lines)


@pytest.mark.slow
def test_export_run_serves_the_fine_tuned_classifier_on_raw_text(tiny_bert, tmp_path, capsys):
    """`export --run` writes the classifier `finetune` saved; with --raw-text its serving_default reads whole
    documents (WordPiece in the graph, the run's own length and casing) and gives `predict --run`'s numbers
    (`export` run in a fresh process: the saved classifier must load there too)."""
    import tensorflow as tf

    from bert4long.cli import main

    _, checkpoint, _ = tiny_bert
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": " ".join(f"w{(i * 3 + j) % 30}" for j in range(20)),
                                         "label": ["a", "b"][i % 2]}) + "\n" for i in range(6)))
    run = str(tmp_path / "run")
    assert main(["finetune", "--checkpoint", checkpoint, "--train", str(train), "--seq-len", "16",
                 "--batch-size", "4", "--steps", "2", "--out", run, "--no-xla", "--quiet"]) == 0
    texts = ["w1 w2 w3 " * (5 + 20 * i) for i in range(3)]  # up to 183 tokens: longer than 16
    inputs = tmp_path / "docs.jsonl"
    inputs.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    assert main(["predict", "--run", run, "--input", str(inputs), "--output", str(tmp_path / "out.jsonl")]) == 0
    expected = [json.loads(line)["probabilities"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # export as a user runs it: a fresh process, where only the command line has imported bert4long and TensorFlow
    fresh = subprocess.run([sys.executable, "-m", "bert4long.cli", "export", "--run", run, "--raw-text", "--out",
                            str(tmp_path / "served")], capture_output=True, text=True, cwd=ROOT,
                           env=child_env())
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    serve = tf.saved_model.load(str(tmp_path / "served")).signatures["serving_default"]
    served = serve(texts=tf.constant(texts))
    probabilities = tf.nn.softmax(served["logits"]).numpy()
    np.testing.assert_allclose(probabilities, [[p["a"], p["b"]] for p in expected], atol=1e-5)
    np.testing.assert_allclose(served["probabilities"].numpy(), probabilities, atol=1e-6)
    assert [name.decode() for name in served["label"].numpy()] == [max(p, key=p.get) for p in expected]
    assert "probabilities, label" in fresh.stdout
    assert main(["export", "--run", run, "--checkpoint", checkpoint, "--out", str(tmp_path / "both")]) == 1
    assert "one source" in capsys.readouterr().err


@pytest.mark.slow
def test_finetune_epochs_keep_the_best_epoch_and_stop_early(tiny_bert, tmp_path, capsys, monkeypatch):
    """--epochs counts passes over --train; the weights of the epoch with the best --select-metric are the final
    model (scores scripted here: epoch 1 is best), and --early-stopping 2 ends the run two epochs later."""
    from bert4long.cli import main
    from bert4long.training.metrics_record import MetricsRecord

    _, checkpoint, _ = tiny_bert
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]}) + "\n"
                             for i in range(6)))
    scripted = iter([0.9, 0.5, 0.4, 0.4, 0.3])   # epochs 1-3, then the last weights, then the restored ones

    def scores(self):
        from bert4long.training.metrics import classification_scores

        return {**classification_scores(["a", "b"], ["a", "a"], ["a", "b"]), "macro_f1": next(scripted)}

    monkeypatch.setattr(MetricsRecord, "scores", scores)
    base = ["finetune", "--checkpoint", checkpoint, "--train", str(train), "--seq-len", "8", "--batch-size", "2",
            "--no-xla", "--quiet", "--learning-rate", "1e-2"]
    assert main([*base, "--steps", "4", "--epochs", "2", "--out", str(tmp_path / "x")]) == 1
    assert "both say how long to train" in capsys.readouterr().err
    assert main([*base, "--early-stopping", "2", "--out", str(tmp_path / "x")]) == 1
    assert "--early-stopping needs --valid" in capsys.readouterr().err
    run = tmp_path / "run"
    assert main([*base, "--valid", str(train), "--epochs", "5", "--early-stopping", "2", "--out", str(run)]) == 0
    out = capsys.readouterr().out
    assert "3 steps an epoch, 15 steps" in out and "early stop" in out and "kept epoch 1's weights" in out
    record = json.loads((run / "metrics.json").read_text())
    assert [e["epoch"] for e in record["epochs"]] == [1, 2, 3] and record["selected_epoch"] == 1
    assert not (run / "best.weights.h5").exists()   # classifier.keras is the one copy of epoch 1's weights
