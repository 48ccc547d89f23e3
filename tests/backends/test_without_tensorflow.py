"""Without TensorFlow: Hugging Face folders and Google checkpoints build, predict and fit on JAX; what is TensorFlow's
refuses in one line.

A child process (this file run as a script) runs with ``KERAS_BACKEND=jax`` and TensorFlow blocked
(``sys.modules["tensorflow"] = None`` before anything is imported: ``import tensorflow`` fails there as on a machine
without it). It builds two tiny Hugging Face folders that transformers wrote (RoBERTa, read under Google names with
hierarchical positions at 2.5 times its trained length, and ModernBERT, read under its own names), predicts, takes one
``fit`` step, loads a Google checkpoint that TensorFlow wrote (hierarchical positions at 2.5 times its trained length),
and records what the TensorFlow-only features answer: the modules of export,
raw-text serving, ``tf.data`` and ``tf.distribute``, bert4keras's ``DataGenerator`` datasets and ``bert4long
pretrain``. The parent, on TensorFlow, checks
the predictions against its own and each refusal's message.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from paths import ROOT, child_env

BLOCKED = "import sys; sys.modules['tensorflow'] = None; "   # what a machine without TensorFlow answers to its import
TOL = 1e-5
LENGTHS = {"roberta": 160, "modernbert": 100}   # RoBERTa: 64 trained positions, hierarchical; ModernBERT: 128
TENSORFLOW_MODULES = ("bert4long.export", "bert4long.text_serving", "bert4long.data.pipeline", "bert4long.training.distribute")


def install_commands():
    """The no-TensorFlow install command as README.md and docs/guide.md write it (.ci/no_tensorflow runs README's)."""
    found = {}
    for document in ("README.md", os.path.join("docs", "guide.md")):
        with open(os.path.join(ROOT, document), encoding="utf-8") as f:
            found[document] = re.findall(r"pip install [^`\n]* && pip install --no-deps -e \.", f.read())
    return found


def test_the_documented_install_is_the_requirements_without_tensorflow():
    """The command names every requirement but TensorFlow's (tensorflow, and tensorboard for its training logs),
    and JAX; both documents write the same one."""
    commands = install_commands()
    assert all(len(found) == 1 for found in commands.values()), commands
    (readme,), (guide,) = commands.values()
    assert readme == guide, (readme, guide)
    with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
        required = {re.split(r"[<>=\[ ]", line.strip())[0] for line in f if line.strip() and not line.startswith("#")}
    named = {re.split(r"[<>=\[]", word.strip('"'))[0] for word in readme.split(" && ")[0].split()[2:]}
    assert named == required - {"tensorflow", "tensorboard"} | {"jax"}, named


def inputs(model, first_id, vocab_size, length):
    """Ids (the second row padded after 3/4) and, where the model takes them, zero segment ids."""
    ids = np.random.default_rng(0).integers(first_id, vocab_size, (2, length)).astype("int32")
    ids[1, length * 3 // 4:] = 0
    return [ids, np.zeros_like(ids)][:len(model.inputs)]


def folder_outputs(folder, first_id, vocab_size, length):
    """``build_transformer_model`` of ``folder`` (hierarchical positions where the family extends them): predict,
    then one ``fit`` step; its loss must be a number."""
    import keras

    from bert4long.families import family_of_model_type
    from bert4long.models import build_transformer_model

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        extends = family_of_model_type(json.load(f)["model_type"]).position_extension
    keras.utils.set_random_seed(0)
    model = build_transformer_model(checkpoint_path=folder, hierarchical_position=extends or None)
    x = inputs(model, first_id, vocab_size, length)
    predicted = model.predict(x, verbose=0)
    model.compile(optimizer="sgd", loss="mse")
    loss = model.fit(x, np.zeros_like(predicted), verbose=0).history["loss"][0]
    assert np.isfinite(loss), loss
    return predicted


def google_outputs(config, prefix, length):
    """``build_transformer_model(config, prefix)`` (a Google checkpoint, hierarchical positions) on ids of ``length``."""
    from bert4long.models import build_transformer_model

    with open(config, encoding="utf-8") as f:
        vocab_size = json.load(f)["vocab_size"]
    model = build_transformer_model(config, prefix, hierarchical_position=True)
    return model.predict(inputs(model, 1, vocab_size, length), verbose=0)


def refusal(action):
    """The one-line message ``action()`` refuses with (an ``AssertionError`` when it does not)."""
    from bert4long.tensorflow_only import TensorFlowRequired

    try:
        action()
    except TensorFlowRequired as error:
        return str(error)
    raise AssertionError(f"{action} ran without TensorFlow")


def child(folders_json, google_json, out):
    """With TensorFlow blocked: each folder's outputs and every refusal's message, written to ``out`` (.npz)."""
    import contextlib
    import importlib
    import io

    assert sys.modules["tensorflow"] is None
    results = {name: folder_outputs(*spec) for name, spec in json.loads(folders_json).items()}
    results["google"] = google_outputs(*json.loads(google_json))
    from bert4long.cli import main
    from bert4long.snippets import DataGenerator

    messages = {"bert4long.snippets.DataGenerator": refusal(lambda: DataGenerator([[1]]).to_dataset("int32", [None]))}
    messages.update({module: refusal(lambda module=module: importlib.import_module(module))
                     for module in TENSORFLOW_MODULES})
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):
        assert main(["pretrain"]) == 1
    messages["pretrain"] = printed.getvalue()
    assert "tensorflow" not in {name.split(".")[0] for name, module in sys.modules.items() if module is not None}
    np.savez(out, **results, messages=json.dumps(messages))


def save_with_tensorflow(prefix, copy):
    """The checkpoint at ``prefix`` written again at ``copy`` by TensorFlow's own saver (``SaveV2``)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())
    copy.parent.mkdir(parents=True)
    tf.raw_ops.SaveV2(prefix=str(copy), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[reader.get_tensor(name) for name in names])
    return str(copy)


def run_child(*argv):
    env = child_env(KERAS_BACKEND="jax")
    code = BLOCKED + "import runpy; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, __file__, *argv], env=env, cwd=ROOT, capture_output=True,
                          text=True)


@pytest.mark.slow
def test_huggingface_folders_run_on_jax_without_tensorflow(tiny_family, tiny_bert, tmp_path):
    pytest.importorskip("jax", reason="jax is not installed: the JAX backend cannot run")
    tiny = {name: tiny_family(name) for name in LENGTHS}
    folders = {name: (t.checkpoint, t.first_id, t.vocab_size, LENGTHS[name]) for name, t in tiny.items()}
    google = [tiny_bert[0], save_with_tensorflow(tiny_bert[1], tmp_path / "tf_made" / "bert_model.ckpt"), 160]
    out = tmp_path / "jax.npz"
    run = run_child(json.dumps(folders), json.dumps(google), str(out))
    assert run.returncode == 0, f"KERAS_BACKEND=jax without TensorFlow failed:\n{run.stderr[-4000:]}"
    found = np.load(out)
    for name, spec in folders.items():
        np.testing.assert_allclose(found[name], folder_outputs(*spec), atol=TOL, err_msg=f"{name} on jax")
    np.testing.assert_allclose(found["google"], google_outputs(*google), atol=TOL, err_msg="a Google checkpoint on jax")

    messages = json.loads(str(found["messages"]))
    for name, message in messages.items():
        assert "\n" not in message.strip(), f"{name}: more than one line: {message}"
    for name in (*TENSORFLOW_MODULES, "bert4long.snippets.DataGenerator"):
        assert messages[name].startswith(name + " ") and "it needs KERAS_BACKEND=tensorflow (this process runs " \
            "jax); on jax, " in messages[name], messages[name]
    assert messages["pretrain"].startswith("bert4long pretrain: error: pretrain trains through tf.data and resumable "
                                           "tf.train checkpoints: it needs KERAS_BACKEND=tensorflow"), messages["pretrain"]


@pytest.mark.slow
def test_the_package_builds_without_tensorflow(tiny_family):
    """``from bert4long import build_transformer_model`` (which registers every Keras class first) on JAX."""
    pytest.importorskip("jax", reason="jax is not installed: the JAX backend cannot run")
    folder = tiny_family("roberta").checkpoint
    code = (BLOCKED + "from bert4long import build_transformer_model; "
            f"print(build_transformer_model(checkpoint_path={folder!r}).name)")
    env = dict(os.environ, KERAS_BACKEND="jax")
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]


if __name__ == "__main__":
    child(*sys.argv[1:])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_a_backend_that_is_not_installed_is_named_in_one_line(tiny_bert, tmp_path, backend):
    """``KERAS_BACKEND=jax`` (or torch) where its package does not import (``sys.modules[name] = None``, as on a
    machine without it): every command says so in one line, the TensorFlow-only ones too (was: Keras's import
    traceback, ``No module named 'jax'``), and writes nothing."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": "a b c", "label": "x"}\n{"text": "b c", "label": "y"}\n', encoding="utf-8")
    prefix = tiny_bert[1]
    commands = {"info": ["info", prefix],
                "predict": ["predict", "--checkpoint", prefix, "--input", str(train), "--output", "scored.jsonl"],
                "finetune": ["finetune", "--checkpoint", prefix, "--train", str(train), "--out", "run"],
                "pretrain": ["pretrain"], "export": ["export", "--checkpoint", prefix, "--out", "served"]}
    code = (f"import sys; sys.modules[{backend!r}] = None; from bert4long.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    env = child_env(KERAS_BACKEND=backend)
    for name, argv in commands.items():
        run = subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=tmp_path, capture_output=True,
                             text=True)
        assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, (name, run.stderr[-3000:])
        assert run.stderr.startswith(f"bert4long {name}: error: KERAS_BACKEND={backend} needs the {backend!r} "
                                     "package, which is not installed") and run.stderr.rstrip().endswith(
            f"install it (pip install {backend}) or set KERAS_BACKEND=tensorflow"), (name, run.stderr)
    assert sorted(os.listdir(tmp_path)) == ["train.jsonl"]
