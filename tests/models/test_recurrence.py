"""Segment recurrence: exactness when one segment covers the input, real memory, detached cache."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long.models import build_transformer_model
from bert4long.models.recurrence import SegmentRecurrentEncoder

LENGTH = 40  # > 16 trained positions: hierarchical positions place every token at its true position


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    return build_transformer_model(tiny_bert[0], tiny_bert[1], hierarchical_position=True)


def batch(rng, length=LENGTH):
    tokens = rng.integers(5, 64, size=(2, length)).astype("int32")
    tokens[1, -5:] = 0
    return tokens, np.zeros_like(tokens)


def test_one_segment_equals_plain_model(encoder, rng):
    tokens, segments = batch(rng)
    xl = SegmentRecurrentEncoder(encoder, segment_length=LENGTH)
    real = tokens != 0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(xl([tokens, segments]))[real],
                               encoder.predict([tokens, segments], verbose=0)[real], atol=1e-5)


def test_memory_carries_context_and_first_segment_is_local(encoder, rng):
    tokens, segments = batch(rng)
    xl = SegmentRecurrentEncoder(encoder, segment_length=8, memory_length=8)
    out = keras.ops.convert_to_numpy(xl([tokens, segments]))
    first = encoder.predict([tokens[:, :8], segments[:, :8]], verbose=0)
    np.testing.assert_allclose(out[:, :8], first, atol=1e-5)
    changed = tokens.copy()
    changed[:, 9] = 7 if tokens[0, 9] != 7 else 8
    out_changed = keras.ops.convert_to_numpy(xl([changed, segments]))
    assert not np.allclose(out[:, 16:24], out_changed[:, 16:24])  # segment 2 reached segment 3 through the cache
    no_memory = SegmentRecurrentEncoder(encoder, segment_length=8, memory_length=0)
    out_local = keras.ops.convert_to_numpy(no_memory([changed, segments]))
    np.testing.assert_allclose(out_local[:, 16:24], keras.ops.convert_to_numpy(no_memory([tokens, segments]))[:, 16:24],
                               atol=1e-6)


@pytest.mark.slow
def test_cache_is_detached_and_layer_trains(encoder, rng):
    xl = SegmentRecurrentEncoder(encoder, segment_length=8)
    tokens = np.full((1, 16), 9, "int32")
    tokens[0, :8] = 11  # ids only in the first segment
    segments = np.zeros_like(tokens)
    table = encoder.get_layer("Embedding-Token").embeddings
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(xl([tokens, segments], training=True)[:, 8:] ** 2)  # second segment only
    grad = tf.convert_to_tensor(tape.gradient(loss, table))
    assert np.abs(grad.numpy()[11]).max() == 0.0  # no gradient into the cached first segment
    assert np.abs(grad.numpy()[9]).max() > 0.0

    token_in = keras.Input((LENGTH,), dtype="int32")
    segment_in = keras.Input((LENGTH,), dtype="int32")
    hidden = SegmentRecurrentEncoder(encoder, segment_length=16)([token_in, segment_in])
    logits = keras.layers.Dense(2)(hidden[:, 0])
    classifier = keras.Model([token_in, segment_in], logits)
    classifier.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens, segments = batch(rng)
    labels = np.array([0, 1])
    first = classifier.train_on_batch([tokens, segments], labels)
    for _ in range(5):
        last = classifier.train_on_batch([tokens, segments], labels)
    assert last < first


def test_bad_configuration(tiny_bert, encoder):
    with pytest.raises(ValueError, match="exceeds the 16 positions"):
        SegmentRecurrentEncoder(build_transformer_model(tiny_bert[0], tiny_bert[1]), segment_length=32)
    with pytest.raises(ValueError, match="without attention_mask_input"):
        SegmentRecurrentEncoder(build_transformer_model(tiny_bert[0], attention_mask_input=True), segment_length=8)
    with pytest.raises(ValueError, match="static sequence length"):
        tf.function(lambda t, s: SegmentRecurrentEncoder(encoder, 8)([t, s])).get_concrete_function(
            tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, None), tf.int32))
