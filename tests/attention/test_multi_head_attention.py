"""MultiHeadAttention in bert4long.attention: saved files, the kernel's name, external memory."""
import io
import pathlib
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from paths import FILES

import bert4long.layers
from bert4long.attention import FullAttention, MultiHeadAttention, TypicalRelativeAttention, get_attention_kernel
from bert4long.attention.positions import RelativePositions, RotaryPositions

DATA = pathlib.Path(FILES)


def test_the_layers_name_is_the_registered_class():
    assert bert4long.layers.MultiHeadAttention is MultiHeadAttention
    assert keras.saving.get_registered_name(MultiHeadAttention) == "bert4long>MultiHeadAttention"


def test_file_saved_before_the_move_and_rename_loads():
    """Saved by the code where the kernel was ``.kernel`` in bert4long/layers/attention.py (and NEZHA's
    positions were no kernel); its sliding-window global projections, LSH rotations and dropout steps
    were changed before saving."""
    model = keras.saving.load_model(DATA / "mha_saved_before_rename.keras")
    data = np.load(DATA / "mha_saved_before_rename.npz")
    # float32 outputs (|y| <= 4.1) of 5 attention layers in a row: another processor (or XLA, 1.7e-6 here) rounds
    # them a few steps apart; a 1% change of any projection kernel moves them by 1e-3 or more. The LSH buckets are an
    # argmax whose top two differ by 0.017 or more here: the same on every processor.
    np.testing.assert_allclose(model.predict([data["x"], data["mask"]], verbose=0), data["y"], atol=1e-5, rtol=0)
    assert int(model.get_layer("full_attention").attention_kernel.probs_dropout.step.numpy()) == 7
    nezha = model.get_layer("nezha_attention").attention_kernel
    assert isinstance(nezha, TypicalRelativeAttention) and int(nezha.probs_dropout.step.numpy()) == 5


def test_file_of_modernbert_attention_as_its_own_layer_loads():
    """Saved by the code where `ModernBertAttention` was a layer of its own (its output projection
    ``output_dense``): a local and a global layer with changed weights."""
    bert4long.register_keras_classes()
    model = keras.saving.load_model(DATA / "modernbert_attention_saved_as_its_own_layer.keras")
    data = np.load(DATA / "modernbert_attention_saved_as_its_own_layer.npz")
    np.testing.assert_allclose(model.predict([data["x"], data["mask"]], verbose=0), data["y"], atol=1e-5, rtol=0)


def test_round_trip_saves_the_kernel_under_its_name(tmp_path):
    x = keras.Input((12, 8))
    mask = keras.Input((12,), dtype="bool")
    layer = MultiHeadAttention(heads=2, head_size=4, attention="lsh",
                               attention_config=dict(bucket_size=4, num_buckets=2, num_hashes=1, seed=3))
    model = keras.Model([x, mask], layer([x, mask]))
    layer.attention_kernel.rotations.assign(layer.attention_kernel.rotations * 0.5)
    inputs = [np.random.default_rng(0).standard_normal((2, 12, 8)).astype("float32"), np.ones((2, 12), bool)]
    path = tmp_path / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        names = []
        h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r").visit(names.append)
    assert any(name.endswith("attention_kernel/vars/0") for name in names)
    assert not any("/kernel/" in name for name in names)
    loaded = keras.saving.load_model(path)
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(loaded.predict(inputs, verbose=0), model.predict(inputs, verbose=0))


def test_memory_is_attended_and_carries_no_gradient(rng):
    layer = MultiHeadAttention(heads=2, head_size=4)
    x = tf.constant(rng.standard_normal((1, 5, 8)).astype("float32"))
    memory = tf.constant(rng.standard_normal((1, 3, 8)).astype("float32"))
    layer([x, np.ones((1, 5), bool)])
    keep = np.ones((1, 8), bool)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, memory])
        y = layer([x, keep], memory=memory)
    assert tape.gradient(y, memory) is None
    assert tape.gradient(y, x) is not None
    # the segment's queries see the keys and values of [memory; segment]
    np.testing.assert_allclose(layer([tf.concat([memory, x], axis=1), keep])[:, 3:], y, atol=1e-6)
    no_memory = layer([x, np.ones((1, 5), bool)])
    masked_memory = layer([x, np.r_[[False] * 3, [True] * 5][None]], memory=memory)
    assert not np.allclose(y, no_memory, atol=1e-4)
    np.testing.assert_allclose(masked_memory, no_memory, atol=1e-6)


@pytest.mark.parametrize("option", [dict(positions=RotaryPositions()), dict(causal=True)])
def test_memory_refuses_positions_inside_attention(option):
    layer = MultiHeadAttention(heads=2, head_size=4, **option)
    x = np.zeros((1, 5, 8), "float32")
    with pytest.raises(ValueError, match="memory"):
        layer([x, np.ones((1, 7), bool)], memory=np.zeros((1, 2, 8), "float32"))


def test_nezha_positions_are_a_registered_kernel():
    kernel = get_attention_kernel("typical_relative", max_relative_position=4)
    assert isinstance(kernel, TypicalRelativeAttention) and isinstance(kernel, FullAttention)
    layer = MultiHeadAttention(heads=2, head_size=4, positions=RelativePositions(4))
    assert isinstance(layer.attention_kernel, TypicalRelativeAttention)
    assert layer.get_config()["attention"] == "full"  # the configuration keeps bert4keras's names
    with pytest.raises(ValueError, match="only attention='full'"):
        MultiHeadAttention(heads=2, head_size=4, positions=RelativePositions(4), attention="chunked")
    saved = {"heads": 2, "head_size": 4, "position_bias": "typical_relative", "max_relative_position": 4}
    restored = MultiHeadAttention.from_config(saved)   # a config saved with bert4keras's strings
    assert isinstance(restored.positions, RelativePositions) and restored.positions.max_relative_position == 4
    assert isinstance(MultiHeadAttention.from_config({**saved, "position_bias": "rotary"}).positions, RotaryPositions)


def _rotate_half_reference(x, theta):
    """Rotate-half rotary positions of ``x [batch, length, heads, dim]`` in numpy (float64)."""
    dim = x.shape[-1]
    angles = np.arange(x.shape[1])[:, None] * theta ** (-np.arange(0, dim, 2) / dim)
    cos, sin = np.cos(angles)[None, :, None], np.sin(angles)[None, :, None]
    first, second = x[..., : dim // 2], x[..., dim // 2:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def test_fused_qkv_with_rotate_half_equals_separate_projections_and_numpy(rng):
    """One ``qkv`` projection split in three equals ``query``/``key``/``value`` with those weights, and both
    equal a numpy reference of rotate-half positions and masked softmax attention."""
    from bert4long.attention.positions import RotateHalfPositions

    heads, size, length, theta = 2, 4, 7, 500.0
    x = rng.standard_normal((2, length, heads * size)).astype("float32")
    mask = np.ones((2, length), bool)
    mask[1, 5:] = False
    fused = MultiHeadAttention(heads, size, positions=RotateHalfPositions(theta), fused_qkv=True)
    separate = MultiHeadAttention(heads, size, positions=RotateHalfPositions(theta))
    fused([x, mask]), separate([x, mask])
    w, b = rng.standard_normal((8, 24)).astype("float32"), rng.standard_normal(24).astype("float32")
    wo, bo = rng.standard_normal((8, 8)).astype("float32"), rng.standard_normal(8).astype("float32")
    fused.qkv.set_weights([w, b])
    for index, dense in enumerate((separate.q_dense, separate.k_dense, separate.v_dense)):
        dense.set_weights([w[:, 8 * index: 8 * (index + 1)], b[8 * index: 8 * (index + 1)]])
    for layer in (fused, separate):
        layer.o_dense.set_weights([wo, bo])
    q, k, v = (np.reshape(x.astype("float64") @ w[:, 8 * i: 8 * (i + 1)] + b[8 * i: 8 * (i + 1)],
                          (2, length, heads, size)) for i in range(3))
    q, k = _rotate_half_reference(q, theta), _rotate_half_reference(k, theta)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(size) + np.where(mask, 0, -1e12)[:, None, None]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    expected = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(2, length, 8) @ wo + bo
    np.testing.assert_allclose(fused([x, mask]), expected, atol=2e-5)
    # one [8, 24] product or three [8, 8] ones: a matmul kernel may sum in another order (XLA: 3.8e-6 at |y| <= 20,
    # two float32 steps); swapping key and value in the split moves the outputs by 25
    np.testing.assert_allclose(fused([x, mask]), separate([x, mask]), atol=1e-5, rtol=0)
    clone = MultiHeadAttention.from_config(fused.get_config())
    assert clone.fused_qkv and clone.positions.theta == theta and clone.window is None
