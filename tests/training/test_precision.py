"""`--precision auto`: the CPU's bfloat16 units read from /proc/cpuinfo, the rule it applies, and the line it prints."""
import argparse
import json
import os

import pytest
from paths import ROOT

from bert4long import precision
from bert4long.cli.options import training_path

tf = pytest.importorskip("tensorflow")
ONE_DEVICE = tf.distribute.get_strategy()


X86 = "processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_vnni avx512_bf16 fma\n"
AMX = "flags\t\t: fpu avx512f amx_tile amx_bf16 amx_int8\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes bf16 i8mm\n"
PLAIN = "flags\t\t: fpu sse2 avx2 avx512f fma\n"


@pytest.mark.parametrize("text, expected", [(X86, "avx512_bf16"), (AMX, "amx_bf16"), (ARM, "bf16"), (PLAIN, None)])
def test_bfloat16_units_read_from_cpuinfo(tmp_path, text, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert precision.bfloat16_units(str(path)) == expected


@pytest.mark.parametrize("gpu, units, expected", [
    (True, None, ("mixed_float16", True)),
    (False, "avx512_bf16", ("mixed_bfloat16", False)),
    (False, None, ("float32", True)),
])
def test_auto_rule(monkeypatch, capsys, gpu, units, expected):
    monkeypatch.setattr(precision, "has_gpu", lambda: gpu)
    monkeypatch.setattr(precision, "bfloat16_units", lambda: units)
    assert training_path(argparse.Namespace(precision="auto", no_xla=False), ONE_DEVICE) == expected
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"precision: {expected[0]}, {'with' if expected[1] else 'without'} XLA (auto: ")
    assert (units or ("GPU" if gpu else "no bfloat16 units")) in line
    assert training_path(argparse.Namespace(precision="auto", no_xla=True), ONE_DEVICE)[1] is False   # --no-xla wins
    assert training_path(argparse.Namespace(precision="mixed_bfloat16", no_xla=False), ONE_DEVICE) == ("mixed_bfloat16", True)
    assert capsys.readouterr().out.splitlines()[-1] == "precision: mixed_bfloat16, with XLA"   # asked for: no reason


def test_auto_is_the_fastest_training_path_measured_here(monkeypatch):
    """benchmarks/results/train.json (one run of `python -m benchmarks.train`) times every precision with and without
    XLA; on the CPU it ran on, auto's choice must be its fastest row at every length (rerun the benchmark on a new
    machine, and this says whether the rule still holds)."""
    with open(os.path.join(ROOT, "benchmarks", "results", "train.json")) as f:
        measured = json.load(f)
    units = measured.get("bfloat16_units")
    assert units, "train.json records no bfloat16_units: rerun python -m benchmarks.train"
    monkeypatch.setattr(precision, "has_gpu", lambda: False)
    monkeypatch.setattr(precision, "bfloat16_units", lambda: units)
    chosen = precision.default_precision()
    rows = [r for r in measured["rows"] if not r["recompute"] and "step_s" in r]
    for length in sorted({r["length"] for r in rows}):
        fastest = min((r for r in rows if r["length"] == length), key=lambda r: r["step_s"])
        assert (fastest["precision"], fastest["xla"]) == (chosen, precision.default_jit_compile(chosen, length)), (
            length, fastest)
        # a CPU without bfloat16 units trains in float32: with XLA or not, auto takes the faster float32 row
        fastest = min((r for r in rows if r["length"] == length and r["precision"] == "float32"),
                      key=lambda r: r["step_s"])
        assert fastest["xla"] == precision.default_jit_compile("float32", length), (length, fastest)


def test_auto_leaves_xla_out_of_long_float32_steps_on_a_cpu(monkeypatch, capsys):
    monkeypatch.setattr(precision, "has_gpu", lambda: False)
    monkeypatch.setattr(precision, "bfloat16_units", lambda: None)
    assert training_path(argparse.Namespace(precision="auto", no_xla=False, seq_len=1024), ONE_DEVICE) == ("float32", True)
    assert training_path(argparse.Namespace(precision="auto", no_xla=False, seq_len=2048), ONE_DEVICE) == ("float32", False)
    assert "XLA only up to 1,024 tokens" in capsys.readouterr().out.splitlines()[-1]
    assert training_path(argparse.Namespace(precision="auto", no_xla=True, seq_len=512), ONE_DEVICE) == ("float32", False)
    assert "XLA only up to" not in capsys.readouterr().out   # --no-xla, not the length, left XLA out
    monkeypatch.setattr(precision, "has_gpu", lambda: True)   # a GPU keeps XLA at every length
    assert training_path(argparse.Namespace(precision="auto", no_xla=False, seq_len=8192), ONE_DEVICE) == ("mixed_float16", True)


def test_under_a_tpu_strategy_auto_is_bfloat16_with_xla_whatever_the_host_cpu(monkeypatch, capsys):
    from bert4long.training import distribute

    monkeypatch.setattr(precision, "has_gpu", lambda: False)
    monkeypatch.setattr(precision, "bfloat16_units", lambda: None)   # the host CPU alone would say float32
    monkeypatch.setattr(distribute, "is_tpu", lambda strategy: strategy is ONE_DEVICE)
    assert training_path(argparse.Namespace(precision="auto", no_xla=False, seq_len=4096), ONE_DEVICE) == (
        "mixed_bfloat16", True)
    assert capsys.readouterr().out.strip() == "precision: mixed_bfloat16, with XLA (auto: a TPU, which computes in bfloat16)"
    assert training_path(argparse.Namespace(precision="float32", no_xla=True), ONE_DEVICE) == ("float32", False)
