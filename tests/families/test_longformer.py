"""Longformer folders against transformers' PyTorch Longformer (the implementation the checkpoints were trained with).

Tiny random models are saved by transformers' own classes; inputs have padding inside the
batch, several global tokens and a length that is not a multiple of the windows (4 and 8).
Tolerance: 1e-5 max abs (float32; measured ~1e-6).
"""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch_reference import perturbed

from bert4long.models import build_transformer_model

TOL = 1e-5
LENGTH = 27


def tiny_config(**overrides):
    config = {"vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 37, "attention_window": [4, 8], "max_position_embeddings": 80,
              "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
    return transformers.LongformerConfig(**{**config, **overrides})



@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A LongformerForMaskedLM ('longformer.' + 'lm_head.' names) and a LongformerModel (no prefix, pooler)."""
    root = tmp_path_factory.mktemp("longformer")
    torch.manual_seed(0)
    mlm = perturbed(transformers.LongformerForMaskedLM(tiny_config()), 1)
    mlm.save_pretrained(root / "mlm")
    base = perturbed(transformers.LongformerModel(tiny_config()), 2)
    base.save_pretrained(root / "base")
    return {"mlm": (str(root / "mlm"), mlm), "base": (str(root / "base"), base)}


def batch():
    """Token ids (pad 1, <s> 0), attention mask and global-attention mask: padding in two rows, 1-3 global tokens."""
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 60, (3, LENGTH))
    ids[:, 0] = 0
    mask = np.ones((3, LENGTH), "int64")
    mask[1, 20:] = 0
    mask[2, 9:] = 0
    ids[mask == 0] = 1
    global_mask = np.zeros((3, LENGTH), "int64")
    global_mask[:, 0] = 1
    global_mask[0, [5, 17]] = 1
    global_mask[1, 12] = 1
    return ids, mask, global_mask


def reference(model, ids, mask, global_mask=None):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                    global_attention_mask=None if global_mask is None else torch.tensor(global_mask),
                    output_hidden_states=True)
    return out


@pytest.mark.slow
def test_mlm_logits_and_hidden_states_equal_transformers(folders):
    folder, torch_model = folders["mlm"]
    ids, mask, global_mask = batch()
    expected = reference(torch_model, ids, mask, global_mask)
    inputs = [ids, np.zeros_like(ids), mask * (global_mask + 1)]
    logits = build_transformer_model(checkpoint_path=folder, with_mlm="linear", attention_mask_input=True)
    np.testing.assert_allclose(logits.predict(inputs, verbose=0), expected.logits.numpy(), atol=TOL, rtol=0)
    encoder = build_transformer_model(checkpoint_path=folder, attention_mask_input=True, recompute=True,
                                      sequence_length=LENGTH)
    hidden = encoder.predict(inputs, verbose=0)
    np.testing.assert_allclose(hidden, expected.hidden_states[-1].numpy(), atol=TOL, rtol=0)
    local_only = encoder.predict([ids, np.zeros_like(ids), mask], verbose=0)
    assert np.abs(local_only - hidden).max() > 1e-3  # the global tokens matter
    import tensorflow as tf

    few_slots = build_transformer_model(checkpoint_path=folder, attention_mask_input=True, max_global_tokens=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="marked global.*max_global_tokens=2"):
        few_slots(inputs)  # row 0 has 3 global tokens


def test_gradients_equal_transformers(folders):
    """Gradients of the same weighted sum of MLM logits, for a local and a global projection."""
    import tensorflow as tf

    folder, torch_model = folders["mlm"]
    ids, mask, global_mask = batch()
    weights = np.random.default_rng(1).standard_normal((3, LENGTH, 60)).astype("float32")
    torch_model.zero_grad()
    logits = torch_model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                         global_attention_mask=torch.tensor(global_mask)).logits
    (logits * torch.tensor(weights)).sum().backward()
    layers = torch_model.longformer.encoder.layer
    expected = [layers[0].attention.self.query.weight.grad.numpy().T,
                layers[1].attention.self.query_global.weight.grad.numpy().T]
    model = build_transformer_model(checkpoint_path=folder, with_mlm="linear", attention_mask_input=True)
    variables = [model.get_layer("Transformer-0-MultiHeadSelfAttention").q_dense.kernel,
                 model.get_layer("Transformer-1-MultiHeadSelfAttention").query_global.kernel]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model([ids, np.zeros_like(ids), mask * (global_mask + 1)]) * weights)
    for grad, reference_grad in zip(tape.gradient(loss, variables), expected):
        np.testing.assert_allclose(grad.numpy(), reference_grad, atol=TOL, rtol=0)
        assert np.abs(reference_grad).max() > 1e-2


def test_unprefixed_model_with_pooler_and_padding_from_token_ids(folders):
    folder, torch_model = folders["base"]
    ids, mask, _ = batch()
    expected = reference(torch_model, ids, mask)  # no global tokens, as without the mask input
    model = build_transformer_model(checkpoint_path=folder, with_pool=True)
    assert [tensor.name for tensor in model.inputs] == ["Input-Token", "Input-Segment"]
    pooled = model.predict([ids, np.zeros_like(ids)], verbose=0)
    np.testing.assert_allclose(pooled, expected.pooler_output.numpy(), atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="lm_head.dense.weight.*MLM-Dense"):
        build_transformer_model(checkpoint_path=folder, with_mlm=True)


def test_sequence_classification_folder_loads_its_encoder(tmp_path):
    """LongformerForSequenceClassification: 'longformer.' names beside 'classifier.' ones (not ours to read)."""
    classifier = perturbed(transformers.LongformerForSequenceClassification(tiny_config(num_labels=3)), 3)
    classifier.save_pretrained(tmp_path / "classifier")
    ids, mask, global_mask = batch()
    expected = reference(classifier.longformer, ids, mask, global_mask).last_hidden_state.numpy()
    model = build_transformer_model(checkpoint_path=str(tmp_path / "classifier"), attention_mask_input=True)
    hidden = model.predict([ids, np.zeros_like(ids), mask * (global_mask + 1)], verbose=0)
    np.testing.assert_allclose(hidden, expected, atol=TOL, rtol=0)


@pytest.mark.slow
def test_save_back_to_a_folder_transformers_loads(folders, tmp_path):
    import keras

    folder, torch_model = folders["mlm"]
    builder = build_transformer_model(checkpoint_path=folder, with_mlm="linear", attention_mask_input=True,
                                      return_keras_model=False)
    ids, mask, global_mask = batch()
    inputs = [ids, np.zeros_like(ids), mask * (global_mask + 1)]
    builder.model.save(tmp_path / "model.keras")  # the layers and kernel serialize without custom_objects
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict(inputs, verbose=0), builder.model.predict(inputs, verbose=0), atol=1e-6)
    builder.save_weights_as_checkpoint(str(tmp_path / "saved"))
    reloaded = transformers.LongformerForMaskedLM.from_pretrained(str(tmp_path / "saved")).eval()
    np.testing.assert_allclose(reference(reloaded, ids, mask, global_mask).logits.numpy(),
                               reference(torch_model, ids, mask, global_mask).logits.numpy(), atol=1e-6, rtol=0)


def copy_folder(source, target, config_changes=None, drop=None, weights=True):
    from safetensors.numpy import load_file, save_file

    os.makedirs(target)
    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    config.update(config_changes or {})
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(config, f)
    if weights:
        tensors = load_file(os.path.join(source, "model.safetensors"))
        tensors.pop(drop, None)
        save_file(tensors, os.path.join(target, "model.safetensors"))
    return target


def test_bad_folders_and_options_are_named(folders, tmp_path):
    folder, _ = folders["base"]
    with pytest.raises(ValueError, match="attention_window of layer 1 is 7.*even"):
        build_transformer_model(checkpoint_path=copy_folder(folder, tmp_path / "odd", {"attention_window": [4, 7]}))
    missing = copy_folder(folder, tmp_path / "missing", drop="encoder.layer.1.attention.self.key_global.weight")
    with pytest.raises(ValueError, match="key_global.weight.*Transformer-1-MultiHeadSelfAttention"):
        build_transformer_model(checkpoint_path=missing)
    bin_only = copy_folder(folder, tmp_path / "bin", weights=False)
    open(os.path.join(bin_only, "pytorch_model.bin"), "wb").close()
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin.*save_pretrained"):
        build_transformer_model(checkpoint_path=bin_only)
    with pytest.raises(ValueError, match="sequence_length=100 is longer than the 78 positions"):
        build_transformer_model(checkpoint_path=folder, sequence_length=100)
    with pytest.raises(ValueError, match=r"encoder\.layer\.1\..*num_hidden_layers=1 here but 2.*partial_load"):
        build_transformer_model(checkpoint_path=folder, num_hidden_layers=1, attention_window=4)
    with pytest.warns(UserWarning, match="num_hidden_layers=1 here but 2"):
        build_transformer_model(checkpoint_path=folder, num_hidden_layers=1, attention_window=4, partial_load=True)
    model = build_transformer_model(checkpoint_path=folder)
    with pytest.raises(ValueError, match="Sequence of 79 tokens is longer than the 78 positions.*chunks"):
        model([np.zeros((1, 79), "int32")] * 2)
    unknown = copy_folder(folder, tmp_path / "unknown", {"model_type": "reformer"}, weights=False)
    with pytest.raises(ValueError, match="'reformer'.*'longformer'"):
        build_transformer_model(checkpoint_path=unknown)
