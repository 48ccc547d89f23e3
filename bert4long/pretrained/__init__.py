"""Models shipped inside bert4long (no download): `path` gives a model's folder.

``austen-wiki-mini``: a small uncased BERT masked LM (4 layers, hidden 128, 128 trained positions,
4,096 WordPiece pieces) that bert4long trained from random weights on Jane Austen's novels and
English Wikipedia articles; its README says how and how well. It is the main job's model
(``bert4long pretrain`` with no arguments) and the README's example. This module imports no
TensorFlow.

>>> import os
>>> from bert4long import pretrained
>>> sorted(os.listdir(pretrained.path()))[:2]
['README.md', 'bert_config.json']
"""
import os

DEFAULT = "austen-wiki-mini"
NAMES = (DEFAULT,)
HERE = os.path.dirname(os.path.abspath(__file__))


def path(name: str = DEFAULT) -> str:
    """The folder of a shipped model (``bert_config.json``, ``bert_model.ckpt.*``, ``vocab.txt``)."""
    if name not in NAMES:
        raise ValueError(f"No shipped model {name!r}: bert4long ships {', '.join(NAMES)}")
    return os.path.join(HERE, name)


def checkpoint(name: str = DEFAULT) -> str:
    """The checkpoint prefix of a shipped model (what ``build_transformer_model`` reads)."""
    return os.path.join(path(name), "bert_model.ckpt")
