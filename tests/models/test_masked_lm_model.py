"""`MaskedLMModel`: the bert4keras MLM recipe (full-vocabulary output, sparse cross-entropy, 0/1 mask as
sample weight) trained with the head on the weighted rows only must give Keras's own step's numbers.

The reference is the same model with ``head_on_weighted_positions = False`` (Keras's `train_step`,
untouched), built from the same checkpoint; dropout is off so both see the same function.
Tolerances: float32 rounding of a different summation order (losses rtol 1e-5, weights rtol 1e-5 + atol 1e-6 after
plain SGD steps: Adam would turn rounding on near-zero gradients into +-lr weight changes). With
``reduction="sum"`` the gradients, and so the SGD steps and their rounding, are larger by the number of weighted
rows (about 20 here), so that case allows atol 1e-5. The rows the head sees are counted by a spy on ``MLM-Dense``
in eager steps (``run_eagerly``), where only the chunks that run are called.
"""
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from paths import ROOT

from bert4long.models import build_transformer_model
from bert4long.models.masked_lm import MaskedLMModel

SHAPE = (3, 40)  # 120 positions: 5 chunks of 24 rows


def pair(tiny_bert, **kwargs):
    """(fast, reference) models from one checkpoint; the reference always runs Keras's step."""
    config, checkpoint, _ = tiny_bert
    models = [build_transformer_model(config, checkpoint, with_mlm=True, dropout_rate=0.0,
                                      attention_dropout_rate=0.0, hierarchical_position=True, **kwargs)
              for _ in range(2)]
    models[1].head_on_weighted_positions = False
    return models


def batch(rng, vocab=60, shape=SHAPE, weighted=20):
    """``(x, y, w)`` with ``weighted`` positions of weight 1, none of them padding."""
    tokens = rng.integers(5, vocab, shape).astype("int32")
    tokens[0, -7:] = 0  # padding
    labels = rng.integers(5, vocab, shape).astype("int32")
    weights = np.zeros(shape, "float32")
    weights.flat[rng.choice(np.flatnonzero(tokens), weighted, replace=False)] = 1.0
    return [tokens, np.zeros_like(tokens)], labels, weights


def assert_same_training(fast, reference, data, steps=3, atol=1e-6):
    x, y, w = data
    for _ in range(steps):
        np.testing.assert_allclose(fast.train_on_batch(x, y, sample_weight=w),
                                   reference.train_on_batch(x, y, sample_weight=w), rtol=1e-5)
    for a, b in zip(fast.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)


def rows_seen(model):
    """The shapes of the inputs ``MLM-Dense`` is called on, from now on."""
    layer, seen = model.get_layer("MLM-Dense"), []
    call = layer.call

    def spy(inputs, *args, **kwargs):
        seen.append(tuple(inputs.shape))
        return call(inputs, *args, **kwargs)

    layer.call = spy
    return seen


def test_builder_returns_masked_lm_model_only_for_a_lone_full_mlm_output(tiny_bert):
    config, checkpoint, _ = tiny_bert
    assert isinstance(build_transformer_model(config, checkpoint, with_mlm=True), MaskedLMModel)
    for kwargs in ({}, {"with_nsp": True, "with_mlm": True}, {"gathered_mlm": True}):
        assert not isinstance(build_transformer_model(config, checkpoint, **kwargs), MaskedLMModel), kwargs


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy",
                                  keras.losses.SparseCategoricalCrossentropy(reduction="sum"),
                                  keras.losses.SparseCategoricalCrossentropy(reduction="mean_with_sample_weight")])
@pytest.mark.parametrize("weighted", [20, 70])
def test_weighted_rows_step_equals_keras_step(tiny_bert, rng, loss, weighted, jit_compile=False):
    """20 weighted rows of 120: the first chunk (24 rows) holds them; 70: three chunks run."""
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, jit_compile=jit_compile)
    data = batch(rng, weighted=weighted)
    assert fast.runs_head_on_rows() and not reference.runs_head_on_rows()
    summed = isinstance(loss, keras.losses.Loss) and loss.reduction == "sum"
    assert_same_training(fast, reference, data, atol=1e-5 if summed else 1e-6)
    x, y, w = data
    np.testing.assert_allclose(fast.evaluate(x, y, sample_weight=w, verbose=0),
                               reference.evaluate(x, y, sample_weight=w, verbose=0), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("weighted", [20, 70])
def test_xla_step_equals_keras_step(tiny_bert, rng, weighted):
    test_weighted_rows_step_equals_keras_step(tiny_bert, rng, "sparse_categorical_crossentropy", weighted, True)


@pytest.mark.parametrize("weighted, chunks", [(24, 1), (25, 2), (70, 3), (120, 5)])
def test_the_head_runs_on_the_chunks_that_hold_weighted_rows(tiny_bert, rng, weighted, chunks):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", run_eagerly=True)
    x, y, w = batch(rng, weighted=min(weighted, 113))
    if weighted == 120:
        w = np.ones_like(w)  # padding too: every row
    seen, seen_by_reference = rows_seen(fast), rows_seen(reference)
    assert_same_training(fast, reference, (x, y, w), steps=1)
    # each chunk after the first runs again in the backward pass (keras.remat)
    assert seen == [(1, 24, 16)] * (2 * chunks - 1) and seen_by_reference == [(3, 40, 16)]
    np.testing.assert_allclose(fast.predict(x, verbose=0), reference.predict(x, verbose=0), rtol=1e-5, atol=1e-7)
    assert seen[-1] == (3, 40, 16)  # predict: probabilities at every position


@pytest.mark.slow
def test_weighted_metrics_match_and_fit_on_a_dataset(tiny_bert, rng):
    import tensorflow as tf

    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                      weighted_metrics=["sparse_categorical_accuracy"])
    x, y, w = batch(rng, shape=(4, 24), weighted=8)
    w[3] = 1.0  # more than a fifth of the second batch: its later chunks update the metrics too
    data = tf.data.Dataset.from_tensor_slices(((x[0], x[1]), y, w)).batch(2)
    histories = [model.fit(data, epochs=2, verbose=0).history for model in (fast, reference)]
    for key in ("loss", "sparse_categorical_accuracy"):
        np.testing.assert_allclose(histories[0][key], histories[1][key], rtol=1e-5)


@pytest.mark.slow
def test_no_weighted_position_gives_zero_loss_and_no_update(tiny_bert, rng):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    x, y, w = batch(rng)
    before = fast.get_weights()
    assert fast.train_on_batch(x, y, sample_weight=np.zeros_like(w)) == 0.0
    assert reference.train_on_batch(x, y, sample_weight=np.zeros_like(w)) == 0.0
    for a, b in zip(before, fast.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("compile_kwargs, weights, on_rows", [
    ({"metrics": ["sparse_categorical_accuracy"]}, True, False),  # unweighted metrics see every position
    ({"loss_weights": 0.5}, True, False),
    ({}, False, True),  # no sample weight: every position is in the loss, inside the same step
])
def test_falls_back_to_keras_step(tiny_bert, rng, compile_kwargs, weights, on_rows):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", **compile_kwargs)
    x, y, w = batch(rng)
    assert fast.runs_head_on_rows() == on_rows
    if weights:
        assert_same_training(fast, reference, (x, y, w), steps=1)
    else:
        np.testing.assert_allclose(fast.train_on_batch(x, y), reference.train_on_batch(x, y), rtol=1e-5)
        for a, b in zip(fast.get_weights(), reference.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_other_losses_and_the_switches(tiny_bert):
    fast, _ = pair(tiny_bert)
    for loss in ("categorical_crossentropy", keras.losses.SparseCategoricalCrossentropy(ignore_class=0)):
        fast.compile(optimizer="adam", loss=loss)
        assert not fast.runs_head_on_rows()
    fast.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    fast.make_train_function()
    fast.head_chunks = 3  # traced again
    assert fast.train_function is None and fast.runs_head_on_rows()
    fast.head_on_weighted_positions = False
    assert not fast.runs_head_on_rows()
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="head_chunks"):
            fast.head_chunks = bad


@pytest.mark.slow
def test_keras_round_trip_keeps_the_class_compilation_and_step(tiny_bert, rng, tmp_path):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    data = batch(rng)
    assert_same_training(fast, reference, data, steps=1)
    fast.save(tmp_path / "mlm.keras")
    loaded = keras.models.load_model(tmp_path / "mlm.keras")
    assert isinstance(loaded, MaskedLMModel) and loaded.compiled
    assert len(loaded.weights) == len(fast.weights)
    assert loaded.runs_head_on_rows()
    assert_same_training(loaded, reference, data, steps=2)


MIRRORED = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, numpy as np
    from bert4long.models import build_transformer_model
    config, checkpoint = sys.argv[1:3]
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, 60, (4, 16)).astype("int32")
    labels = rng.integers(5, 60, (4, 16)).astype("int32")
    weights = (rng.random((4, 16)) < 0.3).astype("float32")
    losses = {}
    for fast in (True, False):
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            model = build_transformer_model(config, checkpoint, with_mlm=True, dropout_rate=0.0,
                                            attention_dropout_rate=0.0)
            model.head_on_weighted_positions = fast
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
        data = tf.data.Dataset.from_tensor_slices(((tokens, np.zeros_like(tokens)), labels, weights)).batch(4)
        losses[str(fast)] = model.fit(data, epochs=3, verbose=0).history["loss"]
    print(json.dumps(losses))
""")


@pytest.mark.slow
def test_mirrored_strategy_losses_match(tiny_bert):
    config, checkpoint, _ = tiny_bert
    result = subprocess.run([sys.executable, "-c", MIRRORED, config, checkpoint], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    losses = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(losses["True"], losses["False"], rtol=1e-5)
    assert losses["True"][-1] < losses["True"][0]
