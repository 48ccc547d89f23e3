"""bert4long: pretrained BERT-family models that read long documents, on Keras 3."""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"
