"""Issue 18 point 3: a configuration that does not match its checkpoint is an error naming both sides."""
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from bert4long.models import build_transformer_model
from bert4long.testing import write_tiny_checkpoint

TOKENS = np.array([[2, 5, 6, 7, 3, 1, 1], [2, 8, 9, 3, 1, 1, 1]], "int32")   # id 1 pads RoBERTa-style below


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def digests(folder):
    return {name: hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(folder))}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("bert"))
    write_tiny_checkpoint(folder, seed=3)
    return folder


def paths(folder):
    return os.path.join(folder, "bert_config.json"), os.path.join(folder, "bert_model.ckpt")


def test_fewer_layers_refused_unless_partial(bert):
    before = digests(bert)
    config, checkpoint = paths(bert)
    with pytest.raises(ValueError, match=r"checkpoint has 2 layers, the configuration num_hidden_layers=1.*"
                                         r"layer_1.*partial_load=True"):
        build_transformer_model(config, checkpoint, num_hidden_layers=1)
    with pytest.warns(UserWarning, match="num_hidden_layers=1"):
        model = build_transformer_model(config, checkpoint, num_hidden_layers=1, partial_load=True)
    assert len([layer for layer in model.layers if layer.name.endswith("-MultiHeadSelfAttention")]) == 1
    assert digests(bert) == before


def test_head_count_differs_from_the_stored_config(bert, tmp_path):
    """Same weight shapes, different attention: only the config stored with the checkpoint reveals it."""
    config, checkpoint = paths(bert)
    with pytest.raises(ValueError, match=r"num_attention_heads=4 here but 2 in .*bert_config.json"):
        build_transformer_model(config, checkpoint, num_attention_heads=4)
    other = tmp_path / "my_config.json"
    other.write_text(json.dumps(dict(read_json(config), num_attention_heads=4)))
    with pytest.raises(ValueError, match=r"num_attention_heads=4 here but 2"):
        build_transformer_model(str(other), checkpoint)
    # Without a stored config nothing shows the difference: the weights load (documented in docs/safety.md).
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in os.listdir(bert):
        if name.startswith("bert_model.ckpt"):
            shutil.copy(os.path.join(bert, name), bare / name)
    build_transformer_model(str(other), str(bare / "bert_model.ckpt"))


@pytest.mark.parametrize("override,key", [({"hidden_size": 32}, "hidden_size"), ({"vocab_size": 70}, "vocab_size"),
                                          ({"type_vocab_size": 3}, "type_vocab_size")])
def test_shape_mismatch_names_the_setting(bert, tmp_path, override, key):
    config, checkpoint = paths(bert)
    other = tmp_path / "config.json"
    other.write_text(json.dumps(dict(read_json(config), **override)))
    with pytest.raises(ValueError, match=rf"Shape mismatch.*configuration's {key}.*differs from the checkpoint's"):
        build_transformer_model(str(other), checkpoint, partial_load=True)


@pytest.mark.parametrize("family", ["roformer", "nezha"])
def test_family_that_drops_the_position_table_is_refused(bert, family):
    config, checkpoint = paths(bert)
    with pytest.raises(ValueError, match=rf"dropped by model='{family}': bert/embeddings/position_embeddings"):
        build_transformer_model(config, checkpoint, model=family)
    with pytest.warns(UserWarning, match="position_embeddings"):
        build_transformer_model(config, checkpoint, model=family, partial_load=True)


def test_roberta_settings_round_trip_through_a_written_config(tmp_path):
    """layer_norm_eps 1e-5 and pad_token_id 1 survive save -> reload: the same outputs."""
    source = str(tmp_path / "roberta")
    config, checkpoint, _ = write_tiny_checkpoint(source, seed=4, layer_norm_eps=1e-5, pad_token_id=1)
    builder = build_transformer_model(config, checkpoint, return_keras_model=False)
    expected = builder.model([TOKENS, 0 * TOKENS]).numpy()
    out = tmp_path / "out"
    out.mkdir()
    builder.save_weights_as_checkpoint(str(out / "bert_model.ckpt"))
    builder.write_config(str(out / "bert_config.json"))
    reloaded = build_transformer_model(str(out / "bert_config.json"), str(out / "bert_model.ckpt"))
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(reloaded([TOKENS, 0 * TOKENS]).numpy(), expected)
    # the settings matter, so a config that dropped them would fail the equality above
    defaults = dict(read_json(out / "bert_config.json"))
    del defaults["layer_norm_eps"], defaults["pad_token_id"]
    (out / "bert_config.json").write_text(json.dumps(defaults))
    dropped = build_transformer_model(str(out / "bert_config.json"), str(out / "bert_model.ckpt"))
    assert np.abs(dropped([TOKENS, 0 * TOKENS]).numpy() - expected).max() > 1e-3


def test_missing_variable_raises_the_dedicated_error(bert, tmp_path):
    """Drop the MLM head from the checkpoint: loading names the variable in a `MissingCheckpointVariableError`."""
    from bert4long import MissingCheckpointVariableError
    from bert4long.checkpoints.tf_format import CheckpointReader, write_checkpoint

    config, checkpoint = paths(bert)
    reader = CheckpointReader(checkpoint)
    headless = str(tmp_path / "bert_model.ckpt")
    write_checkpoint(headless, {n: reader.get(n) for n in reader.names() if not n.startswith("cls/")})
    with pytest.raises(MissingCheckpointVariableError, match="has no variable 'cls/predictions/") as error:
        build_transformer_model(config, headless, with_mlm=True)
    assert error.value.name.startswith("cls/predictions/")
    assert isinstance(error.value, KeyError) and isinstance(error.value, ValueError)
    # build_mlm_model catches exactly that error: the encoder loads, the MLM head starts fresh.
    from bert4long.training import build_mlm_model

    model, _, has_head = build_mlm_model(config, headless)
    assert not has_head
    np.testing.assert_array_equal(model.get_layer("Embedding-Token").embeddings.numpy(),
                                  reader.get("bert/embeddings/word_embeddings"))
