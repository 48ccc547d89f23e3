"""Attention kernels: the one seam where long-text attention variants plug in.

`bert4long.layers.MultiHeadAttention` projects hidden states to queries, keys and
values with the checkpoint's weights, then hands them to an `AttentionKernel`
looked up by name with `get_attention_kernel`.
"""
from bert4long.attention.base import (
    AttentionKernel,
    FullAttention,
    get_attention_kernel,
    register_attention_kernel,
)
from bert4long.attention.bigbird import BigBirdAttention
from bert4long.attention.block_sparse import BlockSparseAttention
from bert4long.attention.chunked import ChunkedAttention
from bert4long.attention.longformer import LongformerAttention
from bert4long.attention.lsh import LSHAttention
from bert4long.attention.performer import PerformerAttention
from bert4long.attention.sliding_window import SlidingWindowAttention

__all__ = [
    "AttentionKernel",
    "BigBirdAttention",
    "BlockSparseAttention",
    "ChunkedAttention",
    "FullAttention",
    "LSHAttention",
    "LongformerAttention",
    "PerformerAttention",
    "SlidingWindowAttention",
    "get_attention_kernel",
    "register_attention_kernel",
]
