"""MLM training throughput (tokens/s) and peak memory of a MiniLM-size model.

Each configuration runs in a fresh subprocess (so peak RSS, ``ru_maxrss``, is its own):
random weights, 6 layers, hidden 384, 12 heads, intermediate 1536, vocab 30522,
gathered MLM head (15% of positions), AdamW, one warm-up step (tracing / XLA compile,
timed separately), then ``--steps`` timed steps.

    python -m benchmarks.train              # lengths 512/1024/2048: float32 and mixed_bfloat16, each with and
                                            # without XLA, and recompute

    python -m benchmarks.train --full       # the whole grid: XLA x precision x recompute
    python -m benchmarks.train --quick      # CI smoke run (length 128, 2 configurations)

Prints a table and writes benchmarks/results/train.json.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import time

from benchmarks.common import machine_stamp
from bert4long.precision import bfloat16_units

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position=512, hierarchical_position=True)

CHILD = """
import json, os, resource, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
from bert4long.models import build_transformer_model
from bert4long.training import compile_mlm, dtype_policy, make_optimizer
cfg = json.loads(sys.argv[1])
with dtype_policy(cfg["precision"]):
    model = build_transformer_model(with_mlm="linear", gathered_mlm=True, recompute=cfg["recompute"], **cfg["model"])
compile_mlm(model, make_optimizer(1e-4, 1000, warmup_steps=1), jit_compile=cfg["xla"])
rng = np.random.default_rng(0)
B, L = cfg["batch"], cfg["length"]
P = max(1, int(0.15 * L))
tokens = rng.integers(5, 30000, (B, L)).astype("int32")
positions = np.sort(rng.permutation(L)[:P])[None].repeat(B, 0).astype("int32")
x, y, w = [tokens, tokens * 0, positions], rng.integers(5, 30000, (B, P)).astype("int32"), np.ones((B, P), "float32")
start = time.perf_counter(); model.train_on_batch(x, y, sample_weight=w); warmup = time.perf_counter() - start
times = []
for _ in range(cfg["steps"]):
    start = time.perf_counter(); loss = model.train_on_batch(x, y, sample_weight=w); times.append(time.perf_counter() - start)
step = float(np.median(times))
print(json.dumps({"step_s": step, "warmup_s": warmup, "tokens_per_s": B * L / step,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "loss": float(np.ravel(loss)[0])}))
"""


def configurations(args):
    lengths = [128] if args.quick else args.lengths
    base = {"xla": True, "precision": "float32", "recompute": False}
    if args.full:
        variants = [dict(xla=x, precision=p, recompute=r)
                    for x, p, r in itertools.product([True, False], ["float32", "mixed_bfloat16"], [False, True])]
    elif args.quick:
        variants = [base, dict(base, xla=False, recompute=True)]
    else:
        bfloat16 = dict(base, precision="mixed_bfloat16")
        variants = [base, dict(base, xla=False), bfloat16, dict(bfloat16, xla=False), dict(base, recompute=True)]
    for length, variant in itertools.product(lengths, variants):
        yield dict(variant, length=length)


def run(config, args):
    child = dict(config, batch=args.batch, steps=1 if args.quick else args.steps,
                 model=dict(MINILM, num_hidden_layers=1 if args.quick else 6))
    env = dict(os.environ, PYTHONPATH=ROOT)
    start = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(child)], env=env, capture_output=True,
                                text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return dict(config, error=f"timeout after {args.timeout}s")
    if result.returncode != 0:
        return dict(config, error=result.stderr.strip().splitlines()[-1][:200])
    return dict(config, **json.loads(result.stdout.strip().splitlines()[-1]), wall_s=time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI smoke run: length 128, 1 layer, 2 configurations")
    parser.add_argument("--full", action="store_true", help="the whole XLA x precision x recompute grid")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration (median reported)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "train.json"))
    args = parser.parse_args()
    stamp = machine_stamp()   # (its load average: what else ran when the run began)
    rows = []
    header = f"{'length':>6} {'xla':>5} {'precision':>15} {'recompute':>9} {'step s':>7} {'tokens/s':>9} " \
             f"{'warmup s':>8} {'peak MB':>8}"
    print(header)
    for config in configurations(args):
        row = run(config, args)
        rows.append(row)
        if "error" in row:
            print(f"{row['length']:>6} {str(row['xla']):>5} {row['precision']:>15} {str(row['recompute']):>9}  "
                  f"error: {row['error']}", flush=True)
        else:
            print(f"{row['length']:>6} {str(row['xla']):>5} {row['precision']:>15} {str(row['recompute']):>9} "
                  f"{row['step_s']:>7.2f} {row['tokens_per_s']:>9.0f} {row['warmup_s']:>8.1f} "
                  f"{row['peak_rss_mb']:>8.0f}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"stamp": stamp, "model": MINILM, "batch": args.batch, "cpu_count": os.cpu_count(),
                   "bfloat16_units": bfloat16_units(), "rows": rows}, f, indent=2)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
