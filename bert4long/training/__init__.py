"""Training in bert4long: MLM continued pretraining, fine-tuning, resume.

Everything runs through Keras's ``model.fit`` (a `tf.function` step, XLA by
default), with AdamW, warmup + linear decay, gradient clipping and
accumulation, optional mixed precision and per-layer recompute
(``build_transformer_model(..., recompute=True)``). See docs/training.md.
"""
from bert4long.training.finetune import (
    build_classifier,
    build_token_labeller,
    compile_finetune,
    encode_labels,
    token_label_weights,
)
from bert4long.training.interrupt import TrainingInterrupted
from bert4long.training.lock import RunInProgress, RunLock
from bert4long.training.loop import TrainingDiverged, fit_resumable
from bert4long.training.mlm import (
    build_mlm_model,
    compile_mlm,
    default_precision,
    dtype_policy,
    evaluate_mlm,
    masker_for,
    mlm_batches,
    takes_segment_ids,
)
from bert4long.training.optim import make_optimizer
from bert4long.training.resume import RunDirectory

__all__ = [
    "RunDirectory",
    "RunInProgress",
    "RunLock",
    "TrainingDiverged",
    "TrainingInterrupted",
    "build_classifier",
    "build_mlm_model",
    "build_token_labeller",
    "compile_finetune",
    "compile_mlm",
    "default_precision",
    "dtype_policy",
    "encode_labels",
    "evaluate_mlm",
    "fit_resumable",
    "make_optimizer",
    "masker_for",
    "mlm_batches",
    "takes_segment_ids",
    "token_label_weights",
]
