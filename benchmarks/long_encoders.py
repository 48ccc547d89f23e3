"""Long-document encoders at their published sizes: bert4long against Hugging Face PyTorch, side by side.

``--model modernbert`` (default): ModernBERT-base's shape (answerdotai/ModernBERT-base: 22
layers, hidden 768, 12 heads, GeGLU intermediate 1,152, vocabulary 50,368, local window
128, global attention every third layer). ``--model longformer``: Longformer-base's shape
(allenai/longformer-base-4096: 12 layers, hidden 768, 12 heads, intermediate 3,072,
vocabulary 50,265, window 512 in every layer), the first token global as in Hugging
Face's sequence classifier. Random weights, batch 1, at 1,024 and 4,096 tokens. One step is a
forward and backward pass (loss: mean square of the sequence output; gradients of all
weights, no optimizer update), or a forward pass only with ``--mode forward``. Every
(implementation, length) runs in a fresh subprocess, all in one run on one machine, so
each peak RSS is its own and the ratios compare like with like; the parent kills a
subprocess whose RSS exceeds ``--memory-limit-gb``.

Implementations:
  bert4long       build_transformer_model(model=<model>, ...), float32, tf.function. ModernBERT:
                  global layers with the 'full' kernel, local layers with 'sliding_window';
                  Longformer: its sliding-window kernel with global tokens.
  bert4long-lean  ModernBERT: the same with attention='chunked' (global layers' memory linear
                  in the length) and recompute=True; Longformer: recompute=True.
  hf-torch        transformers' ModernBertModel (attn_implementation='sdpa', its default
                  without flash-attention, the padded path) or LongformerModel on PyTorch (CPU).

    python -m benchmarks.long_encoders                       # ModernBERT-base, 1,024 and 4,096 tokens
    python -m benchmarks.long_encoders --model longformer --lengths 4096
    nice python -m benchmarks.long_encoders --memory-limit-gb 10 --mode forward
    python -m benchmarks.long_encoders --quick               # tiny config, CI smoke run

Writes a table and ``benchmarks/results/long_encoders_<model>_<mode>.json`` (``--out``).
"""
import argparse
import json
import os
import resource
import sys
import time

from benchmarks.common import GIB, machine_stamp, print_table, rss_bytes, run_watched, write_json

HERE = os.path.dirname(os.path.abspath(__file__))

MODERNBERT_BASE = {  # config.json of answerdotai/ModernBERT-base (sizes and flags that change the work)
    "model_type": "modernbert", "vocab_size": 50368, "hidden_size": 768, "num_hidden_layers": 22,
    "num_attention_heads": 12, "intermediate_size": 1152, "hidden_activation": "gelu",
    "max_position_embeddings": 8192, "local_attention": 128, "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0, "local_rope_theta": 10000.0, "norm_eps": 1e-5, "pad_token_id": 50283,
}
LONGFORMER_BASE = {  # config.json of allenai/longformer-base-4096
    "model_type": "longformer", "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12,
    "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu", "max_position_embeddings": 4098,
    "type_vocab_size": 1, "attention_window": [512] * 12, "layer_norm_eps": 1e-5, "pad_token_id": 1,
}
CONFIGS = {
    "modernbert": {
        "name": "ModernBERT-base", "config": MODERNBERT_BASE,
        "quick": {**MODERNBERT_BASE, "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 3,
                  "num_attention_heads": 2, "intermediate_size": 40, "max_position_embeddings": 256,
                  "local_attention": 16, "global_attn_every_n_layers": 2, "pad_token_id": 0},
        "lean": {"attention": "chunked", "attention_config": {"block_size": 512}, "recompute": True},
    },
    "longformer": {
        "name": "Longformer-base", "config": LONGFORMER_BASE,
        "quick": {**LONGFORMER_BASE, "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "intermediate_size": 40, "max_position_embeddings": 258,
                  "attention_window": [32, 32]},
        "lean": {"recompute": True},
    },
}
IMPLEMENTATIONS = ("bert4long", "bert4long-lean", "hf-torch")
LENGTHS = [1024, 4096]


def model_config(args):
    return CONFIGS[args.model]["quick" if args.quick else "config"]


def implementation_options(model, impl):
    """build_transformer_model options of a bert4long implementation (None for hf-torch)."""
    return {"bert4long": {}, "bert4long-lean": CONFIGS[model]["lean"]}.get(impl)


def token_ids(config, length):
    """Random ids without the padding id or the first three (special) ids."""
    import numpy as np

    ids = np.random.default_rng(0).integers(3, config["vocab_size"], size=(1, length)).astype("int32")
    return np.where(ids == config["pad_token_id"], ids + 1, ids).astype("int32")


def global_mask(length):
    """Longformer's global attention on the first token, as its sequence classifier sets it."""
    import numpy as np

    mask = np.zeros((1, length), "int32")
    mask[:, 0] = 1
    return mask


def bert4long_step(config, impl, length, mode):
    """A function running one step of bert4long's model (traced on its first call)."""
    import numpy as np
    import tensorflow as tf

    from bert4long.families import family_of_model_type
    from bert4long.models import build_transformer_model

    family = config["model_type"]
    options = family_of_model_type(family).builder_class().from_huggingface_config(config)
    ids = token_ids(config, length)
    if family == "longformer":  # the 0/1/2 mask: every token local, the first one global
        model = build_transformer_model(model=family, attention_mask_input=True, **options,
                                        **implementation_options(family, impl))
        inputs = [tf.constant(ids), tf.zeros_like(ids), tf.constant(np.ones_like(ids) + global_mask(length))]
    else:
        model = build_transformer_model(model=family, **options, **implementation_options(family, impl))
        inputs = [tf.constant(ids)]

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(inputs, training=True)))
        return loss, tape.gradient(loss, model.trainable_variables)

    @tf.function
    def forward():
        return tf.reduce_mean(model(inputs, training=False))

    if mode == "train":
        return lambda: train_step()[0].numpy()  # the gradients are outputs too, so they are computed
    return lambda: forward().numpy()


def torch_step(config, length, mode):
    import torch
    import transformers

    torch.manual_seed(0)
    hf = {k: v for k, v in config.items() if k != "model_type"}
    inputs = {"input_ids": torch.tensor(token_ids(config, length), dtype=torch.long)}
    if config["model_type"] == "longformer":
        model = transformers.LongformerModel(transformers.LongformerConfig(**hf))
        inputs["global_attention_mask"] = torch.tensor(global_mask(length), dtype=torch.long)
    else:
        model = transformers.ModernBertModel(transformers.ModernBertConfig(**hf, attn_implementation="sdpa"))

    def train_step():
        model.zero_grad(set_to_none=True)
        loss = model(**inputs).last_hidden_state.square().mean()
        loss.backward()
        return loss.item()

    def forward():
        with torch.no_grad():
            return model(**inputs).last_hidden_state.mean().item()

    model.train(mode == "train")
    return train_step if mode == "train" else forward


def worker(args):
    """One (implementation, length) in this fresh process; prints one JSON line."""
    config = model_config(args)
    start = time.perf_counter()
    step = torch_step(config, args.length, args.mode) if args.impl == "hf-torch" else \
        bert4long_step(config, args.impl, args.length, args.mode)
    built_s, built_rss = time.perf_counter() - start, rss_bytes()
    start = time.perf_counter()
    step()  # traced / warmed up
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"impl": args.impl, "length": args.length, "status": "ok", "step_s": round(min(times), 3),
                      "first_step_s": round(first, 2), "build_s": round(built_s, 2),
                      "peak_rss_gb": round(peak / GIB, 3), "model_rss_gb": round(built_rss / GIB, 3)}))


def measure(args, impl, length):
    """Run the worker in a subprocess, killing it past the memory limit or the time limit."""
    command = [sys.executable, "-m", "benchmarks.long_encoders", "--worker", "--impl", impl, "--length", str(length),
               "--model", args.model, "--mode", args.mode, "--repeats", str(args.repeats)] + ["--quick"] * args.quick
    return run_watched(command, {"impl": impl, "length": length}, args.memory_limit_gb, args.time_limit,
                       env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def ratios(results):
    """Per length and bert4long implementation: its seconds and peak RSS divided by hf-torch's."""
    rows = {(r["impl"], r["length"]): r for r in results if r["status"] == "ok"}
    out = []
    for (impl, length), row in sorted(rows.items(), key=lambda item: (item[0][1], item[0][0])):
        peer = rows.get(("hf-torch", length))
        if impl != "hf-torch" and peer:
            out.append({"impl": impl, "length": length, "time_vs_hf": round(row["step_s"] / peer["step_s"], 2),
                        "peak_rss_vs_hf": round(row["peak_rss_gb"] / peer["peak_rss_gb"], 2)})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="modernbert")
    parser.add_argument("--impls", nargs="+", choices=IMPLEMENTATIONS,
                        help="default: all (--quick: bert4long and hf-torch)")
    parser.add_argument("--lengths", nargs="+", type=int)
    parser.add_argument("--mode", choices=("train", "forward"), default="train",
                        help="forward + backward step (default) or forward only")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps after the warm-up one (min is kept)")
    parser.add_argument("--memory-limit-gb", type=float, default=10.0)
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds per (implementation, length)")
    parser.add_argument("--quick", action="store_true", help="tiny config at 128 tokens: a smoke run")
    parser.add_argument("--out", help="default: benchmarks/results/long_encoders_<model>_<mode>.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    args.out = args.out or os.path.join(HERE, "results", f"long_encoders_{args.model}_{args.mode}.json")
    lengths = args.lengths or ([128] if args.quick else LENGTHS)
    impls = args.impls or (["bert4long", "hf-torch"] if args.quick else list(IMPLEMENTATIONS))
    results, stamp = [], machine_stamp()
    for length in lengths:  # every implementation at one length before the next
        for impl in impls:
            row = measure(args, impl, length)
            print(json.dumps(row), flush=True)
            results.append(row)
            write_json(args.out, {  # after every row, so that a run cut short keeps what it measured
                "machine": stamp, "model": "quick" if args.quick else CONFIGS[args.model]["name"],
                "config": model_config(args), "mode": args.mode, "batch": 1, "memory_limit_gb": args.memory_limit_gb,
                "implementations": {impl: implementation_options(args.model, impl) for impl in impls},
                "results": results, "ratios": ratios(results)})
    print_table(results, ["impl", "length", "status", "step_s", "first_step_s", "peak_rss_gb", "model_rss_gb"])
    if ratios(results):
        print_table(ratios(results), ["impl", "length", "time_vs_hf", "peak_rss_vs_hf"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
