"""The speed, attention, training, tokenization, raw-text serving, fine-tuning, backend, serving, step-profile and
bfloat16-accuracy benchmarks, and the fine-tuning study, still run (each once with --quick, as ``python -m MODULE``
from the repository).

They run side by side in subprocesses (as many at once as there are cores) and must exit 0 and write JSON with
one row per measurement; timings are never asserted here (they belong to the benchmark tables).
"""
import json
import os
import subprocess
import sys

import pytest
from paths import ROOT
from subprocesses import run_side_by_side


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    runs = {
        # one length each (a fresh TensorFlow process per row): 96 tokens is past the tiny model's 64 positions
        "benchmarks.speed": (["--quick", "--lengths", "96", "--impls", "bert4long", "bert4long-keras-step", "bert4long-best",
                   "--out", str(out / "speed.json")], out / "speed_quick.json"),
        "benchmarks.attention": (["--quick", "--lengths", "128", "--variants", "full", "chunked", "--output",
                       str(out / "attention.json")], out / "attention_quick.json"),
        "benchmarks.train": (["--quick", "--out", str(out / "train.json")], out / "train.json"),
        "benchmarks.tokenization": (["--quick", "--output", str(out / "tokenization.json")], out / "tokenization.json"),
        "benchmarks.raw_text_serving": (["--quick", "--out", str(out / "raw_text_serving.json")],
                             out / "raw_text_serving_quick.json"),
        "benchmarks.finetune_lengths": (["--quick", "--out", str(out / "finetune_lengths.json")], out / "finetune_lengths.json"),
        "studies.finetune_study": (["--quick", "--work", str(out / "finetune_study"), "--out", str(out / "finetune_study.json")],
                                   out / "finetune_study.json"),
        "benchmarks.backends": (["--quick", "--lengths", "96", "--out", str(out / "backends.json")],
                                out / "backends_quick.json"),
        "benchmarks.serving": (["--quick", "--lengths", "96", "--batches", "2", "--impls", "savedmodel", "keras-predict",
                                "savedmodel-chunked-bf16", "transformers", "--out", str(out / "serving.json")],
                               out / "serving_quick.json"),
        "benchmarks.profile_step": (["--quick", "--tasks", "mlm", "--out", str(out / "profile_step.json")],
                                    out / "profile_step.json"),
        "benchmarks.precision_accuracy": (["--quick", "--out", str(out / "precision_accuracy.json")],
                                          out / "precision_accuracy.json"),
    }
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    ended = run_side_by_side({name: [sys.executable, "-m", name, *args] for name, (args, _) in runs.items()}, cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return {name: (ended[name].returncode, ended[name].stdout, runs[name][1]) for name in runs}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["benchmarks.speed", "benchmarks.attention", "benchmarks.train",
                                  "benchmarks.tokenization", "benchmarks.raw_text_serving",
                                  "benchmarks.finetune_lengths", "studies.finetune_study", "benchmarks.backends",
                                  "benchmarks.serving", "benchmarks.profile_step", "benchmarks.precision_accuracy"])
def test_benchmark_quick_run_writes_json(quick_runs, name):
    returncode, output, path = quick_runs[name]
    assert returncode == 0, output[-3000:]
    with open(path) as f:
        payload = json.load(f)
    text = json.dumps(payload)
    assert '"error"' not in text or name == "benchmarks.tokenization", text[:2000]  # peers may be missing for tokenization
    assert len(text) > 200


@pytest.mark.slow
def test_finetune_study_records_each_runs_last_epoch_labels(quick_runs):
    """Each run's labels for the validation speeches after its last epoch (read from its newest checkpoint, not the
    best epoch's classifier) give the macro-F1 its metrics recorded for that epoch, scored here by scikit-learn."""
    from sklearn.metrics import f1_score

    returncode, output, path = quick_runs["studies.finetune_study"]
    assert returncode == 0, output[-3000:]
    with open(path) as f:
        payload = json.load(f)
    gold = payload["gold"]
    assert len(gold) == payload["data"]["valid"] and len(payload["runs"]) == 4
    for run in payload["runs"]:
        assert len(run["predicted"]) == len(gold) and set(run["predicted"]) <= set(gold)
        expected = f1_score(gold, run["predicted"], average="macro", labels=sorted(set(gold)), zero_division=0)
        assert abs(expected - run["last_macro_f1"]) < 1e-9, (expected, run["last_macro_f1"])
    # the TF-IDF rows beside them, on the same validation speeches
    assert [b["model"] for b in payload["baselines"]] == ["tfidf-512", "tfidf-whole", "tfidf-words-whole"]
    for baseline in payload["baselines"]:
        expected = f1_score(gold, baseline["predicted"], average="macro", labels=sorted(set(gold)), zero_division=0)
        assert len(baseline["predicted"]) == len(gold) and abs(expected - baseline["macro_f1"]) < 1e-4


@pytest.mark.slow
def test_finetune_study_scores_the_long_model_on_cut_speeches_and_trains_one_on_chunks(quick_runs):
    """--quick's 64-token runs are also scored reading 32 tokens: the labels their classifier (after their one epoch,
    the last is the best) gives the validation speeches' first 30 pieces, read here without `predict`; its
    32-token model trains on every chunk of at most 30 pieces of each training speech, the speech's label kept."""
    from sklearn.metrics import accuracy_score, f1_score

    from bert4long.cli.run_folder import load_final_model
    from bert4long.data import document_rows
    from bert4long.tokenizers import load_tokenizer

    returncode, output, path = quick_runs["studies.finetune_study"]
    assert returncode == 0, output[-3000:]
    payload = json.loads(path.read_text())
    gold, work = payload["gold"], path.parent / "finetune_study"
    valid = [json.loads(line) for line in (work / "valid.jsonl").read_text().splitlines()]
    long = [r for r in payload["runs"] if r["seq_len"] == 64]
    assert len(long) == 2 and all(r["truncated_seq_len"] == 32 for r in long)
    for run in long:
        folder = work / f"tiny-seed{run['seed']}"
        settings = json.loads((folder / "finetune.json").read_text())
        tokenizer = load_tokenizer(folder)
        rows = document_rows(tokenizer, tokenizer.encode_documents([row["text"] for row in valid]), 32)
        logits = load_final_model(str(folder / "classifier.keras")).predict_on_batch((rows, rows * 0))
        assert len(run["macro_f1_per_epoch"]) == 1
        assert run["truncated_labels"] == [settings["labels"][i] for i in logits.argmax(-1)]
        assert abs(run["truncated_macro_f1"] - f1_score(gold, run["truncated_labels"], average="macro",
                                                         labels=sorted(set(gold)), zero_division=0)) < 1e-9
        assert abs(run["truncated_accuracy"] - accuracy_score(gold, run["truncated_labels"])) < 1e-9
    chunked = [r for r in payload["runs"] if r["model"] == "tiny-chunks"]
    chunks = [json.loads(line) for line in (work / "train-chunks-32-of-all.jsonl").read_text().splitlines()]
    assert len(chunked) == 2 and all(r["train_chunks"] == len(chunks) > payload["data"]["train"] for r in chunked)
    assert all("truncated_labels" not in r and r["seq_len"] == 32 for r in chunked)
    tokenizer = load_tokenizer(work / "tiny")
    assert max(len(tokenizer.content_ids(row["text"])) for row in chunks) <= 30
    train = [json.loads(line) for line in (work / "train.jsonl").read_text().splitlines()]
    assert [(word, row["label"]) for row in chunks for word in row["text"].split()] == [
        (word, row["label"]) for row in train for word in row["text"].split()]


@pytest.mark.slow
def test_finetune_study_score_truncated_adds_the_cut_reading_to_runs_already_recorded(quick_runs, tmp_path):
    """Runs recorded without their truncated reading get it from their folders; a run not recorded is not trained."""
    returncode, output, path = quick_runs["studies.finetune_study"]
    assert returncode == 0, output[-3000:]
    payload = json.loads(path.read_text())
    payload["runs"] = payload["runs"][:-1]
    for run in payload["runs"]:
        for key in ("truncated_seq_len", "truncated_labels", "truncated_macro_f1", "truncated_accuracy"):
            run.pop(key, None)
    earlier = tmp_path / "finetune_study.json"
    earlier.write_text(json.dumps(payload))
    result = subprocess.run([sys.executable, "-m", "studies.finetune_study", "--quick", "--score-truncated", "--work",
                             str(path.parent / "finetune_study"), "--out", str(earlier)], cwd=ROOT, text=True,
                            capture_output=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(earlier.read_text())["runs"] == json.loads(path.read_text())["runs"][:-1]
