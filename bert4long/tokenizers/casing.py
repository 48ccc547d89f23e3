"""Whether a WordPiece vocabulary is read lower-cased: the one rule of `load_tokenizer` and the command line.

Hugging Face's settings first: ``do_lower_case`` of the folder's ``tokenizer_config.json``, else the
``lowercase`` of the BERT normalizer in its ``tokenizer.json``. Without either, transformers falls back on
its default (lower-case) and Google's scripts on a ``--do_lower_case`` flag; here the vocabulary decides,
because Google's cased checkpoints carry no tokenizer config but their vocabularies are full of capitals,
while uncased vocabularies hold almost none (bert-base-chinese, uncased: ``<S>`` and ``<T>`` among 21,128
pieces). A vocabulary of 100 word pieces or more is cased when more than `CASED_SHARE` of them hold
capitals; a smaller one when any does.
"""
import json
import os
from collections.abc import Iterable

from bert4long.tokenizers.wordpiece import is_special

CASED_SHARE = 0.02  # the share of capitalised word pieces above which a vocabulary is cased


def vocab_is_cased(tokens: Iterable[str]) -> bool:
    """True when the vocabulary's word pieces hold capitals (lower-casing would change them) often enough.

    >>> vocab_is_cased(["[CLS]", "[SEP]", "paris", "##is"]), vocab_is_cased(["[CLS]", "Paris", "paris", "##is"])
    (False, True)
    >>> vocab_is_cased(["Paris"] + [f"w{i}" for i in range(205)])  # 1 capitalised piece in 206: uncased
    False
    """
    words = [t for t in tokens if not is_special(t)]
    capitals = sum(t != t.lower() for t in words)
    return capitals > CASED_SHARE * len(words) if len(words) >= 100 else capitals > 0


def read_json(path):
    """The JSON object in a tokenizer folder's file ``path`` (``{}`` when there is none); ``ValueError`` naming the
    file when it is not a JSON object."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path!r} is not valid JSON ({error}): the tokenizer file is damaged; copy it again from "
                         "the model's folder or hub page") from None
    if not isinstance(content, dict):
        raise ValueError(f"{path!r} holds a JSON {type(content).__name__}, not an object: it is not a tokenizer file "
                         "transformers writes; copy it again from the model's folder or hub page")
    return content


def lower_case_of(folder: str | os.PathLike, tokens: Iterable[str]) -> bool:
    """``do_lower_case`` for the WordPiece vocabulary ``tokens`` of ``folder``, by the module's rule.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> lower_case_of(folder, ["[CLS]", "Paris", "paris"])
    False
    >>> _ = open(os.path.join(folder, "tokenizer_config.json"), "w").write('{"do_lower_case": true}')
    >>> lower_case_of(folder, ["[CLS]", "Paris", "paris"])
    True
    """
    settings = os.path.join(folder, "tokenizer_config.json")
    config = read_json(settings)
    if "do_lower_case" in config:
        if not isinstance(config["do_lower_case"], bool):
            raise ValueError(f"{settings}: do_lower_case must be true or false, got {config['do_lower_case']!r}; "
                             "fix the file or delete the key to let the vocabulary decide")
        return config["do_lower_case"]
    normalizer = read_json(os.path.join(folder, "tokenizer.json")).get("normalizer") or {}
    if isinstance(normalizer.get("lowercase"), bool):
        return normalizer["lowercase"]
    return not vocab_is_cased(tokens)
