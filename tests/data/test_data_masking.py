"""Dynamic MLM masking: rates, the 80/10/10 rule, specials, seeds, whole words."""
import numpy as np
import pytest
import tensorflow as tf

from bert4long.data import MLMMasker

VOCAB, PAD, UNK, CLS, SEP, MASK = 1000, 0, 1, 2, 3, 4
SPECIALS = [PAD, UNK, CLS, SEP, MASK]
CONTINUATIONS = list(range(900, 1000))  # pretend ids 900.. are "##" pieces


def corpus(num=600, seed=0):
    """Sequences of 20-128 tokens: [CLS] words [SEP] + padding, some [UNK]."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((num, 128), np.int32)
    for row in rows:
        n = rng.integers(20, 127)
        row[0], row[n] = CLS, SEP
        row[1:n] = rng.integers(5, 1000, n - 1)
        row[1:n][rng.random(n - 1) < 0.02] = UNK
    return rows


def run(masker, rows, seeds):
    dataset = tf.data.Dataset.from_tensor_slices((rows, seeds)).map(masker).batch(len(rows))
    return {k: v.numpy() for k, v in next(iter(dataset)).items()}


@pytest.fixture(scope="module")
def masked():
    rows = corpus()
    masker = MLMMasker(VOCAB, MASK, SPECIALS, max_predictions=20)
    seeds = np.stack([np.full(len(rows), 7), np.arange(len(rows))], axis=1)
    return rows, run(masker, rows, seeds), masker


def test_fifteen_percent_of_maskable_tokens(masked):
    rows, out, _ = masked
    maskable = ~np.isin(rows, SPECIALS)
    counts = out["masked_weights"].sum(1)
    expected = np.minimum(20, np.maximum(1, np.round(maskable.sum(1) * 0.15)))
    np.testing.assert_array_equal(counts, expected)  # per sequence: exactly round(15%)
    assert abs(counts.sum() / maskable.sum() - 0.15) < 0.005


def test_eighty_ten_ten_split(masked):
    rows, out, _ = masked
    real = out["masked_weights"] > 0
    original = np.take_along_axis(rows, out["masked_positions"], 1)[real]
    now = np.take_along_axis(out["token_ids"], out["masked_positions"], 1)[real]
    n = real.sum()
    assert n > 5000
    as_mask, unchanged = (now == MASK).mean(), (now == original).mean()
    as_random = ((now != MASK) & (now != original)).mean()
    # binomial standard deviation at n>5000 is < 0.6%; allow 5 of them
    assert abs(as_mask - 0.8) < 0.03 and abs(unchanged - 0.1) < 0.02 and abs(as_random - 0.1) < 0.02
    assert not np.isin(now[now != original], [PAD, UNK, CLS, SEP]).any()  # random ids are not specials


def test_outputs_are_consistent_and_specials_untouched(masked):
    rows, out, _ = masked
    real = out["masked_weights"] > 0
    positions = out["masked_positions"]
    np.testing.assert_array_equal(out["masked_ids"], np.where(real, np.take_along_axis(rows, positions, 1), 0))
    assert not np.isin(out["masked_ids"][real], SPECIALS).any()
    assert np.all(positions[~real] == 0) and out["masked_weights"].dtype == np.float32
    changed = out["token_ids"] != rows
    assert not (changed & np.isin(rows, SPECIALS)).any()  # [CLS] [SEP] [UNK] padding never change
    selected = np.zeros_like(rows, bool)
    np.put_along_axis(selected, positions, real, 1)
    assert not (changed & ~selected).any()  # only predicted positions change
    for row, w in zip(positions, real):
        assert np.all(np.diff(row[w]) > 0)  # increasing, no duplicates


def test_reproducible_with_a_seed_and_different_across_seeds(masked):
    rows, out, masker = masked
    seeds = np.stack([np.full(len(rows), 7), np.arange(len(rows))], axis=1)
    again = run(masker, rows, seeds)
    for key in out:
        np.testing.assert_array_equal(out[key], again[key])
    other = run(masker, rows, seeds + [0, len(rows)])
    same = np.mean(np.all(other["masked_positions"] == out["masked_positions"], axis=1))
    assert same < 0.05


def test_max_predictions_caps_and_all_special_sequences():
    masker = MLMMasker(VOCAB, MASK, SPECIALS, max_predictions=3)
    out = masker(tf.constant([CLS] + list(range(10, 110)) + [SEP]), seed=[1, 1])
    assert out["masked_weights"].numpy().tolist() == [1.0, 1.0, 1.0]
    out = masker(tf.constant([CLS, SEP, PAD, PAD]), seed=[1, 1])
    assert out["masked_weights"].numpy().sum() == 0
    np.testing.assert_array_equal(out["token_ids"], [CLS, SEP, PAD, PAD])


def test_whole_word_masking_keeps_words_whole():
    rng = np.random.default_rng(1)
    rows = corpus(300, seed=1)
    cont = (rng.random(rows.shape) < 0.3) & ~np.isin(rows, SPECIALS)
    rows = np.where(cont, rng.integers(900, 1000, rows.shape), np.where(rows >= 900, rows - 100, rows)).astype(np.int32)
    masker = MLMMasker(VOCAB, MASK, SPECIALS, max_predictions=20, continuation_ids=CONTINUATIONS)
    out = run(masker, rows, np.stack([np.zeros(len(rows)), np.arange(len(rows))], 1).astype(np.int64))
    maskable = ~np.isin(rows, SPECIALS)
    total = 0
    for row, positions, weights in zip(rows, out["masked_positions"], out["masked_weights"]):
        chosen = set(positions[weights > 0].tolist())
        total += len(chosen)
        word, words = [], []
        for i, t in enumerate(row):  # words: a start and its ## continuations
            if t in SPECIALS:
                continue
            if word and (t < 900 or row[i - 1] in SPECIALS):
                words.append(word)
                word = []
            word.append(i)
        words.append(word)
        for w in words:
            assert len(chosen & set(w)) in (0, len(w)), (w, chosen)
    assert 0.12 < total / maskable.sum() <= 0.15


def test_bad_masker_arguments():
    with pytest.raises(ValueError, match=r"no \[MASK\] token"):
        MLMMasker(VOCAB, None, SPECIALS, 5)
    with pytest.raises(ValueError, match="max_predictions=0"):
        MLMMasker(VOCAB, MASK, SPECIALS, 0)
    with pytest.raises(ValueError, match="mask_token_rate"):
        MLMMasker(VOCAB, MASK, SPECIALS, 5, mask_token_rate=0.9, random_token_rate=0.2)
