"""Multi-head attention with three plug points: projections (separate or fused Q/K/V, extra global Q/K/V), a
position object (`bert4long.attention.positions`) and an attention kernel (`bert4long.attention.base`)."""
import keras
from keras import ops

from bert4long.attention.base import FullAttention, get_attention_kernel, softmax_attention
from bert4long.attention.blocks import gather_positions
from bert4long.attention.positions import positions_from
from bert4long.ops.dropout import name_seed
from bert4long.ops.positions import check_even_dim

GLOBAL_PROJECTIONS = (None, "from_local", "trained")


@keras.saving.register_keras_serializable(package="bert4long")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head self-attention: Q/K/V/O projections, a position object and a swappable kernel.

    The projections carry the checkpoint weights (``query``, ``key``, ``value`` or one fused ``qkv``, and
    ``output``); positions placed inside attention are a position object (``positions``); how queries meet
    keys is the job of the attention kernel named by ``attention`` (``'full'`` by default; see
    `bert4long.attention` for the long-text variants and their ``attention_config``). For a kernel with
    global tokens (``sliding_window``, ``longformer``) the layer also holds the global projections
    (``query_global``, ``key_global``, ``value_global``) and hands the kernel their queries, keys and values.

    Args:
        heads: number of attention heads.
        head_size: size of each head's values (None: the input size / ``heads``, found when built).
        out_dim: output size (defaults to the input size).
        key_size: size of each head's queries/keys (defaults to ``head_size``).
        use_bias: whether the projections have biases.
        attention_dropout: dropout rate on attention probabilities (a `SeededDropout`
            seeded from the layer name unless ``attention_config`` sets ``dropout_seed``).
        attention: kernel name (``'full'``, ``'chunked'``, ``'sliding_window'``, ...).
        attention_config: dict of kernel options.
        causal: mask keys after each query (``application='lm'``).
        kernel_initializer: initializer of the projection kernels.
        positions: position information placed inside attention, a position object of
            `bert4long.attention.positions` (None: none): `RotaryPositions` (RoFormer: queries and keys rotated by
            their position before the kernel, so it works with every kernel), `RotateHalfPositions` with its
            ``theta`` (ModernBERT), or `RelativePositions` (NEZHA: clipped sinusoidal relative embeddings added to
            the keys and to the values by the ``'typical_relative'`` kernel, `TypicalRelativeAttention`;
            ``attention='full'`` only, and it holds a ``[length, length, key_size]`` tensor per layer call).
        fused_qkv: one ``qkv`` projection whose output is ``[queries; keys; values]`` (ModernBERT's
            ``Wqkv``; ``key_size`` equals ``head_size``) instead of ``query``, ``key`` and ``value``.
        global_projections: the global query/key/value projections of a kernel with global tokens:
            ``'from_local'`` (copied from ``query``/``key``/``value`` once checkpoint weights are loaded,
            `after_weights_loaded`), ``'trained'`` (checkpoint weights of their own: Longformer's
            ``query_global``...), or None: the kernel's `default_global_projections` (none for a kernel
            without global tokens).

    Attributes:
        attention_kernel: the `AttentionKernel` object.

    Call arguments:
        inputs: ``[x, key_mask]`` or ``[x, key_mask, bias]``: hidden states
            ``[batch, length, dim]``, bool ``[batch, length]`` (True for real tokens) or
            an int global-attention mask (0 padding, 1 local, 2 global: ``sliding_window``
            makes the tokens marked 2 global, every kernel treats non-zero as real), and
            an optional additive bias broadcastable to ``[batch, heads, length, length]``.
        memory: optional hidden states ``[batch, memory_length, dim]`` put before the
            inputs' keys and values (segment recurrence); ``key_mask`` then covers
            ``[memory; inputs]``. No gradient flows into the memory. Queries attend with
            the kernel when it is ``'full'``, else with exact full attention without
            dropout (the other kernels expect queries and keys of one length).
        training: enables dropout.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention import MultiHeadAttention
    >>> layer = MultiHeadAttention(heads=2, head_size=4)
    >>> x = np.random.rand(1, 6, 8).astype("float32")
    >>> tuple(layer([x, np.ones((1, 6), bool)]).shape)
    (1, 6, 8)
    """

    def __init__(
        self,
        heads,
        head_size,
        out_dim=None,
        key_size=None,
        use_bias=True,
        attention_dropout=0.0,
        attention="full",
        attention_config=None,
        causal=False,
        kernel_initializer="glorot_uniform",
        positions=None,
        fused_qkv=False,
        global_projections=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.heads = heads
        self.head_size = head_size
        self.out_dim = out_dim
        self.key_size = key_size or head_size
        self.use_bias = use_bias
        self.attention_dropout = attention_dropout
        self.attention = attention
        self.attention_config = dict(attention_config or {})
        self.causal = causal
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.positions = keras.saving.deserialize_keras_object(positions) if isinstance(positions, dict) else positions
        self.fused_qkv = fused_qkv
        kernel_config = {"dropout_seed": name_seed(self.name), **self.attention_config}  # per-layer masks
        if self.positions is not None:
            attention, extra = self.positions.kernel_for(attention, self.key_size, head_size)
            kernel_config.update(extra)
        self.attention_kernel = get_attention_kernel(
            attention,
            dropout_rate=attention_dropout,
            causal=causal,
            name="attention_kernel",
            dtype=self.dtype_policy,
            **kernel_config,
        )
        self.global_projections = global_projections
        self.global_projections_kind = self._global_projections_kind(global_projections)

    def _global_projections_kind(self, given):
        """``'from_local'``, ``'trained'`` or None (no global projections) for this layer's kernel."""
        if given not in GLOBAL_PROJECTIONS:
            raise ValueError(f"global_projections must be one of {GLOBAL_PROJECTIONS}, got {given!r}.")
        default = self.attention_kernel.default_global_projections
        if given is not None and default is None:
            raise ValueError(
                f"global_projections={given!r} needs a kernel with global tokens (attention='sliding_window' or "
                f"'longformer'); attention={self.attention!r} with attention_config={self.attention_config} has none.")
        return given or default

    @property
    def kernel(self):
        """`attention_kernel` under the name older ``.keras`` files store its weights by; removed in 0.3."""
        return self.attention_kernel

    @property
    def window(self):
        """The kernel's local window (None: each query may read every key)."""
        return getattr(self.attention_kernel, "window", None)

    def _dense(self, units, name):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            name=name,
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        hidden_dim = input_shape[0][-1]
        out_dim = self.out_dim or hidden_dim
        if self.head_size is None:
            if hidden_dim % self.heads:
                raise ValueError(f"{type(self).__name__}: hidden size {hidden_dim} is not a multiple of "
                                 f"heads={self.heads}.")
            self.head_size = self.key_size = hidden_dim // self.heads
            if self.positions is not None:
                check_even_dim(self.head_size, f"{self.positions!r}")
        self._make_global_denses()
        if self.fused_qkv:
            if self.key_size != self.head_size:
                raise ValueError(f"fused_qkv=True splits one projection into three equal parts: key_size "
                                 f"({self.key_size}) must equal head_size ({self.head_size}).")
            self.qkv = self._dense(3 * self.heads * self.head_size, "qkv")
            projections = (self.qkv,)
        else:
            self.q_dense = self._dense(self.heads * self.key_size, "query")
            self.k_dense = self._dense(self.heads * self.key_size, "key")
            self.v_dense = self._dense(self.heads * self.head_size, "value")
            projections = (self.q_dense, self.k_dense, self.v_dense)
        self.o_dense = self._dense(out_dim, "output")
        for dense in projections:
            dense.build(input_shape[0])
        self.o_dense.build(tuple(input_shape[0][:-1]) + (self.heads * self.head_size,))
        for dense in self._global_denses():
            dense.build((None, hidden_dim))
        self.attention_kernel.build_kernel(self.heads, self.key_size, hidden_dim, value_dim=self.head_size)
        self.attention_kernel.build(tuple(input_shape[0][:-1]) + (self.heads, self.key_size))

    def _make_global_denses(self):
        """Create ``query_global``, ``key_global``, ``value_global`` (Dense with bias, glorot-uniform: as when the
        kernel owned them, so seeded models and weight orders stay as they were)."""
        if self.global_projections_kind is None:
            return
        units = (self.heads * self.key_size, self.heads * self.key_size, self.heads * self.head_size)
        for name, size in zip(("query_global", "key_global", "value_global"), units):
            setattr(self, name, keras.layers.Dense(size, name=name, dtype=self.dtype_policy))
        # the kernel shows them under its own name (not tracked there): .keras files keep their weights at
        # attention_kernel/global_projections (`SlidingWindowAttention.global_projections`)
        object.__setattr__(self.attention_kernel, "_layer_global_projections", self._global_denses())

    def _global_denses(self):
        return tuple(getattr(self, name) for name in ("query_global", "key_global", "value_global")
                     if hasattr(self, name))

    def _global_qkv(self, x, key_mask):
        """The global queries at the kernel's global slots and the global keys and values of every token."""
        positions, _ = self.attention_kernel.global_slots(ops.convert_to_tensor(key_mask), ops.shape(x)[1])
        q = self._split_heads(self.query_global(gather_positions(x, positions)), self.key_size)
        k = self._split_heads(self.key_global(x), self.key_size)
        return q, k, self._split_heads(self.value_global(x), self.head_size)

    def _split_heads(self, x, size):
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1], self.heads, size))

    def call(self, inputs, memory=None, training=None):
        x, key_mask = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        q, k, v = self._project(x, memory)
        if self.positions is not None:
            q, k = self.positions.rotate(q, k)
        if memory is None or isinstance(self.attention_kernel, FullAttention):
            hidden = x if memory is None else None
            global_qkv = self._global_qkv(x, key_mask) if self._global_denses() and memory is None else None
            o = self.attention_kernel(q, k, v, key_mask, bias=bias, hidden=hidden, training=training,
                                      global_qkv=global_qkv)
        else:
            o = softmax_attention(q, k, v, ops.cast(key_mask, "bool")[:, None, None, :], bias=bias)
        shape = ops.shape(o)
        o = ops.reshape(o, (shape[0], shape[1], self.heads * self.head_size))
        return self.o_dense(o)

    def _project(self, x, memory):
        """Queries, keys and values ``[batch, length, heads, size]`` (keys and values over ``[memory; x]``)."""
        if self.fused_qkv:
            if memory is not None:
                raise ValueError("MultiHeadAttention(memory=...) needs separate projections, not fused_qkv=True.")
            shape = ops.shape(x)
            qkv = ops.reshape(self.qkv(x), (shape[0], shape[1], 3, self.heads, self.head_size))
            return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        keys_from = x if memory is None else self._with_memory(x, memory)
        q = self._split_heads(self.q_dense(x), self.key_size)
        k = self._split_heads(self.k_dense(keys_from), self.key_size)
        return q, k, self._split_heads(self.v_dense(keys_from), self.head_size)

    def _with_memory(self, x, memory):
        """``[memory; x]``, the memory cut from the gradient (what segment recurrence caches)."""
        if self.positions is not None or self.causal:
            position = self.positions and self.positions.name
            raise ValueError(
                "MultiHeadAttention(memory=...) places the memory before the segment without positions: "
                f"it supports neither positions ({position!r}) nor causal=True."
            )
        return ops.concatenate([ops.stop_gradient(memory), x], axis=1)

    def after_weights_loaded(self):
        """Derive weights from the loaded Q/K/V projections: ``'from_local'`` global projections become copies
        of the local ones (as Longformer initialises them), and the kernel's `init_from_projections` runs.

        Model builders call it on every layer that has it once checkpoint weights are
        loaded. A fused ``qkv`` has no separate projections to copy from: nothing changes.
        """
        if self.fused_qkv:
            return
        if self.global_projections_kind == "from_local":
            for mine, local in zip(self._global_denses(), (self.q_dense, self.k_dense, self.v_dense)):
                for weight, value in zip(mine.weights, local.weights):
                    weight.assign(ops.copy(ops.reshape(value, weight.shape)))  # JAX: a buffer of its own
        self.attention_kernel.init_from_projections(self.q_dense, self.k_dense, self.v_dense)

    def compute_output_shape(self, input_shape):
        x_shape = input_shape[0]
        return tuple(x_shape[:-1]) + (self.out_dim or x_shape[-1],)

    @classmethod
    def from_config(cls, config):
        """The layer of ``config``; a config saved before positions were objects (bert4keras's ``position_bias``
        strings, ``'rotary'`` / ``'typical_relative'`` with ``max_relative_position``) gets the object they name."""
        config = dict(config)
        bias, max_relative = config.pop("position_bias", None), config.pop("max_relative_position", None)
        if bias is not None and config.get("positions") is None:
            config["positions"] = positions_from(bias, max_relative)
        return cls(**config)

    def get_config(self):
        config = super().get_config()
        config.update(
            heads=self.heads,
            head_size=self.head_size,
            out_dim=self.out_dim,
            key_size=self.key_size,
            use_bias=self.use_bias,
            attention_dropout=self.attention_dropout,
            attention=self.attention,
            attention_config=self.attention_config,
            causal=self.causal,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            positions=keras.saving.serialize_keras_object(self.positions),
            fused_qkv=self.fused_qkv,
        )
        if self.global_projections is not None:
            config.update(global_projections=self.global_projections)
        return config
