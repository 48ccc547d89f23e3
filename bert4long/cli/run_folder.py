"""What a training command leaves in --out besides its checkpoints, and the summary it prints."""
import hashlib
import os
import shutil

from bert4long.outputs import atomic_write

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


def weights_only(model):
    """A plain Keras functional model over ``model``'s layers (nothing copied): saving it writes the weights alone,
    not the optimizer's state (AdamW's two slots: about 3x the size) or the compile settings."""
    import keras

    return keras.Model(model.inputs, model.outputs, name=model.name)


def save_final_model(model, path):
    """Write ``model`` to ``path`` (``.keras``) for use: `weights_only`, the weights' size, not about 3x it; the
    run's resumable state stays in checkpoints/.

    Keras 3 loads a custom class only once its module ran (it imports keras modules alone), so
    ``keras.models.load_model(path)`` needs ``bert4long.register_keras_classes()`` first. Without it Keras stops at
    the first class it does not know and prints that object's config: here one of bert4long's layers (module
    ``bert4long.layers...``, about 1 kB), where a bert4long model class at the top would print the whole
    graph (tens of kB). The loaded model is a ``keras.Model``: `load_final_model` range-checks it again.
    """
    atomic_write(path, weights_only(model).save, suffix=".keras")


def load_final_model(path):
    """The model `save_final_model` (or an earlier bert4long) wrote at ``path``, as a `CheckedModel` (its inputs
    range-checked before a jit-compiled step)."""
    import keras

    from bert4long import register_keras_classes
    from bert4long.models.checked import CheckedModel

    register_keras_classes()   # the classes the saved model names
    model = keras.models.load_model(path)
    return CheckedModel(model.inputs, model.outputs, name=model.name)


def print_summary(rows):
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows), flush=True)


def saved_line(step, directory):
    """The line printed for every checkpoint saved (also under --quiet)."""
    print(f"checkpoint saved: step {step} ({directory})", flush=True)
