"""Ways to stretch a trained ``[n, dim]`` position table beyond ``n`` positions.

* ``hierarchical``: ``q[i*n + j] = a*u[i] + (1-a)*u[j]``, ``u = (p - a*p[0]) / (1-a)``
  (Su, 2020); up to ``n*n`` positions, first ``n`` rows unchanged.
* ``copy``: ``q[k] = p[k mod n]``, the table tiled (Longformer's initialisation);
  a length that is not a multiple of ``n`` ends with a truncated tile. Applied in a model,
  every method is computed from the ``n`` trained rows, so training keeps ``q[k]`` and
  ``q[k + n]`` equal under ``copy``; ``bert4long extend`` materialises rows that train apart.
* ``interpolate``: position interpolation (Chen et al., 2023): position ``k`` of a
  ``length``-token input reads the table at ``k * n / length``, linearly
  interpolated between neighbouring rows; every row changes, none is extrapolated.
"""
import numpy as np
from keras import ops

from bert4long.position_alpha import ALPHA_RANGE, DEFAULT_ALPHA, alpha_problem

EXTENSION_METHODS = ("hierarchical", "copy", "interpolate")


def validate_alpha(hierarchical):
    """Turn the ``hierarchical`` option into alpha (float) or None (True: `DEFAULT_ALPHA`), checking its range
    (`bert4long.position_alpha`)."""
    if hierarchical is None or hierarchical is False:
        return None
    alpha = DEFAULT_ALPHA if hierarchical is True else float(hierarchical)
    problem = alpha_problem(alpha)
    if problem:
        raise ValueError(f"Hierarchical position alpha must be {ALPHA_RANGE}, got {hierarchical!r}: {problem}. "
                         f"Use True (alpha={DEFAULT_ALPHA}) or another float such as 0.3.")
    return alpha


def hierarchical_table(embeddings, alpha, position_ids):
    """Rows ``q[i*n + j] = alpha*u[i] + (1-alpha)*u[j]`` with ``u = (p - alpha*p[0]) / (1-alpha)``.

    Positions below ``n`` return the trained rows exactly (bert4keras computes them
    through the formula, which differs by at most one float32 rounding step);
    positions from ``n`` on use bert4keras's arithmetic in the same order, so they
    match it bit for bit.
    """
    n = ops.shape(embeddings)[0]
    u = (embeddings - alpha * embeddings[:1]) / (1.0 - alpha)
    extended = alpha * ops.take(u, position_ids // n, axis=0) + (1.0 - alpha) * ops.take(u, position_ids % n, axis=0)
    trained = ops.take(embeddings, ops.minimum(position_ids, n - 1), axis=0)
    return ops.where(ops.expand_dims(position_ids < n, -1), trained, extended)


def copy_table(embeddings, position_ids):
    """Rows ``p[k mod n]``: the trained table repeated."""
    return ops.take(embeddings, position_ids % ops.shape(embeddings)[0], axis=0)


def interpolate_table(embeddings, position_ids, length):
    """Rows at fractional positions ``k * n / length`` (identity when ``length <= n``)."""
    n = ops.shape(embeddings)[0]
    scale = ops.minimum(ops.cast(n, "float32") / float(length), 1.0)
    source = ops.cast(position_ids, "float32") * scale
    low = ops.cast(ops.floor(source), "int32")
    high = ops.minimum(low + 1, n - 1)
    weight = ops.expand_dims(ops.cast(source - ops.floor(source), embeddings.dtype), -1)
    return (1.0 - weight) * ops.take(embeddings, low, axis=0) + weight * ops.take(embeddings, high, axis=0)


def extended_rows(embeddings, position_ids, method=None, alpha=None, length=None):
    """Position vectors for ``position_ids`` from the trained ``embeddings`` by ``method``.

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.position_extension import extended_rows
    >>> table = np.random.rand(4, 2).astype("float32")
    >>> rows = extended_rows(table, np.arange(10), "copy")
    >>> bool(np.allclose(rows[5], table[1]))
    True
    """
    if method is None:
        return ops.take(embeddings, position_ids, axis=0)
    if method == "hierarchical":
        return hierarchical_table(embeddings, DEFAULT_ALPHA if alpha is None else alpha, position_ids)
    if method == "copy":
        return copy_table(embeddings, position_ids)
    if method == "interpolate":
        return interpolate_table(embeddings, position_ids, length)
    raise ValueError(f"Unknown position extension {method!r}: choose one of {EXTENSION_METHODS} or None.")


class PositionExtension:
    """How a trained table of ``n`` positions reaches further: ``method``, its ``alpha``, the target ``length``.

    Validated once, when made; then it says how many positions it can place
    (`capacity`), gives the position vectors (`rows`) and materialises the
    extended table (`table`). The builder makes one from its options
    (`from_options`) and hands it to the position layer; ``bert4long extend``
    and segment recurrence use the same object.

    Args:
        method: None (the trained positions only), ``'hierarchical'``, ``'copy'`` or ``'interpolate'``.
        alpha: hierarchical alpha, in (0, 1) and not 0.5 (None: `DEFAULT_ALPHA`, 0.4); ignored by the other methods.
        length: target length: required by ``'interpolate'``, a cap for the others.

    Example:
    >>> import numpy as np
    >>> from bert4long.ops.position_extension import PositionExtension
    >>> extension = PositionExtension("hierarchical", alpha=0.3)
    >>> extension.capacity(512), extension.table(np.ones((4, 2), "float32"), 10).shape
    (262144, (10, 2))
    """

    def __init__(self, method=None, alpha=None, length=None):
        if method is not None and method not in EXTENSION_METHODS:
            raise ValueError(f"Unknown extension method {method!r} (position_extension): choose one of "
                             f"{EXTENSION_METHODS}, or None for the trained positions only.")
        if method == "interpolate" and not length:
            raise ValueError("position_extension='interpolate' needs the target length: pass "
                             "position_extension_length=N.")
        self.method = method
        self.alpha = validate_alpha(DEFAULT_ALPHA if alpha is None else alpha) if method == "hierarchical" else None
        self.length = length

    @classmethod
    def from_options(cls, hierarchical=None, method=None, length=None):
        """The extension that ``hierarchical_position`` (None, True = 0.4, or alpha), ``position_extension``
        (a method, None or ``'none'``) and ``position_extension_length`` ask for; conflicting options are refused.

        Example:
        >>> from bert4long.ops.position_extension import PositionExtension
        >>> PositionExtension.from_options(hierarchical=True)
        PositionExtension('hierarchical', alpha=0.4, length=None)
        """
        alpha = validate_alpha(hierarchical)
        if method in (None, "none"):
            method = "hierarchical" if alpha is not None else None
        elif method in EXTENSION_METHODS and alpha is not None and method != "hierarchical":
            raise ValueError(f"hierarchical_position={hierarchical!r} conflicts with position_extension={method!r}: "
                             "give one of them.")
        return cls(method, alpha, length)

    def capacity(self, n):
        """How many positions a table of ``n`` rows can place (None: no limit)."""
        if self.method is None:
            return n
        if self.method == "hierarchical":
            return n * n if self.length is None else min(self.length, n * n)
        return self.length

    def rows(self, table, position_ids):
        """Position vectors for ``position_ids`` from the trained ``[n, dim]`` ``table``."""
        return extended_rows(table, position_ids, self.method, self.alpha, self.length)

    def table(self, trained, length):
        """The ``[length, dim]`` table this extension reads, materialised from the trained ``[n, dim]`` table."""
        n = trained.shape[0]
        if length < n:
            raise ValueError(f"max_position={length} is below the {n} trained positions: extension only lengthens.")
        if self.method == "hierarchical" and length > n * n:
            raise ValueError(f"Hierarchical extension places at most n*n = {n * n} positions, asked {length}.")
        return ops.convert_to_numpy(self.rows(trained, np.arange(length, dtype="int32"))).astype(trained.dtype)

    def __eq__(self, other):
        return isinstance(other, PositionExtension) and (self.method, self.alpha, self.length) == (
            other.method, other.alpha, other.length)

    def __hash__(self):
        return hash((self.method, self.alpha, self.length))

    def __repr__(self):
        return f"PositionExtension({self.method!r}, alpha={self.alpha!r}, length={self.length!r})"
