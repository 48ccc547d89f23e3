"""Per-example global attention (Longformer's 0 pad / 1 local / 2 global mask input).

The kernel is checked against a float64 numpy softmax over the Longformer pattern
written here (window, the example's global tokens as keys and as queries, padding);
global projections are copied from the local ones, so that reference applies.
Tolerance: absolute 1e-5 (float32 kernel, O(1) values).
"""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long.attention import SlidingWindowAttention
from bert4long.attention.blocks import gather_positions
from bert4long.models import build_transformer_model

BATCH, LENGTH, HEADS, DIM, HIDDEN = 2, 30, 2, 4, 8
TOL = 1e-5


def global_mask():
    """Example 0: tokens 3 and 20 global; example 1: token 7 global and the last 6 tokens padding."""
    mask = np.ones((BATCH, LENGTH), "int32")
    mask[0, [3, 20]] = 2
    mask[1, 7] = 2
    mask[1, LENGTH - 6:] = 0
    return mask


def longformer_allowed(mask, one_side, dilation, fixed, causal):
    """``[b, q, k]``: ``j`` within the (dilated) window of ``i``, or either of them global; ``j`` real."""
    i, j = np.arange(LENGTH)[:, None], np.arange(LENGTH)[None, :]
    local = (np.abs(i - j) <= one_side * dilation) & ((i - j) % dilation == 0)
    is_global = (mask == 2) | np.isin(np.arange(LENGTH), fixed)[None]
    allowed = (local[None] | is_global[:, None, :] | is_global[:, :, None]) & (mask > 0)[:, None, :]
    return allowed & np.tri(LENGTH, dtype=bool) if causal else allowed


def reference(q, k, v, allowed):
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(allowed[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", probs / probs.sum(-1, keepdims=True), v)


def kernel_and_projections(seed=0, **config):
    kernel = SlidingWindowAttention(**config)
    denses = [keras.layers.Dense(HEADS * DIM, name=name) for name in ("q", "k", "v")]
    for dense in denses:
        dense.build((None, HIDDEN))
    hidden = np.random.default_rng(seed).standard_normal((BATCH, LENGTH, HIDDEN)).astype("float32")

    def run(hidden, mask):
        q, k, v = (np.reshape(dense(hidden), (BATCH, LENGTH, HEADS, DIM)) for dense in denses)
        positions, _ = kernel.global_slots(keras.ops.convert_to_tensor(mask), LENGTH)  # global q/k/v = local ones
        return q, k, v, np.asarray(kernel(q, k, v, mask, global_qkv=(gather_positions(q, positions), k, v)))

    return hidden, run


@pytest.mark.parametrize("window,dilation,fixed,causal", [
    (100, 1, [], False),      # window covers the sequence: exactly full attention
    (4, 1, [], False),
    (4, 1, [0], True),        # fixed [CLS] united with the mask's globals, causal
    (4, 2, [11], False),      # dilated window
])
def test_per_example_globals_follow_the_longformer_pattern(window, dilation, fixed, causal):
    mask = global_mask()
    hidden, run = kernel_and_projections(window=window, dilation=dilation, global_tokens=fixed, causal=causal,
                                         max_global_tokens=4)
    q, k, v, out = run(hidden, mask)
    allowed = longformer_allowed(mask, window // 2, dilation, fixed, causal)
    if window > 2 * LENGTH:
        assert allowed[0].all() and allowed[1][:, :LENGTH - 6].all()   # the reference is full attention
    real = mask > 0
    np.testing.assert_allclose(out[real], reference(q, k, v, allowed)[real], atol=TOL, rtol=0)


def test_marked_token_sees_and_is_seen_beyond_the_window():
    """Same inputs in both examples; token 5 and token 25 are marked 2 in example 0 and 1 in example 1."""
    hidden, run = kernel_and_projections(window=4, global_tokens=[], max_global_tokens=2)
    hidden[1] = hidden[0]
    mask = np.ones((BATCH, LENGTH), "int32")
    mask[0, 5] = 2
    base = run(hidden, mask)[3]

    def changed_rows(position):
        moved = hidden.copy()
        moved[:, position] += 3.0
        return np.abs(run(moved, mask)[3] - base).max(axis=(2, 3)) > 0   # [batch, length]

    far = changed_rows(25)      # 20 tokens away from token 5, window 2 each side
    assert far[0, 5] and not far[1, 5]   # a global query sees a far token, a local one does not
    assert not far[0, :5].any() and not far[1, :23].any()
    mask[:, 5] = 1
    mask[0, 25] = 2
    base = run(hidden, mask)[3]
    seen = changed_rows(25)
    assert seen[0, 5] and seen[0, :23].all()    # everyone attends to the global token 25
    assert not seen[1, 5] and not seen[1, :23].any()


def test_marks_beyond_max_global_tokens_attend_locally():
    mask = global_mask()
    hidden, run = kernel_and_projections(window=4, global_tokens=[], max_global_tokens=1)
    q, k, v, out = run(hidden, mask)
    first_only = mask.copy()
    first_only[0, 20] = 1           # example 0's second global token does not fit in one slot
    allowed = longformer_allowed(first_only, 2, 1, [], False)
    np.testing.assert_allclose(out[mask > 0], reference(q, k, v, allowed)[mask > 0], atol=TOL, rtol=0)


def test_bool_mask_ignores_max_global_tokens_and_bad_values_are_named():
    mask = global_mask()
    hidden, run = kernel_and_projections(window=4, global_tokens=[2], max_global_tokens=3)
    q, k, v, out = run(hidden, mask > 0)   # a padding mask: only the fixed global token
    allowed = longformer_allowed((mask > 0).astype("int32"), 2, 1, [2], False)
    np.testing.assert_allclose(out[mask > 0], reference(q, k, v, allowed)[mask > 0], atol=TOL, rtol=0)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="max_global_tokens must be a non-negative integer"):
            SlidingWindowAttention(max_global_tokens=bad)


# --- inside a model: the Input-Attention-Mask input ------------------------------------------


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("global_config") / "bert_config.json"
    path.write_text(json.dumps(dict(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        hidden_act="gelu", max_position_embeddings=64, type_vocab_size=2, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )))
    return str(path)


def model_inputs(length=37):
    token_ids = np.random.default_rng(0).integers(1, 50, (2, length)).astype("int32")
    token_ids[1, 30:] = 0
    mask = (token_ids > 0).astype("int32")
    mask[0, [0, 17]] = 2
    mask[1, [0, 29]] = 2
    return [token_ids, np.zeros_like(token_ids), mask]


def global_model(config_path, **options):
    return build_transformer_model(
        config_path, None, attention="sliding_window", attention_mask_input=True,
        attention_config={"window": 4, "global_tokens": [], "max_global_tokens": 3}, **options,
    )


def test_model_input_changes_the_output_and_full_attention_reads_it_as_padding(config_path):
    model = global_model(config_path)
    assert [t.name for t in model.inputs] == ["Input-Token", "Input-Segment", "Input-Attention-Mask"]
    inputs = model_inputs()
    local = [inputs[0], inputs[1], np.minimum(inputs[2], 1)]
    assert np.abs(np.asarray(model(inputs)) - np.asarray(model(local)))[0, 0].max() > 1e-4
    full = build_transformer_model(config_path, None, attention_mask_input=True)
    plain = build_transformer_model(config_path, None)
    plain.set_weights(full.get_weights())
    expected = np.asarray(plain(inputs[:2]))
    real = inputs[0] > 0
    np.testing.assert_allclose(np.asarray(full(inputs))[real], expected[real], atol=TOL)


@pytest.mark.slow
def test_model_with_global_mask_trains_under_xla_and_round_trips(config_path, tmp_path):
    model = global_model(config_path, recompute=True)
    inputs = model_inputs()
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function(jit_compile=True)
    def train_step(token_ids, segment_ids, mask):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model([token_ids, segment_ids, mask], training=True)[:, :, 0] - 1.0))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, grads

    loss, grads = train_step(*inputs)
    assert np.isfinite(float(loss)) and all(np.isfinite(tf.convert_to_tensor(g)).all() for g in grads)
    key_global = model.get_layer("Transformer-0-MultiHeadSelfAttention").key_global.kernel
    assert np.abs(np.asarray(grads[[id(v) for v in model.trainable_variables].index(id(key_global))])).max() > 0
    expected = np.asarray(model(inputs))
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded(inputs), expected, atol=TOL)
