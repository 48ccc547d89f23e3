"""Export a bert4long Keras model as a plain TensorFlow SavedModel.

The SavedModel's ``serving_default`` signature takes int32 ``token_ids`` and
``segment_ids`` of shape ``[batch, length]``, plus ``attention_mask`` (0 pad /
1 local / 2 global) for a model built with ``attention_mask_input=True``
(all of one shape, at most the ``max_length`` chosen at export: by default what
the model can place, n for n trained positions or n² with hierarchical
positions) and returns a dict of named outputs (``sequence_output``, ``pooled_output``,
``mlm_logits``/``mlm_probs``, ``logits``, ...). It needs TensorFlow only:
``tf.saved_model.load(export_dir).signatures['serving_default']`` works where
bert4long and Keras are not installed. A model with a gathered MLM head is
served with the head at every position. A request of mismatched shapes, longer
than ``max_length``, or with an id outside the model's tables fails with
``InvalidArgumentError`` naming the problem; nothing is broadcast or clamped.

Exporting runs where Keras runs on TensorFlow; on another backend importing this module refuses in one line
(`bert4long.tensorflow_only.require_tensorflow`).
"""
import os
import re
from collections.abc import Sequence

import keras

from bert4long.models.checked import input_limits
from bert4long.output_folders import OutputFolder
from bert4long.tensorflow_only import require_tensorflow
from bert4long.tokenizers.wordpiece import Tokenizer

require_tensorflow("bert4long.export writes TensorFlow SavedModels",
                   "save a .keras file (model.save) and export it where Keras runs TensorFlow")

import tensorflow as tf  # noqa: E402 -- below the refusal, which speaks where TensorFlow is not installed

from bert4long.text_serving import check_raw_text_options, raw_text_serving  # noqa: E402

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


def export_max_length(model: keras.Model, max_length: int | None = None) -> int | None:
    """The longest request the SavedModel of ``model`` accepts: ``max_length``, checked, or the model's capacity."""
    capacity = input_limits(model)[1]
    if max_length is None:
        return capacity
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive int, got {max_length!r}.")
    if capacity is not None and max_length > capacity:
        raise ValueError(f"max_length={max_length} is more than the {capacity} positions this model can place: "
                         f"choose at most {capacity} (or build the model with hierarchical_position=True).")
    return max_length


def _check_servable_inputs(input_names):
    """Refuse a model whose inputs are not token ids (+ segment ids, masked positions, attention mask)."""
    if input_names[0] != "Input-Token" or any(
        name not in ("Input-Token", "Input-Segment", "Input-Masked-Positions", "Input-Attention-Mask")
        for name in input_names
    ):
        raise ValueError(
            f"export_saved_model serves models whose inputs are token ids (+ segment ids); this model takes "
            f"{input_names}. Rebuild it without custom_position_ids, or export with keras.export.ExportArchive."
        )


def _raw_text_seq_len(max_length, seq_len, tokenizer, strategy, head_len, chunk_overlap, pool, max_chunks):
    """The tokens per row of a raw-text export (default ``max_length``), its options checked."""
    seq_len = max_length if seq_len is None else seq_len
    if seq_len is None:
        raise ValueError("raw_text=True needs seq_len (tokens per row): this model's positions are unlimited.")
    if max_length is not None and seq_len > max_length:
        raise ValueError(f"seq_len={seq_len} is more than max_length={max_length}: choose at most {max_length}.")
    check_raw_text_options(seq_len, strategy, head_len, chunk_overlap, pool, max_chunks)
    if not isinstance(tokenizer, Tokenizer):
        raise ValueError(f"raw_text=True needs a WordPiece bert4long.tokenizers.Tokenizer, got {tokenizer!r}: "
                         "only WordPiece is compiled into the graph.")
    return seq_len


def _token_ids_server(model, input_names, names, max_length):
    """The int32 serving function: checks the request's shapes and length, runs ``model``, names its outputs."""

    def serve(token_ids, segment_ids, attention_mask=None):
        checks = [tf.debugging.assert_equal(tf.shape(other), tf.shape(token_ids), message=(
            f"{name} must have the shape of token_ids [batch, length]: nothing is broadcast."))
            for name, other in (("segment_ids", segment_ids), ("attention_mask", attention_mask)) if other is not None]
        if max_length is not None:
            checks.append(tf.debugging.assert_less_equal(tf.shape(token_ids)[1], max_length, message=(
                f"token_ids is longer than the {max_length} tokens this SavedModel accepts (max_length chosen at "
                "export): split the document into chunks or truncate it.")))
        with tf.control_dependencies(checks):
            token_ids = tf.identity(token_ids)
        feeds = {"Input-Token": token_ids, "Input-Segment": segment_ids, "Input-Attention-Mask": attention_mask}
        if "Input-Masked-Positions" in input_names:
            shape = tf.shape(token_ids)
            feeds["Input-Masked-Positions"] = tf.tile(tf.range(shape[1])[None], [shape[0], 1])
        outputs = model([feeds[name] for name in input_names], training=False)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return {name: tf.cast(value, tf.float32) for name, value in zip(names, outputs)}

    return serve


def _with_label_names(serve, label_names, threshold=None):
    """``serve`` whose ``logits`` also come as ``probabilities`` (softmax) and names: ``label`` (a string per
    document, rank-2 logits) or ``tags`` (a string per token, rank-3 logits of a token labeller). With ``threshold``
    (multi-label: a number, or one per label): sigmoid ``probabilities``, ``chosen`` (bool ``[batch, labels]``:
    probability at least the threshold) and ``label_names`` (string ``[batch, labels]``)."""
    names = tf.constant([str(name) for name in label_names])

    def serve_with_names(*args):
        outputs = dict(serve(*args))
        logits = outputs["logits"]
        if threshold is not None:
            outputs["probabilities"] = probabilities = tf.sigmoid(logits)
            outputs["chosen"] = probabilities >= tf.constant(threshold, tf.float32)
            outputs["label_names"] = tf.tile(names[None], [tf.shape(logits)[0], 1])
            return outputs
        outputs["probabilities"] = tf.nn.softmax(logits, axis=-1)
        key = "label" if logits.shape.rank == 2 else "tags"
        outputs[key] = tf.gather(names, tf.argmax(logits, axis=-1, output_type=tf.int32))
        return outputs

    return serve_with_names


def export_saved_model(
    model: keras.Model,
    export_dir: str | os.PathLike,
    max_length: int | None = None,
    overwrite: bool = False,
    raw_text: bool = False,
    tokenizer=None,
    seq_len: int | None = None,
    strategy: str = "head", head_len: int = 128, chunk_overlap: int = 0, pool: str = "mean", max_chunks: int = 16,
    label_names: Sequence[str] | None = None,
    threshold: float | Sequence[float] | None = None,
    precision: str = "float32",
) -> list[str]:
    """Write ``model`` as a SavedModel with an int32 ``serving_default`` signature (or a raw-text one).

    The folder is staged and moved into place when complete, with the usual
    permissions (umask). An ``export_dir`` that holds anything is refused, except
    an earlier export with ``overwrite=True`` (`bert4long.output_folders.OutputFolder`).
    ``max_length`` caps the tokens per request
    (default: what the model can place, None for unlimited rotary/relative
    positions); a lower cap bounds a request's memory.

    With ``raw_text=True``, ``serving_default`` takes a string tensor ``[batch]`` of UTF-8
    documents (``texts``; a scalar is one document, a batch of one) and tokenizes them in the graph
    with exactly ``tokenizer``'s ids (a `bert4long.tokenizers.Tokenizer`),
    applying ``strategy`` (``head``, ``tail``, ``head+tail`` with
    ``head_len``, or ``chunks`` with ``chunk_overlap``, ``pool`` and
    ``max_chunks``) at ``seq_len`` tokens per row (default ``max_length``);
    see `bert4long.text_serving` for its outputs. The int32 signature is then
    ``serve_token_ids``. The SavedModel still needs TensorFlow only.

    ``label_names`` (a classifier's or token labeller's, index = class id) adds ``probabilities`` and the
    predicted names, ``label`` (string ``[batch]``) or ``tags`` (string ``[batch, length]``), beside ``logits``;
    with ``threshold`` (multi-label), sigmoid ``probabilities``, ``chosen`` and ``label_names`` (`_with_label_names`).

    ``precision='bfloat16'`` computes in bfloat16 (`in_mixed_bfloat16`; outputs stay float32): faster on a CPU with
    bfloat16 units (`bert4long.precision.bfloat16_units`), slower on one without.

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
    _check_servable_inputs(input_names)
    model = _computed_in(model, precision)   # (after the checks: a refused model is not copied first)
    names = _output_names(model)
    max_length = export_max_length(model, max_length)
    if raw_text:
        seq_len = _raw_text_seq_len(max_length, seq_len, tokenizer, strategy, head_len, chunk_overlap, pool, max_chunks)
    serve = _token_ids_server(model, input_names, names, max_length)
    added = _label_outputs(model, names, label_names, threshold)
    signature = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ("token_ids", "segment_ids")]
    if "Input-Attention-Mask" in input_names:
        signature.append(tf.TensorSpec([None, None], tf.int32, name="attention_mask"))
    archive = keras.export.ExportArchive()   # (it saves the variables the endpoints read: `track(model)` saved each twice)
    serve_ids = serve if label_names is None else _with_label_names(serve, label_names, threshold)
    if raw_text:
        ranks = {name: len(shape) for name, shape in zip(names, [tuple(t.shape) for t in model.outputs])}
        serve_text, graph_tokenizer = raw_text_serving(
            serve, tokenizer, ranks, seq_len, strategy, head_len, chunk_overlap, pool, max_chunks,
            attention_mask_input="Input-Attention-Mask" in input_names)
        for table in graph_tokenizer.tables:
            archive.track(table)
        if label_names is not None:
            serve_text = _with_label_names(serve_text, label_names, threshold)
        archive.add_endpoint("serving_default", tf.function(
            serve_text, input_signature=[tf.TensorSpec(None, tf.string, name="texts")]))  # [batch], or a scalar
        archive.add_endpoint("serve_token_ids", tf.function(serve_ids, input_signature=signature))
    else:
        archive.add_endpoint("serving_default", tf.function(serve_ids, input_signature=signature))
    with OutputFolder(export_dir, "export", overwrite=overwrite) as staging:
        archive.write_out(staging, verbose=False)
    return [*names, *added]


def _computed_in(model, precision):
    if precision not in ("float32", "bfloat16"):
        raise ValueError(f"precision must be 'float32' or 'bfloat16', got {precision!r}.")
    return in_mixed_bfloat16(model) if precision == "bfloat16" else model


def in_mixed_bfloat16(model: keras.Model) -> keras.Model:
    """A copy of ``model`` (its weights too) whose float32 layers compute under ``mixed_bfloat16``.

    >>> import keras, numpy as np
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> copy = in_mixed_bfloat16(model)
    >>> copy.layers[0].dtype_policy.name, np.allclose(copy.layers[0].kernel.numpy(), model.layers[0].kernel.numpy())
    ('mixed_bfloat16', True)
    """
    def retyped(config):
        if isinstance(config, dict):
            if config.get("class_name") == "DTypePolicy" and config.get("config", {}).get("name") == "float32":
                return {**config, "config": {**config["config"], "name": "mixed_bfloat16"}}
            return {key: retyped(value) for key, value in config.items()}
        return [retyped(value) for value in config] if isinstance(config, list) else config

    copy = keras.saving.deserialize_keras_object(retyped(keras.saving.serialize_keras_object(model)))
    copy.set_weights(model.get_weights())
    return copy


def _label_outputs(model, names, label_names, threshold):
    """The outputs `_with_label_names` adds to ``names``; ``label_names`` are refused for a model without logits, and
    ``threshold`` without them or on per-token logits."""
    if label_names is not None and "logits" not in names:
        raise ValueError(f"label_names need a model with logits; this one gives {names}")
    if threshold is not None and (label_names is None or len(model.outputs[0].shape) != 2):
        raise ValueError("threshold is a multi-label classifier's decision: pass label_names too, for a model with "
                         "logits [batch, labels]")
    if label_names is None:
        return []
    if threshold is not None:
        return ["probabilities", "chosen", "label_names"]
    return ["probabilities", "label" if len(model.outputs[0].shape) == 2 else "tags"]
