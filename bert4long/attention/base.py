"""The attention-kernel seam and the exact (full) softmax attention.

A kernel receives projected queries, keys and values shaped
``[batch, length, heads, head_dim]`` and returns ``[batch, length, heads, head_dim]``.
Masking conventions shared by every kernel:

* ``key_mask``: ``[batch, length]``, true (non-zero) where the key is a real token
  (token id != 0). Padded keys never receive attention. It is bool, or int with
  Longformer's convention (0 padding, 1 local, 2 global) when the model has a
  global-attention mask input: every kernel reads ``cast(key_mask, bool)``, and
  ``sliding_window`` also makes the tokens marked 2 global.
* ``bias``: optional additive float bias broadcastable to
  ``[batch, heads, q_length, k_length]`` (UniLM masks, relative positions).
  Kernels that cannot honour a dense bias raise ``ValueError`` at build time.
* ``causal``: a Python bool fixed at construction (``application='lm'``).

Every kernel that forms attention probabilities masks and normalises its
scores with `masked_softmax` (in float32, or bfloat16 for bfloat16 scores: `softmax_dtype`; masked
entries at `MASKED_SCORE`), and drops them with its `SeededDropout`
(``probs_dropout``, so that `Recompute` redraws the same masks): every variant
masks and drops the same way. (``chunked`` normalises online, block by block,
and shares the masking step, `mask_scores`.)
"""
import importlib
import inspect
import math
from typing import NamedTuple

import keras
from keras import ops

from bert4long.kernel_names import BUILT_IN_KERNELS, KERNEL_CLASSES, built_in_name
from bert4long.ops.dropout import SeededDropout, recompute, recording_eagerly

MASKED_SCORE = -1e12  # bert4keras's -K.infinity(): exp() underflows to exactly 0.

_KERNELS = {}


class KernelOption(NamedTuple):
    """One ``attention_config`` option of a kernel: its name, type, default and help (from the class docstring)."""

    name: str
    type: type
    default: object
    help: str


def softmax_dtype(dtype):
    """The dtype attention scores are masked and normalised in: float32, except bfloat16 scores on PyTorch, and on
    TensorFlow on a CPU with bfloat16 units (`bert4long.precision.bfloat16_units`), which stay bfloat16.

    Those bfloat16 softmax kernels compute in float32 and round once at the end (PyTorch's CPU kernels; oneDNN's on
    AVX512-BF16, AMX or Arm BF16): within one bfloat16 step of the float32 softmax of the same scores, which the
    matmul that made them has already rounded to bfloat16. A cast to float32 and back would only add two passes over
    the ``[batch, heads, q, k]`` scores, which cost more than the matmuls at 2,048 tokens on CPU. TensorFlow's
    bfloat16 softmax on other CPUs (an AVX2-only AMD EPYC: Eigen's) and JAX's sum in bfloat16 (7.7% off at 8,192
    keys), and float16 would overflow at `MASKED_SCORE`: all three are normalised in float32.

    >>> softmax_dtype("float16")
    'float32'
    """
    from bert4long.precision import bfloat16_units

    backend = keras.backend.backend()
    keep_bfloat16 = backend == "torch" or (backend == "tensorflow" and bfloat16_units() is not None)
    return "bfloat16" if keep_bfloat16 and keras.backend.standardize_dtype(dtype) == "bfloat16" else "float32"


def mask_scores(scores, keep, bias=None, dtype="float32"):
    """``scores`` in ``dtype`` plus the additive ``bias``, `MASKED_SCORE` where ``keep`` is False (None: none is).

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.base import mask_scores
    >>> mask_scores(np.zeros((1, 2), "float16"), np.array([[True, False]])).numpy().tolist()
    [[0.0, -999999995904.0]]
    """
    scores = ops.cast(scores, dtype)
    if bias is not None:
        scores = scores + ops.cast(bias, dtype)
    return scores if keep is None else ops.where(keep, scores, ops.cast(MASKED_SCORE, dtype))


def masked_softmax(scores, keep, dropout=None, training=None, bias=None, logsumexp=False):
    """Attention probabilities: softmax over the last axis of the kept ``scores``, then ``dropout``.

    The softmax runs in `softmax_dtype` (float32, or bfloat16 for bfloat16 scores).

    Args:
        scores: scaled scores ``[..., keys]`` in any float dtype.
        keep: bool, broadcastable to ``scores``: False where a key is masked (None: none is).
        dropout: the kernel's `SeededDropout` (None: no dropout).
        training: passed to ``dropout``.
        bias: optional additive bias broadcastable to ``scores``.
        logsumexp: also return the row log-sum-exp ``[...]``; the probabilities are
            then ``exp(scores - logsumexp)`` (kernels that combine several softmaxes).

    The softmax runs on 2-D rows (TensorFlow's CPU softmax takes rank <= 5, and
    the backward pass keeps only the probabilities).

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.base import masked_softmax
    >>> masked_softmax(np.zeros((1, 3)), np.array([[True, True, False]])).numpy().tolist()
    [[0.5, 0.5, 0.0]]
    """
    scores = mask_scores(scores, keep, bias, softmax_dtype(scores.dtype))
    if logsumexp:
        row_logsumexp = ops.logsumexp(scores, axis=-1)
        probs = ops.exp(scores - row_logsumexp[..., None])
    else:
        rows = ops.reshape(scores, (-1, ops.shape(scores)[-1]))
        probs = ops.reshape(ops.softmax(rows, axis=-1), ops.shape(scores))
    if dropout is not None:
        probs = dropout(probs, training=training)
    return (probs, row_logsumexp) if logsumexp else probs


def register_attention_kernel(name=None):
    """Class decorator: make a kernel available as ``attention=name``.

    Without a name the class is a built-in kernel, named by its line in `bert4long.kernel_names` (the one list
    of built-in names). A kernel of your own gives its name:

    >>> from bert4long.attention import FullAttention, register_attention_kernel, registered_kernels
    >>> @register_attention_kernel("my_full")
    ... class MyFull(FullAttention):
    ...     'Full attention under another name.'
    >>> registered_kernels()["my_full"].kernel_name
    'my_full'
    >>> _ = _KERNELS.pop("my_full")
    """

    def decorator(cls):
        kernel_name = name or built_in_name(f"{cls.__module__}:{cls.__qualname__}")
        if kernel_name is None:
            raise ValueError(f"{cls.__qualname__} is not a built-in kernel of bert4long.kernel_names: give it a name, "
                             "@register_attention_kernel('my_kernel').")
        _KERNELS[kernel_name] = cls
        cls.kernel_name = kernel_name
        return keras.saving.register_keras_serializable(package="bert4long")(cls)

    return decorator


def _built_in_kernel(name):
    """Import the built-in kernel ``name`` from its `bert4long.kernel_names` location (its class registers it)."""
    if name not in _KERNELS and name in KERNEL_CLASSES:
        importlib.import_module(KERNEL_CLASSES[name].split(":")[0])
    return _KERNELS.get(name)


def registered_kernels():
    """``{name: kernel class}`` of every registered kernel: the built-in ones in `bert4long.kernel_names` order,
    then the ones registered with a name of their own.

    Example:
    >>> from bert4long.attention import registered_kernels
    >>> "full" in registered_kernels()
    True
    """
    built_in = {name: _built_in_kernel(name) for name in BUILT_IN_KERNELS}
    return {**built_in, **_KERNELS}


def get_attention_kernel(attention, **config):
    """Instantiate the kernel registered under ``attention`` with ``config``.

    Example:
    >>> from bert4long.attention import get_attention_kernel
    >>> kernel = get_attention_kernel("full", dropout_rate=0.1)
    """
    if isinstance(attention, AttentionKernel):
        return attention
    if _built_in_kernel(attention) is None:
        raise ValueError(
            f"Unknown attention {attention!r}. Choose one of {sorted(registered_kernels())} "
            "(build_transformer_model(..., attention=NAME, attention_config={...}))."
        )
    return _KERNELS[attention](**config)


def length_rule(layer):
    """``(multiple, fixed)`` of the attention kernels inside ``layer`` (a model): a batch padded to a multiple of
    ``multiple`` (the least common multiple of their `length_multiple`) wastes no work inside a kernel; ``fixed``
    is True when a kernel's outputs change with the padded length (`padding_changes_outputs`), so every batch must
    be padded to the one length the model was given.

    Example:
    >>> import keras
    >>> from bert4long.attention import ChunkedAttention, LSHAttention, SlidingWindowAttention, length_rule
    >>> model = keras.layers.Layer()
    >>> model.kernels = [SlidingWindowAttention(window=8, global_tokens=[]), ChunkedAttention(block_size=16)]
    >>> length_rule(model)
    (16, False)
    >>> model.kernels.append(LSHAttention(bucket_size=8))
    >>> length_rule(model)
    (16, True)
    """
    kernels = [sublayer for sublayer in layer._flatten_layers() if isinstance(sublayer, AttentionKernel)]
    return math.lcm(1, *(kernel.length_multiple for kernel in kernels)), any(
        kernel.padding_changes_outputs for kernel in kernels)


class AttentionKernel(keras.layers.Layer):
    """Base class of attention kernels (see module docstring for the contract).

    Args:
        dropout_rate: dropout on attention probabilities (kernels that never form
            probabilities, such as linear attention, document what they do instead).
        causal: mask keys after the query (left-to-right language model).
        seed: seed of any random pattern the kernel draws (and of the dropout
            when ``dropout_seed`` is None).
        dropout_seed: seed of the dropout masks; `MultiHeadAttention` passes a
            hash of its name (distinct masks per layer) unless ``attention_config``
            sets it.

    Subclasses implement `attend(q, k, v, key_mask, bias, training)`; they may
    create weights in `build_kernel(num_heads, head_dim, hidden_dim)` and may set
    `supports_bias = False` when a dense ``[L, L]`` bias cannot be applied.

    A kernel that gives some tokens full attention with their own projections
    (Longformer's global tokens) says so with `default_global_projections` and
    implements `global_slots(key_mask, length)`; `MultiHeadAttention` then builds
    and owns the global projections and passes ``global_qkv=(queries, keys,
    values)`` to `attend`: the global queries of the tokens at those slots
    ``[batch, slots, heads, head_dim]``, the global keys and values of every token.

    Where a tape records eagerly (TensorFlow's `tf.GradientTape` outside `tf.function`,
    ``fit(run_eagerly=True)``, PyTorch's autograd; `bert4long.ops.dropout.recording_eagerly`) `attend`
    runs under `bert4long.ops.dropout.recompute`: a `GradientTape` keeps the
    inputs of every recorded operation, several ``[heads, L, window]`` tensors per
    layer that a `tf.function` would have freed, so the kernel keeps only its
    inputs and is recomputed in the backward pass (the same numbers, dropout
    masks included). A kernel with its own memory-lean backward pass sets
    `recompute_eagerly = False`.
    """

    supports_bias = True
    recompute_eagerly = True
    # True where padding after the last real token changes the real tokens' outputs (a pattern laid over the padded
    # length: BigBird's random and last blocks, LSH's sorted chunks); a model with such a kernel reads one length.
    padding_changes_outputs = False

    # Options whose value may not exceed the sequence length (`check_length` checks the ones given).
    options_within_length = ()
    # How `MultiHeadAttention` builds global projections for this kernel: None (no global tokens), 'from_local'
    # (copied from the local query/key/value after checkpoint loading) or 'trained' (checkpoint weights).
    default_global_projections = None

    @property
    def length_multiple(self):
        """The kernel pads a sequence to a multiple of this many tokens (1: it does not), so a batch padded to
        such a multiple costs no more than a shorter one."""
        return 1

    @classmethod
    def summary(cls):
        """What the kernel does, in one line: the first line of its docstring."""
        return (_own_doc(cls) or cls.__name__).splitlines()[0]

    @classmethod
    def options(cls):
        """The kernel's ``attention_config`` options, a `KernelOption` each: its constructor's arguments, then
        ``seed`` and ``dropout_seed``, with the help of its docstring's ``Args:`` (empty where it has none).

        Example:
        >>> from bert4long.attention import ChunkedAttention
        >>> ChunkedAttention.options()[0][:3]
        ('block_size', <class 'int'>, 256)
        """
        own = [p for p in inspect.signature(cls.__init__).parameters.values()
               if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        shared = [p for p in inspect.signature(AttentionKernel.__init__).parameters.values()
                  if p.name in ("seed", "dropout_seed") and p.name not in {q.name for q in own}]
        helps = {}
        for klass in reversed(cls.__mro__):   # a subclass's help of an argument wins
            helps.update(_documented_arguments(klass))
        return [KernelOption(p.name, _option_type(p), p.default, helps.get(p.name, "")) for p in own + shared]

    @classmethod
    def check_length(cls, config, length, length_name="the sequence length"):
        """Raise ValueError when an option given in ``config`` (`options_within_length`) exceeds ``length``."""
        for key in cls.options_within_length:
            if key in config and config[key] > length:
                raise ValueError(f"{key}={config[key]} is larger than {length_name} {length}: use at most {length}")

    def keys_per_query(self, length):
        """How many keys each query's scores cover at ``length`` tokens (every key unless the kernel is sparse)."""
        return length

    def training_memory_bytes(self, batch, heads, length, layers=1, bytes_per_float=4):
        """Estimated bytes of the score-like tensors that ``layers`` layers of this kernel keep for the backward
        pass of one training step inside a `tf.function`: scores, probabilities and dropout mask, 3 floats per
        query, head and key read (`keys_per_query`). Weights, activations and the projected queries, keys and
        values are not counted. Kernels that keep something else say so in their override.

        Example:
        >>> from bert4long.attention import FullAttention
        >>> FullAttention().training_memory_bytes(batch=2, heads=12, length=512) == 3 * 2 * 12 * 512 * 512 * 4
        True
        """
        return layers * batch * heads * length * 3 * self.keys_per_query(length) * bytes_per_float

    def __init__(self, dropout_rate=0.0, causal=False, seed: int | None = None, dropout_seed: int | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.dropout_rate = dropout_rate
        self.causal = causal
        self.seed = seed
        self.dropout_seed = dropout_seed
        self.probs_dropout = SeededDropout(dropout_rate, seed=self.effective_dropout_seed, name="probs_dropout")

    @property
    def effective_dropout_seed(self):
        return self.dropout_seed if self.dropout_seed is not None else (self.seed or 0)

    def build(self, q_shape):
        """Build the dropout (its step weight); call `build_kernel` before."""
        self.probs_dropout.build(q_shape)

    def build_kernel(self, num_heads, head_dim, hidden_dim, value_dim=None):
        """Create kernel-owned weights (none by default).

        ``head_dim`` is the query/key size per head, ``value_dim`` the value size
        per head (None: same as ``head_dim``).
        """

    def init_from_projections(self, q_dense, k_dense, v_dense):
        """Called after checkpoint weights are loaded with the layer's local projections (none by default)."""

    def call(self, q, k, v, key_mask, bias=None, hidden=None, training=None, global_qkv=None):
        if bias is not None and not self.supports_bias:
            raise ValueError(
                f"attention={self.kernel_name!r} cannot apply a dense attention bias "
                "(application='unilm' or relative-position models); use attention='full' "
                "or attention='chunked'."
            )
        extra = {} if global_qkv is None else {"global_qkv": tuple(global_qkv)}
        if not (self.recompute_eagerly and recording_eagerly()):
            return self.attend(q, k, v, key_mask=key_mask, bias=bias, hidden=hidden, training=training, **extra)
        optional_tensors = (bias, hidden, *extra.get("global_qkv", ()))
        tensors = [t for t in (q, k, v, *optional_tensors) if t is not None]
        present = [t is not None for t in optional_tensors]

        def attend(q, k, v, *optional):
            optional = iter(optional)
            bias, hidden, *global_qkv = (next(optional) if given else None for given in present)
            more = {"global_qkv": tuple(global_qkv)} if extra else {}
            return self.attend(q, k, v, key_mask=key_mask, bias=bias, hidden=hidden, training=training, **more)

        return recompute(self, attend, tensors)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(dropout_rate=self.dropout_rate, causal=self.causal, seed=self.seed,
                      dropout_seed=self.dropout_seed)
        return config


def _own_doc(cls):
    """``cls``'s own docstring, dedented ("" when it has none: a parent's does not describe it)."""
    return inspect.cleandoc(cls.__dict__.get("__doc__") or "")


def _documented_arguments(cls):
    """``{argument: help}`` from the ``Args:`` section of ``cls``'s own docstring (continuation lines joined)."""
    lines = _own_doc(cls).splitlines()
    stripped = [line.strip() for line in lines]
    if "Args:" not in stripped:
        return {}
    helps, name = {}, None
    for line in lines[stripped.index("Args:") + 1:]:
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent == 0:
            break
        if indent == 4 and ":" in line:
            name, _, text = line.strip().partition(":")
            helps[name] = text.strip()
        elif name is not None:
            helps[name] += " " + line.strip()
    return helps


def _option_type(parameter):
    """An option's type: its annotation, else its default's type (a tuple default is a list)."""
    if parameter.annotation is not parameter.empty:
        return parameter.annotation
    if parameter.default is None or parameter.default is parameter.empty:
        return object
    return list if isinstance(parameter.default, tuple) else type(parameter.default)


def causal_keep(q_positions, k_positions):
    """Bool ``[q, k]``: True where key position <= query position."""
    return ops.less_equal(ops.expand_dims(k_positions, 0), ops.expand_dims(q_positions, 1))


@register_attention_kernel()
class FullAttention(AttentionKernel):
    """Exact softmax attention materialising the ``[heads, L, L]`` score matrix.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention import FullAttention
    >>> q = np.random.rand(1, 5, 2, 4).astype("float32")
    >>> FullAttention()(q, q, q, np.ones((1, 5), bool)).shape
    TensorShape([1, 5, 2, 4])
    """

    def keep_mask(self, key_mask, length):
        """Bool ``[batch, 1, length or 1, length]``: real keys, and (``causal``) not after the query."""
        keep = ops.cast(key_mask, "bool")[:, None, None, :]
        if self.causal:
            positions = ops.arange(length)
            keep = ops.logical_and(keep, causal_keep(positions, positions)[None, None])
        return keep

    def attention_probs(self, scores, key_mask, bias=None, training=None):
        """Masked float32 softmax over keys of scaled ``[batch, heads, q, k]`` scores, then dropout."""
        return masked_softmax(scores, self.keep_mask(key_mask, ops.shape(scores)[2]), self.probs_dropout, training, bias)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None):
        return softmax_attention(q, k, v, self.keep_mask(key_mask, ops.shape(q)[1]), self.probs_dropout, training, bias)


def softmax_attention(q, k, v, keep, dropout=None, training=None, bias=None):
    """Exact attention of ``q`` over ``k, v`` (``[batch, length, heads, d]``) with `masked_softmax` probabilities.

    ``keep`` and the additive ``bias`` broadcast to the ``[batch, heads, q, k]`` scores.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.base import softmax_attention
    >>> q = np.random.rand(1, 3, 2, 4).astype("float32")
    >>> tuple(softmax_attention(q, q, q, np.ones((1, 1, 1, 3), bool)).shape)
    (1, 3, 2, 4)
    """
    q = q * ops.cast(1 / math.sqrt(q.shape[-1]), q.dtype)
    if bias is None and tuple(keep.shape[1:3]) == (1, 1):
        q, k, keep = *with_key_mask_column(q, k, keep), None
    probs = masked_softmax(ops.einsum("bqhd,bkhd->bhqk", q, k), keep, dropout, training, bias)
    return ops.einsum("bhqk,bkhd->bqhd", ops.cast(probs, v.dtype), v)


def with_key_mask_column(q, k, keep):
    """``q`` with a column of ones and ``k`` with a column of 0 (kept key) or `MASKED_SCORE` (masked key).

    ``q @ k`` then holds each score plus its key's mask, made inside the matmul: no pass over the
    ``[batch, heads, q, k]`` scores to mask them (that pass cost more than the matmul at 2,048 tokens on CPU).
    ``keep`` is a key mask ``[batch, 1, 1, length]``.

    >>> import numpy as np
    >>> q, k = with_key_mask_column(np.ones((1, 2, 1, 3)), np.ones((1, 2, 1, 3)), np.array([[[[True, False]]]]))
    >>> kept, masked = np.einsum("bqhd,bkhd->bhqk", q, k)[0, 0, 0]
    >>> float(kept), bool(masked < -1e11)
    (3.0, True)
    """
    key_bias = ops.where(ops.transpose(keep, (0, 3, 1, 2)), 0.0, MASKED_SCORE)  # [batch, length, 1, 1]
    ones = ops.ones_like(q[..., :1])
    key_column = ops.broadcast_to(ops.cast(key_bias, k.dtype), ops.shape(k[..., :1]))
    return ops.concatenate([q, ones], axis=-1), ops.concatenate([k, key_column], axis=-1)
