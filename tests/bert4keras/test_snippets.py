"""bert4long.snippets: padding, generators, file helper, decoders, with bad inputs."""
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert4long import snippets
from bert4long.snippets import (
    AutoRegressiveDecoder,
    DataGenerator,
    sequence_padding,
    text_segmentate,
    to_array,
    truncate_sequences,
)


def test_sequence_padding_modes_length_and_value():
    np.testing.assert_array_equal(sequence_padding([[1, 2, 3], [4]]), [[1, 2, 3], [4, 0, 0]])
    np.testing.assert_array_equal(sequence_padding([[1, 2, 3], [4]], mode="pre"), [[1, 2, 3], [0, 0, 4]])
    np.testing.assert_array_equal(sequence_padding([[1, 2, 3], [4]], length=2, value=-1), [[1, 2], [4, -1]])
    np.testing.assert_array_equal(sequence_padding([[1, 2, 3], [4]], length=2, mode="pre"), [[1, 2], [0, 4]])


def test_sequence_padding_seq_dims_and_inner_axes():
    matrices = [np.ones((2, 2)), np.ones((3, 3))]
    padded = sequence_padding(matrices, seq_dims=2)
    assert padded.shape == (2, 3, 3) and padded[0].sum() == 4 and padded[1].sum() == 9
    vectors = [np.ones((1, 4)), np.ones((3, 4))]  # pad only the first axis, keep the features
    assert sequence_padding(vectors).shape == (2, 3, 4)
    assert sequence_padding(vectors, length=[2]).shape == (2, 2, 4)


@pytest.mark.parametrize("inputs,kwargs,match", [
    ([[1, 2], [[1], [2]]], {}, "unequal depth"),
    ([[[1, 2], [3]], [[1]]], {}, "ragged"),
    ([np.ones((2, 3)), np.ones((2, 4))], {}, "axes after"),
    ([[1]], {"mode": "middle"}, "'post' or 'pre'"),
    ([], {}, "no sequences"),
    ([[1, 2]], {"seq_dims": 2}, "fewer than"),
])
def test_sequence_padding_rejects_bad_input(inputs, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sequence_padding(inputs, **kwargs)


def test_to_array_truncate_and_segmentate():
    a, b = to_array([1, 2], [[3]])
    assert a.shape == (2,) and b.shape == (1, 1)
    assert to_array([1]).shape == (1,)
    first, second = [1, 2, 3, 4], [5, 6]
    assert truncate_sequences(4, -1, first, second) == [[1, 2], [5, 6]]
    assert truncate_sequences(3, [0, -1], [1, 2, 3], [4, 5]) == [[3], [4, 5]]  # ties: the first
    assert truncate_sequences(3, -1, [1, 2], None, []) == [[1, 2]]
    text = "今天天气很好。我们去公园吧！然后回家，吃饭。"
    pieces = text_segmentate(text, 8, seps="。！，")
    assert "".join(pieces) == text and all(len(p) <= 8 for p in pieces)
    assert text_segmentate("  short  ", 10) == ["short"]
    assert text_segmentate("aaaaaaaaaa", 3, seps=",") == ["aaaaaaaaaa"]  # nothing to split at: kept whole


def test_open_with_encoding_and_index(tmp_path):
    path = str(tmp_path / "lines.txt")
    lines = ["第一行\n", "second\n", "third\n"]
    with snippets.open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line)
    index_path = str(tmp_path / "index.json")
    f = snippets.open(path, encoding="utf-8", indexable=index_path)
    assert len(f) == 3 and f[2] == "third\n" and f[0] == "第一行\n"
    f.seek(0)
    assert list(f) == lines
    f.close()
    cached = snippets.open(path, encoding="utf-8", indexable=index_path)  # offsets read from the cache
    assert cached.offsets == f.offsets and cached[1] == "second\n"
    with snippets.open(path, "rb") as raw, snippets.open(path, encoding="utf-8") as text:
        assert raw.read().decode("utf-8") == text.read()


class PairGenerator(DataGenerator):
    """bert4keras-style generator: yields ([token_ids, segment_ids], labels) lists."""

    def __iter__(self, random=False):
        tokens, labels = [], []
        for is_end, (ids, label) in self.sample(random):
            tokens.append(ids)
            labels.append([label])
            if len(tokens) == self.batch_size or is_end:
                token_ids = sequence_padding(tokens)
                yield [token_ids, np.zeros_like(token_ids)], sequence_padding(labels)
                tokens, labels = [], []


DATA = [([1, 2, 3], 0), ([4], 1), ([5, 6], 0)]


def test_data_generator_sample_and_batches():
    generator = PairGenerator(DATA, batch_size=2)
    assert len(generator) == 2
    assert [end for end, _ in generator.sample()] == [False, False, True]
    shuffled = [tuple(d[0]) for _, d in PairGenerator(DATA * 10, batch_size=2).sample(random=True)]
    assert sorted(shuffled) == sorted(tuple(d[0]) for d in DATA * 10) and shuffled != [tuple(d[0]) for d in DATA * 10]
    streamed = PairGenerator((d for d in DATA), batch_size=2, buffer_size=2)  # no len: buffered shuffle
    assert streamed.steps is None
    assert sorted(tuple(d[0]) for _, d in streamed.sample(random=True)) == sorted(tuple(d[0]) for d in DATA)


def test_forfit_is_an_endless_dataset_with_free_axes():
    dataset = PairGenerator(DATA, batch_size=2).forfit(random=False)
    (token_ids, segment_ids), labels = dataset.element_spec
    assert token_ids.shape.as_list() == [None, None] and labels.shape.as_list() == [None, 1]
    shapes = [batch[0][0].shape.as_list() for batch in dataset.take(5)]
    assert shapes == [[2, 3], [1, 2], [2, 3], [1, 2], [2, 3]]  # lengths vary, batches never end


def test_forfit_feeds_fit_with_varying_lengths():
    token_ids = keras.Input((None,), dtype="int32")
    segment_ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(8, 4)(token_ids) + keras.layers.Embedding(2, 4)(segment_ids)
    output = keras.layers.Dense(2, activation="softmax")(keras.layers.GlobalAveragePooling1D()(x))
    model = keras.Model([token_ids, segment_ids], output)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    # the first two batches have the same length, later ones differ: Keras 3 alone would
    # fix the length from the first two and fail on the third
    lengths = [[1] * n for n in (3, 3, 5, 2, 7, 4)]
    varying = PairGenerator([(ids, i % 2) for i, ids in enumerate(lengths)], batch_size=1)
    history = model.fit(varying.forfit(random=False), steps_per_epoch=6, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert model.predict(varying.fortest(), steps=3, verbose=0).shape == (3, 2)


def test_to_dataset_with_names_and_padding():
    class ExampleGenerator(DataGenerator):
        def __iter__(self, random=False):
            for _, (ids, label) in self.sample(random):
                yield [ids, [0] * len(ids)], [label]

    generator = ExampleGenerator(DATA, batch_size=3)
    dataset = generator.to_dataset(
        types=(("int32", "int32"), ("int32",)), shapes=(([None], [None]), ([],)),
        names=(("Input-Token", "Input-Segment"), ("label",)), padded_batch=True,
    )
    inputs, targets = next(iter(dataset))
    assert inputs["Input-Token"].shape == (3, 3) and inputs["Input-Segment"].shape == (3, 3)
    assert sorted(targets["label"].numpy().tolist()) == [0, 0, 1]
    assert sorted(inputs["Input-Token"].numpy().sum(1).tolist()) == [4, 6, 11]


def test_data_generator_rejects_empty_data():
    with pytest.raises(ValueError, match="empty"):
        PairGenerator([], batch_size=2)
    with pytest.raises(ValueError, match="no examples"):
        next(iter(PairGenerator(iter([]), batch_size=2)))


class MarkovDecoder(AutoRegressiveDecoder):
    """Next-token log-probabilities from a fixed transition table (the input picks the table)."""

    def __init__(self, tables, **kwargs):
        super().__init__(**kwargs)
        self.tables = tables

    @AutoRegressiveDecoder.wraps(default_rtype="logits")
    def predict(self, inputs, output_ids, states):
        table = self.tables[inputs[0][:, 0]]  # [batch, V, V]
        last = output_ids[:, -1]
        return np.log(table[np.arange(len(last)), last])


def _markov(seed, vocab=4):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(vocab) * 0.5, size=(1, vocab))


def _best_full_length_sequence(table, start, length):
    """Exhaustive search over every output of ``length`` tokens."""
    def score(seq):
        path = (start,) + seq
        return sum(np.log(table[a, b]) for a, b in zip(path[:-1], path[1:]))

    return list(max(itertools.product(range(table.shape[-1]), repeat=length), key=score))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_with_a_wide_beam_finds_the_exhaustive_optimum(seed):
    tables = _markov(seed)
    # end_id outside the vocabulary: every candidate runs to maxlen, and a beam as wide as
    # the number of prefixes makes the search exhaustive.
    decoder = MarkovDecoder(tables, start_id=0, end_id=99, maxlen=4)
    output = decoder.beam_search([np.array([0])], topk=64)
    assert output[1:].tolist() == _best_full_length_sequence(tables[0], 0, 4)


def test_beam_search_of_width_one_is_greedy():
    tables = _markov(4)
    greedy = [0]
    for _ in range(5):
        greedy.append(int(tables[0, greedy[-1]].argmax()))
        if greedy[-1] == 3:
            break
    decoder = MarkovDecoder(tables, start_id=0, end_id=3, maxlen=5)
    assert decoder.beam_search([np.array([0])], topk=1).tolist() == greedy


def test_random_sample_topk_one_is_greedy_and_topp_limits_choices():
    tables = _markov(3)
    decoder = MarkovDecoder(tables, start_id=0, end_id=3, maxlen=5)
    greedy = [0]
    for _ in range(5):
        greedy.append(int(tables[0, greedy[-1]].argmax()))
        if greedy[-1] == 3:
            break
    np.random.seed(0)
    for sample in decoder.random_sample([np.array([0])], n=3, topk=1):
        assert sample.tolist() == greedy
    for sample in decoder.random_sample([np.array([0])], n=3, topp=1e-6):
        assert sample.tolist() == greedy
    samples = decoder.random_sample([np.array([0])], n=20)
    assert len(samples) == 20 and all(s[0] == 0 and len(s) <= 6 for s in samples)


@pytest.mark.parametrize("kwargs,match", [
    ({"topk": 0}, "topk"), ({"topk": 1.5}, "topk"), ({"topk": 99}, "vocabulary"),
    ({"topp": 0}, "topp"), ({"topp": 1.5}, "topp"), ({"n": 0}, "n must"),
])
def test_random_sample_rejects_out_of_range_arguments(kwargs, match):
    decoder = MarkovDecoder(_markov(0), start_id=0, end_id=3, maxlen=3)
    kwargs = {"n": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        decoder.random_sample([np.array([0])], **kwargs)


def test_beam_search_and_decoder_reject_bad_arguments():
    decoder = MarkovDecoder(_markov(0), start_id=0, end_id=3, maxlen=3)
    with pytest.raises(ValueError, match="beam size"):
        decoder.beam_search([np.array([0])], topk=0)
    with pytest.raises(ValueError, match="maxlen"):
        MarkovDecoder(_markov(0), start_id=0, end_id=3, maxlen=0)
    with pytest.raises(ValueError, match="rtype"):
        decoder.predict([np.array([[0]])], np.array([[0]]), None, rtype="scores")


def test_minlen_and_min_ends():
    tables = np.full((1, 4, 4), 0.01)
    tables[0, :, 3] = 0.97  # the end token is always the likeliest
    decoder = MarkovDecoder(tables, start_id=0, end_id=3, maxlen=6, minlen=3)
    output = decoder.beam_search([np.array([0])], topk=2)
    assert len(output) >= 3 and output[-1] == 3
    output = MarkovDecoder(tables, start_id=0, end_id=3, maxlen=6).beam_search([np.array([0])], topk=2, min_ends=2)
    assert output.tolist() == [0, 3, 3]


def test_last_token_model_returns_the_last_position():
    token_ids = keras.Input((None,), dtype="int32")
    model = keras.Model(token_ids, keras.layers.Embedding(5, 3)(token_ids))
    decoder = MarkovDecoder(_markov(0), start_id=0, end_id=3, maxlen=3)
    last = decoder.last_token(model)
    assert decoder.last_token(model) is last
    ids = np.array([[1, 2, 4]])
    np.testing.assert_allclose(last.predict(ids, verbose=0), model.predict(ids, verbose=0)[:, -1], rtol=1e-6)
    assert tf.is_tensor(last(ids))
