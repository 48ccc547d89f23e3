"""The ``bert4long`` command: pretrain, finetune, evaluate, export, info, extend, convert.

Each subcommand is one ``add_<name>_arguments(parser)`` block plus one
``run_<name>(args, resolved)`` function, registered in `COMMANDS`; a command whose options
need more than argparse's checks names its check in `CHECKS`, run before anything is read.
`main` parses the options, fills the documented defaults of those left out
(`bert4long.cli.resolved.fill_defaults`, the one step that writes onto them), checks them before
TensorFlow starts, refuses a command of `TENSORFLOW_COMMANDS` on another Keras backend, then
resolves what the command reads once (`bert4long.cli.resolved.resolve`:
the checkpoint's `Source`, the model options, the output folder); the command gets the options,
read only, and that `Resolved`. Run ``bert4long COMMAND --help`` for its options.

The command, not the library, quiets TensorFlow: its start-up logs are parked
(`bert4long.cli.tf_startup`) and Keras's and TensorFlow's Python warnings hidden unless
``--verbose`` (or ``TF_CPP_MIN_LOG_LEVEL`` below 3) asks for them.
"""
import argparse
import sys
import warnings

from bert4long import register_keras_classes
from bert4long.cli.checkpoint_tools import (
    add_convert_arguments,
    add_extend_arguments,
    add_info_arguments,
    run_convert,
    run_extend,
    run_info,
)
from bert4long.cli.demo import runs_demo
from bert4long.cli.export import add_export_arguments, check_export_arguments, run_export
from bert4long.cli.finetune import add_finetune_arguments, check_finetune_arguments, run_finetune
from bert4long.cli.mlm import (
    add_evaluate_arguments,
    add_pretrain_arguments,
    check_evaluate_arguments,
    check_pretrain_arguments,
    run_evaluate,
    run_pretrain,
)
from bert4long.cli.output_guard import TRAINING_COMMANDS, holding
from bert4long.cli.predict import add_predict_arguments, check_predict_arguments, run_predict
from bert4long.cli.resolved import fill_defaults, resolve
from bert4long.cli.tf_startup import BackendMissing, quiet, show_tensorflow_logs, start_keras_quietly
from bert4long.tensorflow_only import TensorFlowRequired, require_tensorflow
from bert4long.training.interrupt import TrainingInterrupted, sigterm_stops

COMMANDS = {
    "pretrain": (add_pretrain_arguments, run_pretrain, "continued MLM pretraining (no arguments: the demo)"),
    "finetune": (add_finetune_arguments, run_finetune, "fine-tune a long-document classifier or token labeller"),
    "predict": (add_predict_arguments, run_predict, "run a fine-tuned model (or an encoder: embeddings) over documents"),
    "evaluate": (add_evaluate_arguments, run_evaluate, "MLM accuracy of a checkpoint on a corpus"),
    "export": (add_export_arguments, run_export, "write a TensorFlow SavedModel"),
    "info": (add_info_arguments, run_info, "show a checkpoint's config, variables and readable lengths"),
    "extend": (add_extend_arguments, run_extend, "write a checkpoint with a longer position table"),
    "convert": (add_convert_arguments, run_convert, "write a Hugging Face folder as a Google checkpoint"),
}
# Checks of a command's options beyond argparse's, ``check(args, given)``: numbers, flags and paths are refused
# before anything is read or TensorFlow starts (what needs the checkpoint's config is checked by `resolve`).
CHECKS = {"pretrain": check_pretrain_arguments, "finetune": check_finetune_arguments,
          "evaluate": check_evaluate_arguments, "export": check_export_arguments, "predict": check_predict_arguments}
# The commands that run on TensorFlow alone: why, and what to use where Keras runs another backend (the command is
# refused before it reads anything). info, extend and convert run on any backend, TensorFlow installed or not.
PYTHON_API = "use the Python API (bert4long.build_transformer_model + model.fit)"
TENSORFLOW_COMMANDS = {
    "pretrain": ("trains through tf.data and resumable tf.train checkpoints", PYTHON_API),
    "finetune": ("trains through tf.data and resumable tf.train checkpoints", PYTHON_API),
    "evaluate": ("masks its corpus in a tf.data pipeline",
                 "use the Python API (build_transformer_model(..., with_mlm=True) + model.predict)"),
    "predict": ("batches with TensorFlow's helpers (bert4long.data.length_batches, bert4long.training.loop)",
                "use the Python API (bert4long.register_keras_classes(), then keras.models.load_model of "
                "classifier.keras + model.predict)"),
    "export": ("writes a TensorFlow SavedModel", "save a .keras file (model.save) and export it where Keras runs "
               "TensorFlow"),
}


def build_parser():
    parser = argparse.ArgumentParser(
        prog="bert4long",
        description="BERT-family models that read long documents. Start with `bert4long pretrain` (a demo).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  bert4long pretrain                       # the main job, about 7 minutes on 2 CPU cores\n"
               "  bert4long pretrain --demo --seq-len 4096 --attention sliding_window --attention-config window=256\n"
               "  bert4long pretrain --checkpoint uncased_L-12_H-768_A-12/bert_model.ckpt \\\n"
               "      --config uncased_L-12_H-768_A-12/bert_config.json --corpus my_texts/ \\\n"
               "      --seq-len 2048 --hierarchical-position --steps 10000 --out run1\n"
               "  bert4long info uncased_L-12_H-768_A-12/\n"
               "  bert4long export --checkpoint run1/bert_model.ckpt --config run1/bert_config.json "
               "--hierarchical-position --out served/",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = {}
    for name, (add_arguments, _run, summary) in COMMANDS.items():
        command = sub.add_parser(name, help=summary, allow_abbrev=False)
        add_arguments(command)
        command.add_argument("--verbose", action="store_true", help="show TensorFlow's start-up and device logs")
        parser.commands[name] = command
    return parser


def given_options(command_parser, argv):
    """The ``dest`` of every option written on the command line (so the demo keeps the ones given)."""
    given = set()
    for token in argv:
        action = command_parser._option_string_actions.get(token.split("=", 1)[0]) if token.startswith("-") else None
        if action is not None:
            given.add(action.dest)
    return given


def _multiworker_strategy():
    """Make the process's `tf.distribute.MultiWorkerMirroredStrategy` before TensorFlow starts (`get_strategy`
    returns it from then on)."""
    from bert4long.training.distribute import get_strategy

    get_strategy("multiworker")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    given = given_options(parser.commands[args.command], argv[argv.index(args.command) + 1:])
    if args.verbose:
        show_tensorflow_logs()
    if quiet():   # the command's own process: Keras's and TensorFlow's warnings are noise to its user
        warnings.filterwarnings("ignore", module="keras")
        warnings.filterwarnings("ignore", module="tensorflow")
    try:
        with sigterm_stops(args.command, resumes=args.command in TRAINING_COMMANDS and not runs_demo(args, given)):
            fill_defaults(args, given)
            if args.command in CHECKS:
                CHECKS[args.command](args, given)
            start_keras_quietly(before_devices=_multiworker_strategy if getattr(args, "distribute", None) ==
                                "multiworker" else None)
            if args.command in TENSORFLOW_COMMANDS:
                reason, instead = TENSORFLOW_COMMANDS[args.command]
                require_tensorflow(f"{args.command} {reason}", instead)
            resolved = resolve(args, given)   # after the quiet start, so that its notes reach stderr
            register_keras_classes()   # run folders hold .keras files
            with holding(resolved.output):
                COMMANDS[args.command][1](args, resolved)
    except TrainingInterrupted as error:   # SIGTERM / Ctrl-C: a checkpoint was saved
        print(f"bert4long {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print(f"bert4long {args.command}: interrupted (Ctrl-C); nothing was saved since the last checkpoint",
              file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, OSError, FloatingPointError, TensorFlowRequired, BackendMissing) as error:
        print(f"bert4long {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0
