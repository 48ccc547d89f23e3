"""Masked-LM continued pretraining: the model, its loss/accuracy, and deterministic batches.

The model is bert4long's BERT with the *gathered* MLM head (logits only at the
``P`` masked positions). Keras's ``compile``/``fit`` do the rest:
`SparseCategoricalCrossentropy` with ``reduction='mean_with_sample_weight'`` and
`SparseCategoricalAccuracy`, both weighted by ``masked_weights``, so the loss and
the accuracy count masked positions only (padding predictions have weight 0).

Batches are a pure function of the step: batch ``s`` holds global positions
``i = s*B .. s*B+B-1``; position ``i`` reads the packed sequence that the
per-epoch shuffle of `bert4long.data.order` puts there (a new order every pass
over the corpus, a pure function of ``(seed, epoch)``), masked with the
stateless seed ``(seed, i)``. So a resumed run sees exactly the batches the
uninterrupted run would have seen.

Building and compiling the model (`build_mlm_model`, `compile_mlm`, `dtype_policy`) runs on any Keras
backend and imports no TensorFlow; the batches (`mlm_batches`, `evaluate_mlm`, `masker_for`) are a `tf.data`
pipeline and import TensorFlow when called.
"""
import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from bert4long.checkpoints.huggingface import is_huggingface_folder
from bert4long.checkpoints.source import Source
from bert4long.models import Transformer, build_transformer_model
from bert4long.precision import default_precision
from bert4long.training.optim import loss_scaled

if TYPE_CHECKING:
    import tensorflow as tf

    from bert4long.data.masking import MLMMasker

HEAD_LAYERS = ("MLM-Dense", "MLM-Norm", "MLM-Bias")


@contextlib.contextmanager
def dtype_policy(policy: str | None) -> Iterator[None]:
    """Build layers under ``policy`` (None, 'float32', 'mixed_bfloat16', 'mixed_float16', 'auto')."""
    if policy == "auto":
        policy = default_precision()
    previous = keras.config.dtype_policy()
    if policy:
        keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_mlm_model(
    config_path: str | os.PathLike | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    precision: str | None = None,
    partial_load: bool = False,
    **kwargs,
) -> tuple[keras.Model, Transformer, bool]:
    """A BERT with the gathered MLM head (logits), loaded from a Google checkpoint or HF folder.

    A checkpoint without MLM head (e.g. a Hugging Face sentence encoder) loads the
    encoder and starts the tied head as BERT initialises it (dense: truncated
    normal, LayerNorm: 1/0, output bias: 0). Returns ``(model, builder,
    has_pretrained_head)``. ``config_path`` may be a `bert4long.checkpoints.source.Source` (``checkpoint_path`` None): its
    open reader is loaded.

    Example:
    >>> from bert4long.training import build_mlm_model
    >>> model, builder, _ = build_mlm_model("bert_config.json", "bert_model.ckpt",
    ...                                     hierarchical_position=True)  # doctest: +SKIP
    """
    source = config_path if isinstance(config_path, Source) else None
    if source is not None:   # resolved once: its open reader is the checkpoint
        config_path, checkpoint_path = source.without_reader(), source.reader
    elif config_path is None and is_huggingface_folder(checkpoint_path):
        config_path = os.path.join(checkpoint_path, "config.json")
    with dtype_policy(precision):
        builder = build_transformer_model(
            config_path, None, with_mlm="linear", gathered_mlm=True, return_keras_model=False, **kwargs
        )
        has_head = True
        if checkpoint_path is not None:
            reader = builder.open_checkpoint(checkpoint_path)
            mapping = builder.variable_mapping()
            head = {target if isinstance(target, str) else target[0]   # (Google: cls/predictions/...; lm_head.*)
                    for layer in HEAD_LAYERS for target in mapping.get(layer, {}).values()}
            has_head = all(name in reader for name in head)
            # without a head in the file: the encoder's weights loaded, the head's left as initialized (one load)
            builder.load_weights_from_checkpoint(reader, partial_load=partial_load,
                                                 without=() if has_head else HEAD_LAYERS)
    return builder.model, builder, has_head


def mlm_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")


def compile_mlm(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    jit_compile: bool | str = "auto",
    steps_per_execution: int = 1,
) -> keras.Model:
    """Compile ``model`` for MLM: masked-position loss and accuracy (``mlm_accuracy``)."""
    model.compile(
        optimizer=loss_scaled(optimizer, model),
        loss=mlm_loss(),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="mlm_accuracy")],
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    return model


def takes_segment_ids(model: keras.Model) -> bool:
    """Whether ``model`` has a segment-id input (ModernBERT has none: token ids and masked positions only)."""
    return any(x.name == "Input-Segment" for x in model.inputs)


def to_model_inputs(
    batch: "dict[str, tf.Tensor]", segment_ids: bool = True
) -> "tuple[tuple[tf.Tensor, ...], tf.Tensor, tf.Tensor]":
    """``{token_ids, segment_ids, masked_positions, masked_ids, masked_weights}`` -> ``(x, y, w)``; ``x`` leaves
    the segment ids out for a model without them (``segment_ids=False``). TensorFlow (a `tf.data` map)."""
    import tensorflow as tf

    segments = (batch.get("segment_ids", tf.zeros_like(batch["token_ids"])),) if segment_ids else ()
    x = (batch["token_ids"], *segments, batch["masked_positions"])
    return x, batch["masked_ids"], batch["masked_weights"]


def mlm_batches(
    sequences: np.typing.ArrayLike,
    masker: "MLMMasker",
    batch_size: int,
    seed: int = 0,
    start_step: int = 0,
    shuffle: bool = True,
    segment_ids: bool = True,
) -> "tf.data.Dataset":
    """Endless deterministic MLM batches from packed ``sequences`` (int32 ``[N, L]``), from ``start_step`` on.

    ``shuffle``: every epoch in a new order (`bert4long.data.order`); False reads
    the sequences in their order (evaluation). ``segment_ids=False`` for a model
    without a segment input (`takes_segment_ids`).

    Example:
    >>> import numpy as np
    >>> from bert4long.data.masking import MLMMasker
    >>> from bert4long.training import mlm_batches
    >>> masker = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=2)
    >>> data = mlm_batches(np.full((3, 8), 9, "int32"), masker, batch_size=2)
    >>> [t.shape.as_list() for t in next(iter(data))[0]]
    [[2, 8], [2, 8], [2, 2]]
    """
    import tensorflow as tf

    from bert4long.data.order import example_order

    sequences = np.asarray(sequences, dtype="int32")
    if sequences.ndim != 2 or len(sequences) == 0:
        raise ValueError(f"Need a non-empty [num_sequences, length] array of token ids, got shape {sequences.shape}.")
    table = tf.constant(sequences)
    start = int(start_step) * batch_size

    def example(index, row):
        masked = masker(tf.gather(table, row), seed=tf.stack([tf.constant(seed, tf.int64), index]))
        masked["segment_ids"] = tf.zeros_like(masked["token_ids"])
        return masked

    positions = tf.data.Dataset.range(start, np.iinfo(np.int64).max)
    rows = example_order(len(sequences), seed, start, shuffle=shuffle)
    dataset = tf.data.Dataset.zip(positions, rows)
    dataset = dataset.map(example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.map(lambda batch: to_model_inputs(batch, segment_ids)).prefetch(tf.data.AUTOTUNE)


def evaluate_mlm(
    model: keras.Model,
    sequences: np.typing.ArrayLike,
    masker: "MLMMasker",
    batch_size: int,
    steps: int | None = None,
    seed: int = 12345,
) -> dict[str, float]:
    """MLM loss and accuracy (masked positions only) on a fixed masking of ``sequences``.

    Returns ``{'loss': float, 'mlm_accuracy': float, 'predictions': int}``. TensorFlow (`mlm_batches`).
    """
    import tensorflow as tf

    sequences = np.asarray(sequences, dtype="int32")
    steps = steps or max(1, len(sequences) // batch_size)
    loss_fn = mlm_loss()
    total_loss = total_correct = total_weight = 0.0
    predict = tf.function(lambda x: model(x, training=False), jit_compile=False, reduce_retracing=True)
    batches = mlm_batches(sequences, masker, batch_size, seed=seed, shuffle=False, segment_ids=takes_segment_ids(model))
    for x, y, w in batches.take(steps):
        logits = tf.cast(predict(x), tf.float32)
        weight = float(tf.reduce_sum(w))
        total_loss += float(loss_fn(y, logits, sample_weight=w)) * weight
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32)
        total_correct += float(tf.reduce_sum(correct * w))
        total_weight += weight
    total_weight = max(total_weight, 1e-9)
    return {"loss": total_loss / total_weight, "mlm_accuracy": total_correct / total_weight,
            "predictions": int(total_weight)}


def masker_for(tokenizer: Any, seq_len: int, mask_rate: float = 0.15) -> "MLMMasker":
    """An 80/10/10 masker predicting up to ``ceil(mask_rate * seq_len)`` tokens per sequence (a `tf.data` map)."""
    from bert4long.data.masking import MLMMasker

    return MLMMasker.from_tokenizer(tokenizer, max_predictions=max(1, int(np.ceil(mask_rate * seq_len))),
                                    mask_rate=mask_rate)
