"""Hugging Face folders (config.json + model.safetensors) read without PyTorch."""
import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from bert4long.checkpoints.huggingface import convert_huggingface_folder
from bert4long.models import build_transformer_model
from bert4long.testing import TINY_CONFIG, tiny_checkpoint_variables


def google_to_hf(name, value, prefix):
    """Hugging Face key for an original Google variable name (written independently of the package)."""
    if name.startswith("cls/"):
        key = name.replace("/", ".").replace("output_bias", "bias").replace("output_weights", "weight")
    else:
        key = prefix + name[len("bert/"):].replace("/", ".")
    key = re.sub(r"layer_(\d+)", r"layer.\1", key)
    key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    if key.endswith(".kernel"):
        return key[: -len(".kernel")] + ".weight", value.T
    if key.endswith("_embeddings"):
        return key + ".weight", value
    return key, value


def write_hf_folder(directory, model_type="bert", drop=()):
    config = dict(TINY_CONFIG)
    variables = tiny_checkpoint_variables(config, with_optimizer_slots=False)
    variables.pop("global_step")
    hf_config = dict(config, model_type=model_type, architectures=["BertForPreTraining"], layer_norm_eps=1e-12)
    if model_type == "roberta":
        # RoBERTa: positions start at padding_idx + 1 = 2, one token type, pad id 1, eps 1e-5.
        table = variables["bert/embeddings/position_embeddings"]
        variables["bert/embeddings/position_embeddings"] = np.concatenate([np.zeros((2, table.shape[1]), "float32"), table])
        variables["bert/embeddings/token_type_embeddings"] = variables["bert/embeddings/token_type_embeddings"][:1]
        hf_config.update(max_position_embeddings=table.shape[0] + 2, type_vocab_size=1, pad_token_id=1,
                         layer_norm_eps=1e-5, architectures=["RobertaForMaskedLM"])
    prefix = model_type + "."
    tensors = dict(google_to_hf(n, v, prefix) for n, v in variables.items())
    tensors = {k: np.ascontiguousarray(v) for k, v in tensors.items() if k not in drop}
    tensors[prefix + "embeddings.position_ids"] = np.arange(hf_config["max_position_embeddings"])[None]
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(hf_config, f)
    return directory, variables


def test_bert_folder_equals_google_checkpoint(tmp_path, tiny_bert):
    from bert4long.testing import write_tiny_checkpoint

    folder, _ = write_hf_folder(str(tmp_path / "hf"))
    config_path, prefix, _ = write_tiny_checkpoint(str(tmp_path / "google"), seed=0)
    tokens = np.array([[2, 9, 14, 33, 3, 0, 0]], "int32")
    segments = np.array([[0, 0, 0, 0, 1, 0, 0]], "int32")
    from_hf = build_transformer_model(checkpoint_path=folder, with_nsp=True, with_mlm=True)
    from_google = build_transformer_model(config_path, prefix, with_nsp=True, with_mlm=True)
    # the same weights through the same layers on one processor: bit-identical
    for a, b in zip(from_hf.predict([tokens, segments], verbose=0), from_google.predict([tokens, segments], verbose=0)):
        np.testing.assert_array_equal(a, b)


def test_roberta_offset_pad_id_and_epsilon(tmp_path):
    folder, variables = write_hf_folder(str(tmp_path / "roberta"), model_type="roberta")
    bert = build_transformer_model(checkpoint_path=folder, model="roberta", return_keras_model=False)
    assert bert.max_position == TINY_CONFIG["max_position_embeddings"]
    assert bert.pad_token_id == 1 and bert.layer_norm_epsilon == 1e-5
    table = bert.model.get_layer("Embedding-Position").embeddings.numpy()
    np.testing.assert_array_equal(table, variables["bert/embeddings/position_embeddings"][2:])
    # id 1 is padding for RoBERTa; id 0 (<s>) is a real token
    tokens = np.array([[0, 9, 14, 2, 1, 1]], "int32")
    short = bert.model.predict([tokens[:, :4], np.zeros((1, 4), "int32")], verbose=0)
    padded = bert.model.predict([tokens, np.zeros((1, 6), "int32")], verbose=0)
    np.testing.assert_allclose(padded[:, :4], short, atol=1e-6)


def test_convert_writes_google_layout(tmp_path):
    import tensorflow as tf

    folder, variables = write_hf_folder(str(tmp_path / "hf"))
    config_path, prefix = convert_huggingface_folder(folder, str(tmp_path / "out"))
    names = dict(tf.train.list_variables(prefix))
    assert names["bert/encoder/layer_1/attention/self/query/kernel"] == [16, 16]
    reader = tf.train.load_checkpoint(prefix)
    for name, value in variables.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
    assert json.load(open(config_path))["max_position_embeddings"] == TINY_CONFIG["max_position_embeddings"]


def test_unsupported_architecture_and_missing_keys(tmp_path):
    folder, _ = write_hf_folder(str(tmp_path / "gpt"))
    config = json.load(open(os.path.join(folder, "config.json")))
    config["model_type"] = "gpt2"
    json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    with pytest.raises(ValueError, match=r"Unsupported Hugging Face architecture 'gpt2'.*\('bert', 'roberta'"):
        build_transformer_model(checkpoint_path=folder)

    folder, _ = write_hf_folder(str(tmp_path / "holes"), drop=("bert.encoder.layer.1.output.dense.weight",))
    with pytest.raises(ValueError, match=r"output/dense/kernel.*Transformer-1-FeedForward"):
        build_transformer_model(checkpoint_path=folder)

    os.remove(os.path.join(folder, "model.safetensors"))
    with pytest.raises(FileNotFoundError, match="No model.safetensors"):
        build_transformer_model(checkpoint_path=folder)
