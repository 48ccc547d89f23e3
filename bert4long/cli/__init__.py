"""The ``bert4long`` command: pretrain, finetune, evaluate, export, info, extend, convert.

Each subcommand is one ``add_<name>_arguments(parser)`` block plus one
``run_<name>(args)`` function, registered in `COMMANDS`.
Run ``bert4long COMMAND --help`` for its options.
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before any command module loads TensorFlow

from bert4long.cli.checkpoint_tools import (
    add_convert_arguments,
    add_export_arguments,
    add_extend_arguments,
    add_info_arguments,
    run_convert,
    run_export,
    run_extend,
    run_info,
)
from bert4long.cli.inputs import default_config
from bert4long.cli.mlm import (
    add_evaluate_arguments,
    add_pretrain_arguments,
    run_evaluate,
    run_pretrain,
)
from bert4long.cli.output_guard import guarded_output
from bert4long.cli.tasks import add_finetune_arguments, run_finetune
from bert4long.training.interrupt import TrainingInterrupted, sigterm_stops

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
    default_config(args)
    try:
        with sigterm_stops(args.command), guarded_output(args):
            COMMANDS[args.command][1](args)
    except TrainingInterrupted as error:   # SIGTERM / Ctrl-C: a checkpoint was saved
        print(f"bert4long {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"bert4long {args.command}: interrupted (Ctrl-C); nothing was saved since the last checkpoint",
              file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, OSError, FloatingPointError) as error:
        print(f"bert4long {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0
