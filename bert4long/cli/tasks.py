"""The task commands: ``finetune`` (a long-document classifier, or a token labeller) and ``predict`` (run a
fine-tuned model, or an encoder for embeddings, over a folder or .jsonl of documents).

Documents are read through `bert4long.data` (`load_corpus` and `label_ids` for classification,
`bert4long.data.tagging` for token labelling); training reads them in batches of similar length
(`bert4long.data.length_batches`: shuffled every epoch, a pure function of (seed, epoch), so a resumed run
stays exact), and scoring and `predict` in batches sorted by length, each padded to a bucket length that
suits the model's attention kernels. Every file is checked (labels, tags, --valid included) before the
model is built.
"""
import json
import os
import sys

from bert4long.cli.inputs import (
    ChosenTokenizer,
    check_checkpoint,
    check_utf8,
    choose_tokenizer,
    read_labels,
)
from bert4long.cli.options import (
    add_model_arguments,
    add_reading_arguments,
    add_training_arguments,
    model_kwargs,
    non_negative_int,
    positive_int,
    training_path,
    window_length,
)
from bert4long.cli.run_folder import (
    copy_tokenizer,
    load_final_model,
    print_summary,
    run_settings,
    save_final_model,
    saved_line,
    start_writing,
    weights_only,
)
from bert4long.outputs import atomic_write, remove_written, write_text_atomically

SETTINGS_FILE = "finetune.json"
METRICS_FILE = "metrics.json"
DEFAULT_EPOCHS = 3
# finetune's --keep-checkpoints: 0 allowed, one state kept by default.
KEEP_CHECKPOINTS_HELP = (
    "resumable training states (model, optimizer, data position: about 3x the model file) kept in OUT/checkpoints/, "
    "the newest (default 1, the last, which resumes an interrupted run, and from which a finished run given more "
    "--epochs goes on); 0 keeps one while training and removes it once the run has finished, leaving what predict "
    "and export read (the model file, finetune.json, metrics.json, the tokenizer)")
SELECT_METRICS = {"classify": ("macro_f1", "accuracy"), "tokens": ("entity_f1", "token_accuracy"),
                  "multilabel": ("micro_f1", "macro_f1", "samples_f1")}
GOLD_KEYS = {"classify": "label", "tokens": "tags", "multilabel": "labels"}
PREDICTED_KEYS = {"classify": "predicted_label", "tokens": "predicted_tags", "multilabel": "predicted_labels"}
MODEL_FILES = {"classify": "classifier.keras", "tokens": "tagger.keras", "multilabel": "classifier.keras"}
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


def sigmoid(logits):
    """float64 ``1 / (1 + exp(-logits))``: a multi-label model's probabilities."""
    import numpy as np

    return 1 / (1 + np.exp(-np.asarray(logits, "float64")))


def model_inputs(model, token_ids):
    """What ``model`` takes for ``token_ids``: ``(token_ids, segment_ids)``, or the ids alone (ModernBERT)."""
    from bert4long.training import takes_segment_ids

    return (token_ids, token_ids * 0) if takes_segment_ids(model) else (token_ids,)


def predicted_ids(model, rows, shapes, batch_size, answer=None):
    """``model``'s argmax (or ``answer(outputs)``, one fixed-shape answer a row, e.g. `sigmoid`) for every row of
    ``rows`` (padded ids), read in batches by length (`sorted_batches`, each cut to its rows' padded ``shapes``) and
    put back in row order; a token past its batch's length (padding) gets 0."""
    import numpy as np

    from bert4long.data.length_batches import cut, sorted_batches

    out = None
    for index in sorted_batches(shapes, batch_size):
        outputs = np.asarray(model.predict_on_batch(model_inputs(model, cut(rows[index], shapes[index]))))
        ids = outputs.argmax(-1) if answer is None else answer(outputs)
        if out is None:
            out = np.zeros((len(rows), *(rows.shape[1:ids.ndim] if answer is None else ids.shape[1:])), ids.dtype)
        for i, row in zip(index, ids):
            out[(i, *(slice(0, n) for n in row.shape))] = row
    return out


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
    from bert4long.cli.checkpoint_tools import available_memory_bytes, other_training_runs, training_step_bytes

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

    from bert4long.distribute import get_strategy
    from bert4long.training import (
        build_classifier,
        build_token_labeller,
        compile_finetune,
        fit_resumable,
        make_optimizer,
    )
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
    earlier = _earlier_scores(args.out)
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
    record = MetricsRecord(model, (valid, test), labels, args, pad, buckets, steps_per_epoch, earlier,
                           threshold_mode(args))
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
                "label_type": "integer" if integer_labels and all(_is_integer(label) for label in labels) else "string",
                "class_weight": dict(zip(labels, weight_of or [1.0] * len(labels))),
                "valid": os.path.abspath(args.valid) if args.valid else None,
                "valid_fingerprint": fingerprint(*valid[:2]) if valid else None, "select_metric": select_metric(args)}
    if not args.global_cls:  # (recorded only when asked: runs from before the option resume unchanged)
        settings["global_cls"] = False
    if args.task == "multilabel":
        settings.update(multilabel_loss=args.multilabel_loss or "bce", threshold_option=threshold_mode(args))
    return settings


def _is_integer(label):
    """Whether the label name ``label`` is an integer's text (``'3'``, ``'-1'``), as a JSON integer label reads."""
    return label.lstrip("-").isdigit() and str(int(label)) == label


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


class MetricsRecord:
    """The scores of ``valid`` (a reader's tuple, or None) after every epoch and, with --eval-every, every that many
    steps between, printed, written to ``metrics.json`` in the run folder (``epochs``, and ``evaluations`` between
    them, each with its training ``step``; those of an earlier, resumed run kept) with the evaluation whose weights are
    kept and the metric that chose it, and plotted in ``logs/validation`` (TensorBoard, when installed; step: the
    training step). The best evaluation's weights are written as the run's model file when scored, the one copy of
    the kept weights. ``test`` (a reader's tuple) is scored once at the end, with the kept weights, never for choosing
    them. Sets are read in batches by length, padded to ``buckets``."""

    def __init__(self, model, sets, labels, args, pad_id, buckets, steps_per_epoch, earlier, threshold=None):
        from bert4long.data.length_batches import padded_shapes

        self.model, (self.valid, self.test), self.labels, self.args = model, sets, labels, args
        self.metric = select_metric(args)
        self.threshold, self.steps_per_epoch = threshold, steps_per_epoch
        self.shapes = {name: padded_shapes(data[0], pad_id, buckets) for name, data in zip(("valid", "test"), sets)
                       if data is not None}
        self.path = os.path.join(args.out, METRICS_FILE)
        self.model_path = os.path.join(args.out, MODEL_FILES[args.task])
        self.record = {"task": args.task, "select_metric": self.metric, "selected_epoch": None,
                       "selected_step": None, **earlier, "final": None, "test": None}
        self.log = None

    def scores(self):
        """The scores of ``valid`` with the model's weights now."""
        return self.scores_of(self.valid, self.shapes["valid"], self.threshold)

    def scores_of(self, data, shapes, threshold):
        from bert4long.training.metrics import scores_from_ids, tuned_multilabel_scores

        x, y, weights, _, owner, _ = data
        if threshold is not None:   # multi-label: the threshold is chosen (or given) with the scores
            probabilities = predicted_ids(self.model, x, shapes, self.args.batch_size, sigmoid)
            return tuned_multilabel_scores(y, probabilities, self.labels, self.metric, threshold)
        return scores_from_ids(predicted_ids(self.model, x, shapes, self.args.batch_size), y, self.labels, weights,
                               owner)

    def decision(self):
        """What a multi-label run decides with (``{}`` for other tasks): ``threshold``, the kept evaluation's (or the
        fixed one), and ``threshold_option``, how it was chosen; recorded in finetune.json and metrics.json."""
        if self.threshold is None:
            return {}
        chosen = self.record["final"]["threshold"] if self.record["final"] else self.threshold
        return {"threshold": chosen, "threshold_option": self.threshold}

    def step_of(self, entry):
        return entry.get("step", entry["epoch"] * self.steps_per_epoch)   # (a run from before steps were recorded)

    def _enter(self, key, entry, line):
        """Record ``entry`` under ``key`` (those at or after its step dropped: a resumed run scores them again),
        print ``line`` with whether it is the best so far (its weights then written as the model file)."""
        step = self.step_of(entry)
        for name in ("epochs", "evaluations"):
            self.record[name] = [e for e in self.record[name] if self.step_of(e) < step]
        self.record[key].append(entry)
        best = self.best()
        if best is not None and best is entry:
            save_final_model(self.model, self.model_path)
            line += f" (best {self.metric} so far)"
        elif best is not None and entry.get("valid", {}).get(self.metric) == \
                best["valid"][self.metric]:
            line += f" (equal to {_entry_name(best)}'s {self.metric}: no improvement)"
        return best, line

    def epoch_done(self, epoch, train_logs):
        entry = {"epoch": epoch, "step": epoch * self.steps_per_epoch, "train": train_logs}
        line = (f"epoch {epoch}: train loss {train_logs.get('loss', float('nan')):.4f}, accuracy "
                f"{train_logs.get('accuracy', float('nan')):.1%} ({train_logs['seconds']:.0f} s)")
        if self.valid is not None:
            entry["valid"] = scores = self.scores()
            line += "; valid " + _headline(scores)
            self.plot(entry["step"], scores)
        best, line = self._enter("epochs", entry, line)
        if best is not None and best is not entry and self.args.early_stopping \
                and epoch - best["epoch"] >= self.args.early_stopping:
            line += f"; no better {self.metric} for {epoch - best['epoch']:g} epochs: early stop"
            self.model.stop_training = True
        print(("" if self.args.quiet else "\n") + line, flush=True)   # (after a progress bar's line)
        self._write()

    def step_done(self, step, train_logs):
        """--eval-every: the scores of ``valid`` at ``step`` (no epoch's end), considered for the kept weights."""
        entry = {"step": step, "epoch": round(step / self.steps_per_epoch, 4), "train": train_logs,
                 "valid": self.scores()}
        self.plot(step, entry["valid"])
        _, line = self._enter("evaluations", entry, f"{_entry_name(entry)}: valid {_headline(entry['valid'])}")
        print(("" if self.args.quiet else "\n") + line, flush=True)
        self._write()

    def best(self):
        """The evaluation (an epoch's, or one between) with the highest --select-metric, the first of equals by step
        (a tie is no improvement), or None."""
        scored = sorted((e for e in self.record["epochs"] + self.record["evaluations"] if "valid" in e),
                        key=self.step_of)
        return max(scored, key=lambda e: e["valid"][self.metric]) if scored else None

    def plot(self, step, scores):
        """``scores``' numbers (`score_scalars`) at training step ``step`` in ``logs/validation``, when TensorBoard is
        there."""
        from bert4long.training.loop import ScalarLog, tensorboard_installed
        from bert4long.training.metrics import score_scalars

        if self.log is None and tensorboard_installed():
            self.log = ScalarLog(os.path.join(self.args.out, "logs", "validation"))
        if self.log is not None:
            self.log.write(step, score_scalars(scores))

    def finish(self, summary):
        """Summary rows; writes the model file with the kept weights (the last ones, or with ``valid`` the best
        evaluation's: `keep_best`), records them, then scores ``test`` with them."""
        from bert4long.training.metrics import format_scores

        epochs = self.record["epochs"]
        last = epochs[-1]["train"] if epochs else summary["logs"]
        rows = [("train accuracy (last epoch)", f"{last.get('accuracy', float('nan')):.1%}")]
        epoch = summary["steps"] / self.steps_per_epoch
        self.record["selected_epoch"] = int(epoch) if epoch % 1 == 0 else round(epoch, 4)   # (the last weights)
        self.record["selected_step"] = summary["steps"]
        if self.valid is not None:
            self.record["final"] = scores = self.keep_best(summary["steps"])
            print("\nvalidation (kept weights)\n" + format_scores(scores), flush=True)
            rows.append(("validation", _headline(scores)))
        else:
            save_final_model(self.model, self.model_path)
        if self.log is not None:
            self.log.close()
        self.record.update(self.decision())
        if self.test is not None:
            chosen = self.decision().get("threshold")
            self.record["test"] = scores = self.scores_of(self.test, self.shapes["test"], chosen)
            print(f"\ntest ({self.args.test}, kept weights; not used to choose them)\n" + format_scores(scores),
                  flush=True)
            rows.append(("test", _headline(scores)))
        self._write()
        return [*rows, ("metrics", self.path)]

    def keep_best(self, step):
        """The scores of the weights kept, which the model file holds: the best evaluation's (its weights loaded)
        unless the last weights (those of ``step``, maybe not evaluated yet) beat it on --select-metric (an equal
        score does not: the first of equals is kept). Weights already scored are not scored again."""
        best, metric = self.best(), self.metric
        scored = [e["valid"] for e in self.record["epochs"] + self.record["evaluations"]
                  if self.step_of(e) == step and "valid" in e]
        last = scored[0] if scored else self.scores()
        if best is None or self.step_of(best) == step or not os.path.isfile(self.model_path) \
                or best["valid"][metric] < last[metric]:
            save_final_model(self.model, self.model_path)
            return last
        weights_only(self.model).load_weights(self.model_path)
        print(f"kept {_entry_name(best)}'s weights: {metric} {best['valid'][metric]:.3f} (the last weights: "
              f"{last[metric]:.3f})", flush=True)
        self.record["selected_epoch"], self.record["selected_step"] = best["epoch"], self.step_of(best)
        return best["valid"]

    def _write(self):
        write_text_atomically(self.path, json.dumps(self.record, indent=2))


def _entry_name(entry):
    """``epoch 2``, or ``step 5 (epoch 1.6667)`` for an evaluation between epochs."""
    return f"epoch {entry['epoch']}" if entry["epoch"] % 1 == 0 else f"step {entry['step']} (epoch {entry['epoch']:g})"


def _earlier_scores(out):
    """The ``epochs`` and ``evaluations`` ``out``'s metrics.json records (a run resumed; empty without one), refused
    naming the file when it is not what `MetricsRecord` writes."""
    path = os.path.join(out, METRICS_FILE)
    if not os.path.isfile(path):
        return {"epochs": [], "evaluations": []}
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        earlier = {"epochs": record.get("epochs", []), "evaluations": record.get("evaluations", [])}
        if all(isinstance(e, dict) and _is_count(e.get("epoch")) for e in earlier["epochs"]) and all(
                isinstance(e, dict) and _is_count(e.get("step")) for e in earlier["evaluations"]):
            return earlier
    except (ValueError, AttributeError, TypeError):   # not JSON, not an object, epochs not a list
        pass
    raise ValueError(f"{path} is not the metrics.json `bert4long finetune` writes: restore it, or delete it (the "
                     "scores of the earlier epochs are lost)")


def _headline(scores):
    if "samples_f1" in scores:
        return (f"micro-F1 {scores['micro_f1']:.3f}, macro-F1 {scores['macro_f1']:.3f}, samples-F1 "
                f"{scores['samples_f1']:.3f} (threshold {scores['threshold']})")
    if "macro_f1" in scores:
        return f"macro-F1 {scores['macro_f1']:.3f}, accuracy {scores['accuracy']:.1%}"
    return f"entity F1 {scores['entity_f1']:.3f}, token accuracy {scores['token_accuracy']:.1%}"


def add_predict_arguments(parser):
    parser.description = (
        "Run a fine-tuned model (--run: the --out folder of `bert4long finetune`) or an encoder (--checkpoint: "
        "one embedding per document, the mean of its token states over every window) over a folder of text "
        "files or a .jsonl ('text' per line; 'tokens' per line for a token labeller) and write one JSON line "
        "per document to --output, in input order: the input's JSON object (and 'source') with the prediction under "
        "'predicted_label' or 'predicted_tags'. A document with no text is answered too (the model reads [CLS] "
        "[SEP] alone); --errors skip, which would leave documents out, is refused. Documents are read in batches of "
        "similar length. On labelled input "
        "(a 'label', or 'tags', on every line) it also prints the scores: accuracy, macro-F1, per-class "
        "precision/recall/F1, confusion matrix, majority baseline; entity F1 and token accuracy for tags.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="folder written by `bert4long finetune` (model, finetune.json, tokenizer)")
    source.add_argument("--checkpoint", help="encoder checkpoint (prefix or Hugging Face folder): embeddings")
    parser.add_argument("--config", help="bert_config.json for --checkpoint (default: beside it)")
    parser.add_argument("--vocab", help="vocab.txt for --checkpoint (default: beside it)")
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--cased", dest="lower_case", action="store_false", default=None)
    casing.add_argument("--uncased", dest="lower_case", action="store_true")
    parser.add_argument("--input", required=True, help="folder of text files or a .jsonl file")
    parser.add_argument("--output", required=True, help="the .jsonl to write (an existing file only with --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output (or --metrics) file")
    parser.add_argument("--seq-len", type=window_length,
                        help="tokens read per window (default: a --run's fine-tuned length; a --checkpoint's trained "
                             "length, or 512; at least 3); shorter than a --run's reads each document cut there")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="documents per batch (default 8)")
    add_reading_arguments(parser)
    parser.add_argument("--metrics", help="labelled input only: also write the scores (printed as a table) to this "
                                          ".json file (an existing file only with --overwrite)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _check_input_utf8(args, task):
    """Refuse an --input file that is not UTF-8 naming it and the fix: a .jsonl always (--errors reads text files
    only), a text file under --errors strict."""
    from bert4long.data.corpus import is_jsonl, list_files

    for path in list_files(args.input):
        if task == "tokens" or is_jsonl(path):
            check_utf8(str(path), "input")
        elif args.errors == "strict":
            check_utf8(str(path), "input", "save it as UTF-8, or pass --errors replace (its bad bytes read as U+FFFD)")


def _read_inputs(args, task, settings):
    """``(items, gold, sources, records)``: texts, or word lists for a token labeller, one for every document (a
    document with no text too: `predict` answers every one); ``gold`` the labels (tags) when every document has one,
    else None; each document's JSON object (``{}`` for a text file); refuses input with no documents, labels the
    run does not know, and --metrics without labels."""
    from bert4long.data.corpus import read_documents
    from bert4long.data.tagging import read_tagged

    if not os.path.exists(args.input):
        raise FileNotFoundError(f"--input {args.input!r}: no such file or folder; pass a folder of text files or a "
                                ".jsonl file")
    if args.errors == "skip":
        raise ValueError("--errors skip would leave documents out of --output, which answers every input document: "
                         "pass --errors replace (bad bytes read as U+FFFD), or fix the files")
    _check_input_utf8(args, task)
    if task == "tokens":
        words, tags, sources, records = read_tagged(args.input, require_tags=False, with_records=True)
        gold = tags if all(record.get("tags") is not None for record in records) else None
        items = words
    else:
        items, labels, sources, _, records = read_documents(args.input, errors=args.errors, with_records=True,
                                                            keep_empty=True)
        if not items:
            raise ValueError(f"--input {args.input!r} holds no documents: add text files (one document each) or "
                             'pass a .jsonl with {"text": "..."} lines')
        gold = [str(label) for label in labels] if task == "classify" and None not in labels else None
        if task == "multilabel":
            gold = _gold_label_sets(args, records, sources, settings["labels"])
    if args.metrics and gold is None:
        raise ValueError(f"--metrics {args.metrics!r}: --input {args.input!r} is not labelled on every line (a "
                         f"{GOLD_KEYS.get(task, 'label')!r} in each), so there are no scores to write: add the labels "
                         "or leave --metrics out")
    unknown = sorted(set(gold) - set(settings["labels"])) if gold is not None and task == "classify" else []
    if unknown:
        raise ValueError(f"--input {args.input!r} holds label(s) {unknown[:10]} the run was not trained on "
                         f"({settings['labels']}): fix the labels, or drop the 'label' field to predict only")
    return items, gold, sources, records


def _gold_label_sets(args, records, sources, labels):
    """The 0/1 gold label sets of a multi-label --input when every line gives ``labels`` (else None), checked naming
    file:line (`bert4long.data.multilabel`)."""
    from bert4long.data.multilabel import label_sets, multi_hot

    if not all("labels" in record for record in records):
        return None
    folder = args.input if os.path.isdir(args.input) else os.path.dirname(os.path.abspath(args.input))
    where = [os.path.join(folder, source) for source in sources]
    return multi_hot(label_sets(records, where), labels, where,
                     "the run was trained on these alone; fix the labels, or drop the 'labels' fields to predict only")


def _check_output_folders(args):
    """Refuse an --output or --metrics file whose folder does not exist, before any work."""
    for option in ("output", "metrics"):
        path = getattr(args, option)
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder is not None and not os.path.isdir(folder):
            raise FileNotFoundError(f"--{option} {path!r}: no folder {folder!r} to write it in; create the folder, "
                                    "or name a file in an existing one")


def _is_count(value, least=1):
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


# What `bert4long finetune` writes to SETTINGS_FILE and `predict` / `export` read, each with its check.
RUN_SETTINGS = {"task": lambda v: isinstance(v, str) and v in MODEL_FILES, "seq_len": lambda v: _is_count(v, 3),
                "pooling": lambda v: v in ("cls", "chunks"), "chunks": _is_count,
                "lower_case": lambda v: v is None or isinstance(v, bool),
                "label_type": lambda v: v in (None, "string", "integer")}


def read_run_settings(run, alternative):
    """The settings `bert4long finetune` wrote to ``run`` (its --out), or an error naming what to pass instead; a
    file finetune cannot have written (edited, damaged, or a head of fewer than two labels) is refused naming it."""
    settings_path = os.path.join(run, SETTINGS_FILE)
    if not os.path.isfile(settings_path):
        raise FileNotFoundError(f"--run {run!r} holds no {SETTINGS_FILE}: pass the --out folder of "
                                f"`bert4long finetune`, {alternative}")
    fix = "fine-tune again, or restore the file `bert4long finetune` wrote"
    try:
        with open(settings_path, encoding="utf-8") as f:
            settings = json.load(f)
    except ValueError as error:   # (not UTF-8 included)
        raise ValueError(f"{settings_path} is not the JSON `bert4long finetune` writes ({error}): {fix}") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{settings_path} holds {type(settings).__name__}, not the object `bert4long finetune` "
                         f"writes: {fix}")
    for key, valid in RUN_SETTINGS.items():
        if not valid(settings.get(key)):
            raise ValueError(f"{settings_path}: {key!r} is {settings.get(key)!r}, not what `bert4long finetune` "
                             f"writes: {fix}")
    labels = settings.get("labels")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels) \
            or len(set(labels)) != len(labels):
        raise ValueError(f"{settings_path}: 'labels' is {labels!r}, not a list of distinct names: {fix}")
    if settings.get("label_type") == "integer" and not all(_is_integer(label) for label in labels):
        raise ValueError(f"{settings_path}: 'label_type' is 'integer' but 'labels' is {labels!r}: {fix}")
    if len(labels) < 2:
        raise ValueError(f"{settings_path} lists {len(labels)} label(s) {labels}: a model with fewer than two "
                         "answers the same whatever it reads; fine-tune again with two labels or more")
    threshold = settings.get("threshold")
    numbers = threshold if isinstance(threshold, list) and len(threshold) == len(labels) else [threshold]
    if settings["task"] == "multilabel" and not all(isinstance(t, (int, float)) and not isinstance(t, bool)
                                                    and 0 < t < 1 for t in numbers):
        raise ValueError(f"{settings_path}: 'threshold' is {threshold!r}, not a number in (0, 1) or one per label: "
                         f"{fix}")
    return settings


def load_run_model(run, settings):
    """The model of the finetune ``run`` (`read_run_settings`), refused when it has not one output per label."""
    path = os.path.join(run, MODEL_FILES[settings["task"]])
    model = load_final_model(path)
    outputs = model.outputs[0].shape[-1]
    if outputs != len(settings["labels"]):
        raise ValueError(f"{os.path.join(run, SETTINGS_FILE)} lists {len(settings['labels'])} labels but {path} has "
                         f"{outputs} outputs: the two files come from different runs; fine-tune again, or restore "
                         f"{SETTINGS_FILE}")
    return model


def check_predict_arguments(args, given):
    """Refuse, before anything is read, an --output or --metrics with no folder to write it in, a --checkpoint
    that is not one, and a --seq-len a --run cannot read."""
    _check_output_folders(args)
    check_checkpoint(args)
    if args.run and args.seq_len:
        _check_run_seq_len(args, read_run_settings(args.run, "or --checkpoint for embeddings"))


def _check_run_seq_len(args, settings):
    """A --run reads a --seq-len up to the length it was fine-tuned at, except a model that pools --chunks windows."""
    trained = settings["seq_len"]
    if args.seq_len > trained:
        raise ValueError(f"--seq-len {args.seq_len} is longer than the {trained} tokens {args.run} was fine-tuned at: "
                         f"use --seq-len {trained} or less, or leave it out")
    if settings.get("pooling") == "chunks" and args.seq_len != trained:
        raise ValueError(f"{args.run} pools --chunks {settings['chunks']} windows of {trained} tokens inside the "
                         "model, which cannot read other windows: leave --seq-len out")


def _predict_settings(args, source):
    """``(task, settings, seq_len)`` of `predict`: a --run's (its finetune.json, and --seq-len or the length it was
    trained at: `_check_run_seq_len`), or ``('embed', None, seq_len)`` for --checkpoint (``source``): --seq-len, else
    its trained length or 512, refused beyond its positions."""
    if args.run:
        settings = read_run_settings(args.run, "or --checkpoint for embeddings")
        return settings["task"], settings, args.seq_len or settings["seq_len"]
    trained = source.trained_positions
    seq_len = args.seq_len or trained or 512
    if trained and seq_len > trained:
        raise ValueError(f"--seq-len {seq_len} is longer than the {trained} positions of --checkpoint: use "
                         f"--seq-len {trained} or less (a longer document is read in several windows)")
    return "embed", None, seq_len


def _predict_tokenizer(args, source, settings):
    """The `ChosenTokenizer` of `predict`: the checkpoint's (``source``), or a --run's (``settings``: its
    finetune.json): its vocab.txt, cased as recorded, or the tokenizer files finetune copied there."""
    from bert4long.tokenizers import load_tokenizer

    if settings is None:
        return choose_tokenizer(args, source)
    vocab = os.path.join(args.run, "vocab.txt")
    if os.path.isfile(vocab):
        return choose_tokenizer(args, vocab_path=vocab, recorded_case=settings["lower_case"])
    return ChosenTokenizer(load_tokenizer(args.run), None, args.run)


def run_predict(args, resolved):
    import keras

    import bert4long.layers
    import bert4long.training  # noqa: F401
    from bert4long.data.length_batches import SORT_WINDOW, buckets_for, sorted_batches
    from bert4long.training.loop import progress_verbosity

    task, settings, seq_len = _predict_settings(args, resolved.source)
    items, gold, sources, records = _read_inputs(args, task, settings)
    chosen = _predict_tokenizer(args, resolved.source, settings)
    tokenizer = chosen.tokenizer
    print(chosen.describe(), file=sys.stderr)
    if task == "embed":
        from bert4long.models import build_transformer_model

        model = build_transformer_model(resolved.source, sequence_length=None, hierarchical_position=None)
    else:
        model = load_run_model(args.run, settings)
    progress = None if args.quiet else keras.utils.Progbar(len(items), unit_name="document",
                                                           verbose=progress_verbosity())
    predicted = []
    documents = items if task == "tokens" else tokenizer.encode_documents(items)   # word lists, or content ids
    buckets = buckets_for(model, seq_len)

    def write(tmp):   # (`atomic_write`'s temporary is a new file, created exclusively: it cannot be an input)
        with open(tmp, "w", encoding="utf-8") as out:
            for begin in range(0, len(items), SORT_WINDOW):   # sorted by length inside, written in input order
                window = documents[begin:begin + SORT_WINDOW]
                results = [None] * len(window)
                for index in sorted_batches([len(document) for document in window], args.batch_size):
                    batch = [window[i] for i in index]
                    answers = _predict_batch(model, tokenizer, batch, task, seq_len, settings, buckets)
                    for i, result in zip(index, answers):
                        results[i] = result
                    if progress is not None:
                        progress.add(len(batch))
                predicted.extend(r[PREDICTED_KEYS[task]] for r in results if task in PREDICTED_KEYS)
                out.writelines(json.dumps({"source": source, **record, **result}, ensure_ascii=False) + "\n"
                               for source, record, result in zip(sources[begin:], records[begin:], results))

    atomic_write(args.output, write)
    empty = sum(len(document) == 0 for document in documents)
    print(f"wrote {len(items)} result(s) to {args.output}"
          + (f" ({empty} with no tokens: the model read [CLS] [SEP] alone)" if empty else ""), flush=True)
    if gold is not None and len(gold) and task in PREDICTED_KEYS:
        _print_scores(gold, predicted, settings["labels"], task, args.metrics)


def _print_scores(gold, predicted, labels, task, path):
    """The scores of a labelled input: a table on stdout, the JSON in ``path`` (--metrics) when given."""
    from bert4long.data.multilabel import multi_hot
    from bert4long.training.metrics import (
        classification_scores,
        format_scores,
        multilabel_scores,
        tagging_scores,
    )

    if task == "classify":   # (an integer label is scored by its name, as the run's labels are)
        scores = classification_scores(gold, [str(label) for label in predicted], labels)
    elif task == "multilabel":
        scores = multilabel_scores(gold, multi_hot([[str(label) for label in row] for row in predicted], labels),
                                   labels)
    else:
        scores = tagging_scores(gold, predicted)
    print(format_scores(scores), flush=True)
    if path:
        write_text_atomically(path, json.dumps(scores, indent=2))
        print(f"wrote the scores to {path}", flush=True)


def _predict_batch(model, tokenizer, batch, task, seq_len, settings, buckets):
    """The results of one batch of documents (content ids; word lists for a token labeller) read ``seq_len`` tokens at
    a time, its rows padded to the bucket length of the longest (`bert4long.data.length_batches`)."""
    import numpy as np

    from bert4long.data.chunking import chunk_documents
    from bert4long.data.length_batches import cut, padded_shapes
    from bert4long.data.rows import document_rows
    from bert4long.data.tagging import encode_tagged

    pad = tokenizer.pad_id or 0
    if task in ("classify", "multilabel"):
        x = document_rows(tokenizer, batch, seq_len, settings["chunks"] if settings["pooling"] == "chunks" else None)
        x = cut(x, padded_shapes(x, pad, buckets))
        logits = model.predict_on_batch(model_inputs(model, x)).astype("float64")
        labels = settings["labels"]
        answers = [int(label) for label in labels] if settings.get("label_type") == "integer" else labels
    if task == "multilabel":
        chosen = sigmoid(logits) >= np.asarray(settings["threshold"])
        return [{"predicted_labels": [answer for answer, on in zip(answers, row) if on],
                 "probabilities": dict(zip(labels, p.round(6).tolist()))} for row, p in zip(chosen, sigmoid(logits))]
    if task == "classify":
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        return [{"predicted_label": answers[int(p.argmax())], "probabilities": dict(zip(labels, p.round(6).tolist()))}
                for p in probs]
    if task == "tokens":
        tags = settings["labels"]
        x, _, weights, owner = encode_tagged(tokenizer, batch, [[tags[0]] * len(w) for w in batch], tags, seq_len)
        shapes = padded_shapes(x, pad, buckets)
        x, weights = cut(x, shapes), cut(weights, shapes)
        best = model.predict_on_batch(model_inputs(model, x)).argmax(-1)
        firsts = [best[owner == doc][weights[owner == doc] > 0] for doc in range(len(batch))]
        return [{"predicted_tags": [tags[int(t)] for t in first]} for first in firsts]
    windows, _, owner = chunk_documents(batch, seq_len, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                                        pad_id=pad)
    windows = cut(windows, padded_shapes(windows, pad, buckets))
    states = np.asarray(model.predict_on_batch(model_inputs(model, windows)), "float64")
    real = (windows != pad)[..., None]
    results = []
    for doc in range(len(batch)):
        mine = owner == doc
        total = (states[mine] * real[mine]).sum((0, 1))
        results.append({"embedding": (total / max(real[mine].sum(), 1)).round(6).tolist()})
    return results
