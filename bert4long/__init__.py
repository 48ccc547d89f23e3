"""bert4long: pretrained BERT-family models that read long documents, on Keras 3.

``import bert4long`` is light: it imports neither TensorFlow nor Keras and changes
nothing outside the package (no import hooks, no warning filters, no logging), so the
tokenizers (``bert4long.tokenizers``) and the command's ``--help`` stay fast.

Keras finds a custom class of a saved ``model.keras`` only once the module defining it
has run. A model built in this process loads with ``keras.models.load_model(path)``
alone (its classes' modules ran to build it); in a fresh process, call
`register_keras_classes` first (the command line does, and so does the first use of
``bert4long.build_transformer_model``). No ``custom_objects`` are needed either way.

The model, its position extensions and attention kernels run on every Keras 3 backend
(``KERAS_BACKEND`` tensorflow, jax or torch, with TensorFlow's numbers), from Hugging Face
folders and Google TF checkpoints with no TensorFlow installed; the
``tf.data`` pipelines, SavedModel export, raw-text serving, ``tf.distribute`` and the training
commands run on it alone (elsewhere they refuse in one line: `bert4long.tensorflow_only`).

>>> from bert4long import build_transformer_model, Tokenizer  # doctest: +SKIP
"""
import importlib

__version__ = "0.1.0"

from bert4long.lazy_names import lazy_getattr

# The public names and the module of each, imported on first use.
_PUBLIC = {"MissingCheckpointVariableError": "bert4long.checkpoints.tf_format",
           "build_transformer_model": "bert4long.models", "Tokenizer": "bert4long.tokenizers",
           "load_vocab": "bert4long.tokenizers"}
# Keras registers a class when its module runs: these modules and every family's builder module import every
# one that defines a class.
_REGISTERING = ("bert4long.attention", "bert4long.layers", "bert4long.models.masked_lm", "bert4long.optimizers",
                "bert4long.models.recurrence", "bert4long.training.finetune")
__all__ = sorted(_PUBLIC) + ["register_keras_classes"]


def register_keras_classes():
    """Register every Keras class bert4long defines, so that ``keras.models.load_model(path)`` reads any
    ``.keras`` file bert4long wrote without ``custom_objects`` (it imports TensorFlow and Keras).

    Example:
    >>> import bert4long, keras
    >>> bert4long.register_keras_classes()
    >>> keras.saving.get_registered_object("bert4long>HierarchicalPositionEmbedding").__name__
    'HierarchicalPositionEmbedding'
    """
    from bert4long.families import FAMILIES

    for module in _REGISTERING + tuple(declared.builder.split(":")[0] for declared in FAMILIES):
        importlib.import_module(module)


_public_name = lazy_getattr(__name__, _PUBLIC)


def __getattr__(name):
    if _PUBLIC.get(name, "bert4long.tokenizers") != "bert4long.tokenizers":   # a model: its classes registered first
        register_keras_classes()
    return _public_name(name)
