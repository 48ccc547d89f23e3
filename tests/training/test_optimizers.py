"""bert4long.optimizers: each factory changes training as bert4keras's does (numbers vs numpy)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long.optimizers import (
    Adam,
    AdamW,
    PiecewiseLinear,
    extend_with_exponential_moving_average,
    extend_with_gradient_accumulation,
    extend_with_piecewise_linear_lr,
    extend_with_weight_decay,
)

RNG = np.random.default_rng(2)
SGD = keras.optimizers.SGD


def _grads(seed, shapes=((3,), (2,))):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype("float32") for s in shapes]


def _variables(shapes=((3,), (2,)), names=("kernel", "bias")):
    return [keras.Variable(np.ones(s, "float32"), name=n) for s, n in zip(shapes, names)]


def test_piecewise_linear_lr_reaches_scheduled_values_at_scheduled_steps():
    SGDLR = extend_with_piecewise_linear_lr(SGD, name="SGDLR")
    optimizer = SGDLR(learning_rate=0.1, lr_schedule={4: 1, 8: 0.1})
    (w,) = _variables(shapes=((3,),), names=("w",))
    multipliers = np.interp(np.arange(12), [0, 4, 8, 12], [0, 1, 0.1, 0.1])
    for step in range(12):
        grad = _grads(step, shapes=((3,),))[0]
        before = w.numpy()
        assert float(optimizer.learning_rate) == pytest.approx(0.1 * multipliers[step], abs=1e-7)
        optimizer.apply([grad], [w])
        # SGD: the change is exactly -lr_t * grad, with lr_t the schedule at this step
        np.testing.assert_allclose(w.numpy(), before - 0.1 * multipliers[step] * grad, rtol=1e-5, atol=1e-7)
    assert float(optimizer.learning_rate) == pytest.approx(0.01)


def test_gradient_accumulation_of_k_steps_equals_one_step_on_a_k_times_batch():
    AdamGA = extend_with_gradient_accumulation(Adam, name="AdamGA")
    k, n = 3, 4
    features = RNG.standard_normal((2 * k * n, 5)).astype("float32")
    targets = RNG.standard_normal((2 * k * n, 1)).astype("float32")

    def model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])

    def train(net, optimizer, batch):
        for start in range(0, len(features), batch):
            x, y = features[start:start + batch], targets[start:start + batch]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((net(x) - y) ** 2)
            optimizer.apply(tape.gradient(loss, net.trainable_variables), net.trainable_variables)

    accumulated, big = model(), model()
    accumulator = AdamGA(learning_rate=0.1, grad_accum_steps=k)
    train(accumulated, accumulator, n)
    train(big, Adam(learning_rate=0.1), k * n)
    for a, b in zip(accumulated.get_weights(), big.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert int(accumulator.iterations) == 2  # two updates
    changed = model()
    assert not np.allclose(changed.get_weights()[0], accumulated.get_weights()[0])  # it did train


def test_ema_weights_are_the_moving_average():
    SGDEMA = extend_with_exponential_moving_average(SGD, name="SGDEMA")
    momentum = 0.8
    optimizer = SGDEMA(learning_rate=0.1, ema_momentum=momentum)
    variables = _variables()
    history = []
    for step in range(6):
        optimizer.apply(_grads(step), variables)
        history.append([v.numpy() for v in variables])
    raw = [v.numpy() for v in variables]
    average = history[0]  # numpy reference: the average starts at the first updated weights
    for weights in history[1:]:
        average = [momentum * a + (1 - momentum) * w for a, w in zip(average, weights)]
    optimizer.apply_ema_weights()
    for v, expected in zip(variables, average):
        np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6)
    optimizer.reset_old_weights()
    for v, expected in zip(variables, raw):
        np.testing.assert_array_equal(v.numpy(), expected)
    with pytest.raises(ValueError, match="apply_ema_weights"):
        optimizer.reset_old_weights()


def test_ema_keeps_raw_weights_after_fit():
    AdamEMA = extend_with_exponential_moving_average(Adam, name="AdamEMA")
    net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    optimizer = AdamEMA(learning_rate=0.1, ema_momentum=0.9)
    net.compile(optimizer=optimizer, loss="mse")
    net.fit(RNG.standard_normal((8, 2)), RNG.standard_normal((8, 1)), epochs=3, batch_size=4, verbose=0)
    raw = net.get_weights()
    optimizer.apply_ema_weights()
    assert not np.allclose(net.get_weights()[0], raw[0])  # fit() did not overwrite the raw weights
    optimizer.reset_old_weights()
    np.testing.assert_array_equal(net.get_weights()[0], raw[0])
    with pytest.raises(ValueError, match="train the model first"):
        AdamEMA().apply_ema_weights()


def test_weight_decay_with_regex_exclusions():
    SGDW = extend_with_weight_decay(SGD, name="SGDW")
    optimizer = SGDW(learning_rate=0.1, weight_decay_rate=0.5, exclude_from_weight_decay=["bias$", "Norm"])
    variables = _variables()
    grads = _grads(0)
    optimizer.apply(grads, variables)
    np.testing.assert_allclose(variables[0].numpy(), 1 - 0.1 * 0.5 * 1 - 0.1 * grads[0], rtol=1e-6)
    np.testing.assert_allclose(variables[1].numpy(), 1 - 0.1 * grads[1], rtol=1e-6)  # "bias" excluded


def _np_adam(w, grads, lr, b1=0.9, b2=0.999, eps=1e-6, decay=0.0, bias_correction=True):
    """bert4keras's Adam (with decoupled decay): w -= lr * (m_hat / (sqrt(v_hat) + eps) + decay * w)."""
    m = v = 0
    for t, g in enumerate(grads, 1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        m_hat, v_hat = (m / (1 - b1**t), v / (1 - b2**t)) if bias_correction else (m, v)
        w = w - lr * decay * w - lr * m_hat / (np.sqrt(v_hat) + eps)
    return w


@pytest.mark.parametrize("bias_correction", [True, False])
def test_adam_and_adamw_match_bert4keras_formula(bias_correction):
    grads = [_grads(i, shapes=((3,),))[0] for i in range(4)]
    for cls, kwargs, decay in [(Adam, {}, 0.0), (AdamW, {"weight_decay_rate": 0.1}, 0.1)]:
        (w,) = _variables(shapes=((3,),), names=("w",))
        optimizer = cls(learning_rate=0.01, bias_correction=bias_correction, **kwargs)
        for g in grads:
            optimizer.apply([g], [w])
        expected = _np_adam(np.ones(3), grads, 0.01, decay=decay, bias_correction=bias_correction)
        # Keras adds epsilon to sqrt(v) before the bias correction: gradients of order 1 keep
        # that difference (~eps / sqrt(1 - beta_2^t)) far below the tolerance.
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_factories_compose_and_survive_serialization(tmp_path):
    AdamWLR = extend_with_piecewise_linear_lr(AdamW, name="AdamWLR")
    AdamWLRGA = extend_with_gradient_accumulation(AdamWLR, name="AdamWLRGA")
    Everything = extend_with_exponential_moving_average(AdamWLRGA, name="Everything")
    optimizer = Everything(learning_rate=1e-3, lr_schedule={10: 1}, weight_decay_rate=0.05,
                           exclude_from_weight_decay=["bias"], grad_accum_steps=2, ema_momentum=0.99)
    config = optimizer.get_config()
    assert config["lr_schedule"] == {"10": 1.0} and config["learning_rate"] == pytest.approx(1e-3)
    assert config["grad_accum_steps"] == 2 and config["weight_decay_rate"] == 0.05
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(restored).__name__ == "Everything"
    assert restored.get_config() == config
    assert restored.gradient_accumulation_steps == 2 and restored.use_ema and restored.weight_decay == 0.05

    net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    net.compile(optimizer=optimizer, loss="mse")
    net.fit(RNG.standard_normal((8, 2)), RNG.standard_normal((8, 1)), epochs=1, batch_size=2, verbose=0)
    path = str(tmp_path / "model.keras")
    net.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.optimizer.get_config() == config
    assert int(loaded.optimizer.iterations) == int(optimizer.iterations) == 2


def test_adam_accepts_keras2_lr_spelling():
    assert float(Adam(lr=0.25).learning_rate) == 0.25
    # the default schedule {0: 1} is a constant multiplier of 1
    assert float(extend_with_piecewise_linear_lr(Adam)(lr=0.5).learning_rate) == 0.5


def test_bad_optimizer_arguments_are_explained():
    with pytest.raises(ValueError, match="grad_accum_steps"):
        extend_with_gradient_accumulation(Adam)(grad_accum_steps=1)
    with pytest.raises(ValueError, match="lr_schedule"):
        extend_with_piecewise_linear_lr(Adam)(learning_rate=PiecewiseLinear(1e-3, {1: 1}), lr_schedule={1: 1})
    with pytest.raises(ValueError, match="empty"):
        PiecewiseLinear(1e-3, {})
