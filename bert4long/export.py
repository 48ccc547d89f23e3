"""Export a bert4long Keras model as a plain TensorFlow SavedModel.

The SavedModel's ``serving_default`` signature takes int32 ``token_ids`` and
``segment_ids`` of shape ``[batch, length]``, plus ``attention_mask`` (0 pad /
1 local / 2 global) for a model built with ``attention_mask_input=True``
(any length the model can place;
with hierarchical positions that is up to n² for n trained positions) and
returns a dict of named outputs (``sequence_output``, ``pooled_output``,
``mlm_logits``/``mlm_probs``, ``logits``, ...). It needs TensorFlow only:
``tf.saved_model.load(export_dir).signatures['serving_default']`` works where
bert4long and Keras are not installed. A model with a gathered MLM head is
served with the head at every position.
"""
import re

import keras
import tensorflow as tf

from bert4long.outputs import OutputFolder

OUTPUT_NAMES = {
    "mlm-activation": "mlm_output",
    "output-norm": "sequence_output",  # pre-norm encoders' final norm (ModernBERT)
    "pooler-dense": "pooled_output",
    "nsp-proba": "nsp_probs",
    "classifier-logits": "logits",
    "labeller-logits": "logits",
}


def _output_names(model):
    names = []
    for layer in model.output_names:
        name = OUTPUT_NAMES.get(layer.lower())
        if name is None:
            name = "sequence_output" if re.match(r"Transformer-.*Norm$", layer) else re.sub(r"\W+", "_", layer).lower()
        names.append(name)
    if len(set(names)) != len(names):
        names = [f"{name}_{i}" for i, name in enumerate(names)]
    return names


def export_saved_model(model, export_dir, overwrite=False):
    """Write ``model`` as a SavedModel with an int32 ``serving_default`` signature.

    The folder is staged and moved into place when complete. An ``export_dir``
    that holds anything is refused, except an earlier export with ``overwrite=True``
    (`bert4long.outputs.OutputFolder`).

    Example:
    >>> from bert4long.models import build_transformer_model
    >>> from bert4long.export import export_saved_model
    >>> model = build_transformer_model("bert_config.json", "bert_model.ckpt",
    ...                                 hierarchical_position=True)  # doctest: +SKIP
    >>> export_saved_model(model, "exported/")  # doctest: +SKIP
    >>> # elsewhere, TensorFlow only:
    >>> serve = tf.saved_model.load("exported/").signatures["serving_default"]  # doctest: +SKIP
    >>> serve(token_ids=ids, segment_ids=segs)["sequence_output"]  # doctest: +SKIP
    """
    input_names = [tensor.name for tensor in model.inputs]
    if input_names[0] != "Input-Token" or any(
        name not in ("Input-Token", "Input-Segment", "Input-Masked-Positions", "Input-Attention-Mask")
        for name in input_names
    ):
        raise ValueError(
            f"export_saved_model serves models whose inputs are token ids (+ segment ids); this model takes "
            f"{input_names}. Rebuild it without custom_position_ids, or export with keras.export.ExportArchive."
        )
    names = _output_names(model)

    def serve(token_ids, segment_ids, attention_mask=None):
        feeds = {"Input-Token": token_ids, "Input-Segment": segment_ids, "Input-Attention-Mask": attention_mask}
        if "Input-Masked-Positions" in input_names:
            shape = tf.shape(token_ids)
            feeds["Input-Masked-Positions"] = tf.tile(tf.range(shape[1])[None], [shape[0], 1])
        outputs = model([feeds[name] for name in input_names], training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return {name: tf.cast(value, tf.float32) for name, value in zip(names, outputs)}

    signature = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ("token_ids", "segment_ids")]
    if "Input-Attention-Mask" in input_names:
        signature.append(tf.TensorSpec([None, None], tf.int32, name="attention_mask"))
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", tf.function(serve, input_signature=signature))
    with OutputFolder(export_dir, "export", overwrite=overwrite) as staging:
        archive.write_out(staging, verbose=False)
    return names
