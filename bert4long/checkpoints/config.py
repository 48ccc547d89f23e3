"""Config files read, validated and translated between bert4long's, Google's and Hugging Face's key names.

The key table is `bert4long.families.CONFIG_KEYS` (and each family's copy, ``Family.config_keys``);
this module reads, validates and translates config files with it.
"""
import json
import math
import os

from bert4long.checkpoints.json_values import integer_problem
from bert4long.checkpoints.position_record import RECORD_KEY, check_record
from bert4long.families import CONFIG_KEYS, CONFIG_RENAMES


def from_google_config(config):
    """``config`` (Google keys) with the bert4long name of each renamed key added; a bert4long key given wins.

    Example:
    >>> from bert4long.checkpoints.config import from_google_config
    >>> from_google_config({"max_position_embeddings": 512, "hidden_dropout_prob": 0.1})["dropout_rate"]
    0.1
    """
    translated = dict(config)
    for ours, google in CONFIG_RENAMES.items():
        if ours not in translated and google in translated:
            translated[ours] = translated[google]
    return translated


def to_google_config(config):
    """The Google ``bert_config.json`` dict of a config in bert4long keys (defaults where it lacks one).

    Example:
    >>> from bert4long.checkpoints.config import to_google_config
    >>> to_google_config({"max_position": 512, "dropout_rate": 0.0})["max_position_embeddings"]
    512
    """
    return {google: config.get(ours, default) for ours, google, _, default in CONFIG_KEYS
            if ours in config or default is not None}


# Keys (any naming: Google, Hugging Face, bert4long; every integer key of the families' key tables and builders)
# and what their values must be.
POSITIVE_INTS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "max_position", "embedding_size", "attention_head_size",
                 "attention_key_size", "max_relative_position", "block_size", "num_random_blocks", "local_attention",
                 "global_attn_every_n_layers")
NON_NEGATIVE_INTS = ("type_vocab_size", "segment_vocab_size", "pad_token_id")
POSITIVE_FLOATS = ("layer_norm_eps", "layer_norm_epsilon", "norm_eps", "initializer_range")
RATES = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout_rate", "attention_dropout_rate")
# The feed-forward activation, under Google's and Hugging Face's name (BERT's) and ModernBERT's.
ACTIVATION_KEYS = ("hidden_act", "hidden_activation")


def _bad_value(key, value):
    """What is wrong with ``value`` for ``key`` (None if nothing)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key in POSITIVE_INTS + NON_NEGATIVE_INTS:
        return integer_problem(value, 1 if key in POSITIVE_INTS else 0)
    elif key in POSITIVE_FLOATS:
        if not (number and math.isfinite(value) and value > 0):
            return "must be a finite number > 0"
    elif key in RATES:
        if not (number and 0 <= value < 1):
            return "must be a number in [0, 1)"
    return None


def _check_activations(config, source):
    """Refuse an activation key (`ACTIVATION_KEYS`) whose value `get_activation` does not know, naming the file, the
    key, the value and the valid names."""
    given = {key: config[key] for key in ACTIVATION_KEYS if config.get(key) is not None}
    if not given:
        return
    from bert4long.layers.activations import activation_names

    names = activation_names()
    for key, value in given.items():
        if value not in names:
            raise ValueError(f"Config file {source!r}: {key} = {value!r} is not an activation bert4long knows; use one "
                             f"of {', '.join(names)}.")


def validate_config(config, source):
    """Refuse (``ValueError`` naming ``source``, the key and the fix) a config that would build a broken model, or
    whose position-extension record is not one bert4long writes (`bert4long.checkpoints.position_record.check_record`)."""
    if not isinstance(config, dict):
        raise ValueError(f"Config file {source!r} holds a JSON {type(config).__name__}, not an object: a model "
                         'config is {"hidden_size": 768, ...}. Pass the bert_config.json or config.json of the model.')
    for key, value in config.items():
        problem = _bad_value(key, value) if value is not None else None
        if problem:
            raise ValueError(f"Config file {source!r}: {key} = {value!r} {problem}. Fix that value (the checkpoint's "
                             "original config has it right).")
    _check_activations(config, source)
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if hidden and heads and hidden % heads:
        raise ValueError(f"Config file {source!r}: num_attention_heads = {heads} does not divide hidden_size = "
                         f"{hidden} (each head gets hidden_size / num_attention_heads dimensions). Fix one of them.")
    if config.get(RECORD_KEY) is not None:
        check_record(config, source)
    return config


def read_config(config_path):
    """The JSON config at ``config_path``, validated (`validate_config`)."""
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"Config file not found: {config_path!r}. Pass the model's JSON config "
            "(e.g. 'bert_config.json' from the checkpoint folder)."
        )
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"Config file {config_path!r} is not valid JSON: {error}") from error
    return validate_config(config, config_path)
