"""Hierarchical positions' alpha: its default and the values it may take, defined once.

``q[i*n + j] = alpha*u[i] + (1 - alpha)*u[j]`` with ``u = (p - alpha*p[0]) / (1 - alpha)`` (Su, 2020) places
up to ``n*n`` positions for any alpha in (0, 1) except 0.5; Su's choice is 0.4 (the position study also read
0.6 and 0.8: docs/results.md). The library (`bert4long.ops.position_extension.validate_alpha`), the record a
config carries (`bert4long.checkpoints.position_record`) and the command line (``--hierarchical-position``, ``extend
--alpha``) all ask this module, which imports nothing, so ``bert4long --help`` starts no TensorFlow.

>>> from bert4long.position_alpha import DEFAULT_ALPHA, alpha_problem
>>> DEFAULT_ALPHA, alpha_problem(0.6), alpha_problem(0.5)
(0.4, None, '0.5 makes positions (i, j) and (j, i) identical')
"""
DEFAULT_ALPHA = 0.4
ALPHA_RANGE = "in (0, 1) and not 0.5"


def alpha_problem(alpha):
    """Why the number ``alpha`` cannot be hierarchical alpha (None: it can)."""
    if alpha == 0.5:
        return "0.5 makes positions (i, j) and (j, i) identical"
    if alpha >= 1:
        return ("from 1 on the coarse position outweighs the fine one entirely: u[k] = (p[k] - alpha*p[0]) / "
                "(1 - alpha) divides by zero or a negative number")
    if not alpha > 0:   # NaN included
        return ("it must be positive: with alpha = 0 every block of n positions repeats the trained table and "
                "the block index i is lost")
    return None
