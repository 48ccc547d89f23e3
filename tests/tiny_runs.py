"""Tiny training runs the tests start from the command line, and what they leave: the inputs they read
(`write_lines`; the ``data`` fixture of tests/conftest.py), the arguments of a 2-step
``pretrain`` / ``finetune`` on the tiny checkpoint, the weights of a ``.keras`` file and of a run's newest training
state, compared array by array (a kill-and-resume test's "same as uninterrupted")."""
import io
import json
import zipfile

import numpy as np
import tensorflow as tf

QUICK = ["--seq-len", "16", "--batch-size", "2", "--no-xla", "--quiet"]


def write_lines(path, records):
    """``records`` as a .jsonl file at ``path``."""
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def pretrain_args(tiny_bert, data, out, *extra, steps=2):
    config, checkpoint, _ = tiny_bert
    return ["pretrain", "--config", config, "--checkpoint", checkpoint, "--corpus", str(data["corpus"]), *QUICK,
            "--save-every", "1", "--steps", str(steps), "--out", str(out), "--eval-sequences", "1", *extra]


def finetune_args(tiny_bert, train, out, *extra, steps=2):
    config, checkpoint, _ = tiny_bert
    return ["finetune", "--config", config, "--checkpoint", checkpoint, "--train", str(train), *QUICK,
            "--save-every", "1", "--steps", str(steps), "--out", str(out), *extra]


def keras_file_weights(path):
    """Every weight in the ``.keras`` file at ``path``, by its name in the file."""
    import h5py

    found = {}
    with zipfile.ZipFile(path) as archive, h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r") as f:
        f.visititems(lambda name, item: found.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return found


def training_state(run):
    """Every variable of the run's newest training state (weights, optimizer moments, step)."""
    folder = run / "checkpoints"
    reader = tf.train.load_checkpoint(str(folder / (folder / "latest").read_text().strip() / "ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_same_arrays(a, b):
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
