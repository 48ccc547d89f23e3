"""Commands that read or rewrite checkpoints without training: ``export``, ``info``, ``extend``, ``convert``."""
import os

from bert4long.cli.options import add_model_arguments, model_kwargs


def add_export_arguments(parser):
    parser.description = ("Write a TensorFlow SavedModel whose serving_default signature takes int32 token_ids "
                          "and segment_ids [batch, length] (TensorFlow alone can load it).")
    add_model_arguments(parser)
    parser.add_argument("--with-mlm", action="store_true", help="include the MLM head (mlm_output)")
    parser.add_argument("--with-pool", action="store_true", help="include the pooler (pooled_output)")
    parser.add_argument("--out", required=True, help="export folder")
    parser.add_argument("--max-length", type=int,
                        help="longest request served (default: what the model can place, n or n^2 hierarchical)")


def run_export(args):
    from bert4long.export import export_saved_model
    from bert4long.models import build_transformer_model

    model = build_transformer_model(args.config, args.checkpoint, with_mlm=args.with_mlm, with_pool=args.with_pool,
                                    **model_kwargs(args))
    names = export_saved_model(model, args.out, max_length=args.max_length)
    print(f"SavedModel written to {os.path.abspath(args.out)}; serving_default outputs: {', '.join(names)}")


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
