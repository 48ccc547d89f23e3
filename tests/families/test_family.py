"""Every declared `Family`: names that resolve to it alone, a key table read both ways, bert4keras's builder names;
a config-only family tested from its declaration alone."""
import dataclasses

import numpy as np
import pytest

import bert4long.models
from bert4long.checkpoints.config import from_google_config, to_google_config
from bert4long.families import FAMILIES, family, family_of_model_type

# A value for every Hugging Face key a table may hold (others: the row's default).
SAMPLE = {"vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 16, "max_position_embeddings": 66, "pad_token_id": 1, "attention_window": [4, 8],
          "block_size": 2, "num_random_blocks": 1, "attention_type": "original_full"}


def test_every_name_and_model_type_finds_one_family():
    declared = FAMILIES
    names = [name for f in declared for name in f.names]
    model_types = [t for f in declared for t in f.model_types]
    assert len(names) == len(set(names)) and len(model_types) == len(set(model_types))
    for f in declared:
        assert all(family(name.upper()) is f for name in f.names)
        assert all(family_of_model_type(t) is f for t in f.model_types)
        assert f.builder_class().__name__ == f.builder.split(":")[1]
        if f.reads_own_names:   # its builder reads its folders through the same declaration
            assert f.builder_class().family is f
    with pytest.raises(ValueError, match="Unknown model 'gpt'"):
        family("gpt")


@pytest.mark.parametrize("declared", [f for f in FAMILIES if f.config_keys is not None], ids=lambda f: f.name)
def test_key_table_round_trips_config_to_arguments_to_config(declared):
    hf = {key: SAMPLE.get(key, default) for _, _, key, default in declared.config_keys
          if key in SAMPLE or default is not None}
    arguments = declared.from_huggingface(hf)
    assert arguments["max_position"] == 66 - (2 if declared.position_offset else 0)
    assert declared.to_huggingface(arguments) == {**hf, **({"model_type": declared.model_types[0]}
                                                            if declared.model_types else {})}
    google = to_google_config(arguments)   # the Google column (bert_config.json) read both ways
    assert {k: v for k, v in from_google_config(google).items() if k in arguments} == \
        {k: v for k, v in arguments.items() if k in from_google_config(google)}


def test_bert4keras_builder_names_answer_from_bert4long_models():
    for name in ("BERT", "ALBERT", "NEZHA", "RoFormer", "ELECTRA", "Transformer", "RelativePositionBERT"):
        assert getattr(bert4long.models, name).__name__ == name
    assert bert4long.models.ALBERT is family("albert").builder_class()
    with pytest.raises(AttributeError, match="no attribute 'MODELS'"):
        bert4long.models.MODELS  # noqa: B018 -- the attribute access is what raises


def test_the_model_option_names_every_family_read_from_a_google_checkpoint():
    """``--model``'s help reads the families' table: it names every family whose Google-layout checkpoints
    ``--model`` picks."""
    from bert4long.cli import build_parser

    help_text = " ".join(build_parser().commands["pretrain"].format_help().split())
    for declared in FAMILIES:
        if not declared.reads_own_names:
            assert f" {declared.name}," in help_text or f" {declared.name} (" in help_text, declared.name


def test_a_config_only_family_gets_its_tiny_checkpoint_and_reference_from_its_declaration_alone(tmp_path):
    """A family declared as BERT's under a new name: the suite's writer and parity reference follow its declaration
    (none keyed by family name), giving BERT's checkpoint and reference outputs; no declaration, an error naming it."""
    from conftest import tiny_writer
    from test_family_suite import reference_of, token_ids

    bert = family("bert")
    declared = dataclasses.replace(bert, name="bert_config_only", model_types=())
    tiny, original = (tiny_writer(f)(f, tmp_path / f.name) for f in (declared, bert))
    assert tiny.family is declared and tiny.name == "bert_config_only"
    ids = token_ids(tiny)
    np.testing.assert_array_equal(reference_of(declared)(tiny, ids), reference_of(bert)(original, ids))
    with pytest.raises(LookupError, match="declare its tiny=TinyCheckpoint"):
        tiny_writer(dataclasses.replace(declared, tiny=None))
