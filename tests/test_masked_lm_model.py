"""`MaskedLMModel`: the bert4keras MLM recipe (full-vocabulary output, sparse cross-entropy, 0/1 mask as
sample weight) trained with the head on the weighted rows only must give Keras's own step's numbers.

The reference is the same model with ``head_on_weighted_positions = False`` (Keras's `train_step`,
untouched), built from the same checkpoint; dropout is off so both see the same function.
Tolerances: float32 rounding of a different summation order (losses rtol 1e-5, weights rtol 1e-5 + atol 1e-6 after
plain SGD steps: Adam would turn rounding on near-zero gradients into +-lr weight changes). With
``reduction="sum"`` the gradients, and so the SGD steps and their rounding, are larger by the number of weighted
rows (about 20 here), so that case allows atol 1e-5.
"""
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long.models import build_transformer_model
from bert4long.models.masked_lm import MaskedLMModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pair(tiny_bert, **kwargs):
    """(fast, reference) models from one checkpoint; the reference always runs Keras's step."""
    config, checkpoint, _ = tiny_bert
    models = [build_transformer_model(config, checkpoint, with_mlm=True, dropout_rate=0.0,
                                      attention_dropout_rate=0.0, hierarchical_position=True, **kwargs)
              for _ in range(2)]
    models[1].head_on_weighted_positions = False
    return models


def batch(rng, vocab=60, shape=(3, 40), rate=0.2):
    tokens = rng.integers(5, vocab, shape).astype("int32")
    tokens[0, -7:] = 0  # padding
    labels = rng.integers(5, vocab, shape).astype("int32")
    weights = ((rng.random(shape) < rate) & (tokens > 0)).astype("float32")
    return [tokens, np.zeros_like(tokens)], labels, weights


def assert_same_training(fast, reference, data, steps=3, atol=1e-6):
    x, y, w = data
    for _ in range(steps):
        np.testing.assert_allclose(fast.train_on_batch(x, y, sample_weight=w),
                                   reference.train_on_batch(x, y, sample_weight=w), rtol=1e-5)
    for a, b in zip(fast.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)


def test_builder_returns_masked_lm_model_only_for_a_lone_full_mlm_output(tiny_bert):
    config, checkpoint, _ = tiny_bert
    assert isinstance(build_transformer_model(config, checkpoint, with_mlm=True), MaskedLMModel)
    for kwargs in ({}, {"with_nsp": True, "with_mlm": True}, {"gathered_mlm": True}):
        assert not isinstance(build_transformer_model(config, checkpoint, **kwargs), MaskedLMModel), kwargs


@pytest.mark.parametrize("loss", ["sparse_categorical_crossentropy",
                                  keras.losses.SparseCategoricalCrossentropy(reduction="sum"),
                                  keras.losses.SparseCategoricalCrossentropy(reduction="mean_with_sample_weight")])
def test_weighted_rows_step_equals_keras_step(tiny_bert, rng, loss):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    data = batch(rng)
    assert fast.weighted_loss(tf.constant(data[1]), tf.constant(data[2])) is not None
    summed = isinstance(loss, keras.losses.Loss) and loss.reduction == "sum"
    assert_same_training(fast, reference, data, atol=1e-5 if summed else 1e-6)
    x, y, w = data
    np.testing.assert_allclose(fast.evaluate(x, y, sample_weight=w, verbose=0),
                               reference.evaluate(x, y, sample_weight=w, verbose=0), rtol=1e-5)


def test_weighted_metrics_match_and_fit_on_a_dataset(tiny_bert, rng):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                      weighted_metrics=["sparse_categorical_accuracy"])
    x, y, w = batch(rng, shape=(4, 24))
    data = tf.data.Dataset.from_tensor_slices(((x[0], x[1]), y, w)).batch(2)
    histories = [model.fit(data, epochs=2, verbose=0).history for model in (fast, reference)]
    for key in ("loss", "sparse_categorical_accuracy"):
        np.testing.assert_allclose(histories[0][key], histories[1][key], rtol=1e-5)


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


@pytest.mark.parametrize("compile_kwargs, weights", [
    ({"metrics": ["sparse_categorical_accuracy"]}, True),  # unweighted metrics see every position
    ({"loss_weights": 0.5}, True),
    ({"jit_compile": True}, True),  # XLA needs static shapes; the kept rows vary
    ({}, False),  # no sample weight: every position is in the loss
])
def test_falls_back_to_keras_step(tiny_bert, rng, compile_kwargs, weights):
    fast, reference = pair(tiny_bert)
    for model in (fast, reference):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", **compile_kwargs)
    x, y, w = batch(rng)
    w = w if weights else None
    assert fast.weighted_loss(tf.constant(y), None if w is None else tf.constant(w)) is None
    if weights:
        assert_same_training(fast, reference, (x, y, w), steps=1)


def test_other_losses_fall_back(tiny_bert):
    fast, _ = pair(tiny_bert)
    y, w = tf.zeros((2, 5), "int32"), tf.ones((2, 5))
    for loss in ("categorical_crossentropy", keras.losses.SparseCategoricalCrossentropy(ignore_class=0)):
        fast.compile(optimizer="adam", loss=loss)
        assert fast.weighted_loss(y, w) is None


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
    assert loaded.weighted_loss(tf.constant(data[1]), tf.constant(data[2])) is not None
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


def test_mirrored_strategy_losses_match(tiny_bert):
    config, checkpoint, _ = tiny_bert
    result = subprocess.run([sys.executable, "-c", MIRRORED, config, checkpoint], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(losses["True"], losses["False"], rtol=1e-5)
    assert losses["True"][-1] < losses["True"][0]
