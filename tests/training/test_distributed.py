"""tf.distribute: two logical CPU devices (MirroredStrategy, through ``model.fit``) and two worker
processes on loopback (MultiWorkerMirroredStrategy, through `fit_distributed`, because Keras 3's
``fit`` cannot start under that strategy: keras-team/keras#20585) give the same MLM losses as one
device with the same global batch.

Every sequence has the same length and no padding, so every replica predicts the same number of
masked tokens and the per-replica weighted means average to the global weighted mean exactly.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from paths import child_env
from subprocesses import loopback_workers

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    mode, config, checkpoint, out = sys.argv[1:5]
    if mode == "mirrored":   # two logical CPU devices: must happen before TensorFlow initialises
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    if mode == "multiworker":   # must be created at program start; TF_CONFIG names this worker
        worker_strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras, numpy as np
    from bert4long.data.masking import MLMMasker
    from bert4long.training.distribute import get_strategy
    from bert4long.training import build_mlm_model, compile_mlm, mlm_batches
    from bert4long.training.loop import fit_distributed, needs_custom_loop

    def train(strategy, custom_loop):
        keras.utils.set_random_seed(0)
        masker = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=2)
        seqs = (np.arange(8 * 10).reshape(8, 10) % 50 + 5).astype("int32")
        with strategy.scope():
            model, _, _ = build_mlm_model(config, checkpoint)
            # Plain SGD: Adam's first steps are ~sign(gradient), which turns float32 all-reduce rounding on
            # near-zero gradients into +-lr weight changes; and no clipping, which Keras applies per replica.
            compile_mlm(model, keras.optimizers.SGD(0.05), jit_compile=False)
        kernel = model.get_layer("Transformer-0-FeedForward").intermediate_dense.kernel
        before = kernel.numpy().copy()
        data = mlm_batches(seqs, masker, 4, seed=1)
        if custom_loop:
            losses = fit_distributed(model, data, 3)["loss"]
        else:
            losses = model.fit(data, steps_per_epoch=1, epochs=3, verbose=0).history["loss"]
        return {"loss": losses, "replicas": strategy.num_replicas_in_sync, "custom_loop": needs_custom_loop(model),
                "moved": float(abs(kernel.numpy() - before).sum())}

    if mode == "mirrored":  # and the one-device reference of both tests: fit, and the custom loop
        result = {"single": train(tf.distribute.get_strategy(), False), "mirrored": train(get_strategy("mirrored"), False),
                  "single_custom_loop": train(tf.distribute.get_strategy(), True)}
    else:
        result = train(worker_strategy, True)
    json.dump(result, open(out, "w"))
""")


def launch(mode, tiny_bert, out, env_extra=None):
    config, checkpoint, _ = tiny_bert
    env = child_env(**(env_extra or {}))
    return subprocess.Popen([sys.executable, "-c", SCRIPT, mode, config, checkpoint, str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tiny_bert, tmp_path_factory):
    """The two workers side by side (they train together), then the mirrored process with the one-device references:
    never more processes at once than the two workers."""
    tmp = tmp_path_factory.mktemp("distributed")
    processes = {f"worker{index}": launch("multiworker", tiny_bert, tmp / f"worker{index}.json", {"TF_CONFIG": config})
                 for index, config in enumerate(loopback_workers(2))}
    outputs = {name: process.communicate()[0] for name, process in processes.items()}
    processes["mirrored"] = launch("mirrored", tiny_bert, tmp / "mirrored.json")
    outputs["mirrored"] = processes["mirrored"].communicate()[0]
    for name, process in processes.items():
        assert process.returncode == 0, outputs[name][-3000:]
    return {name: json.load(open(tmp / f"{name}.json")) for name in processes}


@pytest.mark.slow
def test_mirrored_matches_single_device(runs):
    single, mirrored = runs["mirrored"]["single"], runs["mirrored"]["mirrored"]
    assert single["replicas"] == 1 and mirrored["replicas"] == 2
    np.testing.assert_allclose(mirrored["loss"], single["loss"], rtol=1e-5)   # float32 all-reduce order only
    assert single["moved"] > 1e-3                                             # the weights did move
    assert abs(mirrored["moved"] - single["moved"]) < 1e-3 * single["moved"]


@pytest.mark.slow
def test_two_workers_match_single_device(runs):
    reference = runs["mirrored"]["single_custom_loop"]
    assert reference["replicas"] == 1 and not reference["custom_loop"]
    for index in range(2):
        worker = runs[f"worker{index}"]
        assert worker["replicas"] == 2 and worker["custom_loop"]
        np.testing.assert_allclose(worker["loss"], reference["loss"], rtol=1e-5)  # all-reduce order only
        assert abs(worker["moved"] - reference["moved"]) < 1e-3 * reference["moved"]  # same updates
    assert reference["moved"] > 1e-3
