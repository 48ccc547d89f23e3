"""Batch shaping in `bert4long.data`: `hold_out`, `pack_for` and `document_rows` (moved from the command line),
checked against hand-written expectations."""
import numpy as np
import pytest

from bert4long.data import document_rows, hold_out, pack_for
from bert4long.tokenizers import Tokenizer


@pytest.fixture
def tokenizer(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n")
    return Tokenizer(str(path))


class Ids:
    """A tokenizer's special ids only (RoBERTa's: <s> 0, <pad> 1, </s> 2)."""
    cls_id, sep_id, pad_id = 0, 2, 1


def test_hold_out_takes_the_ceiling_of_the_share_from_the_end():
    train, held = hold_out([list(range(10)), [7, 8, 9]], 0.15)   # ceil(1.5) = 2, ceil(0.45) = 1
    assert train == [list(range(8)), [7, 8]] and held == [[8, 9], [9]]


def test_hold_out_drops_a_document_held_out_whole_from_training_only():
    train, held = hold_out([[1], [2, 3, 4, 5]], 0.5)
    assert train == [[2, 3]] and held == [[1], [4, 5]]


def test_hold_out_of_nothing_keeps_everything():
    documents = ([1, 2], [3])
    train, held = hold_out(documents, 0.0)
    assert train == [[1, 2], [3]] and held == []


def test_pack_for_uses_the_tokenizers_ids(tokenizer):
    assert pack_for(tokenizer, [[5, 6, 7], [5]], seq_len=4).tolist() == [[2, 5, 6, 7], [2, 3, 5, 3]]
    assert pack_for(Ids, [[5, 6, 7], [5]], seq_len=3).tolist() == [[0, 5, 6], [0, 7, 2], [0, 5, 2]]
    assert pack_for(Ids, [[5, 6, 7, 8]], seq_len=4).tolist() == [[0, 5, 6, 7], [0, 8, 2, 1]]   # padded with <pad>
    assert pack_for(Ids, [[5, 6, 7, 8]], seq_len=4, drop_remainder=True).tolist() == [[0, 5, 6, 7]]


def test_document_rows_cls_takes_each_documents_head(tokenizer):
    rows = document_rows(tokenizer, [[5, 6, 7, 5, 6], [7]], seq_len=4)
    assert rows.dtype == np.int32 and rows.tolist() == [[2, 5, 6, 3], [2, 7, 3, 0]]


def test_document_rows_chunks_takes_the_first_windows_and_pads_with_the_pad_id():
    rows = document_rows(Ids, [[5, 6, 7, 8, 9, 10, 11], [12]], seq_len=4, chunks=2)
    assert rows.shape == (2, 2, 4)
    assert rows[0].tolist() == [[0, 5, 6, 2], [0, 7, 8, 2]]        # the third window (9 10, 11) is left out
    assert rows[1].tolist() == [[0, 12, 2, 1], [1, 1, 1, 1]]        # one window, then a padding row


def test_the_command_line_names_are_the_data_functions():
    import argparse

    from bert4long.cli import finetune, mlm

    assert mlm.hold_out is hold_out
    args = argparse.Namespace(pooling="chunks", seq_len=4, chunks=2)
    np.testing.assert_array_equal(finetune._documents_as_rows(Ids, [[5, 6, 7]], args),
                                  document_rows(Ids, [[5, 6, 7]], 4, chunks=2))
