"""The model on JAX and PyTorch gives TensorFlow's numbers: every kernel, `predict`, and one `fit` step.

Keras picks its backend once per process, so each backend runs in a child process (this file run as a
script, with ``KERAS_BACKEND`` set) while the suite stays on TensorFlow. The parent computes TensorFlow's
numbers with the same functions and hands them over in an ``.npz`` file. The model is the tiny BERT with
hierarchical positions read at 56 tokens, 3.5 times the 16 it was trained with.

The training steps: one ``fit`` step of MLM continued pretraining, the bert4keras recipe (`MaskedLMModel`,
sparse cross-entropy, a 0/1 sample weight; 20 weighted positions of 112, which the head's first chunk of 23
rows holds, and 80, which take four chunks) and `bert4long.training`'s gathered-head model (`build_mlm_model`,
`compile_mlm`), and one of fine-tuning (`build_classifier`, `compile_finetune`; its new output layer set from
NumPy, as the backends' initializers draw different numbers): the loss and the change of every weight, all
with plain SGD, equal TensorFlow's within ``TOL``.

The child's own checks, which need no TensorFlow reference: a ``fit`` step with the ``chunked`` kernel
updates the weights as one with ``full`` attention does (their gradients are equal), and with dropout a
step under ``recompute=True`` equals the same step without it (the recomputation draws the same masks);
the `MaskedLMModel` step equals Keras's own (``head_on_weighted_positions = False``), and its head is called on
rows of 23 only (a spy on ``MLM-Dense``, at trace time on JAX), where Keras's step runs it on all 112.
`test_training_builds_without_tensorflow` builds, compiles and steps both training models with TensorFlow
unimportable.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
from paths import ROOT, child_env

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


def fit_step(model, x, y, sample_weight=None):
    """``[loss, change of every trainable weight...]`` in one ``fit`` step of the compiled ``model``."""
    import keras

    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    loss = model.fit(x, y, sample_weight=sample_weight, batch_size=len(x[0]), epochs=1, verbose=0).history["loss"]
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    return np.concatenate([loss, *[(a - b).ravel() for a, b in zip(after, before)]])


def mlm_targets(weighted):
    """Labels and a 0/1 sample weight for `batch`: ``weighted`` positions of weight 1, none of them padding."""
    rng = np.random.default_rng(2)
    ids = batch()[0]
    weights = np.zeros(ids.shape, "float32")
    weights.flat[rng.choice(np.flatnonzero(ids), weighted, replace=False)] = 1.0
    return rng.integers(5, 64, ids.shape).astype("int32"), weights


def mlm_step(checkpoint, weighted, on_rows=True, rows=None):
    """One SGD step of the bert4keras MLM recipe on `MaskedLMModel`; ``rows`` collects the shapes ``MLM-Dense``
    is called on."""
    import keras

    model = build(checkpoint, with_mlm=True)
    model.head_on_weighted_positions = on_rows
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="sparse_categorical_crossentropy")
    labels, weights = mlm_targets(weighted)
    if rows is not None:
        model.compute_loss(batch(), labels, model(batch()), weights)  # built here, not by fit's symbolic call
        layer = model.get_layer("MLM-Dense")
        call = layer.call
        layer.call = lambda inputs, *args, **kwargs: rows.append(tuple(inputs.shape)) or call(inputs, *args, **kwargs)
    return fit_step(model, batch(), labels, weights)


def pretraining_step(checkpoint):
    """One SGD step of `bert4long.training`'s MLM model (gathered head, `compile_mlm`)."""
    import keras

    from bert4long.training import build_mlm_model, compile_mlm

    keras.utils.set_random_seed(0)
    model, _, _ = build_mlm_model(checkpoint[0], checkpoint[1], hierarchical_position=True)
    compile_mlm(model, keras.optimizers.SGD(1.0))
    labels, weights = mlm_targets(20)
    positions = np.argsort(-weights, axis=1, kind="stable")[:, :12].astype("int32")
    taken = [np.take_along_axis(t, positions, axis=1) for t in (labels, weights)]
    return fit_step(model, [*batch(), positions], *taken)


def finetuning_step(checkpoint):
    """One SGD step of `bert4long.training`'s classifier (`build_classifier`, `compile_finetune`)."""
    import keras

    from bert4long.training import build_classifier, compile_finetune

    keras.utils.set_random_seed(0)
    model = build_classifier(checkpoint[0], checkpoint[1], num_labels=3, dropout_rate=0.0, hierarchical_position=True)
    layer = model.get_layer("Classifier-Logits")
    layer.set_weights([np.random.default_rng(3).normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()])
    compile_finetune(model, keras.optimizers.SGD(1.0))
    return fit_step(model, batch(), np.array([0, 2], "int32"))


def training_steps(checkpoint, rows=None):
    """The training steps compared with TensorFlow's (module docstring); ``rows``: ``{weighted: []}`` to collect the
    shapes ``MLM-Dense`` is called on."""
    rows = rows or {}
    return {"mlm_20": mlm_step(checkpoint, 20, rows=rows.get(20)), "mlm_80": mlm_step(checkpoint, 80, rows=rows.get(80)),
            "pretraining": pretraining_step(checkpoint), "finetuning": finetuning_step(checkpoint)}


def child(config, prefix, out):
    """Run on the backend in ``KERAS_BACKEND``: kernel outputs and step updates, written to ``out``."""
    checkpoint = (config, prefix, None)
    results = kernel_outputs(checkpoint)
    results.update({f"step_{name}": step_update(checkpoint, **options) for name, (options, _) in STEPS.items()})
    rows = {20: [], 80: []}
    results.update(training_steps(checkpoint, rows))
    for weighted in rows:
        keras_rows = []
        results[f"mlm_{weighted}_keras"] = mlm_step(checkpoint, weighted, on_rows=False, rows=keras_rows)
        results[f"mlm_{weighted}_rows"], results[f"mlm_{weighted}_keras_rows"] = np.array(rows[weighted]), np.array(keras_rows)
    np.savez(out, **results)


@pytest.fixture(scope="module")
def tensorflow_numbers(tiny_bert, tmp_path_factory):
    path = tmp_path_factory.mktemp("backends") / "tensorflow.npz"
    np.savez(path, **kernel_outputs(tiny_bert), step_full=step_update(tiny_bert), **training_steps(tiny_bert))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_backend_matches_tensorflow(backend, tiny_bert, tensorflow_numbers, tmp_path):
    pytest.importorskip(backend, reason=f"{backend} is not installed: the {backend} backend cannot run")
    out = tmp_path / f"{backend}.npz"
    env = child_env(KERAS_BACKEND=backend)
    run = subprocess.run([sys.executable, __file__, tiny_bert[0], tiny_bert[1], str(out)],
                         env=env, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, f"KERAS_BACKEND={backend} failed:\n{run.stderr[-4000:]}"
    mine, reference = np.load(out), np.load(tensorflow_numbers)
    for name in reference.files:
        np.testing.assert_allclose(mine[name], reference[name], atol=TOL, err_msg=f"{backend}: {name}")
    for name, (_, equal_to) in STEPS.items():
        if equal_to:
            np.testing.assert_allclose(mine[f"step_{name}"], mine[f"step_{equal_to}"], atol=TOL,
                                       err_msg=f"{backend}: the {name} step against the {equal_to} step")
    for weighted in (20, 80):
        np.testing.assert_allclose(mine[f"mlm_{weighted}"], mine[f"mlm_{weighted}_keras"], atol=TOL,
                                   err_msg=f"{backend}: MaskedLMModel's step against Keras's, {weighted} weighted")
        assert {tuple(r) for r in mine[f"mlm_{weighted}_rows"]} == {(1, 23, 16)}, backend  # the head on 23 rows
        assert {tuple(r) for r in mine[f"mlm_{weighted}_keras_rows"]} == {(2, LENGTH, 16)}, backend


NO_TENSORFLOW = """
import sys
sys.modules["tensorflow"] = None  # any import of it fails
import keras, numpy as np
from bert4long.training import build_classifier, build_mlm_model, compile_finetune, compile_mlm, make_optimizer
config = sys.argv[1]
ids = np.full((2, 16), 7, "int32")
model, _, _ = build_mlm_model(config, None)
compile_mlm(model, make_optimizer(1e-3, 10))
loss = model.train_on_batch([ids, ids * 0, np.ones((2, 2), "int32")], np.ones((2, 2), "int32"),
                            sample_weight=np.ones((2, 2), "float32"))
classifier = build_classifier(config, None, num_labels=3)
compile_finetune(classifier, make_optimizer(1e-3, 10))
print(np.isfinite(loss[0]), np.isfinite(classifier.train_on_batch([ids, ids * 0], np.array([0, 2]))[0]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_training_builds_without_tensorflow(backend, tiny_bert):
    pytest.importorskip(backend, reason=f"{backend} is not installed: the {backend} backend cannot run")
    run = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, tiny_bert[0]], env=dict(os.environ, KERAS_BACKEND=backend),
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, f"KERAS_BACKEND={backend} failed:\n{run.stderr[-4000:]}"
    assert run.stdout.split()[-2:] == ["True", "True"]


if __name__ == "__main__":
    child(*sys.argv[1:])
