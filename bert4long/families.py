"""Every model family as data: one table of declarations, readable without starting TensorFlow.

A `Family` names its builder (``"module:Class"``, imported on first use), the checkpoint format it reads, its
config keys, its capabilities and its tiny test checkpoint; everything else asks the family
(``family.position_extension``, ``family.from_huggingface(config)``) instead of matching its name. A family whose
checkpoints differ from one already here only in their config is one `Family(...)` line in `FAMILIES`; a new
architecture adds its builder under `bert4long.models` (docs/architecture.md).

Example:
>>> family("roberta").from_huggingface({"vocab_size": 9, "max_position_embeddings": 514, "pad_token_id": 1})["max_position"]
512
>>> family("roberta").to_huggingface({"max_position": 512, "pad_token_id": 1})["max_position_embeddings"]
514
>>> family_of_model_type("xlm-roberta").name
'xlm-roberta'
"""
import importlib
from dataclasses import dataclass

# (bert4long name, Google bert_config.json name, Hugging Face config.json name, value when a file lacks it;
#  None: required, no default)
CONFIG_KEYS = (
    ("vocab_size", "vocab_size", "vocab_size", None),
    ("hidden_size", "hidden_size", "hidden_size", None),
    ("num_hidden_layers", "num_hidden_layers", "num_hidden_layers", None),
    ("num_attention_heads", "num_attention_heads", "num_attention_heads", None),
    ("intermediate_size", "intermediate_size", "intermediate_size", None),
    ("hidden_act", "hidden_act", "hidden_act", "gelu"),
    ("initializer_range", "initializer_range", "initializer_range", 0.02),
    ("max_position", "max_position_embeddings", "max_position_embeddings", 512),
    ("segment_vocab_size", "type_vocab_size", "type_vocab_size", 2),
    ("dropout_rate", "hidden_dropout_prob", "hidden_dropout_prob", 0.1),
    ("attention_dropout_rate", "attention_probs_dropout_prob", "attention_probs_dropout_prob", 0.1),
    ("layer_norm_epsilon", "layer_norm_eps", "layer_norm_eps", 1e-12),
    ("pad_token_id", "pad_token_id", "pad_token_id", 0),
)
# bert4keras renames of Google config keys: {bert4long name: Google name} where they differ.
CONFIG_RENAMES = {ours: google for ours, google, _, _ in CONFIG_KEYS if ours != google}


# Checkpoint formats: a TensorFlow checkpoint under Google's names (Hugging Face BERT/RoBERTa folders are read
# under those names through `bert4long.checkpoints.huggingface.GoogleNames`), or a safetensors folder under its own names.
# Either is read through `bert4long.checkpoints.tf_format.WeightReader` (`bert4long.checkpoints.layout`, the engine).
FORMATS = ("tf", "safetensors")


def with_defaults(rows, **defaults):
    """Key-table ``rows`` with the value a file lacking a key gets replaced, by bert4long name.

    >>> dict((row[0], row[3]) for row in with_defaults(CONFIG_KEYS, pad_token_id=1))["pad_token_id"]
    1
    """
    return tuple((ours, google, hf, defaults.get(ours, default)) for ours, google, hf, default in rows)


@dataclass(frozen=True)
class TinyCheckpoint:
    """A family's tiny test checkpoint (written by tests/conftest.py) and the independent model the family suite
    checks its outputs against (tests/families/test_family_suite.py).

    Args:
        writer: ``"google"``: a Google-layout checkpoint (`bert4long.testing.write_tiny_checkpoint`); else a Hugging
            Face folder saved by transformers' ``{architecture}ForMaskedLM`` with the tokenizer it names: ``"bpe"``
            (RoBERTa's vocab.json and merges.txt), ``"sentencepiece"`` (fairseq's sentencepiece.bpe.model) or
            ``"tokenizer.json"`` (one fast-tokenizer file with [CLS]/[SEP] templates, as ModernBERT's).
        layout: (``"google"``) the original checkpoint format, a key of `bert4long.testing.LAYOUTS`.
        seed: (``"google"``) the seed of its random weights.
        config: ``(key, value)`` pairs over the writer's tiny config (``bert_config.json`` keys, or the arguments of
            transformers' ``{architecture}Config``).
        reference: ``"numpy_bert"`` (BERT and ALBERT), ``"numpy_families"`` (NEZHA, RoFormer, ELECTRA's
            discriminator): the float64 numpy models of tests/; ``"transformers"``: ``{architecture}ForMaskedLM``.
        positions: (``"numpy_families"``) ``"absolute"``, ``"relative"`` (NEZHA's) or ``"rotary"`` (RoFormer's).
    """

    writer: str
    layout: str = ""
    seed: int = 0
    config: tuple = ()
    reference: str = "transformers"
    positions: str = "absolute"


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
        masked_lm: its checkpoints have a masked-LM head to continue (ELECTRA's discriminator: none).
        writes_back: trained weights can be written in its checkpoint layout (ALBERT's layout holds one shared
            block, which unshared layers no longer fit).
        tiny: its `TinyCheckpoint`, for the tests.
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
    masked_lm: bool = True
    writes_back: bool = True
    tiny: TinyCheckpoint = None

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

    def from_huggingface(self, hf, source="config.json"):
        """Builder arguments (bert4long keys) of a ``config.json`` dict (read from ``source``, which errors name):
        each row's value or its default, positions without the offset rows."""
        for key, value in self.refused:
            if hf.get(key, value) != value:
                wanted = ", ".join(f"{k}={v}" for k, v in self.refused)
                raise ValueError(f"bert4long builds {self.name} with {wanted}, as the released checkpoints; this "
                                 f"config.json has {key}={hf[key]!r}.")
        if self.config_keys is None:
            return self.builder_class().from_huggingface_config(hf, source)
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


# Every family, in the order --model's help lists them. Builders: `bert4long.models`.
FAMILIES = (
    Family("bert", "bert4long.models:BERT", model_types=("bert",), architecture="Bert",
           task_prefixes=("bert.",), head_prefixes=("cls.",),
           tiny=TinyCheckpoint("google", layout="bert", seed=1, reference="numpy_bert")),
    # RoBERTa's position table starts after its padding id (two unused rows); its folders name the encoder
    # ``roberta.`` and the MLM head ``lm_head.``.
    Family("roberta", "bert4long.models:BERT", model_types=("roberta",), architecture="Roberta",
           task_prefixes=("roberta.",), head_prefixes=("lm_head.",),
           config_keys=with_defaults(CONFIG_KEYS, pad_token_id=1), position_offset=True,
           tiny=TinyCheckpoint("bpe", config=(("max_position_embeddings", 66), ("type_vocab_size", 1)))),
    # RoBERTa with a SentencePiece vocabulary (BGE-M3 and multilingual-e5: XLM-RoBERTa with 8,194 positions).
    Family("xlm-roberta", "bert4long.models:BERT", aliases=("xlm_roberta",), model_types=("xlm-roberta",),
           architecture="XLMRoberta", task_prefixes=("roberta.",), head_prefixes=("lm_head.",),
           config_keys=with_defaults(CONFIG_KEYS, pad_token_id=1), position_offset=True,
           tiny=TinyCheckpoint("sentencepiece", config=(("max_position_embeddings", 66), ("type_vocab_size", 1)))),
    Family("albert", "bert4long.models.albert:ALBERT",
           tiny=TinyCheckpoint("google", layout="albert", seed=2, reference="numpy_bert")),
    # ALBERT's layout holds one shared block, which unshared layers no longer fit.
    Family("albert_unshared", "bert4long.models.albert:ALBERTUnshared", writes_back=False,
           tiny=TinyCheckpoint("google", layout="albert", seed=2, reference="numpy_bert")),
    # Positions inside attention: no table to extend. The tiny max_relative_position (5) clips at short lengths.
    Family("nezha", "bert4long.models.relative_position:NEZHA", position_extension=False,
           tiny=TinyCheckpoint("google", layout="nezha", seed=11, config=(("max_relative_position", 5),),
                               reference="numpy_families", positions="relative")),
    Family("roformer", "bert4long.models.relative_position:RoFormer", position_extension=False,
           tiny=TinyCheckpoint("google", layout="roformer", seed=12, reference="numpy_families", positions="rotary")),
    # The discriminator: no masked-LM head to continue.
    Family("electra", "bert4long.models.electra:ELECTRA", masked_lm=False,
           tiny=TinyCheckpoint("google", layout="electra", seed=13, reference="numpy_families")),
    # Its config.json has no BERT key table (rope_parameters, layer_types): `ModernBERT.from_huggingface_config`
    # reads it.
    Family("modernbert", "bert4long.models.modernbert:ModernBERT", model_types=("modernbert",),
           architecture="ModernBert", checkpoint="safetensors", task_prefixes=("model.",),
           head_prefixes=("head.", "decoder."), encoder_prefixes=("embeddings.", "layers.", "final_norm."),
           config_keys=None, position_extension=False, rope_scaling=True, segment_ids=False,
           tiny=TinyCheckpoint("tokenizer.json", config=(
               ("intermediate_size", 40), ("num_hidden_layers", 3), ("num_attention_heads", 2), ("local_attention", 8),
               ("global_attn_every_n_layers", 2), ("max_position_embeddings", 128)))),
    # RoBERTa's table (positions after pad_token_id) and its own attention: no position extension.
    Family("longformer", "bert4long.models.longformer:Longformer", model_types=("longformer",),
           architecture="Longformer", checkpoint="safetensors", task_prefixes=("longformer.",),
           head_prefixes=("lm_head.",),
           config_keys=with_defaults(CONFIG_KEYS, max_position=4098, segment_vocab_size=1, layer_norm_epsilon=1e-5,
                                     pad_token_id=1) + (("attention_window", None, "attention_window", 512),),
           position_offset=True, position_extension=False, global_tokens=True,
           tiny=TinyCheckpoint("bpe", config=(("attention_window", (4, 8)), ("max_position_embeddings", 66),
                                              ("type_vocab_size", 1)))),
    # Built as the released checkpoints: biased query/key/value, unscaled embeddings, an encoder (`refused`).
    Family("big_bird", "bert4long.models.big_bird:BigBird", model_types=("big_bird",), architecture="BigBird",
           checkpoint="safetensors", task_prefixes=("bert.",), head_prefixes=("cls.",),
           config_keys=with_defaults(CONFIG_KEYS, max_position=4096) + tuple(
               (key, None, key, None) for key in ("block_size", "num_random_blocks", "attention_type")),
           refused=(("use_bias", True), ("rescale_embeddings", False), ("is_decoder", False)),
           tiny=TinyCheckpoint("bpe", config=(("block_size", 2), ("num_random_blocks", 1),
                                              ("max_position_embeddings", 64), ("sep_token_id", 2)))),
)


def model_names():
    """Every ``model=`` name (aliases included), sorted."""
    return sorted(name for declared in FAMILIES for name in declared.names)


def google_layout_families():
    """The families ``--model`` picks: those read from Google-layout checkpoints (a Hugging Face folder whose
    family reads its own tensor names is built as its ``config.json`` says).

    >>> [f.name for f in google_layout_families()][:3]
    ['bert', 'roberta', 'xlm-roberta']
    """
    return tuple(declared for declared in FAMILIES if not declared.reads_own_names)


def family(model):
    """The `Family` of ``model=`` name ``model`` (any case).

    >>> family("longformer").global_tokens
    True
    """
    name = model.lower()
    for declared in FAMILIES:
        if name in declared.names:
            return declared
    raise ValueError(f"Unknown model {model!r}: choose one of {model_names()}.")


def family_of_builder(builder):
    """The first `Family` whose builder is ``builder`` (``"module:Class"``; None if no family declares it): the family
    a builder class is (`bert4long.checkpoints.layout.CheckpointIO.family`).

    >>> family_of_builder("bert4long.models:BERT").name, family_of_builder("my.module:Mine")
    ('bert', None)
    """
    return next((declared for declared in FAMILIES if declared.builder == builder), None)


def family_of_model_type(model_type):
    """The `Family` reading Hugging Face ``model_type`` (None if no family does)."""
    return next((declared for declared in FAMILIES if model_type in declared.model_types), None)
