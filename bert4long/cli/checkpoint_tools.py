"""Commands that read or rewrite checkpoints without training: ``export``, ``info``, ``extend``, ``convert``."""
import os
import tempfile

from bert4long.cli.inputs import check_checkpoint, choose_tokenizer, tokenizer_folder
from bert4long.cli.options import (
    add_model_arguments,
    hierarchical_alpha,
    model_kwargs,
    non_negative_int,
    positive_int,
)
from bert4long.cli.output_guard import add_overwrite_argument
from bert4long.data.pooling import MODES
from bert4long.data.truncation import RAW_TEXT_STRATEGIES
from bert4long.position_alpha import DEFAULT_ALPHA

ESTIMATED_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


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
    from bert4long.cli.tasks import load_run_model, read_run_settings

    settings = read_run_settings(args.run, "or --checkpoint for an encoder")
    model = load_run_model(args.run, settings)
    if args.raw_text:
        _refuse_raw_text_for(None if os.path.isfile(os.path.join(args.run, "vocab.txt")) else args.run)
        if len(model.inputs[0].shape) != 2:
            raise ValueError(f"--raw-text serves models that read [batch, length], and {args.run!r} pools "
                             f"--chunks {settings['chunks']} windows inside the model: export without --raw-text, or "
                             "fine-tune with --pooling cls and export it with --raw-text --strategy chunks")
    return model, settings


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


def available_memory_bytes():
    """This machine's memory: MemAvailable from /proc/meminfo, else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def other_training_runs():
    """The process ids of the other ``bert4long pretrain`` and ``finetune`` commands running on this machine (read
    from /proc; this process and those that started it excluded; empty without /proc)."""
    def parent(pid):
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    mine, pid = set(), os.getpid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        try:
            pid = parent(pid)
        except (OSError, ValueError, IndexError):
            break
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:   # (not a process, or gone meanwhile)
            continue
        if entry.isdigit() and int(entry) not in mine and any(
                os.path.basename(a) in (b"bert4long", b"bert4long.cli") and b in (b"pretrain", b"finetune")
                for a, b in zip(argv, argv[1:])):
            found.append(int(entry))
    return sorted(found)


def training_step_bytes(config, parameters, kernel, length, batch=1):
    """Rough float32 bytes of one training step of ``batch`` rows of ``length`` tokens inside ``tf.function``: 1 GiB
    for the TensorFlow runtime, weights, gradients and AdamW's two slots (16 bytes a parameter), activations per layer and
    token (36 hidden-size and 6 intermediate-size floats) and the score tensors of ``kernel`` (an
    `AttentionKernel`: its `training_memory_bytes`). The activation
    factor is fitted to peaks measured on all-MiniLM-L6-v2 with chunked attention (1.8 / 2.4 / 3.6 / 5.0 GB
    at 1,024 / 2,048 / 4,096 / 8,192 tokens; this gives 1.9 / 2.6 / 3.9 / 6.3)."""
    hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    intermediate = config.get("intermediate_size", 4 * hidden)
    activations = batch * layers * length * (36 * hidden + 6 * intermediate)
    scores = kernel.training_memory_bytes(batch=batch, heads=heads, length=length, layers=layers)
    return 2**30 + 16 * parameters + 4 * activations + scores


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
