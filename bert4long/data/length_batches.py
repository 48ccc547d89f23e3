"""Batches by length: each batch is padded to the bucket length that holds its longest row, not to ``seq_len``, so
the cost follows the real tokens, and a few bucket lengths (`bucket_lengths`, then those the training rows need:
`fitted_buckets`) keep the compiled shapes few.

Rows are token ids padded to ``seq_len`` (``[N, seq_len]``, or ``[N, windows, seq_len]`` for chunk pooling);
`padded_shapes` gives each row the shape it needs beyond the batch axis: its windows in use (chunk pooling) and
its bucket length. A batch is cut to the largest of its rows' shapes (`cut`).

* Training (`training_batches`): every epoch, the examples in that epoch's shuffled order (`bert4long.data.order`)
  are grouped by shape, the shuffled order kept inside a group, cut into batches of ``batch_size``, and the
  batches are shuffled (`epoch_batches`): different batches every epoch, a pure function of (seed, epoch), so a
  resumed run reads what the uninterrupted one would have. The ``count % batch_size`` examples left over are the
  last of the epoch's order: other ones every epoch. The batch with the most tokens comes first: a run meets its
  memory peak at its first step (a batch too large fails at once), and XLA's buffers for the later, smaller
  shapes reuse that memory (MiniLM on CPU, batch 2, shapes 512 to 1,536 smallest first: 11.3 GB at the peak;
  largest first: 7.0 GB).
* Inference (`sorted_batches`): longest first (`predict`: within windows of `SORT_WINDOW` documents); the caller
  puts the results back in input order.

>>> import numpy as np
>>> from bert4long.data.length_batches import bucket_lengths, cut, padded_shapes, sorted_batches
>>> bucket_lengths(1536)
[128, 192, 256, 384, 512, 768, 1024, 1536]
>>> rows = np.array([[2, 5, 3, 0, 0, 0, 0, 0], [2, 5, 6, 7, 8, 3, 0, 0]], "int32")   # 3 and 6 real tokens
>>> shapes = padded_shapes(rows, pad_id=0, buckets=bucket_lengths(8))
>>> bucket_lengths(8), shapes[:, 0].tolist()
([2, 3, 4, 6, 8], [3, 6])
>>> [index.tolist() for index in sorted_batches(shapes, batch_size=1)]
[[1], [0]]
>>> cut(rows[[1]], shapes[[1]]).tolist()
[[2, 5, 6, 7, 8, 3]]
"""
import numpy as np
import tensorflow as tf

from bert4long.attention import length_rule
from bert4long.data.order import INT64_MAX, permutation_op

BUCKETS = 8   # bucket lengths at most: each one the model first meets compiles once (XLA)
SORT_WINDOW = 1024   # documents `predict` sorts together (it holds their results until the window is written)
EXTRA_SHARE = 0.05   # padding `fitted_buckets` may add (share of the tokens at the longest bucket) to drop shapes


def bucket_lengths(seq_len, multiple=1, fixed=False, count=BUCKETS, smallest=2, halfway=True):
    """The padded lengths a batch may take: ``smallest`` and its doublings below ``seq_len`` (with the halfway steps
    when ``halfway``: 2, 3, 4, 6, 8, 12, ..., at most a third of padding), each rounded up to a ``multiple``, and
    ``seq_len``; the ``count`` largest of them (None: all); only ``[seq_len]`` when ``fixed`` (a model whose outputs
    change with padding: `buckets_for`). The one rule of bucket lengths: `bert4long.data.pipeline`'s default
    (`default_bucket_lengths`) is ``smallest=16, halfway=False, count=None``.

    >>> bucket_lengths(1536, multiple=256), bucket_lengths(512, fixed=True)
    ([256, 512, 768, 1024, 1536], [512])
    >>> bucket_lengths(100, smallest=16, halfway=False, count=None)
    [16, 32, 64, 100]
    """
    if fixed:
        return [seq_len]
    ladder, step = set(), smallest
    while step < seq_len:
        ladder |= {step, step * 3 // 2} if halfway else {step}
        step *= 2
    lengths = sorted({min(-(-n // multiple) * multiple, seq_len) for n in ladder if n < seq_len} | {seq_len})
    return lengths if count is None else lengths[-count:]


def buckets_for(model, seq_len):
    """`bucket_lengths` that suit ``model``'s attention kernels (their `bert4long.attention.length_rule`)."""
    multiple, fixed = length_rule(model)
    return bucket_lengths(seq_len, multiple, fixed)


def _real_shapes(rows, pad_id):
    """int64 ``[N, rows.ndim - 1]``: each row's windows up to its last one in use (chunk pooling), then its length up
    to its last real token."""
    rows = np.asarray(rows)
    real = rows != pad_id
    shape = []
    for axis in range(1, rows.ndim):
        present = real.any(axis=tuple(a for a in range(1, rows.ndim) if a != axis))
        shape.append(np.where(present.any(1), present.shape[1] - present[:, ::-1].argmax(1), 1))
    return np.stack(shape, 1).astype("int64")


def padded_shapes(rows, pad_id, buckets):
    """int64 ``[N, rows.ndim - 1]``: each row's shape after the batch axis once padded: the windows up to its last
    one in use (chunk pooling), then the bucket length that holds its last real token."""
    shape = _real_shapes(rows, pad_id)
    buckets = np.asarray(sorted(buckets))
    if shape[:, -1].max(initial=0) > buckets[-1]:
        raise ValueError(f"a row of {shape[:, -1].max()} tokens is longer than the longest bucket ({buckets[-1]})")
    shape[:, -1] = buckets[np.searchsorted(buckets, shape[:, -1])]
    return shape


def fitted_buckets(rows, pad_id, buckets, extra_share=EXTRA_SHARE):
    """The ``buckets`` worth a compiled shape for ``rows``: the bucket whose rows cost the fewest tokens more when
    padded to the next bucket goes, again and again, while all that extra padding stays within ``extra_share`` of
    the tokens of every row padded to the longest bucket (which always stays). Each shape XLA meets compiles once;
    at 512 tokens on the convention speeches 8 buckets saved 9% of the tokens and took 8 compiles for each
    training and validation step; 2 (384, 512) save 5%.

    >>> rows = np.zeros((100, 8), "int32")
    >>> rows[:, :7] = 1; rows[:3, 2:] = 0   # 97 rows of 7 tokens, 3 of 2
    >>> fitted_buckets(rows, 0, [2, 3, 4, 6, 8]), fitted_buckets(rows, 0, [2, 3, 4, 6, 8], extra_share=0.01)
    ([8], [2, 8])
    """
    shapes = _real_shapes(rows, pad_id)
    windows, lengths = np.prod(shapes[:, :-1], axis=1), shapes[:, -1]
    kept = sorted(buckets)
    budget = extra_share * len(rows) * np.prod(np.shape(rows)[1:-1]) * kept[-1]

    def tokens(lengths_kept):
        table = np.asarray(lengths_kept)
        return int((windows * table[np.searchsorted(table, np.minimum(lengths, table[-1]))]).sum())

    start = tokens(kept)
    while len(kept) > 1:
        cost, dropped = min((tokens([n for n in kept if n != b]), b) for b in kept[:-1])
        if cost - start > budget:
            break
        kept.remove(dropped)
    return kept


def cut(batch, shapes):
    """``batch`` (rows gathered from an array shaped like the ids) cut to the largest of its rows' ``shapes``."""
    return batch[(slice(None), *(slice(0, int(n)) for n in np.max(shapes, 0)))]


def _groups(shapes):
    """int64 ``[N]`` each: the rank of each row's padded shape (rows of one shape form one group), and its tokens."""
    shapes = np.asarray(shapes)
    groups = np.unique(shapes, axis=0, return_inverse=True)[1].reshape(-1)
    return groups.astype("int64"), np.prod(shapes, axis=1).astype("int64")


def _epoch_batches_op(groups, batch_size, seed, epoch):
    ranks, tokens = groups
    count = len(ranks)
    order = permutation_op(count, seed, epoch)[: count // batch_size * batch_size]
    grouped = tf.gather(order, tf.argsort(tf.gather(ranks, order), stable=True))
    batches = tf.gather(tf.reshape(grouped, [-1, batch_size]), permutation_op(count // batch_size, seed, epoch, stream=1))
    largest = tf.argmax(tf.reduce_max(tf.gather(tokens, batches), axis=1))   # (the first of equals)
    return tf.gather(batches, tf.concat([[largest], tf.range(largest), tf.range(largest + 1, count // batch_size)], 0))


def _check_batch_size(count, batch_size):
    if count < batch_size:
        raise ValueError(f"{count} examples cannot fill one batch of {batch_size}: lower --batch-size")


def epoch_batches(shapes, batch_size, seed, epoch):
    """int64 ``[count // batch_size, batch_size]``: the example indices of each batch of ``epoch``, in the order
    training reads them (see the module doc).

    >>> import numpy as np
    >>> shapes = np.array([[4], [8], [4], [8], [4], [8]])
    >>> batches = epoch_batches(shapes, batch_size=3, seed=0, epoch=0)
    >>> sorted(sorted(b) for b in batches.tolist()), [len(set(shapes[b, 0].tolist())) for b in batches]
    ([[0, 2, 4], [1, 3, 5]], [1, 1])
    """
    _check_batch_size(len(shapes), batch_size)
    return _epoch_batches_op(_groups(shapes), batch_size, seed, tf.constant(epoch, tf.int64)).numpy()


def training_batches(arrays, shapes, batch_size, seed=0, start=0, cut_like_ids=None):
    """Endless ``tf.data`` dataset of batches from batch ``start`` on (counted from the first epoch): tuples of
    ``arrays`` gathered by `epoch_batches`; ``arrays[0]`` holds the token ids, and each array shaped like it (token
    tags, weights) is cut to the batch's shape like the ids; the others (labels) are only gathered.
    ``cut_like_ids`` (one bool an array) says which are cut where the shape cannot tell: multi-hot labels
    ``[N, num_labels]`` beside ids ``[N, seq_len]`` when the two numbers are equal."""
    _check_batch_size(len(shapes), batch_size)
    steps, axes = len(shapes) // batch_size, np.ndim(arrays[0]) - 1
    alike = cut_like_ids or [np.shape(a)[1:axes + 1] == np.shape(arrays[0])[1:] for a in arrays]
    tables, groups, shapes = [tf.constant(a) for a in arrays], _groups(shapes), tf.constant(shapes, tf.int64)

    def batch(index):
        size = tf.reduce_max(tf.gather(shapes, index), 0)
        cut_to = (slice(None), *(slice(0, size[axis]) for axis in range(axes)))
        return tuple(tf.gather(t, index)[cut_to] if same else tf.gather(t, index) for t, same in zip(tables, alike))

    epochs = tf.data.Dataset.range(start // steps, INT64_MAX)
    indices = epochs.flat_map(
        lambda epoch: tf.data.Dataset.from_tensor_slices(_epoch_batches_op(groups, batch_size, seed, epoch)))
    return indices.skip(start % steps).map(batch)


def epoch_shapes(shapes, batch_size, seed, epoch):
    """int64 ``[count // batch_size, rows.ndim - 1]``: the padded shape of each batch of ``epoch``, in the order
    training reads them (what the batches cost)."""
    return np.asarray(shapes)[epoch_batches(shapes, batch_size, seed, epoch)].max(1)


def sorted_batches(sizes, batch_size):
    """Index arrays of inference batches, the largest ``sizes`` first (a row's padded shape, or its tokens): the
    first batch meets the memory peak, and every batch pads little; the caller puts results back in input order."""
    tokens = np.prod(np.reshape(sizes, (len(sizes), -1)), axis=1)
    order = np.argsort(-tokens, kind="stable")
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
