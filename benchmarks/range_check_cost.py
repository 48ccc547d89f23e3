"""What the input range checks cost (issue 18: out-of-range ids are errors in every mode, XLA included).

Two mechanisms are timed, each against the same model without it, side by side in one process:

* ``host check``: a `CheckedModel` validates each batch on the host before Keras's
  jit-compiled step (XLA drops assertions). Compared with a plain ``keras.Model``
  over the very same layers: ``predict`` per batch and one ``fit`` training step,
  both ``jit_compile=True``.
* ``in-graph``: the assertions and NaN guards inside the embedding layers
  (`bert4long.layers.range_checks`). Compared by timing the model's token and
  segment lookups with bert4long's ``Embedding`` against ``keras.layers.Embedding``
  (same tables) in a `tf.function`, and putting the difference next to a full
  forward pass of the model (``tf.function`` without XLA).

A MiniLM-shaped model (6 layers, hidden 384, vocab 30,522, random weights) at
512 tokens, batch 2; ``--quick``: a tiny model at 64 tokens (smoke run). Ratios
are what to read: the machine may be shared.

    python -m benchmarks.range_check_cost           # writes benchmarks/results/range_check_cost.json
    python -m benchmarks.range_check_cost --quick   # writes benchmarks/results/range_check_cost_quick.json
"""
import argparse
import functools
import os
import statistics
import time

from benchmarks.common import MINILM, machine_stamp, median_time, print_table, write_json

HERE = os.path.dirname(os.path.abspath(__file__))

TINY = {"vocab_size": 1000, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 32, "hidden_act": "gelu", "max_position": 64, "segment_vocab_size": 2}


def paired_times(without, with_, repeats, warmup=2):
    """Median seconds of ``without()`` and ``with_()``, called alternately so that load drifts hit both."""
    for _ in range(warmup):
        without(), with_()
    times = ([], [])
    for _ in range(repeats):
        for fn, bucket in zip((without, with_), times):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def measure(model_config, length, batch, repeats):
    import keras
    import numpy as np
    import tensorflow as tf

    from bert4long.layers import Embedding
    from bert4long.models import build_transformer_model

    rng = np.random.default_rng(0)
    checked = build_transformer_model(**model_config)
    plain = keras.Model(checked.inputs, checked.outputs)   # the same layers, Keras's own step functions
    tokens = rng.integers(5, model_config["vocab_size"], (batch, length)).astype("int32")
    x = [tokens, np.zeros_like(tokens)]
    y = np.zeros((batch, length, model_config["hidden_size"]), "float32")
    steps = 4
    dataset = tf.data.Dataset.from_tensors((tuple(x), y)).repeat(steps)
    runs = {"predict_on_batch, XLA": lambda model: model.predict_on_batch(x),
            "train_on_batch, XLA": lambda model: model.train_on_batch(x, y),
            f"fit on tf.data, per step ({steps} steps), XLA": lambda model: model.fit(dataset, verbose=0)}
    rows = []
    for name, run in runs.items():
        for model in (plain, checked):
            model.compile(optimizer="sgd", loss="mse", jit_compile=True)
        without, with_ = paired_times(functools.partial(run, plain), functools.partial(run, checked), repeats)
        per = steps if name.startswith("fit") else 1
        rows.append({"mechanism": "host check", "what": name, "without_ms": 1e3 * without / per,
                     "with_ms": 1e3 * with_ / per})

    lookups = []
    for layer_class in (keras.layers.Embedding, Embedding):
        layers = []
        for source in ("Embedding-Token", "Embedding-Segment"):
            table = checked.get_layer(source).embeddings
            layer = layer_class(*table.shape)
            layer.build((None, None))
            layer.embeddings.assign(table)
            layers.append(layer)
        lookup = tf.function(lambda t, s, layers=layers: layers[0](t) + layers[1](s))
        lookups.append(lambda lookup=lookup: lookup(*x).numpy())
    without, with_ = paired_times(*lookups, repeats * 4)
    forward = tf.function(lambda t, s: checked([t, s]))
    forward_s = median_time(lambda: forward(*x).numpy(), repeats, warmup=2)
    rows.append({"mechanism": "in-graph", "what": "token+segment lookups", "without_ms": 1e3 * without,
                 "with_ms": 1e3 * with_, "forward_ms": 1e3 * forward_s})
    for row in rows:
        row["extra_ms"] = row["with_ms"] - row["without_ms"]
        reference = row.get("forward_ms", row["without_ms"])
        row["extra_percent"] = 100 * row["extra_ms"] / reference
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny model, 64 tokens (smoke run)")
    parser.add_argument("--length", type=int, help="tokens per sequence (default 512, --quick 64)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, help="timed calls per measurement (median; default 10, --quick 3)")
    parser.add_argument("--out", help="JSON path (default benchmarks/results/range_check_cost.json, "
                                      "range_check_cost_quick.json with --quick)")
    args = parser.parse_args(argv)
    args.out = args.out or os.path.join(HERE, "results", f"range_check_cost{'_quick' if args.quick else ''}.json")
    model = TINY if args.quick else MINILM
    length = args.length or (64 if args.quick else 512)
    repeats = args.repeats or (3 if args.quick else 10)
    rows = measure(model, length, args.batch, repeats)
    table = [{k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in row.items()} for row in rows]
    print(f"model: {'tiny' if args.quick else 'MiniLM-shaped'}, {length} tokens, batch {args.batch}, "
          f"median of {repeats}")
    print_table(table, ["mechanism", "what", "without_ms", "with_ms", "extra_ms", "forward_ms", "extra_percent"])
    write_json(args.out, {"stamp": machine_stamp(), "model": model, "length": length, "batch": args.batch,
                          "repeats": repeats, "rows": rows})


if __name__ == "__main__":
    main()
