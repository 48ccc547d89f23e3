"""The checkpoint engine: one reader protocol with two implementations, one loader, one saver per format."""
import os

import numpy as np
import pytest

from bert4long.checkpoints.hf_folder import write_huggingface_folder
from bert4long.checkpoints.huggingface import open_huggingface_folder
from bert4long.checkpoints.safetensors_io import SafetensorsReader
from bert4long.checkpoints.tf_format import CheckpointReader, WeightReader
from bert4long.families import FAMILIES
from bert4long.models import build_transformer_model
from bert4long.testing import write_tiny_checkpoint

IDS = np.array([[2, 5, 6, 7, 8, 9, 10, 11, 12, 3]], "int32")
COMMON = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 24}
# Families read under their own tensor names, built with random weights (no transformers needed).
OWN_NAMES = {
    "longformer": {"attention_window": [4, 4], "max_position": 34, "pad_token_id": 1, "segment_vocab_size": 1},
    "big_bird": {"block_size": 2, "num_random_blocks": 1, "attention_type": "original_full", "max_position": 32},
    "modernbert": {"local_attention": 4, "global_attn_every_n_layers": 2, "max_position": 32, "pad_token_id": 0},
}


def subclasses(cls):
    return {cls} | {grand for sub in cls.__subclasses__() for grand in subclasses(sub)}


def perturbed(builder, seed):
    """``builder`` with every weight drawn anew, so that a round trip cannot pass on shared initial values."""
    rng = np.random.default_rng(seed)
    for weight in builder.model.weights:
        weight.assign(rng.normal(0, 0.1, weight.shape).astype(weight.dtype))
    return builder


def outputs(builder):
    """Eager outputs, compared exactly: the same weights through the same layers on one processor give the same
    bits, and a weight rounded by a step on its way through a file would show."""
    inputs = [IDS] if builder.family.name == "modernbert" else [IDS, np.zeros_like(IDS)]   # no segment ids
    return np.asarray(builder.model(inputs))


def test_exactly_two_reader_implementations():
    """Every checkpoint is read through the protocol; its implementations are the TF and the safetensors reader."""
    assert subclasses(WeightReader) - {WeightReader} == {CheckpointReader, SafetensorsReader}
    declared = {family.checkpoint for family in FAMILIES}
    assert declared == {"tf", "safetensors"}


def test_both_readers_give_the_same_arrays_for_the_same_weights(tmp_path):
    """A BERT written as a TF checkpoint and as a Hugging Face folder reads back identically by Google name."""
    config, prefix, _ = write_tiny_checkpoint(str(tmp_path / "google"))
    builder = build_transformer_model(config, prefix, with_mlm=True, with_pool=True, return_keras_model=False)
    write_huggingface_folder(builder, str(tmp_path / "hf"), model="roberta")
    with CheckpointReader(prefix) as tf_reader, open_huggingface_folder(str(tmp_path / "hf")) as hf_reader:
        assert set(hf_reader.names()) <= set(tf_reader.names())
        assert "bert/embeddings/position_embeddings" in hf_reader and len(hf_reader.names()) > 20
        for name in hf_reader.names():
            assert hf_reader.shape(name) == tf_reader.shape(name), name
            np.testing.assert_array_equal(hf_reader.get(name), tf_reader.get(name), err_msg=name)
        assert hf_reader.source("bert/pooler/dense/kernel") == " (safetensors key 'roberta.pooler.dense.weight')"
        assert tf_reader.source("bert/pooler/dense/kernel") == ""


@pytest.mark.parametrize("model", ["bert", "albert", "nezha", "roformer", "electra"])
def test_the_tf_saver_round_trips(model, tmp_path):
    config, prefix, _ = write_tiny_checkpoint(str(tmp_path / "source"), model=model)
    builder = perturbed(build_transformer_model(config, prefix, model=model, return_keras_model=False), 1)
    builder.save_weights_as_checkpoint(str(tmp_path / "saved" / "bert_model.ckpt"))
    reloaded = build_transformer_model(config, str(tmp_path / "saved" / "bert_model.ckpt"), model=model,
                                       return_keras_model=False)
    assert np.array_equal(outputs(reloaded), outputs(builder))


@pytest.mark.parametrize("model", ["bert", "roberta", "xlm-roberta"])
def test_the_safetensors_saver_round_trips_google_layout_families(model, tmp_path):
    config, prefix, _ = write_tiny_checkpoint(str(tmp_path / "source"))
    builder = perturbed(build_transformer_model(config, prefix, model=model, with_mlm="linear",
                                                return_keras_model=False), 2)
    write_huggingface_folder(builder, str(tmp_path / "hf"), model=model)
    reloaded = build_transformer_model(checkpoint_path=str(tmp_path / "hf"), with_mlm="linear", return_keras_model=False)
    assert reloaded.family.name == "bert" and np.array_equal(outputs(reloaded), outputs(builder))


@pytest.mark.parametrize("model", sorted(OWN_NAMES))
def test_the_safetensors_saver_round_trips_own_name_families(model, tmp_path):
    builder = perturbed(build_transformer_model(model=model, with_mlm="linear", return_keras_model=False, **COMMON,
                                                **OWN_NAMES[model]), 3)
    builder.save_weights_as_checkpoint(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    with open_huggingface_folder(str(tmp_path)) as reader:   # a *ForMaskedLM folder: the encoder under its prefix
        assert all(reader.listed_name(name).startswith(builder.family.task_prefixes[0])
                   for name in reader.names() if reader.trained(name))
    reloaded = build_transformer_model(checkpoint_path=str(tmp_path), with_mlm="linear", return_keras_model=False)
    assert type(reloaded) is type(builder) and np.array_equal(outputs(reloaded), outputs(builder))


def test_the_loader_takes_an_open_reader(tmp_path):
    config, prefix, _ = write_tiny_checkpoint(str(tmp_path))
    from_path = build_transformer_model(config, prefix, return_keras_model=False)
    builder = build_transformer_model(config, return_keras_model=False)
    with CheckpointReader(prefix) as reader:
        builder.load_weights_from_checkpoint(reader)
        assert builder.open_checkpoint(reader) is reader
    assert np.array_equal(outputs(builder), outputs(from_path))
    folder = tmp_path / "longformer"
    longformer = perturbed(build_transformer_model(model="longformer", return_keras_model=False, **COMMON,
                                                   **OWN_NAMES["longformer"]), 4)
    longformer.save_weights_as_checkpoint(str(folder))
    fresh = build_transformer_model(model="longformer", return_keras_model=False, **COMMON, **OWN_NAMES["longformer"])
    with open_huggingface_folder(str(folder)) as reader:
        fresh.load_weights_from_checkpoint(reader)
    assert np.array_equal(outputs(fresh), outputs(longformer))


def test_one_checker_names_dropped_weights_in_either_format(tmp_path):
    """The same check, with the reader's own words, refuses a checkpoint with a layer the model would drop."""
    config, prefix, _ = write_tiny_checkpoint(str(tmp_path / "google"))
    with pytest.raises(ValueError, match=r"trained variable\(s\) would be dropped by model='bert': "
                                         r"bert/encoder/layer_1/.*bert_config\.json"):
        build_transformer_model(config, prefix, num_hidden_layers=1)
    builder = perturbed(build_transformer_model(model="modernbert", return_keras_model=False, **COMMON,
                                                **OWN_NAMES["modernbert"]), 5)
    builder.save_weights_as_checkpoint(str(tmp_path / "modernbert"))
    smaller = build_transformer_model(model="modernbert", return_keras_model=False,
                                      **{**COMMON, "num_hidden_layers": 1}, **OWN_NAMES["modernbert"])
    with pytest.raises(ValueError, match=r"trained weight\(s\) would be dropped by model='modernbert': layers\.1\..*"
                                         r"num_hidden_layers=1 here but 2.*Build from the folder alone"):
        smaller.load_weights_from_checkpoint(str(tmp_path / "modernbert"))
    with pytest.warns(UserWarning, match="left out"):
        smaller.load_weights_from_checkpoint(str(tmp_path / "modernbert"), partial_load=True)


def test_a_missing_head_is_named_with_the_folders_architecture(tmp_path):
    builder = perturbed(build_transformer_model(model="big_bird", return_keras_model=False, **COMMON,
                                                **OWN_NAMES["big_bird"]), 6)
    builder.save_weights_as_checkpoint(str(tmp_path))   # a BigBirdModel folder: no MLM head
    with pytest.raises(KeyError, match=r"no weight 'cls\.predictions\..*holds no masked-LM head \(architectures "
                                       r"\['BigBirdModel'\]\).*build without with_mlm"):
        build_transformer_model(checkpoint_path=str(tmp_path), with_mlm=True)


def test_a_damaged_safetensors_file_is_named(tmp_path):
    builder = build_transformer_model(model="longformer", return_keras_model=False, **COMMON, **OWN_NAMES["longformer"])
    builder.save_weights_as_checkpoint(str(tmp_path / "folder"))
    weights = tmp_path / "folder" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:50])
    with pytest.raises(ValueError, match=r"model\.safetensors' is damaged or truncated.*download the model again"):
        open_huggingface_folder(str(tmp_path / "folder"))
