"""Commands that read or rewrite a checkpoint without training: ``info``, ``extend``, ``convert``."""
import os
import tempfile

from bert4long.cli.inputs import choose_tokenizer
from bert4long.cli.options import hierarchical_alpha, positive_int
from bert4long.cli.output_guard import add_overwrite_argument
from bert4long.position_alpha import DEFAULT_ALPHA
from bert4long.training.memory import available_memory_bytes, training_step_bytes

ESTIMATED_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


def add_info_arguments(parser):
    parser.description = "Print a checkpoint's config, variables and the lengths it can read."
    parser.add_argument("checkpoint", help="checkpoint prefix/folder or Hugging Face folder")
    parser.add_argument("--config", help="bert_config.json (default: next to the checkpoint)")
    parser.add_argument("--batch-size", type=positive_int, default=1,
                        help="rows per training batch the memory estimate is for (default 1)")


def run_info(args, resolved):
    source = resolved.source   # its reader opened as model loading opens it, and its config read once
    with source.reader as reader:
        config = source.config if source.huggingface else source.file_config
        print("config:")
        for key, value in sorted(config.items()):
            print(f"  {key}: {value}")
        reader.check()   # every variable read once: a damaged data file is named here
        listed = {reader.listed_name(name): name for name in reader.names()}
        print(f"variables ({len(listed)}):")
        for key in sorted(listed):
            print(f"  {key} {list(reader.shape(listed[key]))}")
        if source.huggingface and source.family.reads_own_names:   # its own tensor names, task prefix and heads
            _print_family_lines(reader, config, source.family)
            print(_tokenizer_line(args, source))
            return
        _print_google_lines(args, source, config)


def _print_google_lines(args, source, config):
    """Lengths, heads, tokenizer and attention fit of a checkpoint read under Google names."""
    import numpy as np

    from bert4long.checkpoints.position_record import trained_positions

    reader = source.reader
    n = trained_positions(config)
    if n:
        print(_lengths_line(n, source.file_config))
    heads = [h for h, p in (("MLM", "cls/predictions/"), ("NSP", "cls/seq_relationship/"), ("pooler", "bert/pooler/"))
             if any(name.startswith(p) for name in reader.names())]
    print(f"heads: {', '.join(heads) or 'none (encoder only)'}")
    print(_tokenizer_line(args, source))
    if all(k in config for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")):
        parameters = sum(int(np.prod(reader.shape(name))) for name in reader.names()
                         if not name.endswith(("adam_m", "adam_v")))
        _print_attention_fit(config, parameters, available_memory_bytes(), args.batch_size)


def _lengths_line(n, config):
    """The lengths a checkpoint of ``n`` trained positions reads: with the extension its ``config`` records (that
    every command applies, `bert4long.checkpoints.position_record`), else as trained or with --hierarchical-position."""
    from bert4long.checkpoints.position_record import RECORD_KEY, describe, recorded_extension

    recorded = recorded_extension(config)
    longer = "longer: split into chunks (finetune --pooling chunks)"
    if recorded is not None:
        return (f"lengths: up to {recorded.capacity(n) or 'any number of'} tokens with the position extension its "
                f"config records, {describe(recorded)}, which every command applies ({n} trained positions); "
                + longer)
    record = config.get(RECORD_KEY)
    made = (f" (rows {record.get('trained_positions')}+ made by `bert4long extend`, {record.get('method')})"
            if record else "")
    return (f"lengths: up to {n} tokens as trained{made}; up to {n * n} with --hierarchical-position "
            f"(hierarchical_position=True); {longer}")


def _tokenizer_line(args, source):
    """Which tokenizer the commands would use for this checkpoint (``source``: its
    `bert4long.checkpoints.source.Source`), or why there is none."""
    from argparse import Namespace

    probe = Namespace(checkpoint=args.checkpoint, config=args.config, vocab=None, lower_case=None)
    try:
        return choose_tokenizer(probe, source).describe()
    except (FileNotFoundError, ValueError) as error:
        return f"tokenizer: none usable ({error})"


def _print_family_lines(reader, config, family):
    """Lengths and heads of a Longformer / BigBird / ModernBERT folder (``reader``'s names: its own, less the
    task prefix)."""
    from bert4long.checkpoints.config import read_config
    from bert4long.checkpoints.position_record import recorded_extension

    n = config.get("max_position")
    raw_path = os.path.join(reader.prefix, "config.json")
    raw = read_config(raw_path)
    if n and recorded_extension(raw) is not None:   # (BigBird: bert4long wrote it with extended positions)
        print(_lengths_line(n, raw))
    elif n and family.rope_scaling:   # the rotary scaling its config records, as every command builds it
        print(_rope_lines(n, config, family))
    elif n:
        print(f"lengths: up to {n} tokens as trained ({config['model']}); longer: split into chunks (finetune "
              "--pooling chunks)")
    bare = reader.names()
    nsp = "cls.seq_relationship."   # BERT's NSP head, inside BigBird's "cls." head names
    present = {"MLM": any(n.startswith(family.head_prefixes) and not n.startswith(nsp) for n in bare),
               "NSP": any(n.startswith(nsp) for n in bare), "pooler": any(n.startswith("pooler.") for n in bare),
               "classifier": any(n.startswith("classifier.") for n in bare)}
    heads = [head for head, found in present.items() if found]
    print(f"heads: {', '.join(heads) or 'none (encoder only)'}")


def _rope_lines(n, config, family):
    """The rotary scaling a folder's model is built with (per layer type) and the lengths it places."""
    from bert4long.rope_scaling import describe_rope_scaling

    placed = family.builder_class().placed_positions(config)
    scalings = "; ".join(f"{kind}: {describe_rope_scaling(scaling)}" for kind, scaling in config["rope_scaling"].items())
    reach = (f"up to {n} tokens as trained" if placed == n else
             f"up to {placed or 'any number of'} tokens with that scaling ({n} trained positions)")
    return (f"rope scaling: {scalings} (from its config.json; --rope-scaling replaces it)\n"
            f"lengths: {reach} ({config['model']}); longer: split into chunks (finetune --pooling chunks)")


def _print_attention_fit(config, parameters, memory, batch):
    from bert4long.attention import registered_kernels

    print(f"--attention by length (an ESTIMATE for one training step, batch {batch} (--batch-size), float32, inside tf.function, "
          f"default kernel options, against {memory / 2**30:.1f} GiB available here; eager mode needs more, "
          "--recompute and mixed precision less; measure before relying on it):")
    print("  " + "".ljust(16) + "".join(f"{n:>8}" for n in ESTIMATED_LENGTHS))
    for attention, kernel_class in registered_kernels().items():
        try:
            kernel, cells = kernel_class(), []
        except (TypeError, ValueError):  # a registered kernel without defaults for every option
            print("  " + attention.ljust(16) + "  (its options have no defaults: not estimated)")
            continue
        for length in ESTIMATED_LENGTHS:
            need = training_step_bytes(config, parameters, kernel, length, batch)
            cells.append(f"{need / 2**30:7.1f}G" if need <= memory else "      --")
        print("  " + attention.ljust(16) + "".join(cells))
    print("  (GiB needed where it fits; -- where it does not)")


def add_extend_arguments(parser):
    parser.add_argument("--config", help="bert_config.json (default: beside the checkpoint)")
    parser.add_argument("--checkpoint", required=True, help="Google checkpoint prefix or Hugging Face folder")
    parser.add_argument("--method", required=True, choices=["hierarchical", "copy", "interpolate"],
                        help="hierarchical (first n rows unchanged, up to n*n), copy (tile the n rows, as "
                             "Longformer), interpolate (position interpolation)")
    parser.add_argument("--max-position", type=int, required=True, help="the new max_position_embeddings")
    parser.add_argument("--alpha", type=hierarchical_alpha,
                        help="hierarchical alpha (default: the one the checkpoint's config records, else "
                             f"{DEFAULT_ALPHA})")
    parser.add_argument("--override-position-extension", action="store_true",
                        help="extend with --method although the checkpoint's config records another extension")
    parser.add_argument("--out", required=True, help="folder for bert_config.json, vocab.txt, bert_model.ckpt.*")
    add_overwrite_argument(parser)


def run_extend(args, resolved):
    from bert4long.checkpoints.extension import extend_checkpoint
    from bert4long.checkpoints.huggingface import convert_huggingface_folder, is_huggingface_folder

    if args.config is None and is_huggingface_folder(args.checkpoint):
        with tempfile.TemporaryDirectory() as google:   # the Google layout of the source, read once
            config, checkpoint = convert_huggingface_folder(args.checkpoint, os.path.join(google, "source"))
            new_config, prefix = extend_checkpoint(config, checkpoint, args.method, args.max_position, args.out,
                                                   args.alpha, args.overwrite, args.override_position_extension)
    elif args.config is None:
        raise SystemExit("error: extend needs --config (no bert_config.json beside the checkpoint)")
    else:
        new_config, prefix = extend_checkpoint(args.config, args.checkpoint, args.method, args.max_position,
                                               args.out, args.alpha, args.overwrite, args.override_position_extension)
    print(f"wrote {prefix} (max_position_embeddings = {args.max_position}, {args.method}) and {new_config}")


def add_convert_arguments(parser):
    parser.add_argument("--checkpoint", required=True, help="Hugging Face folder (config.json + model.safetensors)")
    parser.add_argument("--out", required=True, help="folder for bert_config.json, vocab.txt, bert_model.ckpt.*")
    add_overwrite_argument(parser)


def run_convert(args, resolved):
    from bert4long.checkpoints.huggingface import convert_huggingface_folder

    config, prefix = convert_huggingface_folder(args.checkpoint, args.out, overwrite=args.overwrite)
    print(f"wrote {prefix} (Google layout) and {config}")
