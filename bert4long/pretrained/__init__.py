"""Models and texts shipped inside bert4long (no download): `path` gives a model's folder,
`wikipedia_articles` the texts the main job reads.

``austen-wiki-mini``: a small uncased BERT masked LM (4 layers, hidden 128, 128 trained positions,
4,096 WordPiece pieces) that bert4long trained from random weights on Jane Austen's novels and
English Wikipedia articles; its README says how and how well. It is the main job's model
(``bert4long pretrain`` with no arguments) and the README's example. The main job reads 106
English Wikipedia articles shipped beside it (``wikipedia-articles.jsonl.bz2``, CC BY-SA 3.0: source,
licence and the articles' revisions in ``wikipedia-articles.md``). This module imports no TensorFlow.

>>> import os
>>> from bert4long import pretrained
>>> sorted(os.listdir(pretrained.path()))[:2]
['README.md', 'bert_config.json']
"""
import bz2
import json
import os

DEFAULT = "austen-wiki-mini"
NAMES = (DEFAULT,)
HERE = os.path.dirname(os.path.abspath(__file__))
ARTICLES = "wikipedia-articles.jsonl.bz2"
# Indices into `wikipedia_articles()` of 13 held-out articles: neither the built-in model nor
# ../shared/models/minilm-mlm trained on them; the main job and the position study measure on them.
HELD_OUT_ARTICLES = (5, 10, 13, 20, 27, 36, 37, 39, 65, 87, 88, 99, 103)


def path(name: str = DEFAULT) -> str:
    """The folder of a shipped model (``bert_config.json``, ``bert_model.ckpt.*``, ``vocab.txt``)."""
    if name not in NAMES:
        raise ValueError(f"No shipped model {name!r}: bert4long ships {', '.join(NAMES)}")
    return os.path.join(HERE, name)


def checkpoint(name: str = DEFAULT) -> str:
    """The checkpoint prefix of a shipped model (what ``build_transformer_model`` reads)."""
    return os.path.join(path(name), "bert_model.ckpt")


def wikipedia_articles() -> list[str]:
    """The texts of the 106 shipped English Wikipedia articles (markup stripped), in their file's order.

    >>> from bert4long import pretrained
    >>> articles = pretrained.wikipedia_articles()
    >>> len(articles), "Trojan War" in articles[5]   # 5: Achilles, the first held-out article
    (106, True)
    """
    with bz2.open(os.path.join(HERE, ARTICLES), "rt", encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines]
