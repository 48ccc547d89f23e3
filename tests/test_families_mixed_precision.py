"""Longformer, BigBird and ModernBERT read from Hugging Face folders run under ``mixed_float16``.

The folders are tiny random models saved by transformers' own classes. Under
the mixed policy the MLM logits must be finite at every position (padded rows
included: masks are applied in float32, where -1e12 is not -inf), stay within
float16 rounding of the float32 model's logits at real tokens (max abs diff
<= 2% of the largest logit, measured about 0.3%), and a classifier on top must
train with Keras's loss scaling.
"""
import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bert4long.models import build_transformer_model  # noqa: E402
from bert4long.training import compile_finetune, make_optimizer  # noqa: E402
from bert4long.training.mlm import dtype_policy  # noqa: E402
from tests.torch_reference import perturbed  # noqa: E402

COMMON = {"vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 37}
FAMILIES = {  # transformers class, config, pad id, length (beyond every window / block pattern)
    "longformer": ("LongformerForMaskedLM", transformers.LongformerConfig(
        **COMMON, attention_window=[4, 8], max_position_embeddings=80, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2), 1, 40),
    "big_bird": ("BigBirdForMaskedLM", transformers.BigBirdConfig(
        **COMMON, max_position_embeddings=128, block_size=4, num_random_blocks=1, hidden_act="gelu_new"), 0, 48),
    "modernbert": ("ModernBertForMaskedLM", transformers.ModernBertConfig(
        **COMMON, local_attention=8, global_attn_every_n_layers=2, max_position_embeddings=128, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2), 0, 40),
}
SHARE = 0.02


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    cls, config, pad, length = FAMILIES[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    perturbed(getattr(transformers, cls)(config), 1).save_pretrained(str(folder))
    ids = np.random.default_rng(0).integers(3, COMMON["vocab_size"], (3, length)).astype("int32")
    ids[1, length // 3:] = pad  # most of a row padded: whole windows and blocks of padding
    ids[2, length - 5:] = pad
    return request.param, str(folder), pad, ids


@pytest.fixture(autouse=True)
def restore_policy():
    yield
    keras.config.set_dtype_policy("float32")


def inputs_of(model, ids):
    return [ids] if len(model.inputs) == 1 else [ids, np.zeros_like(ids)]


def test_mlm_logits_are_finite_and_close_to_float32(family):
    name, folder, pad, ids = family
    reference = build_transformer_model(checkpoint_path=folder, with_mlm="linear")
    expected = np.asarray(reference(inputs_of(reference, ids)), "float32")
    with dtype_policy("mixed_float16"):
        model = build_transformer_model(checkpoint_path=folder, with_mlm="linear")
    assert any(layer.compute_dtype == "float16" for layer in model.layers), name
    logits = np.asarray(model(inputs_of(model, ids)), "float32")
    assert np.isfinite(logits).all(), name
    real = ids != pad
    difference = np.abs(logits - expected)[real].max()
    assert difference <= SHARE * np.abs(expected[real]).max(), (name, difference, np.abs(expected[real]).max())


def test_classifier_trains_with_loss_scaling(family):
    name, folder, pad, ids = family
    keras.utils.set_random_seed(0)
    with dtype_policy("mixed_float16"):
        encoder = build_transformer_model(checkpoint_path=folder)
        cls = keras.layers.Lambda(lambda x: x[:, 0], name="CLS")(encoder.output)
        model = keras.Model(encoder.inputs, keras.layers.Dense(2, dtype="float32", name="Logits")(cls))
    compile_finetune(model, make_optimizer(3e-3, total_steps=20, warmup_steps=0), jit_compile=False)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    labels = (ids[:, 1] > 30).astype("int32")
    losses = [float(model.train_on_batch(inputs_of(model, ids), labels)[0]) for _ in range(8)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0], (name, losses)
