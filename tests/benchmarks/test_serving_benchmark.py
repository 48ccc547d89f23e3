"""benchmarks/serving.py's ``--add``: rows of earlier runs are kept unless measured again, and a bert4long row is
compared only with ONNX Runtime's and transformers' rows of its own run."""
from benchmarks.serving import merged


def row(impl, run, tokens_per_s, size="minilm", length=512, batch=1):
    return {"impl": impl, "size": size, "length": length, "batch": batch, "run": run, "tokens_per_s": tokens_per_s}


def test_a_later_run_replaces_the_rows_it_measures_and_keeps_the_others():
    earlier = [row("savedmodel", 0, 100.0), row("onnxruntime", 0, 50.0), row("savedmodel", 0, 10.0, size="base")]
    rows = merged([row("savedmodel", 1, 300.0), row("onnxruntime", 1, 100.0)], earlier)
    assert [(r["size"], r["impl"], r["run"]) for r in rows] == [
        ("minilm", "savedmodel", 1), ("minilm", "onnxruntime", 1), ("base", "savedmodel", 0)]
    assert rows[0]["x_vs_onnxruntime"] == 3.0


def test_ratios_are_taken_within_one_run_only():
    rows = merged([row("savedmodel", 1, 300.0)], [row("onnxruntime", 0, 100.0), row("transformers", 0, 100.0)])
    assert "x_vs_onnxruntime" not in rows[0] and "x_vs_transformers" not in rows[0]


def test_the_report_pivots_tokens_per_second_and_names_a_row_out_of_memory():
    from benchmarks.report import serving_section

    data = {"rows": [dict(row("savedmodel", 0, 1234.5), peak_rss_gb=1.25),
                     {"impl": "onnxruntime", "size": "minilm", "length": 512, "batch": 1, "run": 0,
                      "status": "killed by SIGKILL (the system's out-of-memory killer: this machine has 24 GB)"}]}
    text = "".join(serving_section("Serving", data))
    assert "| minilm | 512 × 1 | 1,234 (1.2 GB) | out of memory |" in text, text


def test_the_report_lists_only_the_runs_that_still_hold_rows():
    from benchmarks.report import serving_section

    stamps = [{"command": f"python -m benchmarks.serving # {i}", "time": "t", "load": [1.0]} for i in range(3)]
    data = {"stamps": stamps, "rows": [dict(row("savedmodel", 0, 10.0), peak_rss_gb=1.0),
                                       dict(row("savedmodel", 2, 10.0, size="base"), peak_rss_gb=1.0)]}
    text = "".join(serving_section("Serving", data))
    assert "# 0`" in text and "# 2`" in text and "# 1`" not in text, text
    assert "Every row of run 1 was measured again by a later run." in text
