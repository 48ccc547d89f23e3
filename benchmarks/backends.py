"""The same model on each Keras backend: forward pass and one MLM training step, TensorFlow, JAX and PyTorch.

The user code is the bert4keras-style one of ``benchmarks.speed``'s ``bert4long`` row, unchanged between
backends: ``build_transformer_model(config, hierarchical_position=True, with_mlm=True)`` (MiniLM's size, random
weights: the speed does not depend on them), ``compile`` with sparse categorical cross-entropy and Keras's
defaults (``jit_compile="auto"``: XLA on JAX, and on TensorFlow where every op allows it; eager on PyTorch),
``predict_on_batch`` for the forward pass (the full-vocabulary softmax at every position) and ``train_on_batch``
with the 15% mask as sample weight for the training step. Positions past 512 come from the hierarchical table.
Every (backend, length) runs in a fresh process (``KERAS_BACKEND`` is read once per process), so each peak
memory is its own; all rows come from one run on one machine: quote the ratios.

    python -m benchmarks.backends                      # TensorFlow, JAX, PyTorch at 512 and 2,048
    python -m benchmarks.backends --quick              # tiny model, short inputs (a smoke run)
"""
import argparse
import importlib.util
import json
import os
import tempfile

from benchmarks.common import MINILM, ROOT, machine_stamp, median_time, peak_rss_gb, print_table, run_isolated, write_json
from benchmarks.speed import TINY, google_config, make_batch

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "jax", "torch")


def measure(length, batch, repeats, quick):
    """This process's backend: ``{forward_s, train_step_s, ...}`` of the MiniLM-size masked LM."""
    import keras
    import numpy as np

    from bert4long.models import build_transformer_model

    config = dict(MINILM, **(TINY if quick else {}))
    config_path = os.path.join(tempfile.mkdtemp(), "bert_config.json")
    with open(config_path, "w") as f:
        json.dump(google_config(config), f)
    tokens, _, mask = make_batch(config, length, batch)
    inputs = [tokens, np.zeros_like(tokens)]
    keras.utils.set_random_seed(0)
    model = build_transformer_model(config_path, None, hierarchical_position=True, with_mlm=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-5), loss="sparse_categorical_crossentropy")
    forward_s = median_time(lambda: model.predict_on_batch(inputs), repeats)
    train_s = median_time(lambda: model.train_on_batch(inputs, tokens, sample_weight=mask), repeats)
    return {"backend": keras.backend.backend(), "length": length, "batch": batch, "forward_s": round(forward_s, 4),
            "train_step_s": round(train_s, 4), "train_tokens_per_s": round(batch * length / train_s, 1),
            "peak_rss_gb": round(peak_rss_gb(), 2)}


def add_ratios(rows):
    """Each row's speed against TensorFlow's at its length (above 1: faster than TensorFlow)."""
    for row in rows:
        base = next((r for r in rows if r["length"] == row["length"] and r["backend"] == "tensorflow"), None)
        if base and "train_step_s" in base and "train_step_s" in row:
            row["forward_x_vs_tf"] = round(base["forward_s"] / row["forward_s"], 2)
            row["train_x_vs_tf"] = round(base["train_step_s"] / row["train_step_s"], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--lengths", type=int, nargs="+", help="default 512 2048 (--quick: 32 96)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny model and lengths (a smoke run)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "backends.json"))
    parser.add_argument("--one", type=int, metavar="LENGTH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.batch, args.repeats, args.quick)))
        return
    lengths = args.lengths or ([32, 96] if args.quick else [512, 2048])
    repeats = 1 if args.quick else args.repeats
    rows = []
    for length in lengths:
        for backend in args.backends:
            if backend != "tensorflow" and importlib.util.find_spec(backend) is None:
                row = {"error": f"{backend} is not installed"}
            else:
                flags = ["--one", str(length), "--batch", str(args.batch), "--repeats", str(repeats)]
                env = {"KERAS_BACKEND": backend, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
                row = run_isolated("benchmarks.backends", flags + (["--quick"] if args.quick else []), env=env)
            row.update(backend=backend, length=length)
            rows.append(row)
            print(json.dumps(row), flush=True)
    add_ratios(rows)
    print_table(rows, ["backend", "length", "batch", "forward_s", "train_step_s", "train_tokens_per_s",
                       "peak_rss_gb", "forward_x_vs_tf", "train_x_vs_tf", "error"])
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    write_json(out, {"stamp": machine_stamp(), "model": "tiny" if args.quick else "MiniLM size (random weights)",
                     "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
