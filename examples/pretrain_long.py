"""Continued MLM pretraining at 4x the trained length, from Python (what `bert4long pretrain` does).

Runs on the built-in tiny checkpoint so it finishes in seconds; point CONFIG/CHECKPOINT/VOCAB at a real
model (and DOCUMENTS at real text) for real work. Interrupt it and run it again: it resumes.

    python examples/pretrain_long.py
"""
import os
import tempfile

from bert4long.data.packing import pack_documents
from bert4long.testing import write_tiny_checkpoint
from bert4long.tokenizers import Tokenizer
from bert4long.training import build_mlm_model, compile_mlm, evaluate_mlm, fit_resumable, make_optimizer, masker_for, mlm_batches

OUT = os.path.join(tempfile.gettempdir(), "bert4long_pretrain_long")
CONFIG, CHECKPOINT, VOCAB = write_tiny_checkpoint(os.path.join(OUT, "tiny"))   # 16 trained positions
SEQ_LEN, STEPS = 64, 40                                                          # 4x the trained length
DOCUMENTS = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(300)) for i in range(20)]

tokenizer = Tokenizer(VOCAB, do_lower_case=True)
sequences = pack_documents([tokenizer.content_ids(d) for d in DOCUMENTS], SEQ_LEN,
                           cls_id=tokenizer.token_to_id("[CLS]"), sep_id=tokenizer.token_to_id("[SEP]"))
masker = masker_for(tokenizer, SEQ_LEN)
model, builder, _ = build_mlm_model(CONFIG, CHECKPOINT, hierarchical_position=True, recompute=True)
compile_mlm(model, make_optimizer(1e-3, STEPS, warmup_steps=4), jit_compile=False)
print("before:", evaluate_mlm(model, sequences[:4], masker, batch_size=2))
fit_resumable(model, lambda start: mlm_batches(sequences, masker, 4, start_step=start), steps=STEPS,
              out_dir=OUT, config={"seq_len": SEQ_LEN}, save_every=10, verbose=0)
print("after: ", evaluate_mlm(model, sequences[:4], masker, batch_size=2))
builder.save_weights_as_checkpoint(os.path.join(OUT, "bert_model.ckpt"))     # Google layout, 16 position rows
print("written:", os.path.join(OUT, "bert_model.ckpt"))
