"""Attention in bfloat16 and the key mask made inside the matmul, against NumPy's float64 softmax attention.

`softmax_attention` folds a key-padding mask into ``q @ k`` (`with_key_mask_column`) and keeps bfloat16 scores in
bfloat16 on TensorFlow and PyTorch (`softmax_dtype`); so does the ``chunked`` kernel's inference pass on bfloat16
inputs, a block of queries at a time (that on TensorFlow it casts nothing to float32: `tests/export/test_export.py`). Each
backend runs in a child process (this file as a script, ``KERAS_BACKEND`` set). Tolerances: float32 1e-5; bfloat16
probabilities within 1% of float64's (one bfloat16 step is 0.4%; a softmax summed in bfloat16, as JAX's, is 7% off at
8,192 keys), outputs within 0.05 of unit-scale values.
"""
import json
import subprocess
import sys

import numpy as np
import pytest
from paths import ROOT, child_env


def inputs():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 300, 2, 8)) for _ in range(3))
    keep = np.ones((2, 300), bool)
    keep[0, 250:] = False
    keep[1, :] = False               # a row of padding only: every key masked, attention spread evenly
    scores = rng.standard_normal((2, 8192)) * 3
    return q, k, v, keep, scores


def reference_attention(q, k, v, keep):
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(keep[:, None, None, :], scores, -1e12)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", probs / probs.sum(-1, keepdims=True), v)


def child(out):
    import keras

    from bert4long.attention.base import masked_softmax, softmax_attention
    from bert4long.attention.chunked import ChunkedAttention

    q, k, v, keep, scores = inputs()
    mask = keep[:, None, None, :]
    numbers = {}
    for dtype in ("float32", "bfloat16"):
        tensors = [keras.ops.cast(x, dtype) for x in (q, k, v)]
        attention = keras.ops.cast(softmax_attention(*tensors, mask), "float32")
        numbers[f"attention_{dtype}"] = keras.ops.convert_to_numpy(attention).tolist()
        policy = {"float32": "float32", "bfloat16": "mixed_bfloat16"}[dtype]   # (as a model's kernel gets it)
        chunked = ChunkedAttention(block_size=128, dtype=policy)(*tensors, keep)   # 300 queries: a padded last block
        numbers[f"chunked_dtype_{dtype}"] = keras.backend.standardize_dtype(chunked.dtype)
        numbers[f"chunked_{dtype}"] = keras.ops.convert_to_numpy(keras.ops.cast(chunked, "float32")).tolist()
    keep_scores = np.ones(scores.shape, bool)
    keep_scores[:, -100:] = False
    rounded = keras.ops.cast(scores, "bfloat16")
    numbers["scores_bfloat16"] = keras.ops.convert_to_numpy(keras.ops.cast(rounded, "float32")).tolist()
    probs = masked_softmax(rounded, keep_scores)
    numbers["softmax_bfloat16"] = keras.ops.convert_to_numpy(keras.ops.cast(probs, "float32")).tolist()
    with open(out, "w") as f:
        json.dump(numbers, f)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_attention_against_float64(backend, tmp_path):
    pytest.importorskip(backend, reason=f"{backend} is not installed")
    out = tmp_path / "numbers.json"
    env = child_env(KERAS_BACKEND=backend)
    run = subprocess.run([sys.executable, __file__, str(out)], env=env, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    numbers = {name: np.array(value) for name, value in json.loads(out.read_text()).items()}
    q, k, v, keep, scores = inputs()
    expected = reference_attention(q, k, v, keep)
    np.testing.assert_allclose(numbers["attention_float32"], expected, atol=1e-5)
    np.testing.assert_allclose(numbers["attention_bfloat16"], expected, atol=0.05)
    # (the row of padding only is left out: chunked spreads it over its blocks' padding too; nothing reads it)
    np.testing.assert_allclose(numbers["chunked_float32"][0], expected[0], atol=1e-5)
    np.testing.assert_allclose(numbers["chunked_bfloat16"][0], expected[0], atol=0.05)
    assert (numbers["chunked_dtype_float32"], numbers["chunked_dtype_bfloat16"]) == ("float32", "bfloat16")
    scores = numbers["scores_bfloat16"]     # the softmax's input: already rounded to bfloat16
    kept = np.exp(scores[:, :-100] - scores[:, :-100].max(-1, keepdims=True))
    kept /= kept.sum(-1, keepdims=True)
    probs = numbers["softmax_bfloat16"]
    assert np.all(probs[:, -100:] == 0)
    assert np.max(np.abs(probs[:, :-100] - kept) / kept) < 0.01, backend


if __name__ == "__main__":
    child(sys.argv[1])
