"""Long-text kernels keep their memory promise in eager mode, not only inside `tf.function`.

Each kernel runs in a child process (``python tests/training/test_eager_memory.py KERNEL``) that
measures the peak resident memory of one training step (forward + backward, batch 1,
2,048 tokens) above the memory held just before it, three ways: inside
`tf.function` (traced by an earlier call), under a plain eager `tf.GradientTape`,
and with ``fit(run_eagerly=True)``. Before each step the child resets its peak
(``/proc/self/clear_refs``), and ``MALLOC_MMAP_THRESHOLD_`` makes freed tensors
leave the process, so each step's peak is its own. The parent kills a child whose
resident memory passes a hard cap, so a regression fails fast instead of taking the
machine down.

Full attention keeps every layer's ``[heads, L, L]`` float32 probabilities for the
backward pass: 4 x 64 MiB here, twice the ceiling (128 MiB). Each step must stay
under the ceiling and within 1.5 times the `tf.function` step (plus 16 MiB).
Without the eager-mode fixes, eager chunked attention kept every key block's
scores and probabilities on the tape (killed at the cap) and eager sliding-window
attention kept about twice what `tf.function` keeps.
"""
import json
import os
import subprocess
import sys
import time

import pytest
from paths import ROOT, child_env

LENGTH = 2048
MODEL = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 64, "hidden_act": "gelu", "segment_vocab_size": 2, "max_position": LENGTH}
KERNELS = {"chunked": {"block_size": 128}, "sliding_window": {"window": 128, "global_tokens": [0]}}
MIB = 2**20
CEILING = 128 * MIB     # peak of one step above the memory before it
RATIO = 1.5             # eager (and run_eagerly) peak over the tf.function peak ...
SLACK = 32 * MIB        # ... plus this much: allocator and eager bookkeeping (measured 16-23 MiB), not the kernel
HARD_CAP = 3 * 2**30    # the parent kills a child whose resident memory passes this


def status_kib(field, pid="self"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def child(kernel):
    """Run the three steps in this process; print one JSON line per step."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    model = build_transformer_model(None, None, attention=kernel, attention_config=KERNELS[kernel], **MODEL)
    token_ids = np.random.default_rng(0).integers(1, MODEL["vocab_size"], (1, LENGTH)).astype("int32")
    inputs = [tf.constant(token_ids), tf.zeros_like(token_ids)]

    def tape_step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(inputs, training=True)))
        return [tf.reduce_sum(g) for g in tape.gradient(loss, model.trainable_variables)]

    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", run_eagerly=True)
    target = np.zeros((1, LENGTH, MODEL["hidden_size"]), "float32")
    steps = {
        "tf.function": tf.function(tape_step),
        "eager GradientTape": tape_step,
        "fit(run_eagerly=True)": lambda: model.fit(inputs, target, batch_size=1, epochs=1, verbose=0),
    }
    steps["tf.function"]()  # traced first: tracing is not the kernel's memory
    for mode, step in steps.items():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident memory
        before = status_kib("VmRSS")
        start = time.perf_counter()
        step()
        peak = status_kib("VmHWM")
        row = {"mode": mode, "peak_bytes": (peak - before) * 1024, "seconds": round(time.perf_counter() - start, 2)}
        print(json.dumps(row), flush=True)


def run_child(kernel):
    """Start the child for ``kernel``; returns the process."""
    env = child_env(TF_CPP_MIN_LOG_LEVEL="3", MALLOC_MMAP_THRESHOLD_="65536")
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), kernel], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def watch(process):
    """Wait for ``process``, killing it past `HARD_CAP` resident memory; (steps, killed message or None)."""
    start, killed = time.time(), None
    while process.poll() is None:
        try:
            rss = status_kib("VmRSS", process.pid) * 1024
        except (FileNotFoundError, ProcessLookupError, KeyError):  # exited between poll() and the read
            break
        if rss > HARD_CAP:
            killed = f"killed at {rss / MIB:.0f} MiB resident after {time.time() - start:.0f} s"
            process.kill()
            break
        time.sleep(0.02)
    stdout, stderr = process.communicate()
    steps = {row["mode"]: row for row in map(json.loads, filter(None, stdout.splitlines()))}
    if killed is None and process.returncode:
        killed = f"exited {process.returncode}: {stderr.strip().splitlines()[-1:]}"
    return steps, killed


@pytest.fixture(scope="module")
def measured():
    processes = {kernel: run_child(kernel) for kernel in KERNELS}  # side by side: two cores
    return {kernel: watch(process) for kernel, process in processes.items()}


def test_full_attention_would_not_fit():
    probabilities = MODEL["num_hidden_layers"] * MODEL["num_attention_heads"] * LENGTH**2 * 4
    assert probabilities >= 2 * CEILING   # what full attention keeps for its backward pass


@pytest.mark.slow
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_eager_step_stays_within_the_tf_function_memory(measured, kernel):
    steps, killed = measured[kernel]
    report = {mode: f"{row['peak_bytes'] / MIB:.0f} MiB" for mode, row in steps.items()}
    assert killed is None, f"{kernel}: {killed}; measured so far: {report}"
    assert set(steps) == {"tf.function", "eager GradientTape", "fit(run_eagerly=True)"}
    graph = steps["tf.function"]["peak_bytes"]
    for mode, row in steps.items():
        assert row["peak_bytes"] < CEILING, f"{kernel}, {mode}: {report}"
        assert row["peak_bytes"] <= RATIO * graph + SLACK, f"{kernel}, {mode} vs tf.function: {report}"


EQUAL = {"sliding_window": {"window": 8, "global_tokens": [0, 3]}, "bigbird": {"block_size": 8, "num_random_blocks": 1},
         "performer": {"num_features": 16}, "lsh": {"bucket_size": 8, "num_buckets": 4}}


@pytest.mark.parametrize("kernel,recompute", [(name, False) for name in EQUAL] + [("sliding_window", True)])
def test_eager_steps_equal_tf_function_steps_with_dropout(kernel, recompute):
    """Eager mode recomputes the kernel in the backward pass: same loss, gradients and dropout masks."""
    import numpy as np
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    model = build_transformer_model(None, None, attention=kernel, attention_config=dict(EQUAL[kernel], seed=1),
                                    recompute=recompute, **dict(MODEL, num_hidden_layers=1, max_position=64),
                                    dropout_rate=0.2, attention_dropout_rate=0.3)
    token_ids = np.random.default_rng(0).integers(1, MODEL["vocab_size"], (2, 37)).astype("int32")
    token_ids[1, 30:] = 0
    inputs = [tf.constant(token_ids), tf.zeros_like(token_ids)]
    weights = tf.constant(np.random.default_rng(1).standard_normal((2, 37, MODEL["hidden_size"])), "float32")
    start = [np.array(v) for v in model.variables]

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(inputs, training=True) * weights)
        return loss, tape.gradient(loss, model.trainable_variables)

    runs = []
    for fn in (step, tf.function(step)):  # two steps each from the same weights and dropout steps
        for variable, value in zip(model.variables, start):
            variable.assign(value)
        losses, grads = zip(*(fn() for _ in range(2)))
        runs.append((losses, grads, [np.array(v) for v in model.variables if v.name == "step"]))
    (eager_losses, eager_grads, eager_steps), (graph_losses, graph_grads, graph_steps) = runs
    assert [int(s) for s in eager_steps] == [int(s) for s in graph_steps] and max(eager_steps) >= 2
    # float32 summation order only; one dropout mask entry moves the loss by ~1e-4
    np.testing.assert_allclose(eager_losses, graph_losses, atol=1e-6, rtol=0)
    flat = [[g for grads in run for g in grads] for run in (eager_grads, graph_grads)]
    for eager, graph in zip(*flat):
        np.testing.assert_allclose(tf.convert_to_tensor(eager), tf.convert_to_tensor(graph), atol=1e-6, rtol=1e-5)
    assert abs(float(eager_losses[0]) - float(eager_losses[1])) > 1e-4   # same weights, fresh dropout masks


if __name__ == "__main__":
    child(sys.argv[1])
