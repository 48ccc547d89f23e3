"""Public Keras layers of bert4long (all registered for `.keras` serialization)."""
from bert4long.attention.multi_head import MultiHeadAttention
from bert4long.layers.activations import gelu_erf, gelu_tanh, get_activation, set_default_gelu
from bert4long.layers.crf import ConditionalRandomField
from bert4long.layers.embeddings import Embedding, HierarchicalPositionEmbedding, PositionEmbedding
from bert4long.layers.feedforward import FeedForward
from bert4long.layers.global_pointer import EfficientGlobalPointer, GlobalPointer
from bert4long.layers.heads import BiasAdd, GatherPositions, TakeToken
from bert4long.layers.loss import Loss
from bert4long.layers.masks import PaddingMask, UniLMMask
from bert4long.layers.nodes import Add, NodeAccess
from bert4long.layers.normalization import LayerNormalization
from bert4long.layers.positions import RelativePositionEmbedding, SinusoidalPositionEmbedding
from bert4long.ops.dropout import Recompute, SeededDropout

__all__ = [
    "Add",
    "NodeAccess",
    "BiasAdd",
    "ConditionalRandomField",
    "EfficientGlobalPointer",
    "Embedding",
    "FeedForward",
    "GatherPositions",
    "GlobalPointer",
    "HierarchicalPositionEmbedding",
    "LayerNormalization",
    "Loss",
    "MultiHeadAttention",
    "PaddingMask",
    "PositionEmbedding",
    "Recompute",
    "RelativePositionEmbedding",
    "SeededDropout",
    "SinusoidalPositionEmbedding",
    "TakeToken",
    "UniLMMask",
    "gelu_erf",
    "gelu_tanh",
    "get_activation",
    "set_default_gelu",
]
