"""MLM training, masked-only loss/accuracy, recompute equivalence, fine-tuning heads, bad input."""
import numpy as np
import pytest
import tensorflow as tf

from bert4long.data.masking import MLMMasker
from bert4long.models import build_transformer_model
from bert4long.training import (
    build_classifier,
    build_mlm_model,
    build_token_labeller,
    compile_finetune,
    compile_mlm,
    encode_labels,
    make_optimizer,
    mlm_batches,
)
from bert4long.training.mlm import mlm_loss

MASKER = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=4)


def corpus(rng, count=16, length=12):
    """Sequences with a learnable pattern (token t+1 follows t) so MLM can improve fast."""
    starts = rng.integers(5, 40, count)
    seqs = (starts[:, None] + np.arange(length)[None]).astype("int32")
    seqs[:, 0] = 2
    return seqs


@pytest.mark.slow
def test_short_mlm_run_lowers_loss(tiny_bert, rng):
    config, checkpoint, _ = tiny_bert
    model, _, has_head = build_mlm_model(config, checkpoint)
    assert has_head
    compile_mlm(model, make_optimizer(1e-2, total_steps=60, warmup_steps=2), jit_compile=False)
    data = mlm_batches(corpus(rng), MASKER, batch_size=8, seed=1)
    history = model.fit(data, steps_per_epoch=20, epochs=3, verbose=0, shuffle=False)
    first, last = history.history["loss"][0], history.history["loss"][-1]
    assert last < 0.9 * first, history.history


def test_a_checkpoint_without_an_mlm_head_loads_its_encoder_into_one_build(tiny_bert, tmp_path, monkeypatch):
    """A Google checkpoint with the ``cls/`` head removed: the encoder's weights are the file's, the head starts as
    BERT initialises it (LayerNorm 1/0, output bias 0), and the model is built once (was: a second encoder, built to
    copy its weights)."""
    from bert4long.checkpoints.tf_format import CheckpointReader, write_checkpoint
    from bert4long.training import mlm

    config, checkpoint, _ = tiny_bert
    full = CheckpointReader(checkpoint)
    headless = str(tmp_path / "bert_model.ckpt")
    write_checkpoint(headless, {name: full.get(name) for name in full.names() if not name.startswith("cls/")})
    builds = []
    monkeypatch.setattr(mlm, "build_transformer_model",
                        lambda *args, **kwargs: builds.append(args) or build_transformer_model(*args, **kwargs))
    model, builder, has_head = build_mlm_model(config, headless)
    assert not has_head and len(builds) == 1
    query = next(w for w in model.weights if w.path == "Transformer-0-MultiHeadSelfAttention/query/kernel")
    np.testing.assert_array_equal(query.numpy(), full.get("bert/encoder/layer_0/attention/self/query/kernel"))
    gamma, beta = model.get_layer("MLM-Norm").get_weights()
    assert (gamma == 1).all() and (beta == 0).all() and (model.get_layer("MLM-Bias").get_weights()[0] == 0).all()


def test_loss_and_accuracy_count_masked_positions_only(tiny_bert):
    config, checkpoint, _ = tiny_bert
    model, _, _ = build_mlm_model(config, checkpoint)
    compile_mlm(model, make_optimizer(1e-3, 10), jit_compile=False)
    tokens = np.array([[2, 7, 8, 4, 10, 3], [2, 4, 12, 13, 14, 3]], "int32")
    positions = np.array([[3, 1, 0], [1, 4, 0]], "int32")
    weights = np.array([[1, 1, 0], [1, 0, 0]], "float32")  # 3 real predictions, 3 padding entries
    logits = model.predict([tokens, tokens * 0, positions], verbose=0)
    predicted = logits.argmax(-1)
    targets = predicted.copy()
    targets[0, 1] = (predicted[0, 1] + 1) % 64     # one of the 3 real predictions is wrong
    targets[1, 1] = (predicted[1, 1] + 1) % 64     # wrong, but padding (weight 0): must not count
    targets[1, 2] = (predicted[1, 2] + 1) % 64     # wrong, padding
    result = model.evaluate([tokens, tokens * 0, positions], targets, sample_weight=weights, verbose=0,
                            return_dict=True)
    assert result["mlm_accuracy"] == pytest.approx(2 / 3, abs=1e-6)
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    expected = (nll * weights).sum() / weights.sum()
    assert result["loss"] == pytest.approx(expected, rel=1e-4)


def _loss_and_gradients(config, checkpoint, recompute, inputs, targets, weights, **options):
    model = build_transformer_model(config, checkpoint, with_mlm="linear", gathered_mlm=True, recompute=recompute,
                                    return_keras_model=False, **options)
    names = {}
    for _layer_name, _path, variable, ckpt_name, _ in model._mapped_weights():
        names[id(variable)] = ckpt_name
    keras_model = model.model

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = mlm_loss()(targets, keras_model(inputs, training=True), sample_weight=weights)
        return loss, tape.gradient(loss, keras_model.trainable_variables)

    loss, grads = step()
    dropout_steps = [int(v.numpy()) for v in keras_model.variables if v.name == "step"]
    chunked_seeds = [v.numpy().tolist() for v in keras_model.variables if "seed_generator_state" in v.name]
    return float(loss), {names[id(v)]: tf.convert_to_tensor(g).numpy() for v, g in zip(
        keras_model.trainable_variables, grads) if id(v) in names}, (dropout_steps, chunked_seeds)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["full", "chunked"])
def test_recompute_gives_same_loss_and_gradients_with_dropout(tmp_path, rng, attention):
    from bert4long.testing import write_tiny_checkpoint

    config, checkpoint, _ = write_tiny_checkpoint(str(tmp_path), seed=3, hidden_dropout_prob=0.3,
                                                  attention_probs_dropout_prob=0.3)
    options = dict(attention=attention, attention_config={"block_size": 4} if attention == "chunked" else {})
    tokens = corpus(rng, count=2, length=10)
    inputs = [tokens, tokens * 0, np.array([[1, 4], [2, 6]], "int32")]
    targets = np.array([[9, 11], [20, 30]], "int32")
    weights = np.ones((2, 2), "float32")
    loss_a, grads_a, states_a = _loss_and_gradients(config, checkpoint, False, inputs, targets, weights, **options)
    loss_b, grads_b, states_b = _loss_and_gradients(config, checkpoint, True, inputs, targets, weights, **options)
    (steps_a, seeds_a), (steps_b, seeds_b) = states_a, states_b
    assert steps_a == steps_b and seeds_a == seeds_b   # every random state advanced alike
    if attention == "full":   # embedding + 3 per layer (output, feed-forward, probabilities): once each
        assert steps_a == [1] * 7
    else:                     # chunked draws from its seed generator (advanced once), not its SeededDropout
        assert sorted(steps_a) == [0, 0] + [1] * 5 and len(seeds_a) == 2
    loss_c, _, _ = _loss_and_gradients(config, checkpoint, False, inputs, targets, weights, attention=attention,
                                       attention_config=dict(options["attention_config"], dropout_seed=99))
    assert abs(loss_c - loss_a) > 1e-4   # the attention dropout masks matter to the loss
    assert loss_a == pytest.approx(loss_b, abs=1e-6)
    assert sorted(grads_a) == sorted(grads_b) and len(grads_a) > 20
    for name in grads_a:   # tolerance: float32 summation order only
        np.testing.assert_allclose(grads_a[name], grads_b[name], atol=1e-6, rtol=1e-5, err_msg=name)
    assert max(np.abs(g).max() for g in grads_a.values()) > 1e-3   # gradients are not trivially zero


@pytest.mark.slow
def test_mixed_bfloat16_keeps_norm_and_mlm_output_in_float32(tiny_bert, rng):
    config, checkpoint, _ = tiny_bert
    model, _, _ = build_mlm_model(config, checkpoint, precision="mixed_bfloat16")
    assert model.get_layer("Transformer-0-FeedForward").compute_dtype == "bfloat16"
    assert model.get_layer("Transformer-0-FeedForward").variable_dtype == "float32"
    norm = model.get_layer("Transformer-0-FeedForward-Norm")
    assert norm.compute_dtype == "bfloat16" and not norm.autocast   # Keras computes LayerNorm in float32
    assert model.get_layer("MLM-Activation").compute_dtype == "float32"
    compile_mlm(model, make_optimizer(1e-3, 4), jit_compile=False)
    history = model.fit(mlm_batches(corpus(rng), MASKER, 4), steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_weight_decay_skips_layernorm_and_bias(tiny_bert):
    config, checkpoint, _ = tiny_bert
    model, _, _ = build_mlm_model(config, checkpoint)
    optimizer = make_optimizer(1e-3, 10)
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert "Embedding-Norm/gamma" not in decayed and "MLM-Bias/bias" not in decayed
    assert any(p.endswith("kernel") for p in decayed) and "Embedding-Token/embeddings" in decayed


@pytest.mark.slow
def test_classifiers_and_token_labeller_train(tiny_bert, rng):
    config, checkpoint, _ = tiny_bert
    tokens = corpus(rng, count=8, length=24)    # 24 > 16 trained positions: hierarchical
    labels = (tokens[:, 1] > 20).astype("int32")
    cls_model = build_classifier(config, checkpoint, 2, hierarchical_position=True)
    compile_finetune(cls_model, make_optimizer(1e-3, 4), jit_compile=False)
    assert np.isfinite(cls_model.fit([tokens, tokens * 0], labels, batch_size=4, verbose=0).history["loss"][0])
    chunks = tokens.reshape(8, 2, 12)
    chunks[0, 1] = 0                               # an empty window is ignored by the pooling
    chunk_model = build_classifier(config, checkpoint, 2, pooling="chunks")
    compile_finetune(chunk_model, make_optimizer(1e-3, 4), jit_compile=False)
    assert chunk_model.predict([chunks, chunks * 0], verbose=0).shape == (8, 2)
    labeller = build_token_labeller(config, checkpoint, 3, hierarchical_position=True)
    compile_finetune(labeller, make_optimizer(1e-3, 4), jit_compile=False)
    history = labeller.fit([tokens, tokens * 0], tokens % 3, sample_weight=(tokens > 4).astype("float32"),
                           batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_unknown_labels_are_named():
    with pytest.raises(ValueError, match=r"Unknown label\(s\) \['spam'\].*labels file"):
        encode_labels(["ham", "spam"], ["ham", "eggs"])


def test_checkpoint_not_matching_config_is_refused(tiny_bert, tmp_path):
    import json

    config, checkpoint, _ = tiny_bert
    wrong = json.load(open(config))
    wrong["hidden_size"] = 32
    wrong_path = tmp_path / "bert_config.json"
    wrong_path.write_text(json.dumps(wrong))
    with pytest.raises(ValueError, match="Shape mismatch"):
        build_mlm_model(str(wrong_path), checkpoint)
