"""Where a training step's (or a served forward pass's) time goes, and its matmuls' share of the machine's peak
(TensorFlow on CPU, no XLA).

One step of a MiniLM-size model (random weights, batch 1) per (task, length, precision), profiled by TensorFlow's
profiler after two warm-up steps, one op at a time (TensorFlow's inter-op parallelism 1: each op on every core, so
the ops' times add up to the step's). Each op's time is put in a group: the encoder's dense matmuls, its attention
matmuls, the softmax (forward and gradient), transposes, casts, the task head (the gathered MLM head, or the classifier), the
optimizer's update, and the rest (layer norm, GELU, adds, dropout, copies). Task ``serve`` is the encoder's forward
pass alone in a `tf.function`, what an exported SavedModel runs. The matmul groups get their achieved
GFLOP/s from the model's FLOPs (a training step's forward + backward = 3x the forward's), and that as a share of the peak a 2,048²
matmul reaches in the same process and precision. Without XLA: XLA fuses the ops the profile would name, and the
bfloat16 path, this CPU's fastest, runs without it (`bert4long.precision`).

    python -m benchmarks.profile_step               # mlm and finetune, 512 and 2,048, float32 and mixed_bfloat16
    python -m benchmarks.profile_step --tasks serve --out benchmarks/results/profile_serve.json
    python -m benchmarks.profile_step --quick       # tiny model, 64 tokens (a smoke run)

Writes benchmarks/results/profile_step.json (profile_step_quick.json with --quick).
"""
import argparse
import collections
import glob
import itertools
import json
import os
import tempfile
import time

from benchmarks.common import MINILM, machine_stamp, median_time, print_table, run_isolated, write_json
from bert4long.precision import bfloat16_units

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
GROUPS = ("dense matmuls", "attention matmuls", "softmax", "transposes", "casts", "head", "optimizer", "other")
MASKED_SHARE = 0.15
OPTIMIZER_SCOPES = ("adam_w", "adamw", "adam", "sgd")   # Keras optimizers' name scopes (make_optimizer's: adam_w)


def step_flops(config, length, task):
    """``{group: FLOP}`` of one training step (batch 1): 3x the forward's, per matmul group; of the forward pass
    alone for ``serve``."""
    e, f, layers, vocab = (config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"))
    dense = layers * 2 * length * (4 * e * e + 2 * e * f)
    attention = layers * 2 * 2 * length * length * e
    head = {"mlm": 2 * int(MASKED_SHARE * length) * (e * e + e * vocab), "finetune": 2 * e * 2}.get(task, 0)
    passes = 1 if task == "serve" else 3
    return {"dense matmuls": passes * dense, "attention matmuls": passes * attention, "head": passes * head}


def group_of(name, op_type):
    """The group of the op ``name`` (its scope path) of type ``op_type``.

    >>> group_of("gradient_tape/bert_1/Embedding-Token_3/Tensordot/MatMul", "_MklMatMul")   # the tied MLM output
    'head'
    >>> group_of("bert_1/Transformer-0-MultiHeadSelfAttention/ArithmeticOptimizer/AddOpsRewrite", "AddV2")
    'other'
    """
    lower = name.lower()
    if lower.split("/")[0] in OPTIMIZER_SCOPES or op_type.startswith("ResourceApply"):
        return "optimizer"
    if "mlm-" in lower or "-logits" in lower or ("embedding-token" in lower and "tensordot" in lower):
        return "head"   # the MLM head (its dense, norm, and the vocabulary projection on the tied embedding), a logits layer
    if "Softmax" in op_type or "softmax" in lower:
        return "softmax"
    if "BatchMatMul" in op_type or op_type == "Einsum":
        return "attention matmuls"
    if "MatMul" in op_type:
        return "dense matmuls"
    if "Transpose" in op_type:
        return "transposes"
    return "casts" if op_type == "Cast" else "other"


def op_times(logdir):
    """``{group: ms}`` from the profile in ``logdir`` (TensorFlow's op events: ``name:type``)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    times = collections.Counter()
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                full = names.get(event.metadata_id, "")
                name, _, op_type = full.rpartition(":")
                if name and op_type and "::" not in full and " " not in full:   # an op, not the executor's spans
                    times[group_of(name, op_type)] += event.duration_ps / 1e9
    return dict(times)


def matmul_peak(precision):
    """GFLOP/s of a 2,048² matmul in ``precision``'s compute dtype (median of 5)."""
    import tensorflow as tf

    dtype = tf.bfloat16 if "bfloat16" in precision else tf.float32
    a = tf.cast(tf.random.normal((2048, 2048)), dtype)
    product = tf.function(lambda x: tf.matmul(x, x))
    return 2 * 2048**3 / median_time(lambda: product(a).numpy(), 5) / 1e9


def build_step(config, length, task, precision):
    """The compiled model and one batch of ``task`` (mlm: the gathered head; finetune: a 2-label classifier; serve:
    the encoder, not compiled)."""
    import numpy as np

    from bert4long.models import build_transformer_model
    from bert4long.training import build_classifier, compile_finetune, compile_mlm, dtype_policy, make_optimizer

    rng = np.random.default_rng(0)
    tokens = rng.integers(5, config["vocab_size"] - 1, (1, length)).astype("int32")
    model_config = dict(config, max_position=512, hierarchical_position=length > 512)
    if task == "serve":
        with dtype_policy(precision):
            return build_transformer_model(**model_config), ([tokens, tokens * 0], None, None)
    if task == "mlm":
        with dtype_policy(precision):
            model = build_transformer_model(with_mlm="linear", gathered_mlm=True, **model_config)
        compile_mlm(model, make_optimizer(1e-4, 1000, warmup_steps=1), jit_compile=False)
        positions = np.sort(rng.permutation(length)[:int(MASKED_SHARE * length)])[None].astype("int32")
        targets = rng.integers(5, config["vocab_size"] - 1, positions.shape).astype("int32")
        return model, ([tokens, tokens * 0, positions], targets, np.ones(positions.shape, "float32"))
    path = os.path.join(tempfile.mkdtemp(), "bert_config.json")
    with open(path, "w") as f:
        json.dump(dict(config, max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu"), f)
    model = build_classifier(path, None, 2, precision=precision, hierarchical_position=length > 512)
    compile_finetune(model, make_optimizer(1e-4, 1000, warmup_steps=1), jit_compile=False)
    return model, ([tokens, tokens * 0], np.array([1]), None)


def child(task, length, precision, quick):
    """Profile one step; print its row as JSON."""
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)   # one op at a time, on every core: op times add up
    config = TINY if quick else {k: MINILM[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                        "num_attention_heads", "intermediate_size")}
    model, (x, y, weights) = build_step(config, length, task, precision)
    forward = tf.function(lambda inputs: model(inputs)) if task == "serve" else None

    def step():
        if forward is not None:
            return forward(x).numpy()
        return model.train_on_batch(x, y, sample_weight=weights)
    for _ in range(2):
        step()
    logdir = tempfile.mkdtemp()
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    step()
    step_s = time.perf_counter() - start
    tf.profiler.experimental.stop()
    times = op_times(logdir)
    peak = matmul_peak(precision)
    flops = step_flops(config, length, task)
    row = {"task": task, "length": length, "precision": precision, "step_s": round(step_s, 3),
           **{f"{group} ms": round(times.get(group, 0.0), 1) for group in GROUPS}, "peak GFLOP/s": round(peak, 1)}
    for group, count in flops.items():
        ms = times.get(group, 0.0)
        if task == "mlm" or group != "head":   # (a classifier's head is a few thousand FLOPs, serving has none: no rate)
            row[f"{group} GFLOP/s"] = round(count / (ms / 1e3) / 1e9, 1) if ms else None
    matmul_ms = sum(times.get(g, 0.0) for g in ("dense matmuls", "attention matmuls"))
    matmul_flops = flops["dense matmuls"] + flops["attention matmuls"]
    row["encoder matmul share of peak"] = round(matmul_flops / (matmul_ms / 1e3) / 1e9 / peak, 3) if matmul_ms else None
    row["matmul share of step"] = round(matmul_ms / sum(times.values()), 3) if times else None
    print(json.dumps(row))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["mlm", "finetune"], choices=["mlm", "finetune", "serve"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--precisions", nargs="+", default=["float32", "mixed_bfloat16"])
    parser.add_argument("--quick", action="store_true", help="tiny model, 64 tokens")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--out", help="JSON path (default benchmarks/results/profile_step[_quick].json)")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]), args.child[2], args.quick)
    lengths = [64] if args.quick else args.lengths
    rows = []
    for task, length, precision in itertools.product(args.tasks, lengths, args.precisions):
        row = run_isolated("benchmarks.profile_step", ["--child", task, str(length), precision]
                           + (["--quick"] if args.quick else []), env={"TF_CPP_MIN_LOG_LEVEL": "3"})
        rows.append(row if "error" not in row else dict(task=task, length=length, precision=precision, **row))
        print(json.dumps(rows[-1]), flush=True)
    print_table(rows, ["task", "length", "precision", "step_s", *(f"{g} ms" for g in GROUPS),
                       "encoder matmul share of peak"])
    out = args.out or os.path.join(HERE, "results", f"profile_step{'_quick' if args.quick else ''}.json")
    write_json(out, {"stamp": machine_stamp(), "bfloat16_units": bfloat16_units(),
                     "model": "tiny" if args.quick else "MiniLM size (random weights), batch 1", "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
