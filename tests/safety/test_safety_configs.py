"""Configs are validated where they are read (issue 27, point 2): a value that would build a model giving
NaN or garbage, or a file that is not a JSON object, is one error naming the file, the key and the fix,
from Python and from the command line, before anything is built."""
import json

import pytest

from bert4long.cli import main
from bert4long.models import build_transformer_model
from bert4long.testing import write_tiny_checkpoint

CASES = [  # (key, value, what the message says)
    ("layer_norm_eps", float("nan"), "layer_norm_eps = nan must be a finite number > 0"),
    ("layer_norm_eps", -1, "layer_norm_eps = -1 must be a finite number > 0"),
    ("layer_norm_eps", float("inf"), "layer_norm_eps = inf must be a finite number > 0"),
    ("num_attention_heads", 3, "num_attention_heads = 3 does not divide hidden_size = 16"),
    ("max_position_embeddings", "128", "max_position_embeddings = '128' must be a whole number >= 1 (a number, "
                                       "not a string)"),
    ("vocab_size", 0, "vocab_size = 0 must be a whole number >= 1"),
    ("hidden_dropout_prob", 1.5, "hidden_dropout_prob = 1.5 must be a number in [0, 1)"),
    ("hidden_act", "gelu_fancy", "hidden_act = 'gelu_fancy' is not an activation bert4long knows; use one of celu, "
                                 "elu, exponential, gelu, gelu_erf, gelu_fast, gelu_new,"),   # (was: Keras's message)
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_tiny_checkpoint(str(tmp_path_factory.mktemp("tiny")), seed=1)


@pytest.mark.parametrize("key,value,message", CASES)
def test_a_bad_config_value_is_named_with_its_file_and_key(checkpoint, tmp_path, capsys, key, value, message):
    config, prefix, _ = checkpoint
    bad = tmp_path / "bert_config.json"
    bad.write_text(json.dumps({**json.load(open(config)), key: value}))
    with pytest.raises(ValueError) as error:
        build_transformer_model(str(bad), prefix)
    assert message in str(error.value) and str(bad) in str(error.value)
    assert main(["info", prefix, "--config", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_config_that_is_not_a_json_object_is_named(checkpoint, tmp_path, capsys):
    _, prefix, _ = checkpoint
    bad = tmp_path / "bert_config.json"
    bad.write_text("[1, 2, 3]")
    with pytest.raises(ValueError, match="holds a JSON list, not an object"):
        build_transformer_model(str(bad), prefix)
    assert main(["export", "--checkpoint", prefix, "--config", str(bad), "--out", str(tmp_path / "served")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds a JSON list, not an object" in err, err
    assert not (tmp_path / "served").exists()
