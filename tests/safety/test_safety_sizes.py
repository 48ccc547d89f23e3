"""A config's sizes are compared with the checkpoint's tensors before anything is built (issue 27): a Longformer
``vocab_size`` of 10**9 allocated its table first (out of memory instead of a shape error). For every family read
from TF checkpoints or safetensors, each size a checkpoint reveals is refused with the file, the key, both sizes
and the fix, and the model is never built."""
import json
import os
import re

import pytest

from bert4long.models import build_transformer_model
from bert4long.testing import write_tiny_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = {"vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 37, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
HUGE = 10**9


def _hugging_face(folder, model_class, config_class, **config):
    torch.manual_seed(0)
    getattr(transformers, model_class)(getattr(transformers, config_class)(**{**TINY, **config})).save_pretrained(folder)
    return str(folder), os.path.join(folder, "config.json")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family -> (checkpoint path, config file a user edits)."""
    root = tmp_path_factory.mktemp("sizes")
    out = {}
    for model in ("bert", "albert", "electra"):
        config, prefix, _ = write_tiny_checkpoint(str(root / model), model=model, seed=1)
        out[model] = (prefix, config)
    out["hf_bert"] = _hugging_face(root / "hf_bert", "BertModel", "BertConfig", max_position_embeddings=40)
    out["roberta"] = _hugging_face(root / "roberta", "RobertaModel", "RobertaConfig", max_position_embeddings=66)
    out["longformer"] = _hugging_face(root / "longformer", "LongformerForMaskedLM", "LongformerConfig",
                                      attention_window=[4, 8], max_position_embeddings=66, type_vocab_size=1)
    out["big_bird"] = _hugging_face(root / "big_bird", "BigBirdModel", "BigBirdConfig", block_size=2,
                                    num_random_blocks=1, max_position_embeddings=64)
    out["modernbert"] = _hugging_face(root / "modernbert", "ModernBertModel", "ModernBertConfig",
                                      local_attention=8, max_position_embeddings=128, cls_token_id=0, sep_token_id=2)
    return out


# (family, config key, what the message names): every family, every size its checkpoint reveals
CASES = [(family, "vocab_size", "'Embedding-Token'") for family in
         ("bert", "albert", "electra", "hf_bert", "roberta", "longformer", "big_bird", "modernbert")]
CASES += [(family, "intermediate_size", "FeedForward") for family in ("bert", "albert", "longformer", "modernbert")]
CASES += [(family, "max_position_embeddings", "'Embedding-Position'") for family in
          ("bert", "electra", "roberta", "longformer", "big_bird")]
CASES += [("bert", "type_vocab_size", "'Embedding-Segment'"), ("albert", "embedding_size", "'Embedding-Token'"),
          ("hf_bert", "hidden_size", "'Embedding-Token'")]


@pytest.mark.parametrize("family, key, layer", CASES)
def test_a_size_the_checkpoint_contradicts_is_refused_before_anything_is_built(
        checkpoints, tmp_path, monkeypatch, family, key, layer):
    from bert4long.models import Transformer

    def never(self):
        raise AssertionError("the model was built before its sizes were checked")

    monkeypatch.setattr(Transformer, "build", never)  # a 10**9 table would be allocated there
    path, config_file = checkpoints[family]
    with open(config_file) as f:
        config = json.load(f)
    config[key] = HUGE
    if key == "hidden_size":
        config["num_attention_heads"] = 1
    bad = tmp_path / os.path.basename(config_file)
    bad.write_text(json.dumps(config))
    if family in ("longformer", "big_bird", "modernbert", "hf_bert", "roberta"):  # a folder: the edit is in it
        folder = tmp_path / "folder"
        folder.mkdir()
        os.symlink(os.path.join(path, "model.safetensors"), folder / "model.safetensors")
        os.replace(bad, folder / "config.json")
        bad, path = folder / "config.json", str(folder)
        arguments = {"checkpoint_path": path}
    else:
        arguments = {"config_path": str(bad), "checkpoint_path": path, "model": family}
    with pytest.raises(ValueError) as error:
        build_transformer_model(**arguments)
    message = str(error.value)  # both sizes (RoBERTa's position table counts its offset of 2 out of both)
    sizes = re.search(rf"the configuration's {key} differs from the checkpoint's \((\d+) in (.+), (\d+) in '", message)
    assert message.startswith("Shape mismatch") and layer in message and sizes, message
    assert int(sizes[1]) in (HUGE, HUGE - 2) and sizes[2] == str(bad) and int(sizes[3]) < 200, message
    assert f"Fix {key} to match the checkpoint" in message and "Nothing was built" in message, message


@pytest.mark.parametrize("family", ["bert", "albert", "electra", "hf_bert", "roberta", "longformer", "big_bird",
                                    "modernbert"])
def test_matching_configs_still_build(checkpoints, family):
    path, config_file = checkpoints[family]
    arguments = {"checkpoint_path": path}
    if family in ("bert", "albert", "electra"):
        arguments.update(config_path=config_file, model=family)
    assert build_transformer_model(**arguments) is not None
