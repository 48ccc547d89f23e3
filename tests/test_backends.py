"""The model on JAX and PyTorch gives TensorFlow's numbers: every kernel, `predict`, and one `fit` step.

Keras picks its backend once per process, so each backend runs in a child process (this file run as a
script, with ``KERAS_BACKEND`` set) while the suite stays on TensorFlow. The parent computes TensorFlow's
numbers with the same functions and hands them over in an ``.npz`` file. The model is the tiny BERT with
hierarchical positions read at 56 tokens, 3.5 times the 16 it was trained with.

The child's own checks, which need no TensorFlow reference: a ``fit`` step with the ``chunked`` kernel
updates the weights as one with ``full`` attention does (their gradients are equal), and with dropout a
step under ``recompute=True`` equals the same step without it (the recomputation draws the same masks).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-5
LENGTH = 56
KERNELS = {
    "full": {},
    "chunked": dict(block_size=16),
    "sliding_window": dict(window=8, global_tokens=[0, 3]),
    "longformer": dict(window=8),
    "bigbird": dict(block_size=8, num_random_blocks=1, seed=2),
    "block_sparse": dict(block_size=8),
    "performer": dict(num_features=16, seed=1),
    "lsh": dict(bucket_size=8, num_buckets=4, num_hashes=2, seed=1),
    "typical_relative": {},
}
CHUNKED = dict(attention="chunked", attention_config=KERNELS["chunked"])
DROPOUT = dict(dropout_rate=0.1, attention_dropout_rate=0.1)
# name: (build options, the step it must equal)
STEPS = {
    "full": ({}, None),
    "chunked": (CHUNKED, "full"),
    "dropout": (DROPOUT, None),
    "dropout_recompute": (dict(DROPOUT, recompute=True), "dropout"),
    "chunked_dropout": (dict(CHUNKED, **DROPOUT), None),
    "chunked_dropout_recompute": (dict(CHUNKED, recompute=True, **DROPOUT), "chunked_dropout"),
}


def batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (2, LENGTH)).astype("int32")
    ids[1, 40:] = 0
    return [ids, np.zeros_like(ids)]


def build(checkpoint, **options):
    import keras

    from bert4long.models import build_transformer_model

    keras.utils.set_random_seed(0)
    config, prefix, _ = checkpoint
    return build_transformer_model(config, prefix, hierarchical_position=True, **options)


def kernel_outputs(checkpoint):
    """``{kernel_call, kernel_predict: outputs}`` of every kernel on `batch`."""
    import keras

    results = {}
    for name, options in KERNELS.items():
        model = build(checkpoint, attention=name, attention_config=options)
        results[f"{name}_call"] = keras.ops.convert_to_numpy(model(batch()))
        results[f"{name}_predict"] = np.asarray(model.predict(batch(), verbose=0))
    return results


def step_update(checkpoint, **options):
    """The change of every trainable weight (flattened, concatenated) in one SGD ``fit`` step."""
    import keras

    model = build(checkpoint, **options)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    target = np.random.default_rng(1).standard_normal((2, LENGTH, 16)).astype("float32")
    model.fit(batch(), target, batch_size=2, epochs=1, verbose=0)
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    return np.concatenate([(a - b).ravel() for a, b in zip(after, before)])


def child(config, prefix, out):
    """Run on the backend in ``KERAS_BACKEND``: kernel outputs and step updates, written to ``out``."""
    checkpoint = (config, prefix, None)
    results = kernel_outputs(checkpoint)
    results.update({f"step_{name}": step_update(checkpoint, **options) for name, (options, _) in STEPS.items()})
    np.savez(out, **results)


@pytest.fixture(scope="module")
def tensorflow_numbers(tiny_bert, tmp_path_factory):
    path = tmp_path_factory.mktemp("backends") / "tensorflow.npz"
    np.savez(path, **kernel_outputs(tiny_bert), step_full=step_update(tiny_bert))
    return path


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_backend_matches_tensorflow(backend, tiny_bert, tensorflow_numbers, tmp_path):
    pytest.importorskip(backend, reason=f"{backend} is not installed: the {backend} backend cannot run")
    out = tmp_path / f"{backend}.npz"
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    run = subprocess.run([sys.executable, __file__, tiny_bert[0], tiny_bert[1], str(out)],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"KERAS_BACKEND={backend} failed:\n{run.stderr[-4000:]}"
    mine, reference = np.load(out), np.load(tensorflow_numbers)
    for name in reference.files:
        np.testing.assert_allclose(mine[name], reference[name], atol=TOL, err_msg=f"{backend}: {name}")
    for name, (_, equal_to) in STEPS.items():
        if equal_to:
            np.testing.assert_allclose(mine[f"step_{name}"], mine[f"step_{equal_to}"], atol=TOL,
                                       err_msg=f"{backend}: the {name} step against the {equal_to} step")


if __name__ == "__main__":
    child(*sys.argv[1:])
