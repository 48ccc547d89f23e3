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

Where a long model's gain comes from: every model reading more than --truncate-to tokens (512) is also scored, at its
last epoch, on the validation speeches cut to their first 510 pieces, as the 512 model reads them (test-time
truncation: the same classifier reading less); and a model spec's ``--train-chunks`` (the study's own flag, not
passed to `bert4long finetune`) trains on every consecutive chunk of at most SEQ_LEN - 2 pieces of each training
speech, cut at spaces by the checkpoint's tokenizer, each with the speech's label (``--train-chunks=1536``: only
the chunks of the 1,534 pieces a 1,536-token model reads); its validation speeches are read as any SEQ_LEN model's.

Models (``NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]]``; defaults below):
  512           MiniLM-MLM (../shared/models/minilm-mlm), the first 510 tokens (head truncation)
  1536-base     the same checkpoint, hierarchical positions (alpha 0.4), the first 1,534 tokens
  1536-continued-0.4  studies.position_study's hierarchical-0.4 model after its 1,000 steps of continued MLM at 1,536
                (a checkpoint written from that run's final state): pass it with --model
  512-continued-0.4  that checkpoint at 512 tokens: the control that separates reading 1,536 tokens from the
                extra MLM steps (the report compares a long model with the 512 model of its checkpoint)
  512-chunks    MiniLM-MLM at 512 trained on every 510-piece chunk (``512,--train-chunks``): pass it with --model;
                beside 512 it separates training on more of each speech from reading more of it

Runs already in the JSON are skipped, and a run stopped midway resumes from its last checkpoint (every
--save-every steps) in its folder under --work (outside the tree), so a study can be split over several sessions.
A run recorded without its truncated reading gets it from its folder under --work when that is there
(--score-truncated: only that, no training).

    python -m studies.finetune_study --work /work/finetune_study
    python -m studies.finetune_study --model "1536-continued-0.4=/path/bert_model.ckpt,1536" --seeds 0 1 2
    python -m studies.finetune_study --model "512-chunks=/path/bert_model.ckpt,512,--train-chunks" --work /work/fs
    python -m studies.finetune_study --score-truncated --work /work/fs --out /work/fs/finetune_study.json
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
from bert4long.output_folders import folder_bytes

HERE = os.path.dirname(os.path.abspath(__file__))

DEFAULT_MODELS = [f"512={MINILM_MLM},512", f"1536-base={MINILM_MLM},1536,--hierarchical-position"]
TRAIN_CHUNKS = "--train-chunks"   # the study's own flag in a model spec, not passed to `bert4long finetune`


def parse_model(spec):
    """``NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]]`` -> (name, checkpoint, seq_len, flags)."""
    name, _, rest = spec.partition("=")
    parts = rest.split(",")
    if not name or not parts[0]:
        raise ValueError(f"--model {spec!r}: write NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]]")
    return name, parts[0], int(parts[1]) if len(parts) > 1 else 512, parts[2:]


def study_options(flags):
    """``(finetune_flags, chunked, reach)``: a model spec's flags without the study's own ``--train-chunks[=TOKENS]``;
    whether it was given (train on every chunk of each training speech, `text_chunks`, not on its head) and its TOKENS
    (chunk only the pieces a TOKENS-token model reads; None: the whole speech)."""
    finetune_flags = [flag for flag in flags if flag.split("=")[0] != TRAIN_CHUNKS]
    given = [flag for flag in flags if flag.split("=")[0] == TRAIN_CHUNKS]
    reach = given[-1].partition("=")[2] if given else ""
    return finetune_flags, bool(given), int(reach) if reach else None


def text_chunks(text, tokenizer, size, reach=None):
    """``text`` cut at spaces into consecutive chunks of at most ``size`` of ``tokenizer``'s pieces each, up to its
    first ``reach`` pieces (None: all). A WordPiece word's pieces do not depend on its neighbours, so the chunks'
    pieces, one after the other, are the text's."""
    chunks, words, count, total = [], [], 0, 0
    for word in text.split():
        pieces = len(tokenizer.content_ids(word))
        if pieces > size:
            raise ValueError(f"the word {word[:40]!r} has {pieces} pieces, more than a chunk of {size} holds")
        if reach is not None and total + pieces > reach:
            break
        if count + pieces > size:
            chunks.append(" ".join(words))
            words, count = [], 0
        words.append(word)
        count, total = count + pieces, total + pieces
    return chunks + [" ".join(words)] if words else chunks


def chunked_training_file(train, checkpoint, seq_len, reach, folder):
    """``(path, count)``: a .jsonl in ``folder`` holding every `text_chunks` of ``seq_len - 2`` pieces of
    ``checkpoint``'s tokenizer of each speech in ``train`` (within the pieces a ``reach``-token model reads; None:
    the whole speech), each with the speech's label; and the number of chunks."""
    from bert4long.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(os.path.dirname(checkpoint))
    with open(train, encoding="utf-8") as f:
        speeches = [json.loads(line) for line in f]
    rows = [{"text": chunk, "label": speech["label"]} for speech in speeches
            for chunk in text_chunks(speech["text"], tokenizer, seq_len - 2, reach and reach - 2)]
    longest = max(len(tokenizer.content_ids(row["text"])) for row in rows)
    if longest > seq_len - 2:   # (a tokenizer whose pieces depend on the words around them)
        raise ValueError(f"a chunk of {longest} pieces: {checkpoint!r}'s tokenizer does not cut at spaces")
    path = os.path.join(folder, f"train-chunks-{seq_len}-of-{reach or 'all'}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path, len(rows)


def run_once(spec, seed, data, gold, folder, args):
    """One `bert4long finetune` process of the model ``spec`` (`parse_model`); its per-epoch validation scores and
    time from metrics.json, and its last epoch's labels (`score_last_epoch`)."""
    name, checkpoint, seq_len, flags = spec
    finetune_flags, chunked, reach = study_options(flags)
    train, chunks = chunked_training_file(data[0], checkpoint, seq_len, reach, os.path.dirname(folder)) \
        if chunked else (data[0], None)
    command = timed_finetune(["--checkpoint", checkpoint, *finetune_flags, "--train", train, "--valid", data[1],
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
    run = {"model": name, "seed": seed, "checkpoint": checkpoint, "seq_len": seq_len, "flags": flags,
           **({"train_chunks": chunks, "train_chunks_reach": reach} if chunked else {}),
           "last_macro_f1": last["macro_f1"], "last_accuracy": last["accuracy"],
           "recall": {k: v["recall"] for k, v in last["per_class"].items()},
           "best_macro_f1": max(e["valid"]["macro_f1"] for e in epochs),
           "macro_f1_per_epoch": [round(e["valid"]["macro_f1"], 4) for e in epochs],
           "epoch_seconds": [round(e["train"]["seconds"], 1) for e in epochs],
           "peak_rss_gb": peak_rss_gb(result.stderr),
           "estimated_peak_gib": float(estimate.group(1)) if estimate else None,
           "folder_mb": round(folder_bytes(folder) / 1e6, 1)}
    return score_last_epoch(run, folder, data[1], gold, args.truncate_to)


def score_last_epoch(run, folder, valid, gold, truncate_to):
    """``run`` (a row of the run in ``folder``) with the labels its last epoch gives the speeches of ``valid``
    (``predicted``) and, for a model reading more than ``truncate_to`` tokens, those it gives them cut to their first
    ``truncate_to - 2`` pieces, as a ``truncate_to``-token model reads them (test-time truncation), with their
    scores (``truncated_*``)."""
    longer = run["seq_len"] > truncate_to
    run["predicted"], truncated = last_epoch_labels(folder, valid, gold, run["last_macro_f1"],
                                                    truncate_to if longer else None)
    run.update(truncated)
    return run


def predicted_labels(run, valid):
    """The labels `bert4long predict` gives the speeches of ``valid`` with the finetune folder ``run``."""
    from bert4long.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "predicted.jsonl")
        with contextlib.redirect_stdout(io.StringIO()) as printed:   # (its score table: the caller checks)
            if cli(["predict", "--run", run, "--input", valid, "--output", output, "--quiet"]):
                raise RuntimeError(f"bert4long predict failed on {run!r}:\n{printed.getvalue()}")
        with open(output, encoding="utf-8") as f:
            return [json.loads(line)["predicted_label"] for line in f]


def last_epoch_labels(folder, valid, gold, macro_f1, truncate_to=None):
    """``(labels, truncated)``: the labels the `bert4long finetune` run in ``folder`` gives the speeches of ``valid``
    (labelled ``gold``) after its last epoch, by `bert4long predict`; with ``truncate_to``, also those it gives them
    read ``truncate_to`` tokens at most (a copy of the run whose finetune.json says that length: `predict` reads a
    run's documents at the length it records), with their macro-F1 and accuracy (else ``{}``). The run's classifier
    holds its best epoch's weights; the last epoch's are its newest checkpoint, read into that classifier here (and
    checked: they must give the recorded last-epoch ``macro_f1``)."""
    import tensorflow as tf

    from bert4long.cli.run_folder import load_final_model
    from bert4long.training import RunDirectory
    from bert4long.training.metrics import classification_scores
    from bert4long.training.model_file import save_final_model

    settings = load_json(os.path.join(folder, "finetune.json"))
    model = load_final_model(os.path.join(folder, "classifier.keras"))
    states = RunDirectory(folder, {})
    if states.latest_step() is None:
        raise RuntimeError(f"{folder!r} holds no checkpoint of its last epoch")
    # finetune.json records the values the run resolved (precision, warmup); the state, the options as given
    RunDirectory(folder, states.state_record(states.latest_step())["config"]).restore(tf.train.Checkpoint(model=model))
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("finetune.json", "vocab.txt"):
            shutil.copy(os.path.join(folder, name), tmp)
        save_final_model(model, os.path.join(tmp, "classifier.keras"))
        predicted = predicted_labels(tmp, valid)
        again = classification_scores(gold, predicted, settings["labels"])["macro_f1"]
        if abs(again - macro_f1) > 1e-6:
            raise RuntimeError(f"{folder!r}: its last checkpoint gives macro-F1 {again:.4f} on {valid!r}, but its "
                               f"metrics.json recorded {macro_f1:.4f} after the last epoch")
        if not truncate_to:
            return predicted, {}
        write_json(os.path.join(tmp, "finetune.json"), {**settings, "seq_len": truncate_to})
        truncated = predicted_labels(tmp, valid)
    scores = classification_scores(gold, truncated, settings["labels"])
    return predicted, {"truncated_seq_len": truncate_to, "truncated_labels": truncated,
                       "truncated_macro_f1": scores["macro_f1"], "truncated_accuracy": scores["accuracy"]}


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


def standard_error(values):
    """The standard error of the mean of ``values`` (NaN for one value)."""
    values = np.asarray(values, dtype=float)
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")


def mean_se(values):
    """Mean and `standard_error`, rounded to 6 decimals (the report shows 3, so it rounds once)."""
    return round(float(np.mean(values)), 6), round(standard_error(values), 6)


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


def score_recorded_runs(runs, work, valid, gold, truncate_to, write):
    """Give each of ``runs`` recorded without its last epoch's labels, or without its reading cut to ``truncate_to``
    tokens, those (`score_last_epoch`) from its folder under ``work`` when that is there; ``write`` after each."""
    for run in runs:
        folder = os.path.join(work, f"{run['model']}-seed{run['seed']}")
        if "predicted" in run and (run["seq_len"] <= truncate_to or run.get("truncated_seq_len") == truncate_to):
            continue
        if not os.path.isfile(os.path.join(folder, "finetune.json")):
            print(f"{run['model']} seed {run['seed']}: no run folder {folder!r} to score", flush=True)
            continue
        score_last_epoch(run, folder, valid, gold, truncate_to)
        print(json.dumps({k: run.get(k) for k in ("model", "seed", "last_macro_f1", "truncated_macro_f1")}), flush=True)
        write()


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="NAME=CHECKPOINT[,SEQ_LEN[,FLAG ...]] (repeatable)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--work", help="run folders (default: a new temporary folder)")
    parser.add_argument("--save-every", type=int, default=33, help="steps between resumable checkpoints")
    parser.add_argument("--truncate-to", type=int, default=512,
                        help="a model reading more tokens is also scored reading this many (default 512)")
    parser.add_argument("--score-truncated", action="store_true",
                        help="train nothing: only score the runs in --out whose folders are under --work")
    parser.add_argument("--quick", action="store_true",
                        help="tiny random model at 64 tokens (scored at 32 too) and at 32 on chunks, 24 speeches, "
                             "2 seeds of 1 epoch")
    parser.add_argument("--out", help="JSON path (default studies/results/finetune_study[_quick].json)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_arguments(argv)
    work = args.work or tempfile.mkdtemp(prefix="finetune_study-")
    os.makedirs(work, exist_ok=True)
    models = args.model or DEFAULT_MODELS
    if args.quick:
        from bert4long.testing import write_tiny_checkpoint

        _, tiny, _ = write_tiny_checkpoint(os.path.join(work, "tiny"), max_position_embeddings=64)
        models, args.seeds, args.epochs = [f"tiny={tiny},64", f"tiny-chunks={tiny},32,{TRAIN_CHUNKS}"], [0, 1], 1
        args.truncate_to = 32
    data, n_train, n_valid = split(speeches(), work, 24 if args.quick else None)
    path = args.out or os.path.join(HERE, "results", f"finetune_study{'_quick' if args.quick else ''}.json")
    settings = {"epochs": args.epochs, "learning_rate": args.learning_rate, "batch_size": args.batch_size}
    old = load_json(path) or {}
    if args.score_truncated and old.get("settings") != settings:
        raise SystemExit(f"--score-truncated: {path} holds runs with the settings {old.get('settings')}, not "
                         f"{settings}: pass its --epochs, --learning-rate and --batch-size")
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
                            *(["--truncate-to", str(args.truncate_to)] if args.truncate_to != 512 else []),
                            *(["--work", args.work] if args.work else []), "--out", path])
        write_json(path, {"stamp": machine_stamp(None if args.quick else command), "data": {"train": n_train, "valid": n_valid},
                          "settings": settings, "gold": gold, "runs": runs, "rows": summary(runs),
                          "baselines": baselines})

    score_recorded_runs(runs, work, data[1], gold, args.truncate_to, write)
    done = {(r["model"], r["seed"]) for r in runs}
    for spec in [] if args.score_truncated else map(parse_model, models):
        for seed in args.seeds:
            if (spec[0], seed) not in done:
                runs.append(run_once(spec, seed, data, gold, os.path.join(work, f"{spec[0]}-seed{seed}"), args))
                print(json.dumps({k: runs[-1].get(k) for k in ("model", "seed", "last_macro_f1", "truncated_macro_f1",
                                                               "epoch_seconds")}), flush=True)
                write()
    write()
    print_table(summary(runs), ["model", "seeds", "macro_f1", "macro_f1_se", "accuracy", "accuracy_se",
                                "best_epoch_macro_f1", "s_per_epoch"])
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
