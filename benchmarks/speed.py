"""Forward pass and one MLM training step of a MiniLM-size model, bert4long against its peers.

Every (implementation, length) runs in a fresh process, so each peak memory is its own,
and all rows of a table come from one run on one machine: quote the ratios.

Implementations:
  bert4long       the bert4keras-style user code: build_transformer_model(..., hierarchical_position=True,
                  with_mlm=True), compile(sparse categorical cross-entropy), train_on_batch with the 15%
                  MLM mask as sample weight. Its model is a `MaskedLMModel`, whose training step
                  runs the vocabulary projection only where the sample weight is non-zero (same loss
                  and gradients); its forward pass is the full-vocabulary softmax at every position.
  bert4long-keras-step  the same user code with `model.head_on_weighted_positions = False`: Keras's own
                  training step, vocabulary projection at every position (what bert4keras does).
  bert4long-best  bert4long's fastest path: gathered MLM head (vocabulary projection only at the masked
                  positions), in --best-precision with --best-xla. The defaults are this CPU's best:
                  mixed_bfloat16 without XLA (TensorFlow's oneDNN matmuls use the CPU's bf16 units;
                  XLA's CPU code for bf16 dots does not). On a GPU use mixed_float16 with XLA.
  bert4long-lean  the gathered head plus attention='chunked' and recompute=True, float32 with XLA: the
                  memory-lean path for long inputs.
  bert4keras      bert4keras 0.11.5, the same user code, on TensorFlow's legacy Keras (tf-keras);
                  needs `pip install tf-keras && pip install --no-deps bert4keras`.
  hf-torch        Hugging Face transformers BertForMaskedLM on PyTorch (CPU), AdamW step; run with
                  --peer-python pointing at an environment with torch and transformers. It has no way
                  to place more than max_position_embeddings tokens, so it runs at 512 only.

    python -m benchmarks.speed                          # bert4long paths, 512/1024/2048
    python -m benchmarks.speed --impls bert4long bert4long-best bert4keras hf-torch --peer-python ../peers/bin/python
    python -m benchmarks.speed --quick                  # tiny smoke run (CI)
"""
import argparse
import json
import os
import sys
import tempfile

from benchmarks.common import MINILM, ROOT, machine_stamp, median_time, peak_rss_gb, print_table, run_isolated, write_json

HERE = os.path.dirname(os.path.abspath(__file__))

TINY = dict(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position=64)


def google_config(config):
    return {"vocab_size": config["vocab_size"], "hidden_size": config["hidden_size"],
            "num_hidden_layers": config["num_hidden_layers"], "num_attention_heads": config["num_attention_heads"],
            "intermediate_size": config["intermediate_size"], "hidden_act": "gelu",
            "max_position_embeddings": config["max_position"], "type_vocab_size": 2,
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}


def make_batch(config, length, batch):
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(100, config["vocab_size"], size=(batch, length)).astype("int32")
    count = max(1, int(round(0.15 * length)))
    positions = np.stack([np.sort(rng.choice(length, count, replace=False)) for _ in range(batch)]).astype("int32")
    mask = np.zeros((batch, length), "float32")
    np.put_along_axis(mask, positions, 1.0, axis=1)
    return tokens, positions, mask


def run_keras(impl, config_path, config, length, batch, repeats, precision, xla):
    """bert4long (Keras 3) or bert4keras (tf-keras): same calls, different import."""
    import numpy as np

    if impl == "bert4keras":
        import tensorflow as tf
        from bert4keras.models import build_transformer_model

        keras = tf.keras
        kwargs = {}
    else:
        import keras
        import tensorflow as tf

        from bert4long.models import build_transformer_model

        if impl == "bert4long-best" and precision:
            keras.mixed_precision.set_global_policy(precision)
        kwargs = {"gathered_mlm": impl in ("bert4long-best", "bert4long-lean")}
        if impl == "bert4long-lean":
            kwargs.update(attention="chunked", attention_config={"block_size": 512}, recompute=True)
    tokens, positions, mask = make_batch(config, length, batch)
    segments = np.zeros_like(tokens)
    model = build_transformer_model(config_path, None, hierarchical_position=True, with_mlm=True, **kwargs)
    if impl == "bert4long-keras-step":
        model.head_on_weighted_positions = False
    if kwargs.get("gathered_mlm"):
        inputs = [tokens, segments, positions]
        labels, weights = np.take_along_axis(tokens, positions, axis=1), None
    else:
        inputs, labels, weights = [tokens, segments], tokens, mask
    jit = {"bert4long-best": xla, "bert4long-lean": True}.get(impl)  # None: the user code's default
    compile_kwargs = {} if jit is None else {"jit_compile": jit}
    model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="sparse_categorical_crossentropy", **compile_kwargs)
    forward = tf.function(lambda *x: model(list(x), training=False), jit_compile=bool(jit))
    tensors = [tf.constant(x) for x in inputs]
    forward_s = median_time(lambda: np.asarray(forward(*tensors)), repeats)
    train_s = median_time(lambda: model.train_on_batch(inputs, labels, sample_weight=weights), repeats)
    return forward_s, train_s


def run_torch(config_path, length, batch, repeats):
    import torch
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(**json.load(open(config_path)))
    if length > config.max_position_embeddings:
        raise RuntimeError(f"cannot place {length} tokens with {config.max_position_embeddings} positions")
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    tokens, positions, mask = make_batch(json.load(open(config_path)) | {"vocab_size": config.vocab_size,
                                                                         "max_position": 0}, length, batch)
    ids = torch.tensor(tokens, dtype=torch.long)
    labels = torch.where(torch.tensor(mask) > 0, ids, torch.full_like(ids, -100))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def forward():
        model.eval()
        with torch.no_grad():
            torch.softmax(model(input_ids=ids).logits, -1)

    def train():
        model.train()
        optimizer.zero_grad()
        model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()

    return median_time(forward, repeats), median_time(train, repeats)


def measure(impl, length, batch, repeats, quick, precision, xla):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if impl == "bert4keras":
        os.environ.update(TF_KERAS="1", TF_USE_LEGACY_KERAS="1")
    config = dict(MINILM, **(TINY if quick else {}))
    config_path = os.path.join(tempfile.mkdtemp(), "bert_config.json")
    json.dump(google_config(config), open(config_path, "w"))
    versions = {}
    if impl == "hf-torch":
        import torch
        import transformers

        versions = {"torch": torch.__version__, "transformers": transformers.__version__}
        forward_s, train_s = run_torch(config_path, length, batch, repeats)
    else:
        forward_s, train_s = run_keras(impl, config_path, config, length, batch, repeats, precision, xla)
    return {"impl": impl, "length": length, "batch": batch, "forward_s": round(forward_s, 4),
            "train_step_s": round(train_s, 4), "train_tokens_per_s": round(batch * length / train_s, 1),
            "peak_rss_gb": round(peak_rss_gb(), 2), **({"peer_versions": versions} if versions else {})}


def add_ratios(rows):
    for row in rows:
        for base in ("bert4keras", "hf-torch"):
            peer = next((r for r in rows if r["length"] == row["length"] and r["impl"] == base), None)
            if peer and "train_step_s" in peer and "train_step_s" in row and row["impl"].startswith("bert4long"):
                row[f"train_x_vs_{base}"] = round(peer["train_step_s"] / row["train_step_s"], 2)
                row[f"forward_x_vs_{base}"] = round(peer["forward_s"] / row["forward_s"], 2)
                row[f"memory_vs_{base}"] = round(row["peak_rss_gb"] / peer["peak_rss_gb"], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impls", nargs="+", default=["bert4long", "bert4long-best"],
                        choices=["bert4long", "bert4long-keras-step", "bert4long-best", "bert4long-lean", "bert4keras",
                                 "hf-torch"])
    parser.add_argument("--lengths", type=int, nargs="+", help="default 512 1024 2048 (--quick: 32 96)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--best-precision", default="mixed_bfloat16",
                        help="dtype policy of bert4long-best (mixed_float16 on a GPU; '' for float32)")
    parser.add_argument("--best-xla", choices=["on", "off"], default="off", help="XLA for bert4long-best")
    parser.add_argument("--peer-python", default=sys.executable, help="Python with torch + transformers for hf-torch")
    parser.add_argument("--quick", action="store_true", help="tiny model and lengths, for CI")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "speed.json"))
    parser.add_argument("--one", nargs=2, metavar=("IMPL", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.batch, args.repeats, args.quick,
                                 args.best_precision, args.best_xla == "on")))
        return
    lengths = args.lengths or ([32, 96] if args.quick else [512, 1024, 2048])
    repeats = 1 if args.quick else args.repeats
    rows = []
    for length in lengths:
        for impl in args.impls:
            flags = ["--batch", str(args.batch), "--repeats", str(repeats), "--best-precision", args.best_precision,
                     "--best-xla", args.best_xla]
            if args.quick:
                flags.append("--quick")
            env = {"PYTHONPATH": ROOT}   # the peer Python imports this tree
            if impl == "hf-torch" and args.peer_python != sys.executable:
                row = run_isolated("benchmarks.speed", ["--one", impl, str(length), *flags], env=env,
                                   python=args.peer_python)
            else:
                row = run_isolated("benchmarks.speed", ["--one", impl, str(length), *flags], env=env)
            row.setdefault("impl", impl)
            row.setdefault("length", length)
            rows.append(row)
            print(json.dumps(row), flush=True)
    add_ratios(rows)
    columns = ["impl", "length", "batch", "forward_s", "train_step_s", "train_tokens_per_s", "peak_rss_gb"]
    columns += sorted({k for r in rows for k in r if k.startswith(("train_x", "forward_x", "memory_vs"))})
    print_table(rows, columns + ["error"])
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    write_json(out, {"stamp": machine_stamp(), "model": "tiny" if args.quick else "MiniLM size (random weights)",
                     "best_precision": args.best_precision or "float32", "best_xla": args.best_xla, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
