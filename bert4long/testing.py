"""Tiny checkpoints in the original Google layouts, for tests and examples.

The variable names here are spelled out independently of the model classes'
`variable_mapping()`, so a test that loads these files checks that mapping.
"""
import json
import os
from dataclasses import dataclass

import numpy as np

from bert4long.checkpoints.tf_format import write_checkpoint

TINY_CONFIG = {
    "vocab_size": 64,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 16,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _bert_layer_variables(prefix, hidden, intermediate, draw, attention="attention/", ffn_in="intermediate/",
                          ffn_out="output/", attention_norm="attention/output/LayerNorm/",
                          output_norm="output/LayerNorm/"):
    v = {}
    for sub in ("self/query/", "self/key/", "self/value/", "output/dense/"):
        v[prefix + attention + sub + "kernel"] = draw(hidden, hidden)
        v[prefix + attention + sub + "bias"] = draw(hidden)
    v[prefix + ffn_in + "dense/kernel"] = draw(hidden, intermediate)
    v[prefix + ffn_in + "dense/bias"] = draw(intermediate)
    v[prefix + ffn_out + "dense/kernel"] = draw(intermediate, hidden)
    v[prefix + ffn_out + "dense/bias"] = draw(hidden)
    for norm in (attention_norm, output_norm):
        v[prefix + norm + "gamma"] = 1.0 + draw(hidden)
        v[prefix + norm + "beta"] = draw(hidden)
    return v


@dataclass(frozen=True)
class TinyLayout:
    """An original checkpoint format (a value of `LAYOUTS`): how its variables differ from Google BERT's.

    Args:
        config: ``bert_config.json`` keys its configs add, as ``(key, tiny value)`` pairs (a value given is kept).
        shared_block: one encoder block for every layer, under google-research/albert's names.
        position_table: it has ``bert/embeddings/position_embeddings`` (NEZHA and RoFormer place positions inside
            attention).
        scope: its encoder's variable scope.
        discriminator: google-research/electra's ``discriminator_predictions/dense`` and ``dense_1`` in place of the
            pooler and the ``cls/`` heads (and ``embeddings_project`` when ``embedding_size != hidden_size``).
    """

    config: tuple = ()
    shared_block: bool = False
    position_table: bool = True
    scope: str = "bert/"
    discriminator: bool = False


LAYOUTS = {
    "bert": TinyLayout(),
    "albert": TinyLayout(config=(("embedding_size", 8),), shared_block=True),
    # as in huawei-noah's NEZHA configs
    "nezha": TinyLayout(config=(("max_relative_position", 64), ("use_relative_position", True)), position_table=False),
    "roformer": TinyLayout(position_table=False),
    "electra": TinyLayout(config=(("embedding_size", 8),), scope="electra/", discriminator=True),
}


def tiny_layout(model):
    """The `TinyLayout` named ``model``."""
    if model not in LAYOUTS:
        raise ValueError(f"No tiny checkpoint layout for model {model!r}: use one of {sorted(LAYOUTS)}.")
    return LAYOUTS[model]


def tiny_checkpoint_variables(config, model="bert", seed=0, with_optimizer_slots=True):
    """Random float32 weights ``{original name: array}`` for ``config`` in layout ``model``, a key of `LAYOUTS`."""
    layout = tiny_layout(model)
    rng = np.random.default_rng(seed)

    def draw(*shape):
        return (rng.standard_normal(shape) * 0.2).astype("float32")

    hidden, intermediate = config["hidden_size"], config["intermediate_size"]
    embedding = config.get("embedding_size", hidden)
    variables = {
        "bert/embeddings/word_embeddings": draw(config["vocab_size"], embedding),
        "bert/embeddings/token_type_embeddings": draw(config["type_vocab_size"], embedding),
        "bert/embeddings/position_embeddings": draw(config["max_position_embeddings"], embedding),
        "bert/embeddings/LayerNorm/gamma": 1.0 + draw(embedding),
        "bert/embeddings/LayerNorm/beta": draw(embedding),
        "bert/pooler/dense/kernel": draw(hidden, hidden),
        "bert/pooler/dense/bias": draw(hidden),
        "cls/seq_relationship/output_weights": draw(2, hidden),
        "cls/seq_relationship/output_bias": draw(2),
        "cls/predictions/transform/dense/kernel": draw(hidden, embedding),
        "cls/predictions/transform/dense/bias": draw(embedding),
        "cls/predictions/transform/LayerNorm/gamma": 1.0 + draw(embedding),
        "cls/predictions/transform/LayerNorm/beta": draw(embedding),
        "cls/predictions/output_bias": draw(config["vocab_size"]),
        "global_step": np.array(1000, dtype="int64"),
    }
    if layout.shared_block:
        variables["bert/encoder/embedding_hidden_mapping_in/kernel"] = draw(embedding, hidden)
        variables["bert/encoder/embedding_hidden_mapping_in/bias"] = draw(hidden)
        variables.update(_bert_layer_variables(
            "bert/encoder/transformer/group_0/inner_group_0/", hidden, intermediate, draw,
            attention="attention_1/", ffn_in="ffn_1/intermediate/", ffn_out="ffn_1/intermediate/output/",
            attention_norm="LayerNorm/", output_norm="LayerNorm_1/"))
    else:
        for i in range(config["num_hidden_layers"]):
            variables.update(_bert_layer_variables(f"bert/encoder/layer_{i}/", hidden, intermediate, draw))
    if not layout.position_table:
        del variables["bert/embeddings/position_embeddings"]
    if layout.discriminator:
        variables = {n: v for n, v in variables.items() if n.startswith("bert/") and not n.startswith("bert/pooler/")}
        if embedding != hidden:
            variables["bert/embeddings_project/kernel"] = draw(embedding, hidden)
            variables["bert/embeddings_project/bias"] = draw(hidden)
        variables["discriminator_predictions/dense/kernel"] = draw(hidden, hidden)
        variables["discriminator_predictions/dense/bias"] = draw(hidden)
        variables["discriminator_predictions/dense_1/kernel"] = draw(hidden, 1)
        variables["discriminator_predictions/dense_1/bias"] = draw(1)
        variables["global_step"] = np.array(1000, dtype="int64")
    variables = {layout.scope + n[len("bert/"):] if n.startswith("bert/") else n: v for n, v in variables.items()}
    if with_optimizer_slots:
        for name in [n for n in variables if n != "global_step"]:
            variables[name + "/adam_m"] = np.zeros_like(variables[name])
            variables[name + "/adam_v"] = np.zeros_like(variables[name])
    return variables


def write_tiny_checkpoint(directory, model="bert", seed=0, **overrides):
    """Write ``bert_config.json``, ``vocab.txt`` and ``bert_model.ckpt.*`` to ``directory``, in layout ``model`` (a
    key of `LAYOUTS`) with weights drawn from ``seed`` and ``overrides`` over `TINY_CONFIG`.

    Returns ``(config_path, checkpoint_prefix, vocab_path)``.

    Example:
    >>> import tempfile
    >>> from bert4long.testing import write_tiny_checkpoint
    >>> config_path, checkpoint_path, vocab_path = write_tiny_checkpoint(tempfile.mkdtemp())
    """
    config = dict(TINY_CONFIG, **overrides)
    for key, value in tiny_layout(model).config:
        config.setdefault(key, value)
    os.makedirs(directory, exist_ok=True)
    config_path = os.path.join(directory, "bert_config.json")
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    vocab_path = os.path.join(directory, "vocab.txt")
    words = SPECIAL_TOKENS + [f"w{i}" for i in range(config["vocab_size"] - len(SPECIAL_TOKENS))]
    with open(vocab_path, "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")
    prefix = os.path.join(directory, "bert_model.ckpt")
    write_checkpoint(prefix, tiny_checkpoint_variables(config, model=model, seed=seed))
    return config_path, prefix, vocab_path
