"""RoPE scaling described as transformers' ``rope_parameters`` do: checked and completed here, in plain Python.

``linear`` (position interpolation), ``dynamic`` (NTK-aware) and ``yarn``; the frequencies they give are
`bert4long.ops.positions.rope_frequencies`. This module imports nothing heavy, so the command line checks
``--rope-scaling`` before TensorFlow starts.
"""
# The keys of each implemented ``rope_type`` with their defaults (None: required, or derived from max_position).
ROPE_SCALING_KEYS = {
    "linear": {"factor": None},
    "dynamic": {"factor": None, "original_max_position_embeddings": None},
    "yarn": {"factor": None, "original_max_position_embeddings": None, "attention_factor": None,
             "beta_fast": 32.0, "beta_slow": 1.0},
}


def resolve_rope_scaling(scaling, max_position=None, what="rope_scaling"):
    """The complete RoPE scaling ``scaling`` describes (None: none), every key of its ``rope_type`` filled.

    ``scaling`` is a transformers ``rope_parameters`` entry without ``rope_theta``: ``rope_type`` ``'linear'``
    (position interpolation: frequencies / ``factor``), ``'dynamic'`` (NTK-aware: the base grows with the
    length beyond ``original_max_position_embeddings``) or ``'yarn'`` (``beta_fast`` 32, ``beta_slow`` 1,
    ``attention_factor`` default ``0.1 ln(factor) + 1``); ``'default'`` or None is no scaling.
    ``original_max_position_embeddings`` defaults to ``max_position``; a yarn ``factor`` of None to
    ``max_position / original_max_position_embeddings``. ``what`` names ``scaling`` in errors.

    Example:
    >>> from bert4long.rope_scaling import resolve_rope_scaling
    >>> resolve_rope_scaling({"rope_type": "dynamic", "factor": 2}, max_position=512)
    {'rope_type': 'dynamic', 'factor': 2.0, 'original_max_position_embeddings': 512}
    """
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError(f"{what} must be a dict such as {{'rope_type': 'yarn', 'factor': 4.0}}, got {scaling!r}.")
    scaling = dict(scaling or {})
    rope_type = scaling.pop("rope_type", "default")
    if rope_type == "default" and not scaling:
        return None
    if rope_type == "default":
        raise ValueError(f"{what}: rope_type 'default' (no scaling) takes no {sorted(scaling)}: drop them or name "
                         f"a scaling rope_type ({', '.join(ROPE_SCALING_KEYS)}).")
    if rope_type not in ROPE_SCALING_KEYS:
        raise ValueError(f"{what}: rope_type {rope_type!r} is not implemented; bert4long implements "
                         f"{', '.join(ROPE_SCALING_KEYS)} (or 'default': no scaling).")
    keys = ROPE_SCALING_KEYS[rope_type]
    unknown = sorted(set(scaling) - set(keys))
    if unknown:
        raise ValueError(f"{what}: rope_type {rope_type!r} takes {sorted(keys)}, not {unknown}: drop them.")
    resolved = {"rope_type": rope_type, **keys, **scaling}
    if "original_max_position_embeddings" in keys:
        if resolved["original_max_position_embeddings"] is None:
            resolved["original_max_position_embeddings"] = max_position
        original = resolved["original_max_position_embeddings"]
        if not isinstance(original, int) or isinstance(original, bool) or original <= 0:
            raise ValueError(f"{what}: original_max_position_embeddings must be the positive number of trained "
                             f"positions, got {original!r}: set it in {what}.")
        if rope_type == "yarn" and resolved["factor"] is None and max_position is not None:
            resolved["factor"] = max_position / original
    for key, value in resolved.items():
        if key not in ("rope_type", "original_max_position_embeddings") and value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{what}: {key} must be a positive number, got {value!r}.")
            resolved[key] = float(value)
    if resolved["factor"] is None or resolved["factor"] < 1.0:
        raise ValueError(f"{what}: rope_type {rope_type!r} needs a factor >= 1 (how many times the trained "
                         f"length it stretches to), got {resolved['factor']!r}: set {what}['factor'].")
    return resolved


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
