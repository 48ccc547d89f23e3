"""Attention: `MultiHeadAttention`, its position objects and the kernels, the one seam where long-text variants
plug in.

`MultiHeadAttention` (also ``bert4long.layers.MultiHeadAttention``) projects hidden
states to queries, keys and values with the checkpoint's weights (separate or one fused
``qkv``), places positions with its position object (`bert4long.attention.positions`),
then hands them to its ``attention_kernel``, an `AttentionKernel` looked up by name with
`get_attention_kernel`. Kernels form probabilities with the one `masked_softmax` and
describe themselves (`AttentionKernel.options`, `check_length`, `keys_per_query`,
`training_memory_bytes`).
"""
from bert4long.attention.base import (
    AttentionKernel,
    FullAttention,
    KernelOption,
    get_attention_kernel,
    length_rule,
    masked_softmax,
    register_attention_kernel,
    registered_kernels,
)
from bert4long.attention.bigbird import BigBirdAttention
from bert4long.attention.block_sparse import BlockSparseAttention
from bert4long.attention.chunked import ChunkedAttention
from bert4long.attention.longformer import LongformerAttention
from bert4long.attention.lsh import LSHAttention
from bert4long.attention.multi_head import MultiHeadAttention
from bert4long.attention.performer import PerformerAttention
from bert4long.attention.positions import RelativePositions, RotaryPositions, RotateHalfPositions
from bert4long.attention.relative import TypicalRelativeAttention
from bert4long.attention.sliding_window import SlidingWindowAttention

__all__ = [
    "AttentionKernel",
    "BigBirdAttention",
    "BlockSparseAttention",
    "ChunkedAttention",
    "FullAttention",
    "KernelOption",
    "LSHAttention",
    "LongformerAttention",
    "MultiHeadAttention",
    "PerformerAttention",
    "RelativePositions",
    "RotaryPositions",
    "RotateHalfPositions",
    "SlidingWindowAttention",
    "TypicalRelativeAttention",
    "get_attention_kernel",
    "length_rule",
    "masked_softmax",
    "register_attention_kernel",
    "registered_kernels",
]
