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
from bert4long.checkpoints.json_values import integer_problem
from bert4long.ops.position_extension import EXTENSION_METHODS, PositionExtension, validate_alpha
from bert4long.position_alpha import ALPHA_RANGE, DEFAULT_ALPHA, alpha_problem

# The config key that holds the record.
RECORD_KEY = "bert4long_position_extension"
# build_transformer_model's position keywords (None: not given)
POSITION_OPTIONS = ("hierarchical_position", "position_extension", "position_extension_length")
# The keys `position_record` writes, and a record as it writes one (for messages).
RECORD_KEYS = ("method", "alpha", "length", "trained_positions", "materialized")
EXAMPLE_RECORD = f'{{"method": "hierarchical", "alpha": {DEFAULT_ALPHA}, "trained_positions": 512}}'



def trained_positions(config):
    """The number of trained positions a Google or Hugging Face config dict gives (None if it says nothing).

    Example:
    >>> from bert4long.checkpoints.position_record import trained_positions
    >>> trained_positions({"model_type": "roberta", "max_position_embeddings": 514, "pad_token_id": 1})
    512
    """
    if "model_type" in config:  # a Hugging Face config.json: its family's table says where positions start
        from bert4long.families import family_of_model_type

        family = family_of_model_type(config["model_type"])
        return family.trained_positions(config) if family else config.get("max_position_embeddings")
    return config.get("max_position_embeddings", config.get("max_position"))


def position_record(extension, trained_positions, materialized=False):
    """The record of ``extension`` over a table of ``trained_positions`` rows (None: no extension to record).

    Example:
    >>> from bert4long.ops.position_extension import PositionExtension
    >>> from bert4long.checkpoints.position_record import position_record
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


def recorded_extension(config):
    """The `PositionExtension` a loader must apply to the table of ``config`` (a config dict, any naming, its record
    checked when it was read: `check_record`), or None: nothing recorded, or a materialised table (``extend``)
    that holds its rows already.

    Example:
    >>> from bert4long.checkpoints.position_record import recorded_extension
    >>> recorded_extension({"bert4long_position_extension": {"method": "copy", "length": 2048}})
    PositionExtension('copy', alpha=None, length=2048)
    """
    record = config.get(RECORD_KEY)
    if record is None or record.get("materialized"):
        return None
    return PositionExtension(record["method"], record.get("alpha"), record.get("length"))


def _record_problem(record, table):
    """``(key, what is wrong)`` with ``record`` describing a table of ``table`` trained positions (None: unknown),
    or None."""
    if not isinstance(record, dict):
        return None, "must be a JSON object"
    unknown = sorted(set(record) - set(RECORD_KEYS))
    if unknown:
        return unknown[0], f"is not a key of the record (its keys: {', '.join(RECORD_KEYS)})"
    method, alpha, length = record.get("method"), record.get("alpha"), record.get("length")
    trained, materialized = record.get("trained_positions"), record.get("materialized", False)
    if method not in EXTENSION_METHODS:
        return "method", f"must be one of {', '.join(EXTENSION_METHODS)}"
    if "alpha" in record and (not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha_problem(alpha)):
        return "alpha", f"must be a number {ALPHA_RANGE}"
    if ("length" in record or method == "interpolate") and integer_problem(length, 1):
        return "length", integer_problem(length, 1) + " (the positions the extension places)"
    if not isinstance(materialized, bool):
        return "materialized", "must be true or false"
    if integer_problem(trained, 1):
        return "trained_positions", integer_problem(trained, 1) + " (the trained rows of the position table)"
    if table is not None and materialized and trained > table:
        return "trained_positions", f"must be at most the {table} positions of the table the config describes"
    if table is not None and not materialized and trained != table:
        return "trained_positions", f"must be the {table} trained positions of the table the config describes"
    return None


def check_record(config, source):
    """Refuse (one-line ``ValueError`` naming ``source``, the key and its valid values) a `RECORD_KEY` in ``config``
    that is not a record `position_record` writes, or that describes another table than the config's.

    Example:
    >>> from bert4long.checkpoints.position_record import check_record
    >>> check_record({"max_position_embeddings": 512, "bert4long_position_extension": {
    ...     "method": "hierarchical", "alpha": 0.5, "trained_positions": 512}}, "bert_config.json")
    Traceback (most recent call last):
    ...
    ValueError: Config file 'bert_config.json': bert4long_position_extension.alpha = 0.5 must be a number in (0, 1) ...
    """
    record = config[RECORD_KEY]
    problem = _record_problem(record, trained_positions(config))
    if problem is not None:
        key, what = problem
        name = (f"{RECORD_KEY} = {record!r}" if key is None else f"{RECORD_KEY}.{key} = {record[key]!r}"
                if key in record else f"{RECORD_KEY}.{key} (missing)")
        raise ValueError(f"Config file {source!r}: {name} {what}. Fix or remove that key (bert4long writes e.g. "
                         f"{EXAMPLE_RECORD}).")


def describe(extension):
    """``extension`` in words, for messages.

    >>> from bert4long.ops.position_extension import PositionExtension
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
    >>> from bert4long.checkpoints.position_record import restore_position_options
    >>> config = {"bert4long_position_extension": {"method": "hierarchical", "alpha": 0.3}}
    >>> restore_position_options(config, {}, "bert_config.json")["hierarchical_position"]
    0.3
    >>> restore_position_options(config, {"hierarchical_position": 0.4}, "bert_config.json")
    Traceback (most recent call last):
    ...
    ValueError: bert_config.json records the position extension hierarchical (alpha 0.3), but hierarchical (alpha 0.4) ...
    """
    recorded = recorded_extension(config)
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
