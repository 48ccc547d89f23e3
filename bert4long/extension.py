"""Materialise an extended position table into a standard checkpoint (``bert4long extend``).

The result is an ordinary BERT checkpoint whose ``max_position_embeddings`` is the
new length, so any BERT tool (Hugging Face, keras-hub, bert4keras) reads the long model.
"""
import json
import os
import shutil

from bert4long.checkpoints import write_checkpoint
from bert4long.layers.position_extension import PositionExtension
from bert4long.outputs import OutputFolder

POSITION_VARIABLE = "bert/embeddings/position_embeddings"


def extend_position_table(table, method, max_position, alpha=0.4):
    """Return the ``[max_position, dim]`` table that ``method`` gives for a trained ``[n, dim]`` table.

    Example:
    >>> import numpy as np
    >>> from bert4long.extension import extend_position_table
    >>> extend_position_table(np.ones((512, 8), "float32"), "copy", 1300).shape
    (1300, 8)
    """
    return PositionExtension(method, alpha, max_position).table(table, max_position)


def extend_checkpoint(config_path, checkpoint_path, method, max_position, out_dir, alpha=0.4, overwrite=False):
    """Write ``out_dir/bert_config.json``, ``vocab.txt`` (if found) and ``bert_model.ckpt.*`` with the long table.

    ``copy`` to a length that is not a multiple of n ends with a truncated tile.
    ``out_dir`` must be new or empty (or an earlier output, with ``overwrite=True``),
    and not the source's folder; it appears only when complete (`bert4long.outputs.OutputFolder`).
    Returns ``(config_path, checkpoint_prefix)``.

    Example:
    >>> from bert4long.extension import extend_checkpoint
    >>> extend_checkpoint("bert_config.json", "bert_model.ckpt", "hierarchical", 2048, "long/")  # doctest: +SKIP
    """
    from bert4long.checkpoint_layout import open_checkpoint
    from bert4long.config_keys import read_config

    config = read_config(config_path)
    reader = open_checkpoint(checkpoint_path)
    variables = {name: reader.get(name) for name in reader.names()}
    if POSITION_VARIABLE not in variables:
        raise ValueError(f"Checkpoint {reader.prefix!r} has no {POSITION_VARIABLE!r}: nothing to extend "
                         "(relative/rotary models such as NEZHA and RoFormer need no extension).")
    extension = PositionExtension(method, alpha, max_position)
    variables[POSITION_VARIABLE] = extension.table(variables[POSITION_VARIABLE], max_position)
    config["max_position_embeddings"] = max_position
    config["bert4long_position_extension"] = {"method": method, "from": int(reader.get(POSITION_VARIABLE).shape[0]),
                                    **({"alpha": extension.alpha} if method == "hierarchical" else {})}
    with OutputFolder(out_dir, "extend", inputs=[config_path, reader.prefix], overwrite=overwrite) as staging:
        with open(os.path.join(staging, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        for folder in {os.path.dirname(os.fspath(config_path)), os.path.dirname(os.fspath(reader.prefix)),
                       os.fspath(reader.prefix)}:
            vocab = os.path.join(folder, "vocab.txt")
            if os.path.isfile(vocab):
                shutil.copyfile(vocab, os.path.join(staging, "vocab.txt"))
                break
        write_checkpoint(os.path.join(staging, "bert_model.ckpt"), variables)
    return os.path.join(out_dir, "bert_config.json"), os.path.join(out_dir, "bert_model.ckpt")
