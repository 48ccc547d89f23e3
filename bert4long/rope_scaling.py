"""RoPE scaling described as transformers' ``rope_parameters`` do: checked and completed here, in plain Python.

``linear`` (position interpolation), ``dynamic`` (NTK-aware) and ``yarn``; the frequencies they give are
`bert4long.ops.positions.rope_frequencies`. This module imports nothing heavy, so the command line checks
``--rope-scaling`` before TensorFlow starts.
"""
import math

# The keys of each implemented ``rope_type`` with their defaults (None: required, or derived from max_position).
ROPE_SCALING_KEYS = {
    "linear": {"factor": None},
    "dynamic": {"factor": None, "original_max_position_embeddings": None},
    "yarn": {"factor": None, "original_max_position_embeddings": None, "attention_factor": None,
             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": None, "mscale_all_dim": None},
}
# The rope_types transformers 5 computes that bert4long does not.
UNIMPLEMENTED_ROPE_TYPES = ("longrope", "llama3", "proportional")
# Positions are int32 in the graph: no scaling places more.
MAX_POSITIONS = 2**31 - 1
_BASE = (lambda v: 1 < v < math.inf, "a finite number > 1")
_SCALE = (lambda v: 0 < v <= 1e3, "a finite number in (0, 1000]")
_ROTATIONS = (lambda v: 1e-3 <= v <= 1e6, "a finite number of rotations in [0.001, 1e6]")
# ``(test, valid range)`` of every RoPE number; each test is False for NaN.
ROPE_NUMBER_RANGES = {
    "rope_theta": _BASE, "global_rope_theta": _BASE, "local_rope_theta": _BASE,   # (ModernBERT's older keys)
    "factor": (lambda v: 1 <= v <= MAX_POSITIONS, f"a finite number in [1, {MAX_POSITIONS}]"),
    "original_max_position_embeddings": (lambda v: isinstance(v, int) and 1 <= v <= MAX_POSITIONS,
                                         f"a whole number of trained positions in [1, {MAX_POSITIONS}]"),
    "attention_factor": _SCALE, "mscale": _SCALE, "mscale_all_dim": _SCALE,
    "beta_fast": _ROTATIONS, "beta_slow": _ROTATIONS,
}


def check_rope_number(key, value, what):
    """``value`` as a float (an int for ``original_max_position_embeddings``), or ``ValueError`` naming ``what``,
    ``key`` and the range of `ROPE_NUMBER_RANGES`.

    >>> check_rope_number("factor", 2, "--rope-scaling")
    2.0
    """
    test, valid = ROPE_NUMBER_RANGES[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and key == "original_max_position_embeddings" and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not (number and test(value)):
        raise ValueError(f"{what}: {key} = {value!r} must be {valid}.")
    return value if key == "original_max_position_embeddings" else float(value)


def resolve_rope_scaling(scaling, max_position=None, what="rope_scaling"):
    """The complete RoPE scaling ``scaling`` describes (None: none), every key of its ``rope_type`` filled.

    ``scaling`` is a transformers ``rope_parameters`` entry without ``rope_theta``: ``rope_type`` ``'linear'``
    (position interpolation: frequencies / ``factor``), ``'dynamic'`` (NTK-aware: the base grows with the
    length beyond ``original_max_position_embeddings``) or ``'yarn'`` (``beta_fast`` 32, ``beta_slow`` 1,
    ``attention_factor`` default ``0.1 ln(factor) + 1``, or the ratio that ``mscale`` and ``mscale_all_dim``
    give); ``'default'`` or None is no scaling. ``original_max_position_embeddings`` defaults to
    ``max_position``; a yarn ``factor`` of None to ``max_position / original_max_position_embeddings``. Every
    number is checked against `ROPE_NUMBER_RANGES`; ``what`` names ``scaling`` in errors.

    Example:
    >>> from bert4long.rope_scaling import resolve_rope_scaling
    >>> resolve_rope_scaling({"rope_type": "dynamic", "factor": 2}, max_position=512)
    {'rope_type': 'dynamic', 'factor': 2.0, 'original_max_position_embeddings': 512}
    """
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError(f"{what} must be a dict such as {{'rope_type': 'yarn', 'factor': 4.0}}, got {scaling!r}.")
    scaling = {key: value for key, value in (scaling or {}).items() if value is not None}   # None: the default
    rope_type = scaling.pop("rope_type", "default")
    if rope_type == "default" and not scaling:
        return None
    _check_rope_type(rope_type, scaling, what)
    keys = ROPE_SCALING_KEYS[rope_type]
    resolved = {"rope_type": rope_type, **keys, **scaling}
    if "original_max_position_embeddings" in keys:
        if resolved["original_max_position_embeddings"] is None:
            resolved["original_max_position_embeddings"] = max_position
        if resolved["original_max_position_embeddings"] is None:
            raise ValueError(f"{what}: rope_type {rope_type!r} needs original_max_position_embeddings, the number "
                             f"of trained positions: set it in {what}.")
    for key, value in resolved.items():
        if key != "rope_type" and value is not None:
            resolved[key] = check_rope_number(key, value, what)
    original = resolved.get("original_max_position_embeddings")
    if rope_type == "yarn" and resolved["factor"] is None and max_position is not None:
        resolved["factor"] = check_rope_number("factor", max_position / original, f"{what} (max_position / "
                                               "original_max_position_embeddings)")
    if resolved["factor"] is None:
        raise ValueError(f"{what}: rope_type {rope_type!r} needs a factor >= 1 (how many times the trained "
                         f"length it stretches to): set {what}['factor'].")
    if rope_type == "yarn" and resolved["beta_fast"] < resolved["beta_slow"]:
        raise ValueError(f"{what}: beta_fast = {resolved['beta_fast']} is below beta_slow = {resolved['beta_slow']}"
                         ": beta_fast must be at least beta_slow (yarn's defaults: 32 and 1).")
    placed = resolved["factor"] * (original or max_position or 1)
    if rope_type != "dynamic" and placed > MAX_POSITIONS:
        raise ValueError(f"{what}: factor = {resolved['factor']!r} places {placed:.4g} positions, more than "
                         f"{MAX_POSITIONS} (positions are int32): use a smaller factor.")
    return resolved


def _check_rope_type(rope_type, scaling, what):
    """Refuse a ``rope_type`` bert4long does not compute, or keys it does not take."""
    implemented = ", ".join(ROPE_SCALING_KEYS)
    if rope_type == "default":
        raise ValueError(f"{what}: rope_type 'default' (no scaling) takes no {sorted(scaling)}: drop them or name "
                         f"a scaling rope_type ({implemented}).")
    if rope_type in UNIMPLEMENTED_ROPE_TYPES:
        raise ValueError(f"{what}: rope_type {rope_type!r} is not implemented; bert4long implements {implemented} "
                         "(or 'default': no scaling); transformers computes it: run this model there.")
    if rope_type not in ROPE_SCALING_KEYS:
        raise ValueError(f"{what}: rope_type {rope_type!r} is not implemented; bert4long implements {implemented} "
                         "(or 'default': no scaling), and transformers' ModernBERT computes no such rope_type either.")
    unknown = sorted(set(scaling) - set(ROPE_SCALING_KEYS[rope_type]))
    if unknown:
        raise ValueError(f"{what}: rope_type {rope_type!r} takes {sorted(ROPE_SCALING_KEYS[rope_type])}, not "
                         f"{unknown}: drop them.")


def rope_scaled_length(scaling, max_position):
    """How many positions a model trained on ``max_position`` places with the resolved ``scaling``: ``factor``
    times the trained length for ``linear`` and ``yarn``, any number (None) for ``dynamic``.

    Example:
    >>> from bert4long.rope_scaling import rope_scaled_length
    >>> rope_scaled_length({"rope_type": "linear", "factor": 4.0}, 512)
    2048
    """
    if scaling is None:
        return max_position
    if scaling["rope_type"] == "dynamic":
        return None
    original = scaling.get("original_max_position_embeddings", max_position)
    return max(max_position, int(scaling["factor"] * original))


def describe_rope_scaling(scaling):
    """One phrase for a resolved ``scaling``: ``'none'`` or its type and every value set.

    >>> describe_rope_scaling({"rope_type": "linear", "factor": 2.0})
    'linear, factor 2.0'
    """
    if scaling is None:
        return "none"
    values = ", ".join(f"{key} {value}" for key, value in scaling.items() if key != "rope_type" and value is not None)
    return f"{scaling['rope_type']}, {values}"
