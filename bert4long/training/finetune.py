"""Fine-tuning heads for long inputs: document classification and token labelling.

* ``pooling='cls'``: the ``[CLS]`` state of one (long, hierarchical-position) sequence.
* ``pooling='chunks'``: a document given as ``[num_chunks, chunk_len]`` windows
  (`bert4long.data.chunk_documents`); every window is encoded, the ``[CLS]``
  states of the non-empty windows are averaged, then classified.
* `build_token_labeller`: a label per token (NER-style), padding ignored.

On a Longformer both give the first token global attention by default (``global_tokens``, `GlobalTokenMask`).
"""
import os
from collections.abc import Iterable, Sequence

import keras
import numpy as np
from keras import ops

from bert4long.checkpoints.source import Source, resolve_source
from bert4long.families import family
from bert4long.layers import TakeToken
from bert4long.models import build_transformer_model
from bert4long.models.checked import CheckedModel
from bert4long.ops.dropout import SeededDropout, name_seed
from bert4long.training.mlm import dtype_policy
from bert4long.training.optim import loss_scaled


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

    Call arguments: ``[vectors, chunk_token_ids]`` with ``chunk_token_ids`` ``[batch, chunks, length]``; a
    window is empty when all its ids are ``pad_token_id`` (0 in BERT vocabularies, 1 in RoBERTa's).

    Example:
    >>> import numpy as np
    >>> from bert4long.training.finetune import MeanOverChunks
    >>> vectors = np.array([[1.0], [3.0], [100.0]], "float32")        # 1 document, 3 windows
    >>> ids = np.array([[[2, 5], [2, 6], [0, 0]]], "int32")            # the last window is empty
    >>> MeanOverChunks()([vectors, ids]).numpy().tolist()
    [[2.0]]
    """

    def __init__(self, pad_token_id=0, **kwargs):
        super().__init__(**kwargs)
        self.pad_token_id = pad_token_id

    def get_config(self):
        return {**super().get_config(), "pad_token_id": self.pad_token_id}

    def call(self, inputs):
        vectors, chunk_ids = inputs
        shape = ops.shape(chunk_ids)
        vectors = ops.reshape(vectors, (shape[0], shape[1], vectors.shape[-1]))
        present = ops.any(ops.not_equal(chunk_ids, self.pad_token_id), axis=-1)
        present = ops.cast(present, vectors.dtype)[..., None]
        return ops.sum(vectors * present, axis=1) / ops.maximum(ops.sum(present, axis=1), 1.0)

    def compute_output_spec(self, inputs):
        vectors, chunk_ids = inputs
        return keras.KerasTensor((chunk_ids.shape[0], vectors.shape[-1]), dtype=vectors.dtype)


@keras.saving.register_keras_serializable(package="bert4long")
class GlobalTokenMask(keras.layers.Layer):
    """Longformer's int32 attention-mask input from token ids: 0 padding, 2 at the global ``positions``, 1 elsewhere.

    (Hugging Face's ``attention_mask * (global_attention_mask + 1)``; a padding position stays 0.)

    Example:
    >>> import numpy as np
    >>> from bert4long.training.finetune import GlobalTokenMask
    >>> GlobalTokenMask(pad_token_id=1, positions=[0])(np.array([[0, 7, 8, 1, 1]])).numpy().tolist()
    [[2, 1, 1, 0, 0]]
    """

    def __init__(self, pad_token_id=0, positions=(0,), **kwargs):
        super().__init__(**kwargs)
        self.pad_token_id = pad_token_id
        self.positions = [int(p) for p in positions]

    def get_config(self):
        return {**super().get_config(), "pad_token_id": self.pad_token_id, "positions": self.positions}

    def call(self, token_ids):
        real = ops.cast(ops.not_equal(token_ids, self.pad_token_id), "int32")
        index = ops.arange(ops.shape(token_ids)[1], dtype="int32")
        marked = ops.zeros_like(index, dtype="bool")
        for position in self.positions:
            marked = ops.logical_or(marked, ops.equal(index, position))
        return real * (1 + ops.cast(marked, "int32")[None, :])

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(token_ids.shape, dtype="int32")


def global_positions(model, global_tokens="auto"):
    """The positions given global attention: ``'auto'`` is ``[0]`` (the ``<s>``/``[CLS]`` token, as transformers'
    ``LongformerForSequenceClassification``) for a family with global tokens (Longformer) and none for others; a
    list names them; None or ``[]`` turns them off. ``model``: a ``model=`` name or `bert4long.families.Family`
    (None: a builder class, which has none); global tokens on a family without them is an error.

    >>> global_positions("longformer"), global_positions("bert"), global_positions("longformer", None)
    ([0], [], [])
    """
    declared = family(model) if isinstance(model, str) else model
    has_global = declared is not None and declared.global_tokens
    if isinstance(global_tokens, str):
        if global_tokens != "auto":
            raise ValueError(f"global_tokens must be 'auto', a list of positions or None, got {global_tokens!r}.")
        return [0] if has_global else []
    positions = [int(p) for p in global_tokens or ()]
    if positions and not has_global:
        name = declared.name if declared is not None else model
        raise ValueError(f"global_tokens={positions} needs a Longformer model (its attention-mask input marks "
                         f"global tokens); model={name!r} has none: leave global_tokens out.")
    if any(p < 0 for p in positions):
        raise ValueError(f"global_tokens are positions from 0 on, got {positions}.")
    return positions


def _encoder(config_path, checkpoint_path, global_tokens, **kwargs):
    """``(encoder, pad id, token inputs, call)``: ``call(inputs)`` gives the sequence output for the token inputs
    (token ids and, where the model reads them, segment ids), the global-token mask computed from the ids where
    `global_positions` gives positions (``call`` is None without them: use the encoder's own graph). The config is
    read, and the family decided, once (`bert4long.checkpoints.source.resolve_source`)."""
    source = config_path if isinstance(config_path, Source) else resolve_source(
        checkpoint_path, config_path, kwargs.pop("model", "bert"))
    positions = global_positions(source.built_family(), global_tokens)
    if positions:
        kwargs["attention_mask_input"] = True
    builder = build_transformer_model(source, return_keras_model=False, **kwargs)
    encoder = builder.model
    token_inputs = [x for x in encoder.inputs if x.name != "Input-Attention-Mask"]
    if not positions:
        return encoder, builder.pad_token_id, token_inputs, None
    mask = GlobalTokenMask(builder.pad_token_id, positions, name="Global-Attention-Mask")
    return encoder, builder.pad_token_id, token_inputs, lambda inputs: encoder([*inputs, mask(inputs[0])])


def build_classifier(
    config_path: str | os.PathLike | None,
    checkpoint_path: str | os.PathLike | None,
    num_labels: int,
    pooling: str = "cls",
    dropout_rate: float = 0.1,
    precision: str | None = None,
    global_tokens: str | Sequence[int] | None = "auto",
    **kwargs,
) -> CheckedModel:
    """A document classifier (softmax logits over ``num_labels``) on a pretrained encoder.

    ``pooling='cls'``: inputs ``[token_ids, segment_ids]`` ``[batch, length]``.
    ``pooling='chunks'``: inputs ``[token_ids, segment_ids]`` ``[batch, chunks, chunk_len]``.
    (Models without segment ids, such as ModernBERT: ``[token_ids]`` alone.)
    ``global_tokens`` (Longformer): positions with global attention, computed from the token ids inside the
    model (`GlobalTokenMask`, padding from the model's ``pad_token_id``); ``'auto'`` (default) is the first
    token for a Longformer and none otherwise, None turns it off (`global_positions`).

    Example:
    >>> from bert4long.training import build_classifier
    >>> model = build_classifier("bert_config.json", "bert_model.ckpt", num_labels=3,
    ...                          hierarchical_position=True)  # doctest: +SKIP
    >>> model = build_classifier(None, "longformer-base-4096/", num_labels=2)  # doctest: +SKIP
    """
    if pooling not in ("cls", "chunks"):
        raise ValueError(f"pooling must be 'cls' or 'chunks', got {pooling!r}.")
    with dtype_policy(precision):
        encoder, pad, token_inputs, call = _encoder(config_path, checkpoint_path, global_tokens, **kwargs)
        if pooling == "cls" and call is None:
            inputs = list(encoder.inputs)
            pooled = TakeToken(0, name="Classifier-CLS")(encoder.outputs[0])
        elif pooling == "cls":
            inputs = [keras.Input((None,), dtype="int32", name=x.name) for x in token_inputs]
            pooled = TakeToken(0, name="Classifier-CLS")(call(inputs))
        else:
            inputs = [keras.Input((None, None), dtype="int32", name=x.name) for x in token_inputs]
            folded = [FoldChunks(name=f"Fold-{i}")(x) for i, x in enumerate(inputs)]
            states = encoder(folded) if call is None else call(folded)
            vectors = TakeToken(0, name="Classifier-CLS")(states)
            pooled = MeanOverChunks(pad, name="Classifier-Pool")([vectors, inputs[0]])
        pooled = SeededDropout(dropout_rate, seed=name_seed("Classifier-Dropout"), name="Classifier-Dropout")(pooled)
        logits = keras.layers.Dense(num_labels, dtype="float32", name="Classifier-Logits")(pooled)
    return CheckedModel(inputs, logits, name=f"classifier_{pooling}")


def build_token_labeller(
    config_path: str | os.PathLike | None,
    checkpoint_path: str | os.PathLike | None,
    num_labels: int,
    dropout_rate: float = 0.1,
    precision: str | None = None,
    global_tokens: str | Sequence[int] | None = "auto",
    **kwargs,
) -> CheckedModel:
    """Per-token logits ``[batch, length, num_labels]``; train with the ``weights`` of
    `bert4long.data.tagging.encode_tagged` (each word's first piece counts, as the command's tagging does).

    Inputs and ``global_tokens`` as `build_classifier` (``'auto'``: a Longformer's first token is global).

    Example:
    >>> from bert4long.training import build_token_labeller
    >>> model = build_token_labeller("bert_config.json", "bert_model.ckpt", num_labels=9)  # doctest: +SKIP
    """
    with dtype_policy(precision):
        encoder, _, token_inputs, call = _encoder(config_path, checkpoint_path, global_tokens, **kwargs)
        if call is None:
            inputs, states = encoder.inputs, encoder.outputs[0]
        else:
            inputs = [keras.Input((None,), dtype="int32", name=x.name) for x in token_inputs]
            states = call(inputs)
        x = SeededDropout(dropout_rate, seed=name_seed("Labeller-Dropout"), name="Labeller-Dropout")(states)
        logits = keras.layers.Dense(num_labels, dtype="float32", name="Labeller-Logits")(x)
    return CheckedModel(inputs, logits, name="token_labeller")


def balanced_class_weights(label_ids: np.typing.ArrayLike, num_labels: int) -> np.ndarray:
    """scikit-learn's ``'balanced'`` weights, ``n_samples / (n_classes * count)``, over the classes present in
    ``label_ids``; a class absent from them (no example to weigh) gets 1.

    >>> balanced_class_weights([0, 0, 0, 1], 3).tolist()
    [0.6666666666666666, 2.0, 1.0]
    """
    counts = np.bincount(np.asarray(label_ids).ravel(), minlength=num_labels).astype("float64")
    present = counts > 0
    return np.where(present, counts.sum() / (present.sum() * np.maximum(counts, 1)), 1.0)


@keras.saving.register_keras_serializable(package="bert4long")
class ClassWeightedCrossEntropy(keras.losses.Loss):
    """Cross-entropy on logits, each example weighted by its gold class's weight: a batch's loss is
    ``sum(w[y] * loss) / sum(w[y])``, PyTorch's ``CrossEntropyLoss(weight=w)`` (the mean when every weight is 1).

    Example:
    >>> import numpy as np
    >>> from bert4long.training.finetune import ClassWeightedCrossEntropy
    >>> logits = np.log(np.array([[0.5, 0.5], [0.25, 0.75]], "float32"))
    >>> loss = ClassWeightedCrossEntropy([1.0, 3.0])(np.array([0, 1]), logits)
    >>> round(float(loss), 5), round(float(np.log(2) - 3 * np.log(0.75)) / 4, 5)   # (ln 2 + 3 ln 4/3) / 4
    (0.38905, 0.38905)
    """

    def __init__(self, class_weight, name="class_weighted_cross_entropy", **kwargs):
        super().__init__(name=name, reduction="sum", **kwargs)
        self.class_weight = [float(w) for w in class_weight]

    def call(self, y_true, y_pred):
        y_true = ops.cast(ops.reshape(y_true, (-1,)), "int32")
        losses = keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
        weights = ops.take(ops.convert_to_tensor(self.class_weight, dtype=losses.dtype), y_true)
        return losses * weights / ops.sum(weights)

    def get_config(self):
        return {"name": self.name, "class_weight": self.class_weight}


@keras.saving.register_keras_serializable(package="bert4long")
class MultilabelCategoricalCrossentropy(keras.losses.Loss):
    """bert4keras's ``multilabel_categorical_crossentropy`` on logits ``s`` and 0/1 targets:
    ``log(1 + sum_neg exp(s)) + log(1 + sum_pos exp(-s))``, which pushes every gold label's logit above 0 and every
    other below, so the decision is ``logit > 0`` (probability ``sigmoid(logit) > 0.5``).
    Reference: Su Jianlin, https://kexue.fm/archives/7359.

    Example:
    >>> import numpy as np
    >>> from bert4long.training.finetune import MultilabelCategoricalCrossentropy
    >>> loss = MultilabelCategoricalCrossentropy()(np.array([[1, 0, 0]]), np.array([[2.0, -1.0, 0.5]], "float32"))
    >>> round(float(loss), 5), round(float(np.log(1 + np.exp(-1) + np.exp(0.5)) + np.log(1 + np.exp(-2))), 5)
    (1.23106, 1.23106)
    """

    def __init__(self, name="multilabel_categorical_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, y_pred.dtype)
        signed = (1 - 2 * y_true) * y_pred   # -s on gold labels, s on the others
        zeros = ops.zeros_like(signed[..., :1])
        negatives = ops.concatenate([signed - y_true * 1e12, zeros], axis=-1)
        positives = ops.concatenate([signed - (1 - y_true) * 1e12, zeros], axis=-1)
        return ops.logsumexp(negatives, axis=-1) + ops.logsumexp(positives, axis=-1)


MULTILABEL_LOSSES = ("bce", "mcc")


def compile_finetune(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, jit_compile: bool | str = "auto",
    class_weight: Sequence[float] | None = None, multilabel_loss: str | None = None,
) -> keras.Model:
    """Cross-entropy on logits with accuracy; sample weights (token labelling) count as a mean. ``class_weight``
    (a classifier's, one weight per label): `ClassWeightedCrossEntropy`, which weighs the loss only (accuracy
    counts every example once). ``multilabel_loss`` (0/1 targets ``[batch, labels]``): ``'bce'``, binary
    cross-entropy on each label's logit, or ``'mcc'``, `MultilabelCategoricalCrossentropy`; accuracy is then the
    share of (example, label) decisions right at ``logit > 0``."""
    if multilabel_loss is None:
        loss = (keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
                if class_weight is None else ClassWeightedCrossEntropy(class_weight))
        accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
    elif multilabel_loss in MULTILABEL_LOSSES and class_weight is None:
        loss = (keras.losses.BinaryCrossentropy(from_logits=True) if multilabel_loss == "bce"
                else MultilabelCategoricalCrossentropy())
        accuracy = keras.metrics.BinaryAccuracy(threshold=0.0, name="accuracy")
    else:
        raise ValueError(f"multilabel_loss must be one of {MULTILABEL_LOSSES} (got {multilabel_loss!r}), without "
                         "class_weight (a multi-label loss is not weighted by label)")
    model.compile(optimizer=loss_scaled(optimizer, model), loss=loss, weighted_metrics=[accuracy],
                  jit_compile=jit_compile)
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
