"""Every command's --out, checked before any work: never another's files, never an input; one run at a time."""
import contextlib
import json
import os

from bert4long.output_folders import OutputFolder, check_output_file
from bert4long.training.lock import RunLock

# What each writing command reads (attribute names of its options): --out may not be, hold or sit in these.
INPUT_OPTIONS = {
    "pretrain": ("checkpoint", "config", "vocab", "corpus"),
    "finetune": ("checkpoint", "config", "vocab", "train", "valid", "labels"),
    "export": ("checkpoint", "config", "vocab", "run"),
    "extend": ("checkpoint", "config"),
    "convert": ("checkpoint",),
}
TRAINING_COMMANDS = ("pretrain", "finetune")
# Commands that write files (--output, --metrics) rather than a folder, and what they read.
FILE_OUTPUTS = {"predict": (("output", "metrics"), ("checkpoint", "config", "vocab", "input", "run"))}


def add_overwrite_argument(parser):
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier output of bert4long in --out (never a folder bert4long did not make)")


def _writes(args):
    """False on a worker of a multi-worker run other than its chief: those write nothing (`is_chief`)."""
    if getattr(args, "distribute", "none") != "multiworker":
        return True
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    return task.get("type") in ("chief", None) or (task.get("type") == "worker" and task.get("index", 0) == 0)


def checked_output(args, demo=False):
    """Check ``args.command``'s outputs before any work (``demo``: `pretrain` runs the main job, which takes no other
    run's folder): the files it writes (--output, --metrics), or its --out folder; return the `OutputFolder` a
    training run writes (`holding` holds it while the run goes on; None for other commands, which write through
    `OutputFolder` themselves, and on a worker that writes nothing)."""
    if args.command in FILE_OUTPUTS:
        options, reads = FILE_OUTPUTS[args.command]
        written = [(option, getattr(args, option, None)) for option in options if getattr(args, option, None)]
        for _, path in written:
            check_output_file(path, [getattr(args, name, None) for name in reads],
                              overwrite=getattr(args, "overwrite", False))
        same = [option for option, path in written[1:] if os.path.realpath(path) == os.path.realpath(written[0][1])]
        if same:
            raise ValueError(f"--{same[0]} {getattr(args, same[0])!r} is also --{written[0][0]}: name two files")
    if args.command not in INPUT_OPTIONS or not _writes(args):
        return None
    inputs = [getattr(args, name, None) for name in INPUT_OPTIONS[args.command]]
    training = args.command in TRAINING_COMMANDS
    kind = f"{args.command} --demo" if demo else args.command   # neither takes the other's folder
    output = OutputFolder(args.out, kind, inputs, overwrite=args.overwrite, resume=training)
    output.probe()
    return output if training else None


@contextlib.contextmanager
def holding(output):
    """Hold a training run's ``output`` (its `OutputFolder`; None: nothing to hold) while the block runs: the folder's
    lock, and the folder removed again when the run fails before writing anything. The run calls `start_writing`
    once its inputs are read and its model built."""
    if output is None:
        yield
        return
    with RunLock(output.path), output.writing():
        try:
            yield
        except BaseException:
            output.remove_if_unused()
            raise
