"""Serve whole documents: raw text → WordPiece ids → long-document strategy → model → one row per document.

`raw_text_serving` wraps a function of int32 ``token_ids``/``segment_ids``
(the SavedModel's token-id signature) into a function of a string tensor
``[batch]`` (a scalar string is one document, served as a batch of one; a
higher rank is an ``InvalidArgumentError`` saying so), all in TensorFlow ops
(`bert4long.tokenizers.graph_wordpiece`),
so that `bert4long.export.export_saved_model` can write it as a signature.
The strategy follows the Python pipeline exactly:

- ``"head"`` / ``"tail"`` / ``"head+tail"``: `bert4long.data.truncate`;
- ``"chunks"``: `bert4long.data.chunk_documents` windows with ``overlap``,
  per-document outputs (rank 2: pooled, logits, probabilities) pooled by
  `bert4long.data.pool_chunks` (``"mean"``, ``"max"``, ``"first"``);
  per-token outputs (rank 3) stay per window, with ``chunk_document``.
  A document with more than ``max_chunks`` windows is read in its first
  ``max_chunks``; ``num_chunks`` says how many it has.

Beside the model's outputs the function returns ``token_ids`` (the int32 rows
fed to the model, padded with 0), ``token_starts``/``token_ends`` (code-point
offsets into the document of each token, -1 for ``[CLS]``, ``[SEP]`` and
padding) and ``num_tokens`` (the document's content tokens before any cut).

>>> import tensorflow as tf
>>> from bert4long.text_serving import raw_text_serving
>>> from bert4long.tokenizers import Tokenizer
>>> tok = Tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "b": 5})
>>> def serve_ids(token_ids, segment_ids, attention_mask):  # a "model": tokens per row
...     return {"tokens": tf.cast(tf.math.count_nonzero(token_ids, axis=1, keepdims=True), tf.float32)}
>>> serve, _ = raw_text_serving(serve_ids, tok, {"tokens": 2}, seq_len=4, strategy="chunks", pool="mean")
>>> out = serve(tf.constant(["a b a b a", ""]))
>>> out["token_ids"].numpy().tolist()
[[2, 4, 5, 3], [2, 4, 5, 3], [2, 4, 3, 0], [2, 3, 0, 0]]
>>> out["num_chunks"].numpy().tolist(), [round(float(x), 2) for x in out["tokens"].numpy()[:, 0]]
([3, 1], [3.67, 2.0])
>>> serve(tf.constant("a b"))["token_ids"].numpy().tolist()  # one document: a batch of one
[[2, 4, 5, 3]]

Serving raw text runs where Keras runs on TensorFlow; on another backend importing this module refuses in one line
(`bert4long.tensorflow_only.require_tensorflow`).
"""
from bert4long.data.pooling import MODES, pool_chunks_ops
from bert4long.data.truncation import RAW_TEXT_STRATEGIES
from bert4long.tensorflow_only import require_tensorflow

require_tensorflow("bert4long.text_serving tokenizes raw text inside TensorFlow graphs",
                   "tokenize with bert4long.tokenizers.load_tokenizer and call model.predict on the ids")

import tensorflow as tf  # noqa: E402 -- below the refusal, which speaks where TensorFlow is not installed

from bert4long.tokenizers.graph_wordpiece import GraphWordPiece  # noqa: E402


def check_raw_text_options(seq_len, strategy, head_len, overlap, pool, max_chunks):
    """Raise ValueError naming the fix for options `raw_text_serving` cannot honour."""
    if strategy not in RAW_TEXT_STRATEGIES:
        raise ValueError(f"strategy must be one of {RAW_TEXT_STRATEGIES}, got {strategy!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 3:
        raise ValueError(f"seq_len={seq_len!r} leaves no room beside [CLS] and [SEP]; use an int >= 3")
    if strategy == "head+tail" and not 0 <= head_len <= seq_len - 2:
        raise ValueError(f"head_len={head_len} must lie in [0, seq_len - 2 = {seq_len - 2}]")
    if strategy == "chunks":
        if not 0 <= overlap < seq_len - 2:
            raise ValueError(f"chunk overlap={overlap} must lie in [0, seq_len - 2 = {seq_len - 2})")
        if pool not in MODES:
            raise ValueError(f"pool must be one of {MODES}, got {pool!r}")
        if isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1:
            raise ValueError(f"max_chunks must be a positive int, got {max_chunks!r}")


def _wrap(rows, first, last, width):
    """``first + row + last`` padded with -1 to ``width`` columns (``[rows, width]`` int32)."""
    count = rows.nrows()

    def column(value):
        return tf.fill(tf.stack([count, 1]), value)

    return tf.concat([column(first), rows, column(last)], axis=1).to_tensor(
        default_value=-1, shape=tf.stack([count, tf.cast(width, tf.int64)]))


def raw_text_serving(serve_ids, tokenizer, output_ranks, seq_len, strategy="head", head_len=128, overlap=0,
                     pool="mean", max_chunks=16, attention_mask_input=False):
    """A function of a string tensor ``[batch]`` of documents (or a scalar: one) returning a dict of outputs.

    Args:
        serve_ids: ``serve_ids(token_ids, segment_ids, attention_mask)`` → dict of float32 outputs
            (``attention_mask`` None unless the model takes one).
        tokenizer: a `bert4long.tokenizers.Tokenizer` (WordPiece); its rules are compiled
            into `GraphWordPiece` tables.
        output_ranks: ``{output name: rank}`` of ``serve_ids``'s outputs.
        seq_len: tokens per model row, ``[CLS]`` and ``[SEP]`` included.
        strategy, head_len, overlap, pool, max_chunks: see the module docstring.
        attention_mask_input: pass ``serve_ids`` an attention mask (1 for tokens, 0 for padding).

    Returns:
        ``(function, graph_tokenizer)``: track ``graph_tokenizer.tables`` in the SavedModel.
    """
    check_raw_text_options(seq_len, strategy, head_len, overlap, pool, max_chunks)
    graph_tokenizer = GraphWordPiece(tokenizer)
    cls_id, sep_id = tokenizer.cls_id, tokenizer.sep_id
    budget = seq_len - 2
    step = budget - overlap

    def serve_text(texts):
        with tf.control_dependencies([tf.debugging.assert_less_equal(tf.rank(texts), 1, message=(
                "texts must be a string tensor [batch] of documents (or one document as a scalar string, served "
                "as a batch of one): flatten the request or send its documents one batch at a time"))]):
            texts = tf.reshape(texts, [-1])  # a scalar is a batch of one
        ids, starts, ends = graph_tokenizer(texts)
        batch = tf.cast(ids.nrows(), tf.int32)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        row_starts = tf.cast(ids.row_splits[:-1], tf.int32)
        documents = tf.range(batch)
        outputs = {"num_tokens": lengths}
        if strategy == "chunks":
            needed = 1 + tf.maximum(0, (lengths - budget + step - 1) // step)
            used = tf.minimum(needed, max_chunks)
            owners = tf.repeat(documents, used)
            begin = tf.ragged.range(used).flat_values * step
            counts = tf.maximum(0, tf.minimum(budget, tf.gather(lengths, owners) - begin))
            outputs.update(num_chunks=needed, chunk_document=owners)
        else:
            owners, counts = documents, tf.minimum(lengths, budget)
            begin = tf.zeros_like(counts)
            if strategy == "tail":
                begin = lengths - counts
        within = tf.ragged.range(counts)
        index = tf.gather(row_starts, owners)[:, None] + begin[:, None] + within
        if strategy == "head+tail":  # the first head_len, then the last budget - head_len
            jump = tf.repeat(tf.maximum(tf.gather(lengths, owners) - budget, 0), counts)
            index = index.with_flat_values(
                index.flat_values + tf.where(within.flat_values >= min(head_len, budget), jump, 0))
        content = [tf.gather(t.flat_values, index) for t in (ids, starts, ends)]
        width = tf.reduce_max(tf.concat([counts, [0]], 0)) + 2  # [0]: an empty batch has rows of 2
        token_ids = tf.maximum(_wrap(content[0], cls_id, sep_id, width), 0)
        outputs["token_starts"] = _wrap(content[1], -1, -1, width)
        outputs["token_ends"] = _wrap(content[2], -1, -1, width)
        mask = None
        if attention_mask_input:  # [CLS], the content and [SEP] local (1), padding 0
            mask = tf.cast(tf.range(width)[None, :] < counts[:, None] + 2, tf.int32)
        served = serve_ids(token_ids, tf.zeros_like(token_ids), mask)
        outputs["token_ids"] = token_ids
        for name, value in served.items():
            if strategy == "chunks" and output_ranks[name] == 2:
                value = pool_chunks_ops(value, owners, batch, pool)
            outputs[name] = value
        return outputs

    return serve_text, graph_tokenizer

