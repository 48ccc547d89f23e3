"""bert4keras's `backend` module on Keras 3: `keras`, `K` and the tensor helpers.

bert4keras scripts start with ``from bert4keras.backend import keras, K``; with
bert4long they write ``from bert4long.backend import keras, K`` and keep the rest:

* `keras` is Keras 3 itself.
* `K` is a namespace of the Keras-2 backend functions those scripts call
  (``K.sum``, ``K.cast``, ``K.sparse_categorical_crossentropy``, ...), each a thin
  wrapper over `keras.ops` that keeps Keras 2's defaults (``K.argmax`` and
  ``K.concatenate`` work on the last axis, ``K.expand_dims`` appends one, ...).
  Keras 3 has no sessions, so ``K.get_session`` and friends are absent; variable
  helpers (``K.get_value``, ``K.batch_set_value``) work on `keras.Variable`.
* `set_gelu`, `search_layer`, `batch_gather`, `sequence_masking`, `piecewise_linear`
  and the multi-label losses keep bert4keras's signatures.

Example:
>>> import numpy as np
>>> from bert4long.backend import K
>>> float(K.sum(K.cast(np.array([1, 2, 3]), K.floatx())))
6.0
"""
import types

import keras
import numpy as np
from keras import ops

from bert4long.layers import activations
from bert4long.ops.positions import apply_rotary_position_embeddings
from bert4long.ops.schedules import piecewise_linear
from bert4long.ops.sequences import align, sequence_masking

__all__ = [
    "keras",
    "K",
    "set_gelu",
    "search_layer",
    "align",
    "batch_gather",
    "sequence_masking",
    "piecewise_linear",
    "sinusoidal_embeddings",
    "apply_rotary_position_embeddings",
    "multilabel_categorical_crossentropy",
    "sparse_multilabel_categorical_crossentropy",
]

GELU_FORMS = ("erf", "tanh")


# --------------------------------------------------------------------------
# K: Keras-2 backend functions (only where Keras 2's signature or default
# differs from keras.ops is there a wrapper; the rest are keras.ops as is).
# --------------------------------------------------------------------------
def _argmax(x, axis=-1):
    return ops.argmax(x, axis=axis)


def _argmin(x, axis=-1):
    return ops.argmin(x, axis=axis)


def _expand_dims(x, axis=-1):
    return ops.expand_dims(x, axis)


def _concatenate(tensors, axis=-1):
    return ops.concatenate(list(tensors), axis=axis)


def _cumsum(x, axis=0):
    return ops.cumsum(x, axis=axis)


def _cumprod(x, axis=0):
    return ops.cumprod(x, axis=axis)


def _int_shape(x):
    return tuple(x.shape)


def _ndim(x):
    return len(x.shape)


def _dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


def _relu(x, alpha=0.0, max_value=None, threshold=0.0):
    above = ops.greater(x, threshold)
    y = ops.where(above, x, alpha * (x - threshold))
    if max_value is not None:
        y = ops.minimum(y, max_value)
    return y


def _l2_normalize(x, axis=None):
    squares = ops.sum(ops.square(x), axis=axis, keepdims=True)
    return x * ops.rsqrt(ops.maximum(squares, 1e-12))


def _sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1):
    target = ops.cast(target, "int32")
    if len(target.shape) == len(output.shape):  # [..., 1] labels, as Keras 2 took
        target = ops.squeeze(target, axis=-1)
    return ops.sparse_categorical_crossentropy(target, output, from_logits, axis)


def _categorical_crossentropy(target, output, from_logits=False, axis=-1):
    return ops.categorical_crossentropy(ops.cast(target, output.dtype), output, from_logits, axis)


def _binary_crossentropy(target, output, from_logits=False):
    return ops.binary_crossentropy(ops.cast(target, output.dtype), output, from_logits)


def _zeros(shape, dtype=None, name=None):
    return ops.zeros(shape, dtype=dtype or keras.config.floatx())


def _ones(shape, dtype=None, name=None):
    return ops.ones(shape, dtype=dtype or keras.config.floatx())


def _eye(size, dtype=None, name=None):
    return ops.eye(size, dtype=dtype or keras.config.floatx())


def _arange(start, stop=None, step=1, dtype="int32"):
    return ops.arange(start, stop, step, dtype=dtype)


def _constant(value, dtype=None, shape=None, name=None):
    value = ops.convert_to_tensor(value, dtype=dtype or keras.config.floatx())
    return value if shape is None else ops.broadcast_to(value, shape)


def _variable(value, dtype=None, name=None):
    return keras.Variable(value, dtype=dtype or keras.config.floatx(), name=name)


def _get_value(x):
    return ops.convert_to_numpy(x)


def _batch_get_value(tensors):
    return [ops.convert_to_numpy(x) for x in tensors]


def _set_value(x, value):
    x.assign(value)


def _batch_set_value(tuples):
    for x, value in tuples:
        x.assign(value)


def _flatten(x):
    return ops.reshape(x, (-1,))


def _batch_flatten(x):
    return ops.reshape(x, (ops.shape(x)[0], -1))


def _reshape(x, shape):
    return ops.reshape(x, shape)


def _repeat_elements(x, rep, axis):
    return ops.repeat(x, rep, axis=axis)


def _gather(reference, indices):
    return ops.take(reference, indices, axis=0)


def _switch(condition, then_expression, else_expression):
    return ops.where(condition, then_expression, else_expression)


def _in_train_phase(x, alt, training=None):
    if training is None:
        raise ValueError(
            "K.in_train_phase needs training=True/False: Keras 3 has no global "
            "learning phase (pass the `training` argument your layer's call() received)."
        )
    return x if training else alt


K = types.SimpleNamespace(
    # configuration
    floatx=keras.config.floatx,
    set_floatx=keras.config.set_floatx,
    epsilon=keras.config.epsilon,
    set_epsilon=keras.config.set_epsilon,
    clear_session=keras.backend.clear_session,
    is_keras_tensor=keras.backend.is_keras_tensor,
    # shapes and types
    cast=ops.cast,
    dtype=_dtype,
    shape=ops.shape,
    int_shape=_int_shape,
    ndim=_ndim,
    reshape=_reshape,
    flatten=_flatten,
    batch_flatten=_batch_flatten,
    expand_dims=_expand_dims,
    squeeze=ops.squeeze,
    concatenate=_concatenate,
    stack=ops.stack,
    permute_dimensions=ops.transpose,
    transpose=ops.transpose,
    tile=ops.tile,
    repeat_elements=_repeat_elements,
    gather=_gather,
    one_hot=ops.one_hot,
    # reductions
    sum=ops.sum,
    mean=ops.mean,
    max=ops.max,
    min=ops.min,
    prod=ops.prod,
    std=ops.std,
    var=ops.var,
    any=ops.any,
    all=ops.all,
    argmax=_argmax,
    argmin=_argmin,
    cumsum=_cumsum,
    cumprod=_cumprod,
    logsumexp=ops.logsumexp,
    # element-wise
    exp=ops.exp,
    log=ops.log,
    sqrt=ops.sqrt,
    square=ops.square,
    abs=ops.abs,
    pow=ops.power,
    sign=ops.sign,
    round=ops.round,
    clip=ops.clip,
    maximum=ops.maximum,
    minimum=ops.minimum,
    equal=ops.equal,
    not_equal=ops.not_equal,
    greater=ops.greater,
    greater_equal=ops.greater_equal,
    less=ops.less,
    less_equal=ops.less_equal,
    where=ops.where,
    switch=_switch,
    stop_gradient=ops.stop_gradient,
    dot=ops.matmul,
    # activations and losses
    tanh=ops.tanh,
    sigmoid=ops.sigmoid,
    softplus=ops.softplus,
    softsign=ops.softsign,
    relu=_relu,
    elu=ops.elu,
    softmax=ops.softmax,
    l2_normalize=_l2_normalize,
    sparse_categorical_crossentropy=_sparse_categorical_crossentropy,
    categorical_crossentropy=_categorical_crossentropy,
    binary_crossentropy=_binary_crossentropy,
    # constructors and variables
    zeros=_zeros,
    ones=_ones,
    zeros_like=ops.zeros_like,
    ones_like=ops.ones_like,
    eye=_eye,
    arange=_arange,
    constant=_constant,
    variable=_variable,
    get_value=_get_value,
    eval=_get_value,
    batch_get_value=_batch_get_value,
    set_value=_set_value,
    batch_set_value=_batch_set_value,
    in_train_phase=_in_train_phase,
)


# --------------------------------------------------------------------------
# bert4keras.backend helpers
# --------------------------------------------------------------------------
def set_gelu(version):
    """Choose the form that the activation name ``'gelu'`` means in models built afterwards.

    Args:
        version: ``'erf'`` (exact, BERT's default) or ``'tanh'`` (the approximation
            of the original TF BERT code and GPT-2), case-insensitive.

    Example:
    >>> from bert4long.backend import set_gelu
    >>> set_gelu("tanh")
    >>> set_gelu("erf")
    """
    form = str(version).lower()
    if form not in GELU_FORMS:
        raise ValueError(
            f"set_gelu({version!r}): unknown gelu version; use one of {GELU_FORMS} "
            "('erf' is the exact form, 'tanh' the approximation)."
        )
    activations.set_default_gelu(form)


def search_layer(inputs, name, exclude_from=None):
    """Find the layer called ``name`` upstream of ``inputs`` (a layer or a Keras tensor).

    Walks the functional graph backwards from ``inputs``; returns `None` when no
    upstream layer has that name. Typical use: fetch the token embedding under an
    output, e.g. for adversarial training or a tied output projection.

    Example:
    >>> import keras
    >>> from bert4long.backend import search_layer
    >>> x = keras.Input((3,))
    >>> y = keras.layers.Dense(2, name="head")(keras.layers.Dense(4, name="body")(x))
    >>> search_layer(y, "body").name
    'body'
    """
    if exclude_from is None:
        exclude_from = set()
    layer = inputs if isinstance(inputs, keras.layers.Layer) else inputs._keras_history[0]
    if layer.name == name:
        return layer
    if id(layer) in exclude_from:
        return None
    exclude_from.add(id(layer))
    if isinstance(layer, keras.Model):
        for sublayer in layer.layers:
            if sublayer.name == name:
                return sublayer
    for node in layer._inbound_nodes[:1]:
        for tensor in node.input_tensors:
            found = search_layer(tensor, name, exclude_from)
            if found is not None:
                return found
    return None


def batch_gather(params, indices):
    """`tf.gather(params, indices, batch_dims=rank(indices) - 1)`: per-example gather.

    ``params``: ``[batch..., n, rest...]``; ``indices``: ``[batch..., k]`` ints in ``[0, n)``;
    returns ``[batch..., k, rest...]``.

    Example:
    >>> import numpy as np
    >>> from bert4long.backend import batch_gather
    >>> np.asarray(batch_gather(np.array([[10, 11, 12], [20, 21, 22]]), np.array([[2, 0], [1, 1]]))).tolist()
    [[12, 10], [21, 21]]
    """
    indices = ops.cast(indices, "int32")
    axis = len(indices.shape) - 1
    for _ in range(len(params.shape) - len(indices.shape)):
        indices = ops.expand_dims(indices, -1)
    return ops.take_along_axis(params, indices, axis=axis)


def sinusoidal_embeddings(pos, dim, base=10000):
    """Sinusoidal encodings of positions ``pos`` (any shape), interleaved ``[sin, cos]`` pairs.

    Example:
    >>> import numpy as np
    >>> from bert4long.backend import sinusoidal_embeddings
    >>> tuple(sinusoidal_embeddings(np.arange(4.0), 6).shape)
    (4, 6)
    """
    if dim % 2:
        raise ValueError(f"sinusoidal_embeddings: dim must be even, got {dim}.")
    freqs = ops.power(float(base), -2.0 * ops.arange(dim // 2, dtype="float32") / dim)
    angles = ops.expand_dims(ops.cast(pos, "float32"), -1) * freqs
    pairs = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.reshape(pairs, tuple(ops.shape(angles)[:-1]) + (dim,))


def multilabel_categorical_crossentropy(y_true, y_pred):
    """Multi-label cross-entropy of https://kexue.fm/archives/7359 (no sigmoid on ``y_pred``).

    ``log(1 + sum_neg exp(s)) + log(1 + sum_pos exp(-s))``; predict the classes with
    ``y_pred > 0``. ``y_true`` is 0/1 (or soft) with the shape of ``y_pred``.

    Example:
    >>> import numpy as np
    >>> from bert4long.backend import multilabel_categorical_crossentropy
    >>> round(float(multilabel_categorical_crossentropy(np.array([1.0, 0.0]), np.array([0.0, 0.0]))), 4)
    1.3863
    """
    y_true = ops.cast(y_true, y_pred.dtype)
    valid = ops.not_equal(y_pred, -np.inf)
    minus_inf = ops.cast(-np.inf, y_pred.dtype)
    y_neg = ops.where(valid, y_pred, minus_inf) + ops.log(1 - y_true)
    y_pos = ops.where(valid, -y_pred, minus_inf) + ops.log(y_true)
    zeros = ops.zeros_like(y_pred[..., :1])
    neg_loss = ops.logsumexp(ops.concatenate([y_neg, zeros], axis=-1), axis=-1)
    pos_loss = ops.logsumexp(ops.concatenate([y_pos, zeros], axis=-1), axis=-1)
    return neg_loss + pos_loss


def sparse_multilabel_categorical_crossentropy(y_true, y_pred, mask_zero=False):
    """Sparse form of `multilabel_categorical_crossentropy`: ``y_true`` lists positive class ids.

    ``y_true``: ``[..., num_positive]`` ints; ``y_pred``: ``[..., num_classes]``. With
    ``mask_zero=True`` class 0 is padding (pad ``y_true`` with 0 to a common length).

    Example:
    >>> import numpy as np
    >>> from bert4long.backend import sparse_multilabel_categorical_crossentropy
    >>> round(float(sparse_multilabel_categorical_crossentropy(np.array([0]), np.array([0.0, 0.0]))), 4)
    1.3863
    """
    zeros = ops.zeros_like(y_pred[..., :1])
    y_pred = ops.concatenate([y_pred, zeros], axis=-1)
    if mask_zero:
        infs = zeros + np.inf
        y_pred = ops.concatenate([infs, y_pred[..., 1:]], axis=-1)
    y_pos_2 = batch_gather(y_pred, y_true)
    y_pos_1 = ops.concatenate([y_pos_2, zeros], axis=-1)
    if mask_zero:
        y_pred = ops.concatenate([-infs, y_pred[..., 1:]], axis=-1)
        y_pos_2 = batch_gather(y_pred, y_true)
    pos_loss = ops.logsumexp(-y_pos_1, axis=-1)
    all_loss = ops.logsumexp(y_pred, axis=-1)
    aux_loss = ops.logsumexp(y_pos_2, axis=-1) - all_loss
    aux_loss = ops.clip(1 - ops.exp(aux_loss), keras.config.epsilon(), 1)
    return pos_loss + all_loss + ops.log(aux_loss)
