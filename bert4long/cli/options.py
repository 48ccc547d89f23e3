"""Command-line options shared by several commands, their range checks, and the model keyword arguments
they select.

Every number is checked when it is parsed (an argparse ``type``), so a bad value stops the command before
anything is read or built; `resolve_model_options` checks what needs the model's config or the attention
kernel's constructor, still before any weight is loaded.
"""
import argparse
import ast
import math
from dataclasses import dataclass, field

from bert4long.families import google_layout_families
from bert4long.kernel_names import BUILT_IN_KERNELS, DEFAULT_KERNEL
from bert4long.position_alpha import ALPHA_RANGE, DEFAULT_ALPHA, alpha_problem
from bert4long.rope_scaling import resolve_rope_scaling, rope_scaled_length

POSITION_EXTENSIONS = ("hierarchical", "copy", "interpolate")


# ------------------------------------------------------------------ number types
def _number(kind, test, requirement):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {requirement}, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
        return value

    return parse


positive_int = _number(int, lambda v: v >= 1, "a positive integer (1 or more)")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: 0 < v < math.inf, "a finite number > 0")
non_negative_float = _number(float, lambda v: 0 <= v < math.inf, "a finite number >= 0")
fraction = _number(float, lambda v: 0 <= v < 1, "a fraction in [0, 1)")
sequence_length = _number(int, lambda v: v >= 8, "a sequence length of at least 8 tokens")
window_length = _number(int, lambda v: v >= 3, "a window of at least 3 tokens ([CLS], one token, [SEP])")


def hierarchical_alpha(text):
    """``--hierarchical-position ALPHA`` (and ``extend --alpha``): the library's range (`bert4long.position_alpha`)."""
    try:
        alpha = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number {ALPHA_RANGE} (e.g. {DEFAULT_ALPHA}), got {text!r}") from None
    problem = alpha_problem(alpha)
    if problem:
        raise argparse.ArgumentTypeError(f"alpha must be {ALPHA_RANGE}, got {text}: {problem}; leave the value out "
                                         f"for the usual {DEFAULT_ALPHA}")
    return alpha


def rope_scaling(text):
    """``--rope-scaling TYPE:FACTOR[,KEY=VALUE...]`` (``yarn:4``, ``yarn:4,beta_fast=16``) -> the ``rope_scaling=``
    dict, checked by the library's rules (`bert4long.rope_scaling.resolve_rope_scaling`).

    >>> rope_scaling("yarn:4,beta_fast=16")
    {'rope_type': 'yarn', 'factor': 4, 'beta_fast': 16}
    """
    rope_type, colon, rest = text.partition(":")
    factor, *pairs = rest.split(",")
    items = [("factor", factor), *(pair.partition("=")[::2] for pair in pairs)]
    if not colon or not all(key and value for key, value in items):
        raise argparse.ArgumentTypeError(f"expected TYPE:FACTOR[,KEY=VALUE...] such as yarn:4 or "
                                         f"yarn:4,beta_fast=16, got {text!r}")
    scaling = {"rope_type": rope_type, **{key: _literal(value) for key, value in items}}
    try:   # the trained length only fills defaults a given factor does not need: any stands in for it here
        resolve_rope_scaling(scaling, max_position=1, what=repr(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return scaling


def _literal(text):
    """A number (or other Python literal) written on the command line, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


# ------------------------------------------------------------------ argument groups
def add_model_arguments(parser, checkpoint_required=True):
    parser.add_argument("--config", help="bert_config.json (not needed for a Hugging Face folder)")
    parser.add_argument("--checkpoint", required=checkpoint_required,
                        help="Google checkpoint prefix (.../bert_model.ckpt) or a Hugging Face model folder")
    parser.add_argument("--vocab", help="a WordPiece vocab.txt (default: the tokenizer beside --checkpoint or "
                                        "--config: vocab.txt, tokenizer.json, vocab.json + merges.txt or a .model)")
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--cased", dest="lower_case", action="store_false", default=None,
                        help="keep upper case (default: follow the checkpoint; a vocab with capitals is cased)")
    casing.add_argument("--uncased", dest="lower_case", action="store_true", help="lower-case the text")
    names = ", ".join(f.name for f in google_layout_families()).replace("bert,", "bert (default),", 1)
    parser.add_argument("--model", help=f"model family: {names} (a Hugging Face folder's config.json names its own)")
    parser.add_argument("--seq-len", type=sequence_length, default=512, help="tokens per sequence (default 512)")
    parser.add_argument("--hierarchical-position", nargs="?", const=DEFAULT_ALPHA, type=hierarchical_alpha,
                        metavar="ALPHA", help="place up to n^2 positions by hierarchical decomposition (needed above "
                                              f"n); ALPHA {ALPHA_RANGE}, default {DEFAULT_ALPHA}")
    parser.add_argument("--position-extension", choices=POSITION_EXTENSIONS,
                        help="how to read positions beyond the n trained ones: hierarchical (up to n^2), copy "
                             "(the table tiled, as Longformer) or interpolate (position interpolation)")
    parser.add_argument("--max-position", type=positive_int,
                        help="positions placed by --position-extension copy/interpolate (default: --seq-len)")
    parser.add_argument("--rope-scaling", type=rope_scaling, metavar="TYPE:FACTOR[,KEY=VALUE...]",
                        help="stretch rotary positions (ModernBERT) to FACTOR times the trained length: TYPE linear "
                             "(position interpolation), dynamic (NTK, any length) or yarn; yarn's KEYs beta_fast, "
                             "beta_slow, attention_factor, mscale, mscale_all_dim (e.g. yarn:4 or yarn:4,beta_fast=16)")
    parser.add_argument("--override-position-extension", action="store_true",
                        help="build with the position options given although the checkpoint's config records "
                             "another extension (by default a checkpoint bert4long wrote is read with the extension "
                             "it was trained with, and a different one is refused)")
    parser.add_argument("--attention", default=DEFAULT_KERNEL,
                        help=f"attention kernel: {', '.join(BUILT_IN_KERNELS)} (default {DEFAULT_KERNEL}), or one "
                             "registered with register_attention_kernel; `bert4long info CHECKPOINT` shows which fits "
                             "which length")
    parser.add_argument("--attention-config", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="kernel options (a wrong key lists the kernel's options with their defaults)")


KEEP_CHECKPOINTS_HELP = "resumable training states kept in OUT/checkpoints/, the newest (default 2; 1 keeps only the last)"


def add_training_arguments(parser, steps=1000, steps_help="total training steps (default 1000)",
                           keep_checkpoints=(positive_int, 2, KEEP_CHECKPOINTS_HELP)):
    """The options every training command shares; ``steps``/``steps_help``: --steps's default and its help;
    ``keep_checkpoints``: --keep-checkpoints's type, default and help."""
    keep_type, keep_default, keep_help = keep_checkpoints
    parser.add_argument("--batch-size", type=positive_int, default=8, help="global batch size (default 8)")
    parser.add_argument("--steps", type=positive_int, default=steps, help=steps_help)
    parser.add_argument("--save-every", type=positive_int, default=100, help="checkpoint every N steps (default 100)")
    parser.add_argument("--keep-checkpoints", type=keep_type, default=keep_default, metavar="N", help=keep_help)
    parser.add_argument("--out", default="bert4long_run", help="output folder; rerun to resume (default bert4long_run)")
    parser.add_argument("--learning-rate", type=positive_float, default=5e-5, help="peak learning rate (default 5e-5)")
    parser.add_argument("--warmup-steps", type=non_negative_int, help="linear warmup steps (default 10%% of --steps)")
    parser.add_argument("--weight-decay", type=non_negative_float, default=0.01,
                        help="AdamW decay, not on LayerNorm/bias (default 0.01)")
    parser.add_argument("--clipnorm", type=positive_float, default=1.0, help="global gradient-norm clip (default 1.0)")
    parser.add_argument("--accumulate", type=positive_int, default=1, help="gradient accumulation steps (default 1)")
    parser.add_argument("--precision", default="float32",
                        choices=["float32", "mixed_bfloat16", "mixed_float16", "auto"],
                        help="auto = the fastest here: mixed_float16 with XLA on a GPU, mixed_bfloat16 without XLA "
                             "on a CPU with bfloat16 units (AVX512-BF16, AMX), else float32 with XLA; the choice is "
                             "printed (default float32)")
    parser.add_argument("--no-xla", action="store_true", help="do not jit-compile the training step")
    parser.add_argument("--recompute", action="store_true",
                        help="gradient checkpointing: recompute each layer in the backward pass (less memory)")
    parser.add_argument("--distribute", default="none", choices=["none", "mirrored", "multiworker", "tpu"],
                        help="tf.distribute strategy (multiworker reads TF_CONFIG)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of data order, masking and dropout")
    parser.add_argument("--quiet", action="store_true", help="no progress bars (still one line per checkpoint saved)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start over in an --out that holds an earlier bert4long run (not another folder)")
    parser.add_argument("--accept-changes", action="store_true",
                        help="resume a run although settings changed (learning rate, data, vocab, lengths, batch)")


def training_path(args, strategy):
    """``(precision, jit_compile)`` of a training command under the `tf.distribute` ``strategy``: --precision and
    --no-xla, with auto resolved by `bert4long.precision` (XLA too, unless --no-xla), said in one printed line.
    Under a TPU strategy auto is bfloat16 with XLA, whatever the host CPU has; XLA is left out, and the line says
    why, where the strategy's devices cannot run it (`bert4long.training.distribute.xla_left_out`)."""
    from bert4long.precision import default_jit_compile, default_precision, path_line
    from bert4long.training.distribute import is_tpu, xla_left_out

    chosen, seq_len = args.precision == "auto", getattr(args, "seq_len", None)
    if is_tpu(strategy):
        precision = "mixed_bfloat16" if chosen else args.precision
        jit_compile = not args.no_xla
        print(path_line(precision, jit_compile, chosen=False)   # (auto's reasons are the host's: a TPU's is this)
              + (" (auto: a TPU, which computes in bfloat16)" if chosen else ""), flush=True)
        return precision, jit_compile
    precision = default_precision() if chosen else args.precision
    jit_compile = not args.no_xla and (default_jit_compile(precision, seq_len) if chosen else True)
    left_out = xla_left_out(strategy) if jit_compile else None
    jit_compile = jit_compile and left_out is None
    print(path_line(precision, jit_compile, chosen, seq_len) + (f"; {left_out}" if left_out else ""), flush=True)
    return precision, jit_compile


def add_reading_arguments(parser):
    """How documents are read (corpus and labelled files)."""
    parser.add_argument("--errors", default="strict", choices=["strict", "skip", "replace"],
                        help="bytes that are not UTF-8: strict stops naming the file, skip leaves the document "
                             "out (counted), replace reads them as U+FFFD (default strict)")


# ------------------------------------------------------------------ checks that need the config or the kernel
def parse_attention_config(items, attention):
    """``["window=256", "global_tokens=[0,1]"]`` -> ``{"window": 256, "global_tokens": [0, 1]}``, checked
    against the kernel's constructor; the error names the kernel's valid options."""
    kernel = _kernel_class(attention)
    valid = {option.name: option.default for option in kernel.options()}
    described = ", ".join(f"{k}={v!r}" for k, v in valid.items()) or "none"
    config = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--attention-config expects KEY=VALUE, got {item!r}; {attention}'s options "
                             f"(with defaults): {described}")
        if key not in valid:
            raise ValueError(f"--attention-config: {attention} has no option {key!r}; its options "
                             f"(with defaults): {described}")
        config[key] = _literal(text)
    try:
        kernel(**config)
    except (ValueError, TypeError) as error:
        raise ValueError(f"--attention-config for {attention}: {error} Its options (with defaults): "
                         f"{described}") from None
    return config


def _kernel_class(attention):
    """The class registered as ``--attention`` (its options and facts describe it)."""
    from bert4long.attention import registered_kernels

    kernels = registered_kernels()
    if attention not in kernels:
        raise ValueError(f"--attention: Unknown attention {attention!r}. Choose one of {sorted(kernels)}.")
    return kernels[attention]


def _check_kernel_against_length(attention, config, seq_len):
    try:
        _kernel_class(attention).check_length(config, seq_len, "--seq-len")
    except ValueError as error:
        raise ValueError(f"--attention-config {error}") from None


@dataclass(frozen=True)
class ModelOptions:
    """The model options as the checkpoint reads them (`resolve_model_options`): the position options given, or those
    its config records, and the parsed --attention-config."""

    hierarchical_position: float | None = None
    position_extension: str | None = None
    max_position: int | None = None
    attention_config: dict = field(default_factory=dict)


def resolve_model_options(args, source, seq_len=None):
    """The `ModelOptions` of ``args`` for the checkpoint ``source`` (its `bert4long.checkpoints.source.Source`),
    checked against each other, the kernel and, with ``seq_len`` (the tokens a command reads at a time; None: any
    length), the positions the checkpoint's model will place."""
    _check_rope_scaling(args, source)
    hierarchical, extension, max_position = _position_options(args, source)
    if hierarchical is not None and extension not in (None, "hierarchical"):
        raise ValueError(f"--hierarchical-position conflicts with --position-extension {extension}: give one of them")
    if max_position is not None and extension in (None, "hierarchical") and hierarchical is None:
        raise ValueError("--max-position sets the length of --position-extension copy/interpolate: add "
                         "--position-extension copy (or interpolate), or leave --max-position out")
    options = ModelOptions(hierarchical, extension, max_position,
                           parse_attention_config(args.attention_config, args.attention))
    if seq_len:
        _check_kernel_against_length(args.attention, options.attention_config, seq_len)
    trained = source.trained_positions
    if trained and seq_len and seq_len > trained:
        _check_placeable(args, options, source, seq_len, trained)
    return options


def _check_placeable(args, options, source, seq_len, max_position):
    """Refuse a --seq-len beyond the positions the model will place, naming the option that reaches it."""
    from bert4long.ops.position_extension import PositionExtension

    if args.rope_scaling is not None:
        scaling = resolve_rope_scaling(args.rope_scaling, max_position, "--rope-scaling")
        capacity = rope_scaled_length(scaling, max_position)
        if capacity is None or seq_len <= capacity:   # dynamic: any length
            return
        factor = math.ceil(seq_len / scaling.get("original_max_position_embeddings", max_position))
        fix = (f"use --seq-len {capacity} or less, or a factor of {factor} or more (--rope-scaling "
               f"{scaling['rope_type']}:{factor})")
    elif (recorded := _recorded_rope_capacity(source, max_position)) != max_position:
        if recorded is None or seq_len <= recorded:   # dynamic: any length
            return
        capacity = recorded
        fix = (f"use --seq-len {recorded} or less, or stretch further than the config records (--rope-scaling "
               f"yarn:{math.ceil(seq_len / max_position)} replaces its scaling)")
    else:
        kwargs = model_kwargs(args, options)  # the extension the model will be built with
        extension = PositionExtension.from_options(
            kwargs.get("hierarchical_position"), kwargs.get("position_extension"), kwargs.get("position_extension_length"))
        method, capacity = extension.method, extension.capacity(max_position)
        if seq_len <= capacity:
            return
        fix = ("add --hierarchical-position (up to n^2 = "
               f"{max_position * max_position}) or --position-extension copy/interpolate" if method is None
               else "use a shorter --seq-len" + (" or a larger --max-position" if method != "hierarchical" else ""))
        family = source.family if source.from_folder else None   # a --checkpoint folder's family
        if family is not None and not family.position_extension:
            fix = (f"use --seq-len {max_position} or less ({family.name} places no positions beyond its trained "
                   "ones; finetune --pooling chunks reads longer documents in windows)")
            if family.rope_scaling:
                fix = (f"add --rope-scaling yarn:{math.ceil(seq_len / max_position)} (its rotary positions "
                       f"stretched), or {fix}")
    raise ValueError(f"--seq-len {seq_len} is longer than the {capacity} positions this model can place "
                     f"(trained: {max_position}): {fix}")


def _recorded_rope_capacity(source, max_position):
    """The positions a --checkpoint folder's model places with the rotary scaling its config records
    (``max_position`` when it records none, None for any length)."""
    family = source.family if source.from_folder else None
    if family is None or not family.rope_scaling:
        return max_position
    return family.placed_positions(source.file_config)


def _check_rope_scaling(args, source):
    """Refuse --rope-scaling together with a position table's options, or for a family whose rotary positions
    bert4long does not stretch (asked of its `bert4long.families.Family`)."""
    from bert4long.families import FAMILIES

    if args.rope_scaling is None:
        return
    declared = source.family
    if declared is not None and not declared.rope_scaling:
        if declared.position_extension:
            raise ValueError(f"--rope-scaling stretches rotary positions, and {declared.name}'s positions are a "
                             "learned table: use --position-extension copy/interpolate (or --hierarchical-position) "
                             "instead")
        scaled = ", ".join(f.name for f in FAMILIES if f.rope_scaling)
        raise ValueError(f"--rope-scaling stretches the rotary positions of {scaled}, and {declared.name} takes no "
                         "RoPE scaling: leave it out")
    resolve_rope_scaling(args.rope_scaling, source.trained_positions, "--rope-scaling")   # with the trained length
    given = [option for option, value in (("--hierarchical-position", args.hierarchical_position),
                                          ("--position-extension", args.position_extension),
                                          ("--max-position", args.max_position)) if value is not None]
    if given:
        raise ValueError(f"--rope-scaling stretches rotary positions and {given[0]} extends a position table: "
                         "give one of them")


def _position_options(args, source):
    """``(hierarchical_position, position_extension, max_position)``: those given, or, when none was given, the
    extension the checkpoint's config records (`bert4long.checkpoints.position_record`), saying so on stderr; a
    different one is refused unless --override-position-extension."""
    import sys

    from bert4long.checkpoints.position_record import (
        POSITION_OPTIONS,
        describe,
        recorded_extension,
        restore_position_options,
    )

    given = (args.hierarchical_position, args.position_extension, args.max_position)
    path, config = source.config_path, source.file_config
    recorded = recorded_extension(config)
    asked = any(value is not None for value in given)
    if recorded is None or (asked and args.override_position_extension):
        return given
    options = restore_position_options(config, dict(zip(POSITION_OPTIONS, given)), f"--config {path!r}")
    if not asked:
        print(f"positions: {describe(recorded)}, as recorded in {path}", file=sys.stderr)
    method = options["position_extension"]
    if method == "hierarchical":
        return options["hierarchical_position"], None, None
    return options["hierarchical_position"], method, options["position_extension_length"]


def model_kwargs(args, options):
    """The `build_transformer_model` keyword arguments the model options select (``options``: their resolved
    `ModelOptions`)."""
    kwargs = {"sequence_length": None}
    if getattr(args, "model", None):
        kwargs["model"] = args.model.lower()
    if options.hierarchical_position is not None:
        kwargs["hierarchical_position"] = options.hierarchical_position
    if options.position_extension is not None:
        kwargs["position_extension"] = options.position_extension
        if options.position_extension != "hierarchical":
            kwargs["position_extension_length"] = options.max_position or args.seq_len
    if args.attention != DEFAULT_KERNEL or options.attention_config:
        kwargs["attention"] = args.attention
        kwargs["attention_config"] = dict(options.attention_config)
    if getattr(args, "recompute", False):
        kwargs["recompute"] = True
    if args.rope_scaling is not None:
        kwargs["rope_scaling"] = args.rope_scaling
    if args.override_position_extension:
        kwargs["override_position_extension"] = True
    return kwargs
