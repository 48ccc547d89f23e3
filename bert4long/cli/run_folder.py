"""What a training command leaves in --out besides its checkpoints (finetune's `SETTINGS_FILE` and model file, read
back by `read_run_settings` and `load_run_model` for predict and export), and the summary it prints."""
import hashlib
import json
import os
import shutil

from bert4long.checkpoints.json_values import integer_problem
from bert4long.output_folders import atomic_write

# Options that change what a training step does: a resume must keep them (or be told --accept-changes).
TRAINING_SETTINGS = ("accumulate", "weight_decay", "clipnorm", "warmup_steps", "precision")


def run_settings(args, data_option, *data):
    """The settings a resumed run must share with its start (or be told `--accept-changes`): the learning
    rate and `TRAINING_SETTINGS`, the data file and a fingerprint of what was read from it, and the tokenizer
    (its vocab.txt, or the folder of its tokenizer files)."""
    from bert4long.cli.inputs import tokenizer_files
    from bert4long.training.resume import fingerprint

    source = getattr(args, data_option)
    files = tokenizer_files(args)
    digest = hashlib.sha256()
    for path in files:
        if len(files) > 1:
            digest.update(os.path.basename(path).encode("utf-8") + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
    vocab = files[0] if len(files) == 1 else os.path.dirname(files[0])
    return {"learning_rate": args.learning_rate, **{name: getattr(args, name) for name in TRAINING_SETTINGS},
            data_option: os.path.abspath(source) if source else "demo",
            "data_fingerprint": fingerprint(*data), "vocab": os.path.abspath(vocab),
            "vocab_fingerprint": digest.hexdigest()[:16]}


def start_writing(output):
    """Open ``output`` (the training command's --out, an `OutputFolder`) for its writes, once every input has been read
    and the model built: only now does ``--overwrite`` remove what bert4long wrote there before, and the temporaries
    a killed run recorded go."""
    if output is not None:   # (None on a worker that writes nothing)
        output.open_run()
        output.remove_stale_temporaries()


def copy_tokenizer(args, out):
    """Copy the command's tokenizer files (vocab.txt, or a folder's tokenizer.json & co.) into ``out``; returns
    their names."""
    from bert4long.cli.inputs import tokenizer_files

    files = tokenizer_files(args)
    names = ["vocab.txt"] if len(files) == 1 and files[0].endswith(".txt") else [os.path.basename(p) for p in files]
    for path, name in zip(files, names):
        atomic_write(os.path.join(out, name), lambda tmp, path=path: shutil.copyfile(path, tmp))
    return names


def print_summary(rows):
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows), flush=True)


def saved_line(step, directory):
    """The line printed for every checkpoint saved (also under --quiet)."""
    print(f"checkpoint saved: step {step} ({directory})", flush=True)


# finetune's record of a run (its settings, what it chose) and its model file, by task.
SETTINGS_FILE = "finetune.json"
MODEL_FILES = {"classify": "classifier.keras", "tokens": "tagger.keras", "multilabel": "classifier.keras"}


def reads_as_integer(label):
    """Whether the label name ``label`` is an integer's text (``'3'``, ``'-1'``), as a JSON integer label reads."""
    return label.lstrip("-").isdigit() and str(int(label)) == label


# What `bert4long finetune` writes to SETTINGS_FILE and `predict` / `export` read, each with its check.
RUN_SETTINGS = {"task": lambda v: isinstance(v, str) and v in MODEL_FILES,
                "seq_len": lambda v: integer_problem(v, 3) is None, "pooling": lambda v: v in ("cls", "chunks"),
                "chunks": lambda v: integer_problem(v, 1) is None,
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
    if settings.get("label_type") == "integer" and not all(reads_as_integer(label) for label in labels):
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


def load_final_model(path):
    """The model `save_final_model` (or an earlier bert4long) wrote at ``path``, as a `CheckedModel` (its inputs
    range-checked before a jit-compiled step)."""
    import keras

    from bert4long import register_keras_classes
    from bert4long.models.checked import CheckedModel

    register_keras_classes()   # the classes the saved model names
    model = keras.models.load_model(path)
    return CheckedModel(model.inputs, model.outputs, name=model.name)


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


