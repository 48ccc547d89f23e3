"""Forward pass and one MLM training step of a MiniLM-size model at 512, 1,024 and 2,048 tokens.

Each (path, length) runs in a fresh process so its peak memory is its own.
Paths:
  user  - the bert4keras-style call: build_transformer_model(..., hierarchical_position=True,
          with_mlm=True), compile(sparse categorical cross-entropy), train_on_batch with the 15%
          MLM mask as sample weight (full-vocabulary softmax at every position).
  best  - gathered MLM head (vocabulary projection only at the 15% masked positions), XLA.

    python benchmarks/core.py                  # full grid (several minutes on 2 cores)
    python benchmarks/core.py --quick          # tiny smoke run
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import MINILM, machine_stamp, median_time, peak_rss_gb, print_table, run_isolated, write_json  # noqa: E402


def measure(path, length, batch, repeats, quick):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    config = dict(MINILM)
    if quick:
        config.update(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position=64)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1000 % config["vocab_size"], config["vocab_size"], size=(batch, length)).astype("int32")
    segments = np.zeros_like(tokens)
    mask = rng.random((batch, length)) < 0.15
    predictions = max(1, int(round(0.15 * length)))
    gathered = path == "best"
    model = build_transformer_model(hierarchical_position=True, with_mlm=True, gathered_mlm=gathered,
                                    dropout_rate=0.1, attention_dropout_rate=0.1, **config)
    if gathered:
        positions = np.stack([rng.choice(length, predictions, replace=False) for _ in range(batch)]).astype("int32")
        inputs = [tokens, segments, positions]
        labels = np.take_along_axis(tokens, positions, axis=1)
        weights = np.ones_like(labels, dtype="float32")
    else:
        inputs, labels, weights = [tokens, segments], tokens, mask.astype("float32")
    model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="sparse_categorical_crossentropy",
                  jit_compile=gathered)
    forward = tf.function(lambda *x: model(list(x), training=False), jit_compile=gathered)
    tensors = [tf.constant(x) for x in inputs]
    forward_s = median_time(lambda: forward(*tensors).numpy(), repeats)
    train_s = median_time(lambda: model.train_on_batch(inputs, labels, sample_weight=weights), repeats)
    return {"path": path, "length": length, "batch": batch, "forward_s": round(forward_s, 4),
            "train_step_s": round(train_s, 4), "tokens_per_s_train": round(batch * length / train_s, 1),
            "peak_rss_gb": round(peak_rss_gb(), 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--paths", nargs="+", default=["user", "best"])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny model and lengths, for CI")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "core.json"))
    parser.add_argument("--one", nargs=2, metavar=("PATH", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.batch, args.repeats, args.quick)))
        return
    lengths = [32, 96] if args.quick else args.lengths
    rows = []
    for length in lengths:
        for path in args.paths:
            extra = ["--batch", str(args.batch), "--repeats", str(1 if args.quick else args.repeats)]
            row = run_isolated(__file__, ["--one", path, str(length), *extra, *(["--quick"] if args.quick else [])])
            row.setdefault("path", path)
            row.setdefault("length", length)
            rows.append(row)
            print(json.dumps(row), flush=True)
    for row in rows:
        user = next((r for r in rows if r["length"] == row["length"] and r["path"] == "user"), None)
        if user and "train_step_s" in row and "train_step_s" in user:
            row["train_speedup_vs_user"] = round(user["train_step_s"] / row["train_step_s"], 2)
    print_table(rows, ["path", "length", "batch", "forward_s", "train_step_s", "tokens_per_s_train", "peak_rss_gb",
                       "train_speedup_vs_user", "error"])
    write_json(args.out if not args.quick else args.out.replace(".json", "_quick.json"),
               {"stamp": machine_stamp(), "model": "MiniLM size" if not args.quick else "tiny", "rows": rows})


if __name__ == "__main__":
    main()
