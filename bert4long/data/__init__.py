"""Long-document data: truncation, chunking and pooling, MLM masking, packing, batches by length,
and ``tf.data`` pipelines from folders of text to batches. See docs/data.md."""
from bert4long.lazy_names import lazy_getattr

# Each public name and the module that defines it (imported on first use: masking and the pipelines start
# TensorFlow, and the pipelines refuse on another Keras backend; the readers, chunking and truncation do not).
_MODULES = {
    "Corpus": "bert4long.data.corpus",
    "MLMMasker": "bert4long.data.masking",
    "bucket_lengths": "bert4long.data.length_batches",
    "chunk_documents": "bert4long.data.chunking",
    "chunk_spans": "bert4long.data.chunking",
    "classification_dataset": "bert4long.data.pipeline",
    "default_bucket_lengths": "bert4long.data.pipeline",
    "document_rows": "bert4long.data.rows",
    "epoch_permutation": "bert4long.data.order",
    "example_order": "bert4long.data.order",
    "hold_out": "bert4long.data.holdout",
    "label_ids": "bert4long.data.pipeline",
    "list_files": "bert4long.data.corpus",
    "load_corpus": "bert4long.data.corpus",
    "mlm_dataset": "bert4long.data.pipeline",
    "pack_documents": "bert4long.data.packing",
    "pack_for": "bert4long.data.packing",
    "pool_chunks": "bert4long.data.pooling",
    "pool_chunks_ops": "bert4long.data.pooling",
    "read_documents": "bert4long.data.corpus",
    "read_texts": "bert4long.data.corpus",
    "sorted_batches": "bert4long.data.length_batches",
    "training_batches": "bert4long.data.length_batches",
    "truncate": "bert4long.data.truncation",
}
__all__ = sorted(_MODULES)

__getattr__ = lazy_getattr(__name__, _MODULES)
