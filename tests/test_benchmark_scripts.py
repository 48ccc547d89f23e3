"""The speed, attention, training, tokenization, raw-text serving, fine-tuning, backend and serving benchmarks, and the
fine-tuning study, still run (each once with --quick, as ``python -m MODULE`` from the repository).

They run side by side in subprocesses and must exit 0 and write JSON with one row per measurement;
timings are never asserted here (they belong to the benchmark tables).
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        "studies.finetune_study": (["--quick", "--out", str(out / "finetune_study.json")], out / "finetune_study.json"),
        "benchmarks.backends": (["--quick", "--lengths", "96", "--out", str(out / "backends.json")],
                                out / "backends_quick.json"),
        "benchmarks.serving": (["--quick", "--lengths", "96", "--batches", "2", "--impls", "savedmodel", "keras-predict",
                                "transformers", "--out", str(out / "serving.json")], out / "serving_quick.json"),
    }
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    processes = {name: subprocess.Popen([sys.executable, "-m", name, *args], cwd=ROOT,
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for name, (args, _) in runs.items()}
    outputs = {name: process.communicate(timeout=600)[0] for name, process in processes.items()}
    return {name: (processes[name].returncode, outputs[name], runs[name][1]) for name in runs}


@pytest.mark.parametrize("name", ["benchmarks.speed", "benchmarks.attention", "benchmarks.train",
                                  "benchmarks.tokenization", "benchmarks.raw_text_serving",
                                  "benchmarks.finetune_lengths", "studies.finetune_study", "benchmarks.backends",
                                  "benchmarks.serving"])
def test_benchmark_quick_run_writes_json(quick_runs, name):
    returncode, output, path = quick_runs[name]
    assert returncode == 0, output[-3000:]
    with open(path) as f:
        payload = json.load(f)
    text = json.dumps(payload)
    assert '"error"' not in text or name == "benchmarks.tokenization", text[:2000]  # peers may be missing for tokenization
    assert len(text) > 200


def test_finetune_study_records_each_runs_last_epoch_labels(quick_runs):
    """Each run's labels for the validation speeches after its last epoch (read from its newest checkpoint, not the
    best epoch's classifier) give the macro-F1 its metrics recorded for that epoch, scored here by scikit-learn."""
    from sklearn.metrics import f1_score

    returncode, output, path = quick_runs["studies.finetune_study"]
    assert returncode == 0, output[-3000:]
    with open(path) as f:
        payload = json.load(f)
    gold = payload["gold"]
    assert len(gold) == payload["data"]["valid"] and len(payload["runs"]) == 2
    for run in payload["runs"]:
        assert len(run["predicted"]) == len(gold) and set(run["predicted"]) <= set(gold)
        expected = f1_score(gold, run["predicted"], average="macro", labels=sorted(set(gold)), zero_division=0)
        assert abs(expected - run["last_macro_f1"]) < 1e-9, (expected, run["last_macro_f1"])
    # the TF-IDF rows beside them, on the same validation speeches
    assert [b["model"] for b in payload["baselines"]] == ["tfidf-512", "tfidf-whole", "tfidf-words-whole"]
    for baseline in payload["baselines"]:
        expected = f1_score(gold, baseline["predicted"], average="macro", labels=sorted(set(gold)), zero_division=0)
        assert len(baseline["predicted"]) == len(gold) and abs(expected - baseline["macro_f1"]) < 1e-4
