"""Read 4x the trained length with a BERT checkpoint in the original Google layout.

Writes a tiny random checkpoint (so it runs anywhere), builds the model with
hierarchical positions and runs masked-LM on a sequence longer than the
checkpoint's position table. Swap in your own bert_config.json / bert_model.ckpt.

    python examples/quickstart.py
"""
import tempfile

import numpy as np

from bert4long.models import build_transformer_model
from bert4long.testing import write_tiny_checkpoint

config_path, checkpoint_path, _ = write_tiny_checkpoint(tempfile.mkdtemp(), max_position_embeddings=32)
model = build_transformer_model(config_path, checkpoint_path, hierarchical_position=True, with_mlm=True)
token_ids = np.random.default_rng(0).integers(5, 64, size=(1, 4 * 32)).astype("int32")
probs = model.predict([token_ids, np.zeros_like(token_ids)], verbose=0)
print(f"trained positions: 32, input length: {token_ids.shape[1]}, MLM output: {probs.shape}")
