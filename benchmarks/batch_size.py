"""Largest MLM training batch per sequence length under a memory budget, for each memory option.

A BERT-base-size model (12 layers, hidden 768, 12 heads, intermediate 3072, vocab 30522,
random weights, hierarchical positions, gathered MLM head on 15% of the positions, AdamW)
takes one training step per probe, each probe in a fresh subprocess. A batch fits when
the step succeeds and its peak memory stays within the budget: on a GPU, the device is
capped at ``--memory-budget-gb`` (an out-of-memory error means "does not fit") and the
peak is TensorFlow's ``get_memory_info('GPU:0')['peak']``; on CPU the peak is the
process's peak resident memory (``ru_maxrss``, weights and optimizer state included).
``first_step_s`` is the probe's one step, tracing included (not a throughput number).
The search doubles the batch from 1 until a probe fails, then bisects.

Options: float32; mixed (mixed_bfloat16 on CPU, mixed_float16 on GPU); recompute
(``recompute=True``: per-layer gradient checkpointing); chunked (``attention='chunked'``,
exact attention in 256-key blocks, memory linear in length).

    python -m benchmarks.batch_size                                   # lengths 512/1024/1536, all options
    python -m benchmarks.batch_size --lengths 512 1024 --options float32 recompute --memory-budget-gb 4
    python -m benchmarks.batch_size --quick                           # tiny model, 2 probes (CI smoke run)

Writes benchmarks/results/batch_size.json (batch_size_quick.json with --quick); each finished
search is saved at once and skipped when the script is run again with the same settings.
"""
import argparse
import json
import os
import sys
import time

from benchmarks.common import ROOT, load_json, machine_stamp, print_table, run_isolated, write_json

HERE = os.path.dirname(os.path.abspath(__file__))

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", max_position=512, segment_vocab_size=2)
TINY = dict(vocab_size=1000, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            hidden_act="gelu", max_position=64, segment_vocab_size=2)
OPTIONS = ("float32", "mixed", "recompute", "chunked")


def guard_memory(limit_gb):
    """Exit the probe (code 3) as soon as its resident memory passes ``limit_gb``: an over-budget
    batch is not run to completion, so probing never takes much more memory than the budget."""
    import threading

    page = os.sysconf("SC_PAGE_SIZE")

    def watch():
        while True:
            with open("/proc/self/statm") as f:
                if int(f.read().split()[1]) * page / 2**30 > limit_gb:
                    print(f"over budget: resident memory passed {limit_gb:.1f} GB", file=sys.stderr, flush=True)
                    os._exit(3)
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()


def probe(config):
    """One training step of ``config['batch']`` x ``config['length']``; prints a JSON line."""
    import resource

    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and os.path.exists("/proc/self/statm"):
        guard_memory(config["budget_gb"] * 1.05)
    if gpus:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=int(config["budget_gb"] * 1024))])
    import numpy as np

    from bert4long.models import build_transformer_model
    from bert4long.training import compile_mlm, dtype_policy, make_optimizer

    option, batch, length = config["option"], config["batch"], config["length"]
    precision = ("mixed_float16" if gpus else "mixed_bfloat16") if option == "mixed" else "float32"
    kwargs = dict(config["model"], hierarchical_position=True, with_mlm="linear", gathered_mlm=True)
    if option == "recompute":
        kwargs["recompute"] = True
    if option == "chunked":
        kwargs.update(attention="chunked", attention_config={"block_size": min(256, length)})
    with dtype_policy(precision):
        model = build_transformer_model(**kwargs)
    compile_mlm(model, make_optimizer(1e-4, 100, warmup_steps=1), jit_compile=config["xla"])
    rng = np.random.default_rng(0)
    predictions = max(1, int(0.15 * length))
    tokens = rng.integers(5, kwargs["vocab_size"], (batch, length)).astype("int32")
    positions = np.sort(rng.permutation(length)[:predictions])[None].repeat(batch, 0).astype("int32")
    labels = rng.integers(5, kwargs["vocab_size"], (batch, predictions)).astype("int32")
    start = time.perf_counter()
    loss = model.train_on_batch([tokens, np.zeros_like(tokens), positions], labels,
                                sample_weight=np.ones((batch, predictions), "float32"))
    seconds = time.perf_counter() - start
    if gpus:
        peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"peak_gb": peak, "first_step_s": seconds, "loss": float(np.ravel(loss)[0]),
                      "device": "GPU" if gpus else "CPU"}))


def fits(config, args, log):
    begin = time.perf_counter()
    result = run_isolated("benchmarks.batch_size", ["--probe", json.dumps(config)], timeout=args.probe_timeout,
                          env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ROOT})
    ok = "error" not in result and result["peak_gb"] <= args.memory_budget_gb
    log.append({"batch": config["batch"], "fits": ok, "probe_s": time.perf_counter() - begin, **result})
    print(f"  {config['option']:9s} L={config['length']:5d} batch {config['batch']:4d}: "
          f"{'fits' if ok else 'no'}  {result}", flush=True)
    return ok


def largest_batch(config, args):
    """Doubling from 1 until a probe fails, then bisection. Returns (batch, probes)."""
    log, good, bad, batch = [], 0, None, 1
    while batch <= args.max_batch:
        if not fits(dict(config, batch=batch), args, log):
            bad = batch
            break
        good, batch = batch, batch * 2
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        if fits(dict(config, batch=middle), args, log):
            good = middle
        else:
            bad = middle
    return good, log


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 1536])
    parser.add_argument("--options", nargs="+", default=list(OPTIONS), choices=OPTIONS)
    parser.add_argument("--memory-budget-gb", type=float, default=8.0)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--xla", action="store_true", help="jit_compile the step (slow to compile on CPU)")
    parser.add_argument("--probe-timeout", type=int, default=900)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        return probe(json.loads(args.probe))
    model = TINY if args.quick else BERT_BASE
    if args.quick:
        args.lengths, args.options, args.max_batch = [32], ["float32"], 1
    args.out = args.out or os.path.join(HERE, "results", "batch_size_quick.json" if args.quick else "batch_size.json")
    results = load_json(args.out, {}) if not args.quick else {}
    settings = {"model": model, "memory_budget_gb": args.memory_budget_gb, "xla": args.xla, "max_batch": args.max_batch}
    if results.get("settings") != settings:
        results = {"settings": settings, "rows": []}
    results["stamp"] = machine_stamp()
    commands = results.setdefault("commands", [])  # rows kept from earlier runs came from these commands
    if results["stamp"]["command"] not in commands:
        commands.append(results["stamp"]["command"])
    done = {(r["length"], r["option"]) for r in results["rows"]}
    for length in args.lengths:
        for option in args.options:
            if (length, option) in done:
                continue
            begin = time.perf_counter()
            config = {"model": model, "length": length, "option": option, "budget_gb": args.memory_budget_gb,
                      "xla": args.xla}
            batch, log = largest_batch(config, args)
            best = next((p for p in reversed(log) if p["fits"] and p["batch"] == batch), {})
            results["rows"].append({"length": length, "option": option, "max_batch": batch,
                                    "peak_gb": best.get("peak_gb"), "first_step_s": best.get("first_step_s"),
                                    "device": best.get("device"), "capped": batch >= args.max_batch,
                                    "search_seconds": time.perf_counter() - begin, "probes": log})
            write_json(args.out, results)
    print_table([{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items() if k != "probes"}
                 for r in results["rows"]], ["length", "option", "max_batch", "peak_gb", "first_step_s", "device"])
    print("wrote", args.out)
    return results


if __name__ == "__main__":
    main()
