"""Which class builds each ``model=`` name: the registry `build_transformer_model` looks names up in.

A class is named by where it lives (``"module:Class"``) and imported on first use. The family modules
import `bert4long.models` (for `BERT` and `Transformer`), and `bert4long.models` finds them here by
name: this module imports nothing of bert4long, so no import runs in a cycle.

>>> registered_model_class("RoFormer").__name__
'RoFormer'
"""
import importlib

# Families whose Google-layout checkpoints `build_transformer_model(model=...)` reads: name -> "module:Class".
MODEL_CLASSES = {
    "bert": "bert4long.models:BERT",
    "roberta": "bert4long.models:BERT",
    "albert": "bert4long.albert:ALBERT",
    "albert_unshared": "bert4long.albert:ALBERTUnshared",
    "nezha": "bert4long.relative_position:NEZHA",
    "roformer": "bert4long.relative_position:RoFormer",
    "electra": "bert4long.electra:ELECTRA",
}
# Families built by their own module from their own config.json keys: model_type -> "module:Class".
FAMILY_MODELS = {
    "modernbert": "bert4long.modernbert:ModernBERT",
    "longformer": "bert4long.longformer:Longformer",
    "big_bird": "bert4long.big_bird:BigBird",
}
# The classes of `MODEL_CLASSES` kept in their own modules, which are also `bert4long.models` names.
FAMILY_CLASSES = {location.split(":")[1]: location for location in MODEL_CLASSES.values()
                  if not location.startswith("bert4long.models:")}
FAMILY_CLASSES["RelativePositionBERT"] = "bert4long.relative_position:RelativePositionBERT"


def load_class(location):
    """The class at ``"module:Class"``, importing its module."""
    module, name = location.split(":")
    return getattr(importlib.import_module(module), name)


def registered_model_class(model):
    """The builder class of ``model=`` name ``model`` (`MODEL_CLASSES`, then `FAMILY_MODELS`), any case."""
    name = model.lower()
    if name not in MODEL_CLASSES and name not in FAMILY_MODELS:
        raise ValueError(f"Unknown model {model!r}: choose one of {sorted(MODEL_CLASSES) + sorted(FAMILY_MODELS)}.")
    return load_class(MODEL_CLASSES.get(name) or FAMILY_MODELS[name])


def family_model_class(model_type):
    """The class of a family kept in its own module (`FAMILY_MODELS`), imported on first use."""
    return load_class(FAMILY_MODELS[model_type])


def models_attribute(name):
    """`bert4long.models`'s names resolved on first use: ``MODELS`` (``{model= name: class}``) and
    the classes of `FAMILY_CLASSES`.

    >>> models_attribute("MODELS")["albert"].__name__
    'ALBERT'
    """
    if name == "MODELS":
        return {model: load_class(location) for model, location in MODEL_CLASSES.items()}
    if name in FAMILY_CLASSES:
        return load_class(FAMILY_CLASSES[name])
    raise AttributeError(f"module 'bert4long.models' has no attribute {name!r}")
