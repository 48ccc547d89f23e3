"""Core models: parity with an independent numpy BERT, checkpoints, serialization, bad input."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from numpy_bert import bert_forward, position_rows, read_weights

from bert4long.models import build_transformer_model
from bert4long.testing import TINY_CONFIG, write_tiny_checkpoint

N = TINY_CONFIG["max_position_embeddings"]  # 16 trained positions
HEADS, LAYERS, VOCAB = TINY_CONFIG["num_attention_heads"], TINY_CONFIG["num_hidden_layers"], TINY_CONFIG["vocab_size"]
# float32 model vs float64 reference through 2 layers and LayerNorms.
ATOL, RTOL = 2e-5, 1e-4


def random_batch(rng, length, pad_last=3):
    tokens = rng.integers(5, VOCAB, size=(2, length)).astype("int32")
    tokens[:, 0] = 2  # [CLS]
    if pad_last:
        tokens[1, -pad_last:] = 0
    segments = np.zeros_like(tokens)
    segments[:, length // 2:] = 1
    segments[tokens == 0] = 0
    return tokens, segments


@pytest.fixture(scope="module")
def full_bert(tiny_bert):
    config_path, checkpoint_path, _ = tiny_bert
    return build_transformer_model(config_path, checkpoint_path, with_nsp=True, with_mlm=True,
                                   hierarchical_position=True)


@pytest.mark.parametrize("length", [10, N, 3 * N + 5])
def test_forward_parity_with_numpy_reference(tiny_bert, full_bert, rng, length):
    tokens, segments = random_batch(rng, length)
    nsp, mlm = full_bert.predict([tokens, segments], verbose=0)
    reference = bert_forward(read_weights(tiny_bert[1]), tokens, segments, HEADS, LAYERS, alpha=0.4)
    real = tokens != 0  # padded positions' outputs are unspecified
    np.testing.assert_allclose(nsp, reference["nsp"], atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(mlm[real], reference["mlm"][real], atol=ATOL, rtol=RTOL)


def test_sequence_and_pooler_parity(tiny_bert, rng):
    config_path, checkpoint_path, _ = tiny_bert
    model = build_transformer_model(config_path, checkpoint_path, with_pool=True)
    tokens, segments = random_batch(rng, 12)
    pooled = model.predict([tokens, segments], verbose=0)
    encoder = build_transformer_model(config_path, checkpoint_path)
    sequence = encoder.predict([tokens, segments], verbose=0)
    reference = bert_forward(read_weights(checkpoint_path), tokens, segments, HEADS, LAYERS)
    np.testing.assert_allclose(pooled, reference["pooled"], atol=ATOL, rtol=RTOL)
    real = tokens != 0
    np.testing.assert_allclose(sequence[real], reference["sequence"][real], atol=ATOL, rtol=RTOL)


def test_hierarchical_rows_follow_formula(tiny_bert):
    from bert4long.layers import HierarchicalPositionEmbedding

    table = read_weights(tiny_bert[1])["bert/embeddings/position_embeddings"]
    for alpha in (0.1, 0.4, 0.8):
        layer = HierarchicalPositionEmbedding(N, table.shape[1], alpha=alpha, merge_mode="zero")
        layer.build((None, None, table.shape[1]))
        layer.embeddings.assign(table.astype("float32"))
        rows = keras.ops.convert_to_numpy(layer(np.zeros((1, N * N, table.shape[1]), "float32")))[0]
        np.testing.assert_array_equal(rows[:N], table[:N].astype("float32"))  # trained rows exactly
        np.testing.assert_allclose(rows, position_rows(table, N * N, alpha), atol=1e-5)
        u = (table - alpha * table[0]) / (1 - alpha)
        i, j = 7, 3
        np.testing.assert_allclose(rows[i * N + j], alpha * u[i] + (1 - alpha) * u[j], atol=1e-5)


def test_padding_does_not_change_real_tokens(full_bert, rng):
    tokens, segments = random_batch(rng, 20, pad_last=0)
    _, short = full_bert.predict([tokens[:, :14], segments[:, :14]], verbose=0)
    padded_tokens = np.pad(tokens[:, :14], [(0, 0), (0, 6)])
    padded_segments = np.pad(segments[:, :14], [(0, 0), (0, 6)])
    _, padded = full_bert.predict([padded_tokens, padded_segments], verbose=0)
    np.testing.assert_allclose(padded[:, :14], short, atol=1e-6)


def test_keras_save_and_reload_identical(full_bert, tmp_path, rng):
    tokens, segments = random_batch(rng, 40)
    path = str(tmp_path / "model.keras")
    full_bert.save(path)
    reloaded = keras.models.load_model(path)
    # the same weights through the same layers on one processor: bit-identical
    for a, b in zip(full_bert.predict([tokens, segments], verbose=0), reloaded.predict([tokens, segments], verbose=0)):
        np.testing.assert_array_equal(a, b)


def test_layer_configs_round_trip(full_bert):
    for layer in full_bert.layers:
        if type(layer).__module__.startswith("bert4long"):
            clone = type(layer).from_config(layer.get_config())
            assert clone.get_config() == layer.get_config(), layer.name


@pytest.mark.slow
def test_tf_function_xla_and_variable_lengths(full_bert, rng):
    @tf.function(jit_compile=True, reduce_retracing=True)
    def forward(tokens, segments):
        return full_bert([tokens, segments], training=False)

    for length in (8, 24, 50):
        tokens, segments = random_batch(rng, length)
        nsp, mlm = forward(tf.constant(tokens), tf.constant(segments))
        eager = full_bert([tokens, segments], training=False)
        assert mlm.shape == (2, length, VOCAB)
        np.testing.assert_allclose(mlm.numpy(), eager[1].numpy(), atol=1e-5)


@pytest.mark.slow
def test_training_step_in_xla_lowers_loss(tiny_bert, rng):
    config_path, checkpoint_path, _ = tiny_bert
    model = build_transformer_model(config_path, checkpoint_path, with_mlm=True, hierarchical_position=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="sparse_categorical_crossentropy", jit_compile=True)
    tokens, segments = random_batch(rng, 2 * N, pad_last=0)
    first = model.train_on_batch([tokens, segments], tokens)
    for _ in range(5):
        last = model.train_on_batch([tokens, segments], tokens)
    assert last < first


def test_checkpoint_round_trip_exact(tiny_bert, tmp_path):
    config_path, checkpoint_path, _ = tiny_bert
    bert = build_transformer_model(config_path, checkpoint_path, with_nsp=True, with_mlm=True,
                                   hierarchical_position=True, return_keras_model=False)
    out = str(tmp_path / "out" / "bert_model.ckpt")
    bert.save_weights_as_checkpoint(out)
    original = read_weights(checkpoint_path)
    written = read_weights(out)
    assert set(written) == set(original)  # same original names, no optimizer slots, n position rows
    for name, value in original.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    assert dict(tf.train.list_variables(out))["bert/embeddings/position_embeddings"] == [N, TINY_CONFIG["hidden_size"]]


def test_gathered_mlm_equals_full_head_at_positions(tiny_bert, full_bert, rng):
    config_path, checkpoint_path, _ = tiny_bert
    gathered = build_transformer_model(config_path, checkpoint_path, with_mlm=True, gathered_mlm=True,
                                       hierarchical_position=True)
    tokens, segments = random_batch(rng, 30, pad_last=0)
    positions = np.array([[1, 5, 29], [0, 17, 3]], "int32")
    probs = gathered.predict([tokens, segments, positions], verbose=0)
    full = full_bert.predict([tokens, segments], verbose=0)[1]
    np.testing.assert_allclose(probs, np.take_along_axis(full, positions[..., None], axis=1), atol=1e-6)


def test_keep_tokens_selects_vocabulary_rows(tiny_bert, rng):
    config_path, checkpoint_path, _ = tiny_bert
    keep = [0, 1, 2, 3, 4, 10, 20, 30, 40]
    pruned = build_transformer_model(config_path, checkpoint_path, with_mlm="linear", keep_tokens=keep)
    full = build_transformer_model(config_path, checkpoint_path, with_mlm="linear")
    new_ids = np.array([[2, 5, 6, 7, 8, 3]], "int32")
    old_ids = np.array(keep)[new_ids].astype("int32")
    logits_pruned = pruned.predict([new_ids, np.zeros_like(new_ids)], verbose=0)
    logits_full = full.predict([old_ids, np.zeros_like(old_ids)], verbose=0)
    np.testing.assert_allclose(logits_pruned, logits_full[..., keep], atol=1e-5)


def test_lm_application_is_causal_and_unilm_matches_reference(tiny_bert, rng):
    config_path, checkpoint_path, _ = tiny_bert
    lm = build_transformer_model(config_path, checkpoint_path, application="lm", with_mlm="linear")
    tokens, segments = random_batch(rng, 10, pad_last=0)
    changed = tokens.copy()
    changed[:, 6:] = 7
    a, b = (lm.predict([t, segments], verbose=0) for t in (tokens, changed))
    np.testing.assert_allclose(a[:, :6], b[:, :6], atol=1e-6)
    assert not np.allclose(a[:, 6:], b[:, 6:])
    causal = np.tril(np.ones((10, 10), bool))[None].repeat(2, 0)
    reference = bert_forward(read_weights(checkpoint_path), tokens, segments, HEADS, LAYERS, attention_keep=causal)
    np.testing.assert_allclose(a, reference["mlm_logits"], atol=1e-4, rtol=RTOL)

    unilm = build_transformer_model(config_path, checkpoint_path, application="unilm", with_mlm="linear")
    idx = np.cumsum(segments, axis=1)
    keep = idx[:, None, :] <= idx[:, :, None]
    reference = bert_forward(read_weights(checkpoint_path), tokens, segments, HEADS, LAYERS, attention_keep=keep)
    np.testing.assert_allclose(unilm.predict([tokens, segments], verbose=0), reference["mlm_logits"], atol=1e-4, rtol=RTOL)


def test_language_model_applications_imply_mlm_output(tiny_bert):
    for application in ("lm", "unilm"):  # bert4keras sets with_mlm=True for them
        model = build_transformer_model(tiny_bert[0], application=application)
        assert model.output.shape[-1] == VOCAB


def test_config_renames_and_overrides(tiny_bert):
    config_path, _, _ = tiny_bert
    bert = build_transformer_model(config_path, segment_vocab_size=0, max_position=32, return_keras_model=False)
    assert bert.max_position == 32 and bert.segment_vocab_size == 0
    assert [i.name for i in bert.model.inputs] == ["Input-Token"]
    assert bert.dropout_rate == TINY_CONFIG["hidden_dropout_prob"]


# ------------------------------------------------------------------ bad input
def test_missing_paths_name_the_fix(tiny_bert, tmp_path):
    config_path, checkpoint_path, _ = tiny_bert
    with pytest.raises(FileNotFoundError, match="Config file not found"):
        build_transformer_model(str(tmp_path / "nope.json"))
    with pytest.raises(FileNotFoundError, match="prefix"):
        build_transformer_model(config_path, str(tmp_path / "bert_model.ckpt"))
    with pytest.raises(FileNotFoundError, match="No TensorFlow checkpoint found in folder"):
        build_transformer_model(config_path, str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        build_transformer_model(str(bad))
    # a folder holding bert_model.ckpt.* resolves to it
    model = build_transformer_model(config_path, os.path.dirname(checkpoint_path))
    assert model is not None


def test_missing_variable_and_shape_mismatch(tmp_path):
    from bert4long.checkpoints.tf_format import CheckpointReader, write_checkpoint

    config_path, checkpoint_path, _ = write_tiny_checkpoint(str(tmp_path / "a"))
    reader = CheckpointReader(checkpoint_path)
    variables = {n: reader.get(n) for n in reader.names()}
    del variables["bert/encoder/layer_1/attention/self/key/kernel"]
    write_checkpoint(str(tmp_path / "b" / "bert_model.ckpt"), variables)
    with pytest.raises(ValueError, match=r"no variable 'bert/encoder/layer_1/attention/self/key/kernel'.*Transformer-1"):
        build_transformer_model(config_path, str(tmp_path / "b" / "bert_model.ckpt"))
    with pytest.raises(ValueError, match=r"no variable 'bert/pooler/dense/kernel'.*without with_pool"):
        variables = {n: reader.get(n) for n in reader.names() if not n.startswith("bert/pooler")}
        write_checkpoint(str(tmp_path / "c" / "bert_model.ckpt"), variables)
        build_transformer_model(config_path, str(tmp_path / "c" / "bert_model.ckpt"), with_pool=True)
    with pytest.raises(ValueError, match=r"'bert/embeddings/word_embeddings' has shape \(64, 16\).*\(70, 16\)"):
        build_transformer_model(config_path, checkpoint_path, vocab_size=70)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 0.5, 1.5, -0.2])
def test_invalid_alpha(tiny_bert, alpha):
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\) and not 0.5"):
        build_transformer_model(tiny_bert[0], hierarchical_position=alpha)


def test_too_long_sequence_names_the_fix(tiny_bert, full_bert):
    model = build_transformer_model(tiny_bert[0], tiny_bert[1])
    tokens = np.ones((1, N + 1), "int32")
    with pytest.raises(Exception, match="hierarchical_position=True"):
        model.predict([tokens, np.zeros_like(tokens)], verbose=0)
    with pytest.raises(ValueError, match="hierarchical_position=True"):
        build_transformer_model(tiny_bert[0], sequence_length=N + 1)
    tokens = np.ones((1, N * N + 1), "int32")
    with pytest.raises(Exception, match=f"longer than the {N * N} positions"):
        full_bert.predict([tokens, np.zeros_like(tokens)], verbose=0)


def test_unknown_names(tiny_bert):
    with pytest.raises(ValueError, match="Unknown model 'gpt5'.*albert"):
        build_transformer_model(tiny_bert[0], model="gpt5")
    with pytest.raises(ValueError, match="Unknown application 'seq2seq'.*unilm"):
        build_transformer_model(tiny_bert[0], application="seq2seq")
    with pytest.raises(TypeError, match="Unknown argument.*with_poool"):
        build_transformer_model(tiny_bert[0], with_poool=True)
    with pytest.raises(ValueError, match="Unknown attention 'sparse'"):
        build_transformer_model(tiny_bert[0], attention="sparse")


def test_gelu_forms_differ_and_tanh_is_available():
    from bert4long.layers import gelu_erf, gelu_tanh

    x = np.linspace(-4, 4, 101).astype("float32")
    erf = keras.ops.convert_to_numpy(gelu_erf(x))
    tanh = keras.ops.convert_to_numpy(gelu_tanh(x))
    reference = 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))
    np.testing.assert_allclose(erf, reference, atol=1e-6)
    assert 1e-5 < np.abs(erf - tanh).max() < 1e-3
