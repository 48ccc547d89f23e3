"""The masked-LM commands: ``pretrain`` (continued pretraining, resumable) and ``evaluate``.

Both read through `bert4long.data`: `load_corpus` (tokenized once, cached in --out, skipped documents
counted), `hold_out` (the end of every document, for MLM accuracy), `pack_for` (`pack_documents` with the
tokenizer's ids), and `mlm_batches`, whose per-epoch shuffle is a pure function of
(seed, epoch), so a resumed run reads exactly what the uninterrupted run would have.
"""
import json
import os
import sys

from bert4long.cli.inputs import check_checkpoint, choose_tokenizer
from bert4long.cli.options import (
    add_model_arguments,
    add_reading_arguments,
    add_training_arguments,
    fraction,
    model_kwargs,
    non_negative_int,
    positive_int,
    training_path,
)
from bert4long.cli.run_folder import (
    copy_tokenizer,
    print_summary,
    run_settings,
    saved_line,
    start_writing,
)
from bert4long.data.holdout import hold_out
from bert4long.data.packing import pack_for
from bert4long.output_folders import write_text_atomically
from bert4long.training.model_file import save_final_model


def add_pretrain_arguments(parser):
    parser.description = (
        "Continued masked-LM pretraining on a corpus (a folder of text files, one document each, one text file, "
        "or a .jsonl with a 'text' field). Interrupt it any time and run the same command again: it resumes from "
        "the last checkpoint. Ends with bert_model.ckpt (Google layout; a Hugging Face folder for Longformer, "
        "BigBird and ModernBERT), model.keras, and TensorBoard logs in --out. "
        + "With no arguments at all (or --demo): the main job (bert4long.cli.demo): the built-in model reads "
          "held-out Wikipedia articles at 4x its trained length (split vs copy vs hierarchical positions), trains "
          "there for a few steps and reads again; a few minutes on 2 CPU cores, nothing downloaded (gensim's test "
          "articles: pip install --no-deps gensim). --demo with --checkpoint and --corpus runs that comparison on yours."
    )
    parser.add_argument("--demo", action="store_true", help="the main job: the position-extension comparison")
    parser.add_argument("--corpus", help="folder of text files (one document each), a text file, or a .jsonl file")
    add_model_arguments(parser, checkpoint_required=False)
    add_training_arguments(parser)
    add_reading_arguments(parser)
    parser.add_argument("--holdout", type=fraction, default=0.05,
                        help="share of every document's tokens (its end) held out to measure MLM accuracy; "
                             "0 holds out nothing and measures nothing (default 0.05)")
    parser.add_argument("--eval-sequences", type=positive_int, default=8, help="held-out sequences for MLM accuracy")
    parser.add_argument("--head-steps", type=non_negative_int, default=200,
                        help="steps fitting a missing MLM head on the frozen encoder first (default 200)")


def _corpus(args, tokenizer):
    from bert4long.data.corpus import load_corpus

    # read a cache a run in --out left, but write one only once --out is open for writing (`_cache_corpus`)
    return load_corpus(args.corpus, tokenizer, cache_dir=os.path.join(args.out, "corpus_cache"), write_cache=False,
                       errors=args.errors)


def _cache_corpus(corpus):
    """Keep the tokenized corpus in --out/corpus_cache (where `_corpus` looked), so a resume does not tokenize again."""
    from bert4long.data.corpus import save_corpus_cache

    if corpus.cache_path is not None and not os.path.exists(corpus.cache_path):
        save_corpus_cache(corpus, corpus.cache_path)


def check_pretrain_arguments(args, given):
    """Refuse what can be refused before anything is read (``given``: the options written on the command line)."""
    from bert4long.cli.demo import check_demo_arguments, runs_demo

    if runs_demo(args, given):
        check_demo_arguments(given)
    elif args.corpus is None or args.checkpoint is None:
        missing = " and ".join(f"--{k}" for k in ("checkpoint", "corpus") if getattr(args, k) is None)
        raise ValueError(f"pretrain needs {missing}; for the built-in demo pass --demo (or no arguments at all)")
    check_checkpoint(args)
    if args.warmup_steps is not None and args.warmup_steps > args.steps:
        raise ValueError(f"--warmup-steps {args.warmup_steps} is more than --steps {args.steps}: use at most "
                         f"{args.steps}")
    if args.corpus is not None:
        from bert4long.data.corpus import list_files

        list_files(args.corpus)  # a missing or empty --corpus is named before anything else is checked


def check_family_pretrains(source):
    """Refuse, before the corpus is read, a family whose checkpoint (``source``: its
    `bert4long.checkpoints.source.Source`) ``pretrain`` cannot continue or write back."""
    declared = source.built_family()
    if declared is None:
        return
    if not declared.masked_lm:
        raise ValueError(f"--model {declared.name}: its checkpoints hold no masked-LM head to continue (an ELECTRA "
                         "discriminator detects replaced tokens), so pretrain cannot train it: pretrain a checkpoint "
                         "with an MLM head (BERT, RoBERTa, ...), or fine-tune this one (bert4long finetune).")
    if not declared.writes_back:
        raise ValueError(f"--model {declared.name}: pretrain writes the trained weights back in the checkpoint's "
                         "layout, which holds one shared block, and the unshared layers would differ after training: "
                         "pretrain with --model albert (shared, as trained), or fine-tune with --model "
                         f"{declared.name} (bert4long finetune).")


def _run_config(args, options, builder, train_seqs):
    """The settings a resumed run must share with the run it continues (`fit_resumable`'s ``config``; ``options``: the
    resolved `ModelOptions`)."""
    return {"config": builder.__class__.__name__, "vocab_size": builder.vocab_size,
            "hidden_size": builder.hidden_size, "num_hidden_layers": builder.num_hidden_layers,
            "max_position": builder.max_position, "seq_len": args.seq_len, "batch_size": args.batch_size,
            "hierarchical_position": options.hierarchical_position, "position_extension": options.position_extension,
            "rope_scaling": args.rope_scaling,
            "attention": args.attention, "attention_config": options.attention_config, "seed": args.seed,
            **run_settings(args, "corpus", train_seqs)}   # --steps may change: raise it to continue a run


def _save_pretrained(args, model, builder):
    """Write the checkpoint (a Hugging Face folder for the families that read their own tensor names, else the Google
    layout and its config, both recording the position extension), the tokenizer files and ``model.keras``
    (no optimizer state: `save_final_model`) to --out; return the files' descriptions for the summary."""
    if builder.family.reads_own_names:
        builder.save_weights_as_checkpoint(args.out)
        files = [os.path.join(args.out, "config.json"), os.path.join(args.out, "model.safetensors")]
    else:
        prefix = os.path.join(args.out, "bert_model.ckpt")
        builder.save_weights_as_checkpoint(prefix)
        builder.write_config(os.path.join(args.out, "bert_config.json"))
        files = [prefix + ".index/.data-*"]
    copy_tokenizer(args, args.out)
    keras_path = os.path.join(args.out, "model.keras")
    save_final_model(model, keras_path)
    files.append(keras_path)
    if os.path.isdir(os.path.join(args.out, "logs")):
        files.append(os.path.join(args.out, "logs") + " (TensorBoard)")
    return files


def _summary_rows(summary, lengths, before, after, files):
    """The ``(name, value)`` rows of the run's closing summary."""
    import numpy as np

    rows = [("steps", f"{summary['start_step']} -> {summary['steps']}"
             + (f" (resumed from step {summary['start_step']})" if summary["start_step"] else "")),
            ("tokens/s", f"{summary['tokens_per_second']:.0f}" if np.isfinite(summary["tokens_per_second"]) else "-"),
            ("final train MLM accuracy", f"{summary['logs']['mlm_accuracy']:.1%}" if "mlm_accuracy" in summary["logs"]
             else "-")]
    for n in lengths:
        rows.append((f"MLM accuracy at {n} tokens", (f"{before[n]:.1%} -> " if n in before else "") + f"{after[n]:.1%}"))
    if not lengths:
        rows.append(("MLM accuracy", "not measured (--holdout 0)"))
    rows += [("files", ", ".join(files)), ("checkpoints", summary["checkpoints"])]
    return rows


def run_pretrain(args, resolved):
    """``bert4long pretrain`` (the main job when ``resolved.demo``), on options `check_pretrain_arguments` checked."""
    import keras

    from bert4long.training import (
        build_mlm_model,
        compile_mlm,
        evaluate_mlm,
        fit_resumable,
        make_optimizer,
        masker_for,
        mlm_batches,
        takes_segment_ids,
    )
    from bert4long.training.distribute import get_strategy, is_chief

    if resolved.demo:
        from bert4long.cli.demo import run_demo

        return run_demo(args, resolved)
    keras.utils.set_random_seed(args.seed)
    chosen = choose_tokenizer(args, resolved.source)
    tokenizer = chosen.tokenizer
    print(chosen.describe(), flush=True)
    corpus = _corpus(args, tokenizer)
    train_ids, eval_ids = hold_out(corpus.token_ids, args.holdout)
    train_seqs = pack_for(tokenizer, train_ids, args.seq_len)
    tokens = sum(len(ids) for ids in corpus.token_ids)
    print(f"corpus: {len(corpus)} documents, {tokens} tokens -> {len(train_seqs)} training sequences of "
          f"{args.seq_len}" + (f"; skipped {corpus.skipped}" if corpus.skipped else ""), flush=True)
    masker = masker_for(tokenizer, args.seq_len)
    strategy = get_strategy(args.distribute)
    precision, jit_compile = training_path(args, strategy)
    with strategy.scope():
        model, builder, has_head = build_mlm_model(resolved.source, precision=precision,
                                                   **model_kwargs(args, resolved.model))
        optimizer = make_optimizer(args.learning_rate, args.steps, args.warmup_steps, args.weight_decay,
                                   args.clipnorm, args.accumulate)
        compile_mlm(model, optimizer, jit_compile=jit_compile)
    trained = builder.max_position
    segments = takes_segment_ids(model)
    start_writing(resolved.output)
    if is_chief(strategy):
        _cache_corpus(corpus)

    def accuracy_at(length, count):
        seqs = pack_for(tokenizer, eval_ids, length)[:count]
        return evaluate_mlm(model, seqs, masker_for(tokenizer, length), batch_size=1)["mlm_accuracy"]

    lengths = sorted({min(trained, args.seq_len), args.seq_len}) if eval_ids else []
    config = _run_config(args, resolved.model, builder, train_seqs)
    resuming = os.path.isdir(os.path.join(args.out, "checkpoints"))
    before = {}
    if not has_head and not resuming:
        head_len = min(trained, args.seq_len)
        print("This checkpoint has no MLM head: fitting the tied head (MLM-Dense/Norm/Bias) on the frozen "
              f"encoder first, at {head_len} tokens.", flush=True)
        _fit_head(model, tokenizer, train_seqs if args.seq_len == head_len else pack_for(tokenizer, train_ids, head_len),
                  head_len, args, jit=jit_compile, steps=args.head_steps)
    if not resuming and lengths:
        before = {n: accuracy_at(n, args.eval_sequences) for n in lengths}
        print("MLM accuracy before: " + ", ".join(f"{v:.1%} at {n} tokens" for n, v in before.items()), flush=True)

    summary = fit_resumable(
        model, lambda start: mlm_batches(train_seqs, masker, args.batch_size, seed=args.seed, start_step=start,
                                         segment_ids=segments),
        steps=args.steps, out_dir=args.out, config=config, save_every=args.save_every if is_chief(strategy) else 0,
        tokens_per_step=args.batch_size * args.seq_len, verbose=0 if args.quiet else "auto",
        keep=args.keep_checkpoints, accept_changes=args.accept_changes, on_save=saved_line)
    after = {n: accuracy_at(n, args.eval_sequences) for n in lengths}
    files = _save_pretrained(args, model, builder) if is_chief(strategy) else []
    print_summary(_summary_rows(summary, lengths, before, after, files))
    if is_chief(strategy):   # (another worker writes nothing: its --out may not even exist)
        write_text_atomically(os.path.join(args.out, "summary.json"), json.dumps(
            {"before": before, "after": after, **{k: v for k, v in summary.items()}}, indent=2, default=str))


def _fit_head(model, tokenizer, sequences, length, args, jit, steps):
    """Fit only the MLM head (the encoder frozen), for checkpoints that ship without one."""
    from bert4long.training import compile_mlm, make_optimizer, masker_for, mlm_batches, takes_segment_ids
    from bert4long.training.loop import progress_verbosity

    if not steps:
        return
    head = {"MLM-Dense", "MLM-Norm", "MLM-Bias"}
    frozen = [layer for layer in model.layers if layer.name not in head and layer.weights]
    for layer in frozen:
        layer.trainable = False
    optimizer = model.optimizer
    compile_mlm(model, make_optimizer(2e-3, steps, warmup_steps=2, weight_decay=0.0), jit_compile=jit)
    batches = mlm_batches(sequences, masker_for(tokenizer, length), 2, seed=args.seed + 1,
                          segment_ids=takes_segment_ids(model))
    model.fit(batches, steps_per_epoch=steps,
              epochs=1, verbose=progress_verbosity(0 if args.quiet else "auto"), shuffle=False)
    for layer in frozen:
        layer.trainable = True
    compile_mlm(model, optimizer, jit_compile=jit)


def add_evaluate_arguments(parser):
    parser.description = "MLM loss and accuracy (masked positions only) of a checkpoint on a corpus."
    add_model_arguments(parser)
    parser.add_argument("--corpus", required=True, help="folder of text files (one document each), a text file, "
                                                        "or a .jsonl file")
    add_reading_arguments(parser)
    parser.add_argument("--batch-size", type=positive_int, default=4)
    parser.add_argument("--max-sequences", type=positive_int, default=64)
    parser.add_argument("--seed", type=non_negative_int, default=12345, help="masking seed")


def check_evaluate_arguments(args, given):
    """Refuse a --checkpoint that is not one, before anything is read."""
    check_checkpoint(args)


def run_evaluate(args, resolved):
    from bert4long.data.corpus import load_corpus
    from bert4long.training import build_mlm_model, evaluate_mlm, masker_for

    chosen = choose_tokenizer(args, resolved.source)
    tokenizer = chosen.tokenizer
    print(chosen.describe(), file=sys.stderr)
    corpus = load_corpus(args.corpus, tokenizer, errors=args.errors)
    seqs = pack_for(tokenizer, corpus.token_ids, args.seq_len)[: args.max_sequences]
    model, _, has_head = build_mlm_model(resolved.source, **model_kwargs(args, resolved.model))
    if not has_head:
        print("warning: this checkpoint has no MLM head; the head is untrained (accuracy near 0)")
    result = evaluate_mlm(model, seqs, masker_for(tokenizer, args.seq_len), args.batch_size, seed=args.seed)
    print(json.dumps({**result, "skipped": corpus.skipped}))
