"""The report's class-weight section (`studies.report.class_weight_section`) on a synthetic study JSON, its numbers
worked out by hand below."""
from studies.report import class_weight_section, one_class_macro_f1

GOLD = ["a"] * 6 + ["b"] * 4      # the larger class 60%: answering "a" always scores F1 0.75 on a, 0 on b


def run(model, seed, per_epoch, recall_b, estimate, peak, folder):
    return {"model": model, "seed": seed, "macro_f1_per_epoch": per_epoch, "last_macro_f1": per_epoch[-1],
            "recall": {"a": 1.0, "b": recall_b}, "estimated_peak_gib": estimate, "peak_rss_gb": peak,
            "folder_mb": folder}


DATA = {"gold": GOLD, "data": {"train": 20, "valid": 10}, "settings": {"epochs": 2, "learning_rate": 5e-5,
                                                                       "batch_size": 4},
        "runs": [run("512-balanced", 1, [0.6, 0.8], 0.75, 3.2, 3.6, 90.8),
                 run("512", 0, [0.375, 0.7], 0.5, 3.2, 3.61, 361.7),
                 run("512", 1, [0.375, 0.5], 0.25, 3.2, 3.58, 361.0),
                 run("512-balanced", 0, [0.5, 0.6], 0.5, 3.2, 3.7, 90.8)]}


def test_one_class_macro_f1():
    assert abs(one_class_macro_f1(GOLD) - 0.375) < 1e-12     # (2 * 0.6 / 1.6) / 2


def test_class_weight_section_by_hand():
    text = "\n".join(class_weight_section(DATA, 7))
    assert text.startswith("## 7. Class weights")
    assert "60.0% of them the larger class" in text and "0.375 is what answering the larger class" in text
    assert "| 512 | 0 | 0.375 | 0.700 | 0.500 |" in text                 # runs sorted by model, then seed
    assert "| 512-balanced | 1 | 0.600 | 0.800 | 0.750 |" in text
    # 512: last 0.7 and 0.5 -> mean 0.6, SE = std(ddof=1) / sqrt(2) = 0.1414 / 1.414 = 0.1; recall b 0.375;
    # 2 of 4 epochs at the floor; the largest estimate / peak / folder
    assert "| 512 | 2 | 0.600 ± 0.100 | 0.375 | 2 of 4 | 3.200 | 3.610 | 362 |" in text
    assert "| 512-balanced | 2 | 0.700 ± 0.100 | 0.625 | 0 of 4 | 3.200 | 3.700 | 91 |" in text
    assert class_weight_section({**DATA, "runs": []}, 7) == []
