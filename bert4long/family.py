"""A model family as one declaration: its names, checkpoint format, config keys and capabilities.

Each family module declares one `Family` beside its builder (``BERT_FAMILY`` ...);
`bert4long.model_registry` lists where they are. Everything else asks the
family (``family.position_extension``, ``family.from_huggingface(config)``)
instead of matching its name.

Example:
>>> from bert4long.config_keys import CONFIG_KEYS
>>> from bert4long.family import Family, with_defaults
>>> family = Family("roberta", "bert4long.models:BERT", model_types=("roberta",), position_offset=True,
...                 config_keys=with_defaults(CONFIG_KEYS, pad_token_id=1))
>>> family.from_huggingface({"vocab_size": 9, "max_position_embeddings": 514, "pad_token_id": 1})["max_position"]
512
>>> family.to_huggingface({"max_position": 512, "pad_token_id": 1})["max_position_embeddings"]
514
"""
import importlib
from dataclasses import dataclass

from bert4long.config_keys import CONFIG_KEYS

# Checkpoint formats: a TensorFlow checkpoint under Google's names (Hugging Face BERT/RoBERTa folders are read
# under those names through `bert4long.huggingface.GoogleNames`), or a safetensors folder under its own names.
# Either is read through `bert4long.checkpoints.WeightReader` (`bert4long.checkpoint_layout`, the engine).
FORMATS = ("tf", "safetensors")


def with_defaults(rows, **defaults):
    """Key-table ``rows`` with the value a file lacking a key gets replaced, by bert4long name.

    >>> dict((row[0], row[3]) for row in with_defaults(CONFIG_KEYS, pad_token_id=1))["pad_token_id"]
    1
    """
    return tuple((ours, google, hf, defaults.get(ours, default)) for ours, google, hf, default in rows)


@dataclass(frozen=True)
class Family:
    """One model family.

    Args:
        name: its ``model=`` name.
        builder: its builder class as ``"module:Class"`` (imported on first use).
        aliases: other ``model=`` names.
        model_types: the Hugging Face ``config.json`` ``model_type`` values it reads.
        architecture: transformers' class stem (``"XLMRoberta"``: ``XLMRobertaModel``, ``...ForMaskedLM``).
        checkpoint: one of `FORMATS`.
        task_prefixes: prefixes a Hugging Face ``*Model`` saves its encoder tensors without and the task
            models (``*ForMaskedLM``) with (``"roberta."``); the first is the one written.
        head_prefixes: the task heads' tensor names, saved without a task prefix (``"lm_head."``).
        encoder_prefixes: (``checkpoint="safetensors"``) the tensor names a model must use or lose (the
            encoder's; a task head may be left out).
        config_keys: rows ``(bert4long name, Google name, Hugging Face name, value when a file lacks it)``
            (None: required, or left to the builder); None: the builder translates its ``config.json`` itself
            (``from_huggingface_config``).
        refused: ``(Hugging Face key, the only value built)`` pairs: a config with another value is refused.
        position_offset: RoBERTa's position table, whose rows start after ``pad_token_id`` (two unused).
        position_extension: it reads beyond its trained positions (``hierarchical_position``, ...).
        rope_scaling: its rotary positions can be stretched beyond the trained length (``rope_scaling=``: linear,
            dynamic or yarn, `bert4long.rope_scaling.resolve_rope_scaling`; the command line's --rope-scaling).
        global_tokens: its attention-mask input marks global tokens (Longformer).
        segment_ids: it takes segment ids as a second input.
        tokenizer: what its folders usually hold (``"wordpiece"``, ``"bpe"``, ``"sentencepiece"``).
        masked_lm: its checkpoints have a masked-LM head to continue (ELECTRA's discriminator: none).
        writes_back: trained weights can be written in its checkpoint layout (ALBERT's layout holds one shared
            block, which unshared layers no longer fit).
    """

    name: str
    builder: str
    aliases: tuple = ()
    model_types: tuple = ()
    architecture: str = ""
    checkpoint: str = "tf"
    task_prefixes: tuple = ()
    head_prefixes: tuple = ()
    encoder_prefixes: tuple = ("embeddings.", "encoder.")
    config_keys: tuple = CONFIG_KEYS
    refused: tuple = ()
    position_offset: bool = False
    position_extension: bool = True
    rope_scaling: bool = False
    global_tokens: bool = False
    segment_ids: bool = True
    tokenizer: str = "wordpiece"
    masked_lm: bool = True
    writes_back: bool = True

    def __post_init__(self):
        if self.checkpoint not in FORMATS:
            raise ValueError(f"Family {self.name!r}: checkpoint must be one of {FORMATS}, got {self.checkpoint!r}.")

    @property
    def names(self):
        """Every ``model=`` name of the family."""
        return (self.name, *self.aliases)

    @property
    def reads_own_names(self):
        """True when its Hugging Face folders are read under their own tensor names (its own module)."""
        return self.checkpoint == "safetensors"

    def builder_class(self):
        """The builder class, importing its module."""
        module, name = self.builder.split(":")
        return getattr(importlib.import_module(module), name)

    def offset(self, pad_token_id):
        """Unused rows before the first position of its table (``pad_token_id + 1`` for RoBERTa, else 0)."""
        return pad_token_id + 1 if self.position_offset else 0

    def from_huggingface(self, hf):
        """Builder arguments (bert4long keys) of a ``config.json`` dict: each row's value or its default,
        positions without the offset rows."""
        for key, value in self.refused:
            if hf.get(key, value) != value:
                wanted = ", ".join(f"{k}={v}" for k, v in self.refused)
                raise ValueError(f"bert4long builds {self.name} with {wanted}, as the released checkpoints; this "
                                 f"config.json has {key}={hf[key]!r}.")
        if self.config_keys is None:
            return self.builder_class().from_huggingface_config(hf)
        config = {ours: hf[key] if hf.get(key) is not None else default
                  for ours, _, key, default in self.config_keys if hf.get(key) is not None or default is not None}
        if "max_position" in config:
            config["max_position"] -= self.offset(config.get("pad_token_id") or 0)
        return config

    def to_huggingface(self, config):
        """The ``config.json`` keys of builder arguments ``config`` (the reverse of `from_huggingface`)."""
        hf = {"model_type": self.model_types[0]} if self.model_types else {}
        hf.update({key: config[ours] for ours, _, key, _ in self.config_keys if ours in config})
        if "max_position" in config:
            hf["max_position_embeddings"] = config["max_position"] + self.offset(config.get("pad_token_id") or 0)
        return hf

    def builder_settings(self, builder):
        """The bert4long keys of `config_keys` a built ``builder`` holds (its initializer's stddev included)."""
        settings = {ours: getattr(builder, ours) for ours, _, _, _ in self.config_keys if hasattr(builder, ours)}
        settings["initializer_range"] = builder.initializer.stddev
        return settings

    def trained_positions(self, hf):
        """Trained positions of a ``config.json`` dict (its table's rows less the offset)."""
        return self.from_huggingface(hf).get("max_position")

    def placed_positions(self, hf):
        """Positions a ``config.json`` dict's model places: the trained ones, or more when the config records a
        rotary scaling (None: any length)."""
        config = self.from_huggingface(hf)
        return self.builder_class().placed_positions(config) if self.rope_scaling else config.get("max_position")
