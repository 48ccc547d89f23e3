"""bert4long: pretrained BERT-family models that read long documents, on Keras 3.

``import bert4long`` registers every Keras class bert4long defines (layers,
attention kernels, models, optimizers), so a saved ``model.keras`` loads with
``keras.models.load_model(path)`` and no ``custom_objects``.

>>> from bert4long import build_transformer_model, Tokenizer  # doctest: +SKIP
"""
import os

if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
    raise ImportError(
        f"bert4long runs Keras 3 on the TensorFlow backend, but KERAS_BACKEND={os.environ['KERAS_BACKEND']!r}: "
        "unset it or set KERAS_BACKEND=tensorflow before importing keras."
    )
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"

# Keras registers a class when its module runs: import every module that defines one.
from bert4long import attention, layers, longformer, masked_lm_model, modernbert, optimizers, recurrence  # noqa: F401
from bert4long.checkpoints import MissingCheckpointVariableError
from bert4long.models import build_transformer_model
from bert4long.tokenizers import Tokenizer, load_vocab
from bert4long.training import finetune  # noqa: F401

__all__ = ["MissingCheckpointVariableError", "Tokenizer", "build_transformer_model", "load_vocab"]
