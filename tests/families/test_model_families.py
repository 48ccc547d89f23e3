"""NEZHA, RoFormer and ELECTRA beyond the family suite (tests/families/test_family_suite.py: build, parity at 16 tokens,
round trips, XLA step, mixed precision, pretrain): lengths beyond the config, clipping, chunked and causal attention,
bad input."""
import keras
import numpy as np
import pytest
import tensorflow as tf
from numpy_bert import read_weights
from numpy_families import bert_heads, encoder_forward, nezha_relative_table

from bert4long.attention.positions import RelativePositions, RotaryPositions
from bert4long.families import family
from bert4long.layers import MultiHeadAttention, RelativePositionEmbedding, SinusoidalPositionEmbedding
from bert4long.models import build_transformer_model
from bert4long.testing import TINY_CONFIG

N = TINY_CONFIG["max_position_embeddings"]  # 16: lengths above it prove there is no position table
HEADS, LAYERS, VOCAB = TINY_CONFIG["num_attention_heads"], TINY_CONFIG["num_hidden_layers"], TINY_CONFIG["vocab_size"]
KEY_SIZE = TINY_CONFIG["hidden_size"] // HEADS
M = dict(family("nezha").tiny.config)["max_relative_position"]  # the shared tiny NEZHA's (5): clipping at short lengths
# float32 model vs float64 reference through 2 layers and LayerNorms.
ATOL, RTOL = 2e-5, 1e-4


def random_batch(rng, length, pad_last=3):
    tokens = rng.integers(5, VOCAB, size=(2, length)).astype("int32")
    tokens[:, 0] = 2
    tokens[1, length - pad_last:] = 0
    segments = np.zeros_like(tokens)
    segments[:, length // 2:] = 1
    segments[tokens == 0] = 0
    return tokens, segments


def predict(model, tokens, segments):
    """The model's outputs as a list (one array or several)."""
    outputs = model.predict([tokens, segments], verbose=0)
    return outputs if isinstance(outputs, list) else [outputs]


@pytest.fixture(scope="module")
def checkpoints(tiny_family):
    """The shared tiny checkpoints (`conftest.tiny_family`): ``(config_path, checkpoint_prefix)``."""
    return {name: (tiny_family(name).config, tiny_family(name).checkpoint) for name in ("nezha", "roformer", "electra")}


@pytest.fixture(scope="module")
def models(checkpoints):
    """NEZHA and RoFormer with their pooler and MLM logits."""
    return {name: build_transformer_model(*checkpoints[name], model=name, with_pool=True, with_mlm="linear")
            for name in ("nezha", "roformer")}


def reference(checkpoints, name, tokens, segments, max_relative_position=M):
    w = read_weights(checkpoints[name][1])
    positions = {"nezha": "relative", "roformer": "rotary", "electra": "absolute"}[name]
    prefix = "electra/" if name == "electra" else "bert/"
    return w, encoder_forward(w, tokens, segments, HEADS, LAYERS, positions=positions,
                              max_relative_position=max_relative_position, prefix=prefix)


@pytest.mark.parametrize("name", ["nezha", "roformer"])
@pytest.mark.parametrize("length", [N + 7, 3 * N])  # up to N: tests/families/test_family_suite.py
def test_relative_models_match_reference_beyond_max_position(checkpoints, models, rng, name, length):
    tokens, segments = random_batch(rng, length)
    pooled, logits = models[name].predict([tokens, segments], verbose=0)
    w, sequence = reference(checkpoints, name, tokens, segments)
    ref_pooled, ref_logits = bert_heads(w, sequence)
    real = tokens != 0  # padded positions' outputs are unspecified
    np.testing.assert_allclose(pooled, ref_pooled, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(logits[real], ref_logits[real], atol=ATOL, rtol=RTOL)


def test_nezha_clipping_changes_outputs(checkpoints, rng):
    """The parity above would fail if the package ignored max_relative_position."""
    tokens, segments = random_batch(rng, 3 * N, pad_last=0)
    _, clipped = reference(checkpoints, "nezha", tokens, segments, max_relative_position=M)
    _, unclipped = reference(checkpoints, "nezha", tokens, segments, max_relative_position=3 * N)
    assert np.abs(clipped - unclipped).max() > 1e-2


def test_electra_encoder_only_and_projection(checkpoints):
    config_path, checkpoint_path = checkpoints["electra"]
    encoder = build_transformer_model(config_path, checkpoint_path, model="electra", return_keras_model=False)
    assert encoder.model.output.shape[-1] == TINY_CONFIG["hidden_size"]
    assert encoder.model.get_layer("Embedding-Mapping").kernel.shape == (8, TINY_CONFIG["hidden_size"])
    with pytest.raises(ValueError):
        encoder.model.get_layer("Discriminator-Dense")


def test_rotary_composes_with_chunked_attention(checkpoints, models, rng):
    config_path, checkpoint_path = checkpoints["roformer"]
    chunked = build_transformer_model(config_path, checkpoint_path, model="roformer", with_pool=True,
                                      with_mlm="linear", attention="chunked", attention_config={"block_size": 8})
    tokens, segments = random_batch(rng, 2 * N + 5)
    for a, b in zip(predict(chunked, tokens, segments), predict(models["roformer"], tokens, segments)):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nezha", "roformer"])
def test_xla_forward_at_lengths_beyond_the_config_matches_eager(models, rng, name):
    """(One XLA training step per family: tests/families/test_family_suite.py.)"""
    model = models[name]

    @tf.function(jit_compile=True, reduce_retracing=True)
    def forward(tokens, segments):
        return model([tokens, segments], training=False)

    for length in (9, 2 * N + 3):
        tokens, segments = random_batch(rng, length)
        _, logits = forward(tf.constant(tokens), tf.constant(segments))
        np.testing.assert_allclose(logits.numpy(), model([tokens, segments])[1].numpy(), atol=1e-5)


# ------------------------------------------------------------------ position layers
def test_position_layers_follow_formulas():
    dim, length = 8, 300
    angles = np.arange(length)[:, None] / 10000.0 ** (2 * np.arange(dim // 2)[None] / dim)
    expected = np.stack([np.sin(angles), np.cos(angles)], -1).reshape(length, dim)
    x = np.random.default_rng(0).standard_normal((2, length, dim)).astype("float32")
    added = keras.ops.convert_to_numpy(SinusoidalPositionEmbedding(dim)(x))
    np.testing.assert_allclose(added, x + expected[None], atol=1e-4)  # float32 angles up to 300 rad
    relative = keras.ops.convert_to_numpy(RelativePositionEmbedding(M, dim)([x[:, :40], x[:, :40]]))
    np.testing.assert_allclose(relative, nezha_relative_table(40, M, dim), atol=1e-5)


# ------------------------------------------------------------------ bad input and defaults
def test_nezha_max_relative_position_default_and_config(checkpoints):
    roformer_config = checkpoints["roformer"][0]  # a config without max_relative_position
    nezha = build_transformer_model(roformer_config, model="nezha", return_keras_model=False)
    assert nezha.max_relative_position == 64
    positions = nezha.model.get_layer("Transformer-0-MultiHeadSelfAttention").positions
    assert isinstance(positions, RelativePositions) and positions.max_relative_position == 64
    from_config = build_transformer_model(checkpoints["nezha"][0], model="nezha")
    assert from_config.get_layer("Transformer-1-MultiHeadSelfAttention").positions.max_relative_position == M
    for bad in (0, -3, 2.5, True, "64"):
        with pytest.raises(ValueError, match=r"max_relative_position must be a positive int.*64"):
            build_transformer_model(roformer_config, model="nezha", max_relative_position=bad)


def test_unsupported_combinations_name_the_fix(checkpoints):
    nezha_config, roformer_config, electra_config = (checkpoints[n][0] for n in ("nezha", "roformer", "electra"))
    with pytest.raises(ValueError, match=r"only attention='full'.*model='roformer'"):
        build_transformer_model(nezha_config, model="nezha", attention="chunked")
    with pytest.raises(ValueError, match="no position table, so hierarchical_position does not apply"):
        build_transformer_model(roformer_config, model="roformer", hierarchical_position=True)
    with pytest.raises(ValueError, match=r"no with_mlm head.*with_discriminator=True"):
        build_transformer_model(electra_config, model="electra", with_mlm=True)
    long_roformer = build_transformer_model(roformer_config, model="roformer", sequence_length=4 * N)
    assert long_roformer.inputs[0].shape == (None, 4 * N)
    with pytest.raises(ValueError, match="position_bias='alibi' names no positions"):   # a saved config's string
        MultiHeadAttention.from_config({"heads": 2, "head_size": 4, "position_bias": "alibi"})
    with pytest.raises(ValueError, match="positive even size"):
        MultiHeadAttention(heads=2, head_size=3, positions=RotaryPositions())
    with pytest.raises(ValueError, match=r"key_size \(4\) must equal head_size \(6\)"):
        MultiHeadAttention(heads=2, head_size=6, key_size=4, positions=RelativePositions(8))


@pytest.mark.parametrize("name", ["nezha", "roformer"])
def test_causal_lm_matches_reference(checkpoints, rng, name):
    """application='lm' adds the causal mask to NEZHA's own attention path and to the rotary kernel path."""
    config_path, checkpoint_path = checkpoints[name]
    lm = build_transformer_model(config_path, checkpoint_path, model=name, application="lm", with_mlm="linear")
    length = N + 4
    tokens, segments = random_batch(rng, length, pad_last=0)
    causal = np.tril(np.ones((length, length), bool))[None].repeat(2, 0)
    w = read_weights(checkpoint_path)
    sequence = encoder_forward(w, tokens, segments, HEADS, LAYERS, positions={"nezha": "relative"}.get(name, "rotary"),
                               max_relative_position=M, attention_keep=causal)
    logits = lm.predict([tokens, segments], verbose=0)
    np.testing.assert_allclose(logits, bert_heads(w, sequence)[1], atol=ATOL, rtol=RTOL)
