"""The long-reading test's rule (docs/long_reading.md): which positions it scores, and its statistics, checked
against brute force and textbook formulas; and its quick run end to end."""
import os
import subprocess
import sys

import numpy as np
import pytest
from paths import ROOT

from studies.long_reading import choose_positions, contrast, masked_windows, verdicts


def brute_force(sequence, rare, window):
    """Each position's class by the rule's words, one position at a time."""
    found = {}
    for p, piece in enumerate(sequence):
        if not rare[piece] or p < window or p == len(sequence) - 1 or piece in sequence[p + 1:]:
            continue   # not rare, before the scored region, the final token, or not the piece's last occurrence
        earlier = [q for q in range(p) if sequence[q] == piece]
        if not earlier:
            found[p] = "none"
        elif any(q >= p - p % window for q in earlier):
            found[p] = "near"
        elif p - max(earlier) > window:
            found[p] = "far"
    return found


def test_positions_and_classes_match_brute_force_on_random_windows():
    rng = np.random.default_rng(0)
    rare = np.zeros(40, bool)
    rare[20:] = True
    seen = set()
    for _ in range(200):
        sequence = rng.integers(0, 40, 48).tolist()
        positions, classes = choose_positions(sequence, rare, window=8)
        assert dict(zip(positions, classes)) == brute_force(sequence, rare, 8)
        assert positions == sorted(positions)
        seen.update(classes)
    assert seen == {"far", "near", "none"}


def test_masking_hides_the_chosen_positions_and_keeps_their_other_occurrences():
    rare = np.zeros(12, bool)
    rare[[9, 10, 11]] = True
    sequence = [2, 9, 1, 1, 10, 11, 10, 9, 3]   # window 4: 11 none (5), 10 near (6), 9 far (7)
    tokens, positions, weights, records = masked_windows([sequence], rare, mask_id=4, window=4)
    assert tokens[0].tolist() == [2, 9, 1, 1, 10, 4, 4, 4, 3]
    assert positions[0][weights[0]].tolist() == [5, 6, 7]
    assert records["answer"].tolist() == [11, 10, 9] and records["kind"].tolist() == ["none", "near", "far"]


def test_contrast_with_equal_clusters_is_the_mean_of_cluster_differences_and_its_textbook_error():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(6), 10)
    kind = np.tile(["far"] * 4 + ["none"] * 6, 6)
    gain = rng.integers(-1, 2, 60).astype(float)
    per_cluster = np.array([gain[(clusters == g) & (kind == "far")].mean() - gain[(clusters == g) & (kind == "none")]
                            .mean() for g in range(6)])
    estimate, se = contrast(gain, kind, clusters)
    assert estimate == pytest.approx(gain[kind == "far"].mean() - gain[kind == "none"].mean())
    assert estimate == pytest.approx(per_cluster.mean())
    assert se == pytest.approx(per_cluster.std(ddof=1) / np.sqrt(6))


def test_verdicts_find_a_model_that_copies_from_far_back_and_not_one_that_does_not():
    rng = np.random.default_rng(2)
    n = 600
    kind = rng.choice(["far", "near", "none"], n)
    cluster = rng.integers(0, 12, n)
    base = rng.random(n) < 0.3
    copies = np.where(kind == "far", rng.random(n) < 0.8, base)   # right on most far tokens, the base elsewhere
    better = base | (rng.random(n) < 0.2)   # better everywhere alike: no long-reading effect
    records = {name: {"correct": c, "kind": kind, "cluster": cluster} for name, c in
               (("base/windows", base), ("copier/long", copies), ("better/long", better))}
    rows = verdicts(records)
    assert rows["copier/long"]["reads_past_512"] and not rows["better/long"]["reads_past_512"]
    assert rows["better/long"]["gain"]["none"][0] > 0.1   # ... though it gains on every class


@pytest.mark.slow
def test_quick_run_writes_records_the_verdicts_read(tmp_path):
    out = tmp_path / "long_reading.json"
    done = subprocess.run([sys.executable, "-m", "studies.long_reading", "--quick", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    from studies.long_reading import load_records

    records = load_records(str(out), "wikipedia")
    assert sorted(records) == ["base/windows", "hierarchical-0.4/long", "hierarchical-0.4/windows"]
    assert all(len(r["correct"]) == len(records["base/windows"]["kind"]) > 0 for r in records.values())
    rows = verdicts(records)
    assert isinstance(rows["hierarchical-0.4/long"]["reads_past_512"], bool)


def test_the_positive_control_passes_for_copying_and_fails_without_it():
    from studies.long_reading import positive_control

    rng = np.random.default_rng(3)
    kind = rng.choice(["near", "none"], 400)
    cluster = rng.integers(0, 10, 400)
    copying = np.where(kind == "near", rng.random(400) < 0.7, rng.random(400) < 0.2)
    blind = rng.random(400) < 0.2
    assert positive_control({"base/windows": {"correct": copying, "kind": kind, "cluster": cluster}})[2]
    assert not positive_control({"base/windows": {"correct": blind, "kind": kind, "cluster": cluster}})[2]


@pytest.mark.parametrize("name", ["long_reading.json", "long_reading_rule2.json"])
def test_the_results_page_holds_the_section_its_committed_records_give(name):
    """docs/results.md's long-reading tables are what `section` computes now from the committed records: a number
    edited in the page, or a record changed without regenerating it, fails here."""
    from studies.long_reading import section

    path = os.path.join(ROOT, "studies", "results", name)
    if not os.path.exists(path):
        pytest.skip(f"{name} not committed yet")
    with open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8") as f:
        page = f.read()
    for block in section(path, 0)[1:]:   # (the heading carries the section's number)
        assert block in page
