"""Longformer attention: a sliding window plus a few global tokens."""
import keras
from keras import ops

from bert4long.attention.base import AttentionKernel, register_attention_kernel
from bert4long.attention.blocks import (
    block_attention,
    check_positive_int,
    gather_blocks,
    gather_positions,
    merge_axes,
    neighbour_blocks,
    pad_to_multiple,
    to_blocks,
)


@register_attention_kernel()
class SlidingWindowAttention(AttentionKernel):
    """Longformer's local windowed attention with global tokens (memory ``O(length * window)``).

    Token ``i`` attends to the tokens ``j = i + dilation * t`` with
    ``|t| <= window // 2`` (``window`` counts both sides, as Longformer's
    ``attention_window``: 512 means 256 each side), and to every global token.
    The global tokens (positions ``global_tokens``, ``[CLS]`` by default) attend
    to the whole sequence with their own queries, keys and values (``global_qkv``),
    which `MultiHeadAttention` projects with its global projections, copied from the
    local ones after a BERT checkpoint is loaded, as Longformer initialises them
    (`default_global_projections` is ``'from_local'``).

    The window is computed in blocks of ``window // 2`` tokens: each block of
    queries meets its own and its two neighbouring key blocks, with the exact
    ``|i - j|`` condition masked in. With ``dilation > 1`` the sequence is first
    split into ``dilation`` interleaved sub-sequences.

    Args:
        window: total window (both sides), a positive even integer.
        dilation: gap between attended neighbours (1: contiguous window).
        global_tokens: positions that attend globally and are attended by all
            (positions beyond a sequence's length are ignored).
        max_global_tokens: global slots per example when ``key_mask`` is an int
            global-attention mask (below); at least ``len(global_tokens)`` are used.
            Tokens marked global beyond the first that many (in position order)
            attend locally. 0 with ``global_tokens=[]``: no global projections.
        **kwargs: `AttentionKernel` arguments.

    Call arguments: as `AttentionKernel`. ``key_mask`` may be bool (padding) or
    int with Longformer's convention, 0 padding / 1 local / 2 global: the tokens
    marked 2, together with ``global_tokens``, are that example's global tokens
    (``build_transformer_model(..., attention_mask_input=True)`` feeds it).
    ``global_qkv`` is required when there are global tokens: the global queries
    ``[batch, slots, heads, head_dim]`` of the tokens at `global_slots`, and the
    global keys and values of every token ``[batch, length, heads, head_dim]``.

    Example:
    >>> import numpy as np
    >>> from bert4long.attention.sliding_window import SlidingWindowAttention
    >>> q = np.random.rand(1, 40, 2, 8).astype("float32")
    >>> SlidingWindowAttention(window=8, global_tokens=[])(q, q, q, np.ones((1, 40), bool)).shape
    TensorShape([1, 40, 2, 8])
    >>> kernel = SlidingWindowAttention(window=8, global_tokens=[], max_global_tokens=2)
    >>> mask = np.array([[1] * 5 + [2] + [1] * 34], "int32")  # token 5 is global
    >>> global_q = np.random.rand(1, 2, 2, 8).astype("float32")  # one row per global slot
    >>> kernel(q, q, q, mask, global_qkv=(global_q, q, q)).shape
    TensorShape([1, 40, 2, 8])

    Reference: Beltagy et al., Longformer: The Long-Document Transformer (2020).
    """

    supports_bias = False

    def __init__(self, window=512, dilation=1, global_tokens=(0,), max_global_tokens=16, **kwargs):
        super().__init__(**kwargs)
        if check_positive_int(window, "window", "sliding_window") % 2:
            raise ValueError(
                f"attention='sliding_window': window counts both sides and must be even, got {window} "
                f"(use window={window + 1} for {(window + 1) // 2} tokens on each side)."
            )
        self.window = window
        self.dilation = check_positive_int(dilation, "dilation", "sliding_window")
        self.global_tokens = [int(p) for p in global_tokens]
        if any(p < 0 for p in self.global_tokens) or len(set(self.global_tokens)) != len(self.global_tokens):
            raise ValueError(
                f"attention='sliding_window': global_tokens must be distinct non-negative positions, "
                f"got {list(global_tokens)}."
            )
        if not isinstance(max_global_tokens, int) or isinstance(max_global_tokens, bool) or max_global_tokens < 0:
            raise ValueError(
                f"attention='sliding_window': max_global_tokens must be a non-negative integer (global slots per "
                f"example of the global-attention mask input), got {max_global_tokens!r}."
            )
        self.max_global_tokens = max_global_tokens

    @property
    def length_multiple(self):
        return self.window // 2 * self.dilation

    @classmethod
    def check_length(cls, config, length, length_name="the sequence length"):
        """The window (given or default) must fit in ``length`` tokens."""
        window = config.get("window", {option.name: option.default for option in cls.options()}["window"])
        if window > length:
            raise ValueError(f"window={window} is larger than {length_name} {length}: use a window of at most "
                             f"{length - length % 2} (or attention full)")

    def keys_per_query(self, length):
        """The window and the query itself (global keys not counted)."""
        return min(self.window, length) + 1

    @property
    def default_global_projections(self):
        """``'from_local'`` when tokens can be global (the layer's global projections start as copies of the local
        ones), else None."""
        return "from_local" if self.global_tokens or self.max_global_tokens else None

    @property
    def global_projections(self):
        """The global projections of the `MultiHeadAttention` this kernel serves (built and owned by that layer).

        Kept under the kernel's name because ``.keras`` files written when the kernel owned them store their weights
        under ``attention_kernel/global_projections``, where Keras looks for them when loading.
        """
        return list(getattr(self, "_layer_global_projections", ()))

    def global_slots(self, key_mask, padded_length):
        """Global positions ``[batch, slots]`` (int32) and which slots are used (bool).

        With a bool ``key_mask`` the slots are ``global_tokens``. With an int mask
        (0 pad / 1 local / 2 global) they are the first ``max(max_global_tokens,
        len(global_tokens))`` positions, in order, that are marked 2 or listed in
        ``global_tokens``, gathered with `top_k` (no branch on values). Unused slots
        hold the lowest unmarked positions, so any ``padded_length`` at least the
        sequence length gives the same slots (`MultiHeadAttention` gathers the global
        queries at them before the kernel pads).
        """
        length = ops.shape(key_mask)[1]
        fixed = ops.convert_to_tensor(self.global_tokens, "int32")
        if "int" not in keras.backend.standardize_dtype(key_mask.dtype):
            positions = ops.broadcast_to(fixed[None], (ops.shape(key_mask)[0], len(self.global_tokens)))
            return positions, positions < length
        slots = max(self.max_global_tokens, len(self.global_tokens))
        positions = ops.arange(padded_length + slots)  # room for `slots` unused entries
        marked = ops.logical_or(ops.equal(key_mask, 2), ops.any(positions[:length, None] == fixed[None, :], axis=-1))
        marked = ops.pad(marked, [[0, 0], [0, padded_length + slots - length]])  # False beyond the length
        far = ops.cast(2 * (padded_length + slots), "float32")
        score = ops.where(marked, 0.0, -far) - ops.cast(positions, "float32")  # marked first, then by position
        _, chosen = ops.top_k(score, slots)
        return ops.cast(chosen, "int32"), ops.take_along_axis(marked, chosen, axis=1)

    def attend(self, q, k, v, key_mask, bias=None, hidden=None, training=None, global_qkv=None):
        side, dilation = self.window // 2, self.dilation
        length = ops.shape(q)[1]
        q, k, v = (pad_to_multiple(t, side * dilation) for t in (q, k, v))
        key_mask = ops.convert_to_tensor(key_mask)
        global_positions, global_valid = self.global_slots(key_mask, ops.shape(q)[1])
        key_mask = ops.cast(key_mask, "bool")
        mask = pad_to_multiple(key_mask, side * dilation)
        positions = ops.arange(ops.shape(q)[1])
        one_hot = ops.logical_and(  # [batch, globals, padded length]
            global_positions[:, :, None] == positions[None, None, :], global_valid[:, :, None]
        )
        is_global = ops.any(one_hot, axis=1)

        def blocks(x):  # [b, L, ...] -> [b, dilation, L / dilation / side, side, ...]
            return to_blocks(ops.swapaxes(to_blocks(x, dilation), 1, 2), side, axis=2)

        q_blocks, k_blocks, v_blocks = blocks(q), blocks(k), blocks(v)
        local_keep = blocks(ops.logical_and(mask, ops.logical_not(is_global)))
        q_positions = blocks(positions[None])
        indices, valid = neighbour_blocks(ops.shape(q_blocks)[2], (-1, 0, 1))
        k_local, v_local = gather_blocks(k_blocks, indices, 2), gather_blocks(v_blocks, indices, 2)
        keep = ops.logical_and(gather_blocks(local_keep, indices, 2), ops.repeat(valid, side, axis=1))
        k_positions = gather_blocks(q_positions, indices, 2)  # [1, dilation, n, 3 * side]
        keep = ops.logical_and(
            keep[..., None, :], ops.abs(k_positions[..., None, :] - q_positions[..., None]) <= side * dilation
        )
        if self.causal:
            keep = ops.logical_and(keep, k_positions[..., None, :] <= q_positions[..., None])
        slots = global_positions.shape[1]
        if slots:  # every query also attends to the global tokens (local projections)
            k_local, v_local, keep = self._append_global_keys(
                k_local, v_local, keep, (k, v, mask), q_positions, global_positions, global_valid
            )
        out = block_attention(self, q_blocks, k_local, v_local, keep[..., None, :, :], training)
        out = merge_axes(ops.swapaxes(merge_axes(out, 2), 1, 2), 1)[:, :length]
        if not slots:
            return out
        return self._global_rows(out, global_qkv, key_mask, global_positions, one_hot[:, :, :length], training)

    def _append_global_keys(self, k_local, v_local, keep, sequences, q_positions, global_positions, global_valid):
        """Append the global tokens' keys, values and mask to the keys of every query block."""
        k, v, mask = (gather_positions(x, global_positions) for x in sequences)
        rows = (*ops.shape(k_local)[:3], global_positions.shape[1])  # [batch, dilation, blocks, globals]
        k_local = ops.concatenate([k_local, ops.broadcast_to(k[:, None, None], rows + tuple(k.shape[2:]))], 3)
        v_local = ops.concatenate([v_local, ops.broadcast_to(v[:, None, None], rows + tuple(v.shape[2:]))], 3)
        global_keep = ops.logical_and(mask, global_valid)[:, None, None, None, :]
        if self.causal:
            global_keep = ops.logical_and(global_keep, global_positions[:, None, None, None, :] <= q_positions[..., None])
        keep = ops.concatenate([keep, ops.broadcast_to(global_keep, (*ops.shape(keep)[:4], rows[3]))], -1)
        return k_local, v_local, keep

    def _global_rows(self, out, global_qkv, key_mask, global_positions, one_hot, training):
        """Replace the rows of the global tokens by full attention with the global queries, keys and values."""
        if global_qkv is None:
            raise ValueError(
                "attention='sliding_window' with global tokens needs the global queries, keys and values: use it "
                "inside bert4long.layers.MultiHeadAttention (which projects them), pass global_qkv=(queries at "
                "global_slots, keys, values), or set global_tokens=[] (and max_global_tokens=0 when key_mask is an "
                "int global-attention mask)."
            )
        q, k, v = global_qkv
        length = ops.shape(k)[1]
        keep = key_mask[:, None, None, :]
        if self.causal:
            keep = ops.logical_and(keep, (ops.arange(length)[None, None, :] <= global_positions[:, :, None])[:, None])
        global_out = block_attention(self, q, k, v, keep, training)
        scattered = ops.einsum("bgl,bghd->blhd", ops.cast(one_hot, out.dtype), ops.cast(global_out, out.dtype))
        return ops.where(ops.any(one_hot, axis=1)[:, :, None, None], scattered, out)

    def get_config(self):
        config = super().get_config()
        config.update(window=self.window, dilation=self.dilation, global_tokens=self.global_tokens,
                      max_global_tokens=self.max_global_tokens)
        return config

