"""What a JSON number in a config or a position record must be, said the same way for both."""


def integer_problem(value, least):
    """What is wrong with ``value`` for a JSON integer of at least ``least`` (None if nothing): ``2.0``, ``"2"`` and
    ``true`` are not integers, and the message says how the value was written.

    >>> from bert4long.checkpoints.json_values import integer_problem
    >>> integer_problem(2, 1), integer_problem(2.0, 1)
    (None, 'must be a whole number >= 1 (an integer: 2, not 2.0)')
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= least:
        return None
    written = (" (a number, not a string)" if isinstance(value, str) else
               f" (a number, not {str(value).lower()})" if isinstance(value, bool) else
               f" (an integer: {int(value)}, not {value})" if isinstance(value, float) and value.is_integer() else "")
    return f"must be a whole number >= {least}{written}"
