"""The product's sections of docs/results.md, read from the JSON in benchmarks/results/, and the formatting the
whole page shares (`studies.report` writes the page: the studies' sections and these, in one numbering).

Every number is read from the JSON files the benchmark modules wrote; each section is stamped with the machine,
library versions and the command that made it.
"""
import os

from benchmarks.common import load_json


def fmt(value, digits=3):
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def pct(value):
    return "–" if value is None else f"{100 * value:.1f}%"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def stamp_line(stamp):
    if not stamp:
        return ""
    if not isinstance(stamp, dict):
        return f"_Run on: {stamp}_"
    versions = ", ".join(f"{k} {v}" for k, v in sorted(stamp.get("versions", {}).items()))
    parts = [f"{stamp.get('cpus', '?')} CPUs ({stamp.get('processor', stamp.get('machine', '?'))})",
             f"Python {stamp.get('python', '?')}", versions, stamp.get("time", "")]
    if stamp.get("load"):
        parts.append("load average {} / {} / {} (1 / 5 / 15 min) at that time".format(*stamp["load"]))
    line = "_Machine: " + "; ".join(p for p in parts if p) + "._"
    if stamp.get("command"):
        line += f"  \n_Command: `{stamp['command']}`_"
    return line


def plotting():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        return None


# --- batch size ---------------------------------------------------------------------------------------


def batch_section(data, number=3):
    settings = data.get("settings", {})
    out = [f"## {number}. Largest training batch under a memory budget (BERT-base size)\n", stamp_line(data.get("stamp")) + "\n"]
    if len(data.get("commands", [])) > 1:
        out.append("_The rows come from: " + "; then ".join(f"`{c}`" for c in data["commands"]) + "_\n")
    model = settings.get("model", {})
    on_gpu = any(r.get("device") == "GPU" for r in data.get("rows", []))
    memory = "device memory" if on_gpu else "peak resident memory of the process"
    out.append(f"Model: {model.get('num_hidden_layers')} layers, hidden {model.get('hidden_size')}, "
               f"{model.get('num_attention_heads')} heads, intermediate {model.get('intermediate_size')}, vocab "
               f"{model.get('vocab_size')}, random weights, gathered MLM head, AdamW; one training step per probe in "
               f"a fresh process; budget {settings.get('memory_budget_gb')} GB "
               f"({memory}); "
               f"XLA {'on' if settings.get('xla') else 'off'}; batch capped at {settings.get('max_batch')}.\n")
    rows = data.get("rows", [])
    out.append("Each cell: the largest batch that fits (its peak memory). `+`: the search hit the batch cap. "
               "Options not shown were not run (the script covers lengths 512/1,024/1,536 and float32, mixed "
               "precision, recompute and chunked attention; see `python -m benchmarks.batch_size --help`).\n")
    lengths = sorted({r["length"] for r in rows})
    options = list(dict.fromkeys(r["option"] for r in rows))
    cell = {(r["length"], r["option"]): r for r in rows}
    body = []
    for length in lengths:
        row = [length]
        for option in options:
            r = cell.get((length, option))
            row.append("–" if r is None else f"{r['max_batch']}{'+' if r.get('capped') else ''}"
                       + (f" ({r['peak_gb']:.1f} GB)" if r.get("peak_gb") else ""))
        body.append(row)
    out.append(table(["length"] + options, body) + "\n")
    return out


def batch_headline(data):
    rows = data.get("rows", [])
    if not rows:
        return []
    budget = data.get("settings", {}).get("memory_budget_gb")
    return ["Largest BERT-base training batch within " + f"{budget} GB: "
            + ", ".join(f"{r['option']}@{r['length']} = {r['max_batch']}" for r in rows) + "."]


# --- speed against the peers ----------------------------------------------------------------------

SPEED_IMPLS = {
    "bert4long": "the bert4keras-style user code (full-vocabulary MLM output, sparse cross-entropy, 15% mask as "
                 "sample weight); its `MaskedLMModel` step projects only the weighted positions",
    "bert4long-keras-step": "the same user code with that off (`head_on_weighted_positions = False`): "
                            "Keras's own step, vocabulary projection at every position",
    "bert4long-best": "gathered MLM head (`gathered_mlm=True`), precision and XLA as in the settings",
    "bert4long-lean": "gathered head + `attention='chunked'` + `recompute=True`, float32, XLA",
    "bert4keras": "bert4keras 0.11.5 on tf-keras, the same user code",
    "hf-torch": "Hugging Face transformers `BertForMaskedLM` on PyTorch CPU, AdamW (labels -100 off the mask)",
}


def speed_targets(rows):
    """The issue's speed and memory targets, from one run's rows: dicts with ``label``, ``goal``
    (``'≥ 1.5×'``), ``ratio``, ``measured`` (text) and ``met``; memory ones have ``memory=True``."""
    cell = {(r.get("impl"), r.get("length")): r for r in rows if "train_step_s" in r}
    out = []
    for label, impl, peer, length, key, goal in (
            ("same user code, MLM training step vs bert4keras at 1,024", "bert4long", "bert4keras", 1024,
             "train_step_s", 1.5),
            ("same user code, forward vs bert4keras at 1,024", "bert4long", "bert4keras", 1024, "forward_s", 1.0),
            ("best path, MLM training step vs bert4keras at 512", "bert4long-best", "bert4keras", 512,
             "train_step_s", 3.0),
            ("best path, MLM training step vs PyTorch at 512", "bert4long-best", "hf-torch", 512, "train_step_s", 1.0)):
        mine, theirs = cell.get((impl, length)), cell.get((peer, length))
        if mine and theirs:
            ratio = theirs[key] / mine[key]
            out.append({"label": label, "goal": f"≥ {goal}×", "ratio": ratio, "measured": f"{ratio:.2f}×",
                        "met": ratio >= goal, "memory": False})
    peer = cell.get(("bert4keras", 2048))
    for impl in ("bert4long", "bert4long-best", "bert4long-lean"):
        mine = cell.get((impl, 2048))
        if peer and mine:
            share = mine["peak_rss_gb"] / peer["peak_rss_gb"]
            out.append({"label": f"peak memory of the training step at 2,048, {impl} vs bert4keras", "goal": "≤ 0.5×",
                        "ratio": share, "measured": f"{share:.2f}× ({mine['peak_rss_gb']:.2f} vs "
                                                    f"{peer['peak_rss_gb']:.2f} GB)", "met": share <= 0.5,
                        "memory": True})
    return out


def speed_section(data, number=4):
    rows = data.get("rows", [])
    out = [f"## {number}. Speed and memory against bert4keras and Hugging Face\n", stamp_line(data.get("stamp")) + "\n"]
    out.append(f"Model: {data.get('model')}; batch {rows[0].get('batch') if rows else '?'}; median of the "
               "repeats; every (implementation, length) in a fresh process, all in this one run. bert4long-best ran "
               f"in {data.get('best_precision') or 'float32'} with XLA {data.get('best_xla', 'on')}.\n")
    out += [f"- `{impl}`: {text}" for impl, text in SPEED_IMPLS.items() if any(r.get("impl") == impl for r in rows)]
    peers = {k: v for r in rows for k, v in r.get("peer_versions", {}).items()}
    if peers:
        out.append("- peer environment: " + ", ".join(f"{k} {v}" for k, v in sorted(peers.items())))
    out.append("")
    columns = ["impl", "length", "forward_s", "train_step_s", "train_tokens_per_s", "peak_rss_gb",
               "train_x_vs_bert4keras", "forward_x_vs_bert4keras", "memory_vs_bert4keras", "train_x_vs_hf-torch"]
    out.append(table(columns, [[r.get(c) for c in columns] for r in rows if "train_step_s" in r]) + "\n")
    missing = [f"{r.get('impl')} at {r.get('length')}: {r['error'][-1] if isinstance(r['error'], list) else r['error']}"
               for r in rows if r.get("error")]
    if missing:
        out.append("Not measured: " + "; ".join(missing) + ".\n")
    targets = speed_targets(rows)
    if targets:
        out.append(table(["target", "measured", "met"],
                         [[f"{t['label']}: {t['goal']}", t["measured"], t["met"]] for t in targets]) + "\n")
    return out


def speed_headline(data):
    """The targets, one line each; of the memory targets only the leanest bert4long path."""
    targets = speed_targets(data.get("rows", []))
    memory = sorted((t for t in targets if t["memory"]), key=lambda t: t["ratio"])
    return [f"{t['label']}: {t['measured']} ({'met' if t['met'] else 'not met'}; target {t['goal']})"
            for t in [t for t in targets if not t["memory"]] + memory[:1]]


def raw_text_section(data, number):
    """benchmarks/raw_text_serving.py: documents/s both ways, then the tokenizer alone in characters/s."""
    out = [f"## {number}. Serving raw text: in-graph tokenization against Python + int32\n",
           stamp_line(data.get("stamp")) + "\n",
           (f"Model: {data.get('model')}; strategy {data.get('strategy')}; one SavedModel per length serves both "
           "ways (docs/serving.md).\n")]
    rows = data.get("rows", [])
    if rows:
        out.append(table(["tokens", "batch", "pipeline", "documents", "seconds", "documents/s"],
                         [[r["tokens"], r["batch"], r["pipeline"], r["documents"], r["seconds"],
                           r["documents_per_s"]] for r in rows]) + "\n")
    tokens = data.get("tokenizer_rows", [])
    if tokens:
        out.append("The tokenizer alone (fresh instances, whole corpus in one call):\n")
        out.append(table(["corpus", "tokenizer", "characters", "seconds", "characters/s", "exact documents"],
                         [[r["corpus"], r["tokenizer"], r["characters"], r["seconds"], f"{r['chars_per_s']:,}",
                           r["exact_documents"]] for r in tokens]) + "\n")
    return out


def finetune_lengths_section(runs, number):
    """`bert4long finetune` on the speeches: every document padded to --seq-len (before) against batches by length."""
    out = [f"## {number}. Fine-tuning cost: batches by length against padding to --seq-len\n",
           ("`bert4long finetune` on the 2012 convention speeches (party; 70/30 split per party), one fresh process per "
            "row under `/usr/bin/time -v` (`benchmarks/finetune_lengths.py`); *before* is the source tree that padded "
            "every document to `--seq-len` (bf4c1a3, the commit before batches by length). Scores are those of the "
            "final (best) weights on the validation speeches; one seed, so a few points of macro-F1 are noise.\n")]
    rows = []
    for data in runs:
        settings = data.get("settings", {})
        epochs = settings.get("epochs")
        span = f"{settings.get('steps')} steps" if settings.get("steps") else f"{epochs} epoch{'s' * (epochs != 1)}"
        for r in data.get("rows", []):
            if "error" in r:
                continue
            recall = ", ".join(f"{k} {v:.2f}" for k, v in r.get("recall", {}).items())
            epochs_s = " / ".join(f"{t:.0f}" for t in r["epoch_s"]) if r.get("epoch_s") else fmt(r.get("epoch_1_s"), 0)
            side = " (side by side)" if settings.get("side_by_side") else ""
            buckets = next((line.split("padded to ")[1].split(" tokens")[0] for line in r.get("output", [])
                            if line.startswith("batches by length")), "--seq-len")
            rows.append([settings.get("seq_len"), settings.get("batch_size"), span + side, r["variant"], buckets, epochs_s,
                         fmt(r.get("estimate_s_per_epoch"), 0), pct(r.get("padding")), fmt(r.get("wall_s"), 0),
                         fmt(r.get("peak_rss_gb"), 2), fmt(r.get("macro_f1")), pct(r.get("accuracy")), recall])
    out.append(stamp_line(runs[0].get("stamp")) + "\n")
    out.append(table(["tokens", "batch", "run", "variant", "padded to", "epoch s", "estimate s/epoch", "padding", "wall s",
                      "peak RSS GB", "macro-F1", "accuracy", "recall"], rows) + "\n")
    return out


# --- peers' JSON: render whatever rows they hold ------------------------------------------------


def generic_rows(data):
    for key in ("rows", "results"):
        if isinstance(data.get(key), list) and data[key] and isinstance(data[key][0], dict):
            return data[key]
    if isinstance(data.get("corpora"), dict):  # tokenization.json
        rows = []
        for corpus, c in data["corpora"].items():
            for name, r in c.get("candidates", {}).items():
                rows.append({"corpus": corpus, "candidate": name, **{k: v for k, v in r.items() if not isinstance(v, dict)}})
        return rows
    return []


def generic_section(title, data, figure=None):
    rows = generic_rows(data)
    if not rows:
        return []
    columns = list(dict.fromkeys(k for r in rows for k, v in r.items() if not isinstance(v, (dict, list))))
    stamp = data.get("stamp") or (data.get("machine") if isinstance(data.get("machine"), dict) else None)
    out = [f"## {title}\n", stamp_line(stamp) + "\n" if stamp else ""]
    if len(data.get("stamps", [])) > 1:   # rows added by later runs (`--add`): a row's ``run`` is its index here
        kept = {r.get("run") for r in rows}
        replaced = [str(i) for i in range(len(data["stamps"])) if i not in kept]
        out.append("The rows come from several runs (column `run`):\n\n" + "\n".join(
            f"- run {i}: `{s.get('command')}`, {s.get('time')}, load {' / '.join(map(str, s.get('load', [])))}"
            for i, s in enumerate(data["stamps"]) if i in kept) + "\n"
            + (f"\nEvery row of run{'s' * (len(replaced) > 1)} {', '.join(replaced)} was measured again by a later "
               "run.\n" if replaced else ""))
    settings = {k: v for k, v in data.items() if not isinstance(v, (list, dict)) and k not in ("machine",)}
    if settings:
        out.append("Settings: " + ", ".join(f"{k} = {fmt(v)}" for k, v in settings.items()) + ".\n")
    out.append(table(columns, [[r.get(c) for c in columns] for r in rows]) + "\n")
    if figure:
        out.append(f"![{title}]({figure})\n")
    return out


def serving_section(title, data, figure=None):
    """benchmarks/serving.py: tokens per second (peak GB) by request and implementation, then every row."""
    from benchmarks.serving import IMPLS, SIZES

    rows = data.get("rows", [])
    requests = sorted({(r["size"], r["length"], r["batch"]) for r in rows},
                      key=lambda key: (list(SIZES).index(key[0]), *key[1:]))
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]

    def cell(request, impl):
        row = next((r for r in rows if (r["size"], r["length"], r["batch"]) == request and r["impl"] == impl), None)
        if row is None:
            return "not run"
        if "tokens_per_s" in row:
            return f"{row['tokens_per_s']:,.0f} ({row['peak_rss_gb']:.1f} GB)"
        return "out of memory" if "memory" in row["status"] or "SIGKILL" in row["status"] else row["status"]

    pivot = table(["size", "tokens × batch", *impls],
                  [[size, f"{length:,} × {batch}", *(cell((size, length, batch), i) for i in impls)]
                   for size, length, batch in requests])
    out = generic_section(title, data, figure)
    out.insert(2, "Tokens per second (the process's peak memory); the rows below give each one's spread, run and "
                  "ratios (taken within a run only).\n\n" + pivot + "\n")
    return out


PEER_SECTIONS = {"serving.json": serving_section}


def runs_named(results_dir, prefix):
    """The JSON files of ``results_dir`` whose names start with ``prefix`` (``long_encoders_<model>_<mode>.json``,
    ``finetune_lengths*.json``), in name order; not a --quick smoke run's."""
    if not os.path.isdir(results_dir):
        return []
    names = sorted(n for n in os.listdir(results_dir)
                   if n.startswith(prefix) and n.endswith(".json") and "quick" not in n)
    return [data for data in (load_json(os.path.join(results_dir, n)) for n in names) if data]


def long_encoders_section(runs, number):
    """One table per run of benchmarks/long_encoders.py: seconds and peak RSS beside transformers'."""
    out = [f"## {number}. Long-document encoders at published sizes: bert4long vs transformers (PyTorch)\n",
           ("Random weights in the published shapes, batch 1, one step in a fresh subprocess per row, all rows of a "
            "table in one run on one machine (`benchmarks/long_encoders.py`). `bert4long-lean` is the memory-saving "
            "path (ModernBERT: chunked global attention + recompute; Longformer: recompute). Ratios are "
            "bert4long / transformers: below 1 is faster or smaller.\n")]
    for data in runs:
        ratios = {(r["impl"], r["length"]): r for r in data.get("ratios", [])}
        step = "forward + backward" if data.get("mode") == "train" else "forward"
        out.append(f"**{data.get('model')}, {step}**  \n" + stamp_line(data.get("machine")) + "\n")
        rows = []
        for r in data.get("results", []):
            ratio = ratios.get((r["impl"], r["length"]), {})
            ok = r.get("status") == "ok"
            rows.append([r["impl"], f"{r['length']:,}", fmt(r.get("step_s")) if ok else r.get("status"),
                         fmt(r.get("peak_rss_gb")) if ok else "", fmt(ratio.get("time_vs_hf")),
                         fmt(ratio.get("peak_rss_vs_hf"))])
        out.append(table(["implementation", "tokens", "step s", "peak RSS GB", "time vs HF", "RSS vs HF"], rows) + "\n")
    return out


PEERS = [("train.json", "Training throughput and memory options (MiniLM size)"),
         ("attention.json", "Attention kernels: time and memory against length"),
         ("tokenization.json", "Tokenization speed and exactness"),
         ("backends.json", "The same model on each Keras backend: forward and MLM training step (MiniLM size, CPU)"),
         ("serving.json", "Serving on CPU: bert4long against ONNX Runtime and transformers (same weights)"),
         ("profile_step.json", "Where a training step's time goes, and its matmuls' share of the machine's peak (CPU)"),
         ("profile_serve.json", "Where a served forward pass's time goes (the SavedModel's graph, batch 1, CPU)"),
         ("precision_accuracy.json", "What bfloat16 costs in accuracy (same weights, float32 against mixed_bfloat16)")]
