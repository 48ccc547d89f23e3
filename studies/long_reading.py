"""The long-reading test: does a model stretched past 512 positions use the text more than 512 tokens back?

Its rule is docs/long_reading.md, committed before any result. In each evaluation window of the position study
(`studies.position_study.prepare_data`: 1,536 tokens of held-out Wikipedia articles, or of the convention speeches)
the last occurrence of each rare word piece at position 512 or beyond is masked, and sorted by where the piece
occurs elsewhere in the window (`choose_positions`):

  far   its nearest other occurrence is more than 512 tokens back: 512-token windows cannot see it, a long reading can
  near  it occurs again inside its own 512-token window: both readings can see it (the positive control)
  none  it occurs nowhere else in the window: neither reading can (the negative control)

Every model reads the same masked windows whole (``long``) and as independent 512-token windows (``windows``),
and each prediction is kept (`records`, one file per reading). `verdicts` applies the rule: the long-reading
effect of a reading is its gain over the base read as windows on ``far`` minus its gain on ``none``, with a
standard error clustered by document.

    python -m studies.long_reading --corpus wikipedia              # base, hierarchical-0.4, copy, interpolate
    python -m studies.long_reading --corpus speeches
    python -m studies.long_reading --corpus wikipedia --checkpoint h04-1000=DIR  # a continued model (DIR: export)
    python -m studies.long_reading --quick                          # tiny random model (CI smoke run)

Writes studies/results/long_reading.json and its records in studies/results/long_reading_records/.
"""
import argparse
import hashlib
import math
import os

import numpy as np

from benchmarks.common import load_json, machine_stamp, write_json
from studies.common import holm, two_sided_p

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = ("far", "near", "none")
WINDOW = 512            # the base's trained length: the windows' size and the start of the scored region
MAX_COUNT = 20          # a rare piece occurs at most this often in the study's training text (498,250 pieces)
FIRST_ORDINARY_ID = 999  # MiniLM's vocabulary: ids below are [PAD], [unused*] and the specials (100-103)
ZERO_SHOT = ("hierarchical-0.4", "copy", "interpolate")


def rare_pieces(training, vocabulary, max_count=MAX_COUNT, first_ordinary=FIRST_ORDINARY_ID):
    """Bool ``[len(vocabulary)]``: the ordinary pieces (id ``first_ordinary`` or more, holding a letter) that occur
    at most ``max_count`` times in the token ids ``training``.

    >>> rare_pieces(np.array([[5, 5, 6]]), ["[PAD]", "a", "b", "c", "d", "aa", "bb", "1"], 1, 5).tolist()
    [False, False, False, False, False, False, True, False]
    """
    counts = np.bincount(np.asarray(training).ravel(), minlength=len(vocabulary))
    letters = np.array([any(c.isalpha() for c in piece) for piece in vocabulary])
    ordinary = np.arange(len(vocabulary)) >= first_ordinary
    return ordinary & letters & (counts <= max_count)


def choose_positions(sequence, rare, window=WINDOW):
    """``(positions, classes)`` of one window's token ids ``sequence``: the last occurrence of each rare piece at
    ``window`` or beyond (the final token excluded), by `CLASSES` (an occurrence in the previous window within
    ``window`` tokens back is neither near nor far: not scored). In position order.

    >>> rare = np.zeros(10, bool); rare[[7, 8, 9]] = True
    >>> choose_positions([7, 1, 1, 1, 9, 8, 9, 7, 2], rare, window=4)
    ([5, 6, 7], ['none', 'near', 'far'])
    >>> choose_positions([1, 1, 9, 1, 1, 1, 9, 1, 2], rare, window=4)   # 4 back, in the previous window
    ([], [])
    """
    sequence = np.asarray(sequence)
    chosen = []
    for piece in np.unique(sequence[rare[sequence]]):
        where = np.flatnonzero(sequence == piece)
        last, others = int(where[-1]), where[:-1]
        if last < window or last == len(sequence) - 1:
            continue
        start = last // window * window
        if not len(others):
            chosen.append((last, "none"))
        elif others[-1] >= start:
            chosen.append((last, "near"))
        elif last - others[-1] > window:
            chosen.append((last, "far"))
    chosen.sort()
    return [p for p, _ in chosen], [c for _, c in chosen]


def masked_windows(sequences, rare, mask_id, window=WINDOW):
    """The windows with every chosen position (`choose_positions`) replaced by ``mask_id``: ``(tokens, positions,
    weights, records)``; ``positions`` ``[N, P]`` padded with 0 (weight 0), ``records`` the flat ``sequence``,
    ``position``, ``answer`` and ``kind`` of each scored token."""
    tokens = np.array(sequences, dtype="int32")
    chosen = [choose_positions(row, rare, window) for row in tokens]
    width = max(1, max(len(p) for p, _ in chosen))
    positions = np.zeros((len(tokens), width), "int32")
    weights = np.zeros((len(tokens), width), bool)
    records = {"sequence": [], "position": [], "answer": [], "kind": []}
    for i, (where, kinds) in enumerate(chosen):
        positions[i, :len(where)], weights[i, :len(where)] = where, True
        records["sequence"] += [i] * len(where)
        records["position"] += where
        records["answer"] += tokens[i, where].tolist()
        records["kind"] += kinds
        tokens[i, where] = mask_id
    return tokens, positions, weights, {k: np.asarray(v) for k, v in records.items()}


def read_masked(model, tokens, positions, weights, split=None, batch_size=4, compiled=True):
    """The argmax prediction at each weighted position (flat, in `masked_windows`'s record order), the windows read
    whole or (``split``) as independent ``split``-token windows."""
    from bert4long.training.position_eval import mlm_reader, predicted_at

    predict = mlm_reader(model, compiled)
    predicted = [predicted_at(predict, tokens[i:i + batch_size], positions[i:i + batch_size], split)
                 for i in range(0, len(tokens), batch_size)]
    return np.concatenate(predicted)[weights]


def cluster_mean(values, clusters):
    """Mean of ``values`` and its standard error clustered by ``clusters`` (each cluster one draw).

    >>> mean, se = cluster_mean(np.array([1.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]))
    >>> round(mean, 3), round(se, 3)
    (0.75, 0.25)
    """
    from bert4long.training.position_eval import accuracy_with_error

    return accuracy_with_error(np.ones_like(values), values, clusters)


def contrast(gain, kind, clusters, first="far", second="none"):
    """Mean ``gain`` on ``first`` tokens minus its mean on ``second`` tokens, and the standard error of that
    difference clustered by ``clusters`` (a document adds to both means; its share of each is one draw).

    >>> gain = np.array([1.0, 1.0, 0.0, 0.0]); kind = np.array(["far", "far", "none", "none"])
    >>> contrast(gain, kind, np.array([0, 1, 0, 1]))
    (1.0, 0.0)
    """
    a, b = kind == first, kind == second
    estimate = gain[a].mean() - gain[b].mean()
    groups = np.unique(clusters)
    # each document's contribution to the estimate, centred: the sum over documents is the estimate
    shares = np.array([gain[a & (clusters == g)].sum() / a.sum() - gain[b & (clusters == g)].sum() / b.sum()
                       for g in groups])
    centred = shares - estimate / len(groups)
    se = math.sqrt(len(groups) / (len(groups) - 1) * float((centred ** 2).sum())) if len(groups) > 1 else math.nan
    return float(estimate), se


def verdicts(records, baseline="base/windows", level=0.05):
    """The rule of docs/long_reading.md on ``records`` (``{reading: {"correct", "kind", "cluster"}}``, the same
    tokens in each): per reading, accuracy and count per class, its gain over ``baseline`` per class (paired), the
    long-reading effect (gain on far minus gain on none) with p-values, Holm's decision over the long readings,
    and for each long reading the same effect against the model's own windows."""
    base = records[baseline]
    kind, clusters = base["kind"], base["cluster"]
    rows = {}
    for name, reading in records.items():
        if not np.array_equal(reading["kind"], kind):
            raise ValueError(f"{name}: not the tokens of {baseline} (another corpus or rule)")
        correct = reading["correct"].astype(float)
        row = {"accuracy": {}, "gain": {}}
        for c in CLASSES:
            chosen = kind == c
            row["accuracy"][c] = cluster_mean(correct[chosen], clusters[chosen]) + (int(chosen.sum()),)
            row["gain"][c] = cluster_mean(correct[chosen] - base["correct"][chosen], clusters[chosen])
        row["effect"] = contrast(correct - base["correct"], kind, clusters)
        row["p"] = two_sided_p(*row["effect"])
        own = name.replace("/long", "/windows")
        if name.endswith("/long") and own in records:
            row["effect_over_own_windows"] = contrast(correct - records[own]["correct"], kind, clusters)
        rows[name] = row
    long_readings = [name for name in rows if name.endswith("/long")]
    decisions = holm([rows[name]["p"] for name in long_readings], level)
    for name, rejected in zip(long_readings, decisions):
        effect, se = rows[name]["effect"]
        rows[name]["reads_past_512"] = bool(rejected and effect > 0)
    return rows


def positive_control(records, baseline="base/windows"):
    """``(difference, se, passes)``: the baseline's accuracy on near minus on none, clustered by document; it passes
    when more than two errors above 0 (the test can see copying)."""
    base = records[baseline]
    near, none = base["kind"] == "near", base["kind"] == "none"
    estimate, se = contrast(base["correct"].astype(float), base["kind"], base["cluster"], "near", "none")
    return estimate, se, bool(near.any() and none.any() and estimate > 2 * se)


def checkpoint_sha256(prefix):
    """SHA-256 of a checkpoint's files (``prefix.index`` and its data shards, in name order)."""
    folder, stem = os.path.split(prefix)
    digest = hashlib.sha256()
    for name in sorted(n for n in os.listdir(folder or ".") if n.startswith(os.path.basename(stem) + ".")):
        with open(os.path.join(folder, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def readings(args):
    """``(name, config, checkpoint, method)`` of each model read: the base (windows only), the zero-shot
    extensions of the base, and each --checkpoint NAME=DIR (a folder with bert_config.json and bert_model.ckpt)."""
    base = os.path.join(args.base, "bert_model.ckpt")
    config = os.path.join(args.base, "bert_config.json")
    models = [("base", config, base, "none")] + [(m, config, base, m) for m in args.zero_shot]
    for item in args.checkpoint:
        name, _, folder = item.partition("=")
        models.append((name, os.path.join(folder, "bert_config.json"), os.path.join(folder, "bert_model.ckpt"),
                       "none"))
    return models


def run(args):
    from bert4long.training import build_mlm_model
    from studies.position_study import parse_method, prepare_data

    data = prepare_data(args.tokenizer, args.study)
    vocabulary = args.tokenizer.ids_to_tokens(range(args.tokenizer.vocab_size))
    rare = rare_pieces(data["pack"](WINDOW), vocabulary, args.max_count)
    tokens, positions, weights, scored = masked_windows(data["eval_long"], rare, args.tokenizer.mask_id, args.window)
    clusters = np.asarray(data["eval_documents"])[scored["sequence"]]
    folder = os.path.join(os.path.splitext(args.out)[0] + "_records", args.corpus)
    results = load_json(args.out, {})
    entry = results.setdefault(args.corpus, {"readings": {}})
    entry.update(rule="docs/long_reading.md", max_count=args.max_count, window=args.window,
                 eval_documents=data["eval_documents"],
                 counts={c: int((scored["kind"] == c).sum()) for c in CLASSES})
    os.makedirs(folder, exist_ok=True)
    np.savez_compressed(os.path.join(folder, "tokens.npz"), cluster=clusters, **scored)
    for name, config, checkpoint, method in readings(args):
        model, _, _ = build_mlm_model(config, checkpoint, **parse_method(method, args.long_length))
        sha256 = checkpoint_sha256(checkpoint)
        for reading, split in (("long", None), ("windows", args.window)):
            if name == "base" and reading == "long":
                continue   # 512 positions: the base reads windows only
            predicted = read_masked(model, tokens, positions, weights, split, compiled=not args.quick)
            correct = predicted == scored["answer"]
            np.savez_compressed(os.path.join(folder, f"{name}-{reading}.npz"), correct=correct)
            entry["readings"][f"{name}/{reading}"] = {
                "checkpoint": checkpoint, "sha256": sha256, "method": method,
                "accuracy": float(correct.mean()) if len(correct) else None}
            print(f"{args.corpus} {name}/{reading}: " + ", ".join(
                f"{c} {correct[scored['kind'] == c].mean():.1%}" for c in CLASSES if (scored["kind"] == c).any()),
                flush=True)
    entry["stamp"] = machine_stamp()
    write_json(args.out, results)


def load_records(out, corpus):
    """``{reading: {"correct", "kind", "cluster"}}`` of one corpus, read back from the committed records."""
    folder = os.path.join(os.path.splitext(out)[0] + "_records", corpus)
    tokens = dict(np.load(os.path.join(folder, "tokens.npz")))
    records = {}
    for name in sorted(load_json(out, {})[corpus]["readings"]):
        model, reading = name.split("/")
        correct = np.load(os.path.join(folder, f"{model}-{reading}.npz"))["correct"]
        records[name] = {"correct": correct, "kind": tokens["kind"], "cluster": tokens["cluster"]}
    return records


def parse_args(argv=None):
    from studies.common import minilm_tokenizer
    from studies.position_study import parse_args as study_args

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=["wikipedia", "speeches"], default="wikipedia")
    parser.add_argument("--base", default=os.path.join(HERE, "..", "..", "shared", "models", "minilm-mlm"),
                        help="the base MLM checkpoint's folder (default ../shared/models/minilm-mlm)")
    parser.add_argument("--zero-shot", nargs="*", default=list(ZERO_SHOT), help="extensions of the base to read")
    parser.add_argument("--checkpoint", action="append", default=[], metavar="NAME=DIR",
                        help="a continued model to read (a folder with bert_config.json and bert_model.ckpt)")
    parser.add_argument("--long-length", type=int, default=1536)
    parser.add_argument("--eval-sequences", type=int, default=24)
    parser.add_argument("--max-count", type=int, default=MAX_COUNT)
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--quick", action="store_true", help="tiny random model, 64-token windows of 16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    study = ["--corpus", args.corpus, "--long-length", str(args.long_length),
             "--eval-sequences", str(args.eval_sequences)]
    if args.quick:
        args.study, _ = study_args(["--quick", "--eval-sequences", "4"])
        args.base, args.window, args.long_length = _tiny_base(args.study), 16, 64
        args.max_count, args.zero_shot = 1000, ["hierarchical-0.4"]
    else:
        args.study, _ = study_args(["--base-checkpoint", args.base, *study])
    args.tokenizer = minilm_tokenizer()
    args.out = args.out or os.path.join(HERE, "results", "long_reading_quick.json" if args.quick
                                        else "long_reading.json")
    return args


def _tiny_base(study):
    """A tiny random MLM checkpoint on MiniLM's vocabulary with 32 positions: a folder in the study's run folder."""
    import shutil

    from bert4long.training import build_mlm_model

    folder = os.path.join(study.run_dir, "tiny_base")
    if not os.path.exists(os.path.join(folder, "bert_model.ckpt.index")):
        _, builder, _ = build_mlm_model(study.config, None)
        builder.save_weights_as_checkpoint(os.path.join(folder, "bert_model.ckpt"))
        shutil.copy(study.config, os.path.join(folder, "bert_config.json"))
    return folder


def main(argv=None):
    run(parse_args(argv))


if __name__ == "__main__":
    main()


def _pct(value_se):
    return f"{100 * value_se[0]:.1f} ± {100 * value_se[1]:.1f}"


def section(path, number):
    """docs/results.md's section for the long-reading JSON at ``path`` (one table per corpus), from its records."""
    data = load_json(path, {})
    title = os.path.splitext(os.path.basename(path))[0]
    out = [f"## {number}. The long-reading test ({title}: rare pieces at most {_first(data, 'max_count')} times "
           "in the training text)\n",
           "The rule, committed before its results: docs/long_reading.md. Accuracy (%) of the masked piece, per "
           "class, ± its standard error clustered by document; `effect`: the gain over the base's windows on far "
           "minus the gain on none (points); `over own windows`: the same against the model's own 512-token "
           "windows.\n"]
    for corpus, entry in data.items():
        records = load_records(path, corpus)
        rows = verdicts(records)
        control = positive_control(records)
        counts = entry["counts"]
        out.append(f"**{corpus}** ({len(set(entry['eval_documents']))} documents; far {counts['far']}, near "
                   f"{counts['near']}, none {counts['none']} tokens). Positive control (base windows, near − none): "
                   f"{_pct(control[:2])} points, {'passes' if control[2] else 'fails: no verdict is drawn'}.\n")
        table = ["| reading | far | near | none | effect | over own windows | p | reads past 512 |",
                 "|---|---|---|---|---|---|---|---|"]
        for name, row in rows.items():
            own = row.get("effect_over_own_windows")
            verdict = ("–" if not name.endswith("/long") else "not decided" if not control[2]
                       else "yes" if row["reads_past_512"] else "not shown")
            table.append(f"| {name} | " + " | ".join(_pct(row["accuracy"][c]) for c in CLASSES)
                         + f" | {_pct(row['effect']) if name != 'base/windows' else '–'}"
                         + f" | {_pct(own) if own else '–'} | "
                         + (f"{row['p']:.3g}" if name != "base/windows" else "–") + f" | {verdict} |")
        out += ["\n".join(table), ""]
    return out


def _first(data, key):
    return next((entry[key] for entry in data.values() if key in entry), None)
