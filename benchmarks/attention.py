"""Training-step time and peak memory of each attention variant as the sequence grows.

Each (variant, length) runs in a fresh subprocess: a MiniLM-size BERT (6 layers,
hidden 384, 12 heads) built with ``build_transformer_model(..., attention=NAME)``,
batch 1, one forward+backward step (loss on the sequence output, gradients of all
weights) traced first, then timed. Peak memory is the subprocess's peak RSS (and
the GPU's peak allocation when a GPU is present); "activation" memory is that
peak minus the RSS right after the model was built. A variant stops at the
first length that exceeds ``--memory-budget-gb`` (the parent kills it) or
``--time-limit`` seconds.

    python -m benchmarks.attention                 # 512 ... 16384 tokens
    python -m benchmarks.attention --quick         # tiny model, CI smoke run
    python -m benchmarks.attention --variants full chunked --lengths 1024 2048
    python -m benchmarks.attention --resume --lengths 8192 --time-limit 600   # add rows

Writes a table, ``benchmarks/results/attention.json`` and ``attention.png``
(log-log memory and time vs length; skipped with a message without matplotlib).
"""
import argparse
import json
import os
import resource
import sys
import time

from benchmarks.common import GIB, MINILM, machine_stamp, print_table, rss_bytes, run_watched, write_json

VARIANTS = {  # attention_config of each variant at MiniLM size
    "full": {},
    "chunked": {"block_size": 512},
    "sliding_window": {"window": 512, "global_tokens": [0]},
    "bigbird": {"block_size": 64, "num_window_blocks": 3, "num_global_blocks": 1, "num_random_blocks": 3, "seed": 0},
    "performer": {"num_features": 256, "seed": 0},
    "lsh": {"bucket_size": 64, "num_buckets": 64, "num_hashes": 2, "seed": 0},
}
QUICK_MODEL = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   hidden_act="gelu", segment_vocab_size=2)
QUICK_VARIANTS = {
    "full": {},
    "chunked": {"block_size": 32},
    "sliding_window": {"window": 16},
    "bigbird": {"block_size": 16, "num_random_blocks": 1, "seed": 0},
    "performer": {"num_features": 16, "seed": 0},
    "lsh": {"bucket_size": 16, "num_buckets": 4, "seed": 0},
}
LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]


def worker(args):
    """One measurement in this (fresh) process; prints one JSON line."""
    import numpy as np
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    model_config = dict(QUICK_MODEL if args.quick else MINILM, max_position=args.length)
    attention_config = (QUICK_VARIANTS if args.quick else VARIANTS)[args.variant]
    model = build_transformer_model(None, None, attention=args.variant, attention_config=attention_config,
                                    **model_config)
    token_ids = np.random.default_rng(0).integers(1, model_config["vocab_size"], (1, args.length)).astype("int32")
    inputs = [tf.constant(token_ids), tf.zeros_like(token_ids)]

    @tf.function(jit_compile=args.jit)
    def train_step(token_ids, segment_ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model([token_ids, segment_ids], training=True)))
        return loss, tape.gradient(loss, model.trainable_variables)

    built_rss = rss_bytes()
    gpus = tf.config.list_logical_devices("GPU")
    start = time.perf_counter()
    train_step(*inputs)[0].numpy()
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        train_step(*inputs)[0].numpy()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = dict(
        variant=args.variant, length=args.length, status="ok", step_s=round(min(times), 3),
        first_step_s=round(first, 2), peak_rss_gb=round(peak / GIB, 3),
        activation_gb=round((peak - built_rss) / GIB, 3),
    )
    if gpus:
        result["gpu_peak_gb"] = round(tf.config.experimental.get_memory_info("GPU:0")["peak"] / GIB, 3)
    print(json.dumps(result))


def measure(args, variant, length):
    """Run the worker in a subprocess, killing it past the memory budget or the time limit."""
    command = [sys.executable, "-m", "benchmarks.attention", "--worker", "--variant", variant, "--length", str(length),
               "--repeats", str(args.repeats)] + ["--quick"] * args.quick + ["--jit"] * args.jit
    return run_watched(command, dict(variant=variant, length=length), args.memory_budget_gb, args.time_limit)


def check_targets(results):
    """The issue's targets, evaluated on the measured rows (None where a needed row is missing)."""
    by = {(r["variant"], r["length"]): r for r in results}
    targets = {}
    chunked = by.get(("chunked", 8192))
    full = by.get(("full", 8192)) or next(  # full killed over the budget at a shorter length needs more at 8192
        (r for r in results if r["variant"] == "full" and r["length"] < 8192 and "memory" in r["status"]), None)
    if chunked and chunked["status"] == "ok" and full:
        name = "chunked_8192_peak_rss_ratio_full_over_chunked" + ("" if full["status"] == "ok" else "_at_least")
        targets[name] = round(full["peak_rss_gb"] / chunked["peak_rss_gb"], 2)
    for variant in ("sliding_window", "bigbird", "performer", "lsh", "chunked"):
        small, large = by.get((variant, 4096)), by.get((variant, 8192))
        if small and large and small["status"] == large["status"] == "ok":
            targets[f"{variant}_activation_ratio_8192_over_4096"] = round(
                large["activation_gb"] / max(small["activation_gb"], 1e-3), 2)
            targets[f"{variant}_peak_rss_ratio_8192_over_4096"] = round(large["peak_rss_gb"] / small["peak_rss_gb"], 2)
    return targets


def plot(results, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: wrote the JSON only (pip install matplotlib for the plot).")
        return
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for variant in [v for v in VARIANTS if any(r["variant"] == v for r in results)]:
        rows = [r for r in results if r["variant"] == variant and r["status"] == "ok"]
        if rows:
            lengths = [r["length"] for r in rows]
            axes[0].plot(lengths, [r["peak_rss_gb"] for r in rows], "o-", label=variant)
            axes[1].plot(lengths, [r["step_s"] for r in rows], "o-", label=variant)
    for axis, label in zip(axes, ("peak memory (GB, process RSS)", "forward+backward step (s)")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("sequence length (tokens)")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    figure.suptitle("MiniLM-size BERT (6 x 384, 12 heads), batch 1")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--lengths", nargs="+", type=int)
    parser.add_argument("--memory-budget-gb", type=float, default=16.0)
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per (variant, length) run")
    parser.add_argument("--total-time", type=float, default=3600.0, help="stop starting new runs after this")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps after the traced one (min is kept)")
    parser.add_argument("--jit", action="store_true", help="jit_compile=True (XLA) training step")
    parser.add_argument("--quick", action="store_true", help="tiny model, lengths 64 and 128: a smoke run")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "attention.json"))
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in --output and measure only the missing ones")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    lengths = args.lengths or ([64, 128] if args.quick else LENGTHS)
    if args.quick and args.output.endswith("attention.json"):
        args.output = args.output.replace("attention.json", "attention_quick.json")
    kept = {}  # --resume: earlier rows; the ok ones are not measured again
    if args.resume and os.path.exists(args.output):
        with open(args.output) as f:
            kept = {(r["variant"], r["length"]): r for r in json.load(f)["results"]}
    results, stopped, start = [], set(), time.time()
    for length in lengths:  # all variants at one length before the next, so a time cut is fair
        for variant in args.variants:
            if variant in stopped or kept.get((variant, length), {}).get("status") == "ok":
                continue
            kept.pop((variant, length), None)
            if time.time() - start > args.total_time:
                results.append(dict(variant=variant, length=length, status="skipped (--total-time)"))
                continue
            row = measure(args, variant, length)
            print(json.dumps(row), flush=True)
            results.append(row)
            if row["status"] != "ok":
                stopped.add(variant)
    results = list(kept.values()) + results
    columns = ["variant", "length", "status", "step_s", "first_step_s", "peak_rss_gb", "activation_gb"]
    if any("gpu_peak_gb" in r for r in results):
        columns.append("gpu_peak_gb")
    print_table(sorted(results, key=lambda r: (list(VARIANTS).index(r["variant"]), r["length"])), columns)
    targets = check_targets(results)
    for name, value in targets.items():
        print(f"{name}: {value}")
    payload = dict(machine=machine_stamp(), memory_budget_gb=args.memory_budget_gb, jit=args.jit,
                   model="quick" if args.quick else "MiniLM (6 x 384, 12 heads, intermediate 1536)",
                   attention_configs=QUICK_VARIANTS if args.quick else VARIANTS, results=results, targets=targets)
    write_json(args.output, payload)
    print(f"wrote {args.output}")
    plot(results, args.output.replace(".json", ".png"))


if __name__ == "__main__":
    main()
