"""CRF, Viterbi, GlobalPointer and Loss layers against brute force / numpy references."""
import itertools
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from bert4long.layers.crf import ConditionalRandomField
from bert4long.layers.global_pointer import EfficientGlobalPointer, GlobalPointer
from bert4long.layers.loss import Loss
from bert4long.snippets import ViterbiDecoder

RNG = np.random.default_rng(1)


def _path_score(nodes, trans, path):
    return sum(nodes[t, y] for t, y in enumerate(path)) + sum(trans[a, b] for a, b in zip(path[:-1], path[1:]))


def _brute_force_nll(nodes, trans, labels):
    """-log p(labels) by enumerating every label path of len(labels)."""
    length, num_labels = len(labels), trans.shape[0]
    scores = [_path_score(nodes, trans, p) for p in itertools.product(range(num_labels), repeat=length)]
    log_z = np.log(np.sum(np.exp(scores)))
    return log_z - _path_score(nodes, trans, labels)


def _crf_with_weights(num_labels, lr_multiplier=1):
    crf = ConditionalRandomField(lr_multiplier=lr_multiplier)
    crf.build((None, None, num_labels))
    trans = RNG.standard_normal((num_labels, num_labels)).astype("float32")
    crf._trans.assign(trans / lr_multiplier)
    return crf, trans


@pytest.mark.parametrize("lr_multiplier", [1, 10])
def test_crf_loss_equals_brute_force_enumeration(lr_multiplier):
    crf, trans = _crf_with_weights(3, lr_multiplier)
    np.testing.assert_allclose(np.asarray(crf.trans), trans, rtol=1e-5)
    nodes = RNG.standard_normal((2, 4, 3)).astype("float32")
    labels = np.array([[0, 2, 1, 1], [2, 0, 1, 0]])
    lengths = [4, 3]  # the second sequence has one padded position
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    y_pred = crf(nodes, mask=mask)
    assert np.isneginf(np.asarray(y_pred)[1, 3]).all()
    sparse = np.asarray(crf.sparse_loss(labels, y_pred))
    dense = np.asarray(crf.dense_loss(np.eye(3)[labels], y_pred))
    expected = [_brute_force_nll(nodes[i, : lengths[i]], trans, labels[i, : lengths[i]]) for i in range(2)]
    np.testing.assert_allclose(sparse, expected, rtol=1e-4)
    np.testing.assert_allclose(dense, expected, rtol=1e-4)
    accuracy = float(crf.sparse_accuracy(labels[..., None], y_pred))
    hits = (nodes.argmax(-1) == labels) & mask
    assert accuracy == pytest.approx(hits.sum() / mask.sum())


def test_crf_loss_compiles_with_xla_and_trains_the_transitions():
    crf, _ = _crf_with_weights(3)
    nodes = tf.constant(RNG.standard_normal((2, 5, 3)).astype("float32"))
    labels = tf.constant([[0, 1, 2, 0, 1], [2, 2, 1, 0, 0]])

    @tf.function(jit_compile=True)
    def loss_and_grad(nodes):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(crf.sparse_loss(labels, crf(nodes)))
        return loss, tape.gradient(loss, crf._trans)

    loss, grad = loss_and_grad(nodes)
    eager = np.mean([_brute_force_nll(nodes.numpy()[i], np.asarray(crf.trans), labels.numpy()[i]) for i in range(2)])
    assert float(loss) == pytest.approx(eager, rel=1e-4)
    assert np.abs(grad.numpy()).sum() > 0


def test_crf_serialization_round_trip(tmp_path):
    x = keras.Input((None, 4))
    crf = ConditionalRandomField(lr_multiplier=5, name="crf")
    model = keras.Model(x, crf(keras.layers.Dense(3)(x)))
    model.compile(optimizer="adam", loss=crf.sparse_loss)
    data = RNG.standard_normal((4, 6, 4)).astype("float32")
    model.fit(data, RNG.integers(0, 3, (4, 6)), epochs=1, verbose=0)
    path = str(tmp_path / "crf.keras")
    model.save(path)
    loaded = keras.models.load_model(path, compile=False)
    assert loaded.get_layer("crf").get_config()["lr_multiplier"] == 5
    np.testing.assert_allclose(np.asarray(loaded.get_layer("crf").trans), np.asarray(crf.trans), rtol=1e-6)
    np.testing.assert_allclose(loaded.predict(data, verbose=0), model.predict(data, verbose=0), rtol=1e-5)


@pytest.mark.parametrize("starts,ends", [(None, None), ([0, 1], [2])])
def test_viterbi_equals_brute_force(starts, ends):
    trans = RNG.standard_normal((3, 3))
    for _ in range(5):
        nodes = RNG.standard_normal((5, 3))
        kept = nodes.copy()
        paths = [p for p in itertools.product(range(3), repeat=5)
                 if (starts is None or p[0] in starts) and (ends is None or p[-1] in ends)]
        best = max(paths, key=lambda p: _path_score(nodes, trans, p))
        assert ViterbiDecoder(trans, starts, ends).decode(nodes).tolist() == list(best)
        np.testing.assert_array_equal(nodes, kept)  # the caller's array is left alone


def _np_rope(x):
    """Rotate consecutive pairs (x[2i], x[2i+1]) of the last axis by angle pos * 10000^(-2i/d)."""
    length, dim = x.shape[1], x.shape[-1]
    theta = 10000.0 ** (-2 * np.arange(dim // 2) / dim)
    angles = np.arange(length)[:, None] * theta  # [n, d/2]
    shape = (1, length) + (1,) * (x.ndim - 3) + (dim // 2,)
    cos, sin = np.cos(angles).reshape(shape), np.sin(angles).reshape(shape)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def _np_finish(logits, mask, tril):
    keep = mask[:, None, :, None] & mask[:, None, None, :]
    if tril:
        keep = keep & np.triu(np.ones(logits.shape[-2:], bool))
    return np.where(keep, logits, -np.inf)


@pytest.mark.parametrize("rope,tril", [(True, True), (False, False)])
def test_global_pointer_matches_numpy(rope, tril):
    heads, head_size = 2, 4
    layer = GlobalPointer(heads, head_size, RoPE=rope, tril_mask=tril)
    x = RNG.standard_normal((2, 5, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    out = np.asarray(layer(x, mask=mask))
    kernel, bias = (np.asarray(w) for w in layer.dense.weights)
    projected = (x @ kernel + bias).reshape(2, 5, heads, 2 * head_size)
    q, k = projected[..., :head_size], projected[..., head_size:]
    if rope:
        q, k = _np_rope(q), _np_rope(k)
    logits = np.einsum("bmhd,bnhd->bhmn", q, k) / math.sqrt(head_size)
    np.testing.assert_allclose(out, _np_finish(logits, mask, tril), rtol=1e-4, atol=1e-5)


def test_efficient_global_pointer_matches_numpy():
    heads, head_size = 3, 4
    layer = EfficientGlobalPointer(heads, head_size)
    x = RNG.standard_normal((2, 5, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    out = np.asarray(layer(x, mask=mask))
    p_kernel, p_bias = (np.asarray(w) for w in layer.p_dense.weights)
    q_kernel, q_bias = (np.asarray(w) for w in layer.q_dense.weights)
    p = x @ p_kernel + p_bias
    q, k = _np_rope(p[..., 0::2]), _np_rope(p[..., 1::2])
    logits = np.einsum("bmd,bnd->bmn", q, k)[:, None] / math.sqrt(head_size)
    type_bias = (p @ q_kernel + q_bias).transpose(0, 2, 1) / 2  # [b, 2*heads, n]
    # bert4keras's layout: odd bias rows score the start (m), even rows the end (n)
    logits = logits + type_bias[:, 1::2, :, None] + type_bias[:, 0::2, None, :]
    np.testing.assert_allclose(out, _np_finish(logits, mask, True), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", [GlobalPointer, EfficientGlobalPointer])
def test_global_pointers_save_load_and_xla(cls, tmp_path):
    x = keras.Input((None, 6))
    model = keras.Model(x, cls(2, 4, name="gp")(x))
    data = RNG.standard_normal((2, 5, 6)).astype("float32")
    path = str(tmp_path / "gp.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("gp").get_config() == model.get_layer("gp").get_config()
    np.testing.assert_allclose(loaded.predict(data, verbose=0), model.predict(data, verbose=0), rtol=1e-5)
    compiled = tf.function(model, jit_compile=True)
    np.testing.assert_allclose(compiled(data).numpy(), model.predict(data, verbose=0), rtol=1e-4, atol=1e-5)


@keras.saving.register_keras_serializable(package="bert4long_tests")
class SquaredError(Loss):
    def compute_loss(self, inputs, mask=None):
        y_true, y_pred = inputs
        return ops.square(y_true - y_pred)[:, 0]  # per example: the layer averages it


def test_loss_layer_adds_its_loss_and_trains(tmp_path):
    x, y = keras.Input((3,)), keras.Input((1,))
    prediction = keras.layers.Dense(1)(x)
    output = SquaredError(output_axis=1, name="loss")([y, prediction])
    model = keras.Model([x, y], output)
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    features = RNG.standard_normal((64, 3)).astype("float32")
    targets = features @ np.array([[1.0], [-2.0], [0.5]], "float32")
    history = model.fit((features, targets), epochs=20, batch_size=16, verbose=0).history["loss"]
    assert history[-1] < 0.2 * history[0]
    prediction_now = model.predict((features[:2], targets[:2]), verbose=0)
    expected = float(np.mean((prediction_now - targets[:2]) ** 2))
    assert float(model.evaluate((features[:2], targets[:2]), verbose=0)) == pytest.approx(expected, rel=1e-4)
    path = str(tmp_path / "loss.keras")
    model.save(path)
    assert keras.models.load_model(path).get_layer("loss").output_axis == 1


@pytest.mark.parametrize("axis,expected_values,expected_mask", [
    (None, [0.0, 1.0], [None, "m"]), (0, 0.0, None), ([1, 0], [1.0, 0.0], ["m", None])])
def test_loss_layer_output_axis(axis, expected_values, expected_mask):
    layer = SquaredError(output_axis=axis)
    a, b = np.zeros((2, 1), "float32"), np.ones((2, 1), "float32")
    out = layer([a, b])
    first = lambda tensor: float(np.asarray(tensor)[0, 0])  # noqa: E731
    values = [first(o) for o in out] if isinstance(out, (list, tuple)) else first(out)
    assert values == expected_values
    assert layer.compute_mask([a, b], [None, "m"]) == expected_mask
    assert float(ops.sum(layer.losses)) == pytest.approx(1.0)


def test_loss_layer_without_compute_loss_says_what_to_do():
    with pytest.raises(NotImplementedError, match="compute_loss"):
        Loss()(np.zeros((1, 2), "float32"))
