"""Truncation, chunking, pooling and packing of long documents."""
import numpy as np
import pytest
import tensorflow as tf

from bert4long.data import chunk_documents, chunk_spans, pack_documents, pool_chunks, pool_chunks_ops, truncate

CLS, SEP, PAD = 101, 102, 0


def content(row):
    """Content ids of one sequence: strip [CLS], padding and the final [SEP]."""
    row = [int(i) for i in row if i != PAD]
    assert row[0] == CLS and row[-1] == SEP
    return row[1:-1]


@pytest.mark.parametrize("length", [0, 1, 9, 10, 11, 37])
@pytest.mark.parametrize("maxlen,overlap", [(3, 0), (7, 0), (7, 2), (12, 9)])
def test_chunks_cover_every_token_in_order(length, maxlen, overlap):
    docs = [np.arange(1000, 1000 + length), np.arange(2000, 2005)]
    token_ids, segment_ids, chunk_to_doc = chunk_documents(docs, maxlen, overlap, cls_id=CLS, sep_id=SEP)
    assert token_ids.shape[1] == maxlen and token_ids.dtype == np.int32
    assert not segment_ids.any() and np.all(np.diff(chunk_to_doc) >= 0)
    for index, doc in enumerate(docs):
        rows = [content(r) for r in token_ids[chunk_to_doc == index]]
        assert len(rows) >= 1
        rebuilt = rows[0] + [t for r in rows[1:] for t in r[overlap:]]
        assert rebuilt == doc.tolist()  # every token, in order, none twice beyond the overlap
        assert all(r[-overlap:] == n[:overlap] for r, n in zip(rows, rows[1:]) if overlap)


def test_chunk_arguments_are_checked():
    with pytest.raises(ValueError, match="overlap=5 must lie in"):
        chunk_spans(10, 5, overlap=5)
    with pytest.raises(ValueError, match="maxlen=2 leaves no room"):
        chunk_documents([[1]], 2, cls_id=CLS, sep_id=SEP)


def test_truncation_keeps_the_configured_counts():
    doc = np.arange(1000, 2000)
    out = truncate(doc, 512, "head+tail", head_len=128, cls_id=CLS, sep_id=SEP)
    assert len(out) == 512 and out[0] == CLS and out[-1] == SEP
    assert out[1:129].tolist() == doc[:128].tolist() and out[129:-1].tolist() == doc[-382:].tolist()
    assert truncate(doc, 10, "head", cls_id=CLS, sep_id=SEP)[1:-1].tolist() == doc[:8].tolist()
    assert truncate(doc, 10, "tail", cls_id=CLS, sep_id=SEP)[1:-1].tolist() == doc[-8:].tolist()
    short = np.arange(5)
    for strategy in ("head", "tail", "head+tail"):
        assert truncate(short, 10, strategy, head_len=3, cls_id=CLS, sep_id=SEP)[1:-1].tolist() == short.tolist()
    with pytest.raises(ValueError, match="head_len=9 must lie in"):
        truncate(doc, 10, "head+tail", head_len=9, cls_id=CLS, sep_id=SEP)
    with pytest.raises(ValueError, match="strategy must be one of"):
        truncate(doc, 10, "middle", cls_id=CLS, sep_id=SEP)
    with pytest.raises(ValueError, match="maxlen=2 leaves no room"):
        truncate(doc, 2, cls_id=CLS, sep_id=SEP)


def loop_pool(outputs, owners, num_documents, mode):
    """Reference: one document at a time."""
    rows = []
    for d in range(num_documents):
        mine = outputs[owners == d]
        rows.append({"mean": mine.mean(0), "max": mine.max(0), "first": mine[0]}[mode])
    return np.stack(rows)


@pytest.mark.parametrize("mode", ["mean", "max", "first"])
def test_pooling_maps_chunks_back_to_their_document(mode):
    rng = np.random.default_rng(0)
    docs = [np.arange(n) for n in (30, 3, 0, 17)]
    _, _, owners = chunk_documents(docs, 8, 2, cls_id=CLS, sep_id=SEP)
    outputs = rng.normal(size=(len(owners), 4)).astype(np.float32)
    expected = loop_pool(outputs, owners, len(docs), mode)
    np.testing.assert_allclose(pool_chunks(outputs, owners, len(docs), mode), expected, rtol=1e-6)
    pooled = tf.function(lambda x, o: pool_chunks_ops(x, o, len(docs), mode))(outputs, owners)
    np.testing.assert_allclose(np.asarray(pooled), expected, rtol=1e-6, atol=1e-6)
    # a document's row changes only when its own chunks change
    bumped = outputs.copy()
    bumped[owners == 3] += 10
    before = pool_chunks(outputs, owners, len(docs), mode)
    changed = np.any(pool_chunks(bumped, owners, len(docs), mode) != before, axis=1)
    assert changed.tolist() == [False, False, False, True]


def test_pooling_rejects_a_document_without_chunks():
    with pytest.raises(ValueError, match=r"do not cover|does not cover"):
        pool_chunks(np.ones((2, 3)), np.array([0, 2]), 3)
    with pytest.raises(ValueError, match="mode must be one of"):
        pool_chunks(np.ones((2, 3)), np.array([0, 1]), 2, mode="sum")


def test_packing_fills_sequences_with_documents_and_separators():
    docs = [np.arange(100, 100 + n) for n in (5, 0, 13, 1, 7)]
    packed = pack_documents(docs, 8, cls_id=CLS, sep_id=SEP)
    assert packed.shape[1] == 8 and np.all(packed[:, 0] == CLS)
    assert np.all(packed[:-1] != PAD)  # no padding except in the last sequence
    stream = [t for d in docs for t in list(d) + [SEP]]
    body = packed[:, 1:].reshape(-1).tolist()
    assert body[: len(stream)] == stream and set(body[len(stream):]) <= {PAD}
    assert len(pack_documents(docs, 8, cls_id=CLS, sep_id=SEP, drop_remainder=True)) == len(stream) // 7
    with pytest.raises(ValueError, match="seq_len=1"):
        pack_documents(docs, 1, cls_id=CLS, sep_id=SEP)
