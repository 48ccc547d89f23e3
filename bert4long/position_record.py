"""The position extension a checkpoint was trained with, recorded in its config so that it travels with it.

Every config bert4long writes for a model with extended positions (``pretrain``'s and the demo's
``bert_config.json``, the ``config.json`` of a Hugging Face folder, ``extend``'s output) holds one extra key::

    "bert4long_position_extension": {"method": "hierarchical", "alpha": 0.3, "trained_positions": 512}

``method`` and ``alpha`` (hierarchical) or ``length`` (copy, interpolate: the target length) say how positions
beyond the ``trained_positions`` rows of the table are read; ``"materialized": true`` (``extend``) says the
table in the checkpoint already holds those rows, so a loader applies nothing. `restore_position_options`
gives a loader the recorded extension when it asks for none, and refuses a different one unless overridden.

Why one extra key in the config rather than a file beside it: the record cannot be separated from the config
it describes (a config copied alone keeps it, a stale file cannot contradict it), and every other reader
ignores it. Google's ``BertConfig.from_dict`` sets every key as an attribute and reads only its own;
bert4keras's ``build_transformer_model`` passes the config as keyword arguments and its ``Transformer``
swallows unknown ones in ``**kwargs`` (the key is not its ``hierarchical_position``, so bert4keras is not
silently switched on: pass it the recorded alpha yourself); transformers' ``PretrainedConfig`` keeps unknown
keys as attributes.
"""
from bert4long.layers.position_extension import PositionExtension, validate_alpha

RECORD_KEY = "bert4long_position_extension"
# build_transformer_model's position keywords (None: not given)
POSITION_OPTIONS = ("hierarchical_position", "position_extension", "position_extension_length")


def position_record(extension, trained_positions, materialized=False):
    """The record of ``extension`` over a table of ``trained_positions`` rows (None: no extension to record).

    Example:
    >>> from bert4long.layers.position_extension import PositionExtension
    >>> from bert4long.position_record import position_record
    >>> position_record(PositionExtension("hierarchical", alpha=0.3), 512)
    {'method': 'hierarchical', 'alpha': 0.3, 'trained_positions': 512}
    """
    if extension.method is None:
        return None
    record = {"method": extension.method}
    if extension.alpha is not None:
        record["alpha"] = extension.alpha
    if extension.length is not None:
        record["length"] = int(extension.length)
    record["trained_positions"] = int(trained_positions)
    if materialized:
        record["materialized"] = True
    return record


def recorded_extension(config, source="the config"):
    """The `PositionExtension` a loader must apply to the table of ``config`` (a config dict, any naming), or
    None: nothing recorded, or a materialised table (``extend``) that holds its rows already.

    Example:
    >>> from bert4long.position_record import recorded_extension
    >>> recorded_extension({"bert4long_position_extension": {"method": "copy", "length": 2048}})
    PositionExtension('copy', alpha=None, length=2048)
    """
    record = config.get(RECORD_KEY)
    if not record or record.get("materialized"):
        return None
    try:
        return PositionExtension(record.get("method"), record.get("alpha"), record.get("length"))
    except (AttributeError, ValueError) as error:
        raise ValueError(f"{source}: {RECORD_KEY} = {record!r} is not a position extension bert4long wrote "
                         f"({error}). Fix or remove that key (bert4long writes e.g. "
                         '{"method": "hierarchical", "alpha": 0.4, "trained_positions": 512}).') from None


def describe(extension):
    """``extension`` in words, for messages.

    >>> from bert4long.layers.position_extension import PositionExtension
    >>> describe(PositionExtension("hierarchical", alpha=0.3)), describe(PositionExtension())
    ('hierarchical (alpha 0.3)', 'none (the trained positions only)')
    """
    if extension.method is None:
        return "none (the trained positions only)"
    if extension.method == "hierarchical":
        return f"hierarchical (alpha {extension.alpha})"
    return f"{extension.method} (to {extension.length} positions)"


def reads_alike(a, b):
    """True when two extensions give the same vector at every position both place: same method, same alpha,
    and for ``interpolate`` the same length (for the others the length only caps how far they reach)."""
    return (a.method, a.alpha) == (b.method, b.alpha) and (a.method != "interpolate" or a.length == b.length)


def _given_extension(options, recorded):
    """The extension the caller's ``options`` ask for; the recorded length fills one they leave out."""
    hierarchical, method, length = (options.get(k) for k in POSITION_OPTIONS)
    if hierarchical is None and method is None:   # only a length: the recorded method's
        method = recorded.method
    elif method in (None, "none"):
        method = "hierarchical" if validate_alpha(hierarchical) is not None else None
    if length is None and method == recorded.method:
        length = recorded.length
    return PositionExtension.from_options(hierarchical, method, length)


def restore_position_options(config, options, source, override=False):
    """``options`` (`POSITION_OPTIONS` and any other keywords) with the extension recorded in ``config``.

    Options that are all None take the recorded extension. Given ones must read positions alike
    (`reads_alike`) or ``ValueError`` names both and the fix; ``override=True`` builds with the given ones.

    Example:
    >>> from bert4long.position_record import restore_position_options
    >>> config = {"bert4long_position_extension": {"method": "hierarchical", "alpha": 0.3}}
    >>> restore_position_options(config, {}, "bert_config.json")["hierarchical_position"]
    0.3
    >>> restore_position_options(config, {"hierarchical_position": 0.4}, "bert_config.json")
    Traceback (most recent call last):
    ...
    ValueError: bert_config.json records the position extension hierarchical (alpha 0.3), but hierarchical (alpha 0.4) ...
    """
    recorded = recorded_extension(config, source)
    if recorded is None:
        return options
    extension = recorded
    if any(options.get(k) is not None for k in POSITION_OPTIONS):
        extension = _given_extension(options, recorded)
        if not override and not reads_alike(extension, recorded):
            raise ValueError(
                f"{source} records the position extension {describe(recorded)}, but {describe(extension)} was "
                f"asked: this model would read positions beyond its {config[RECORD_KEY].get('trained_positions')} "
                "trained rows differently from how it was trained. Leave the position options out to use the "
                "recorded one (or give the same), or override it: override_position_extension=True "
                "(--override-position-extension).")
    return {**options, "hierarchical_position": extension.alpha, "position_extension": extension.method,
            "position_extension_length": extension.length}
