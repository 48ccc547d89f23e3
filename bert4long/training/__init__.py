"""Training in bert4long: MLM continued pretraining, fine-tuning, resume.

Everything runs through Keras's ``model.fit`` (a `tf.function` step, XLA by
default), with AdamW, warmup + linear decay, gradient clipping and
accumulation, optional mixed precision and per-layer recompute
(``build_transformer_model(..., recompute=True)``). See docs/training.md.
"""
from bert4long.lazy_names import lazy_getattr

# Each public name and the module that defines it (imported on first use).
_MODULES = {
    "build_classifier": "bert4long.training.finetune",
    "build_token_labeller": "bert4long.training.finetune",
    "compile_finetune": "bert4long.training.finetune",
    "encode_labels": "bert4long.training.finetune",
    "TrainingInterrupted": "bert4long.training.interrupt",
    "RunInProgress": "bert4long.training.lock",
    "RunLock": "bert4long.training.lock",
    "TrainingDiverged": "bert4long.training.loop",
    "fit_resumable": "bert4long.training.loop",
    "build_mlm_model": "bert4long.training.mlm",
    "compile_mlm": "bert4long.training.mlm",
    "default_precision": "bert4long.precision",
    "dtype_policy": "bert4long.training.mlm",
    "evaluate_mlm": "bert4long.training.mlm",
    "masker_for": "bert4long.training.mlm",
    "mlm_batches": "bert4long.training.mlm",
    "takes_segment_ids": "bert4long.training.mlm",
    "make_optimizer": "bert4long.training.optim",
    "RunDirectory": "bert4long.training.resume",
}
__all__ = sorted(_MODULES)

__getattr__ = lazy_getattr(__name__, _MODULES)
