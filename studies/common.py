"""What the studies share beyond `benchmarks.common`: the studies' tokenizer and their decision rules."""
import functools
import math
import os

from benchmarks.common import minilm_folder


@functools.cache
def minilm_tokenizer():
    """all-MiniLM-L6-v2's WordPiece tokenizer (one per process)."""
    from bert4long.tokenizers import Tokenizer

    return Tokenizer(os.path.join(minilm_folder(), "vocab.txt"), do_lower_case=True)


def two_sided_p(difference, se):
    """The normal two-sided p-value of ``difference`` with standard error ``se``."""
    return math.erfc(abs(difference / se) / math.sqrt(2)) if se > 0 else float(difference == 0)


def holm(p_values, level=0.05):
    """Holm's step-down decisions at family-wise ``level``: True where a hypothesis is rejected.

    >>> holm([0.01, 0.04, 0.03])
    [True, False, False]
    """
    rejected = [False] * len(p_values)
    for rank, i in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        if p_values[i] > level / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected
