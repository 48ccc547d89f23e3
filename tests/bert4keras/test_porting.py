"""The last bert4keras names a ported script needs, against bert4keras 0.11.5 itself.

bert4keras runs in one subprocess (TF_KERAS=1 on tf-keras, as in
test_bert4keras_parity.py) that computes its conditional LayerNormalization on
weights and inputs we hand it and runs its SpTokenizer on a sentencepiece
model trained here; this process compares bert4long's numbers with those.
"""
import itertools
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from data_packages import needs

from bert4long.layers import LayerNormalization, Loss
from bert4long.tokenizers import SpTokenizer, Tokenizer

needs_bert4keras = needs("bert4keras", "tf_keras")

# name -> constructor arguments (bert4keras 0.11.5's names); conditional ones take [x, cond].
NORMS = {
    "plain": {"epsilon": 1e-12},
    "rms_only": {"zero_mean": False, "offset": False},
    "center_only": {"unit_variance": False, "scale": False},
    "constant_scale": {"scale": 2.0, "offset": 0.5},
    "conditional": {"conditional": True},
    "conditional_hidden": {"conditional": True, "hidden_units": 5, "hidden_activation": "relu"},
}
TEXT = (
    "The quick brown fox jumps over the lazy dog. Long documents need long models; "
    "sentencepiece splits words into pieces. 三国演义是一部长篇小说。 Café déjà vu, naïve résumé. "
)
PEER = r"""
import json, sys
import numpy as np
from bert4keras.layers import LayerNormalization
from bert4keras.tokenizers import SpTokenizer
args = json.loads(sys.argv[1])
data = np.load(args["inputs"])
out = {}
for name, kwargs in args["norms"].items():
    layer = LayerNormalization(**kwargs)
    x = data["x"]
    inputs = [x, data["cond"]] if kwargs.get("conditional") else x
    layer(inputs)  # builds every weight
    for attr in ("gamma", "beta"):
        if hasattr(layer, attr):
            getattr(layer, attr).assign(data[f"{name}/{attr}"])
    for attr in ("hidden_dense", "gamma_dense", "beta_dense"):
        if hasattr(layer, attr):
            getattr(layer, attr).kernel.assign(data[f"{name}/{attr}"])
    out[name] = layer(inputs).numpy()
np.savez(args["out"], **out)
tok = SpTokenizer(args["sp_model"])
texts = args["texts"]
result = dict(
    tokenize=[tok.tokenize(t) for t in texts],
    tokenize_maxlen=[tok.tokenize(t, maxlen=6) for t in texts],
    encode=[tok.encode(t) for t in texts],
    encode_pair=[tok.encode(a, b, maxlen=12) for a, b in zip(texts, texts[1:])],
    encode_left=[tok.encode(a, b, maxlen=9, truncate_from="left") for a, b in zip(texts, texts[1:])],
    decode=[tok.decode(tok.encode(t)[0]) for t in texts],
    token_to_id=[tok.token_to_id(p) for p in args["pieces"]],
    id_to_token=[tok.id_to_token(i) for i in range(tok._vocab_size + 2)],
    special_ids=[getattr(tok, f"_token_{r}_id") for r in ("pad", "unk", "mask", "start", "end")],
)
json.dump(result, open(args["out_json"], "w"))
"""


def _train_sentencepiece(path):
    """A small (<= 90 pieces) unigram model in ALBERT's layout: <pad> <unk> [CLS] [SEP] [MASK] first."""
    import sentencepiece

    sentences = [s.strip() + "." for s in (TEXT * 20).split(".") if s.strip()] * 4  # a few KB
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_prefix=str(path), vocab_size=90, pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=1.0,
        hard_vocab_limit=False, minloglevel=2,
    )
    return f"{path}.model"


def _norm_weights(rng, name, kwargs, features=8, cond_dim=6):
    """Random values for every weight the layer has (the conditional ones start at zero otherwise)."""
    weights = {}
    if kwargs.get("scale", True) is True:
        weights["gamma"] = rng.normal(1.0, 0.3, features)
    if kwargs.get("offset", True) is True:
        weights["beta"] = rng.normal(0.0, 0.3, features)
    if kwargs.get("conditional"):
        hidden = kwargs.get("hidden_units")
        if hidden:
            weights["hidden_dense"] = rng.normal(0, 0.5, (cond_dim, hidden))
        for role in ("gamma_dense", "beta_dense"):
            weights[role] = rng.normal(0, 0.5, (hidden or cond_dim, features))
    return {f"{name}/{k}": v.astype("float32") for k, v in weights.items()}


def _set_norm_weights(layer, name, weights):
    for key, value in weights.items():
        if key.startswith(name + "/"):
            attr = getattr(layer, key.split("/", 1)[1])
            (attr.kernel if hasattr(attr, "kernel") else attr).assign(value)


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """bert4keras's outputs for NORMS and for its SpTokenizer on TEXTS."""
    tmp = tmp_path_factory.mktemp("porting")
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2, (2, 5, 8)).astype("float32")
    x[1, 3] = 0.0  # a constant row: variance 0
    cond = rng.normal(0, 1, (2, 6)).astype("float32")
    weights = {}
    for name, kwargs in NORMS.items():
        weights.update(_norm_weights(rng, name, kwargs))
    np.savez(tmp / "inputs.npz", x=x, cond=cond, **weights)
    sp_model = _train_sentencepiece(tmp / "sp")
    texts = [
        "The quick brown fox.", "三国演义，长篇小说。", "Café déjà vu [CLS] and [MASK] as text",
        "unseen ☃ characters 😀", "", "   spaces   everywhere  ", "word " * 20,
    ]
    pieces = ["▁the", "[CLS]", "[SEP]", "[MASK]", "<pad>", "<unk>", "no-such-piece", "[UNK]"]
    args = {"inputs": str(tmp / "inputs.npz"), "out": str(tmp / "peer.npz"), "out_json": str(tmp / "peer.json"),
            "norms": NORMS, "sp_model": sp_model, "texts": texts, "pieces": pieces}
    env = dict(os.environ, TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", PEER, json.dumps(args)], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    with open(tmp / "peer.json") as f:
        tokens = json.load(f)
    return {"x": x, "cond": cond, "weights": weights, "norms": dict(np.load(tmp / "peer.npz")),
            "sp_model": sp_model, "texts": texts, "pieces": pieces, "tokens": tokens}


@pytest.mark.slow
@needs_bert4keras
@pytest.mark.parametrize("name", list(NORMS))
def test_layer_normalization_matches_bert4keras(peer, name):
    kwargs = NORMS[name]
    layer = LayerNormalization(**kwargs)
    inputs = [peer["x"], peer["cond"]] if kwargs.get("conditional") else peer["x"]
    layer(inputs)
    _set_norm_weights(layer, name, peer["weights"])
    ours = np.asarray(layer(inputs))
    # float32 on both sides; observed max difference ~5e-7 (one rounding in the division).
    np.testing.assert_allclose(ours, peer["norms"][name], atol=2e-6, rtol=1e-6)
    assert np.isfinite(ours).all()


@pytest.mark.slow
def test_layer_normalization_serializes_and_runs_in_graph(tmp_path):
    x_in, cond_in = keras.Input((None, 8)), keras.Input((6,))
    norm = LayerNormalization(conditional=True, hidden_units=4, hidden_activation="tanh", epsilon=1e-6, name="cln")
    model = keras.Model([x_in, cond_in], norm([x_in, cond_in]))
    rng = np.random.default_rng(1)
    for w in norm.weights:
        w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))
    x, cond = rng.normal(size=(2, 3, 8)).astype("float32"), rng.normal(size=(2, 6)).astype("float32")
    expected = model.predict([x, cond], verbose=0)

    config = norm.get_config()
    assert LayerNormalization.from_config(config).get_config() == config
    assert LayerNormalization(center=False).offset is False  # bert4keras <= 0.10's argument name
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    # the same weights through the same layers on one processor: bit-identical
    np.testing.assert_array_equal(loaded.predict([x, cond], verbose=0), expected)
    graph = tf.function(lambda a, b: model([a, b]))
    np.testing.assert_allclose(graph(x, cond), expected, atol=1e-6)

    # numpy reference of the conditional formula
    w = {v.path.split("/", 1)[1]: v.numpy() for v in norm.weights}
    h = np.tanh(cond @ w["hidden_dense/kernel"])[:, None]
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    reference = normed * (w["gamma"] + h @ w["gamma_dense/kernel"]) + (w["beta"] + h @ w["beta_dense/kernel"])
    np.testing.assert_allclose(expected, reference, atol=1e-5)


def test_layer_normalization_rejects_a_missing_condition():
    with pytest.raises(ValueError, match=r"\[x, cond\]"):
        LayerNormalization(conditional=True)([np.zeros((1, 2, 4), "float32"), np.zeros((1, 2, 3), "float32")])


def test_loss_layer_sees_integer_inputs_as_floats():
    """bert4keras's task_seq2seq_autotitle loss, verbatim: ``loss * y_mask`` with int32 segment ids."""
    from bert4long.backend import K

    class CrossEntropy(Loss):
        def compute_loss(self, inputs, mask=None):
            y_true, y_mask, y_pred = inputs
            y_true = y_true[:, 1:]  # 目标token_ids
            y_mask = y_mask[:, 1:]  # segment_ids，刚好指示了要预测的部分
            y_pred = y_pred[:, :-1]  # 预测序列，错开一位
            loss = K.sparse_categorical_crossentropy(y_true, y_pred)
            loss = K.sum(loss * y_mask) / K.sum(y_mask)
            return loss

    tokens_in = keras.Input((None,), dtype="int32")
    segments_in = keras.Input((None,), dtype="int32")
    probs = keras.layers.Dense(7, activation="softmax")(keras.layers.Embedding(7, 4)(tokens_in))
    output = CrossEntropy(2)([tokens_in, segments_in, probs])
    model = keras.Model([tokens_in, segments_in], output)
    assert output.dtype == "float32" and model.inputs[1].dtype == "int32"
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    tokens = np.array([[2, 3, 4, 5, 6, 0], [2, 5, 5, 3, 0, 0]], "int32")
    segments = np.array([[0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0]], "int32")

    p = model.predict([tokens, segments], verbose=0)
    picked = np.take_along_axis(p[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    weights = segments[:, 1:].astype("float64")
    reference = -(np.log(picked) * weights).sum() / weights.sum()
    losses = [model.train_on_batch([tokens, segments]) for _ in range(5)]
    assert losses[0] == pytest.approx(reference, rel=1e-5)
    assert losses[-1] < losses[0]


@pytest.mark.slow
@needs_bert4keras
def test_sptokenizer_matches_bert4keras(peer):
    tok = SpTokenizer(peer["sp_model"])
    texts, want = peer["texts"], peer["tokens"]
    assert [tok.tokenize(t) for t in texts] == want["tokenize"]
    assert [tok.tokenize(t, maxlen=6) for t in texts] == want["tokenize_maxlen"]
    assert [list(tok.encode(t)) for t in texts] == want["encode"]
    assert [list(tok.encode(a, b, maxlen=12)) for a, b in itertools.pairwise(texts)] == want["encode_pair"]
    assert [list(tok.encode(a, b, maxlen=9, truncate_from="left")) for a, b in itertools.pairwise(texts)] == \
        want["encode_left"]
    assert [tok.decode(tok.encode(t)[0]) for t in texts] == want["decode"]
    assert [tok.token_to_id(p) for p in peer["pieces"]] == want["token_to_id"]
    assert [tok.id_to_token(i) for i in range(tok.vocab_size + 2)] == want["id_to_token"]
    assert [tok.pad_id, tok.unk_id, tok.mask_id, tok.cls_id, tok.sep_id] == want["special_ids"] == [0, 1, 4, 2, 3]
    # a literal "[CLS]" in the text is text, not the control piece
    assert tok.token_to_id("[CLS]") not in tok.encode("a [CLS] b")[0][1:-1]
    # tokens handed back to encode give the same ids
    assert tok.encode(tok.tokenize(texts[0]))[0] == tok.encode(texts[0])[0]


def test_sptokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no sentencepiece model"):
        SpTokenizer(tmp_path / "missing.model")
    tok = SpTokenizer(_train_sentencepiece(tmp_path / "sp"))
    with pytest.raises(TypeError, match=r"bytes.*decode it first"):
        tok.encode(b"hello")


def test_tokenizer_rejects_bytes_naming_the_fix():
    tok = Tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4})
    for call in (lambda t: tok.encode(t), lambda t: tok.encode("hello", t), tok.tokenize, tok.content_ids):
        with pytest.raises(TypeError, match=r"got bytes: decode it first, e\.g\. text\.decode\('utf-8'\)"):
            call(b"hello")
    assert tok.encode("hello")[0] == [2, 4, 3]


LOAD_AFTER_IMPORT = r"""
import sys
import numpy as np
import bert4long, keras
bert4long.register_keras_classes()
model = keras.models.load_model(sys.argv[1])
tokens = np.load(sys.argv[2])
np.save(sys.argv[3], model.predict([tokens, np.zeros_like(tokens)], verbose=0))
print(sorted(m for m in sys.modules if m.startswith("bert4long")))
"""


@pytest.mark.slow
def test_model_saved_after_training_imports_loads_after_import_bert4long(tiny_bert, tmp_path):
    """A classifier built and compiled by `bert4long.training` (chunk pooling, a chunked
    attention kernel, AdamW with its schedule) loads in a fresh process that ran
    ``import bert4long`` and ``bert4long.register_keras_classes()``."""
    from bert4long.training import build_classifier, compile_finetune, make_optimizer

    config_path, checkpoint_path, _ = tiny_bert
    model = build_classifier(config_path, checkpoint_path, num_labels=2, pooling="chunks",
                             hierarchical_position=True, attention="chunked",
                             attention_config={"block_size": 4})
    compile_finetune(model, make_optimizer(1e-3, total_steps=4))  # the compile config is saved too
    tokens = np.random.default_rng(0).integers(5, 60, (2, 2, 12)).astype("int32")
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "tokens.npy", tokens)
    run = subprocess.run(
        [sys.executable, "-c", LOAD_AFTER_IMPORT, str(tmp_path / "model.keras"), str(tmp_path / "tokens.npy"),
         str(tmp_path / "out.npy")],
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True, text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    expected = model.predict([tokens, np.zeros_like(tokens)], verbose=0)
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=1e-5)


def test_node_api_answers_keras_2_calls_on_a_shared_layer(tmp_path):
    from bert4long.layers import Add

    x, y = keras.Input((3,)), keras.Input((3,))
    add = Add(name="shared-sum")
    first, second = add([x, x]), add([x, y])
    assert add.get_output_at(0) is first and add.get_output_at(-1) is second
    assert add.get_input_at(1)[1] is y and add.get_input_shape_at(1) == [(None, 3), (None, 3)]
    assert add.get_output_shape_at(-1) == (None, 3)
    with pytest.raises(ValueError, match="called 2 time.*node_index 2 is out of range"):
        add.get_output_at(2)
    model = keras.Model([x, y], second)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.get_layer("shared-sum"), Add)
    ones = np.ones((1, 3), "float32")
    np.testing.assert_allclose(loaded.predict([ones, 2 * ones], verbose=0), 3 * ones)


def test_encoder_layers_minus_two_is_the_last_residual_sum():
    from bert4long.models import build_transformer_model

    bert = build_transformer_model(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=16, max_position=16, return_keras_model=False)
    layer = bert.model.layers[-2]
    assert layer.name == "Transformer-1-FeedForward-Add"
    # the final LayerNorm reads exactly this tensor
    assert bert.model.layers[-1].input is layer.get_output_at(-1)
