"""MLM position-extension study on a real pretrained BERT (all-MiniLM-L6-v2) and real Wikipedia text.

Su (2020) stretched BERT's 512 trained positions by hierarchical decomposition and
compared, at 2x the trained length, the MLM accuracy zero-shot and along continued
pretraining. This script reruns that experiment, scaled to a CPU:

  base      MiniLM has no MLM head (it was fine-tuned for sentence embeddings). Fit the
            tied head with the encoder frozen (--head-steps), evaluate at 512 (the
            "frozen-encoder baseline"), then continue MLM at 512 with the encoder
            unfrozen (--base-steps), evaluating every --base-eval-every steps, and save
            that base model as a Google checkpoint (runs/position_study/base/).
  zeroshot  At --long-length (1024 = 2x), the base model with each extension
            (hierarchical alpha in --alphas, copy, interpolate, efficient attention on
            top) and 'split' (the 1024 tokens read as two independent 512 windows: no
            extension at all), MLM accuracy on held-out articles, separately for
            positions < 512 and >= 512, all predictions and [MASK]-replaced ones only.
  train     Continue MLM at --long-length for --train-methods, --train-steps steps,
            evaluating every --eval-every (the post's accuracy-vs-steps figure).

Held-out articles (a fixed seeded split) and the masking of the evaluation set (fixed
seed) are the same for every method. Every evaluation point is written to the JSON at
once; rerunning skips what is done (a method interrupted mid-training restarts).

    python benchmarks/position_study.py --stage all
    python benchmarks/position_study.py --stage zeroshot --alphas 0.1 0.4
    python benchmarks/position_study.py --stage zeroshot --long-length 2048 --eval-sequences 20 \
        --held-out-from benchmarks/results/position_study.json --out benchmarks/results/position_study_4x.json
                                                    # 4x, same base, evaluated on articles the base never saw
    python benchmarks/position_study.py --quick     # tiny random model, 64 tokens (CI smoke run)

Writes benchmarks/results/position_study.json (position_study_quick.json with --quick).
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
from common import load_json, machine_stamp, minilm_folder, minilm_tokenizer, write_json, write_tiny_config  # noqa: E402

HEAD_LAYERS = ("MLM-Dense", "MLM-Norm", "MLM-Bias")


def parse_method(name, length):
    """'hierarchical-0.4[+chunked|+sliding_window]', 'copy', 'interpolate', 'none' -> builder kwargs."""
    base, _, attention = name.partition("+")
    kwargs = {}
    if base.startswith("hierarchical-"):
        kwargs.update(position_extension="hierarchical", hierarchical_position=float(base.split("-", 1)[1]))
    elif base in ("copy", "interpolate"):
        kwargs.update(position_extension=base, position_extension_length=length)
    elif base not in ("none", "split"):
        raise ValueError(f"Unknown method {name!r}: hierarchical-ALPHA, copy, interpolate, none or split, "
                         "optionally +chunked / +sliding_window.")
    if attention == "chunked":
        kwargs.update(attention="chunked", attention_config={"block_size": length // 4})
    elif attention == "sliding_window":
        kwargs.update(attention="sliding_window", attention_config={"window": length // 2})
    elif attention:
        raise ValueError(f"Unknown attention {attention!r} in method {name!r}: use chunked or sliding_window.")
    return kwargs


def prepare_data(tokenizer, args):
    """Fixed split of the articles: held-out evaluation windows and packed training text."""
    import numpy as np

    from bert4long.data import pack_documents
    from bert4long.training.corpus import wikipedia_articles

    documents = tokenizer.encode_documents(wikipedia_articles()[: args.max_articles])
    order = np.random.default_rng(args.split_seed).permutation(len(documents))
    width = args.long_length - 2
    held_out, evaluation = set(), []
    if args.held_out_from:  # evaluate only on articles an earlier study held out (and its base never saw)
        earlier = set(load_json(args.held_out_from, {}).get("setup", {}).get("held_out_articles", []))
        if not earlier:
            raise ValueError(f"{args.held_out_from} lists no held_out_articles: run that study first.")
        order = [i for i in order if int(i) in earlier]
        held_out = set(earlier)  # the base model's training text excluded all of them
    for index in order:  # held-out: long articles, up to 2 windows each, until --eval-sequences
        doc = documents[index]
        if len(doc) < width or len(evaluation) >= args.eval_sequences:
            continue
        held_out.add(int(index))
        for start in range(0, min(len(doc) - width, width) + 1, width):
            if len(evaluation) < args.eval_sequences:
                evaluation.append(np.concatenate([[tokenizer.cls_id], doc[start:start + width], [tokenizer.sep_id]]))
    if len(evaluation) < args.eval_sequences:
        raise ValueError(f"Only {len(evaluation)} held-out windows of {args.long_length} tokens: lower --eval-sequences.")
    training = [documents[i] for i in range(len(documents)) if i not in held_out]
    pack = lambda length: pack_documents(training, length, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,  # noqa: E731
                                         drop_remainder=True)
    return {"eval_long": np.stack(evaluation).astype("int32"), "pack": pack,
            "held_out_articles": sorted(held_out), "train_articles": len(training),
            "train_tokens": int(sum(len(d) for d in training))}


def build(args, checkpoint, method, length):
    from bert4long.training import build_mlm_model

    kwargs = parse_method(method, length)
    if args.quick:
        kwargs["dropout_rate"] = 0.0
    model, builder, _ = build_mlm_model(args.config, checkpoint, **kwargs)
    return model, builder


def evaluate(model, sequences, masker, args, boundary, split=None):
    """MLM accuracy on ``sequences`` (fixed masking seed), split at position ``boundary``.

    ``split``: read each sequence as independent windows of ``split`` tokens (no extension).
    Returns counts and accuracies for positions < / >= boundary, all predictions and [MASK] only.
    """
    import numpy as np
    import tensorflow as tf

    from bert4long.training import mlm_batches

    predict = tf.function(lambda x: model(x, training=False), reduce_retracing=True)  # a few batches: no XLA compile
    counts = {}
    steps = len(sequences) // args.eval_batch
    for (tokens, segments, positions), labels, weights in mlm_batches(sequences, masker, args.eval_batch,
                                                                      seed=args.eval_seed).take(steps):
        tokens, positions, labels, weights = (t.numpy() for t in (tokens, positions, labels, weights))
        if split:
            logits_by_window = []
            for start in range(0, tokens.shape[1], split):
                inside = (positions >= start) & (positions < start + split)
                local = np.where(inside, positions - start, 0).astype("int32")
                window = np.ascontiguousarray(tokens[:, start:start + split])
                logits_by_window.append((inside, predict((window, np.zeros_like(window), local)).numpy()))
            predicted = np.zeros_like(labels)
            for inside, logits in logits_by_window:
                predicted = np.where(inside, logits.argmax(-1), predicted)
        else:
            predicted = predict((tokens, np.zeros_like(tokens), positions)).numpy().argmax(-1)
        correct = (predicted == labels) & (weights > 0)
        is_mask = np.take_along_axis(tokens, positions, axis=1) == masker.mask_id
        for region, where in (("lt", positions < boundary), ("ge", positions >= boundary)):
            for kind, keep in (("all", weights > 0), ("mask", (weights > 0) & is_mask)):
                key = f"{region}_{kind}"
                n, c = counts.get(key, (0, 0))
                counts[key] = (n + int((where & keep).sum()), c + int((correct & where & keep).sum()))
    result = {}
    for key, (n, c) in sorted(counts.items()):
        result[f"acc_{key}"] = c / n if n else None
        result[f"n_{key}"] = n
    n_all = result["n_lt_all"] + result["n_ge_all"]
    result["acc_all"] = ((result["acc_lt_all"] or 0) * result["n_lt_all"]
                         + (result["acc_ge_all"] or 0) * result["n_ge_all"]) / max(n_all, 1)
    return result


def train(model, trainable, sequences, masker, steps, lr, args, seed, on_interval, every, first_step=0):
    """Continue MLM for ``steps`` (AdamW, 10% warmup, linear decay); ``on_interval(step, loss)`` every ``every``."""
    from bert4long.training import compile_mlm, make_optimizer, mlm_batches

    for layer in model.layers:
        layer.trainable = trainable(layer.name)
    compile_mlm(model, make_optimizer(lr, steps), jit_compile=args.xla)
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


def stage_zeroshot(args, data, tokenizer, results):
    from bert4long.training import masker_for

    masker = masker_for(tokenizer, args.long_length)
    table = results.setdefault("zero_shot", {})
    methods = ["split"] + [f"hierarchical-{a}" for a in args.alphas] + ["copy", "interpolate"] + args.attention_methods
    for method in methods:
        if method in table:
            continue
        begin = time.perf_counter()
        split = args.base_length if method == "split" else None
        model, _ = build(args, args.base_checkpoint, "none" if split else method, args.base_length if split else args.long_length)
        table[method] = evaluate(model, data["eval_long"], masker, args, boundary=args.base_length, split=split)
        table[method]["seconds"] = time.perf_counter() - begin
        write_json(args.out, results)
        print(f"zero-shot {method}: <{args.base_length} {table[method]['acc_lt_all']:.4f}  "
              f">={args.base_length} {table[method]['acc_ge_all']:.4f}", flush=True)


def stage_train(args, data, tokenizer, results):
    from bert4long.training import masker_for

    masker = masker_for(tokenizer, args.long_length)
    sequences = data["pack"](args.long_length)
    runs = results.setdefault("training", {})
    for method in args.train_methods:
        if runs.get(method, {}).get("done"):
            continue
        begin = time.perf_counter()
        model, _ = build(args, args.base_checkpoint, method, args.long_length)
        run = runs[method] = {"steps": args.train_steps, "eval_every": args.eval_every, "lr": args.train_lr,
                              "batch": args.batch, "seq_len": args.long_length, "curve": []}
        zero = results.get("zero_shot", {}).get(method) or evaluate(model, data["eval_long"], masker, args,
                                                                     boundary=args.base_length)
        run["curve"].append({"step": 0, "train_loss": None, **{k: v for k, v in zero.items() if k != "seconds"}})
        write_json(args.out, results)

        def record(step, loss):
            entry = {"step": step, "train_loss": loss, "seconds": time.perf_counter() - begin,
                     **evaluate(model, data["eval_long"], masker, args, boundary=args.base_length)}
            run["curve"].append(entry)
            write_json(args.out, results)
            print(f"train {method} step {step}: loss {loss:.3f} <{args.base_length} {entry['acc_lt_all']:.4f} "
                  f">={args.base_length} {entry['acc_ge_all']:.4f}", flush=True)

        train(model, lambda name: True, sequences, masker, args.train_steps, args.train_lr, args, seed=3,
              on_interval=record, every=args.eval_every)
        run.update(done=True, seconds=time.perf_counter() - begin)
        write_json(args.out, results)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=["base", "zeroshot", "train", "all"], default="all")
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
    parser.add_argument("--train-methods", nargs="*", default=["hierarchical-0.4", "copy", "interpolate",
                                                                "hierarchical-0.8"])
    parser.add_argument("--train-steps", type=int, default=40)
    parser.add_argument("--train-lr", type=float, default=5e-5)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--max-articles", type=int, default=None, help="use only the first N articles")
    parser.add_argument("--held-out-from", default=None,
                        help="a study JSON whose held-out articles to evaluate on (for a longer --long-length "
                             "run from the same base: its base never trained on them)")
    parser.add_argument("--no-xla", dest="xla", action="store_false", help="train without XLA")
    parser.add_argument("--out", default=None)
    parser.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "position_study"))
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.quick:
        args.run_dir = tempfile.mkdtemp(prefix="position_study_")
        args.config = write_tiny_config(os.path.join(args.run_dir, "bert_config.json"), max_position=32)
        args.source_checkpoint, args.xla = None, False
        args.base_length, args.long_length, args.batch, args.eval_batch, args.eval_sequences = 32, 64, 2, 2, 2
        args.head_steps, args.base_steps, args.base_eval_every, args.train_steps, args.eval_every = 1, 1, 1, 2, 1
        args.alphas, args.train_methods, args.max_articles = [0.4], ["hierarchical-0.4"], 12
        args.attention_methods = []
    else:
        args.config = os.path.join(minilm_folder(), "config.json")
        args.source_checkpoint = minilm_folder()
    args.out = args.out or os.path.join(HERE, "results", "position_study_quick.json" if args.quick
                                        else "position_study.json")
    args.base_checkpoint = os.path.join(args.run_dir, "base", "bert_model.ckpt")
    for name in args.train_methods + args.attention_methods:
        parse_method(name, args.long_length)

    tokenizer = minilm_tokenizer()
    data = prepare_data(tokenizer, args)
    results = load_json(args.out, {}) if not args.quick else {}
    results["stamp"] = machine_stamp()
    results["setup"] = {
        "model": "tiny random BERT (smoke run)" if args.quick else "all-MiniLM-L6-v2 (6 layers, hidden 384, 512 positions)",
        "text": "gensim's 106 English Wikipedia articles, markup stripped",
        "held_out_articles": data["held_out_articles"], "train_articles": data["train_articles"],
        "train_tokens": data["train_tokens"], "eval_sequences": args.eval_sequences, "eval_seed": args.eval_seed,
        "base_length": args.base_length, "long_length": args.long_length, "mask_rate": 0.15,
        "masking": "80% [MASK] / 10% random / 10% unchanged", "xla": args.xla,
    }
    write_json(args.out, results)
    stages = ["base", "zeroshot", "train"] if args.stage == "all" else [args.stage]
    for stage in stages:
        results.setdefault("commands", {}).setdefault(stage, [])
        if results["stamp"]["command"] not in results["commands"][stage]:
            results["commands"][stage].append(results["stamp"]["command"])
        {"base": stage_base, "zeroshot": stage_zeroshot, "train": stage_train}[stage](args, data, tokenizer, results)
    print("wrote", args.out)
    return results


if __name__ == "__main__":
    main()
