"""The command line's edge: the options a user typed, and what a command derives from them, resolved once.

`fill_defaults` is the one step that writes onto the parsed options (the documented defaults of options left out);
after it they are read only. `resolve` derives the rest once, the checkpoint's `Source` read here and nowhere else,
and returns it as a frozen `Resolved` that `bert4long.cli.main` passes to the command.
"""
import os
from dataclasses import dataclass

from bert4long.cli.demo import demo_length, demo_settings, runs_demo
from bert4long.cli.inputs import check_model_name, config_beside
from bert4long.cli.mlm import check_family_pretrains
from bert4long.cli.options import resolve_model_options
from bert4long.cli.output_guard import checked_output

# The commands that read --checkpoint through a `Source`.
READS_SOURCE = ("pretrain", "finetune", "evaluate", "export", "predict")
# The commands that build a model from the model options, and whether they read --seq-len tokens at a time (the
# options checked at that length) or any length (an export serves any).
BUILDS_FROM_OPTIONS = {"pretrain": True, "finetune": True, "evaluate": True, "export": False}


@dataclass(frozen=True)
class Resolved:
    """What a command derived from its options, once (`resolve`).

    Attributes:
        given: the options written on the command line (their ``dest``).
        demo: True when ``pretrain`` runs the main job (`bert4long.cli.demo`).
        source: the `bert4long.checkpoints.source.Source` of --checkpoint/--config/--model (None without a
            checkpoint).
        model: the `bert4long.cli.options.ModelOptions` the model is built with (None for a command that builds
            none from the model options).
        output: the `bert4long.output_folders.OutputFolder` a training run writes (None for other commands, and on a worker
            that writes nothing).
    """

    given: frozenset = frozenset()
    demo: bool = False
    source: object = None
    model: object = None
    output: object = None


def fill_defaults(args, given):
    """Write onto the parsed ``args`` the documented defaults of the options left out (``given``: those written on
    the command line): --config beside a Google checkpoint, export's raw-text rows at --max-length when --seq-len is
    left out, and the main job's settings and built-in model (`bert4long.cli.demo.demo_settings`). The one step that
    writes onto ``args``: nothing does after it."""
    config = config_beside(args)
    defaults = {"config": config} if config is not None else {}
    if args.command == "export" and args.raw_text and args.max_length and "seq_len" not in given:
        defaults["seq_len"] = args.max_length
    if runs_demo(args, given):
        defaults.update(demo_settings(args, given))
    for key, value in defaults.items():
        setattr(args, key, value)


def resolve(args, given):
    """The `Resolved` of ``args`` (defaults filled, checked by the command's `bert4long.cli.CHECKS`): its outputs
    checked, its checkpoint's config read and family decided, the model options checked against them."""
    demo = runs_demo(args, given)
    output = checked_output(args, demo)
    source = None
    if args.command == "info":
        source = _info_source(args)
    elif args.command in READS_SOURCE and args.checkpoint is not None:
        source = source_for(args)
    if args.command == "pretrain":
        check_family_pretrains(source)
    model = None
    if args.command in BUILDS_FROM_OPTIONS and source is not None:
        seq_len = demo_length(args, given, source.trained_positions) if demo else args.seq_len
        model = resolve_model_options(args, source, seq_len if BUILDS_FROM_OPTIONS[args.command] else None)
    return Resolved(frozenset(given), demo, source, model, output)


def source_for(args):
    """The `bert4long.checkpoints.source.Source` of --checkpoint, --config and --model: the config read and checked,
    the family decided; the checkpoint is opened on first use."""
    from bert4long.checkpoints.source import resolve_source

    model = getattr(args, "model", None)
    check_model_name(model)
    if args.config is not None and not os.path.isfile(args.config):
        raise FileNotFoundError(f"--config {args.config!r}: no such file; pass the model's bert_config.json")
    return resolve_source(args.checkpoint, args.config, (model or "bert").lower())


def _info_source(args):
    """``info``'s `Source`: the checkpoint opened as model loading opens it, with its own config.json (a Hugging Face
    folder), else --config or the bert_config.json beside it when there is one (``info`` reads a checkpoint
    without one too)."""
    from bert4long.checkpoints.layout import open_checkpoint
    from bert4long.checkpoints.safetensors_io import SafetensorsReader
    from bert4long.checkpoints.source import resolve_source

    reader = open_checkpoint(args.checkpoint)
    config = None
    if not isinstance(reader, SafetensorsReader):   # (a folder's config.json: the source reads it)
        path = args.config or os.path.join(os.path.dirname(reader.prefix), "bert_config.json")
        config = path if os.path.isfile(path) else None
    return resolve_source(args.checkpoint, config, reader=reader)
