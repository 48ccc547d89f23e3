"""Does reading more of a long document help a *fine-tuned* classifier? `bert4long finetune` itself, 3 seeds per model.

Data and split: the 2012 convention speeches (party), 70/30 per party with a fixed seed, exactly as
``benchmarks/finetune_lengths.py`` (132 training, 57 validation speeches; 68% are longer than 512 tokens).
Every model is fine-tuned with the same epochs, learning rate and batch size, once per seed, each run a fresh
`bert4long finetune` process. Scored on the validation speeches **after the last epoch** (not the best epoch:
choosing the epoch on the same 57 speeches would flatter every model), macro-F1 and accuracy as mean ± standard
error over the seeds; also the best epoch's macro-F1, for reference. Each run also records the label it gave every
validation speech after the last epoch, so that the report can compare two models on the same speeches (a paired
bootstrap: how much of a difference the choice of 57 speeches alone could make). Beside them, TF-IDF + logistic
regression on the same split (the first 510 pieces, and the whole speech), and a practitioner's word-level recipe
over the whole speech (`classification_study.WORD_TFIDF`, fixed in advance): what a user would compare against.

Models (``NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]]``; defaults below):
  512           MiniLM-MLM (../shared/models/minilm-mlm), the first 510 tokens (head truncation)
  1536-base     the same checkpoint, hierarchical positions (alpha 0.4), the first 1,534 tokens
  1536-continued-0.4  studies.position_study's hierarchical-0.4 model after its 1,000 steps of continued MLM at 1,536
                (a checkpoint written from that run's final state): pass it with --model
  512-continued-0.4  that checkpoint at 512 tokens: the control that separates reading 1,536 tokens from the
                extra MLM steps (the report compares a long model with the 512 model of its checkpoint)

Runs already in the JSON are skipped, and a run stopped midway resumes from its last checkpoint (every
--save-every steps) in its folder under --work (outside the tree), so a study can be split over several sessions.

    python -m studies.finetune_study --work /work/finetune_study
    python -m studies.finetune_study --model "1536-continued-0.4=/path/bert_model.ckpt,1536" --seeds 0 1 2
    python -m studies.finetune_study --quick     # tiny random model, 24 speeches, 2 seeds (smoke run)

Writes studies/results/finetune_study.json (finetune_study_quick.json with --quick).
"""
import argparse
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from benchmarks.common import ROOT, load_json, machine_stamp, print_table, write_json
from benchmarks.finetune_lengths import MINILM_MLM, peak_rss_gb, speeches, split, timed_finetune
from bert4long.outputs import folder_bytes

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULT_MODELS = [f"512={MINILM_MLM},512", f"1536-base={MINILM_MLM},1536,--hierarchical-position"]


def parse_model(spec):
    """``NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]]`` -> (name, checkpoint, seq_len, flags)."""
    name, _, rest = spec.partition("=")
    parts = rest.split(",")
    if not name or not parts[0]:
        raise ValueError(f"--model {spec!r}: write NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]]")
    return name, parts[0], int(parts[1]) if len(parts) > 1 else 512, parts[2:]


def run_once(name, checkpoint, seq_len, flags, seed, data, gold, folder, args):
    """One `bert4long finetune` process; its per-epoch validation scores and time from metrics.json."""
    command = timed_finetune(["--checkpoint", checkpoint, *flags, "--train", data[0], "--valid", data[1],
                              "--seq-len", str(seq_len), "--batch-size", str(args.batch_size), "--epochs",
                              str(args.epochs), "--learning-rate", str(args.learning_rate), "--seed", str(seed),
                              "--save-every", str(args.save_every), "--out", folder, "--quiet"])
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if result.returncode:
        raise RuntimeError(f"{name} seed {seed} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    epochs = load_json(os.path.join(folder, "metrics.json"))["epochs"]
    last = epochs[-1]["valid"]
    estimate = re.search(r"memory: about ([0-9.]+) GiB", result.stdout)
    return {"model": name, "seed": seed, "checkpoint": checkpoint, "seq_len": seq_len, "flags": flags,
            "last_macro_f1": last["macro_f1"], "last_accuracy": last["accuracy"],
            "recall": {k: v["recall"] for k, v in last["per_class"].items()},
            "best_macro_f1": max(e["valid"]["macro_f1"] for e in epochs),
            "macro_f1_per_epoch": [round(e["valid"]["macro_f1"], 4) for e in epochs],
            "epoch_seconds": [round(e["train"]["seconds"], 1) for e in epochs],
            "peak_rss_gb": peak_rss_gb(result.stderr),
            "estimated_peak_gib": float(estimate.group(1)) if estimate else None,
            "folder_mb": round(folder_bytes(folder) / 1e6, 1),
            "predicted": last_epoch_predictions(folder, data[1], gold, last["macro_f1"])}


def last_epoch_predictions(folder, valid, gold, macro_f1):
    """The labels the `bert4long finetune` run in ``folder`` gives the speeches of ``valid`` (labelled ``gold``)
    after its last epoch, by `bert4long predict`. The run's classifier holds its best epoch's weights; the last
    epoch's are its newest checkpoint, read into that classifier here (and checked: they must give the recorded
    last-epoch ``macro_f1``)."""
    import tensorflow as tf

    from bert4long.cli import main as cli
    from bert4long.cli.run_folder import load_final_model, save_final_model
    from bert4long.training import RunDirectory
    from bert4long.training.metrics import classification_scores

    settings = load_json(os.path.join(folder, "finetune.json"))
    model = load_final_model(os.path.join(folder, "classifier.keras"))
    states = RunDirectory(folder, {})
    if states.latest_step() is None:
        raise RuntimeError(f"{folder!r} holds no checkpoint of its last epoch")
    # finetune.json records the values the run resolved (precision, warmup); the state, the options as given
    RunDirectory(folder, states.state_record(states.latest_step())["config"]).restore(tf.train.Checkpoint(model=model))
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        os.makedirs(run)
        for name in ("finetune.json", "vocab.txt"):
            shutil.copy(os.path.join(folder, name), run)
        save_final_model(model, os.path.join(run, "classifier.keras"))
        output = os.path.join(tmp, "predicted.jsonl")
        with contextlib.redirect_stdout(io.StringIO()) as printed:   # (its score table: checked below instead)
            if cli(["predict", "--run", run, "--input", valid, "--output", output, "--quiet"]):
                raise RuntimeError(f"bert4long predict failed on the last state of {folder!r}:\n{printed.getvalue()}")
        with open(output, encoding="utf-8") as f:
            predicted = [json.loads(line)["predicted_label"] for line in f]
    again = classification_scores(gold, predicted, settings["labels"])["macro_f1"]
    if abs(again - macro_f1) > 1e-6:
        raise RuntimeError(f"{folder!r}: its last checkpoint gives macro-F1 {again:.4f} on {valid!r}, but its "
                           f"metrics.json recorded {macro_f1:.4f} after the last epoch")
    return predicted


def tfidf_baselines(data, n_train, checkpoint):
    """What a user compares against, on the same split: TF-IDF + logistic regression (`classification_study`'s,
    C chosen by an inner cross-validation on the training speeches) over the first 510 WordPiece pieces of each
    speech and over the whole speech (the pieces of ``checkpoint``'s tokenizer), and the word-level recipe over the
    whole text, with the label each gives each validation speech."""
    from bert4long.tokenizers import load_tokenizer
    from bert4long.training.metrics import classification_scores
    from studies.classification_study import tfidf_logistic, tfidf_words_logistic

    rows = []
    for part in data:
        with open(part, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    labels = sorted({row["label"] for row in rows})
    documents = load_tokenizer(os.path.dirname(checkpoint)).encode_documents([row["text"] for row in rows])
    y = np.array([labels.index(row["label"]) for row in rows])
    train = np.arange(len(rows)) < n_train
    gold = [labels[i] for i in y[~train]]
    baselines = []
    texts = [row["text"] for row in rows]
    for name, fit_predict in (("tfidf-512", tfidf_logistic([d[:510] for d in documents], None)),
                              ("tfidf-whole", tfidf_logistic(documents, None)),
                              ("tfidf-words-whole", tfidf_words_logistic(texts, None))):
        predicted = [labels[i] for i in fit_predict(train, ~train, y)]
        scores = classification_scores(gold, predicted, labels)
        baselines.append({"model": name, "macro_f1": round(scores["macro_f1"], 4),
                          "accuracy": round(scores["accuracy"], 4), "predicted": predicted})
    return baselines


def mean_se(values):
    """Mean and standard error (NaN for one value), rounded to 4 decimals."""
    values = np.asarray(values, dtype=float)
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return round(float(values.mean()), 4), round(float(se), 4)


def summary(runs):
    """Per model: mean ± standard error over seeds of the last epoch's scores."""
    rows = []
    for name in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == name]
        (f1, f1_se), (acc, acc_se), (best, best_se) = (mean_se([r[key] for r in mine]) for key in
                                                       ("last_macro_f1", "last_accuracy", "best_macro_f1"))
        rows.append({"model": name, "seeds": len(mine), "macro_f1": f1, "macro_f1_se": f1_se, "accuracy": acc,
                     "accuracy_se": acc_se, "best_epoch_macro_f1": best, "best_epoch_macro_f1_se": best_se,
                     "s_per_epoch": round(float(np.mean([s for r in mine for s in r["epoch_seconds"]])), 1)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]] (repeatable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--work", help="run folders (default: a new temporary folder)")
    parser.add_argument("--save-every", type=int, default=33, help="steps between resumable checkpoints")
    parser.add_argument("--quick", action="store_true", help="tiny random model, 24 speeches, 2 seeds of 1 epoch")
    parser.add_argument("--out", help="JSON path (default studies/results/finetune_study[_quick].json)")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="finetune_study-")
    os.makedirs(work, exist_ok=True)
    models = args.model or DEFAULT_MODELS
    if args.quick:
        from bert4long.testing import write_tiny_checkpoint

        _, tiny, _ = write_tiny_checkpoint(os.path.join(work, "tiny"), max_position_embeddings=64)
        models, args.seeds, args.epochs = [f"tiny={tiny},64"], [0, 1], 1
    data, n_train, n_valid = split(speeches(), work, 24 if args.quick else None)
    path = args.out or os.path.join(HERE, "results", f"finetune_study{'_quick' if args.quick else ''}.json")
    settings = {"epochs": args.epochs, "learning_rate": args.learning_rate, "batch_size": args.batch_size}
    old = load_json(path) or {}
    runs = old.get("runs", []) if old.get("settings") == settings else []
    with open(data[1], encoding="utf-8") as f:
        gold = [json.loads(line)["label"] for line in f]
    baselines = tfidf_baselines(data, n_train, parse_model(models[0])[1])

    def write():   # (the command: every model in the file written out, whichever runs this process added)
        specs = {r["model"]: ",".join([f"{r['model']}={r['checkpoint']}", str(r["seq_len"]), *r["flags"]]) for r in runs}
        seeds = sorted({r["seed"] for r in runs})
        command = " ".join(["python -m studies.finetune_study", *(f'--model "{s}"' for s in specs.values()),
                            "--seeds", *map(str, seeds), "--epochs", str(args.epochs), "--learning-rate",
                            str(args.learning_rate), "--batch-size", str(args.batch_size),
                            *(["--work", args.work] if args.work else []), "--out", path])
        write_json(path, {"stamp": machine_stamp(None if args.quick else command), "data": {"train": n_train, "valid": n_valid},
                          "settings": settings, "gold": gold, "runs": runs, "rows": summary(runs),
                          "baselines": baselines})

    for run in runs:   # runs recorded before their predictions were: read them from the run's folder when it is there
        folder = os.path.join(work, f"{run['model']}-seed{run['seed']}")
        if "predicted" not in run and os.path.isfile(os.path.join(folder, "finetune.json")):
            run["predicted"] = last_epoch_predictions(folder, data[1], gold, run["last_macro_f1"])
            write()
    done = {(r["model"], r["seed"]) for r in runs}
    for name, checkpoint, seq_len, flags in map(parse_model, models):
        for seed in args.seeds:
            if (name, seed) in done:
                continue
            runs.append(run_once(name, checkpoint, seq_len, flags, seed, data, gold,
                                 os.path.join(work, f"{name}-seed{seed}"), args))
            print(json.dumps({k: runs[-1][k] for k in ("model", "seed", "last_macro_f1", "epoch_seconds")}), flush=True)
            write()
    write()
    rows = summary(runs)
    print_table(rows, ["model", "seeds", "macro_f1", "macro_f1_se", "accuracy", "accuracy_se",
                       "best_epoch_macro_f1", "s_per_epoch"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
