"""bert4keras's `snippets` on Keras 3: padding, data generators, decoders, file helpers.

Same names and signatures as ``bert4keras.snippets``; what changes is documented in
docs/porting.md. Everything here is numpy / Python except `DataGenerator.to_dataset`
(tf.data) and `AutoRegressiveDecoder.last_token` (a Keras model).

Example:
>>> from bert4long.snippets import sequence_padding
>>> sequence_padding([[1, 2, 3], [4]]).tolist()
[[1, 2, 3], [4, 0, 0]]
"""
import builtins
import json
import os

import keras
import numpy as np

from bert4long.tensorflow_only import require_tensorflow

# DataGenerator's datasets are tf.data's: what a refusal on another backend says.
DATASETS = "bert4long.snippets.DataGenerator builds tf.data pipelines (forfit, fortest, to_dataset)"
INSTEAD = "give model.fit numpy arrays, or a generator of numpy batches of one shape"

__all__ = [
    "to_array",
    "is_string",
    "open",
    "sequence_padding",
    "truncate_sequences",
    "text_segmentate",
    "DataGenerator",
    "ViterbiDecoder",
    "AutoRegressiveDecoder",
    "softmax",
]


def to_array(*args):
    """`np.array` of each argument; a single argument gives a single array.

    Example:
    >>> from bert4long.snippets import to_array
    >>> token_ids, segment_ids = to_array([[2, 5, 3]], [[0, 0, 0]])
    >>> token_ids.shape
    (1, 3)
    """
    arrays = [np.array(a) for a in args]
    return arrays[0] if len(args) == 1 else arrays


def is_string(s):
    """True for `str`."""
    return isinstance(s, str)


def _decode(text, encoding, errors):
    return text.decode(encoding, errors=errors) if isinstance(text, bytes) else text


class open:  # noqa: A001 -- bert4keras's name, shadows the builtin on purpose
    """`open` with bert4keras's extras: ``encoding``/``errors`` on every read, and line indexing.

    With ``indexable=True`` the byte offset of every line is recorded so that
    ``f[i]`` reads line ``i`` and ``len(f)`` counts lines; ``indexable='path.json'``
    caches the offsets in that file (read back when it exists). Works as a
    context manager and as an iterator of lines.

    Example:
    >>> import tempfile, os
    >>> from bert4long.snippets import open
    >>> path = os.path.join(tempfile.mkdtemp(), "a.txt")
    >>> with open(path, "w", encoding="utf-8") as f:
    ...     f.write("first\\nsecond\\n")
    >>> open(path, encoding="utf-8", indexable=True)[1]
    'second\\n'
    """

    def __init__(self, name, mode="r", encoding=None, errors="strict", indexable=False):
        self.name = name
        text_options = {} if "b" in mode else {"encoding": encoding, "errors": errors}
        self.file = builtins.open(name, mode, **text_options)
        self.encoding = encoding
        self.errors = errors
        self.iterator = None
        if indexable:
            if is_string(indexable) and os.path.exists(indexable):
                with builtins.open(indexable) as f:
                    self.offsets = json.load(f)
            else:
                self.create_indexes()
                if is_string(indexable):
                    with builtins.open(indexable, "w") as f:
                        json.dump(self.offsets, f)

    def create_indexes(self):
        """Record the offset of every line (one pass over the file)."""
        self.offsets, offset = [], 0
        while self.file.readline():
            self.offsets.append(offset)
            offset = self.file.tell()
        self.file.seek(0)

    def __getitem__(self, key):
        self.file.seek(self.offsets[key])
        return self.readline()

    def __len__(self):
        return len(self.offsets)

    def __iter__(self):
        for line in self.file:
            yield _decode(line, self.encoding, self.errors) if self.encoding else line

    def __next__(self):
        if self.iterator is None:
            self.iterator = self.__iter__()
        return next(self.iterator)

    next = __next__

    def read(self):
        text = self.file.read()
        return _decode(text, self.encoding, self.errors) if self.encoding else text

    def readline(self):
        text = self.file.readline()
        return _decode(text, self.encoding, self.errors) if self.encoding else text

    def readlines(self):
        return list(self)

    def write(self, text):
        if self.encoding and "b" not in self.file.mode:
            text = _decode(text, self.encoding, self.errors)
        self.file.write(text)

    def flush(self):
        self.file.flush()

    def close(self):
        self.file.close()

    def tell(self):
        return self.file.tell()

    def seek(self, offset=0):
        return self.file.seek(offset)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def sequence_padding(inputs, length=None, value=0, seq_dims=1, mode="post"):
    """Pad (or cut) sequences to one length and stack them into one numpy array.

    Args:
        inputs: a non-empty list of sequences (lists or arrays) of equal depth.
        length: target length (an int, or one int per sequence axis); default the
            longest. Longer sequences are cut to it.
        value: the padding value.
        seq_dims: how many leading axes of each sequence are padded (2 for a
            ``[n, n]`` matrix per example).
        mode: ``'post'`` pads at the end, ``'pre'`` at the start.

    Example:
    >>> from bert4long.snippets import sequence_padding
    >>> sequence_padding([[1, 2], [3]], length=3, value=-1, mode="pre").tolist()
    [[-1, 1, 2], [-1, -1, 3]]
    """
    if mode not in ("post", "pre"):
        raise ValueError(f"sequence_padding: mode must be 'post' or 'pre', got {mode!r}.")
    if len(inputs) == 0:
        raise ValueError("sequence_padding: got no sequences; pass a non-empty list.")
    arrays = []
    for i, x in enumerate(inputs):
        try:
            arrays.append(np.asarray(x))
        except ValueError as error:
            raise ValueError(
                f"sequence_padding: sequence {i} is ragged below its first axis ({error}); "
                "pad the inner lists first or raise seq_dims."
            ) from None
    depths = {a.ndim for a in arrays}
    if len(depths) != 1 or min(depths) < seq_dims or any(a.dtype == object for a in arrays):
        raise ValueError(
            f"sequence_padding: sequences have unequal depth (ranks {sorted(depths)}) or fewer than "
            f"seq_dims={seq_dims} axes; every sequence must nest the same way (e.g. all lists of ids)."
        )
    inner = {a.shape[seq_dims:] for a in arrays}
    if len(inner) != 1:
        raise ValueError(
            f"sequence_padding: the axes after the first {seq_dims} differ between sequences "
            f"({sorted(inner)}); only the leading seq_dims axes can be padded."
        )
    if length is None:
        length = np.max([a.shape[:seq_dims] for a in arrays], axis=0)
    elif not hasattr(length, "__getitem__"):
        length = [length]
    cut = tuple(slice(None, int(length[i])) for i in range(seq_dims))
    outputs = []
    for a in arrays:
        a = a[cut]
        pad = [(0, 0)] * a.ndim
        for i in range(seq_dims):
            missing = int(length[i]) - a.shape[i]
            pad[i] = (0, missing) if mode == "post" else (missing, 0)
        outputs.append(np.pad(a, pad, "constant", constant_values=value))
    return np.array(outputs)


def truncate_sequences(maxlen, indices, *sequences):
    """Pop items from the longest of ``sequences`` (in place) until their total length <= maxlen.

    ``indices`` is the position popped (``-1`` the end, ``0`` the start), one per
    sequence or one for all. Empty/None sequences are dropped from the result.

    Example:
    >>> from bert4long.snippets import truncate_sequences
    >>> truncate_sequences(4, -1, [1, 2, 3], [4, 5, 6])
    [[1, 2], [4, 5]]
    """
    sequences = [s for s in sequences if s]
    if not isinstance(indices, (list, tuple)):
        indices = [indices] * len(sequences)
    while sum(len(s) for s in sequences) > maxlen:
        i = int(np.argmax([len(s) for s in sequences]))
        sequences[i].pop(indices[i])
    return sequences


def text_segmentate(text, maxlen, seps="\n", strips=None):
    """Split ``text`` into pieces of at most ``maxlen`` characters at the separators ``seps``.

    Separators are tried in order (coarsest first, e.g. ``'\\n。！？'``); a piece still
    longer than ``maxlen`` after the last separator is kept whole.

    Example:
    >>> from bert4long.snippets import text_segmentate
    >>> text_segmentate("aa,bb,cc", 5, seps=",")
    ['aa,', 'bb,', 'cc']
    """
    text = text.strip().strip(strips)
    if not seps or len(text) <= maxlen:
        return [text]
    pieces = text.split(seps[0])
    texts, current = [], ""
    for i, piece in enumerate(pieces):
        if current and piece and len(current) + len(piece) > maxlen - 1:
            texts.extend(text_segmentate(current, maxlen, seps[1:], strips))
            current = ""
        current += piece if i + 1 == len(pieces) else piece + seps[0]
    if current:
        texts.extend(text_segmentate(current, maxlen, seps[1:], strips))
    return texts


def _as_tuples(structure):
    """Lists -> tuples, recursively: Keras 3 reads a batch's structure from tuples only."""
    if isinstance(structure, (list, tuple)):
        return tuple(_as_tuples(s) for s in structure)
    return structure


class DataGenerator:
    """Base class of bert4keras data generators: subclass it and write `__iter__`.

    ``__iter__(self, random=False)`` loops over `sample(random)` and yields batches
    (for `forfit` / `fit`) or single examples (for `to_dataset`).

    Args:
        data: a non-empty sequence (or, without ``len``, an iterable) of examples.
        batch_size: examples per batch.
        buffer_size: shuffle buffer for iterables without ``len`` (default 1000 batches).

    Example:
    >>> from bert4long.snippets import DataGenerator, sequence_padding
    >>> class Gen(DataGenerator):
    ...     def __iter__(self, random=False):
    ...         batch = []
    ...         for is_end, x in self.sample(random):
    ...             batch.append(x)
    ...             if len(batch) == self.batch_size or is_end:
    ...                 yield sequence_padding(batch), None
    ...                 batch = []
    >>> next(iter(Gen([[1], [2, 3]], batch_size=2)))[0].tolist()
    [[1, 0], [2, 3]]
    """

    def __init__(self, data, batch_size=32, buffer_size=None):
        if hasattr(data, "__len__") and len(data) == 0:
            raise ValueError("DataGenerator got an empty dataset; pass at least one example.")
        if batch_size < 1:
            raise ValueError(f"DataGenerator: batch_size must be >= 1, got {batch_size}.")
        self.data = data
        self.batch_size = batch_size
        if hasattr(data, "__len__"):
            self.steps = -(-len(data) // batch_size)
        else:
            self.steps = None
        self.buffer_size = buffer_size or batch_size * 1000

    def __len__(self):
        return self.steps

    def _shuffled(self):
        if self.steps is not None:
            for i in np.random.permutation(len(self.data)):
                yield self.data[i]
            return
        cache, full = [], False
        for d in self.data:
            cache.append(d)
            if full:
                yield cache.pop(np.random.randint(len(cache)))
            elif len(cache) == self.buffer_size:
                full = True
        while cache:
            yield cache.pop(np.random.randint(len(cache)))

    def sample(self, random=False):
        """Yield ``(is_end, example)`` over the data, shuffled when ``random``."""
        data = self._shuffled() if random else iter(self.data)
        try:
            current = next(data)
        except StopIteration:
            raise ValueError("DataGenerator.sample: the data yielded no examples.") from None
        for following in data:
            yield False, current
            current = following
        yield True, current

    def __iter__(self, random=False):
        raise NotImplementedError("Subclass DataGenerator and write __iter__(self, random=False).")

    def _batches(self, random):
        """Endless batches from `__iter__`, lists made tuples and trailing ``None`` targets dropped."""
        while True:
            for d in self.__iter__(random):
                d = _as_tuples(d)
                while isinstance(d, tuple) and len(d) > 1 and d[-1] is None:
                    d = d[:-1]
                yield d

    def _endless_dataset(self, random, select):
        require_tensorflow(DATASETS, INSTEAD)
        import tensorflow as tf  # tf.data: the one way to give Keras a variable-length signature

        batches = self._batches(random)
        first = select(next(batches))  # its structure, ranks and dtypes make the signature

        def spec(x):  # free axes, except unit axes such as the 1 of [batch, 1] labels
            x = np.asarray(x)
            return tf.TensorSpec([None] + [1 if n == 1 else None for n in x.shape[1:]], tf.as_dtype(x.dtype))

        signature = tf.nest.map_structure(spec, first)

        def generator():
            yield first
            for d in batches:
                yield select(d)

        return tf.data.Dataset.from_generator(generator, output_signature=signature)

    def forfit(self, random=True):
        """Endless batches for ``model.fit(gen.forfit(), steps_per_epoch=len(gen))``, as a `tf.data.Dataset`.

        Keras 3 would fix every axis of a Python generator's batches to the sizes it
        sees in the first two, so variable sequence lengths would fail later; this
        dataset leaves every axis free but unit ones (``[batch, 1]`` labels). Lists in
        a batch become tuples and a ``None`` target (models whose `Loss` layer holds
        the targets) is dropped, so bert4keras's ``yield [token_ids, segment_ids], labels`` works unchanged.
        The first batch is drawn here, so errors in `__iter__` surface at once.
        """
        return self._endless_dataset(random, lambda d: d)

    def fortest(self, random=False):
        """Endless model inputs (the first element of each batch) for ``predict``, as `forfit`."""
        return self._endless_dataset(random, lambda d: (d[0],))  # (inputs,): Keras reads a pair as (x, y)

    def to_dataset(self, types, shapes, names=None, padded_batch=False):
        """A batched, endless `tf.data.Dataset` over examples yielded one at a time by `__iter__`.

        Args:
            types: dtypes, nested like one example (e.g. ``('int32', 'int32')``).
            shapes: shapes of one example, nested the same way (``([None], [None])``).
            names: optional names turning the example into a dict (a string, a tuple
                of strings, or a tuple of tuples for ``(inputs, targets)``).
            padded_batch: pad examples within a batch (variable-length sequences).

        Example:
        >>> from bert4long.snippets import DataGenerator
        >>> class Gen(DataGenerator):
        ...     def __iter__(self, random=False):
        ...         for _, x in self.sample(random):
        ...             yield x
        >>> ds = Gen([[1], [2, 3]], batch_size=2).to_dataset("int32", [None], padded_batch=True)
        >>> next(iter(ds)).shape  # padded to the longest example of the batch
        TensorShape([2, 2])
        """
        require_tensorflow(DATASETS, INSTEAD)
        import tensorflow as tf  # tf.data has no Keras equivalent

        if names is None:
            wrap = lambda keys, values: values  # noqa: E731
        elif is_string(names):
            wrap = lambda keys, values: {keys: values}  # noqa: E731
        elif is_string(names[0]):
            wrap = lambda keys, values: dict(zip(keys, values))  # noqa: E731
        else:
            wrap = lambda keys, values: tuple(dict(zip(k, v)) for k, v in zip(keys, values))  # noqa: E731

        def spec(types, shapes):  # shapes are lists themselves: walk the types' structure
            if isinstance(types, dict):
                return {k: spec(types[k], shapes[k]) for k in types}
            if isinstance(types, (list, tuple)):
                return tuple(spec(t, s) for t, s in zip(types, shapes))
            return tf.TensorSpec(shape=shapes, dtype=types)

        signature = spec(wrap(names, types), wrap(names, shapes))

        def generator():
            for d in self._batches(True):
                yield wrap(names, d)

        dataset = tf.data.Dataset.from_generator(generator, output_signature=signature)
        if padded_batch:
            return dataset.padded_batch(self.batch_size)
        return dataset.batch(self.batch_size)


class ViterbiDecoder:
    """Best label path under a CRF's transition matrix (numpy Viterbi).

    Args:
        trans: ``[num_labels, num_labels]`` transition scores (``CRF.trans``).
        starts: labels allowed at the first position (default all).
        ends: labels allowed at the last position (default all).

    Example:
    >>> import numpy as np
    >>> from bert4long.snippets import ViterbiDecoder
    >>> ViterbiDecoder(np.zeros((2, 2))).decode(np.array([[0.0, 1.0], [2.0, 0.0]])).tolist()
    [1, 0]
    """

    def __init__(self, trans, starts=None, ends=None):
        self.trans = np.asarray(trans)
        self.num_labels = len(self.trans)
        labels = range(self.num_labels)
        self.non_starts = [i for i in labels if starts is not None and i not in starts]
        self.non_ends = [i for i in labels if ends is not None and i not in ends]

    def decode(self, nodes):
        """``nodes``: ``[seq_len, num_labels]`` emission scores -> best label ids ``[seq_len]``."""
        nodes = np.array(nodes, dtype="float64")  # a copy: bert4keras edited the caller's array
        nodes[0, self.non_starts] = -np.inf
        nodes[-1, self.non_ends] = -np.inf
        labels = np.arange(self.num_labels).reshape((1, -1))
        scores = nodes[0].reshape((-1, 1))
        paths = labels
        for step in range(1, len(nodes)):
            candidates = scores + self.trans + nodes[step].reshape((1, -1))
            best_previous = candidates.argmax(0)
            scores = candidates.max(0).reshape((-1, 1))
            paths = np.concatenate([paths[:, best_previous], labels], 0)
        return paths[:, scores[:, 0].argmax()]


def softmax(x, axis=-1):
    """Numpy softmax."""
    x = np.exp(x - x.max(axis=axis, keepdims=True))
    return x / x.sum(axis=axis, keepdims=True)


class AutoRegressiveDecoder:
    """Base class for generation by beam search or sampling (bert4keras's decoder).

    Subclass it and write ``predict(self, inputs, output_ids, states)`` decorated with
    ``@AutoRegressiveDecoder.wraps(default_rtype='probas'|'logits', use_states=False)``:
    it returns the next-token scores ``[batch, vocab]`` for the candidates
    ``output_ids`` given the encoder ``inputs`` (numpy arrays, batch-first).

    Args:
        start_id: id opening every output (None: start from nothing).
        end_id: id that ends an output.
        maxlen: most tokens generated.
        minlen: an output ending before this length is not accepted.

    Example:
    >>> import numpy as np
    >>> from bert4long.snippets import AutoRegressiveDecoder
    >>> class Counter(AutoRegressiveDecoder):
    ...     @AutoRegressiveDecoder.wraps(default_rtype="probas")
    ...     def predict(self, inputs, output_ids, states):
    ...         probas = np.full((len(output_ids), 4), 0.01)
    ...         probas[:, min(output_ids.shape[1] + 1, 3)] = 0.97  # 1, 2, then end (3)
    ...         return probas
    >>> Counter(start_id=None, end_id=3, maxlen=5).beam_search([[0]], topk=2).tolist()
    [1, 2, 3]
    """

    def __init__(self, start_id, end_id, maxlen, minlen=1):
        if maxlen < 1 or minlen < 1:
            raise ValueError(f"AutoRegressiveDecoder: maxlen and minlen must be >= 1, got {maxlen}, {minlen}.")
        self.start_id = start_id
        self.end_id = end_id
        self.maxlen = maxlen
        self.minlen = minlen
        self.models = {}
        if start_id is None:
            self.first_output_ids = np.empty((1, 0), dtype=int)
        else:
            self.first_output_ids = np.array([[start_id]])

    @staticmethod
    def wraps(default_rtype="probas", use_states=False):
        """Decorate `predict`: adds the ``temperature`` and ``rtype`` ('probas'/'logits') arguments."""
        if default_rtype not in ("probas", "logits"):
            raise ValueError(f"wraps: default_rtype must be 'probas' or 'logits', got {default_rtype!r}.")

        def decorator(predict):
            def new_predict(self, inputs, output_ids, states, temperature=1, rtype=default_rtype):
                if rtype not in ("probas", "logits"):
                    raise ValueError(f"predict: rtype must be 'probas' or 'logits', got {rtype!r}.")
                prediction = predict(self, inputs, output_ids, states)
                scores, states = prediction if use_states else (prediction, None)
                scores = np.asarray(scores)
                if default_rtype == "logits":
                    probas = softmax(scores / temperature)
                elif temperature != 1:
                    probas = np.power(scores, 1.0 / temperature)
                    probas = probas / probas.sum(axis=-1, keepdims=True)
                else:
                    probas = scores
                if rtype == "probas":
                    return probas, states
                return np.log(probas + 1e-12), states

            return new_predict

        return decorator

    def last_token(self, model):
        """A model with ``model``'s inputs returning only the last position of each output (cached)."""
        if model not in self.models:
            outputs = keras.tree.map_structure(lambda output: output[:, -1], model.output)
            self.models[model] = keras.Model(model.input, outputs)
        return self.models[model]

    def predict(self, inputs, output_ids, states=None):
        """Next-token scores for ``output_ids``; write it in a subclass, decorated with `wraps`."""
        raise NotImplementedError("Subclass AutoRegressiveDecoder and write predict(), decorated with wraps().")

    def beam_search(self, inputs, topk, states=None, temperature=1, min_ends=1):
        """The highest-scoring output ids (a 1-D array) under beam size ``topk``.

        ``inputs``: list of per-example model inputs (no batch axis).
        """
        if int(topk) != topk or topk < 1:
            raise ValueError(f"beam_search: topk (the beam size) must be an integer >= 1, got {topk!r}.")
        inputs = [np.array([i]) for i in inputs]
        output_ids, output_scores = self.first_output_ids, np.zeros(1)
        for _ in range(self.maxlen):
            scores, states = self.predict(inputs, output_ids, states, temperature, "logits")
            scores = output_scores.reshape((-1, 1)) + scores
            k = min(topk, scores.size)
            indices = scores.argpartition(-k, axis=None)[-k:]
            rows, columns = indices // scores.shape[1], (indices % scores.shape[1]).reshape((-1, 1))
            inputs = [i[rows] for i in inputs]  # each candidate keeps its parent's inputs
            output_ids = np.concatenate([output_ids[rows], columns], 1)
            output_scores = np.take_along_axis(scores, indices, axis=None)
            is_end = output_ids[:, -1] == self.end_id
            end_counts = (output_ids == self.end_id).sum(1)
            if output_ids.shape[1] >= self.minlen:
                best = output_scores.argmax()
                if is_end[best] and end_counts[best] >= min_ends:
                    return output_ids[best]
                unfinished = ~is_end | (end_counts < min_ends)
                if not unfinished.all():
                    inputs = [i[unfinished] for i in inputs]
                    output_ids = output_ids[unfinished]
                    output_scores = output_scores[unfinished]
                    topk = int(unfinished.sum())
        return output_ids[output_scores.argmax()]

    def random_sample(self, inputs, n, topk=None, topp=None, states=None, temperature=1, min_ends=1):
        """``n`` sampled outputs (a list of 1-D arrays), optionally from the top-k / nucleus top-p.

        ``topk``: sample among the ``topk`` most probable tokens (integer >= 1);
        ``topp``: among the most probable tokens whose probabilities first reach
        ``topp`` (``0 < topp <= 1``).
        """
        if topk is not None and (int(topk) != topk or topk < 1):
            raise ValueError(f"random_sample: topk must be None or an integer >= 1, got {topk!r}.")
        if topp is not None and not 0 < topp <= 1:
            raise ValueError(f"random_sample: topp must be None or in (0, 1], got {topp!r}.")
        if n < 1:
            raise ValueError(f"random_sample: n must be >= 1, got {n!r}.")
        inputs = [np.array([i]) for i in inputs]
        output_ids = self.first_output_ids
        results = []
        for step in range(self.maxlen):
            probas, states = self.predict(inputs, output_ids, states, temperature, "probas")
            probas = probas / probas.sum(axis=1, keepdims=True)
            if step == 0:
                probas = np.repeat(probas, n, axis=0)
                inputs = [np.repeat(i, n, axis=0) for i in inputs]
                output_ids = np.repeat(output_ids, n, axis=0)
            if topk is not None:
                if topk > probas.shape[1]:
                    raise ValueError(f"random_sample: topk={topk} exceeds the vocabulary size {probas.shape[1]}.")
                k_indices = probas.argpartition(-topk, axis=1)[:, -topk:]
                probas = np.take_along_axis(probas, k_indices, axis=1)
                probas /= probas.sum(axis=1, keepdims=True)
            if topp is not None:
                p_indices = probas.argsort(axis=1)[:, ::-1]
                probas = np.take_along_axis(probas, p_indices, axis=1)
                beyond = np.roll(np.cumsum(probas, axis=1) >= topp, 1, axis=1)
                beyond[:, 0] = False
                probas[beyond] = 0
                probas /= probas.sum(axis=1, keepdims=True)
            sample_ids = np.array([np.random.choice(len(p), p=p) for p in probas]).reshape((-1, 1))
            if topp is not None:
                sample_ids = np.take_along_axis(p_indices, sample_ids, axis=1)
            if topk is not None:
                sample_ids = np.take_along_axis(k_indices, sample_ids, axis=1)
            output_ids = np.concatenate([output_ids, sample_ids], 1)
            is_end = output_ids[:, -1] == self.end_id
            end_counts = (output_ids == self.end_id).sum(1)
            if output_ids.shape[1] >= self.minlen:
                finished = is_end & (end_counts >= min_ends)
                if finished.any():
                    results.extend(output_ids[finished])
                    inputs = [i[~finished] for i in inputs]
                    output_ids = output_ids[~finished]
                    if len(output_ids) == 0:
                        break
        results.extend(output_ids)
        return results
