"""The order training reads examples in: a fresh shuffle every epoch, a pure function of (seed, epoch).

Global position ``i`` (``i = step * batch_size + row``) falls in epoch ``i // count`` and reads example
``epoch_permutation(count, seed, epoch)[i % count]``. Nothing depends on what was read before, so a run
resumed at any step reads exactly what the uninterrupted run would have read, and every example is read
once per epoch. A corpus stored in file-name order (by date, by source) is mixed from the first batch on.

>>> from bert4long.data.order import epoch_permutation, example_order
>>> sorted(epoch_permutation(5, seed=0, epoch=3).tolist())
[0, 1, 2, 3, 4]
>>> first = [int(i) for i in example_order(5, seed=0).take(10)]
>>> first == epoch_permutation(5, 0, 0).tolist() + epoch_permutation(5, 0, 1).tolist()
True
>>> [int(i) for i in example_order(5, seed=0, start=7).take(3)] == first[7:]
True
"""
import numpy as np
import tensorflow as tf

INT64_MAX = np.iinfo(np.int64).max


def epoch_permutation(count, seed, epoch):
    """int64 ``[count]``: the order of epoch ``epoch``, a permutation of ``range(count)``.

    TensorFlow's stateless random numbers under the key ``(seed, epoch)``, ranked: the same on every
    machine and at every call.
    """
    return permutation_op(count, seed, tf.constant(epoch, tf.int64)).numpy()


def permutation_op(count, seed, epoch, stream=0):
    """The int64 tensor of `epoch_permutation` (``epoch`` may be a tensor); another ``stream`` draws an
    independent permutation under the same (seed, epoch), e.g. the order of an epoch's batches."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    if stream:
        key = tf.random.experimental.stateless_fold_in(key, stream)
    keys = tf.random.stateless_uniform([count], seed=key, dtype=tf.float64)
    return tf.cast(tf.argsort(keys, stable=True), tf.int64)


def example_order(count, seed=0, start=0, shuffle=True):
    """Endless ``tf.data`` dataset of example indices for global positions ``start, start + 1, ...``.

    ``shuffle=False`` reads ``0, 1, ..., count - 1`` every epoch (evaluation).
    """
    if count < 1:
        raise ValueError(f"count={count}: there are no examples to order")
    first_epoch = start // count
    epochs = tf.data.Dataset.range(first_epoch, INT64_MAX)
    if shuffle:
        indices = epochs.flat_map(lambda epoch: tf.data.Dataset.from_tensor_slices(permutation_op(count, seed, epoch)))
    else:
        indices = epochs.flat_map(lambda epoch: tf.data.Dataset.range(count))
    return indices.skip(start - first_epoch * count)
