"""Fine-tuning heads for long inputs: document classification and token labelling.

* ``pooling='cls'``: the ``[CLS]`` state of one (long, hierarchical-position) sequence.
* ``pooling='chunks'``: a document given as ``[num_chunks, chunk_len]`` windows
  (`bert4long.data.chunk_documents`); every window is encoded, the ``[CLS]``
  states of the non-empty windows are averaged, then classified.
* `build_token_labeller`: a label per token (NER-style), padding ignored.
"""
import os
from collections.abc import Iterable, Sequence

import keras
import numpy as np
from keras import ops

from bert4long.checked_model import CheckedModel
from bert4long.layers import TakeToken
from bert4long.models import build_transformer_model
from bert4long.training.mlm import dtype_policy


@keras.saving.register_keras_serializable(package="bert4long")
class FoldChunks(keras.layers.Layer):
    """``[batch, chunks, length]`` -> ``[batch * chunks, length]`` (one window per row).

    Example:
    >>> import numpy as np
    >>> from bert4long.training.finetune import FoldChunks
    >>> tuple(FoldChunks()(np.zeros((2, 3, 5), "int32")).shape)
    (6, 5)
    """

    def call(self, inputs):
        return ops.reshape(inputs, (-1, ops.shape(inputs)[-1]))

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((None, inputs.shape[-1]), dtype=inputs.dtype)


@keras.saving.register_keras_serializable(package="bert4long")
class MeanOverChunks(keras.layers.Layer):
    """Average ``[batch * chunks, dim]`` window vectors per document, skipping all-padding windows.

    Call arguments: ``[vectors, chunk_token_ids]`` with ``chunk_token_ids`` ``[batch, chunks, length]``.

    Example:
    >>> import numpy as np
    >>> from bert4long.training.finetune import MeanOverChunks
    >>> vectors = np.array([[1.0], [3.0], [100.0]], "float32")        # 1 document, 3 windows
    >>> ids = np.array([[[2, 5], [2, 6], [0, 0]]], "int32")            # the last window is empty
    >>> MeanOverChunks()([vectors, ids]).numpy().tolist()
    [[2.0]]
    """

    def call(self, inputs):
        vectors, chunk_ids = inputs
        shape = ops.shape(chunk_ids)
        vectors = ops.reshape(vectors, (shape[0], shape[1], vectors.shape[-1]))
        present = ops.cast(ops.any(ops.not_equal(chunk_ids, 0), axis=-1), vectors.dtype)[..., None]
        return ops.sum(vectors * present, axis=1) / ops.maximum(ops.sum(present, axis=1), 1.0)

    def compute_output_spec(self, inputs):
        vectors, chunk_ids = inputs
        return keras.KerasTensor((chunk_ids.shape[0], vectors.shape[-1]), dtype=vectors.dtype)


def build_classifier(
    config_path: str | os.PathLike | None,
    checkpoint_path: str | os.PathLike | None,
    num_labels: int,
    pooling: str = "cls",
    dropout_rate: float = 0.1,
    precision: str | None = None,
    **kwargs,
) -> CheckedModel:
    """A document classifier (softmax logits over ``num_labels``) on a pretrained encoder.

    ``pooling='cls'``: inputs ``[token_ids, segment_ids]`` ``[batch, length]``.
    ``pooling='chunks'``: inputs ``[token_ids, segment_ids]`` ``[batch, chunks, chunk_len]``.

    Example:
    >>> from bert4long.training import build_classifier
    >>> model = build_classifier("bert_config.json", "bert_model.ckpt", num_labels=3,
    ...                          hierarchical_position=True)  # doctest: +SKIP
    """
    if pooling not in ("cls", "chunks"):
        raise ValueError(f"pooling must be 'cls' or 'chunks', got {pooling!r}.")
    with dtype_policy(precision):
        encoder = build_transformer_model(config_path, checkpoint_path, **kwargs)
        if pooling == "cls":
            inputs = list(encoder.inputs)
            pooled = TakeToken(0, name="Classifier-CLS")(encoder.outputs[0])
        else:
            inputs = [keras.Input((None, None), dtype="int32", name=n) for n in ("Input-Token", "Input-Segment")]
            folded = [FoldChunks(name=f"Fold-{i}")(x) for i, x in enumerate(inputs)]
            states = encoder(folded)
            vectors = TakeToken(0, name="Classifier-CLS")(states)
            pooled = MeanOverChunks(name="Classifier-Pool")([vectors, inputs[0]])
        pooled = keras.layers.Dropout(dropout_rate, name="Classifier-Dropout")(pooled)
        logits = keras.layers.Dense(num_labels, dtype="float32", name="Classifier-Logits")(pooled)
    return CheckedModel(inputs, logits, name=f"classifier_{pooling}")


def build_token_labeller(
    config_path: str | os.PathLike | None,
    checkpoint_path: str | os.PathLike | None,
    num_labels: int,
    dropout_rate: float = 0.1,
    precision: str | None = None,
    **kwargs,
) -> CheckedModel:
    """Per-token logits ``[batch, length, num_labels]`` (train with `token_label_weights`).

    Example:
    >>> from bert4long.training import build_token_labeller
    >>> model = build_token_labeller("bert_config.json", "bert_model.ckpt", num_labels=9)  # doctest: +SKIP
    """
    with dtype_policy(precision):
        encoder = build_transformer_model(config_path, checkpoint_path, **kwargs)
        x = keras.layers.Dropout(dropout_rate, name="Labeller-Dropout")(encoder.outputs[0])
        logits = keras.layers.Dense(num_labels, dtype="float32", name="Labeller-Logits")(x)
    return CheckedModel(encoder.inputs, logits, name="token_labeller")


def token_label_weights(token_ids: np.typing.ArrayLike, special_ids: Sequence[int] = (0, 2, 3)) -> np.ndarray:
    """float32 weights: 1 on real tokens, 0 on padding, ``[CLS]`` and ``[SEP]``."""
    return (~np.isin(np.asarray(token_ids), special_ids)).astype("float32")


def compile_finetune(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, jit_compile: bool | str = "auto"
) -> keras.Model:
    """Cross-entropy on logits with accuracy; sample weights (token labelling) count as a mean."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


def encode_labels(labels: Iterable, label_names: Sequence) -> np.ndarray:
    """Map label strings to ids, naming every unknown label.

    Example:
    >>> from bert4long.training import encode_labels
    >>> encode_labels(["b", "a"], ["a", "b"]).tolist()
    [1, 0]
    """
    index = {name: i for i, name in enumerate(label_names)}
    unknown = sorted({str(label) for label in labels if label not in index})
    if unknown:
        raise ValueError(
            f"Unknown label(s) {unknown[:10]}: the label list is {list(label_names)}. "
            "Add them to the labels file (one label per line) or fix the data."
        )
    return np.array([index[label] for label in labels], dtype="int32")
