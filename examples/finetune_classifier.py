"""Long-document classification two ways: [CLS] of one hierarchical-position sequence, and the mean
of the [CLS] states of a document's windows (chunk-and-pool).

Runs on the built-in tiny checkpoint with a synthetic two-class task in seconds:

    python examples/finetune_classifier.py
"""
import os
import tempfile

import numpy as np

from bert4long.data.chunking import chunk_documents
from bert4long.testing import write_tiny_checkpoint
from bert4long.training import build_classifier, compile_finetune, make_optimizer

CONFIG, CHECKPOINT, _ = write_tiny_checkpoint(os.path.join(tempfile.gettempdir(), "bert4long_tiny_cls"))
rng = np.random.default_rng(0)
labels = rng.integers(0, 2, 64).astype("int32")
# Class 1 documents use tokens 30-59, class 0 tokens 5-34; 60 tokens each (the model was trained on 16).
documents = [rng.integers(5 + 25 * y, 35 + 25 * y, 60) for y in labels]

long_ids = np.zeros((64, 62), "int32")
for i, doc in enumerate(documents):
    long_ids[i, : len(doc) + 2] = [2, *doc, 3]
model = build_classifier(CONFIG, CHECKPOINT, num_labels=2, hierarchical_position=True)
compile_finetune(model, make_optimizer(2e-3, 40, warmup_steps=4), jit_compile=False)
history = model.fit([long_ids, long_ids * 0], labels, batch_size=8, epochs=5, verbose=0)
print(f"[CLS] of 62 tokens: train accuracy {history.history['accuracy'][-1]:.0%}")

windows, _, owner = chunk_documents(documents, maxlen=16, cls_id=2, sep_id=3)
chunks = np.zeros((64, 5, 16), "int32")
for doc in range(64):
    mine = windows[owner == doc][:5]
    chunks[doc, : len(mine)] = mine
model = build_classifier(CONFIG, CHECKPOINT, num_labels=2, pooling="chunks")
compile_finetune(model, make_optimizer(2e-3, 40, warmup_steps=4), jit_compile=False)
history = model.fit([chunks, chunks * 0], labels, batch_size=8, epochs=5, verbose=0)
print(f"mean of 5 windows' [CLS]: train accuracy {history.history['accuracy'][-1]:.0%}")
