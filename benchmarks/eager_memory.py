"""Peak memory of one training step in eager mode against the same step inside `tf.function`.

Each (variant, length, mode) runs in a fresh subprocess: a MiniLM-size BERT (6
layers, hidden 384, 12 heads, random weights, the attention configs of
``benchmarks/attention.py``), batch 1, one forward + backward step with the loss
on the sequence output, run as

* ``tf.function``: the step (a `tf.GradientTape` inside `tf.function`), traced on its first call;
* ``eager``: the same step under a plain eager `tf.GradientTape` (a custom training loop);
* ``run_eagerly``: ``compile(run_eagerly=True)`` and ``fit`` on one batch (SGD, MSE to zeros).

Peak memory is the subprocess's peak RSS (ru_maxrss, so tracing counts for
``tf.function``); "activation" memory is that peak minus the RSS right after
the model was built. A run stops at ``--memory-budget-gb`` (the parent kills it)
or ``--time-limit`` seconds, and a (variant, mode) stops at its first such length.

    nice python -m benchmarks.eager_memory             # sliding_window at 4,096 tokens, chunked at 8,192
    python -m benchmarks.eager_memory --quick          # tiny model, chunked, 128 tokens: CI smoke run
    python -m benchmarks.eager_memory --variants chunked --lengths 1024 2048 4096 --modes tf.function eager

Writes a table and ``benchmarks/results/eager_memory.json`` (``eager_memory_quick.json``
with ``--quick``; ``--output`` elsewhere), with the eager / tf.function peak ratio of every
length measured both ways.
"""
import argparse
import json
import os
import resource
import sys
import time

from benchmarks.attention import QUICK_MODEL, QUICK_VARIANTS, VARIANTS
from benchmarks.common import GIB, MINILM, machine_stamp, print_table, rss_bytes, run_watched, write_json

MODES = ["tf.function", "eager", "run_eagerly"]
LENGTHS = {"sliding_window": [4096], "chunked": [8192]}  # the lengths of the closing note of issue 17
QUICK_LENGTHS = [128]


def worker(args):
    """One measurement in this (fresh) process; prints one JSON line."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    model_config = dict(QUICK_MODEL if args.quick else MINILM, max_position=args.length)
    attention_config = (QUICK_VARIANTS if args.quick else VARIANTS)[args.variant]
    model = build_transformer_model(None, None, attention=args.variant, attention_config=attention_config,
                                    **model_config)
    token_ids = np.random.default_rng(0).integers(1, model_config["vocab_size"], (1, args.length)).astype("int32")
    inputs = [tf.constant(token_ids), tf.zeros_like(token_ids)]

    def tape_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(inputs, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        return loss + 0.0 * tf.add_n([tf.reduce_sum(g) for g in grads])  # every gradient is computed

    if args.mode == "run_eagerly":
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", run_eagerly=True)
        target = np.zeros((1, args.length, model_config["hidden_size"]), "float32")
        def step():
            return model.fit(inputs, target, batch_size=1, epochs=1, verbose=0)
    else:
        function = tf.function(tape_step) if args.mode == "tf.function" else tape_step
        def step():
            return function().numpy()
    built_rss = rss_bytes()
    start = time.perf_counter()
    step()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"variant": args.variant, "length": args.length, "mode": args.mode, "status": "ok",
                      "step_s": round(seconds, 2), "peak_rss_gb": round(peak / GIB, 3),
                      "activation_gb": round((peak - built_rss) / GIB, 3)}))


def measure(args, variant, length, mode):
    """Run the worker in a subprocess, killing it past the memory budget or the time limit."""
    command = [sys.executable, "-m", "benchmarks.eager_memory", "--worker", "--variant", variant, "--length", str(length),
               "--mode", mode] + ["--quick"] * args.quick
    return run_watched(command, {"variant": variant, "length": length, "mode": mode}, args.memory_budget_gb,
                       args.time_limit)


def ratios(results):
    """Peak RSS of each eager mode over the tf.function peak, where both ran (a lower bound when one was killed)."""
    by = {(r["variant"], r["length"], r["mode"]): r for r in results}
    out = {}
    for (variant, length, mode), row in sorted(by.items()):
        graph = by.get((variant, length, "tf.function"))
        if mode == "tf.function" or not graph or graph["status"] != "ok" or "peak_rss_gb" not in row:
            continue
        if row["status"] == "ok" or "memory" in row["status"]:
            suffix = "" if row["status"] == "ok" else "_at_least"
            out[f"{variant}_{length}_{mode}_over_tf_function{suffix}"] = round(row["peak_rss_gb"] / graph["peak_rss_gb"], 2)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        help="default: sliding_window and chunked (chunked only with --quick)")
    parser.add_argument("--lengths", nargs="+", type=int, help="default: sliding_window 4,096, chunked 8,192")
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    parser.add_argument("--memory-budget-gb", type=float, default=12.0)
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="tiny model, chunked, 128 tokens: a smoke run")
    default_output = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "eager_memory.json")
    parser.add_argument("--output", "--out", help=f"JSON file (default {default_output}, _quick with --quick)")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of --output that this run does not measure (runs side by side)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    args.output = args.output or default_output.replace(".json", "_quick.json" if args.quick else ".json")
    args.variants = args.variants or (["chunked"] if args.quick else list(LENGTHS))
    results, stopped = [], set()
    for variant in args.variants:
        for length in args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS.get(variant, LENGTHS["chunked"])):
            for mode in args.modes:
                if (variant, mode) in stopped:
                    continue
                row = measure(args, variant, length, mode)
                print(json.dumps(row), flush=True)
                results.append(row)
                if row["status"] != "ok":
                    stopped.add((variant, mode))
    commands = [machine_stamp()["command"]]
    if args.merge and os.path.exists(args.output):  # read now, when the other run may have written
        with open(args.output) as f:
            earlier = json.load(f)
        done = {(r["variant"], r["length"], r["mode"]) for r in results}
        results = [r for r in earlier["results"] if (r["variant"], r["length"], r["mode"]) not in done] + results
        commands = earlier.get("commands", [earlier["machine"]["command"]]) + commands
        args.variants = list(dict.fromkeys(list(earlier["attention_configs"]) + args.variants))
    print_table(results, ["variant", "length", "mode", "status", "step_s", "peak_rss_gb", "activation_gb"])
    measured = ratios(results)
    for name, value in measured.items():
        print(f"{name}: {value}")
    payload = {"machine": machine_stamp(), "memory_budget_gb": args.memory_budget_gb,
                   "model": "quick" if args.quick else "MiniLM size (6 x 384, 12 heads, intermediate 1536), random weights",
                   "attention_configs": {v: (QUICK_VARIANTS if args.quick else VARIANTS)[v] for v in args.variants},
                   "commands": commands, "results": results, "ratios": measured}
    write_json(args.output, payload)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
