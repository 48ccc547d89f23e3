"""``bert4long export``: a TensorFlow SavedModel of an encoder (--checkpoint) or of a fine-tuned run (--run), with
token ids or raw text (--raw-text, tokenized in the graph) as its input."""
import os

from bert4long.cli.inputs import check_checkpoint, choose_tokenizer, tokenizer_folder
from bert4long.cli.options import add_model_arguments, model_kwargs, non_negative_int, positive_int
from bert4long.cli.output_guard import add_overwrite_argument
from bert4long.cli.run_folder import load_run_model, read_run_settings
from bert4long.data.pooling import MODES
from bert4long.data.truncation import RAW_TEXT_STRATEGIES


def add_export_arguments(parser):
    parser.description = ("Write a TensorFlow SavedModel whose serving_default signature takes int32 token_ids "
                          "and segment_ids [batch, length] (TensorFlow alone can load it).")
    add_model_arguments(parser, checkpoint_required=False)
    parser.add_argument("--run", help="the --out folder of `bert4long finetune`: export its fine-tuned model "
                                      "(classifier or token labeller) instead of an encoder --checkpoint")
    parser.add_argument("--with-mlm", action="store_true", help="include the MLM head (mlm_output)")
    parser.add_argument("--with-pool", action="store_true", help="include the pooler (pooled_output)")
    parser.add_argument("--out", required=True, help="export folder")
    add_overwrite_argument(parser)
    parser.add_argument("--max-length", type=positive_int,
                        help="longest request served (default: what the model can place, n or n^2 hierarchical)")
    parser.add_argument("--precision", default="float32", choices=["float32", "bfloat16", "auto"],
                        help="compute in bfloat16 (weights stay float32; outputs are float32); auto = bfloat16 on a "
                             "CPU with bfloat16 units (AVX512-BF16, AMX), else float32; the choice is printed "
                             "(default float32)")
    text = parser.add_argument_group("raw text (--raw-text: serving_default takes whole UTF-8 documents)")
    text.add_argument("--raw-text", action="store_true",
                      help="serving_default takes a string tensor of documents, tokenized in the graph with the "
                           "vocab's exact WordPiece ids, --seq-len tokens per row (default --max-length when "
                           "given); the int32 signature becomes serve_token_ids")
    text.add_argument("--strategy", default="head", choices=list(RAW_TEXT_STRATEGIES),
                      help="long documents: keep the head, the tail, both (--head-len + the rest), or read them "
                           "in chunks pooled per document (default head)")
    text.add_argument("--head-len", type=non_negative_int, default=128, help="head tokens for head+tail (default 128)")
    text.add_argument("--chunk-overlap", type=non_negative_int, default=0,
                      help="tokens shared by consecutive chunks (default 0)")
    text.add_argument("--pool", default="mean", choices=list(MODES),
                      help="how chunks' per-document outputs are pooled (default mean)")
    text.add_argument("--max-chunks", type=positive_int, default=16,
                      help="chunks read per document; a longer one is read in its first ones and its num_chunks "
                           "output says how many it has (default 16)")



def check_export_arguments(args, given):
    """Refuse, before anything is read, an export with no source or two, a --checkpoint that is not one, and --raw-text
    for a checkpoint whose tokenizer is not WordPiece."""
    if (args.run is None) == (args.checkpoint is None):
        raise ValueError("export needs one source: --checkpoint (an encoder) or --run (the --out folder of "
                         "`bert4long finetune`)")
    check_checkpoint(args)
    if args.raw_text and args.checkpoint is not None:
        _refuse_raw_text_for(tokenizer_folder(args))



def run_export(args, resolved):
    from bert4long.export import export_saved_model
    from bert4long.models import build_transformer_model

    label_names, threshold, settings = None, None, None
    if args.run is not None:
        model, settings = _fine_tuned_model(args)
        label_names = settings["labels"]
        threshold = settings.get("threshold") if settings["task"] == "multilabel" else None
    else:
        model = build_transformer_model(resolved.source, with_mlm=args.with_mlm, with_pool=args.with_pool,
                                        **model_kwargs(args, resolved.model))
    options, chosen = _raw_text_options(args, resolved.source, settings) if args.raw_text else ({}, None)
    names = export_saved_model(model, args.out, max_length=args.max_length, overwrite=args.overwrite,
                               label_names=label_names, threshold=threshold, precision=_export_precision(args),
                               **options)
    print(f"SavedModel written to {os.path.abspath(args.out)}; serving_default outputs: {', '.join(names)}")
    if args.raw_text:
        print(f"serving_default takes texts (string [batch]), {'un' if chosen.lower_case else ''}cased WordPiece, "
              f"strategy {args.strategy} at {options['seq_len']} tokens; serve_token_ids takes int32 token_ids")



def _export_precision(args):
    """--precision, auto resolved by `bert4long.precision.serving_precision`, and said in one line."""
    from bert4long.precision import auto_reason, serving_precision

    if args.precision != "auto":
        print(f"serving precision: {args.precision}", flush=True)
        return args.precision
    precision = serving_precision()
    print(f"serving precision: {precision} (auto: {auto_reason()})", flush=True)
    return precision



def _raw_text_options(args, source, settings=None):
    """``(options, chosen)``: `export_saved_model`'s raw-text keyword arguments and the `ChosenTokenizer` they name:
    the checkpoint's (``source``) at --seq-len, or a fine-tuned run's (``settings``: its finetune.json) vocab, casing
    and length."""
    if settings is None:
        chosen, seq_len = choose_tokenizer(args, source), args.seq_len
    else:
        chosen = choose_tokenizer(args, vocab_path=os.path.join(args.run, "vocab.txt"),
                                  recorded_case=settings["lower_case"])
        seq_len = settings["seq_len"]
    if args.max_length is not None and seq_len > args.max_length:
        raise ValueError(f"--seq-len {seq_len} is longer than --max-length {args.max_length}: "
                         "rows of the raw-text signature must fit the token-id signature")
    return {"raw_text": True, "tokenizer": chosen.tokenizer, "seq_len": seq_len, "strategy": args.strategy,
            "head_len": args.head_len, "chunk_overlap": args.chunk_overlap, "pool": args.pool,
            "max_chunks": args.max_chunks}, chosen



def _refuse_raw_text_for(folder):
    if folder is not None:
        raise ValueError(f"--raw-text tokenizes in the graph with WordPiece only, and {folder!r} holds another "
                         "tokenizer (tokenizer.json / vocab.json + merges.txt / .model): export without --raw-text "
                         "(the int32 token_ids signature) and tokenize with "
                         f"bert4long.tokenizers.load_tokenizer({folder!r}) before calling it")



def _fine_tuned_model(args):
    """``(model, settings)``: the model `bert4long finetune` saved in --run and its finetune.json; refused for
    --raw-text unless the model reads [batch, length] with a WordPiece vocab."""
    settings = read_run_settings(args.run, "or --checkpoint for an encoder")
    model = load_run_model(args.run, settings)
    if args.raw_text:
        _refuse_raw_text_for(None if os.path.isfile(os.path.join(args.run, "vocab.txt")) else args.run)
        if len(model.inputs[0].shape) != 2:
            raise ValueError(f"--raw-text serves models that read [batch, length], and {args.run!r} pools "
                             f"--chunks {settings['chunks']} windows inside the model: export without --raw-text, or "
                             "fine-tune with --pooling cls and export it with --raw-text --strategy chunks")
    return model, settings
