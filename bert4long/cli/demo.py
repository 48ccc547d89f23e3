"""The main job (``bert4long pretrain`` with no arguments, or ``--demo``): what reading long buys, measured.

A masked LM trained on short windows reads held-out documents at 4x its trained length three
ways — ``split`` (independent trained-length windows: no extension), ``copy`` (the position
table repeated) and ``hierarchical`` (Su's decomposition) — then continues MLM training at 4x for
a few steps (hierarchical and copy) and reads again. MLM accuracy on the masked positions of
held-out text (a fixed masking seed), before and from the trained length, with standard errors
clustered by document (`bert4long.training.position_eval`). On the built-in model
(`bert4long.pretrained`) and the Wikipedia articles shipped with it by default; ``--checkpoint``/``--corpus``
run the same comparison on yours (the last 10% of the documents held out).
"""
import json
import os
import time

from bert4long.cli.inputs import choose_tokenizer
from bert4long.position_alpha import DEFAULT_ALPHA

DEMO_SETTINGS = {"batch_size": 8, "steps": 300, "learning_rate": 3e-4, "eval_sequences": 96,
                 "hierarchical_position": DEFAULT_ALPHA, "out": "bert4long_demo"}
RESULTS = "demo_results.json"
GUIDE = ("  split         the text cut into independent {n}-token windows: what the model reads without bert4long\n"
         "  copy          one {m}-token window, positions {n}+ reusing the table's rows 0..{n1} (repeated)\n"
         "  hierarchical  one {m}-token window, hierarchical position decomposition (Su 2020), alpha {alpha}")


def runs_demo(args, given):
    """Whether the command is the main job: ``pretrain`` with --demo, or with no option but --out and --overwrite
    (``given``: the options written on the command line)."""
    return args.command == "pretrain" and (args.demo or set(given) <= {"out", "overwrite"})


def demo_settings(args, given):
    """The main job's values of the options ``given`` leaves out: `DEMO_SETTINGS`, the extensions built as asked, and
    the built-in model (`bert4long.pretrained`) unless --checkpoint."""
    from bert4long import pretrained

    settings = {key: value for key, value in DEMO_SETTINGS.items() if key not in given}
    settings["override_position_extension"] = True   # it compares extensions, whatever the checkpoint records
    if "checkpoint" not in given:
        settings.update(checkpoint=pretrained.checkpoint(), config=os.path.join(pretrained.path(), "bert_config.json"))
    elif args.config is None and not os.path.isdir(args.checkpoint):
        settings["config"] = os.path.join(os.path.dirname(args.checkpoint), "bert_config.json")
    return settings


def check_demo_arguments(given):
    """Refuse the main job on a checkpoint without a corpus, or a corpus without a checkpoint."""
    if ("corpus" in given) != ("checkpoint" in given):
        raise ValueError("--demo on your own model needs both --checkpoint and --corpus (or neither, for the "
                         "built-in model and Wikipedia articles)")


def demo_length(args, given, trained):
    """The tokens the main job reads at once: --seq-len if given, else 4x the ``trained`` positions."""
    return args.seq_len if "seq_len" in given or not trained else 4 * trained


def _documents(args, tokenizer):
    """``(train, held_out, names, where)``: content ids of the training and held-out documents."""
    if args.corpus is None:
        from bert4long import pretrained
        from bert4long.pretrained import HELD_OUT_ARTICLES

        ids = tokenizer.encode_documents(pretrained.wikipedia_articles())
        held = [i for i in range(len(ids)) if i in HELD_OUT_ARTICLES]
        where = f"{len(held)} English Wikipedia articles the model never saw (shipped with bert4long)"
    else:
        from bert4long.data.corpus import load_corpus

        ids = load_corpus(args.corpus, tokenizer, errors=args.errors).token_ids
        if len(ids) < 2:
            raise ValueError(f"--corpus {args.corpus!r} holds {len(ids)} document(s): the comparison holds out "
                             "the last 10% of the documents and trains on the rest, so give at least 2")
        held = list(range(len(ids) - max(1, len(ids) // 10), len(ids)))
        where = f"the last {len(held)} of the {len(ids)} documents of {args.corpus} (held out of training)"
    train = [doc for i, doc in enumerate(ids) if i not in held]
    return train, [ids[i] for i in held], held, where


def long_windows(documents, names, length, cls_id, sep_id, limit):
    """Up to ``limit`` windows ``[CLS] + length-2 tokens + [SEP]`` from ``documents``, round robin over the
    documents (so a few long ones do not fill the set), and each window's document name.

    >>> long_windows([[5, 6, 7, 8, 9], [3, 4]], ["a", "b"], 4, 1, 2, limit=5)
    (array([[1, 5, 6, 2],
           [1, 3, 4, 2],
           [1, 7, 8, 2]], dtype=int32), ['a', 'b', 'a'])
    """
    import numpy as np

    width = length - 2
    per_document = [[doc[s:s + width] for s in range(0, len(doc) - width + 1, width)] for doc in documents]
    windows, groups = [], []
    for turn in range(max(map(len, per_document), default=0)):
        for name, pieces in zip(names, per_document):
            if turn < len(pieces) and len(windows) < limit:
                windows.append([cls_id, *pieces[turn], sep_id])
                groups.append(name)
    return np.asarray(windows, "int32").reshape(-1, length), groups


def _method_kwargs(method, args, options, length):
    """The model of ``method`` at ``length`` tokens, with the attention options given (--attention, --attention-config,
    --recompute; ``options``: the resolved `ModelOptions`)."""
    from bert4long.cli.options import model_kwargs

    kwargs = {k: v for k, v in model_kwargs(args, options).items()
              if k in ("attention", "attention_config", "recompute", "override_position_extension")}
    if method == "hierarchical":
        kwargs["hierarchical_position"] = args.hierarchical_position
    elif method == "copy":
        kwargs.update(position_extension="copy", position_extension_length=length)
    else:   # split: the trained positions only, whatever the checkpoint records
        kwargs["position_extension"] = "none"
    return kwargs


def _measure(model, data, split=None):
    from bert4long.training.position_eval import masked_counts

    return masked_counts(model, data["windows"], data["masker"], boundary=data["trained"], split=split,
                         batch_size=8, seed=12345)


def _cell(counts, region, groups):
    from bert4long.training.position_eval import accuracy_with_error

    accuracy, error = accuracy_with_error(counts[f"n_{region}_all"], counts[f"correct_{region}_all"], groups)
    return f"{100 * accuracy:5.1f} ± {100 * error:3.1f} %"


def _row(label, counts, data, note=""):
    print(f"  {label:<52} {_cell(counts, 'lt', data['groups']):>16} {_cell(counts, 'ge', data['groups']):>17}  "
          + note, flush=True)


def _train(model, data, args):
    from bert4long.training import compile_mlm, make_optimizer, mlm_batches, takes_segment_ids

    compile_mlm(model, make_optimizer(args.learning_rate, args.steps, args.warmup_steps), jit_compile=not args.no_xla)
    batches = mlm_batches(data["train"], data["masker"], args.batch_size, seed=args.seed,
                          segment_ids=takes_segment_ids(model))
    begin = time.perf_counter()
    history = model.fit(batches, steps_per_epoch=args.steps, epochs=1, verbose=0)
    return f"train loss {history.history['loss'][-1]:.2f}, {time.perf_counter() - begin:.0f} s"


def _compare(args, resolved, data):
    """The comparison's table: zero-shot, then after ``args.steps`` steps at the long length; its counts (the models
    built from ``resolved``'s checkpoint and model options)."""
    import keras

    from bert4long.training import build_mlm_model

    n, m = data["trained"], data["length"]
    print(f"\nMLM accuracy on masked held-out tokens, ± standard error over the {len(set(data['groups']))} "
          f"{data['unit']}\n  {'':<52} {f'positions < {n}':>16} {f'positions >= {n}':>17}")
    counts, builders = {}, {}
    for method in ("split", "copy", "hierarchical"):
        model, _, _ = build_mlm_model(resolved.source, **_method_kwargs(method, args, resolved.model, m))
        counts["zero-shot", method] = _measure(model, data, split=n if method == "split" else None)
        _row(f"zero-shot {method}", counts["zero-shot", method], data)
    print(f"  continued MLM at {m} tokens, {args.steps} steps of {args.batch_size} (same batches for both):")
    for method in ("hierarchical", "copy"):
        keras.utils.set_random_seed(args.seed)
        model, builders[method], _ = build_mlm_model(resolved.source, **_method_kwargs(method, args, resolved.model, m))
        trained = _train(model, data, args)
        counts["trained", method] = _measure(model, data)
        _row(f"trained   {method}", counts["trained", method], data, f"({trained})")
        if method == "hierarchical":
            counts["trained", "split"] = _measure(model, data, split=n)
            _row(f"trained   split (that model, {n}-token windows)", counts["trained", "split"], data)
    return counts, builders["hierarchical"]


def _difference(a, b, region, groups):
    """``a - b`` accuracy at ``region`` (same masked positions) and its paired, document-clustered error."""
    from bert4long.training.position_eval import accuracy_with_error

    return accuracy_with_error(a[f"n_{region}_all"], a[f"correct_{region}_all"] - b[f"correct_{region}_all"], groups)


def _explain(counts, args, data):
    """The lines that read the table: the gain from reading long, and the reason for every figure that fell."""
    n, groups = data["trained"], data["groups"]
    gain, error = _difference(counts["trained", "hierarchical"], counts["trained", "copy"], "ge", groups)
    lines = [f"hierarchical vs copy after the same {args.steps} steps, positions >= {n}: {100 * gain:+.1f} ± "
             f"{100 * error:.1f} points" + (" (the hierarchical table starts from rows the model already reads, so "
                                            "training has less to repair)" if gain > 2 * error else "")]
    for label, other in (("its own split", ("trained", "split")), ("the original split", ("zero-shot", "split"))):
        gain, error = _difference(counts["trained", "hierarchical"], counts[other], "ge", groups)
        lines.append(f"reading {data['length']} tokens at once vs {label}, positions >= {n}: "
                     f"{100 * gain:+.1f} ± {100 * error:.1f} points" + (
                         f": below, because {args.steps} steps have not yet taught the model to read positions "
                         f"{n}+ as well as its trained ones (whether more --steps close the gap: docs/results.md "
                         "follows it over 1,000 steps on a 6-layer MiniLM)" if gain < 0 else
                         ": the model uses the context beyond its trained length" if gain > 2 * error else ""))
    for region, where, why in (("lt", f"< {n}", f"these tokens now also attend to tokens at positions {n}+, which "
                                "the model has never seen"),
                               ("ge", f">= {n}", "those positions were never trained, so the model has yet to "
                                "learn to read them")):
        for method in ("copy", "hierarchical"):
            gap, error = _difference(counts["zero-shot", method], counts["zero-shot", "split"], region, groups)
            if gap < 0:
                lines.append(f"zero-shot {method} is below split at positions {where} ({100 * gap:+.1f} ± "
                             f"{100 * error:.1f}): {why}")
    for method, before in (("hierarchical", "hierarchical"), ("copy", "copy"), ("split", "split")):
        for region, where in (("lt", f"< {n}"), ("ge", f">= {n}")):
            change, error = _difference(counts["trained", method], counts["zero-shot", before], region, groups)
            if change >= 0:
                continue
            why = ("within 2 standard errors of no change: the noise of this sample" if -change < 2 * error else
                   f"a real drop: {args.steps} steps of a fresh optimizer at learning rate {args.learning_rate:g} "
                   f"move weights tuned on {n}-token windows; more --steps or a lower --learning-rate")
            lines.append(f"{method} at positions {where} fell after training ({100 * change:+.1f} ± {100 * error:.1f}"
                         f" points): {why}")
    print("\n" + "\n".join(lines), flush=True)


def run_demo(args, resolved):
    """Print the comparison (see the module docstring) and save the model trained with hierarchical positions
    (``resolved``: the command's `bert4long.cli.resolved.Resolved`)."""
    import keras

    from bert4long.cli.run_folder import copy_tokenizer, start_writing
    from bert4long.data.packing import pack_documents
    from bert4long.output_folders import folder_bytes, write_text_atomically
    from bert4long.training import masker_for
    from bert4long.training.position_eval import REGIONS

    keras.utils.set_random_seed(args.seed)
    tokenizer = choose_tokenizer(args, resolved.source).tokenizer
    trained = resolved.source.trained_positions
    m = demo_length(args, resolved.given, trained)
    train, held, names, where = _documents(args, tokenizer)
    windows, groups = long_windows(held, names, m, tokenizer.cls_id, tokenizer.sep_id, args.eval_sequences)
    if not len(windows):
        raise ValueError(f"no held-out document reaches {m} tokens: pass a smaller --seq-len or a "
                         "corpus with longer documents")
    unit = "documents"
    if len(set(groups)) < 2:   # one held-out document: its windows are the draws
        groups, unit = list(range(len(windows))), "windows"
    out = os.path.abspath(args.out)
    print(f"bert4long makes a BERT trained on {trained}-token inputs read longer documents. This run reads "
          f"{len(windows)} windows of {m} tokens ({m / trained:g}x) from {where}, with the "
          f"model {args.checkpoint}, three ways:\n" + GUIDE.format(n=trained, m=m, n1=trained - 1,
                                                                  alpha=args.hierarchical_position)
          + f"\nthen trains at {m} tokens for {args.steps} steps and reads again. Writing to {out}",
          flush=True)
    data = {"trained": trained, "length": m, "windows": windows, "groups": groups, "unit": unit,
            "masker": masker_for(tokenizer, m),
            "train": pack_documents(train, m, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                                    pad_id=tokenizer.pad_id or 0)}
    counts, builder = _compare(args, resolved, data)
    _explain(counts, args, data)
    start_writing(resolved.output)   # (--overwrite replaces an earlier run only now, after all was read and measured)
    os.makedirs(out, exist_ok=True)
    builder.save_weights_as_checkpoint(os.path.join(out, "bert_model.ckpt"))
    builder.write_config(os.path.join(out, "bert_config.json"))
    copy_tokenizer(args, out)
    results = {"held_out": where, "documents": sorted(set(map(str, groups))), "windows": len(windows),
               "trained_length": trained, "seq_len": m, "steps": args.steps,
               "counts": {f"{stage} {method}": {k: c[k].tolist() for k in c} for (stage, method), c in counts.items()},
               "regions": REGIONS}
    write_text_atomically(os.path.join(out, RESULTS), json.dumps(results))
    print(f"\nSaved {out} ({folder_bytes(out) / 2**20:.1f} MB): the model after {args.steps} steps with hierarchical "
          f"positions (bert_model.ckpt.*, bert_config.json, vocab), {RESULTS}.\n"
          "The study on a 6-layer MiniLM (2-4x, zero-shot and trained): docs/results.md in the bert4long repository.\n"
          "The same comparison on your own checkpoint and corpus (the last 10% of the documents held out):\n"
          "  bert4long pretrain --demo --checkpoint YOUR_FOLDER/bert_model.ckpt --corpus YOUR_TEXTS/ --out my_comparison")
