"""Seeded dropout and `Recompute` (their home is `bert4long.ops.dropout`; the names stay importable here)."""
from bert4long.ops.dropout import Recompute, SeededDropout, backend_is_float, name_seed, recompute

__all__ = ["Recompute", "SeededDropout", "backend_is_float", "name_seed", "recompute"]
