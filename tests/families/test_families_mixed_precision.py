"""Longformer, BigBird and ModernBERT read from Hugging Face folders train a classifier under ``mixed_float16``
with Keras's loss scaling (their MLM logits under the policy: tests/families/test_family_suite.py).

The folders are the shared tiny ones (`conftest.tiny_family`, saved by transformers' own classes); the rows
run beyond every window and block pattern, most of one padded (whole windows and blocks of padding).
"""
import keras
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bert4long.models import build_transformer_model  # noqa: E402
from bert4long.training import compile_finetune, make_optimizer  # noqa: E402
from bert4long.training.mlm import dtype_policy  # noqa: E402

LENGTHS = {"longformer": 40, "big_bird": 48, "modernbert": 40}


@pytest.fixture(scope="module", params=sorted(LENGTHS))
def family(request, tiny_family):
    tiny, length = tiny_family(request.param), LENGTHS[request.param]
    ids = np.random.default_rng(0).integers(tiny.first_id, tiny.vocab_size - 1, (3, length)).astype("int32")
    ids[1, length // 3:] = tiny.pad_id
    ids[2, length - 5:] = tiny.pad_id
    return request.param, tiny.checkpoint, tiny.pad_id, ids


@pytest.fixture(autouse=True)
def restore_policy():
    yield
    keras.config.set_dtype_policy("float32")


def inputs_of(model, ids):
    return [ids] if len(model.inputs) == 1 else [ids, np.zeros_like(ids)]


@pytest.mark.slow
def test_classifier_trains_with_loss_scaling(family):
    name, folder, pad, ids = family
    keras.utils.set_random_seed(0)
    with dtype_policy("mixed_float16"):
        encoder = build_transformer_model(checkpoint_path=folder)
        cls = keras.layers.Lambda(lambda x: x[:, 0], name="CLS")(encoder.output)
        model = keras.Model(encoder.inputs, keras.layers.Dense(2, dtype="float32", name="Logits")(cls))
    compile_finetune(model, make_optimizer(3e-3, total_steps=20, warmup_steps=0), jit_compile=False)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    labels = (ids[:, 1] % 2).astype("int32")
    losses = [float(model.train_on_batch(inputs_of(model, ids), labels)[0]) for _ in range(8)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0], (name, losses)
