"""Issue 18 point 2: out-of-range inputs are errors in every execution mode, XLA and the SavedModel included."""
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bert4long.checkpoints.layout import check_vocab_size
from bert4long.export import export_saved_model
from bert4long.models import build_transformer_model

GOOD = np.array([[2, 5, 6, 3], [2, 7, 3, 0]], "int32")   # tiny model: 64 ids, 2 segments, 16 positions


def bad_inputs():
    """(what, [tokens, segments], message pattern of the in-graph assertion) for the 4-token batch above."""
    token_high, token_negative, segment = GOOD.copy(), GOOD.copy(), np.zeros_like(GOOD)
    token_high[0, 1] = 64
    token_negative[1, 2] = -1
    segment[1, 1] = 2
    long = np.full((2, 40), 5, "int32")
    return [
        ("token id 64", [token_high, np.zeros_like(GOOD)], "Embedding-Token", r"'Input-Token' holds 64"),
        ("token id -1", [token_negative, np.zeros_like(GOOD)], "Embedding-Token", r"'Input-Token' holds -1"),
        ("segment id 2", [GOOD, segment], "Embedding-Segment", r"'Input-Segment' holds 2"),
        ("40 > 16 tokens", [long, np.zeros_like(long)], "longer than the 16 positions", r"40 tokens per sequence"),
    ]


CASES = bad_inputs()
IDS = [case[0] for case in CASES]


@pytest.fixture(scope="module")
def encoder(tiny_bert):
    config, checkpoint, _ = tiny_bert
    return build_transformer_model(config, checkpoint)


@pytest.mark.parametrize("what,x,graph_message,_", CASES, ids=IDS)
def test_eager_and_tf_function_refuse(encoder, what, x, graph_message, _):
    for call in (encoder, tf.function(encoder, reduce_retracing=True)):
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=graph_message):
            call(x)


@pytest.mark.parametrize("what,x,_,message", CASES, ids=IDS)
def test_xla_fit_evaluate_predict_refuse(encoder, what, x, _, message):
    encoder.compile(loss="mse", jit_compile=True)
    y = np.zeros(x[0].shape + (16,), "float32")
    for run in (lambda: encoder.fit(x, y, verbose=0), lambda: encoder.evaluate(x, y, verbose=0),
                lambda: encoder.predict(x, verbose=0), lambda: encoder.predict_on_batch(x),
                lambda: encoder.train_on_batch(x, y), lambda: encoder.fit(tf.data.Dataset.from_tensors((
                    tuple(x), y)), verbose=0)):
        with pytest.raises(ValueError, match=message):
            run()


@pytest.mark.slow
def test_xla_steps_still_run_and_agree(encoder):
    """The checked path reaches Keras's compiled step: XLA predict equals the eager call, fit trains."""
    x = [GOOD, np.zeros_like(GOOD)]
    expected = encoder(x).numpy()
    encoder.compile(loss="mse", optimizer="sgd", jit_compile=True, steps_per_execution=2)
    np.testing.assert_allclose(encoder.predict(x, verbose=0), expected, atol=1e-5)
    y = np.zeros(GOOD.shape + (16,), "float32")
    data = tf.data.Dataset.from_tensor_slices((tuple(x), y)).batch(1)
    history = encoder.fit(data, epochs=1, verbose=0).history
    assert np.isfinite(history["loss"][0])
    encoder.compile(loss="mse", jit_compile=False)   # the uncompiled-by-XLA path asserts in the graph
    with pytest.raises(tf.errors.InvalidArgumentError, match="Embedding-Token"):
        encoder.predict(CASES[0][1], verbose=0)


def test_gathered_positions_refused(tiny_bert):
    config, checkpoint, _ = tiny_bert
    model = build_transformer_model(config, checkpoint, with_mlm="linear", gathered_mlm=True)
    positions = np.array([[1, 3], [2, 0]], "int32")
    x = [GOOD, np.zeros_like(GOOD), positions]
    expected = model(x).numpy()
    positions[0, 1] = 4     # the sequence has 4 tokens: positions 0..3
    with pytest.raises(tf.errors.InvalidArgumentError, match="MLM-Gather"):
        model(x)
    model.compile(loss="mse", jit_compile=True)
    with pytest.raises(ValueError, match=r"'Input-Masked-Positions' holds 4 \(example 0, position 1\)"):
        model.predict(x, verbose=0)
    x[2] = np.array([[1, 3], [2, 3]], "int32")
    assert model.predict(x, verbose=0).shape == expected.shape


def test_users_own_xla_function_gives_nan_not_clamped_rows(encoder):
    """Inside a jit_compile function bert4long does not control, XLA drops assertions: the bad example is NaN."""
    call = tf.function(lambda x: encoder(x), jit_compile=True)
    for (what, x, _, _), bad in zip(CASES[:3], (0, 1, 1)):
        out = call(x).numpy()
        good = 1 - bad
        assert np.isnan(out[bad]).all(), what
        np.testing.assert_allclose(out[good], encoder([x[0][good:good + 1], x[1][good:good + 1]])[0], atol=1e-5)


def test_vocab_size_must_match_the_checkpoint(tiny_bert):
    from bert4long.checkpoints.source import resolve_source

    config, checkpoint, _ = tiny_bert
    check_vocab_size(64, resolve_source(checkpoint, config).model_vocab_size())
    with pytest.raises(ValueError, match=r"vocab.txt has 30522 entries but the model's vocabulary has 64 \(rows of"):
        check_vocab_size(30522, resolve_source(checkpoint, config).model_vocab_size(), "vocab.txt")
    with pytest.raises(ValueError, match="has 60 entries .* has 64 \\(vocab_size in"):
        check_vocab_size(60, resolve_source(None, config).model_vocab_size())


SERVE_WITHOUT_BERT4LONG = textwrap.dedent("""
    import json, os, sys
    sys.path = [p for p in sys.path if p not in ("", os.getcwd()) and "work/main" not in p and "work/wt" not in p]
    sys.modules["bert4long"] = None
    import numpy as np, tensorflow as tf
    serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    def run(tokens, segments):
        try:
            out = serve(token_ids=tf.constant(tokens, tf.int32), segment_ids=tf.constant(segments, tf.int32))
            return "ok " + json.dumps(out["sequence_output"].numpy().tolist())
        except tf.errors.InvalidArgumentError as error:
            return "error " + error.message
    good = [[2, 5, 6, 3]]
    print(json.dumps({
        "good": run(good, [[0, 0, 0, 0]]),
        "token": run([[2, 64, 6, 3]], [[0, 0, 0, 0]]),
        "negative": run([[2, -1, 6, 3]], [[0, 0, 0, 0]]),
        "segment": run(good, [[0, 2, 0, 0]]),
        "batch": run(good, [[0, 0, 0, 0], [0, 0, 0, 0]]),
        "length": run([[5] * 13], [[0] * 13]),
    }))
""")


@pytest.mark.slow
def test_saved_model_refuses_what_it_cannot_serve(tiny_bert, tmp_path):
    import json

    config, checkpoint, _ = tiny_bert
    model = build_transformer_model(config, checkpoint, hierarchical_position=True)
    with pytest.raises(ValueError, match="more than the 256 positions"):
        export_saved_model(model, str(tmp_path / "too_long"), max_length=257)
    export_saved_model(model, str(tmp_path / "served"), max_length=12)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "served").st_mode) == 0o777 & ~umask
    script = tmp_path / "serve.py"
    script.write_text(SERVE_WITHOUT_BERT4LONG)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, str(script), str(tmp_path / "served")], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    assert answers["good"].startswith("ok ")
    np.testing.assert_allclose(json.loads(answers["good"][3:]), model([GOOD[:1], 0 * GOOD[:1]]), atol=1e-5)
    assert "Embedding-Token" in answers["token"] and answers["token"].startswith("error")
    assert "Embedding-Token" in answers["negative"]
    assert "Embedding-Segment" in answers["segment"]
    assert "segment_ids must have the shape of token_ids" in answers["batch"]
    assert "longer than the 12 tokens" in answers["length"]


def test_checked_model_survives_keras_save_and_load(tmp_path):
    import keras

    model = build_transformer_model(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=16, max_position=8)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert type(loaded).__name__ == "CheckedModel"
    x = [np.array([[1, 2, 3]], "int32"), np.zeros((1, 3), "int32")]
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(loaded(x), model(x))
    loaded.compile(loss="mse", jit_compile=True)
    with pytest.raises(ValueError, match=r"'Input-Token' holds 12 \(example 0, position 1\), outside \[0, 10\)"):
        loaded.predict([np.array([[1, 12, 3]], "int32"), x[1]], verbose=0)


def test_cli_refuses_another_vocab_size_and_an_export_cap_above_the_table(tiny_bert, tmp_path, capsys):
    from bert4long.cli import main

    config, checkpoint, vocab = tiny_bert
    bigger = tmp_path / "vocab.txt"   # the case: a vocab.txt of another model (here 100 entries, model 64)
    with open(vocab, encoding="utf-8") as f:
        bigger.write_text(f.read() + "".join(f"extra{i}\n" for i in range(36)))
    (tmp_path / "train.jsonl").write_text('{"text": "w1 w2", "label": "a"}\n')
    (tmp_path / "labels.txt").write_text("a\nb\n")
    code = main(["finetune", "--checkpoint", checkpoint, "--config", config, "--vocab", str(bigger), "--train",
                 str(tmp_path / "train.jsonl"), "--labels", str(tmp_path / "labels.txt"), "--seq-len", "16",
                 "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 1
    assert "has 100 entries but the model's vocabulary has 64" in capsys.readouterr().err
    code = main(["export", "--checkpoint", checkpoint, "--config", config, "--max-length", "17", "--out",
                 str(tmp_path / "served")])
    assert code == 1
    assert "max_length=17 is more than the 16 positions" in capsys.readouterr().err
    assert not (tmp_path / "served").exists()


def test_custom_position_ids_are_checked_not_the_length():
    from bert4long.models.checked import check_inputs

    model = build_transformer_model(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=16, max_position=8, custom_position_ids=True)
    tokens = np.ones((1, 12), "int32")
    positions = np.arange(12, dtype="int32")[None] % 8     # 12 tokens, positions repeat: placeable
    check_inputs(model, [tokens, 0 * tokens, positions])
    positions[0, 5] = 8
    with pytest.raises(ValueError, match=r"'Input-Position' holds 8 \(example 0, position 5\), outside \[0, 8\)"):
        check_inputs(model, [tokens, 0 * tokens, positions])
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the 8 positions"):
        model([tokens, 0 * tokens, positions])
