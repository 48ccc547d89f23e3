"""``tf.data`` pipelines from a tokenized `Corpus` to model-ready batches.

MLM (`mlm_dataset`) yields dicts, classification (`classification_dataset`)
yields ``(features, label)``; every tensor has a fixed dtype and rank, so the
datasets work with ``tf.distribute`` strategies
(``strategy.experimental_distribute_dataset``) and ``model.fit``:

=====================  =======  ===========  ==========================================
key                    dtype    shape        content
=====================  =======  ===========  ==========================================
``token_ids``          int32    ``[B, L]``   ids, masked for MLM, ``[PAD]``-padded
``segment_ids``        int32    ``[B, L]``   zeros
``masked_positions``   int32    ``[B, P]``   MLM only: predicted positions (0 = pad)
``masked_ids``         int32    ``[B, P]``   MLM only: original ids there
``masked_weights``     float32  ``[B, P]``   MLM only: 1.0 real, 0.0 padding
label                  int32    ``[B]``      classification only
=====================  =======  ===========  ==========================================

``P = max_predictions`` is static. ``L`` is ``seq_len`` for packed MLM
batches; otherwise batches are grouped by length (buckets of 16, 32, 64, ...,
``seq_len`` tokens by default) so short documents are not padded to the
longest, and ``L`` is the bucket length. ``B`` is ``batch_size`` (the last
batch of a bucket may be smaller unless ``drop_remainder=True``).

``tf.data`` is TensorFlow's: on another Keras backend importing this module refuses in one line
(`bert4long.tensorflow_only.require_tensorflow`); give ``fit`` numpy arrays there.
"""
import math

import numpy as np

from bert4long.data.chunking import chunk_spans
from bert4long.data.packing import pack_documents
from bert4long.data.truncation import truncate
from bert4long.tensorflow_only import require_tensorflow

require_tensorflow("bert4long.data.pipeline builds tf.data pipelines (mlm_dataset, classification_dataset)",
                   "give model.fit numpy arrays (bert4long.data.pack_for, bert4long.data.document_rows)")

import tensorflow as tf  # noqa: E402 -- below the refusal, which speaks where TensorFlow is not installed

from bert4long.data.length_batches import bucket_lengths  # noqa: E402
from bert4long.data.masking import MLMMasker  # noqa: E402


def default_bucket_lengths(seq_len, smallest=16):
    """``[16, 32, 64, ..., seq_len]``: the padded lengths of the buckets (`bucket_lengths` without halfway steps).

    >>> default_bucket_lengths(100)
    [16, 32, 64, 100]
    """
    return bucket_lengths(seq_len, smallest=smallest, halfway=False, count=None)


def _batch(dataset, batch_size, seq_len, bucket_lengths, drop_remainder, pad_id, features):
    """Pad-and-batch by length buckets; ``features(element)`` is the dict of
    ``[L]`` tensors whose length decides the bucket."""
    lengths = sorted(bucket_lengths or default_bucket_lengths(seq_len))
    if lengths[-1] < seq_len:
        raise ValueError(f"the longest bucket ({lengths[-1]}) is shorter than seq_len={seq_len}")
    spec = dataset.element_spec

    def pad_value(tensor_spec, key=None):
        return tf.constant(pad_id if key == "token_ids" else 0, tensor_spec.dtype)

    if isinstance(spec, dict):
        padding_values = {k: pad_value(s, k) for k, s in spec.items()}
    else:
        padding_values = ({k: pad_value(s, k) for k, s in spec[0].items()}, pad_value(spec[1]))
    return dataset.bucket_by_sequence_length(
        lambda *element: tf.shape(features(*element)["token_ids"])[0],
        bucket_boundaries=[n + 1 for n in lengths],
        bucket_batch_sizes=[batch_size] * (len(lengths) + 1),
        padding_values=padding_values,
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )


def _ragged(sequences):
    lengths = [len(s) for s in sequences]
    flat = np.concatenate(sequences).astype(np.int32) if sequences else np.zeros(0, np.int32)
    return tf.RaggedTensor.from_row_lengths(flat, np.asarray(lengths, np.int64))


def _check_nonempty(corpus):
    if len(corpus) == 0:
        raise ValueError(f"the corpus has no documents (skipped: {corpus.skipped})")


def mlm_dataset(corpus, tokenizer, seq_len, batch_size, *, max_predictions=None, packing=True,
                overlap=0, whole_word=False, mask_rate=0.15, seed=0, shuffle_buffer=10_000,
                bucket_lengths=None, drop_remainder=False):
    """Masked-LM batches from ``corpus`` (see the module doc for the element spec).

    Args:
        corpus: a `Corpus` from `load_corpus`.
        tokenizer: the `Tokenizer` that made it (special ids, vocab size).
        seq_len: sequence length, specials included.
        batch_size: sequences per batch.
        max_predictions: ``P`` (default ``ceil(seq_len * mask_rate)``).
        packing: pack consecutive documents into full ``seq_len`` sequences
            (`pack_documents`); otherwise cut each document into windows of
            ``seq_len`` sharing ``overlap`` tokens, batched by length buckets.
        whole_word: mask whole words (`MLMMasker`).
        seed: masks and shuffling are reproducible for a seed and change at
            every pass over the dataset (dynamic masking).
        shuffle_buffer: 0 disables shuffling.
        bucket_lengths: padded lengths of the buckets (default 16, 32, 64, ..., seq_len).
        drop_remainder: drop incomplete batches (static batch dimension).
    """
    _check_nonempty(corpus)
    if seq_len < 3:
        raise ValueError(f"seq_len={seq_len} leaves no room beside [CLS] and [SEP]; use seq_len >= 3")
    max_predictions = max_predictions or math.ceil(seq_len * mask_rate)
    masker = MLMMasker.from_tokenizer(tokenizer, max_predictions, whole_word=whole_word,
                                      mask_rate=mask_rate)
    cls_id, sep_id, pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id or 0
    if packing:
        sequences = pack_documents(corpus.token_ids, seq_len, cls_id=cls_id, sep_id=sep_id,
                                   pad_id=pad_id)
        dataset = tf.data.Dataset.from_tensor_slices(sequences)
    else:
        windows = [
            np.concatenate([[cls_id], doc[start:end], [sep_id]])
            for doc in corpus.token_ids
            for start, end in chunk_spans(len(doc), seq_len - 2, overlap)
        ]
        dataset = tf.data.Dataset.from_tensor_slices(_ragged(windows))
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)

    def mask(token_ids, pair_seed):
        example = masker(token_ids, pair_seed)
        example["segment_ids"] = tf.zeros_like(example["token_ids"])
        return example

    dataset = tf.data.Dataset.zip(dataset, seeds).map(mask, num_parallel_calls=tf.data.AUTOTUNE)
    if packing:
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    else:
        dataset = _batch(dataset, batch_size, seq_len, bucket_lengths, drop_remainder, pad_id,
                         lambda example: example)
    return dataset.prefetch(tf.data.AUTOTUNE)


def label_ids(corpus, labels):
    """Map ``corpus.labels`` through ``labels`` (a list: index = id, or a dict
    ``{label: id}``); labels are compared as strings. Raises ``ValueError``
    naming the document's ``file:line`` for a missing or unknown label."""
    mapping = dict(labels) if isinstance(labels, dict) else {l: i for i, l in enumerate(labels)}
    mapping = {str(k): int(v) for k, v in mapping.items()}
    out = []
    for label, source in zip(corpus.labels, corpus.sources):
        if label is None:
            raise ValueError(f"{source}: document has no label; every document needs one")
        if label not in mapping:
            raise ValueError(f"{source}: unknown label {label!r}; known labels: {sorted(mapping)}")
        out.append(mapping[label])
    return np.asarray(out, np.int32)


def classification_dataset(corpus, tokenizer, maxlen, batch_size, labels, *, strategy="head",
                           head_len=128, shuffle_buffer=0, seed=0, bucket_lengths=None,
                           drop_remainder=False):
    """``({"token_ids", "segment_ids"}, label)`` batches, one sequence per document.

    Long documents are cut with `truncate` (``strategy`` ``"head"``, ``"tail"``
    or ``"head+tail"`` with ``head_len``); batches are grouped by length.
    ``labels``: see `label_ids`.
    """
    _check_nonempty(corpus)
    targets = label_ids(corpus, labels)
    sequences = [truncate(doc, maxlen, strategy, head_len, cls_id=tokenizer.cls_id,
                          sep_id=tokenizer.sep_id) for doc in corpus.token_ids]
    dataset = tf.data.Dataset.from_tensor_slices((_ragged(sequences), targets))
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.map(
        lambda ids, label: ({"token_ids": ids, "segment_ids": tf.zeros_like(ids)}, label)
    )
    dataset = _batch(dataset, batch_size, maxlen, bucket_lengths, drop_remainder,
                     tokenizer.pad_id or 0, lambda features, label: features)
    return dataset.prefetch(tf.data.AUTOTUNE)
