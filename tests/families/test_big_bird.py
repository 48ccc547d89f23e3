"""BigBird folders against transformers' PyTorch BigBird (block-sparse attention, as the checkpoints were trained).

Tiny random models saved by transformers' own classes; batches with padding, lengths that
are not a multiple of the block, above and below the reference's switch to full attention
((5 + 2 * num_random_blocks) * block_size tokens), in inference and (dropout 0) training.
Tolerance: 1e-5 max abs (float32; measured ~1e-6).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch_reference import perturbed

from bert4long.models import build_transformer_model

TOL = 1e-5


def tiny_config(**overrides):
    config = {"vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 37, "max_position_embeddings": 128, "block_size": 4, "num_random_blocks": 1,
              "hidden_act": "gelu_new"}
    return transformers.BigBirdConfig(**{**config, **overrides})



@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """BigBirdForMaskedLM ('bert.' + 'cls.' names; block 4, 1 random block) and BigBirdModel
    (no prefix, pooler; block 2, 2 random blocks, no dropout for the training comparison)."""
    root = tmp_path_factory.mktemp("big_bird")
    torch.manual_seed(0)
    perturbed(transformers.BigBirdForMaskedLM(tiny_config()), 1).save_pretrained(root / "mlm")
    base = tiny_config(block_size=2, num_random_blocks=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    perturbed(transformers.BigBirdModel(base), 2).save_pretrained(root / "base")
    return {"mlm": str(root / "mlm"), "base": str(root / "base")}


def batch(length, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 60, (3, length))
    mask = np.ones((3, length), "int64")
    mask[1, length - 7:] = 0
    mask[2, length // 2:] = 0
    ids[mask == 0] = 0
    return ids, mask


def reference(model_class, folder, ids, mask, train=False):
    """A fresh reference model per call: transformers switches a model to full attention for good once it
    has seen a short input."""
    model = model_class.from_pretrained(folder)
    model.train(train)
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), output_hidden_states=True)


@pytest.mark.slow
@pytest.mark.parametrize("length", [37, 20], ids=["block_sparse", "short_input_full_attention"])
def test_mlm_logits_and_hidden_states_equal_transformers(folders, length):
    ids, mask = batch(length)
    expected = reference(transformers.BigBirdForMaskedLM, folders["mlm"], ids, mask)
    model = build_transformer_model(checkpoint_path=folders["mlm"], with_mlm="linear", attention_mask_input=True)
    np.testing.assert_allclose(model.predict([ids, ids * 0, mask], verbose=0), expected.logits.numpy(), atol=TOL,
                               rtol=0)
    encoder = build_transformer_model(checkpoint_path=folders["mlm"], sequence_length=length, recompute=True)
    np.testing.assert_allclose(encoder.predict([ids, ids * 0], verbose=0), expected.hidden_states[-1].numpy(),
                               atol=TOL, rtol=0)


@pytest.mark.slow
def test_pooler_and_training_random_blocks_equal_transformers(folders):
    ids, mask = batch(50, seed=1)  # 25 blocks of 2
    model = build_transformer_model(checkpoint_path=folders["base"], with_pool=True, attention_mask_input=True)
    inputs = [ids, ids * 0, mask]
    np.testing.assert_allclose(model.predict(inputs, verbose=0),
                               reference(transformers.BigBirdModel, folders["base"], ids, mask).pooler_output.numpy(),
                               atol=TOL, rtol=0)
    trained = reference(transformers.BigBirdModel, folders["base"], ids, mask, train=True).pooler_output.numpy()
    np.testing.assert_allclose(model(inputs, training=True).numpy(), trained, atol=TOL, rtol=0)  # dropout 0
    assert np.abs(trained - model.predict(inputs, verbose=0)).max() > 1e-3  # the training blocks differ


@pytest.mark.slow
def test_training_gradients_equal_transformers(folders):
    """Gradients of the same weighted sum of hidden states (training pattern, dropout 0), for layer 0's query."""
    import tensorflow as tf

    ids, mask = batch(50, seed=1)
    weights = np.random.default_rng(2).standard_normal((3, 50, 32)).astype("float32")
    torch_model = transformers.BigBirdModel.from_pretrained(folders["base"]).train()
    hidden = torch_model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
    (hidden * torch.tensor(weights)).sum().backward()
    expected = torch_model.encoder.layer[0].attention.self.query.weight.grad.numpy().T
    model = build_transformer_model(checkpoint_path=folders["base"], attention_mask_input=True)
    variable = model.get_layer("Transformer-0-MultiHeadSelfAttention").q_dense.kernel
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model([ids, ids * 0, mask], training=True) * weights)
    np.testing.assert_allclose(tape.gradient(loss, variable).numpy(), expected, atol=TOL, rtol=0)
    assert np.abs(expected).max() > 1e-2


@pytest.mark.slow
def test_exported_saved_model_switches_by_length_and_save_back(folders, tmp_path):
    import keras
    import tensorflow as tf

    from bert4long.export import export_saved_model

    builder = build_transformer_model(checkpoint_path=folders["mlm"], with_mlm="linear", return_keras_model=False)
    names = export_saved_model(builder.model, str(tmp_path / "served"))
    serve = tf.saved_model.load(str(tmp_path / "served")).signatures["serving_default"]
    for length in (37, 20):  # one graph with an unknown length: block-sparse or full attention at run time
        ids, mask = batch(length)
        served = serve(token_ids=tf.constant(ids, tf.int32), segment_ids=tf.constant(ids * 0, tf.int32))[names[0]]
        expected = reference(transformers.BigBirdForMaskedLM, folders["mlm"], ids, mask).logits.numpy()
        np.testing.assert_allclose(served.numpy(), expected, atol=TOL, rtol=0)
    builder.model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict([ids, ids * 0], verbose=0), expected, atol=TOL, rtol=0)
    builder.save_weights_as_checkpoint(str(tmp_path / "saved"))
    again = reference(transformers.BigBirdForMaskedLM, str(tmp_path / "saved"), ids, mask).logits.numpy()
    np.testing.assert_allclose(again, expected, atol=1e-6, rtol=0)


def test_pretraining_folder_gives_mlm_and_nsp_heads(tmp_path):
    """BigBirdForPreTraining: 'bert.' names, 'cls.predictions' and 'cls.seq_relationship' heads."""
    perturbed(transformers.BigBirdForPreTraining(tiny_config()), 3).save_pretrained(tmp_path / "pretraining")
    ids, mask = batch(37)
    expected = reference(transformers.BigBirdForPreTraining, str(tmp_path / "pretraining"), ids, mask)
    model = build_transformer_model(checkpoint_path=str(tmp_path / "pretraining"), with_nsp=True, with_mlm="linear",
                                    attention_mask_input=True)
    nsp, logits = model.predict([ids, ids * 0, mask], verbose=0)
    np.testing.assert_allclose(logits, expected.prediction_logits.numpy(), atol=TOL, rtol=0)
    np.testing.assert_allclose(nsp, torch.softmax(expected.seq_relationship_logits, -1).numpy(), atol=TOL, rtol=0)


def test_bad_configs_are_named(folders, tmp_path):
    with pytest.raises(ValueError, match="sequence_length=200 is longer than the 128 positions.*hierarchical"):
        build_transformer_model(checkpoint_path=folders["mlm"], sequence_length=200)
    with pytest.raises(ValueError, match="no attention= option"):
        build_transformer_model(checkpoint_path=folders["mlm"], attention="sliding_window")
    transformers.BigBirdModel(tiny_config(use_bias=False)).save_pretrained(tmp_path / "no_bias")
    with pytest.raises(ValueError, match="use_bias=True"):
        build_transformer_model(checkpoint_path=str(tmp_path / "no_bias"))
