"""Long-document data: truncation, chunking and pooling, MLM masking, packing,
and ``tf.data`` pipelines from folders of text to batches. See docs/data.md."""
from bert4long.data.chunking import chunk_documents, chunk_spans
from bert4long.data.corpus import (
    Corpus,
    list_files,
    load_corpus,
    read_documents,
    read_texts,
)
from bert4long.data.masking import MLMMasker
from bert4long.data.order import epoch_permutation, example_order
from bert4long.data.packing import pack_documents
from bert4long.data.pipeline import (
    classification_dataset,
    default_bucket_lengths,
    label_ids,
    mlm_dataset,
)
from bert4long.data.pooling import pool_chunks, pool_chunks_ops
from bert4long.data.truncation import truncate

__all__ = [
    "Corpus",
    "MLMMasker",
    "chunk_documents",
    "chunk_spans",
    "classification_dataset",
    "default_bucket_lengths",
    "epoch_permutation",
    "example_order",
    "label_ids",
    "list_files",
    "load_corpus",
    "mlm_dataset",
    "pack_documents",
    "pool_chunks",
    "pool_chunks_ops",
    "read_documents",
    "read_texts",
    "truncate",
]
