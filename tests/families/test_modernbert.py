"""ModernBERT read from Hugging Face folders equals transformers' PyTorch ModernBERT.

The folders are written by transformers' own classes (tiny random models, every
weight perturbed so that biases and norms are not at their initial values);
the reference numbers come from the same PyTorch models. Tolerance: float32
rounding, max abs diff <= 1e-5 on hidden states and MLM logits at real tokens.
"""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import keras

from bert4long.models import build_transformer_model
from bert4long.models.modernbert import ModernBERT, ModernBertAttention

TOLERANCE = 1e-5
VOCAB, PAD, LENGTH = 99, 0, 40  # 40 tokens: five local windows of 8 (+-4)
TINY = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 3,
        "num_attention_heads": 2, "local_attention": 8, "global_attn_every_n_layers": 2,  # global, local, global
        "pad_token_id": PAD, "max_position_embeddings": 128, "bos_token_id": 1, "eos_token_id": 2,
        "cls_token_id": 1, "sep_token_id": 2}
BIASES = {"attention_bias": True, "mlp_bias": True, "norm_bias": True, "classifier_bias": True,
          "decoder_bias": False, "classifier_activation": "gelu_pytorch_tanh", "hidden_activation": "gelu_new",
          "global_rope_theta": 5000.0, "local_rope_theta": 300.0}


def save_model(folder, cls="ModernBertForMaskedLM", attention="eager", seed=0, **overrides):
    """A tiny transformers ModernBERT with perturbed weights, saved to ``folder``; returns the PyTorch model."""
    torch.manual_seed(seed)
    config = transformers.ModernBertConfig(**{**TINY, **overrides}, attn_implementation=attention)
    model = getattr(transformers, cls)(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(str(folder))
    return model


def token_ids(seed=0):
    """Two sequences of 40 tokens; the second is padded after 27."""
    ids = np.random.default_rng(seed).integers(3, VOCAB, size=(2, LENGTH)).astype("int32")
    ids[1, 27:] = PAD
    return ids


def reference(model, ids):
    """(last hidden state, MLM logits or None) of a transformers model, padding given by the attention mask."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(ids != PAD).long(),
                    output_hidden_states=True)
    return out.hidden_states[-1].numpy(), getattr(out, "logits", None)


def max_diff(ours, theirs, ids):
    return float(np.abs(np.asarray(ours) - np.asarray(theirs))[ids != PAD].max())


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modernbert_mlm")
    return folder, save_model(folder, attention="sdpa")


@pytest.mark.parametrize("overrides", [{}, BIASES], ids=["released-flags", "all-biases-other-thetas"])
def test_hidden_states_and_mlm_logits_equal_transformers(tmp_path, overrides):
    torch_model = save_model(tmp_path, **overrides)
    ids = token_ids()
    hidden, logits = reference(torch_model, ids)
    encoder = build_transformer_model(checkpoint_path=str(tmp_path))
    mlm = build_transformer_model(checkpoint_path=str(tmp_path), with_mlm="linear")
    assert [layer.name for layer in encoder.inputs] == ["Input-Token"]
    assert max_diff(encoder([ids]), hidden, ids) <= TOLERANCE
    assert max_diff(mlm([ids]), logits.numpy(), ids) <= TOLERANCE
    kinds = [encoder.get_layer(f"Transformer-{i}-MultiHeadSelfAttention").window for i in range(3)]
    assert kinds == [None, 8, None]  # two global layers, one local (+-4) layer


def test_options_keep_the_numbers(mlm_folder):
    """attention_mask_input, recompute, a fixed sequence_length, the chunked global kernel, gathered MLM."""
    folder, torch_model = mlm_folder
    ids = token_ids(1)
    hidden, logits = reference(torch_model, ids)
    model = build_transformer_model(checkpoint_path=str(folder), attention_mask_input=True, recompute=True,
                                    sequence_length=LENGTH, attention="chunked", attention_config={"block_size": 16})
    assert max_diff(model([ids, (ids != PAD).astype("int32")]), hidden, ids) <= TOLERANCE
    gathered = build_transformer_model(checkpoint_path=str(folder), with_mlm="linear", gathered_mlm=True)
    positions = np.array([[0, 5, 39], [3, 20, 26]], "int32")
    expected = np.take_along_axis(logits.numpy(), positions[..., None], axis=1)
    assert np.abs(gathered([ids, positions]) - expected).max() <= TOLERANCE
    keep = np.unique(np.concatenate([[PAD], ids.ravel(), [90, 91]]))  # a smaller vocabulary: these rows only
    smaller = build_transformer_model(checkpoint_path=str(folder), with_mlm="linear", keep_tokens=keep)
    assert max_diff(smaller([np.searchsorted(keep, ids)]), logits.numpy()[..., keep], ids) <= TOLERANCE


def test_training_step_and_gradients_match_transformers(mlm_folder):
    """One gradient of the MLM loss (recompute on) equals PyTorch's for the same weights."""
    import tensorflow as tf

    folder, torch_model = mlm_folder
    ids, labels = token_ids(2), token_ids(3)
    weights = (ids != PAD).astype("float32")
    model = build_transformer_model(checkpoint_path=str(folder), with_mlm="linear", recompute=True)

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            logits = model([ids], training=True)
            loss = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.reduce_sum(loss * weights) / tf.reduce_sum(weights)
        return tape.gradient(loss, model.get_layer("Transformer-1-MultiHeadSelfAttention").qkv.kernel)

    torch_model.zero_grad()
    out = torch_model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(weights).long())
    loss = torch.nn.functional.cross_entropy(out.logits[torch.tensor(weights > 0)],
                                             torch.tensor(labels, dtype=torch.long)[torch.tensor(weights > 0)])
    loss.backward()
    expected = torch_model.model.layers[1].attn.Wqkv.weight.grad.numpy().T
    assert np.abs(gradient().numpy() - expected).max() <= TOLERANCE


def test_model_and_classification_folders_load_without_prefix(tmp_path):
    """ModernBertModel saves names without 'model.'; a classifier folder has a head that is not an MLM head."""
    base = save_model(tmp_path / "base", cls="ModernBertModel")
    ids = token_ids()
    expected, _ = reference(base, ids)
    model = build_transformer_model(checkpoint_path=str(tmp_path / "base"))
    assert max_diff(model([ids]), expected, ids) <= TOLERANCE
    with pytest.raises(ValueError, match="no masked-LM head.*build without with_mlm"):
        build_transformer_model(checkpoint_path=str(tmp_path / "base"), with_mlm=True)
    classifier = save_model(tmp_path / "cls", cls="ModernBertForSequenceClassification")
    expected, _ = reference(classifier.model, ids)
    model = build_transformer_model(checkpoint_path=str(tmp_path / "cls"))
    assert max_diff(model([ids]), expected, ids) <= TOLERANCE
    with pytest.raises(ValueError, match="ModernBertForSequenceClassification"):
        build_transformer_model(checkpoint_path=str(tmp_path / "cls"), with_mlm=True)


def test_save_back_to_a_folder_transformers_loads(mlm_folder, tmp_path):
    folder, torch_model = mlm_folder
    builder = build_transformer_model(checkpoint_path=str(folder), with_mlm="linear", return_keras_model=False)
    layer = builder.model.get_layer("Transformer-2-FeedForward")
    layer.output_dense.kernel.assign(layer.output_dense.kernel * 1.5)  # a change the copy must carry
    builder.save_weights_as_checkpoint(str(tmp_path))
    reloaded = transformers.ModernBertForMaskedLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    ids = token_ids()
    _, logits = reference(reloaded, ids)
    assert max_diff(builder.model([ids]), logits.numpy(), ids) <= TOLERANCE
    assert not np.allclose(logits.numpy(), reference(torch_model, ids)[1].numpy(), atol=1e-3)
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["layer_types"] == ["full_attention", "sliding_attention", "full_attention"]


@pytest.mark.slow
def test_saved_model_export_and_attention_config(mlm_folder, tmp_path):
    """(The .keras round trip of this family: tests/families/test_family_suite.py.)"""
    import tensorflow as tf

    from bert4long.export import export_saved_model

    folder, _ = mlm_folder
    ids = token_ids()
    model = build_transformer_model(checkpoint_path=str(folder))
    expected = model([ids]).numpy()
    assert export_saved_model(model, str(tmp_path / "exported")) == ["sequence_output"]
    serve = tf.saved_model.load(str(tmp_path / "exported")).signatures["serving_default"]
    served = serve(token_ids=tf.constant(ids), segment_ids=tf.zeros_like(ids))["sequence_output"]
    assert np.abs(served.numpy() - expected).max() <= 1e-6
    layer = ModernBertAttention(heads=2, rope_theta=300.0, window=4, use_bias=True, name="attention")
    clone = ModernBertAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_legacy_config_keys():
    """answerdotai/ModernBERT-base's config.json predates layer_types and rope_parameters."""
    config = ModernBERT.from_huggingface_config(
        {"model_type": "modernbert", "num_hidden_layers": 7, "global_attn_every_n_layers": 3,
         "global_rope_theta": 160000.0, "local_rope_theta": 10000.0, "hidden_activation": "gelu"})
    model = ModernBERT(**{k: v for k, v in config.items() if k != "huggingface_config"}, vocab_size=10,
                       hidden_size=8, num_attention_heads=2, intermediate_size=8)
    assert model.layer_types == ["full_attention", "sliding_attention", "sliding_attention"] * 2 + ["full_attention"]
    assert (model.global_rope_theta, model.local_rope_theta) == (160000.0, 10000.0)


def test_bad_input_is_named(mlm_folder, tmp_path):
    folder, _ = mlm_folder
    only_bin = tmp_path / "bin"
    only_bin.mkdir()
    (only_bin / "config.json").write_text((folder / "config.json").read_text())
    (only_bin / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"pytorch_model\.bin.*save_pretrained"):
        build_transformer_model(checkpoint_path=str(only_bin))
    with pytest.raises(ValueError, match="sequence_length=200 is longer than .*max_position_embeddings=128"):
        build_transformer_model(checkpoint_path=str(folder), sequence_length=200)
    with pytest.raises(ValueError, match="no pooler"):
        build_transformer_model(checkpoint_path=str(folder), with_pool=True)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    config = json.loads((folder / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps({**config, "mlp_bias": True}))
    os.symlink(folder / "model.safetensors", wrong / "model.safetensors")
    with pytest.raises(ValueError, match=r"no weight 'layers\.0\.mlp\.Wi\.bias'.*'Transformer-0-FeedForward'"):
        build_transformer_model(checkpoint_path=str(wrong))
    fewer = {**config, "num_hidden_layers": config["num_hidden_layers"] - 1}
    fewer.pop("layer_types", None)
    (wrong / "config.json").write_text(json.dumps(fewer))   # the last layer's weights would be dropped
    with pytest.raises(ValueError, match=r"would be dropped by model='modernbert': layers\.2\..*partial_load=True"):
        build_transformer_model(checkpoint_path=str(wrong))
    with pytest.warns(UserWarning, match="left out \\(partial_load=True\\)"):
        build_transformer_model(checkpoint_path=str(wrong), partial_load=True)
    (wrong / "config.json").write_text(json.dumps({**config, "model_type": "xlnet"}))
    with pytest.raises(ValueError, match="supported model_type values are .*'modernbert'"):
        build_transformer_model(checkpoint_path=str(wrong))
