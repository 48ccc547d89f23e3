"""``mixed_float16`` (what ``--precision auto`` picks on a GPU) trains, on CPU, with every kernel.

float16 holds nothing beyond 65,504: a mask score of -1e12 added in float16 is
-inf, and a query whose keys are all padding then gets ``nan``. The kernels
score, mask and softmax in float32; this checks it end to end with long
padding, and that Keras's loss scaling is on (steps with overflowing gradients
skipped) and the loss goes down.
"""
import json

import keras
import numpy as np
import pytest

from bert4long.layers import LayerNormalization
from bert4long.models import build_transformer_model
from bert4long.training import compile_finetune, make_optimizer
from bert4long.training.mlm import dtype_policy

KERNELS = {
    "full": {},
    "chunked": {"block_size": 8},
    "sliding_window": {"window": 8, "global_tokens": [0]},
    "bigbird": {"block_size": 4, "num_random_blocks": 1, "seed": 2},
    "performer": {"num_features": 16, "block_size": 8, "seed": 1},
    "lsh": {"bucket_size": 4, "num_buckets": 4, "num_hashes": 1, "seed": 1},
    "longformer": {"window": 8},
    "block_sparse": {"block_size": 4, "num_random_blocks": 1, "num_heads": 2, "max_position": 64},
    "typical_relative": {"max_relative_position": 8},
}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "bert_config.json"
    path.write_text(json.dumps({
        "vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 32, "hidden_act": "gelu", "max_position_embeddings": 64, "type_vocab_size": 2,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
    }))
    return str(path)


@pytest.fixture(autouse=True)
def restore_policy():
    yield
    keras.config.set_dtype_policy("float32")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KERNELS))
def test_mixed_float16_trains_with_padding(name, config_path):
    keras.utils.set_random_seed(0)
    with dtype_policy("mixed_float16"):
        encoder = build_transformer_model(config_path, None, attention=name, attention_config=KERNELS[name])
        cls = keras.layers.Lambda(lambda x: x[:, 0], name="CLS")(encoder.output)
        logits = keras.layers.Dense(2, dtype="float32", name="Logits")(cls)
        model = keras.Model(encoder.inputs, logits)
    attention = model.get_layer("Transformer-0-MultiHeadSelfAttention")
    norm = model.get_layer("Transformer-0-FeedForward-Norm")
    assert attention.compute_dtype == "float16" and attention.variable_dtype == "float32"
    assert norm.variable_dtype == "float32" and not norm.autocast  # Keras normalizes in float32
    assert model.output.dtype == "float32"

    rng = np.random.default_rng(0)
    tokens = rng.integers(5, 50, (4, 40)).astype("int32")
    tokens[1, 12:] = 0  # 28 padded positions: whole windows, blocks and buckets of padding
    tokens[3, 30:] = 0
    labels = (tokens[:, 1] > 27).astype("int32")
    inputs = [tokens, np.zeros_like(tokens)]

    # every position, padded queries included, gets a finite attention output
    probe = keras.Model(model.inputs, attention.output)
    hidden = np.asarray(probe(inputs))
    assert hidden.dtype == np.float16 and np.isfinite(hidden).all()

    compile_finetune(model, make_optimizer(3e-3, total_steps=20, warmup_steps=0), jit_compile=False)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    # Dynamic loss scaling starts at 2**15 and skips the steps whose scaled float16 gradients
    # overflow, halving the scale each time (3 here): 8 steps leave a few real updates.
    losses = [float(model.train_on_batch(inputs, labels)[0]) for _ in range(8)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.05, losses
    assert 1.0 <= float(model.optimizer.dynamic_scale) < 2.0**15
    assert 0 < int(model.optimizer.iterations) < 8, int(model.optimizer.iterations)


def test_every_registered_kernel_is_covered():
    from bert4long.attention.base import _KERNELS

    assert sorted(_KERNELS) == sorted(KERNELS), "add the new kernel (a tiny config) to KERNELS above"


def test_masked_scores_stay_float32_in_the_softmax():
    """The float16 scores of a padded row, masked with -1e12, give float32 probabilities, no nan."""
    from bert4long.attention import get_attention_kernel

    kernel = get_attention_kernel("full")
    scores = np.random.default_rng(1).normal(0, 4, (1, 2, 3, 5)).astype("float16")
    key_mask = np.array([[True, True, False, False, False]])
    probs = kernel.attention_probs(scores, key_mask, None, False)
    assert probs.dtype == "float32"
    probs = np.asarray(probs)
    assert np.isfinite(probs).all() and (probs[..., 2:] == 0).all()
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    # all keys padded: a uniform row, not nan
    assert np.isfinite(np.asarray(kernel.attention_probs(scores, np.zeros((1, 5), bool), None, False))).all()


def test_conditional_layer_norm_in_mixed_float16():
    with dtype_policy("mixed_float16"):
        layer = LayerNormalization(conditional=True, hidden_units=4)
        out = layer([np.full((2, 3, 8), 300.0, "float32") * np.arange(8), np.ones((2, 6), "float32")])
    assert out.dtype == "float16" and all(w.dtype == "float32" for w in layer.weights)
    assert np.isfinite(np.asarray(out)).all()  # 300 * 7 squared overflows float16: statistics are float32
