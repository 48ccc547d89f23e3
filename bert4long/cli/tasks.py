"""The task commands: ``finetune`` (a long-document classifier)."""
import json
import os

from bert4long.cli.inputs import tokenizer_for
from bert4long.cli.options import (
    add_model_arguments,
    add_training_arguments,
    model_kwargs,
)
from bert4long.cli.run_folder import print_summary, run_settings
from bert4long.outputs import atomic_write


def add_finetune_arguments(parser):
    parser.description = ("Fine-tune a document classifier. --train/--valid are .jsonl files with 'text' and "
                          "'label'; --labels is a file with one label per line.")
    add_model_arguments(parser)
    parser.add_argument("--train", required=True, help=".jsonl with {'text': ..., 'label': ...} per line")
    parser.add_argument("--valid", help="optional validation .jsonl")
    parser.add_argument("--labels", required=True, help="file with one label per line")
    parser.add_argument("--pooling", default="cls", choices=["cls", "chunks"],
                        help="cls: [CLS] of one long sequence; chunks: mean of the windows' [CLS]")
    parser.add_argument("--chunks", type=int, default=4, help="windows per document for --pooling chunks")
    add_training_arguments(parser)


def _read_labelled(path):
    with open(path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
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
    from bert4long.training import (
        build_classifier,
        compile_finetune,
        encode_labels,
        fit_resumable,
        make_optimizer,
    )

    keras.utils.set_random_seed(args.seed)
    with open(args.labels, encoding="utf-8") as f:
        labels = [line.strip() for line in f if line.strip()]
    tokenizer = tokenizer_for(args)
    texts, names = _read_labelled(args.train)
    y = encode_labels(names, labels)
    x = _encode_documents(tokenizer, texts, args)
    strategy = get_strategy(args.distribute)
    with strategy.scope():
        model = build_classifier(args.config, args.checkpoint, len(labels), pooling=args.pooling,
                                 precision=args.precision, **model_kwargs(args))
        compile_finetune(model, make_optimizer(args.learning_rate, args.steps, args.warmup_steps, args.weight_decay,
                                               args.clipnorm, args.accumulate), jit_compile=not args.no_xla)

    def batches(start):
        data = tf.data.Dataset.from_tensor_slices(((x, tf.zeros_like(x)), y)).repeat()
        return data.batch(args.batch_size, drop_remainder=True).skip(start)

    config = {"labels": labels, "seq_len": args.seq_len, "pooling": args.pooling, "batch_size": args.batch_size,
              "chunks": args.chunks, **run_settings(args, "train", x, y)}
    summary = fit_resumable(model, batches, args.steps, args.out, config, save_every=args.save_every,
                            verbose=0 if args.quiet else "auto", accept_changes=args.accept_changes)
    rows = [("steps", f"{summary['start_step']} -> {summary['steps']}"),
            ("final train accuracy", f"{summary['logs'].get('accuracy', float('nan')):.1%}")]
    if args.valid:
        vt, vn = _read_labelled(args.valid)
        vx = _encode_documents(tokenizer, vt, args)
        result = model.evaluate((vx, vx * 0), encode_labels(vn, labels), batch_size=args.batch_size, verbose=0,
                                return_dict=True)
        rows.append(("validation accuracy", f"{result['accuracy']:.1%}"))
    path = os.path.join(args.out, "classifier.keras")
    atomic_write(path, model.save, suffix=".keras")
    rows.append(("files", path))
    print_summary(rows)
