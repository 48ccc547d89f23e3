"""Batches by length (`bert4long.data.length_batches`): every example once an epoch, each batch padded to a bucket
length at least its longest row, few shapes, other batches every epoch, exact resume; bucket lengths that the
model's attention kernels accept; `finetune` and `predict` give the numbers of padding to --seq-len."""
import argparse
import json

import keras
import numpy as np
import pytest

from bert4long.attention import get_attention_kernel
from bert4long.cli import finetune, main
from bert4long.data import length_batches
from bert4long.data.length_batches import (
    bucket_lengths,
    buckets_for,
    cut,
    epoch_batches,
    fitted_buckets,
    padded_shapes,
    sorted_batches,
    training_batches,
)
from bert4long.prediction import model_inputs, predicted_ids
from bert4long.tokenizers import Tokenizer


def _rows(lengths, width, pad=0, seed=0):
    rng = np.random.default_rng(seed)
    rows = np.full((len(lengths), width), pad, "int32")
    for i, n in enumerate(lengths):
        rows[i, :n] = rng.integers(5, 60, n)
    return rows


@pytest.fixture
def mixed():
    """37 rows of 3..64 real tokens, padded to 64."""
    lengths = np.random.default_rng(3).integers(3, 65, size=37)
    return lengths, _rows(lengths, 64)


def test_every_epoch_reads_each_example_once_in_other_batches(mixed):
    lengths, rows = mixed
    shapes = padded_shapes(rows, 0, bucket_lengths(64))
    epochs = [epoch_batches(shapes, 4, seed=5, epoch=e) for e in range(3)]
    for batches in epochs:
        assert batches.shape == (9, 4)
        assert len(set(batches.ravel().tolist())) == 36   # 37 // 4 batches of distinct examples; one left over
    assert len({int(np.setdiff1d(np.arange(37), b.ravel())[0]) for b in epochs}) > 1   # a different one each epoch
    tokens = [shapes[b, 0].max() for b in epochs[0]]
    assert tokens[0] == max(tokens) and len(set(tokens)) > 2   # the largest batch first (the memory peak at once)
    grouping = [{frozenset(b.tolist()) for b in batches} for batches in epochs]
    assert grouping[0] != grouping[1] != grouping[2]                                     # other batches every epoch
    np.testing.assert_array_equal(epochs[1], epoch_batches(shapes, 4, seed=5, epoch=1))  # (seed, epoch) decide
    assert not np.array_equal(epochs[1], epoch_batches(shapes, 4, seed=6, epoch=1))


def test_each_batch_is_cut_to_a_bucket_at_least_its_longest_row(mixed):
    lengths, rows = mixed
    buckets = bucket_lengths(64)
    shapes = padded_shapes(rows, 0, buckets)
    labels = np.arange(37, dtype="int32")
    read = [(x.numpy(), y.numpy()) for x, y in training_batches([rows, labels], shapes, 4, seed=1).take(18)]
    widths = {x.shape[1] for x, _ in read}
    assert widths <= set(buckets) and len(buckets) == 8, widths   # at most 8 shapes to compile
    for x, y in read:
        assert x.shape[1] >= lengths[y].max()                          # no real token cut off
        np.testing.assert_array_equal(x, rows[y, :x.shape[1]])         # the rows themselves, only padding dropped
        assert x.shape[1] < 64 or lengths[y].max() > 48                # not padded past the next bucket
    padded = sum(x.size for x, _ in read[:9])
    assert padded < 0.75 * 9 * 4 * 64, padded                          # well under padding every row to 64
    again = [y.numpy() for _, y in training_batches([rows, labels], shapes, 4, seed=1, start=11).take(4)]
    assert [a.tolist() for a in again] == [y.tolist() for _, y in read[11:15]]   # a resumed run reads the same


@pytest.mark.parametrize("share", [0.0, 0.02, 0.05, 0.2, 1.0])
def test_fitted_buckets_drop_shapes_only_within_the_padding_budget(share):
    """Counted here by hand: each row padded to the smallest kept bucket that holds it. The kept buckets add at most
    ``share`` of the tokens at the longest bucket, and dropping any further one would add more."""
    lengths = np.concatenate([np.full(60, 60), np.full(30, 20), np.full(6, 5), [2, 2, 3]])   # 99 rows
    rows, buckets = _rows(lengths, 64), bucket_lengths(64)

    def tokens(kept):
        return sum(min(b for b in kept if b >= n) for n in lengths)

    kept = fitted_buckets(rows, 0, buckets, extra_share=share)
    budget = share * len(lengths) * 64
    assert kept[-1] == 64 and set(kept) <= set(buckets)
    assert tokens(kept) - tokens(buckets) <= budget
    assert all(tokens([b for b in kept if b != drop]) - tokens(buckets) > budget for drop in kept[:-1])
    if share == 0.0:
        assert kept == [6, 24, 64]   # only the buckets that hold no row go (of 6, 8, 12, ..., 64)
    if share == 1.0:
        assert kept == [64]


def test_token_targets_and_windows_are_cut_like_the_ids():
    rows = _rows([3, 7, 5, 8], 8)
    weights = (rows != 0).astype("float32")
    shapes = padded_shapes(rows, 0, [4, 8])
    (x, w), = [(x.numpy(), w.numpy()) for x, w in training_batches([rows, weights], shapes, 4).take(1)]
    assert x.shape == w.shape == (4, 8)
    chunked = np.zeros((3, 4, 8), "int32")   # documents of 1, 2 and 1 windows; the second's last window is short
    chunked[0, 0, :5] = chunked[1, 0, :] = chunked[2, 0, :3] = 7
    chunked[1, 1, :2] = 7
    shapes = padded_shapes(chunked, 0, [4, 6, 8])
    assert shapes.tolist() == [[1, 6], [2, 8], [1, 4]]
    assert cut(chunked[[0, 2]], shapes[[0, 2]]).shape == (2, 1, 6)
    assert sorted_batches(shapes, 2)[0].tolist() == [1, 0]           # longest first


def test_the_pipelines_default_buckets_are_the_powers_of_two_from_16():
    from bert4long.data import default_bucket_lengths
    assert default_bucket_lengths(100) == [16, 32, 64, 100]                      # listed by hand
    assert default_bucket_lengths(4096) == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]   # all: no count
    assert default_bucket_lengths(16) == [16] and default_bucket_lengths(10) == [10]
    assert default_bucket_lengths(50, smallest=5) == [5, 10, 20, 40, 50]


def test_bucket_lengths_follow_the_kernels_length_rules():
    assert bucket_lengths(1536) == [128, 192, 256, 384, 512, 768, 1024, 1536]
    assert bucket_lengths(16) == [2, 3, 4, 6, 8, 12, 16] and bucket_lengths(16, count=3) == [8, 12, 16]
    holder = keras.layers.Layer()
    holder.kernels = [get_attention_kernel("longformer", window=512), get_attention_kernel("chunked", block_size=64)]
    assert buckets_for(holder, 1536) == [256, 512, 768, 1024, 1536]       # multiples of the window's half side
    holder.kernels.append(get_attention_kernel("block_sparse", block_size=64, num_random_blocks=3))
    assert buckets_for(holder, 4096) == [4096]                            # its outputs change with padding


SPECS = {"full": {}, "chunked": dict(block_size=16), "sliding_window": dict(window=8, global_tokens=[]),
         "typical_relative": dict(max_relative_position=8), "performer": dict(num_features=16, block_size=8),
         "bigbird": dict(block_size=8, num_random_blocks=2), "block_sparse": dict(block_size=8, num_random_blocks=1),
         "lsh": dict(bucket_size=8, num_buckets=4)}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_kernel_that_says_padding_changes_nothing_is_right(name):
    """Real tokens' outputs with 70 real tokens, then padded by 10 and by 60: equal unless the kernel says
    `padding_changes_outputs` (then they must differ, or the claim costs speed for nothing)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 70, 2, 8)).astype("float32") for _ in range(3))
    kernel = get_attention_kernel(name, seed=1, **SPECS[name])
    kernel.build_kernel(2, 8, 16)
    alone = np.asarray(kernel(q, k, v, np.ones((1, 70), bool)))
    differences = []
    for extra in (10, 60):
        padded = [np.concatenate([t, np.zeros((1, extra, 2, 8), "float32")], 1) for t in (q, k, v)]
        mask = np.arange(70 + extra)[None] < 70
        differences.append(float(np.abs(np.asarray(kernel(*padded, mask))[:, :70] - alone).max()))
    assert (max(differences) > 1e-3) == kernel.padding_changes_outputs, differences


class _SumModel:
    """A stand-in model: logits from each row's sum (and per token: the id), to see rows come back in order."""
    inputs = []

    def __init__(self):
        self.widths = []

    def predict_on_batch(self, inputs):
        ids = np.asarray(inputs[0])
        self.widths.append(ids.shape[1])
        return np.eye(3)[ids % 3]


def test_predicted_ids_come_back_in_row_order():
    rows = _rows([2, 9, 4, 16, 5, 1, 12], 16)
    shapes = padded_shapes(rows, 0, bucket_lengths(16))
    model = _SumModel()
    np.testing.assert_array_equal(predicted_ids(model, rows, shapes, 3), rows % 3)   # tokens, padding 0
    assert model.widths == [16, 6, 2]                                                       # longest first


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


@pytest.mark.slow
def test_finetune_and_predict_by_length_give_the_numbers_of_padding_to_seq_len(tiny_bert, tmp_path, capsys,
                                                                               monkeypatch):
    """Documents of 7-9 content tokens (9-11 with [CLS]/[SEP]: one bucket, 12, at --seq-len 16), so both runs read
    the same batches; the trained classifiers then predict the same probabilities (to 1e-5) on documents of every
    length, the second run padding to --seq-len 16 everywhere; `predict` writes them in input order."""
    _, checkpoint, _ = tiny_bert
    train = _write(tmp_path / "train.jsonl", [{"text": " ".join(f"w{(3 * i + j) % 40}" for j in range(7 + i % 3)),
                                               "label": "ab"[i % 2]} for i in range(8)])
    docs = _write(tmp_path / "docs.jsonl", [{"text": " ".join(f"w{j % 40}" for j in range(n)), "n": n}
                                            for n in (3, 30, 9, 1, 14, 6)])
    probabilities = []
    for fixed in (False, True):
        if fixed:   # every batch padded to --seq-len, as before batches by length
            monkeypatch.setattr(length_batches, "buckets_for", lambda model, seq_len: [seq_len])
        run, out = str(tmp_path / f"run{fixed}"), str(tmp_path / f"out{fixed}.jsonl")
        assert main(["finetune", "--checkpoint", checkpoint, "--train", train, "--seq-len", "16", "--batch-size", "2",
                     "--steps", "4", "--learning-rate", "1e-2", "--out", run, "--no-xla", "--quiet"]) == 0
        printed = capsys.readouterr().out
        assert "s/epoch" in printed and "min for 1 epoch " in printed, printed   # the time estimate
        assert ("padded to 16 tokens" in printed) == fixed, printed
        assert main(["predict", "--run", run, "--input", docs, "--output", out, "--batch-size", "2", "--quiet"]) == 0
        lines = [json.loads(line) for line in open(out, encoding="utf-8")]
        assert [line["source"] for line in lines] == [f"docs.jsonl:{i}" for i in range(1, 7)]   # input order
        probabilities.append([[line["probabilities"][label] for label in "ab"] for line in lines])
    assert json.loads(open(tmp_path / "runFalse" / "finetune.json").read())["bucket_lengths"][-2:] == [12, 16]
    np.testing.assert_allclose(probabilities[0], probabilities[1], atol=1e-5)
    model = keras.models.load_model(str(tmp_path / "runFalse" / "classifier.keras"))   # each document alone:
    tokenizer = Tokenizer(tiny_bert[2], do_lower_case=True)
    texts = [json.loads(line)["text"] for line in open(docs, encoding="utf-8")]
    rows = finetune._documents_as_rows(tokenizer, tokenizer.encode_documents(texts), argparse.Namespace(
        pooling="cls", seq_len=16))
    alone = [keras.ops.softmax(model.predict_on_batch(model_inputs(model, row[None, :n])))[0]  # no padding
             for row, n in zip(rows, (rows != 0).sum(1))]
    np.testing.assert_allclose(probabilities[0], np.asarray(alone), atol=1e-5)
    assert np.ptp(np.asarray(probabilities[0])[:, 0]) > 1e-4   # (the documents are told apart: not a constant)
