"""The model families, as the list of their declarations: where each `bert4long.family.Family` lives.

A declaration is named by where it lives (``"module:NAME"``) and imported on first use. The family modules
import `bert4long.models` (for `BERT` and `Transformer`), and `bert4long.models` finds them here by name:
this module imports nothing of bert4long at import time, so no import runs in a cycle.

>>> family("XLM_RoBERTa").model_types
('xlm-roberta',)
>>> registered_model_class("RoFormer").__name__
'RoFormer'
"""
import functools
import importlib

# Every family's declaration, "module:NAME". A new family adds its line here (docs/architecture.md).
FAMILY_DECLARATIONS = (
    "bert4long.bert_families:BERT_FAMILY",
    "bert4long.bert_families:ROBERTA_FAMILY",
    "bert4long.bert_families:XLM_ROBERTA_FAMILY",
    "bert4long.albert:ALBERT_FAMILY",
    "bert4long.albert:ALBERT_UNSHARED_FAMILY",
    "bert4long.relative_position:NEZHA_FAMILY",
    "bert4long.relative_position:ROFORMER_FAMILY",
    "bert4long.electra:ELECTRA_FAMILY",
    "bert4long.modernbert:MODERNBERT_FAMILY",
    "bert4long.longformer:LONGFORMER_FAMILY",
    "bert4long.big_bird:BIG_BIRD_FAMILY",
)
# `bert4long.models` names of builder classes that no family builds directly.
EXTRA_CLASSES = {"RelativePositionBERT": "bert4long.relative_position:RelativePositionBERT"}


def load_class(location):
    """The object at ``"module:NAME"``, importing its module."""
    module, name = location.split(":")
    return getattr(importlib.import_module(module), name)


@functools.cache
def families():
    """Every declared `Family`, in `FAMILY_DECLARATIONS` order (their modules imported on the first call)."""
    return tuple(load_class(location) for location in FAMILY_DECLARATIONS)


def model_names():
    """Every ``model=`` name (aliases included), sorted."""
    return sorted(name for declared in families() for name in declared.names)


def family(model):
    """The `Family` of ``model=`` name ``model`` (any case).

    >>> family("longformer").global_tokens
    True
    """
    name = model.lower()
    for declared in families():
        if name in declared.names:
            return declared
    raise ValueError(f"Unknown model {model!r}: choose one of {model_names()}.")


def family_of_model_type(model_type):
    """The `Family` reading Hugging Face ``model_type`` (None if no family does)."""
    return next((declared for declared in families() if model_type in declared.model_types), None)


def registered_model_class(model):
    """The builder class of ``model=`` name ``model`` (any case)."""
    return family(model).builder_class()


def family_model_class(model_type):
    """The builder class of the family reading Hugging Face ``model_type``."""
    return family_of_model_type(model_type).builder_class()


def models_attribute(name):
    """`bert4long.models`'s names resolved on first use: ``MODELS`` (``{model= name: class}`` of the families
    read from Google-layout checkpoints), ``MODEL_CLASSES`` / ``FAMILY_MODELS`` (the same, and Hugging Face
    ``model_type`` -> ``"module:Class"`` of the families with their own tensor names) and the families' classes.

    >>> models_attribute("MODELS")["albert"].__name__
    'ALBERT'
    """
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "MODELS":
        return {model: load_class(location) for model, location in models_attribute("MODEL_CLASSES").items()}
    if name == "MODEL_CLASSES":
        return {model: f.builder for f in families() if not f.reads_own_names for model in f.names}
    if name == "FAMILY_MODELS":
        return {model_type: f.builder for f in families() if f.reads_own_names for model_type in f.model_types}
    classes = {f.builder.split(":")[1]: f.builder for f in families()} | EXTRA_CLASSES
    if name in classes:
        return load_class(classes[name])
    raise AttributeError(f"module 'bert4long.models' has no attribute {name!r}")


def __getattr__(name):
    """``MODEL_CLASSES`` and ``FAMILY_MODELS``, the tables this module held before families were declared."""
    if name in ("MODEL_CLASSES", "FAMILY_MODELS"):
        return models_attribute(name)
    raise AttributeError(f"module 'bert4long.model_registry' has no attribute {name!r}")
