"""SavedModel export: int32 signature, loadable with TensorFlow alone, same outputs, beyond n positions."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bert4long.attention.base import softmax_dtype
from bert4long.export import export_saved_model
from bert4long.models import build_transformer_model

LOAD_WITHOUT_BERT4LONG = textwrap.dedent("""
    import os, sys
    sys.path = [p for p in sys.path if p not in ("", os.getcwd()) and "work/main" not in p]
    sys.modules["bert4long"] = None          # any import of bert4long now fails
    try:
        import bert4long  # noqa: F401
        raise SystemExit("bert4long is importable: the test would prove nothing")
    except ImportError:
        pass
    import numpy as np, tensorflow as tf
    data = np.load(sys.argv[2])
    serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    specs = serve.structured_input_signature[1]
    assert specs["token_ids"].dtype == tf.int32 and specs["segment_ids"].dtype == tf.int32, specs
    out = serve(token_ids=tf.constant(data["tokens"]), segment_ids=tf.constant(data["segments"]))
    np.savez(sys.argv[3], **{k: v.numpy() for k, v in out.items()})
""")


@pytest.mark.slow
def test_saved_model_round_trip_beyond_trained_length(tiny_bert, tmp_path, rng):
    config, checkpoint, _ = tiny_bert
    model = build_transformer_model(config, checkpoint, hierarchical_position=True, with_mlm=True, with_pool=True)
    names = export_saved_model(model, str(tmp_path / "served"))
    assert names == ["pooled_output", "mlm_output"]
    tokens = rng.integers(5, 64, (2, 40)).astype("int32")     # 40 > 16 trained positions
    tokens[1, 30:] = 0                                         # padding
    segments = np.zeros_like(tokens)
    np.savez(tmp_path / "in.npz", tokens=tokens, segments=segments)
    script = tmp_path / "load.py"
    script.write_text(LOAD_WITHOUT_BERT4LONG)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "served"), str(tmp_path / "in.npz"),
                             str(tmp_path / "out.npz")], cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    served = np.load(tmp_path / "out.npz")
    pooled, probs = model.predict([tokens, segments], verbose=0)
    np.testing.assert_allclose(served["pooled_output"], pooled, atol=1e-5)
    np.testing.assert_allclose(served["mlm_output"], probs, atol=1e-5)


@pytest.mark.slow
def test_saved_model_takes_the_global_attention_mask(tiny_bert, tmp_path, rng):
    import tensorflow as tf

    config, checkpoint, _ = tiny_bert
    model = build_transformer_model(config, checkpoint, attention="sliding_window", attention_mask_input=True,
                                    attention_config={"window": 4, "global_tokens": [], "max_global_tokens": 2})
    names = export_saved_model(model, str(tmp_path / "served"))
    serve = tf.saved_model.load(str(tmp_path / "served")).signatures["serving_default"]
    assert serve.structured_input_signature[1]["attention_mask"].dtype == tf.int32
    tokens = rng.integers(5, 64, (2, 12)).astype("int32")
    tokens[1, 9:] = 0
    mask = (tokens > 0).astype("int32")
    mask[:, 0] = 2
    mask[0, 10] = 2
    out = serve(token_ids=tf.constant(tokens), segment_ids=tf.constant(tokens * 0), attention_mask=tf.constant(mask))
    expected = model.predict([tokens, tokens * 0, mask], verbose=0)
    np.testing.assert_allclose(out[names[0]].numpy(), expected, atol=1e-5)
    local = model.predict([tokens, tokens * 0, np.minimum(mask, 1)], verbose=0)
    assert np.abs(local - expected).max() > 1e-4   # the served mask input is used


@pytest.mark.slow
def test_saved_model_stores_each_weight_once(tiny_bert, tmp_path):
    """The variables the serving function reads are saved once (`ExportArchive.track(model)` saved the Keras
    variables again beside them: a SavedModel twice the weights)."""
    import tensorflow as tf

    config, checkpoint, _ = tiny_bert
    model = build_transformer_model(config, checkpoint, with_pool=True)
    export_saved_model(model, str(tmp_path / "served"))
    reader = tf.train.load_checkpoint(str(tmp_path / "served" / "variables" / "variables"))
    stored = sum(int(np.prod(shape)) for name, shape in reader.get_variable_to_shape_map().items()
                 if name != "_CHECKPOINTABLE_OBJECT_GRAPH")
    assert stored == sum(int(np.prod(w.shape)) for w in model.trainable_weights)   # was 2x (+ dropout step counters)


@pytest.mark.parametrize("attention", ["full", "chunked"])
def test_bfloat16_export_computes_in_bfloat16_and_serves_float32(tiny_bert, tmp_path, rng, attention):
    """``precision='bfloat16'``: every matmul layer under mixed_bfloat16, attention without a cast to float32 (for
    ``chunked``, in query blocks: 40 tokens in blocks of 16), float32 outputs within bfloat16's rounding of the float32
    model's (its hidden states have unit scale: 8 bits of mantissa give about 0.4% per step)."""
    import tensorflow as tf

    from bert4long.export import in_mixed_bfloat16

    config, checkpoint, _ = tiny_bert
    kernel = {"attention": "chunked", "attention_config": {"block_size": 16}} if attention == "chunked" else {}
    model = build_transformer_model(config, checkpoint, hierarchical_position=True, **kernel)
    copy = in_mixed_bfloat16(model)
    dense = [layer for layer in copy._flatten_layers() if type(layer).__name__ == "Dense"]
    assert dense and {layer.dtype_policy.name for layer in dense} == {"mixed_bfloat16"}
    assert {w.dtype for w in copy.weights if "float" in w.dtype} == {"float32"}   # weights stay float32
    export_saved_model(model, str(tmp_path / "bf16"), precision="bfloat16")
    serve = tf.saved_model.load(str(tmp_path / "bf16")).signatures["serving_default"]
    tokens = rng.integers(5, 64, (2, 40)).astype("int32")
    served = serve(token_ids=tf.constant(tokens), segment_ids=tf.zeros_like(tf.constant(tokens)))["sequence_output"]
    assert served.dtype == tf.float32
    graph = serve.graph.as_graph_def()
    # (chunked's loop body is a function of its own, named after the kernel; its nodes are not)
    upcasts = [f"{function.signature.name}: {node.name}" for function in graph.library.function
               for node in function.node_def
               if node.op == "Cast" and node.attr["SrcT"].type == tf.bfloat16.as_datatype_enum
               and "attention_kernel" in function.signature.name + node.name]
    if softmax_dtype("bfloat16") == "bfloat16":   # (a CPU without bfloat16 units normalises in float32)
        assert not upcasts, f"attention casts bfloat16 (its inputs or probabilities) to float32: {upcasts}"
    reference = model.predict([tokens, np.zeros_like(tokens)], verbose=0)
    difference = np.abs(served.numpy() - reference)
    assert 0 < difference.max() < 0.1 and difference.mean() < 0.02, (difference.max(), difference.mean())
    with np.testing.assert_raises_regex(ValueError, "'float32' or 'bfloat16'"):
        export_saved_model(model, str(tmp_path / "other"), precision="float16")
