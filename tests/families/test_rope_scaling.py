"""RoPE scaling (linear, dynamic NTK, YaRN) equals transformers' PyTorch ModernBERT.

The folders are written by transformers' own ``ModernBertModel`` (tiny random models, every weight perturbed:
hidden 32, 2 layers, a global then a local one of window 8, 16 trained positions) with scaled
``rope_parameters`` per layer type; inputs run past ``original_max_position_embeddings`` (40 tokens) so that
the scaling matters, and ``dynamic`` also runs below it. The frequencies are compared with
``transformers.modeling_rope_utils`` itself. The other spellings of a config.json (the older ``rope_scaling``
key as transformers 4.x wrote it, one layer type left out, ``type`` for ``rope_type``) are edits of a folder
transformers saved, compared with transformers 5 loading the edited folder; what transformers refuses is
checked to be refused by both. Tolerances: 1e-5 max abs difference on hidden states at real tokens (float32
rounding); 1e-6 relative on the inverse frequencies.
"""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import keras  # noqa: E402
from torch_reference import perturbed  # noqa: E402

from bert4long.attention.positions import RotateHalfPositions  # noqa: E402
from bert4long.models import build_transformer_model  # noqa: E402
from bert4long.models.modernbert import ModernBERT  # noqa: E402
from bert4long.ops.positions import rope_frequencies  # noqa: E402
from bert4long.rope_scaling import resolve_rope_scaling  # noqa: E402

TOLERANCE = 1e-5
VOCAB, PAD, TRAINED = 99, 0, 16
TINY = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 2, "local_attention": 8, "global_attn_every_n_layers": 2, "pad_token_id": PAD,
        "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2,
        "max_position_embeddings": TRAINED, "global_rope_theta": 1000.0, "local_rope_theta": 300.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": TRAINED}
# (rope_parameters per layer type, max_position_embeddings, lengths in the order transformers runs them)
FOLDERS = {
    "linear": ({"full_attention": {"rope_type": "linear", "factor": 2.5}, "sliding_attention": None}, TRAINED, [40]),
    "dynamic": ({"full_attention": {"rope_type": "dynamic", "factor": 2.0},
                 "sliding_attention": {"rope_type": "dynamic", "factor": 3.0}}, TRAINED, [12, 40]),
    "yarn": ({"full_attention": {**YARN, "beta_fast": 8.0, "beta_slow": 0.5, "mscale": 2.0, "mscale_all_dim": 0.5},
              "sliding_attention": {**YARN, "attention_factor": 1.2, "beta_slow": None}}, 4 * TRAINED, [40]),
}


def torch_model(rope_parameters=None, seed=0, **overrides):
    """A tiny transformers ModernBertModel with perturbed weights (the same weights for a seed)."""
    torch.manual_seed(seed)
    thetas = {"full_attention": TINY["global_rope_theta"], "sliding_attention": TINY["local_rope_theta"]}
    if rope_parameters is not None:
        overrides["rope_parameters"] = {t: {**(p or {"rope_type": "default"}), "rope_theta": thetas[t]}
                                        for t, p in rope_parameters.items()}
    config = transformers.ModernBertConfig(**{**TINY, **overrides}, attn_implementation="eager")
    return perturbed(transformers.ModernBertModel(config), seed + 1)


def token_ids(length, seed=0):
    """Two sequences; the second is padded after two thirds of ``length``."""
    ids = np.random.default_rng(seed).integers(3, VOCAB, size=(2, length)).astype("int32")
    ids[1, 2 * length // 3:] = PAD
    return ids


def reference(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(ids != PAD).long())
    return out.last_hidden_state.numpy()


def max_diff(ours, theirs, ids):
    return float(np.abs(np.asarray(ours) - theirs)[ids != PAD].max())


@pytest.mark.parametrize("dim", [16, 64])
@pytest.mark.parametrize("scaling", [{"rope_type": "linear", "factor": 2.5}, {"rope_type": "dynamic", "factor": 2.0},
                                     YARN, {**YARN, "beta_fast": 8.0, "beta_slow": 0.5, "attention_factor": 1.2},
                                     {**YARN, "mscale": 2.0, "mscale_all_dim": 0.5}],
                         ids=["linear", "dynamic", "yarn", "yarn-betas", "yarn-mscale"])
def test_frequencies_equal_transformers(scaling, dim):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.ModernBertConfig(hidden_size=2 * dim, num_attention_heads=2, max_position_embeddings=TRAINED,
                                           rope_parameters={"full_attention": {**scaling, "rope_theta": 1000.0},
                                                            "sliding_attention": {"rope_type": "default"}})
    lengths = [12, TRAINED, 40] if scaling["rope_type"] == "dynamic" else [None]
    for length in lengths:
        extra = {} if length is None else {"seq_len": torch.tensor(length)}
        expected, expected_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, layer_type="full_attention",
                                                                              **extra)
        ours, factor = rope_frequencies(dim, 1000.0, resolve_rope_scaling(scaling, TRAINED), length)
        np.testing.assert_allclose(np.asarray(ours), expected.numpy(), rtol=1e-6, atol=0)
        assert factor == pytest.approx(expected_factor, rel=1e-12)
    unscaled, _ = rope_frequencies(dim, 1000.0)
    assert np.abs(np.asarray(ours) / unscaled - 1).max() > 0.1   # the scaling moves them


@pytest.mark.parametrize("kind", [pytest.param(kind, marks=pytest.mark.slow) if kind == "dynamic" else kind
                                  for kind in sorted(FOLDERS)])   # dynamic: 3 lengths
def test_scaled_folders_equal_transformers(tmp_path, kind):
    """Each layer type's ``rope_parameters`` load; outputs equal transformers' beyond (and below) the trained length."""
    rope_parameters, max_position, lengths = FOLDERS[kind]
    reference_model = torch_model(rope_parameters, max_position_embeddings=max_position)
    reference_model.save_pretrained(str(tmp_path))
    model = build_transformer_model(checkpoint_path=str(tmp_path))
    unscaled = build_transformer_model(checkpoint_path=str(tmp_path), rope_scaling=None)
    for length in lengths:
        ids = token_ids(length)
        expected = reference(reference_model, ids)
        assert max_diff(model([ids]), expected, ids) <= TOLERANCE, (kind, length)
        gap = max_diff(unscaled([ids]), expected, ids)
        assert gap > 1e-3 if length > TRAINED else gap <= TOLERANCE, (kind, length, gap)


@pytest.mark.parametrize("scaling", [{"rope_type": "yarn", "factor": 4.0}, {"rope_type": "dynamic", "factor": 2.0},
                                     {"full_attention": {"rope_type": "linear", "factor": 3.0}}],
                         ids=["yarn", "dynamic", "linear-global-only"])
def test_rope_scaling_argument_equals_transformers_and_saves_back(tmp_path, scaling):
    """``rope_scaling=`` stretches an unscaled folder as ``ModernBertConfig(rope_scaling=...)`` /
    ``rope_parameters`` does; the folder saved back loads in transformers with the same numbers."""
    base = torch_model()
    base.save_pretrained(str(tmp_path / "base"))
    if "rope_type" in scaling:
        stretched = torch_model(rope_scaling=dict(scaling))
    else:
        stretched = torch_model({"full_attention": scaling["full_attention"], "sliding_attention": None})
    builder = build_transformer_model(checkpoint_path=str(tmp_path / "base"), rope_scaling=scaling,
                                      return_keras_model=False)
    ids = token_ids(40, seed=1)
    expected = reference(stretched, ids)
    assert max_diff(builder.model([ids]), expected, ids) <= TOLERANCE
    assert max_diff(builder.model([ids]), reference(base, ids), ids) > 1e-3
    builder.save_weights_as_checkpoint(str(tmp_path / "back"))
    reloaded = transformers.ModernBertModel.from_pretrained(str(tmp_path / "back"), attn_implementation="eager")
    assert max_diff(builder.model([ids]), reference(reloaded.eval(), ids), ids) <= TOLERANCE
    with open(tmp_path / "back" / "config.json") as f:
        written = json.load(f)["rope_parameters"]["full_attention"]["rope_type"]
    assert written == scaling.get("rope_type", "linear")


@pytest.mark.slow
def test_dynamic_under_xla_and_keras_round_trip(tmp_path):
    """One XLA-compiled graph of unknown length follows the length (no Python branch on it); a .keras file keeps
    the scaling."""
    import tensorflow as tf

    rope_parameters, _, _ = FOLDERS["dynamic"]
    reference_model = torch_model(rope_parameters)
    reference_model.save_pretrained(str(tmp_path))
    model = build_transformer_model(checkpoint_path=str(tmp_path))
    compiled = tf.function(lambda ids: model(ids), jit_compile=True,
                           input_signature=[tf.TensorSpec([None, None], tf.int32)])
    model.save(str(tmp_path / "model.keras"))
    reloaded = keras.models.load_model(str(tmp_path / "model.keras"))
    for length in (12, 40):
        ids = token_ids(length, seed=2)
        expected = reference(reference_model, ids)
        assert max_diff(compiled(tf.constant(ids)), expected, ids) <= TOLERANCE, length
        assert max_diff(reloaded([ids]), expected, ids) <= TOLERANCE, length
    positions = reloaded.get_layer("Transformer-0-MultiHeadSelfAttention").positions
    assert positions.get_config() == {"theta": 1000.0, "scaling": {"rope_type": "dynamic", "factor": 2.0,
                                                                   "original_max_position_embeddings": TRAINED}}


def test_positions_config_round_trip():
    layer = RotateHalfPositions(300.0, {**YARN, "beta_fast": 8})
    config = layer.get_config()
    assert config["scaling"] == {**YARN, "beta_fast": 8.0, "beta_slow": 1.0, "attention_factor": None, "mscale": None,
                                 "mscale_all_dim": None}
    assert RotateHalfPositions.from_config(config).get_config() == config
    serialized = keras.saving.serialize_keras_object(layer)
    assert keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized))).get_config() == config


def test_sequence_length_follows_the_scaling():
    sizes = {"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 8, "max_position": 16}
    assert ModernBERT(**sizes, rope_scaling={"rope_type": "yarn", "factor": 4.0}, sequence_length=64).sequence_length == 64
    assert ModernBERT(**sizes, rope_scaling={"rope_type": "dynamic", "factor": 2.0}, sequence_length=999)
    with pytest.raises(ValueError, match=r"sequence_length=65 is longer than the 64 positions.*'factor': 5.0\}"):
        ModernBERT(**sizes, rope_scaling={"rope_type": "linear", "factor": 4.0}, sequence_length=65)
    with pytest.raises(ValueError, match=r"sequence_length=17 is longer than the 16 positions.*rope_scaling="):
        ModernBERT(**sizes, sequence_length=17)
    with pytest.raises(ValueError, match=r"dynamic scaling counts from max_position \(16\).*=8: drop that key"):
        ModernBERT(**sizes, rope_scaling={"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8})
    with pytest.raises(ValueError, match="rope_scaling must be a dict such as"):
        ModernBERT(**sizes, rope_scaling="yarn")


@pytest.mark.parametrize("scaling, message", [
    ({"rope_type": "longrope", "factor": 4.0}, "rope_type 'longrope' is not implemented; bert4long implements "
                                               "linear, dynamic, yarn"),
    ({"rope_type": "llama3", "factor": 8.0}, "rope_type 'llama3' is not implemented"),
    ({"rope_type": "linear", "factor": 4.0, "partial_rotary_factor": 0.5},
     r"takes \['factor'\], not \['partial_rotary_factor'\]: drop them"),
    ({"rope_type": "linear"}, "needs a factor >= 1"),
    ({"rope_type": "linear", "factor": 0.5}, r"factor = 0.5 must be a finite number in \[1, 2147483647\]"),
    ({"rope_type": "linear", "factor": float("nan")}, r"factor = nan must be a finite number in \[1, 2147483647\]"),
    ({"rope_type": "linear", "factor": 1e9}, r"factor = 1000000000.0 places 8.192e\+12 positions, more than "
                                             r"2147483647 \(positions are int32\)"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": float("inf")}, r"beta_fast = inf must be a finite number of "
                                                                     r"rotations in \[0.001, 1e6\]"),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 0.5}, "beta_fast = 0.5 is below beta_slow = 1.0"),
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": -1.0}, r"attention_factor = -1.0 must be a finite "
                                                                    r"number in \(0, 1000\]"),
    ({"rope_type": "dynamic", "factor": "2"}, "factor = '2' must be a finite number"),
    ({"rope_type": "default", "factor": 2.0}, "rope_type 'default' .* takes no"),
])
def test_unimplemented_or_bad_scaling_is_named(scaling, message):
    with pytest.raises(ValueError, match=message):
        ModernBERT.from_huggingface_config({"model_type": "modernbert", "num_hidden_layers": 2,
                                            "rope_parameters": {"full_attention": {**scaling, "rope_theta": 1e4}}})
    with pytest.raises(ValueError, match=message):
        ModernBERT(vocab_size=10, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8,
                   rope_scaling=scaling)
    with pytest.raises(ValueError, match="rope_type 'yarn' needs original_max_position_embeddings"):
        RotateHalfPositions(10000.0, {"rope_type": "yarn", "factor": 2.0})


def test_config_entries_are_read_as_transformers_reads_them():
    """rope_theta stays the base; dynamic counts from max_position_embeddings (transformers ignores the entry's
    original_max_position_embeddings); yarn's defaults are filled."""
    config = ModernBERT.from_huggingface_config({"model_type": "modernbert", "num_hidden_layers": 2,
                                                 "max_position_embeddings": 64, "rope_parameters": {
        "full_attention": {"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 8,
                           "rope_theta": 1e4},
        "sliding_attention": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 16,
                              "rope_theta": 300.0}}})
    assert config["rope_scaling"] == {
        "full_attention": {"rope_type": "dynamic", "factor": 2.0},
        "sliding_attention": {**YARN, "attention_factor": None, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": None,
                              "mscale_all_dim": None}}
    assert (config["global_rope_theta"], config["local_rope_theta"]) == (1e4, 300.0)
    model = ModernBERT(**{k: v for k, v in config.items() if k != "huggingface_config"}, vocab_size=10,
                       hidden_size=8, num_attention_heads=2, intermediate_size=8)
    assert model.rope_scaling["full_attention"]["original_max_position_embeddings"] == 64


# ------------------------------------------------------------- config.json spellings, read as transformers 5 reads them
LINEAR = {"rope_type": "linear", "factor": 2.0}


def as_transformers_4(config, rope_scaling):
    """``config`` as transformers 4.x wrote a ModernBERT config.json: the thetas and the layer pattern as keys of
    their own, no rope_parameters / layer_types, and the RoPE scaling under ``rope_scaling``."""
    config.pop("rope_parameters")
    config.pop("layer_types")
    config.update(global_rope_theta=TINY["global_rope_theta"], local_rope_theta=TINY["local_rope_theta"],
                  global_attn_every_n_layers=2, rope_scaling=rope_scaling)


def edited_folder(folder, edit, text=None):
    """Rewrite ``folder``'s config.json (transformers saved it) by ``edit``; ``text`` rewrites its JSON text."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    written = json.dumps(config)
    path.write_text(text(written) if text else written)
    return path


SPELLINGS = {   # edits of a folder transformers 5 saved unscaled
    "rope_scaling-4.x": lambda c: as_transformers_4(c, LINEAR),
    "rope_scaling-4.x-with-rope_theta": lambda c: as_transformers_4(c, {**LINEAR, "rope_theta": 500.0}),
    "rope_scaling-4.x-yarn": lambda c: as_transformers_4(c, {"rope_type": "yarn", "factor": 4.0}),
    "rope_scaling-beside-rope_parameters": lambda c: c.update(rope_scaling=LINEAR),
    "rope_parameters-one-layer-type": lambda c: c.update(rope_parameters={"full_attention": {
        "rope_type": "dynamic", "factor": 2.0, "rope_theta": 1000.0}}),
    "rope_parameters-type-for-rope_type": lambda c: c["rope_parameters"].update(full_attention={
        "type": "linear", "factor": 3.0, "rope_theta": 1000.0}),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_config_spellings_equal_transformers(tmp_path, spelling):
    """Each spelling transformers 5 reads (and bert4long ignored or misread before) builds transformers' numbers,
    beyond the trained length where the scaling matters; the unscaled model differs there."""
    base = torch_model()
    base.save_pretrained(str(tmp_path))
    edited_folder(tmp_path, SPELLINGS[spelling])
    reference_model = transformers.ModernBertModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
    ids = token_ids(40, seed=3)
    expected = reference(reference_model, ids)
    assert max_diff(reference(base, ids), expected, ids) > 1e-3   # transformers 5 applies the scaling
    assert max_diff(build_transformer_model(checkpoint_path=str(tmp_path))([ids]), expected, ids) <= TOLERANCE


NAN, INF = float("nan"), float("inf")


def full_attention(**entry):
    """An edit setting the global layers' rope_parameters entry to ``entry`` (over the saved rope_theta)."""
    return lambda c: c["rope_parameters"]["full_attention"].update(entry)


# (edit, JSON text rewrite, message, transformers 5 refuses it too); the others transformers loads with a warning
# or builds into NaN / zero frequencies.
CONFIG_REFUSALS = {
    "flat-rope_parameters": (lambda c: c.update(rope_parameters={**LINEAR, "rope_theta": 1000.0}), None,
                             r"rope_parameters = \{'rope_type': 'linear'.* is not one dict per layer type, which "
                             "transformers 5 refuses", True),
    "null-entry": (lambda c: c["rope_parameters"].update(sliding_attention=None), None,
                   "is not one dict per layer type", True),
    "rope_scaling-beside-one-layer-type": (
        lambda c: c.update(rope_parameters={"full_attention": {"rope_type": "default"}}, rope_scaling=LINEAR), None,
        r"rope_scaling = .* beside a rope_parameters with both layer types or none", True),
    "unknown-rope_type": (full_attention(rope_type="cubic", factor=2.0), None,
                          "rope_type 'cubic' is not implemented.*transformers' ModernBERT computes no such", True),
    "axial": (full_attention(rope_type="axial"), None, "rope_type 'axial' is not implemented", True),
    "longrope": (full_attention(rope_type="longrope", short_factor=[1.0] * 4, long_factor=[2.0] * 4,
                                original_max_position_embeddings=8), None,
                 "rope_type 'longrope' is not implemented; bert4long implements linear, dynamic, yarn", False),
    "llama3": (full_attention(rope_type="llama3", factor=2.0, low_freq_factor=1.0, high_freq_factor=4.0,
                              original_max_position_embeddings=8), None, "rope_type 'llama3' is not implemented",
               False),
    "type-beside-rope_type-4.x": (lambda c: as_transformers_4(c, {"type": "linear", "factor": 2.0}), None,
                                  "'type': 'linear' beside rope_type 'default': transformers 5 reads rope_type and "
                                  "ignores type", False),
    "truncate-false": (full_attention(rope_type="yarn", factor=4.0, truncate=False), None,
                       "truncate must be true", False),
    "factor-NaN": (full_attention(rope_type="linear", factor=NAN), None,
                   r"\['full_attention'\]: factor = nan must be a finite number in \[1, 2147483647\]", False),
    "factor-Infinity": (full_attention(rope_type="linear", factor=INF), None, "factor = inf must be a finite number", False),
    "factor-1e999-4.x": (lambda c: as_transformers_4(c, {**LINEAR, "factor": 12345.5}),
                         lambda text: text.replace("12345.5", "1e999"),
                         r"\['full_attention'\] with rope_scaling: factor = inf must be a finite number", False),
    "factor-negative": (full_attention(rope_type="linear", factor=-2.0), None, "factor = -2.0 must be a finite number", False),
    "beta_fast-NaN": (full_attention(rope_type="yarn", factor=4.0, beta_fast=NAN), None,
                      r"beta_fast = nan must be a finite number of rotations in \[0.001, 1e6\]", True),
    "original_max_position_embeddings-0": (full_attention(rope_type="yarn", factor=4.0,
                                                          original_max_position_embeddings=0), None,
                                           r"original_max_position_embeddings = 0 must be a whole number of trained "
                                           r"positions in \[1, 2147483647\]", True),
    "rope_theta-NaN": (full_attention(rope_theta=NAN), None, "rope_theta = nan must be a finite number > 1", False),
    "global_rope_theta-negative-4.x": (lambda c: (as_transformers_4(c, None), c.update(global_rope_theta=-5.0)),
                                       None, r"config.json': global_rope_theta = -5.0 must be a finite number > 1",
                                       False),
}


@pytest.mark.parametrize("case", sorted(CONFIG_REFUSALS))
def test_config_refusals_name_the_file_key_and_range(tmp_path, case):
    """A config.json transformers refuses, or one bert4long would not build with transformers' numbers, is refused
    in one line naming the file and the key (a number: its valid range); where transformers 5 refuses it too, that
    is checked."""
    from huggingface_hub.errors import StrictDataclassError

    from bert4long.checkpoints.source import resolve_source

    edit, text, message, refused_there = CONFIG_REFUSALS[case]
    transformers.ModernBertConfig(**TINY).save_pretrained(str(tmp_path))
    path = edited_folder(tmp_path, edit, text)
    with pytest.raises(ValueError, match=message) as raised:
        resolve_source(checkpoint=str(tmp_path))
    assert str(raised.value).startswith(f"Config file {str(path)!r}: ") and "\n" not in str(raised.value)
    if refused_there:
        with pytest.raises((ValueError, KeyError, ZeroDivisionError, StrictDataclassError)):
            transformers.ModernBertModel(transformers.ModernBertConfig.from_pretrained(str(tmp_path)))
