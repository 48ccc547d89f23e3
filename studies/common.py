"""What the studies share beyond `benchmarks.common`: the studies' tokenizer."""
import functools
import os

from benchmarks.common import minilm_folder


@functools.cache
def minilm_tokenizer():
    """all-MiniLM-L6-v2's WordPiece tokenizer (one per process)."""
    from bert4long.tokenizers import Tokenizer

    return Tokenizer(os.path.join(minilm_folder(), "vocab.txt"), do_lower_case=True)
