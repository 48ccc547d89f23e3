"""``bert4long finetune``: a long-document classifier (one label or several) or a token labeller.

Documents are read through `bert4long.data` (`load_corpus` and `label_ids` for classification,
`bert4long.data.tagging` for token labelling); training reads them in batches of similar length
(`bert4long.data.length_batches`: shuffled every epoch, a pure function of (seed, epoch), so a resumed run
stays exact), and scoring in batches sorted by length, each padded to a bucket length that suits the model's
attention kernels (`bert4long.training.metrics_record`). Every file is checked (labels, tags, --valid included)
before the model is built.
"""
import json
import os

from bert4long.cli.inputs import check_checkpoint, check_utf8, choose_tokenizer, read_labels
from bert4long.cli.options import (
    add_model_arguments,
    add_reading_arguments,
    add_training_arguments,
    model_kwargs,
    non_negative_int,
    positive_int,
    training_path,
)
from bert4long.cli.run_folder import (
    MODEL_FILES,
    SETTINGS_FILE,
    copy_tokenizer,
    print_summary,
    reads_as_integer,
    run_settings,
    saved_line,
    start_writing,
)
from bert4long.output_folders import remove_written, write_text_atomically
from bert4long.prediction import model_inputs
from bert4long.training.metrics_record import MetricsRecord, earlier_scores

DEFAULT_EPOCHS = 3
# finetune's --keep-checkpoints: 0 allowed, one state kept by default.
KEEP_CHECKPOINTS_HELP = (
    "resumable training states (model, optimizer, data position: about 3x the model file) kept in OUT/checkpoints/, "
    "the newest (default 1, the last, which resumes an interrupted run, and from which a finished run given more "
    "--epochs goes on); 0 keeps one while training and removes it once the run has finished, leaving what predict "
    "and export read (the model file, finetune.json, metrics.json, the tokenizer)")
SELECT_METRICS = {"classify": ("macro_f1", "accuracy"), "tokens": ("entity_f1", "token_accuracy"),
                  "multilabel": ("micro_f1", "macro_f1", "samples_f1")}
THRESHOLD_MODES = ("global", "per-label")
# A class weight at least this large is named as the likely cause of a loss that became NaN/inf.
LARGE_CLASS_WEIGHT = 1e4


def add_finetune_arguments(parser):
    parser.description = (
        "Fine-tune a document classifier (--task classify: .jsonl lines {'text': ..., 'label': ...}) or a token "
        "labeller (--task tokens: .jsonl lines {'tokens': [...], 'tags': [...]}, one tag per token) or a multi-label "
        "classifier (--task multilabel: .jsonl lines {'text': ..., 'labels': [...]}, a list, maybe empty). Labels may "
        "be strings or integers. Writes the model, finetune.json and the tokenizer (vocab.txt, or the checkpoint "
        "folder's tokenizer files) to --out, which `bert4long predict --run OUT` reads. On a Longformer folder the "
        "first token (<s>) gets global attention, as transformers' LongformerForSequenceClassification gives it "
        "(--no-global-cls: none).")
    add_model_arguments(parser)
    parser.add_argument("--task", default="classify", choices=list(MODEL_FILES),
                        help="classify: one label per document; tokens: one tag per token; multilabel: a set of "
                             "labels per document, one sigmoid output each (default classify)")
    parser.add_argument("--multilabel-loss", choices=["bce", "mcc"],
                        help="--task multilabel: bce, binary cross-entropy on each label (default); mcc, bert4keras's "
                             "multilabel_categorical_crossentropy (its decision: logit > 0, probability 0.5)")
    parser.add_argument("--threshold", metavar="global|per-label|P",
                        help="--task multilabel: a label is chosen when its probability is at least the threshold: "
                             "global, the value of 0.05, 0.10, ..., 0.95 with the best --select-metric on --valid "
                             "after each epoch (kept with the epoch's weights); per-label, each label's value of that "
                             "grid with its best F1; P, a number in (0, 1) (default: global with --valid and bce, "
                             "else 0.5)")
    parser.add_argument("--train", required=True, help="training .jsonl")
    parser.add_argument("--valid", help="optional validation .jsonl (checked before training starts)")
    parser.add_argument("--labels", help="file with one label (or tag) per line (default: those of --train, sorted); "
                                         "the head gets one output per line, two or more")
    parser.add_argument("--allow-one-class", action="store_true",
                        help="train although --train holds one class (label, or tag) only, which is refused otherwise "
                             "(the model would learn to answer it whatever it reads); the head still has an output "
                             "for every label of --labels")
    parser.add_argument("--pooling", default="cls", choices=["cls", "chunks"],
                        help="classify and multilabel. cls: [CLS] of one long sequence; chunks: mean of the windows' [CLS]")
    parser.add_argument("--chunks", type=positive_int, default=4, help="windows per document for --pooling chunks")
    parser.add_argument("--no-global-cls", dest="global_cls", action="store_false",
                        help="Longformer: no global attention on the first token (default: global, the token the "
                             "classifier reads)")
    add_training_arguments(parser, steps=None, steps_help=f"training steps (batches), instead of --epochs (default: "
                                                          f"none, --epochs {DEFAULT_EPOCHS} is trained)",
                           keep_checkpoints=(non_negative_int, 1, KEEP_CHECKPOINTS_HELP))
    parser.add_argument("--epochs", type=positive_int,
                        help=f"passes over --train (default: {DEFAULT_EPOCHS} when --steps is not given); --steps "
                             "instead counts batches")
    parser.add_argument("--class-weight", metavar="balanced|FILE",
                        help="--task classify: weigh each training example's loss by its label's weight (the loss of "
                             "a batch is sum(w * loss) / sum(w)): balanced gives n_examples / (n_labels * count) over "
                             "the labels of --train, as scikit-learn's 'balanced'; FILE is a JSON object "
                             '{"label": weight, ...} (a label it leaves out weighs 1). Validation scores are not '
                             "weighted (default: every label weighs 1)")
    parser.add_argument("--select-metric", choices=sorted({m for ms in SELECT_METRICS.values() for m in ms}),
                        help="--valid: the score whose best epoch's weights are kept as the final model, the first "
                             "of epochs with equal scores (default: macro_f1 for classify, entity_f1 for tokens, "
                             "micro_f1 for multilabel; samples_f1 is scikit-learn's average='samples')")
    parser.add_argument("--early-stopping", type=positive_int, metavar="PATIENCE",
                        help="--valid: stop after PATIENCE epochs without a better --select-metric (an equal score "
                             "is no improvement)")
    parser.add_argument("--eval-every", type=positive_int, metavar="STEPS",
                        help="--valid: also score it every STEPS training steps between epochs' ends (printed, in "
                             "metrics.json's 'evaluations' and TensorBoard at the step); the kept weights are those of "
                             "the best evaluation, an epoch's or one of these (default: at epochs' ends only)")
    parser.add_argument("--test", metavar="FILE",
                        help="optional test .jsonl, labelled as --train, scored once at the end with the kept weights "
                             "(printed, metrics.json's 'test'); it never chooses them (checked before training starts)")
    add_reading_arguments(parser)


def _label_list(args, option, found):
    """The labels of the head: --labels, else those ``found`` in --train (sorted); refuses fewer than two, and
    --train data of one class unless --allow-one-class."""
    labels = read_labels(args.labels) if args.labels else sorted(set(found))
    kind = "tag" if args.task == "tokens" else "label"
    path = getattr(args, option)
    classes = sorted(set(found))
    if not classes and args.task == "multilabel":
        raise ValueError(f"--{option} {path!r}: no label appears in any line (every 'labels' list is empty), so there "
                         "is nothing to learn; multi-label training needs at least one labelled document: add labels "
                         "to the documents that have them")
    if not classes:
        raise ValueError(f"--{option} {path!r} holds no {kind}: give every "
                         f"{'token a tag' if args.task == 'tokens' else 'document a label'}")
    if len(labels) < 2:
        where = f"--labels {args.labels!r} lists" if args.labels else f"--{option} {path!r} holds"
        raise ValueError(f"{where} one {kind} only, {labels[0]!r}: a model with one output answers it whatever it "
                         f"reads; {'list every' if args.labels else 'add examples of another'} {kind}"
                         + ("" if args.labels else f", or list every {kind} in --labels (with --allow-one-class)"))
    if len(classes) == 1 and not args.allow_one_class:
        raise ValueError(f"--{option} {path!r} holds one {kind} only, {classes[0]!r}: the model would learn to "
                         f"answer it whatever it reads; add examples of the other {kind}s, or pass --allow-one-class "
                         "if this is meant")
    return labels


def _documents_as_rows(tokenizer, token_ids, args):
    """`bert4long.data.rows.document_rows` for --seq-len and --pooling (chunks: --chunks windows a document)."""
    from bert4long.data.rows import document_rows

    return document_rows(tokenizer, token_ids, args.seq_len, args.chunks if args.pooling == "chunks" else None)


def _classification_data(args, tokenizer, option, labels=None):
    """``(x, y, None, labels, None, integer_labels)`` for the labelled .jsonl of ``--option``; labels are checked here,
    naming file:line (``labels`` None: the training file, which gives them); ``integer_labels``: every label was
    written as a JSON integer."""
    from bert4long.data.corpus import load_corpus
    from bert4long.data.pipeline import label_ids

    path = getattr(args, option)
    corpus = load_corpus(path, tokenizer, errors=args.errors, text_format="jsonl")
    if not len(corpus):
        raise ValueError(f"--{option} {path!r} holds no document with text (skipped: {corpus.skipped}): each line "
                         'must be {"text": "...", "label": ...}')
    labels = labels or _label_list(args, option, [label for label in corpus.labels if label is not None])
    try:
        y = label_ids(corpus, labels)
    except ValueError as error:  # it names file:line relative to the file's folder
        raise ValueError(f"{os.path.join(os.path.dirname(os.path.abspath(path)), str(error))}; each line must be "
                         '{"text": "...", "label": ...}' + (f" (labels file: {args.labels})" if args.labels else "")
                         ) from None
    return _documents_as_rows(tokenizer, corpus.token_ids, args), y, None, labels, None, corpus.integer_labels


def _multilabel_data(args, tokenizer, option, labels=None):
    """``(x, y, None, labels, None, integer_labels)`` for the multi-label .jsonl of ``--option``
    (`bert4long.data.multilabel`), ``y`` 0/1 ``[documents, labels]``; each line is checked here, naming file:line
    (``labels`` None: the training file, which gives them); ``integer_labels``: every label was a JSON integer."""
    from bert4long.data.multilabel import FORM, multi_hot, read_multilabel

    path = getattr(args, option)
    texts, sets, where, integer_labels = read_multilabel(path, args.errors)
    if not texts:
        raise ValueError(f"--{option} {path!r} holds no document with text: each line must be {FORM}")
    labels = labels or _label_list(args, option, [label for names in sets for label in names])
    y = multi_hot(sets, labels, where)
    return _documents_as_rows(tokenizer, tokenizer.encode_documents(texts), args), y, None, labels, None, integer_labels


def _tagging_data(args, tokenizer, option, labels=None):
    """``(x, y, weights, labels, owner, False)`` for the token-labelling .jsonl of ``--option``; tags are checked here,
    naming file:line (``labels`` None: the training file, which gives them)."""
    from bert4long.data.tagging import encode_tagged, read_tagged

    path = getattr(args, option)
    words, tags, sources = read_tagged(path)
    labels = labels or _label_list(args, option, [t for doc in tags for t in doc])
    x, y, weights, owner = encode_tagged(tokenizer, words, tags, labels, args.seq_len, sources)
    return x, y, weights, labels, owner, False


def class_weights(option, labels, label_ids):
    """One weight per label for ``--class-weight option`` (None: no weighting): ``balanced``
    (`balanced_class_weights` of the training ``label_ids``) or a JSON file {label: weight}, refused in one line when
    it is not such an object, names a label the run does not have, or gives a weight that is not a positive number."""
    import math

    from bert4long.training.finetune import balanced_class_weights

    if option is None:
        return None
    if option == "balanced":
        return balanced_class_weights(label_ids, len(labels)).tolist()
    check_utf8(option, "class-weight")
    form = '{"label": weight, ...}'
    try:
        with open(option, encoding="utf-8-sig") as f:
            given = json.load(f)
    except ValueError as error:
        raise ValueError(f"--class-weight {option!r} is not JSON ({error}): write {form}") from None
    if not isinstance(given, dict):
        raise ValueError(f"--class-weight {option!r} holds {type(given).__name__}, not an object: write {form}")
    unknown = sorted(set(given) - set(labels))
    if unknown:
        raise ValueError(f"--class-weight {option!r} names label(s) {unknown[:10]} the run does not have ({labels}): "
                         "fix the names, or add the labels to --labels")
    for label, weight in given.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
            raise ValueError(f"--class-weight {option!r}: label {label!r} has weight {weight!r}; give a positive "
                             "number (leave a label out to weigh it 1)")
    return [float(given.get(label, 1.0)) for label in labels]


def check_finetune_arguments(args, given):
    """finetune's checks that need more than argparse, run by `bert4long.cli.main` before anything is read."""
    check_checkpoint(args)
    if args.distribute == "multiworker":
        raise ValueError("finetune --distribute multiworker is not supported yet (every worker would write the run "
                         "folder): fine-tune on one machine's devices with --distribute mirrored; pretrain takes "
                         "--distribute multiworker")
    if args.task == "tokens" and args.pooling != "cls":
        raise ValueError("--pooling chunks is for --task classify; a token labeller reads every window of a "
                         "document (leave --pooling out)")
    for option in ("train", "valid", "test"):
        path = getattr(args, option)
        if path is not None and not os.path.isfile(path):
            raise FileNotFoundError(f"--{option} {path!r}: no such file; pass a .jsonl file")
        if path is not None:
            check_utf8(path, option)
    if args.steps is not None and args.epochs is not None:
        raise ValueError(f"--steps {args.steps} and --epochs {args.epochs} both say how long to train: give one")
    if args.steps is not None and args.warmup_steps is not None and args.warmup_steps > args.steps:
        raise ValueError(f"--warmup-steps {args.warmup_steps} is more than --steps {args.steps}")
    if select_metric(args) not in SELECT_METRICS[args.task]:
        raise ValueError(f"--select-metric {args.select_metric} is not a score of --task {args.task}: use one of "
                         f"{', '.join(SELECT_METRICS[args.task])}")
    if args.early_stopping and not args.valid:
        raise ValueError("--early-stopping needs --valid (the scores it watches)")
    if args.eval_every and not args.valid:
        raise ValueError(f"--eval-every {args.eval_every} needs --valid (the set it scores): pass --valid, or leave "
                         "--eval-every out")
    if not args.overwrite and os.path.isfile(os.path.join(args.out, SETTINGS_FILE)) \
            and not os.path.isdir(os.path.join(args.out, "checkpoints")):
        raise ValueError(f"--out {args.out!r} holds a finished run whose checkpoints were removed (--keep-checkpoints "
                         "0): it cannot be resumed or extended; pass --overwrite to train again from the start, or "
                         "choose a new --out folder")
    if args.class_weight is not None and args.task != "classify":
        raise ValueError(f"--class-weight is for --task classify: the loss of --task {args.task} is not weighted by "
                         "label; leave --class-weight out")
    check_threshold_options(args)
    if args.class_weight not in (None, "balanced") and not os.path.isfile(args.class_weight):
        raise FileNotFoundError(f"--class-weight {args.class_weight!r}: no such file; pass balanced, or a JSON file "
                                '{"label": weight, ...}')


def select_metric(args):
    """The score that chooses the kept weights: --select-metric, else the first of the task's (`SELECT_METRICS`)."""
    return args.select_metric or SELECT_METRICS[args.task][0]


def check_threshold_options(args):
    """Refuse --multilabel-loss and --threshold off --task multilabel, a chosen threshold without --valid, and a
    number out of (0, 1)."""
    for option, value in (("multilabel-loss", args.multilabel_loss), ("threshold", args.threshold)):
        if value is not None and args.task != "multilabel":
            raise ValueError(f"--{option} is for --task multilabel; leave it out for --task {args.task}")
    if args.threshold in THRESHOLD_MODES and not args.valid:
        raise ValueError(f"--threshold {args.threshold} is chosen on --valid: pass --valid, or a fixed threshold "
                         "such as --threshold 0.5")
    if args.threshold is not None and args.threshold not in THRESHOLD_MODES:
        try:
            number = float(args.threshold)
        except ValueError:
            number = None
        if number is None or not 0 < number < 1:
            raise ValueError(f"--threshold {args.threshold!r} is not global, per-label or a number in (0, 1): "
                             "pass one of them")


def threshold_mode(args):
    """The --threshold of a multi-label run (None for other tasks): ``'global'`` or ``'per-label'`` (chosen on --valid)
    or a number; by default global with --valid and the bce loss, else 0.5 (mcc's ``logit > 0``)."""
    if args.task != "multilabel":
        return None
    if args.threshold is None:
        return "global" if args.valid and args.multilabel_loss in (None, "bce") else 0.5
    return args.threshold if args.threshold in THRESHOLD_MODES else float(args.threshold)


def _training_reader(model, arrays, pad_id, args, steps, source):
    """``(batches, buckets, estimate)``: ``batches(start)`` gives the training batches from step ``start`` on, by
    length (`bert4long.data.length_batches`, lengths that suit the model's kernels); ``estimate`` the callback that
    prints the time of an epoch of the run's ``steps``. Prints what an epoch processes, padding included, and the
    memory a step needs (`print_memory_estimate`; ``source``: the checkpoint's `Source`)."""
    import numpy as np
    import tensorflow as tf

    from bert4long.data.length_batches import (
        buckets_for,
        epoch_batches,
        epoch_shapes,
        fitted_buckets,
        padded_shapes,
        training_batches,
    )
    from bert4long.training.time_estimate import EpochTimeEstimate

    buckets = fitted_buckets(arrays[0], pad_id, buckets_for(model, args.seq_len))
    shapes = padded_shapes(arrays[0], pad_id, buckets)
    first = epoch_batches(shapes, args.batch_size, args.seed, 0)
    real = int((arrays[0][first] != pad_id).sum())
    padded = args.batch_size * int(np.prod(shapes[first].max(1), axis=1).sum())
    full = first.size * int(np.prod(arrays[0].shape[1:]))
    print(f"batches by length, padded to {', '.join(map(str, buckets))} tokens: an epoch processes "
          f"{padded:,} tokens, {1 - real / padded:.0%} of them padding (padded to --seq-len: {full:,}, "
          f"{1 - real / full:.0%})", flush=True)
    print_memory_estimate(args, source, model, shapes)
    estimate = EpochTimeEstimate(lambda epoch: epoch_shapes(shapes, args.batch_size, args.seed, epoch),
                                 args.batch_size, steps,
                                 report=lambda line: print(("" if args.quiet else "\n") + line, flush=True))

    def batches(start):
        estimate.start(start)
        dataset = training_batches(arrays, shapes, args.batch_size, args.seed, start,
                                   cut_like_ids=[True] + [args.task == "tokens"] * (len(arrays) - 1))
        return dataset.map(lambda ids, *target: (model_inputs(model, ids), *target)).prefetch(tf.data.AUTOTUNE)

    return batches, buckets, estimate


# The estimate was 5-13% below the peak resident memory of MiniLM fine-tunes at 512 and 1,536 tokens (docs/results.md,
# "Class weights on an imbalanced task"): a batch fits when the estimate plus this much is available.
ESTIMATE_HEADROOM = 1.15


def print_memory_estimate(args, source, model, shapes):
    """Before the first step: the estimated peak memory of a training step on the longest batch the run will see
    (``args.batch_size`` rows of the longest padded ``shapes``: batches by length make that batch the peak;
    `training_step_bytes`), and a warning naming the --batch-size that fits when it is more than the memory
    available now, or less than `ESTIMATE_HEADROOM` below it; a warning too while other bert4long training runs are
    live (`other_training_runs`), whose later growth that figure cannot count. Nothing for a config (``source``'s)
    without the sizes the estimate reads."""
    import numpy as np

    from bert4long.attention.base import AttentionKernel
    from bert4long.training.memory import available_memory_bytes, other_training_runs, training_step_bytes

    config = source.config if source.huggingface else source.file_config
    kernels = [layer for layer in _sublayers(model) if isinstance(layer, AttentionKernel)]
    if not kernels or not all(k in config for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")):
        return
    rows, length = int(np.prod(shapes[:, :-1], axis=1).max(initial=1)), int(shapes[:, -1].max())

    def need(batch):
        return training_step_bytes(config, model.count_params(), kernels[0], length, batch * rows)

    available, needed = available_memory_bytes(), need(args.batch_size)
    print(f"memory: about {needed / 2**30:.1f} GiB at the peak, a step on the longest batch "
          f"({args.batch_size} x {f'{rows} windows x ' if rows > 1 else ''}{length} tokens; an ESTIMATE for float32, "
          f"less with mixed precision or --recompute), against {available / 2**30:.1f} GiB available now", flush=True)
    others = other_training_runs()
    if others:
        print(f"warning: {len(others)} other bert4long training run(s) are running on this machine (process "
              f"{', '.join(map(str, others))}): the memory available now does not count what they will take as they "
              "grow, so this estimate cannot tell whether the runs fit together (their peaks must, summed)", flush=True)
    if needed * ESTIMATE_HEADROOM > available:
        fits = max((b for b in range(1, args.batch_size) if need(b) * ESTIMATE_HEADROOM <= available), default=None)
        print("warning: that is " + ("more than the memory available" if needed > available else
                                     f"within {ESTIMATE_HEADROOM - 1:.0%} of the memory available, and the estimate "
                                     "can be that much below the peak")
              + ": lower --batch-size"
              + (f" to {fits} (the most that fits by this estimate, with that headroom)" if fits else
                 " (even 1 may not fit: lower --seq-len, or pass --recompute)"), flush=True)


def _sublayers(layer):
    """Every layer inside ``layer``: those Keras lists (a model's ``layers``) and those held as attributes."""
    import keras

    found, stack = [], [layer]
    while stack:
        current = stack.pop()
        children = [*getattr(current, "layers", []), *(v for v in vars(current).values()
                                                       if isinstance(v, keras.layers.Layer))]
        new = [child for child in children if all(child is not seen for seen in found)]
        found.extend(new)
        stack.extend(new)
    return found


def run_finetune(args, resolved):
    """``bert4long finetune``, on options `check_finetune_arguments` checked (``resolved``: their
    `bert4long.cli.resolved.Resolved`)."""
    import keras

    from bert4long.training import (
        build_classifier,
        build_token_labeller,
        compile_finetune,
        fit_resumable,
        make_optimizer,
    )
    from bert4long.training.distribute import get_strategy
    from bert4long.training.loop import TrainingDiverged
    from bert4long.training.metrics import EpochScores

    keras.utils.set_random_seed(args.seed)
    chosen = choose_tokenizer(args, resolved.source)
    tokenizer = chosen.tokenizer
    print(chosen.describe(), flush=True)
    read = {"classify": _classification_data, "tokens": _tagging_data, "multilabel": _multilabel_data}[args.task]
    train = read(args, tokenizer, "train")
    x, y, weights, labels = train[:4]
    valid, test = (read(args, tokenizer, option, labels) if getattr(args, option) else None   # checked before training
                   for option in ("valid", "test"))
    weight_of = class_weights(args.class_weight, labels, y)
    earlier = earlier_scores(args.out)
    steps_per_epoch = max(1, len(x) // args.batch_size)
    steps = _training_steps(args, steps_per_epoch)
    print(f"{len(x)} training examples: {steps_per_epoch} steps an epoch, {steps} steps", flush=True)
    strategy = get_strategy(args.distribute)
    global_tokens = "auto" if args.global_cls else None
    kwargs = model_kwargs(args, resolved.model)
    precision, jit_compile = training_path(args, strategy)
    with strategy.scope():
        if args.task != "tokens":
            model = build_classifier(resolved.source, None, len(labels), pooling=args.pooling,
                                     precision=precision, global_tokens=global_tokens, **kwargs)
        else:
            model = build_token_labeller(resolved.source, None, len(labels), precision=precision,
                                         global_tokens=global_tokens, **kwargs)
        optimizer = make_optimizer(args.learning_rate, steps, args.warmup_steps, args.weight_decay, args.clipnorm,
                                   args.accumulate)
        compile_finetune(model, optimizer, jit_compile=jit_compile, class_weight=weight_of,
                         multilabel_loss=(args.multilabel_loss or "bce") if args.task == "multilabel" else None)
    pad = tokenizer.pad_id or 0
    read_batches, buckets, estimate = _training_reader(model, [x, y] + ([weights] if weights is not None else []),
                                                       pad, args, steps, resolved.source)

    def batches(start):
        epochs.start(start)
        return read_batches(start)

    settings = _resume_settings(args, chosen, kwargs, buckets, train, valid, weight_of)
    record = MetricsRecord(model, (valid, test), labels, out=args.out,
                           model_path=os.path.join(args.out, MODEL_FILES[args.task]), task=args.task,
                           metric=select_metric(args), pad_id=pad, buckets=buckets, steps_per_epoch=steps_per_epoch,
                           batch_size=args.batch_size, earlier=earlier, threshold=threshold_mode(args),
                           early_stopping=args.early_stopping, progress_bar=not args.quiet, test_name=args.test)
    epochs = EpochScores(steps_per_epoch, record.epoch_done, args.eval_every, record.step_done)
    start_writing(resolved.output)
    try:
        summary = fit_resumable(model, batches, steps, args.out, settings, save_every=args.save_every,
                                verbose=0 if args.quiet else "auto", accept_changes=args.accept_changes,
                                on_save=saved_line, callbacks=[estimate, epochs], keep=max(1, args.keep_checkpoints),
                                epoch_steps=steps_per_epoch)
    except TrainingDiverged as error:
        raise TrainingDiverged(error.what, _class_weight_cause(weight_of) or error.fix) from None
    rows = [("steps", f"{summary['start_step']} -> {summary['steps']}"), *record.finish(summary)]
    path = record.model_path
    tokenizer_names = copy_tokenizer(args, args.out)
    write_text_atomically(os.path.join(args.out, SETTINGS_FILE),
                          json.dumps({**_finetune_record(args, settings, optimizer, steps_per_epoch, steps,
                                                                     precision, jit_compile),
                                      **record.decision()}, indent=2))
    rows.append(("files", f"{path}, {SETTINGS_FILE}, {', '.join(tokenizer_names)} "
                          f"(bert4long predict --run {args.out})"))
    rows.append(("checkpoints", _finished_checkpoints(args.keep_checkpoints, summary["checkpoints"])))
    print_summary(rows)


def _resume_settings(args, chosen, kwargs, buckets, train, valid, weight_of):
    """What finetune.json records and a resumed finetune must share with its start (`RunDirectory` refuses a change,
    or says it with --accept-changes): the model, `run_settings` of --train (``train``: its reader's tuple), the type
    its labels were written in, and what scores and chooses the kept weights: --valid and what was read from it
    (``valid``: its reader's tuple, or None), --select-metric and --threshold."""
    from bert4long.training.resume import fingerprint

    x, y, _, labels, _, integer_labels = train
    settings = {"task": args.task, "labels": labels, "seq_len": args.seq_len, "pooling": args.pooling,
                "chunks": args.chunks, "batch_size": args.batch_size, "lower_case": chosen.lower_case,
                "model": kwargs, "bucket_lengths": buckets, **run_settings(args, "train", x, y),
                "label_type": "integer" if integer_labels and all(reads_as_integer(label) for label in labels) else "string",
                "class_weight": dict(zip(labels, weight_of or [1.0] * len(labels))),
                "valid": os.path.abspath(args.valid) if args.valid else None,
                "valid_fingerprint": fingerprint(*valid[:2]) if valid else None, "select_metric": select_metric(args)}
    if not args.global_cls:  # (recorded only when asked: runs from before the option resume unchanged)
        settings["global_cls"] = False
    if args.task == "multilabel":
        settings.update(multilabel_loss=args.multilabel_loss or "bce", threshold_option=threshold_mode(args))
    return settings


def _class_weight_cause(weight_of):
    """The fix a diverged run is told when its class weights are the likely cause (None otherwise): a weight of
    `LARGE_CLASS_WEIGHT` or more."""
    if not weight_of or max(weight_of) < LARGE_CLASS_WEIGHT:
        return None
    return (f"The likely cause is --class-weight: its weights reach {max(weight_of):g}, and a loss weighed that "
            "heavily can overflow; give weights nearer 1 (such as --class-weight balanced) and run again (or lower "
            "--learning-rate).")


def _training_steps(args, steps_per_epoch):
    """The run's steps: --steps, else --epochs (default `DEFAULT_EPOCHS`) of ``steps_per_epoch``, refused when fewer
    than --warmup-steps."""
    if args.steps is not None:
        return args.steps
    steps = (args.epochs or DEFAULT_EPOCHS) * steps_per_epoch
    if args.warmup_steps is not None and args.warmup_steps > steps:
        raise ValueError(f"--warmup-steps {args.warmup_steps} is more than the {steps} steps of the run")
    return steps


def _finished_checkpoints(keep, folder):
    """Once the run's files are written: remove the resumable ``folder`` with ``--keep-checkpoints 0``; the summary
    row that says what stays."""
    if keep or not os.path.isdir(folder):
        return f"{folder} (--keep-checkpoints 0 removes them after the run)"
    remove_written(folder)
    return "removed (--keep-checkpoints 0): the run cannot be resumed or extended"


def _finetune_record(args, settings, optimizer, steps_per_epoch, steps, precision, jit_compile):
    """What finetune.json records: the run's ``settings`` (those a resume must share) with the values actually used
    where an option was left to its default (precision, warmup, ``steps`` and epochs, the selection metric), and the
    rest of the command's choices, so that the folder says how to run it again."""
    schedule = optimizer.get_config()["learning_rate"]["config"]["schedule"]   # {step: multiplier}: warmup, decay
    epochs = steps / steps_per_epoch
    return {**settings, "precision": precision,
            "warmup_steps": min(int(step) for step, value in schedule.items() if value == 1.0),
            "steps": steps, "steps_per_epoch": steps_per_epoch, "epochs": int(epochs) if epochs % 1 == 0 else epochs,
            "seed": args.seed, "early_stopping": args.early_stopping,
            "class_weight_option": (os.path.abspath(args.class_weight) if args.class_weight not in (None, "balanced")
                                    else args.class_weight or "none"),
            "labels_file": os.path.abspath(args.labels) if args.labels else None, "global_cls": args.global_cls,
            "allow_one_class": args.allow_one_class, "errors": args.errors, "jit_compile": jit_compile,
            "distribute": args.distribute, "save_every": args.save_every, "eval_every": args.eval_every,
            "test": os.path.abspath(args.test) if args.test else None, "keep_checkpoints": args.keep_checkpoints}


