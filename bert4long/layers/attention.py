"""`MultiHeadAttention` (its home is `bert4long.attention.multi_head`; the name stays importable here)."""
from bert4long.attention.multi_head import POSITION_BIASES, MultiHeadAttention

__all__ = ["POSITION_BIASES", "MultiHeadAttention"]
