"""Position extension methods, lazy in the model and materialised by `extend_checkpoint`."""
import json
import os

import numpy as np
import pytest
from numpy_bert import read_weights

from bert4long.checkpoints.extension import extend_checkpoint, extend_position_table
from bert4long.models import build_transformer_model
from bert4long.testing import TINY_CONFIG

N = TINY_CONFIG["max_position_embeddings"]


def numpy_rows(table, length, method, alpha=0.4):
    n = table.shape[0]
    if method == "copy":
        return np.stack([table[k % n] for k in range(length)])
    if method == "interpolate":
        rows = []
        for k in range(length):
            s = k * min(n / length, 1.0)
            lo = int(np.floor(s))
            hi = min(lo + 1, n - 1)
            rows.append((1 - (s - lo)) * table[lo] + (s - lo) * table[hi])
        return np.stack(rows)
    u = (table - alpha * table[0]) / (1 - alpha)
    return np.stack([table[k] if k < n else alpha * u[k // n] + (1 - alpha) * u[k % n] for k in range(length)])


@pytest.mark.parametrize("method,length", [("hierarchical", 5 * N), ("copy", 2 * N + 5), ("interpolate", 3 * N)])
def test_tables_follow_their_formulas(rng, method, length):
    table = rng.standard_normal((N, 8)).astype("float32")
    extended = extend_position_table(table, method, length)
    np.testing.assert_allclose(extended, numpy_rows(table.astype("float64"), length, method), atol=1e-5)
    if method != "interpolate":
        np.testing.assert_array_equal(extended[:N], table)


@pytest.mark.parametrize("method,length", [("hierarchical", 4 * N), ("copy", 2 * N + 5), ("interpolate", 3 * N)])
def test_materialised_checkpoint_equals_lazy_model(tiny_bert, tmp_path, rng, method, length):
    config_path, checkpoint_path, _ = tiny_bert
    new_config, new_prefix = extend_checkpoint(config_path, checkpoint_path, method, length, str(tmp_path))
    assert json.load(open(new_config))["max_position_embeddings"] == length
    assert os.path.isfile(tmp_path / "vocab.txt")
    assert read_weights(new_prefix)["bert/embeddings/position_embeddings"].shape == (length, TINY_CONFIG["hidden_size"])
    plain = build_transformer_model(new_config, new_prefix, with_mlm=True)
    lazy = build_transformer_model(config_path, checkpoint_path, with_mlm=True, position_extension=method,
                                   position_extension_length=length)
    tokens = rng.integers(5, 64, size=(1, length)).astype("int32")
    segments = np.zeros_like(tokens)
    np.testing.assert_allclose(plain.predict([tokens, segments], verbose=0),
                               lazy.predict([tokens, segments], verbose=0), atol=1e-6)


def test_bad_extension_requests(tiny_bert, tmp_path):
    config_path, checkpoint_path, _ = tiny_bert
    with pytest.raises(ValueError, match="below the 16 trained positions"):
        extend_checkpoint(config_path, checkpoint_path, "copy", N - 1, str(tmp_path))
    with pytest.raises(ValueError, match="at most n\\*n = 256"):
        extend_checkpoint(config_path, checkpoint_path, "hierarchical", N * N + 1, str(tmp_path))
    with pytest.raises(ValueError, match="Unknown extension method 'stretch'"):
        extend_checkpoint(config_path, checkpoint_path, "stretch", 2 * N, str(tmp_path))
    with pytest.raises(ValueError, match="needs the target length"):
        build_transformer_model(config_path, position_extension="interpolate")
    with pytest.raises(ValueError, match="conflicts with position_extension='copy'"):
        build_transformer_model(config_path, position_extension="copy", hierarchical_position=0.3)


def test_one_extension_object_from_builder_to_layer(tiny_bert, rng):
    """The builder validates the options once into a `PositionExtension` the layer uses; the layer's config
    keeps today's keys, and a config saved before the object existed loads to the same extension."""
    from bert4long.layers import PositionEmbedding
    from bert4long.ops.position_extension import PositionExtension

    config_path, checkpoint_path, _ = tiny_bert
    builder = build_transformer_model(config_path, checkpoint_path, hierarchical_position=0.3, return_keras_model=False)
    layer = builder.model.get_layer("Embedding-Position")
    assert layer.position_extension is builder.position_extension == PositionExtension("hierarchical", 0.3)
    assert (layer.max_length, layer.method, layer.alpha) == (N * N, "hierarchical", 0.3)
    old = {"name": "Embedding-Position", "input_dim": N, "output_dim": 16, "merge_mode": "add", "hierarchical": 0.3,
           "custom_position_ids": False, "embeddings_initializer": "zeros", "extension": "hierarchical",
           "extension_length": None}
    assert {k: layer.get_config()[k] for k in old if k not in ("embeddings_initializer", "name")} == {
        k: v for k, v in old.items() if k not in ("embeddings_initializer", "name")}
    loaded = PositionEmbedding.from_config(old)
    assert loaded.position_extension == layer.position_extension
    loaded.build((None, None, 16))
    loaded.embeddings.assign(layer.embeddings)
    ids = np.arange(3 * N, dtype="int32")
    np.testing.assert_array_equal(loaded.rows(ids), layer.rows(ids))
    np.testing.assert_array_equal(layer.rows(ids), extend_position_table(layer.embeddings.numpy(), "hierarchical",
                                                                         3 * N, alpha=0.3))
