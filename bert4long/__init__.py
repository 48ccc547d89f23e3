"""bert4long: pretrained BERT-family models that read long documents, on Keras 3.

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

_LAZY = {"build_transformer_model": "bert4long.models", "Tokenizer": "bert4long.tokenizers",
         "load_vocab": "bert4long.tokenizers"}


def __getattr__(name):
    """Import the main entry points on first use, so `import bert4long` stays cheap."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bert4long' has no attribute {name!r}")
