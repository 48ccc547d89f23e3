"""Activation functions by the names BERT configs use.

``'gelu'`` is the exact (erf) form, as in bert4keras and Hugging Face; Google's
original BERT code used the tanh approximation, available as ``'gelu_tanh'``
(also spelled ``'gelu_new'`` / ``'gelu_pytorch_tanh'`` in Hugging Face configs).
The two differ by at most ~1e-3 per activation; `set_default_gelu('tanh')`
makes the name ``'gelu'`` mean the tanh form for models built afterwards.
"""
import math

import keras
from keras import ops

_DEFAULT_GELU = {"form": "erf"}


@keras.saving.register_keras_serializable(package="bert4long")
def gelu_erf(x):
    """Exact GELU: ``x * Phi(x)`` with the normal CDF written through erf."""
    return 0.5 * x * (1.0 + ops.erf(x / math.sqrt(2.0)))


@keras.saving.register_keras_serializable(package="bert4long")
def gelu_tanh(x):
    """Tanh approximation of GELU used by Google's original BERT code."""
    cdf = 0.5 * (1.0 + ops.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * ops.power(x, 3))))
    return x * cdf


_ALIASES = {
    "gelu_erf": gelu_erf,
    "gelu_tanh": gelu_tanh,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_fast": gelu_tanh,
}


def set_default_gelu(form):
    """Choose what the activation name ``'gelu'`` means: ``'erf'`` (default) or ``'tanh'``."""
    if form not in ("erf", "tanh"):
        raise ValueError(f"GELU form must be 'erf' or 'tanh', got {form!r}.")
    _DEFAULT_GELU["form"] = form


def activation_names():
    """The names `get_activation` resolves, sorted: bert4long's GELU spellings and Keras's activations.

    >>> from bert4long.layers.activations import activation_names
    >>> {"gelu", "gelu_new", "relu", "tanh"} <= set(activation_names())
    True
    """
    keras_names = {name for name in dir(keras.activations) if not name.startswith("_")} - {"get", "serialize",
                                                                                           "deserialize"}
    return sorted({"gelu", *_ALIASES, *keras_names})


def get_activation(identifier):
    """Resolve an activation name from a BERT config (or a callable) to a function.

    Example:
    >>> from bert4long.layers.activations import get_activation
    >>> get_activation("gelu").__name__
    'gelu_erf'
    """
    if callable(identifier) or identifier is None:
        return identifier
    if identifier == "gelu":
        return gelu_erf if _DEFAULT_GELU["form"] == "erf" else gelu_tanh
    if identifier in _ALIASES:
        return _ALIASES[identifier]
    return keras.activations.get(identifier)
