"""Global projections are a projection plug point of MultiHeadAttention: the layer builds and owns
``query_global``/``key_global``/``value_global`` and hands the kernel their queries, keys and values."""
import pathlib

import keras
import numpy as np
import pytest
from paths import FILES

from bert4long.attention import MultiHeadAttention

DATA = pathlib.Path(FILES)
HEADS, SIZE, LENGTH = 2, 4, 12


def inputs():
    x = np.random.default_rng(0).standard_normal((2, LENGTH, HEADS * SIZE)).astype("float32")
    mask = np.ones((2, LENGTH), "int32")
    mask[0, 5] = 2          # a global token in example 0
    mask[1, 10:] = 0
    return x, mask


def layer_and_model(**options):
    layer = MultiHeadAttention(heads=HEADS, head_size=SIZE, name="mha", **options)
    x, mask = keras.Input((LENGTH, HEADS * SIZE)), keras.Input((LENGTH,), dtype="int32")
    return layer, keras.Model([x, mask], layer([x, mask]))


def test_longformer_saved_when_its_kernel_owned_the_projections_loads():
    """A tiny Longformer (transformers' weights, perturbed) saved by main 0adf7f1, whose kernel created and held
    query_global/key_global/value_global: it loads into the layer's projections and gives the same logits."""
    data = np.load(DATA / "longformer_saved_with_kernel_projections.npz")
    model = keras.saving.load_model(DATA / "longformer_saved_with_kernel_projections.keras")
    inputs = [data["ids"], data["segments"], data["mask"]]
    # float32 logits (|x| <= 0.65) after 2 layers: another processor rounds them a few steps (2e-7) apart;
    # 1e-6 still fails a 1% change of one weight (3e-4 here) and the zeroed projection below (2e-4)
    tolerance = dict(atol=1e-6, rtol=0)
    np.testing.assert_allclose(model.predict(inputs, verbose=0), data["logits"], **tolerance)
    layer = model.get_layer("Transformer-1-MultiHeadSelfAttention")
    assert layer.global_projections_kind == "trained"
    # transformers' query_global of layer 1 (from the folder's model.safetensors) is the layer's, and is read
    # (stored bytes read back: exact)
    np.testing.assert_array_equal(layer.query_global.kernel.numpy(), data["query_global_1"])
    layer.query_global.kernel.assign(np.zeros(layer.query_global.kernel.shape))
    assert not np.allclose(model.predict(inputs, verbose=0), data["logits"], **tolerance)


@pytest.mark.parametrize("attention,config,kind", [
    ("sliding_window", {"window": 4, "global_tokens": [0]}, "from_local"),
    ("longformer", {"window": 4, "max_global_tokens": 2}, "trained"),
])
def test_the_layer_owns_the_projections_and_the_kernel_none(attention, config, kind):
    layer, _ = layer_and_model(attention=attention, attention_config=config)
    assert layer.global_projections_kind == kind
    projections = [layer.query_global, layer.key_global, layer.value_global]
    assert [dense.name for dense in projections] == ["query_global", "key_global", "value_global"]
    assert [w.path for w in layer.attention_kernel.weights] == ["mha/attention_kernel/probs_dropout/step"]
    assert layer.attention_kernel.global_projections == projections   # the name .keras files keep them under
    owned = {id(w) for dense in projections for w in dense.weights}
    assert owned <= {id(w) for w in layer.trainable_weights} and len(layer.trainable_weights) == 14


def test_only_a_kernel_with_global_tokens_gets_global_projections():
    layer, _ = layer_and_model(attention="sliding_window", attention_config={"window": 4, "global_tokens": [],
                                                                             "max_global_tokens": 0})
    assert layer.global_projections_kind is None and not hasattr(layer, "query_global")
    with pytest.raises(ValueError, match="global_projections='trained' needs a kernel with global tokens"):
        MultiHeadAttention(heads=HEADS, head_size=SIZE, global_projections="trained")
    with pytest.raises(ValueError, match="global_projections must be one of"):
        MultiHeadAttention(heads=HEADS, head_size=SIZE, attention="longformer", global_projections=True)


def test_global_queries_change_only_the_global_rows():
    layer, model = layer_and_model(attention="longformer", attention_config={"window": 4, "max_global_tokens": 2})
    before = model.predict(inputs(), verbose=0)
    layer.query_global.kernel.assign(np.zeros(layer.query_global.kernel.shape))
    # rows that never read query_global run the same ops on the same bits: exactly unchanged
    changed = np.abs(model.predict(inputs(), verbose=0) - before).max(axis=-1) > 0
    expected = np.zeros_like(changed)
    expected[0, 5] = True
    np.testing.assert_array_equal(changed, expected)


@pytest.mark.parametrize("kind", ["from_local", "trained"])
def test_after_weights_loaded_copies_local_projections_only_from_local(kind):
    layer, _ = layer_and_model(attention="sliding_window", attention_config={"window": 4, "global_tokens": [0]},
                               global_projections=kind)
    before = [w.numpy().copy() for w in layer.query_global.weights]
    layer.after_weights_loaded()
    expected = [w.numpy() for w in layer.q_dense.weights] if kind == "from_local" else before
    for weight, value in zip(layer.query_global.weights, expected):
        np.testing.assert_array_equal(weight.numpy(), value)
    assert not np.array_equal(before[0], layer.q_dense.kernel.numpy())   # the two cases differ


def test_round_trip_keeps_the_option_and_the_outputs(tmp_path):
    layer, model = layer_and_model(attention="longformer", attention_config={"window": 4, "max_global_tokens": 2},
                                   global_projections="trained")
    layer.value_global.bias.assign(np.full(layer.value_global.bias.shape, 0.5))
    expected = model.predict(inputs(), verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.get_layer("mha").get_config()["global_projections"] == "trained"
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(loaded.predict(inputs(), verbose=0), expected)


@pytest.mark.parametrize("marked", [[], [5], [0, 3, 11], [1, 2, 4, 6, 9]])
def test_the_slots_the_layer_gathers_at_are_the_ones_the_kernel_fills(marked):
    """The layer asks for the slots at the unpadded length, the kernel at its padded length: the same slots."""
    from bert4long.attention import SlidingWindowAttention

    kernel = SlidingWindowAttention(window=8, global_tokens=[2], max_global_tokens=4)
    mask = np.ones((1, LENGTH), "int32")
    mask[0, marked] = 2
    mask = keras.ops.convert_to_tensor(mask)
    positions, valid = (np.asarray(t) for t in kernel.global_slots(mask, LENGTH))
    for padded in (16, 20, 64):
        again = kernel.global_slots(mask, padded)
        np.testing.assert_array_equal(np.asarray(again[0]), positions)
        np.testing.assert_array_equal(np.asarray(again[1]), valid)
    chosen = sorted({2, *marked})[:4]
    assert positions[0, :len(chosen)].tolist() == chosen and valid[0].tolist() == [True] * len(chosen) + [False] * (
        4 - len(chosen))
