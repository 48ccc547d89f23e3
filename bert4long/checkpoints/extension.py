"""Materialise an extended position table into a standard checkpoint (``bert4long extend``).

The result is an ordinary BERT checkpoint whose ``max_position_embeddings`` is the
new length, so any BERT tool (Hugging Face, keras-hub, bert4keras) reads the long model;
its config records how the rows were made (`bert4long.checkpoints.position_record`, ``"materialized": true``).
"""
import json
import os
import shutil

from bert4long.checkpoints.position_record import RECORD_KEY, describe, position_record, reads_alike, recorded_extension
from bert4long.checkpoints.tf_format import write_checkpoint
from bert4long.ops.position_extension import PositionExtension
from bert4long.output_folders import OutputFolder
from bert4long.position_alpha import DEFAULT_ALPHA

POSITION_VARIABLE = "bert/embeddings/position_embeddings"


def extend_position_table(table, method, max_position, alpha=DEFAULT_ALPHA):
    """Return the ``[max_position, dim]`` table that ``method`` gives for a trained ``[n, dim]`` table.

    Example:
    >>> import numpy as np
    >>> from bert4long.checkpoints.extension import extend_position_table
    >>> extend_position_table(np.ones((512, 8), "float32"), "copy", 1300).shape
    (1300, 8)
    """
    return PositionExtension(method, alpha, max_position).table(table, max_position)


def extend_checkpoint(config_path, checkpoint_path, method, max_position, out_dir, alpha=None, overwrite=False,
                      override_position_extension=False):
    """Write ``out_dir/bert_config.json``, ``vocab.txt`` (if found) and ``bert_model.ckpt.*`` with the long table.

    ``copy`` to a length that is not a multiple of n ends with a truncated tile. ``alpha`` (hierarchical):
    None takes the alpha the source's config records, else 0.4. A source trained with another extension
    (recorded in its config) is refused unless ``override_position_extension``: the new rows would differ
    from the ones it was trained to read.
    ``out_dir`` must be new or empty (or an earlier output, with ``overwrite=True``),
    and not the source's folder; it appears only when complete (`bert4long.output_folders.OutputFolder`).
    Returns ``(config_path, checkpoint_prefix)``.

    Example:
    >>> from bert4long.checkpoints.extension import extend_checkpoint
    >>> extend_checkpoint("bert_config.json", "bert_model.ckpt", "hierarchical", 2048, "long/")  # doctest: +SKIP
    """
    from bert4long.checkpoints.config import read_config
    from bert4long.checkpoints.layout import open_checkpoint

    config = read_config(config_path)
    reader = open_checkpoint(checkpoint_path)
    variables = {name: reader.get(name) for name in reader.names()}
    if POSITION_VARIABLE not in variables:
        raise ValueError(f"Checkpoint {reader.prefix!r} has no {POSITION_VARIABLE!r}: nothing to extend "
                         "(relative/rotary models such as NEZHA and RoFormer need no extension).")
    recorded = recorded_extension(config)
    if alpha is None and recorded is not None and recorded.method == method:
        alpha = recorded.alpha
    extension = PositionExtension(method, alpha, max_position)
    if recorded is not None and not reads_alike(extension, recorded) and not override_position_extension:
        raise ValueError(f"{config_path!r} records the position extension {describe(recorded)}, the one this "
                         f"checkpoint was trained with; extending by {describe(extension)} would write other rows. "
                         "Extend with the recorded method (and alpha), or pass --override-position-extension.")
    trained = variables[POSITION_VARIABLE].shape[0]
    variables[POSITION_VARIABLE] = extension.table(variables[POSITION_VARIABLE], max_position)
    config["max_position_embeddings"] = max_position
    config[RECORD_KEY] = position_record(extension, trained, materialized=True)
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
