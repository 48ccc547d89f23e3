"""``--rope-scaling TYPE:FACTOR[,KEY=VALUE...]``: checked when parsed, refused beside a position table's options and
for a family without rotary positions to stretch, widening the --seq-len check, and served as
``build_transformer_model(..., rope_scaling=...)`` builds it.

The ModernBERT folder is written by transformers' own ``ModernBertModel`` (hidden 32, a global then a local layer
of window 8, 16 trained positions, weights perturbed); the exported SavedModel reads 64 tokens (4x the trained
length). Tolerance: 1e-5 max abs difference on hidden states at real tokens (float32 rounding).
"""
import json

import numpy as np
import pytest
from test_cli_options import refused

from bert4long.cli import build_parser, main
from bert4long.cli.options import model_kwargs, resolve_model_options
from bert4long.cli.resolved import source_for

TRAINED, VOCAB, PAD = 16, 99, 0


@pytest.fixture(scope="module")
def modernbert_folder(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch_reference import perturbed

    folder = tmp_path_factory.mktemp("modernbert_rope")
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=2,
        local_attention=8, global_attn_every_n_layers=2, pad_token_id=PAD, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2, max_position_embeddings=TRAINED, global_rope_theta=1000.0,
        local_rope_theta=300.0)
    perturbed(transformers.ModernBertModel(config), 1).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def modernbert_config(tmp_path_factory):
    """A folder holding a ModernBERT config.json alone (what the checks read)."""
    folder = tmp_path_factory.mktemp("modernbert_config")
    (folder / "config.json").write_text(json.dumps({
        "model_type": "modernbert", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": TRAINED}))
    return str(folder)


def parsed(folder, *options):
    return build_parser().parse_args(["export", "--checkpoint", folder, "--out", "o", *options])


def checked(args, trained):
    """`resolve_model_options` of ``args`` for its --checkpoint folder (of ``trained`` positions), at --seq-len."""
    source = source_for(args)
    assert source.trained_positions == trained
    return resolve_model_options(args, source, args.seq_len)


@pytest.mark.parametrize("value, message", [
    ("cubic:4", "rope_type 'cubic' is not implemented; bert4long implements linear, dynamic, yarn"),
    ("yarn:0.5", "factor = 0.5 must be a finite number in [1, 2147483647]"),
    ("yarn:x", "factor = 'x' must be a finite number in [1, 2147483647]"),
    ("linear:1e999", "'linear:1e999': factor = inf must be a finite number in [1, 2147483647]"),
    ("yarn:1e308", "factor = 1e+308 must be a finite number in [1, 2147483647]"),
    ("linear:-2", "factor = -2 must be a finite number in [1, 2147483647]"),
    ("dynamic:nan", "factor = 'nan' must be a finite number"),
    ("yarn:4,beta_fast=1e999", "beta_fast = inf must be a finite number of rotations in [0.001, 1e6]"),
    ("yarn:4,attention_factor=-1", "attention_factor = -1 must be a finite number in (0, 1000]"),
    ("yarn", "expected TYPE:FACTOR[,KEY=VALUE...] such as yarn:4"),
    ("yarn:4,beta_fast", "expected TYPE:FACTOR[,KEY=VALUE...]"),
    ("linear:2,beta_fast=16", "rope_type 'linear' takes ['factor'], not ['beta_fast']"),
    ("yarn:4,beta_slow=-1", "beta_slow = -1 must be a finite number of rotations in [0.001, 1e6]"),
])
def test_bad_values_are_refused_when_parsed(capsys, value, message):
    status, err = refused(capsys, ["export", "--checkpoint", "nowhere", "--out", "o", "--rope-scaling", value])
    assert status == 2 and "argument --rope-scaling:" in err and message in err, err


def test_parsed_value_is_passed_to_the_builder(modernbert_config):
    args = parsed(modernbert_config, "--rope-scaling", "yarn:4,beta_fast=16,attention_factor=1.2")
    kwargs = model_kwargs(args, resolve_model_options(args, source_for(args)))
    assert kwargs == {"sequence_length": None, "rope_scaling": {
        "rope_type": "yarn", "factor": 4, "beta_fast": 16, "attention_factor": 1.2}}


@pytest.mark.parametrize("options, message", [
    (["--hierarchical-position"], "--rope-scaling stretches rotary positions and --hierarchical-position extends a "
                                  "position table: give one of them"),
    (["--position-extension", "copy"], "--rope-scaling stretches rotary positions and --position-extension extends a "
                                       "position table: give one of them"),
])
def test_refused_beside_a_position_tables_options(modernbert_config, options, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        checked(parsed(modernbert_config, "--rope-scaling", "yarn:4", *options), TRAINED)


def test_refused_for_a_learned_table(capsys, tiny_bert, tmp_path):
    _, checkpoint, _ = tiny_bert
    status, err = refused(capsys, ["export", "--checkpoint", checkpoint, "--out", str(tmp_path / "served"),
                                   "--rope-scaling", "yarn:4"])
    assert status == 1, err
    assert ("--rope-scaling stretches rotary positions, and bert's positions are a learned table: use "
            "--position-extension copy/interpolate (or --hierarchical-position) instead") in err
    assert not (tmp_path / "served").exists()


def test_seq_len_check_reaches_the_scaled_length(modernbert_config):
    for scaling, seq_len in (("yarn:4", 4 * TRAINED), ("linear:2.5", 40), ("dynamic:2", 1000)):
        checked(parsed(modernbert_config, "--seq-len", str(seq_len), "--rope-scaling", scaling), TRAINED)
    with pytest.raises(ValueError, match=r"^--seq-len 65 is longer than the 64 positions this model can place "
                                         r"\(trained: 16\): use --seq-len 64 or less, or a factor of 5 or more "
                                         r"\(--rope-scaling yarn:5\)$"):
        checked(parsed(modernbert_config, "--seq-len", "65", "--rope-scaling", "yarn:4"), TRAINED)
    with pytest.raises(ValueError, match=r"^--seq-len 40 is longer than the 16 positions .*: add --rope-scaling "
                                         r"yarn:3 \(its rotary positions stretched\), or use --seq-len 16 or less"):
        checked(parsed(modernbert_config, "--seq-len", "40"), TRAINED)


@pytest.mark.slow
def test_export_serves_the_scaled_model(capsys, modernbert_folder, tmp_path):
    import tensorflow as tf

    from bert4long.models import build_transformer_model

    served = tmp_path / "served"
    assert main(["export", "--checkpoint", modernbert_folder, "--rope-scaling", "yarn:4", "--out", str(served)]) == 0
    capsys.readouterr()
    ids = np.random.default_rng(0).integers(3, VOCAB, size=(2, 4 * TRAINED)).astype("int32")
    ids[1, 40:] = PAD
    serve = tf.saved_model.load(str(served)).signatures["serving_default"]
    outputs = serve(token_ids=tf.constant(ids), segment_ids=tf.constant(ids * 0))["sequence_output"].numpy()
    scaled = build_transformer_model(checkpoint_path=modernbert_folder, rope_scaling={"rope_type": "yarn", "factor": 4})
    unscaled = build_transformer_model(checkpoint_path=modernbert_folder)
    real = ids != PAD
    assert np.abs(outputs - scaled.predict(ids, verbose=0))[real].max() < 1e-5
    assert np.abs(outputs - unscaled.predict(ids, verbose=0))[real].max() > 1e-3   # the scaling was applied


@pytest.mark.parametrize("recorded, placed", [({"rope_type": "yarn", "factor": 4.0}, 4 * TRAINED),
                                              ({"rope_type": "linear", "factor": 2.0}, 2 * TRAINED),
                                              ({"rope_type": "dynamic", "factor": 2.0}, None)])
def test_seq_len_check_reads_the_scaling_a_folder_records(tmp_path, recorded, placed):
    """A folder whose config.json already stretches its rotary positions (rope_parameters) reads that far with no
    --rope-scaling; one token more is refused, naming the recorded length."""
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "modernbert", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": TRAINED,
        "rope_parameters": {"full_attention": {**recorded, "rope_theta": 1000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}}}))
    checked(parsed(str(tmp_path), "--seq-len", str(placed or 100 * TRAINED)), TRAINED)
    if placed is not None:
        with pytest.raises(ValueError, match=rf"^--seq-len {placed + 1} is longer than the {placed} positions this "
                                             rf"model can place \(trained: {TRAINED}\): use --seq-len {placed} or less"):
            checked(parsed(str(tmp_path), "--seq-len", str(placed + 1)), TRAINED)


def test_factor_beyond_int32_positions_at_the_trained_length_is_refused(modernbert_config):
    """A factor that parses (at most 2**31 - 1) but places more positions than int32 holds once the trained
    length is known is refused naming --rope-scaling, whatever --seq-len."""
    with pytest.raises(ValueError, match=r"^--rope-scaling: factor = 1000000000.0 places 1.6e\+10 positions, more "
                                         r"than 2147483647 \(positions are int32\): use a smaller factor.$"):
        checked(parsed(modernbert_config, "--rope-scaling", "linear:1e9"), TRAINED)


def folder_with(modernbert_folder, tmp_path, edit):
    """A copy of the transformers-saved folder with its config.json changed by ``edit``."""
    import shutil

    folder = tmp_path / "edited"
    shutil.copytree(modernbert_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_info_reports_the_scaling_a_transformers_4_config_records(capsys, modernbert_folder, tmp_path):
    """The older ``rope_scaling`` key (as transformers 4.x wrote it) is the scaling every command builds with, and
    `info` says so, with the length it reaches."""
    def as_transformers_4(config):
        for key in ("rope_parameters", "layer_types"):
            config.pop(key)
        config.update(global_rope_theta=1000.0, local_rope_theta=300.0, global_attn_every_n_layers=2,
                      rope_scaling={"rope_type": "linear", "factor": 2.0})

    folder = folder_with(modernbert_folder, tmp_path, as_transformers_4)
    assert main(["info", folder]) == 0
    out = capsys.readouterr().out
    assert ("rope scaling: full_attention: linear, factor 2.0; sliding_attention: linear, factor 2.0 (from its "
            "config.json; --rope-scaling replaces it)") in out
    assert f"lengths: up to {2 * TRAINED} tokens with that scaling ({TRAINED} trained positions) (modernbert)" in out
    assert main(["info", modernbert_folder]) == 0
    out = capsys.readouterr().out
    assert "rope scaling: full_attention: none; sliding_attention: none" in out
    assert f"lengths: up to {TRAINED} tokens as trained (modernbert)" in out


def test_a_nan_factor_in_the_config_is_one_line_naming_file_and_key(capsys, modernbert_folder, tmp_path):
    def nan_factor(config):
        config["rope_parameters"]["full_attention"].update(rope_type="linear", factor=float("nan"))

    folder = folder_with(modernbert_folder, tmp_path, nan_factor)
    status, err = refused(capsys, ["info", folder])
    assert status == 1
    assert err == (f"bert4long info: error: Config file {folder + '/config.json'!r}: rope_parameters['full_attention']: "
                   "factor = nan must be a finite number in [1, 2147483647].\n")
