"""bert4long.backend against numpy: K functions, set_gelu, search_layer, masking, losses."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long.backend import (
    K,
    batch_gather,
    multilabel_categorical_crossentropy,
    piecewise_linear,
    search_layer,
    sequence_masking,
    set_gelu,
    sparse_multilabel_categorical_crossentropy,
)

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 4)).astype("float32")
Y = RNG.standard_normal((2, 3, 4)).astype("float32")


def _np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# (K call, numpy reference); Keras 2 defaults (last axis etc.) are what is checked.
CASES = {
    "sum": (lambda: K.sum(X, axis=1), lambda: X.sum(1)),
    "sum_keepdims": (lambda: K.sum(X, 1, keepdims=True), lambda: X.sum(1, keepdims=True)),
    "mean": (lambda: K.mean(X, axis=-1), lambda: X.mean(-1)),
    "max": (lambda: K.max(X, axis=0), lambda: X.max(0)),
    "min": (lambda: K.min(X), lambda: X.min()),
    "prod": (lambda: K.prod(X, axis=2), lambda: X.prod(2)),
    "argmax_default_last_axis": (lambda: K.argmax(X), lambda: X.argmax(-1)),
    "argmin_default_last_axis": (lambda: K.argmin(X), lambda: X.argmin(-1)),
    "expand_dims_default_last": (lambda: K.expand_dims(X), lambda: X[..., None]),
    "concatenate_default_last": (lambda: K.concatenate([X, Y]), lambda: np.concatenate([X, Y], -1)),
    "concatenate_axis": (lambda: K.concatenate([X, Y], axis=1), lambda: np.concatenate([X, Y], 1)),
    "cumsum_default_first": (lambda: K.cumsum(X), lambda: np.cumsum(X, 0)),
    "cast": (lambda: K.cast(X > 0, K.floatx()), lambda: (X > 0).astype("float32")),
    "exp_log": (lambda: K.log(K.exp(X)), lambda: X),
    "pow": (lambda: K.pow(X, 3), lambda: X**3),
    "clip": (lambda: K.clip(X, -0.5, 0.5), lambda: np.clip(X, -0.5, 0.5)),
    "softmax": (lambda: K.softmax(X), lambda: _np_softmax(X)),
    "logsumexp": (lambda: K.logsumexp(X, axis=1), lambda: np.log(np.exp(X).sum(1))),
    "relu_leaky_capped": (lambda: K.relu(X, alpha=0.1, max_value=0.5),
                          lambda: np.minimum(np.where(X > 0, X, 0.1 * X), 0.5)),
    "l2_normalize": (lambda: K.l2_normalize(X, axis=-1),
                     lambda: X / np.sqrt((X**2).sum(-1, keepdims=True))),
    "permute_dimensions": (lambda: K.permute_dimensions(X, (2, 0, 1)), lambda: X.transpose(2, 0, 1)),
    "repeat_elements": (lambda: K.repeat_elements(X, 2, axis=1), lambda: np.repeat(X, 2, 1)),
    "reshape": (lambda: K.reshape(X, (6, 4)), lambda: X.reshape(6, 4)),
    "batch_flatten": (lambda: K.batch_flatten(X), lambda: X.reshape(2, -1)),
    "one_hot": (lambda: K.one_hot(np.array([0, 2]), 3), lambda: np.eye(3)[[0, 2]]),
    "gather": (lambda: K.gather(X, np.array([1, 1, 0])), lambda: X[[1, 1, 0]]),
    "dot": (lambda: K.dot(X, Y[0].T), lambda: X @ Y[0].T),
    "switch": (lambda: K.switch(X > 0, X, Y), lambda: np.where(X > 0, X, Y)),
    "zeros_floatx": (lambda: K.zeros((2, 3)), lambda: np.zeros((2, 3), "float32")),
    "arange": (lambda: K.arange(2, 7, 2), lambda: np.arange(2, 7, 2)),
    "sparse_cce_probs": (
        lambda: K.sparse_categorical_crossentropy(np.array([[1, 3, 0]] * 2), _np_softmax(X)),
        lambda: -np.log(np.take_along_axis(_np_softmax(X), np.array([[1, 3, 0]] * 2)[..., None], -1)[..., 0]),
    ),
    "sparse_cce_logits_trailing_1": (
        lambda: K.sparse_categorical_crossentropy(np.array([[[1], [3], [0]]] * 2), X, from_logits=True),
        lambda: -np.log(np.take_along_axis(_np_softmax(X), np.array([[1, 3, 0]] * 2)[..., None], -1)[..., 0]),
    ),
    "sparse_cce_float_labels": (
        lambda: K.sparse_categorical_crossentropy(np.array([[1.0, 3.0, 0.0]] * 2), X, from_logits=True),
        lambda: -np.log(np.take_along_axis(_np_softmax(X), np.array([[1, 3, 0]] * 2)[..., None], -1)[..., 0]),
    ),
    "categorical_crossentropy": (
        lambda: K.categorical_crossentropy(_np_softmax(Y), X, from_logits=True),
        lambda: -(_np_softmax(Y) * np.log(_np_softmax(X))).sum(-1),
    ),
    "binary_crossentropy": (
        lambda: K.binary_crossentropy((Y > 0).astype("float32"), X, from_logits=True),
        lambda: -((Y > 0) * np.log(1 / (1 + np.exp(-X))) + (Y <= 0) * np.log(1 - 1 / (1 + np.exp(-X)))),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_k_functions_match_numpy(name):
    ours, reference = CASES[name]
    np.testing.assert_allclose(np.asarray(ours()), reference(), rtol=1e-5, atol=1e-5)


def test_k_configuration_and_shapes():
    assert K.floatx() == "float32" and K.epsilon() == pytest.approx(1e-7)
    assert K.int_shape(X) == (2, 3, 4) and K.ndim(X) == 3
    assert K.dtype(K.cast(X, "float16")) == "float16"


def test_k_variables_get_and_set():
    v = K.variable(np.ones((2, 2)))
    K.set_value(v, np.full((2, 2), 3.0))
    w = K.variable(np.zeros(3))
    K.batch_set_value([(w, np.arange(3.0))])
    got = K.batch_get_value([v, w])
    np.testing.assert_array_equal(got[0], np.full((2, 2), 3.0))
    np.testing.assert_array_equal(K.eval(w), np.arange(3.0))


def test_k_functions_trace_inside_tf_function():
    @tf.function(jit_compile=True)
    def f(x):
        return K.sum(K.softmax(x), axis=-1) + 0 * K.cast(K.argmax(x), K.floatx()) * K.sum(K.expand_dims(x), -1)[..., 0]

    np.testing.assert_allclose(f(X).numpy(), np.ones((2, 3)), rtol=1e-5)


def test_in_train_phase_needs_explicit_training():
    assert K.in_train_phase(1, 2, training=True) == 1
    with pytest.raises(ValueError, match="training"):
        K.in_train_phase(1, 2)


@pytest.fixture
def restore_gelu():
    yield
    set_gelu("erf")


def test_set_gelu_switches_what_gelu_means(restore_gelu):
    from bert4long.layers.activations import get_activation

    x = np.linspace(-4, 4, 33).astype("float32")
    erf_form = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert np.abs(erf_form - tanh_form).max() > 1e-4  # the forms are distinguishable here
    set_gelu("TANH")
    np.testing.assert_allclose(np.asarray(get_activation("gelu")(x)), tanh_form, atol=1e-6)
    set_gelu("erf")
    np.testing.assert_allclose(np.asarray(get_activation("gelu")(x)), erf_form, atol=1e-6)


def test_set_gelu_rejects_unknown_version():
    with pytest.raises(ValueError, match="'erf'.*'tanh'|erf.*tanh"):
        set_gelu("relu")


def test_search_layer_walks_up_the_graph():
    x = keras.Input((3,))
    inner = keras.Sequential([keras.layers.Dense(4, name="deep")], name="block")
    h = keras.layers.Dense(4, name="body")(x)
    y = keras.layers.Dense(2, name="head")(inner(h))
    assert search_layer(y, "body").name == "body"
    assert search_layer(y, "head").name == "head"
    assert search_layer(y, "deep").name == "deep"  # inside a nested model
    assert search_layer(y, "missing") is None
    assert search_layer(keras.Model(x, y).get_layer("head"), "body").name == "body"


def test_batch_gather_matches_numpy_in_and_out_of_graph():
    params = RNG.standard_normal((2, 5, 3)).astype("float32")
    indices = np.array([[4, 0, 0], [1, 2, 3]])
    expected = np.take_along_axis(params, indices[..., None], axis=1)
    np.testing.assert_allclose(np.asarray(batch_gather(params, indices)), expected)
    np.testing.assert_allclose(tf.function(batch_gather)(params, indices).numpy(), expected)
    flat = params[..., 0]
    np.testing.assert_allclose(np.asarray(batch_gather(flat, indices.astype("float32"))),
                               np.take_along_axis(flat, indices, 1))


def test_sequence_masking_axes_and_bias():
    x = RNG.standard_normal((2, 2, 4, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
    out = np.asarray(sequence_masking(x, mask, -np.inf, [2, 3]))
    full = mask[:, None, :, None].astype(bool) & mask[:, None, None, :].astype(bool)
    np.testing.assert_array_equal(out, np.where(full, x, -np.inf))
    tril = np.triu(np.ones((4, 4), bool))
    out, got_mask = sequence_masking(x, mask, "-inf", [2, 3], tf.constant(tril), return_mask=True)
    np.testing.assert_array_equal(np.asarray(out), np.where(full & tril, x, -np.inf))
    np.testing.assert_array_equal(np.broadcast_to(np.asarray(got_mask), x.shape), np.broadcast_to(full & tril, x.shape))
    seq = RNG.standard_normal((2, 4, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(sequence_masking(seq, mask, 0)), seq * mask[..., None])
    np.testing.assert_array_equal(np.asarray(sequence_masking(seq)), seq)


def test_piecewise_linear_hits_the_schedule():
    schedule = {100: 1.0, 300: 0.1}
    steps = np.array([0, 50, 100, 200, 300, 1000])
    expected = [0.0, 0.5, 1.0, 0.55, 0.1, 0.1]
    np.testing.assert_allclose(np.asarray(piecewise_linear(steps, schedule)), expected, rtol=1e-6)
    # halves of whole numbers: every step of the interpolation is exact in float32
    np.testing.assert_allclose(np.asarray(piecewise_linear(steps, {0: 2.0, 100: 1.0})), [2, 1.5, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="empty"):
        piecewise_linear(0, {})


def _np_multilabel_ce(y_true, y_pred):
    neg = np.log1p(np.where(y_true == 0, np.exp(y_pred), 0).sum(-1))
    pos = np.log1p(np.where(y_true == 1, np.exp(-y_pred), 0).sum(-1))
    return neg + pos


def test_multilabel_losses_match_numpy():
    y_pred = RNG.standard_normal((3, 6)).astype("float32")
    positives = [[1, 4], [0, 0], [2, 5]]  # row 1 has the single positive 0
    y_true = np.zeros((3, 6), "float32")
    for row, ids in enumerate(positives):
        y_true[row, ids] = 1
    expected = _np_multilabel_ce(y_true, y_pred)
    np.testing.assert_allclose(np.asarray(multilabel_categorical_crossentropy(y_true, y_pred)), expected, rtol=1e-5)
    sparse = np.asarray(sparse_multilabel_categorical_crossentropy(np.array([[1, 4], [0, 0], [2, 5]]), y_pred))
    # row 1 lists class 0 twice: the sparse loss counts the positive twice only in its
    # exp-sum, so compare the rows that list distinct classes.
    np.testing.assert_allclose(sparse[[0, 2]], expected[[0, 2]], rtol=1e-4)


def test_sparse_multilabel_mask_zero_ignores_class_zero():
    y_pred = RNG.standard_normal((2, 5)).astype("float32")
    ids = np.array([[3, 0], [1, 2]])  # 0 pads the first row
    y_true = np.zeros((2, 5), "float32")
    y_true[0, 3] = y_true[1, 1] = y_true[1, 2] = 1
    expected = _np_multilabel_ce(y_true[:, 1:], y_pred[:, 1:])
    got = np.asarray(sparse_multilabel_categorical_crossentropy(ids, y_pred, mask_zero=True))
    np.testing.assert_allclose(got, expected, rtol=1e-4)
