"""Efficient attention kernels against an independent float64 numpy reference.

Tolerances: float32 kernels vs the float64 reference, absolute 1e-5 on outputs
and gradients (values and scores are O(1)); approximations are checked for the
property they promise (exact on the pattern they cover, error trend).
"""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long.attention import (
    BigBirdAttention,
    ChunkedAttention,
    LSHAttention,
    PerformerAttention,
    SlidingWindowAttention,
    get_attention_kernel,
)
from bert4long.attention.blocks import gather_positions
from bert4long.models import build_transformer_model

BATCH, LENGTH, HEADS, DIM, HIDDEN = 2, 45, 2, 8, 16
TOL = 1e-5


def reference(q, k, v, allowed, bias=None, d_out=None):
    """Float64 softmax attention restricted to ``allowed [b, q, k]``; with ``d_out`` also the gradients."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    scores = np.where(allowed[:, None], scores, -np.inf)
    with np.errstate(invalid="ignore"):  # rows with no allowed key (padded queries) become NaN
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", probs, v)
    if d_out is None:
        return out
    d_v = np.einsum("bhqk,bqhd->bkhd", probs, d_out)
    d_p = np.einsum("bqhd,bkhd->bhqk", d_out, v)
    d_s = probs * (d_p - (d_p * probs).sum(-1, keepdims=True))
    d_q = np.einsum("bhqk,bkhd->bqhd", d_s, k) / np.sqrt(q.shape[-1])
    d_k = np.einsum("bhqk,bqhd->bkhd", d_s, q) / np.sqrt(q.shape[-1])
    return out, (d_q, d_k, d_v, d_s)


def padding_mask(length=LENGTH):
    mask = np.ones((BATCH, length), bool)
    mask[1, length - 12:] = False
    return mask


def allowed_by(mask, causal, pattern=None):
    """``[b, q, k]``: key is real, (causal) not in the future, and in ``pattern [q, k]``."""
    length = mask.shape[1]
    allowed = np.broadcast_to(mask[:, None, :], (BATCH, length, length))
    if causal:
        allowed = allowed & np.tri(length, dtype=bool)
    if pattern is not None:
        allowed = allowed & pattern
    return allowed


def random_qkv(length=LENGTH, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal((BATCH, length, HEADS, DIM))).astype("float32") for _ in range(3)]


def assert_real_rows_close(actual, expected, mask, atol=TOL):
    """Compare rows of real tokens (padded queries' outputs are don't-care)."""
    np.testing.assert_allclose(np.asarray(actual)[mask], expected[mask], atol=atol, rtol=0)


# --- chunked ---------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_chunked_equals_full_outputs_and_gradients(causal, with_bias):
    q, k, v = random_qkv()
    mask = padding_mask()
    bias = np.random.default_rng(1).standard_normal((BATCH, 1, LENGTH, LENGTH)).astype("float32")
    d_out = np.random.default_rng(2).standard_normal((BATCH, LENGTH, HEADS, DIM))
    kernel = ChunkedAttention(block_size=16, causal=causal)  # 45 keys: 3 blocks, the last padded
    tensors = [tf.constant(t) for t in (q, k, v, bias)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        out = kernel(*tensors[:3], mask, bias=tensors[3] if with_bias else None)
        loss = tf.reduce_sum(out * tf.constant(d_out * mask[:, :, None, None], tf.float32))
    grads = tape.gradient(loss, tensors)
    expected, expected_grads = reference(
        q, k, v, allowed_by(mask, causal), bias if with_bias else None, d_out * mask[:, :, None, None]
    )
    assert_real_rows_close(out, expected, mask)
    for grad, ref in zip(grads[:3], expected_grads[:3]):
        np.testing.assert_allclose(grad, ref, atol=TOL, rtol=0)
    if with_bias:
        np.testing.assert_allclose(grads[3], expected_grads[3].sum(1, keepdims=True), atol=TOL, rtol=0)
    else:
        assert grads[3] is None


def test_chunked_dropout_gradient_uses_the_forward_masks():
    q, k, v = random_qkv(length=20)
    mask = np.ones((BATCH, 20), bool)
    kernel = ChunkedAttention(block_size=8, dropout_rate=0.3, seed=5)
    start = kernel.seed_generator.state.numpy()
    weights = tf.constant(np.random.default_rng(3).standard_normal(q.shape), tf.float64)

    def loss(q, v):  # same per-call seed every time: same dropout masks
        kernel.seed_generator.state.assign(start)
        out = kernel(tf.cast(q, tf.float32), k, tf.cast(v, tf.float32), mask, training=True)
        return tf.reduce_sum(tf.cast(out, tf.float64) * weights)

    assert not np.allclose(kernel(q, k, v, mask, training=True), kernel(q, k, v, mask))
    point = [tf.constant(q, tf.float64), tf.constant(v, tf.float64)]
    with tf.GradientTape() as tape:
        tape.watch(point)
        value = loss(*point)
    grads = tape.gradient(value, point)
    rng = np.random.default_rng(4)
    direction = [rng.standard_normal(q.shape) for _ in point]
    step = 1e-2  # central difference along a random direction vs the analytic directional derivative
    plus = loss(*(x + step * d for x, d in zip(point, direction)))
    minus = loss(*(x - step * d for x, d in zip(point, direction)))
    analytic = sum(float(tf.reduce_sum(g * d)) for g, d in zip(grads, direction))
    np.testing.assert_allclose((float(plus) - float(minus)) / (2 * step), analytic, rtol=2e-3)


# --- sliding window (Longformer) ------------------------------------------------------------


def projected_inputs(kernel, length=LENGTH, seed=0):
    """Hidden states, Q/K/V from local projections, the projection function; the global ones are the same."""
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((BATCH, length, HIDDEN)).astype("float32")
    denses = [keras.layers.Dense(HEADS * DIM) for _ in range(3)]
    for dense in denses:
        dense.build((None, HIDDEN))

    def project(hidden):
        return [np.reshape(dense(hidden), (BATCH, length, HEADS, DIM)) for dense in denses]

    return (hidden, *project(hidden), project)


def with_globals(kernel, q, k, v, mask):
    """``global_qkv`` of the kernel's global slots when the global projections equal the local ones."""
    positions, _ = kernel.global_slots(keras.ops.convert_to_tensor(mask), q.shape[1])
    return gather_positions(q, positions), k, v


def longformer_pattern(length, one_side, dilation, global_tokens):
    i, j = np.arange(length)[:, None], np.arange(length)[None, :]
    local = (np.abs(i - j) <= one_side * dilation) & ((i - j) % dilation == 0)
    is_global = np.isin(np.arange(length), global_tokens)
    return local | is_global[None, :] | is_global[:, None]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window,dilation,global_tokens", [(200, 1, [0]), (6, 1, [0, 9]), (4, 3, [])])
def test_sliding_window_equals_reference_on_its_pattern(causal, window, dilation, global_tokens):
    kernel = SlidingWindowAttention(window=window, dilation=dilation, global_tokens=global_tokens, causal=causal)
    hidden, q, k, v, _ = projected_inputs(kernel)
    mask = padding_mask()
    out = kernel(q, k, v, mask, global_qkv=with_globals(kernel, q, k, v, mask))
    pattern = longformer_pattern(LENGTH, window // 2, dilation, global_tokens)
    assert_real_rows_close(out, reference(q, k, v, allowed_by(mask, causal, pattern)), mask)


def test_sliding_window_locality_and_global_token():
    kernel = SlidingWindowAttention(window=6, global_tokens=[0])
    hidden, q, k, v, project = projected_inputs(kernel)
    mask = np.ones((BATCH, LENGTH), bool)
    base = np.asarray(kernel(q, k, v, mask, global_qkv=with_globals(kernel, q, k, v, mask)))

    def changed_rows(position):
        moved = hidden.copy()
        moved[:, position] += 3.0
        moved_qkv = project(moved)
        out = np.asarray(kernel(*moved_qkv, mask, global_qkv=with_globals(kernel, *moved_qkv, mask)))
        return np.abs(out - base).max(axis=(0, 2, 3)) > 0  # rows that never read it: the same ops on the same bits

    changed = changed_rows(30)  # token 30 is more than 3 away from tokens <= 26 and >= 34
    assert not changed[1:27].any() and not changed[34:].any()  # outside its window: untouched
    assert changed[27:34].all()  # inside its window
    assert changed[0]  # the global token sees everything
    assert changed_rows(0).all()  # everyone sees the global token


def test_sliding_window_global_projections_are_separate_weights():
    kernel = SlidingWindowAttention(window=6, global_tokens=[0])
    hidden, q, k, v, _ = projected_inputs(kernel)
    mask = np.ones((BATCH, LENGTH), bool)
    before = np.asarray(kernel(q, k, v, mask, global_qkv=with_globals(kernel, q, k, v, mask)))
    global_q, global_k, global_v = with_globals(kernel, q, k, v, mask)
    after = np.asarray(kernel(q, k, v, mask, global_qkv=(np.zeros_like(global_q), global_k, global_v)))
    np.testing.assert_array_equal(before[:, 1:], after[:, 1:])  # they never read global_q: the same bits
    assert not np.allclose(before[:, 0], after[:, 0])


def test_sliding_window_errors():
    with pytest.raises(ValueError, match="must be even"):
        SlidingWindowAttention(window=5)
    with pytest.raises(ValueError, match="distinct non-negative"):
        SlidingWindowAttention(global_tokens=[0, 0])
    q, k, v = random_qkv()
    with pytest.raises(ValueError, match="hidden"):
        SlidingWindowAttention(window=6)(q, k, v, padding_mask())
    with pytest.raises(ValueError, match="cannot apply a dense attention bias"):
        SlidingWindowAttention(window=6, global_tokens=[])(q, k, v, padding_mask(), bias=np.zeros((1, 1, 45, 45)))


# --- BigBird ---------------------------------------------------------------------------------


def bigbird_pattern(kernel, length):
    """Token-level pattern from the kernel's block pattern (global query blocks see everything)."""
    block = kernel.block_size
    num_blocks = -(-length // block)
    indices, valid = (np.asarray(t) for t in kernel.block_pattern(num_blocks))
    blocks = np.zeros((num_blocks, num_blocks), bool)
    for row in range(num_blocks):
        blocks[row, indices[row][valid[row]]] = True
    blocks[: kernel.num_global_blocks] = True
    return np.kron(blocks, np.ones((block, block), bool))[:length, :length]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "config",
    [
        dict(num_window_blocks=17, num_global_blocks=0, num_random_blocks=0),  # every block selected
        dict(num_window_blocks=3, num_global_blocks=1, num_random_blocks=1),
        dict(num_window_blocks=1, num_global_blocks=2, num_random_blocks=2),
    ],
)
def test_bigbird_equals_reference_on_its_pattern(causal, config):
    kernel = BigBirdAttention(block_size=5, seed=7, causal=causal, **config)  # 9 blocks
    q, k, v = random_qkv()
    mask = padding_mask()
    pattern = bigbird_pattern(kernel, LENGTH)
    if config["num_window_blocks"] == 17:
        assert pattern.all()
    else:
        assert 0.2 < pattern.mean() < 0.9  # genuinely sparse
    out = kernel(q, k, v, mask)
    assert_real_rows_close(out, reference(q, k, v, allowed_by(mask, causal, pattern)), mask)


def test_bigbird_random_pattern_is_a_function_of_seed_and_length():
    pattern = lambda seed, n: np.asarray(BigBirdAttention(seed=seed).block_pattern(n)[0])  # noqa: E731
    np.testing.assert_array_equal(pattern(3, 20), pattern(3, 20))
    assert not np.array_equal(pattern(3, 20), pattern(4, 20))
    randoms = pattern(3, 20)[:, 4:]  # 3 window blocks, 1 global, 3 random
    assert len({tuple(row) for row in randoms}) > 10  # differs between rows
    window = np.arange(20)[:, None] + np.arange(-1, 2)[None, :]
    assert not any(np.isin(randoms[row], np.append(window[row], 0)).any() for row in range(20))


# --- Performer -------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_performer_error_falls_with_more_features(causal):
    q, k, v = random_qkv(scale=0.5)
    mask = padding_mask()
    expected = reference(q, k, v, allowed_by(mask, causal))
    errors = []
    for num_features in (8, 128, 2048):
        kernel = PerformerAttention(num_features=num_features, block_size=16, seed=1, causal=causal)
        kernel.build_kernel(HEADS, DIM, HIDDEN)
        errors.append(np.abs(np.asarray(kernel(q, k, v, mask)) - expected)[mask].mean())
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.02


def test_performer_features_are_seeded_and_redrawn():
    q, k, v = random_qkv(scale=0.5)
    kernels = [PerformerAttention(num_features=16, seed=seed) for seed in (1, 1, 2)]
    for kernel in kernels:
        kernel.build_kernel(HEADS, DIM, HIDDEN)
    outs = [np.asarray(kernel(q, k, v, padding_mask())) for kernel in kernels]
    np.testing.assert_array_equal(outs[0], outs[1])  # one seed, the same features: the same ops on the same bits
    assert not np.allclose(outs[0], outs[2])
    kernels[0].redraw(2)
    np.testing.assert_array_equal(np.asarray(kernels[0](q, k, v, padding_mask())), outs[2])


# --- LSH (Reformer) --------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_lsh_one_bucket_one_chunk_equals_full(causal):
    kernel = LSHAttention(bucket_size=64, num_buckets=1, num_hashes=3, seed=0, causal=causal)
    kernel.build_kernel(HEADS, DIM, HIDDEN)
    q, k, v = random_qkv()
    mask = padding_mask()
    assert_real_rows_close(kernel(q, k, v, mask), reference(q, k, v, allowed_by(mask, causal)), mask)


def test_lsh_one_bucket_attends_to_neighbouring_chunks():
    kernel = LSHAttention(bucket_size=8, num_buckets=1, num_hashes=1, seed=0)  # sorted order = positions
    kernel.build_kernel(HEADS, DIM, HIDDEN)
    q, k, v = random_qkv()
    mask = padding_mask()
    chunk = np.arange(LENGTH) // 8
    pattern = np.abs(chunk[:, None] - chunk[None, :]) <= 1
    assert_real_rows_close(kernel(q, k, v, mask), reference(q, k, v, allowed_by(mask, False, pattern)), mask)


def test_lsh_hashes_into_buckets_and_stays_close_to_full():
    q, k, v = random_qkv()
    mask = padding_mask()
    expected = reference(q, k, v, allowed_by(mask, False))
    errors = []
    for num_hashes in (1, 8):
        kernel = LSHAttention(bucket_size=8, num_buckets=4, num_hashes=num_hashes, seed=0)
        kernel.build_kernel(HEADS, DIM, HIDDEN)
        order = np.asarray(kernel.sort_order(q))
        assert not np.array_equal(order[:, 0], np.broadcast_to(np.arange(LENGTH)[:, None], order[:, 0].shape))
        errors.append(np.abs(np.asarray(kernel(q, k, v, mask)) - expected)[mask].mean())
    assert errors[1] < errors[0]


def test_config_errors():
    with pytest.raises(ValueError, match="num_buckets must be 1 or even"):
        LSHAttention(num_buckets=3)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        ChunkedAttention(block_size=0)
    with pytest.raises(ValueError, match="must be odd"):
        BigBirdAttention(num_window_blocks=2)
    with pytest.raises(ValueError, match="Unknown attention"):
        get_attention_kernel("sparse")
    q, k, v = random_qkv()
    for kernel in (PerformerAttention(), LSHAttention()):  # their random weights come from build_kernel
        with pytest.raises(ValueError, match="needs build_kernel"):
            kernel(q, k, v, padding_mask())


# --- every variant inside a model: XLA training step, .keras, SavedModel ---------------------

VARIANTS = {
    "chunked": dict(block_size=16),
    "sliding_window": dict(window=8, global_tokens=[0, 3]),
    "bigbird": dict(block_size=8, num_random_blocks=1, seed=2),
    "performer": dict(num_features=16, seed=1),
    "lsh": dict(bucket_size=8, num_buckets=4, num_hashes=2, seed=1),
}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "bert_config.json"
    config = dict(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        hidden_act="gelu", max_position_embeddings=64, type_vocab_size=2, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_in_model_xla_train_keras_and_savedmodel(name, config_path, tmp_path):
    model = build_transformer_model(config_path, None, attention=name, attention_config=VARIANTS[name])
    kernel = model.get_layer("Transformer-0-MultiHeadSelfAttention").attention_kernel
    assert kernel.get_config() == type(kernel).from_config(kernel.get_config()).get_config()
    token_ids = np.random.default_rng(0).integers(1, 50, (2, 37)).astype("int32")
    token_ids[1, 30:] = 0
    inputs = [token_ids, np.zeros_like(token_ids)]
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function(jit_compile=True)
    def train_step(token_ids, segment_ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model([token_ids, segment_ids], training=True)[:, :, 0] - 1.0))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss, grads

    loss, grads = train_step(*inputs)
    assert np.isfinite(float(loss)) and all(np.isfinite(tf.convert_to_tensor(g)).all() for g in grads)
    expected = np.asarray(model(inputs))
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded(inputs), expected, atol=TOL)
    if name == "bigbird":  # the random pattern is rebuilt from the saved seed
        loaded_kernel = loaded.get_layer("Transformer-0-MultiHeadSelfAttention").attention_kernel
        np.testing.assert_array_equal(loaded_kernel.block_pattern(5)[0], kernel.block_pattern(5)[0])
    model.export(str(tmp_path / "saved"), format="tf_saved_model", verbose=False)
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_allclose(restored.serve(inputs), expected, atol=TOL)


def test_chunked_model_equals_full_model_with_unilm_bias(config_path):
    models = [build_transformer_model(config_path, None, application="unilm", attention=name,
                                      attention_config=config)
              for name, config in (("full", {}), ("chunked", {"block_size": 16}))]
    models[1].set_weights(models[0].get_weights())
    token_ids = np.random.default_rng(1).integers(1, 50, (2, 37)).astype("int32")
    token_ids[1, 30:] = 0
    segment_ids = (np.arange(37) >= 20).astype("int32")[None].repeat(2, axis=0)
    full, chunked = (np.asarray(model([token_ids, segment_ids])) for model in models)
    np.testing.assert_allclose(chunked, full, atol=TOL)
