"""Same checkpoint, same call, bert4keras 0.11.5 vs bert4long: the numbers must agree.

bert4keras needs TensorFlow's legacy Keras, so it runs in a subprocess with
TF_KERAS=1 TF_USE_LEGACY_KERAS=1 (tf-keras from the test extra, bert4keras from tests/data-packages.txt: the
README's test command installs both).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from data_packages import needs

from bert4long.models import build_transformer_model

pytestmark = needs("bert4keras", "tf_keras")

PEER = r"""
import json, sys
import numpy as np
from bert4keras.models import build_transformer_model
args = json.loads(sys.argv[1])
inputs = np.load(args["inputs"])
results = {}
for name, (config, checkpoint, kwargs) in args["calls"].items():
    model = build_transformer_model(config, checkpoint, **kwargs)
    outputs = model.predict([inputs["tokens"], inputs["segments"]], verbose=0)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    for i, o in enumerate(outputs):
        results[f"{name}_{i}"] = o
from bert4keras.layers import PositionEmbedding
table = np.load(args["inputs"])["table"]
layer = PositionEmbedding(table.shape[0], table.shape[1], merge_mode="zero", hierarchical=0.4)
layer.build((None, None, table.shape[1]))
layer.set_weights([table])
results["hierarchical_rows"] = layer(np.zeros((1, table.shape[0] ** 2, table.shape[1]), "float32")).numpy()[0]
np.savez(args["out"], **results)
"""
CALLS = {
    "hier_mlm_nsp": ("bert", dict(hierarchical_position=True, with_mlm=True, with_nsp=True)),
    "hier03_encoder": ("bert", dict(hierarchical_position=0.3)),
    "lm": ("bert", dict(application="lm", with_mlm="linear", hierarchical_position=True)),
    "unilm": ("bert", dict(application="unilm", with_mlm="linear", hierarchical_position=0.2)),
    "albert": ("albert", dict(model="albert", with_mlm=True, hierarchical_position=True)),
    "albert_unshared": ("albert", dict(model="albert_unshared", with_pool=True, hierarchical_position=True)),
}
# Both run float32 on CPU; observed max differences ~1e-7 (accumulation order only).
ATOL = 1e-5


@pytest.mark.slow
def test_outputs_match_bert4keras(tiny_bert, tiny_albert, tmp_path):
    checkpoints = {"bert": tiny_bert[:2], "albert": tiny_albert[:2]}
    rng = np.random.default_rng(7)
    tokens = rng.integers(5, 64, size=(2, 50)).astype("int32")  # 50 > 16 trained positions
    tokens[:, 0] = 2
    tokens[1, -7:] = 0
    segments = np.zeros_like(tokens)
    segments[:, 30:] = 1
    segments[tokens == 0] = 0
    table = rng.standard_normal((16, 8)).astype("float32")
    np.savez(tmp_path / "inputs.npz", tokens=tokens, segments=segments, table=table)
    calls = {name: (*checkpoints[which], kwargs) for name, (which, kwargs) in CALLS.items()}
    args = dict(inputs=str(tmp_path / "inputs.npz"), out=str(tmp_path / "peer.npz"), calls=calls)
    env = dict(os.environ, TF_KERAS="1", TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", PEER, json.dumps(args)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    peer = np.load(tmp_path / "peer.npz")
    real = tokens != 0
    for name, (config_path, checkpoint_path, kwargs) in calls.items():
        model = build_transformer_model(config_path, checkpoint_path, **kwargs)
        ours = model.predict([tokens, segments], verbose=0)
        ours = ours if isinstance(ours, list) else [ours]
        for i, o in enumerate(ours):
            theirs = peer[f"{name}_{i}"]
            assert o.shape == theirs.shape, name
            if o.ndim == 3:  # per-token outputs: padded positions are unspecified in both
                o, theirs = o[real], theirs[real]
            np.testing.assert_allclose(o, theirs, atol=ATOL, err_msg=name)
            print(f"{name}[{i}]: max |bert4long - bert4keras| = {np.abs(o - theirs).max():.2e}")

    # The extended rows themselves: bit-identical from n on (same arithmetic, same order); below n bert4long
    # returns the trained rows, which bert4keras recomputes through the formula (<= 1 float32 rounding away).
    from bert4long.layers import HierarchicalPositionEmbedding

    layer = HierarchicalPositionEmbedding(16, 8, alpha=0.4, merge_mode="zero")
    layer.build((None, None, 8))
    layer.embeddings.assign(table)
    rows = np.asarray(layer(np.zeros((1, 256, 8), "float32")))[0]
    np.testing.assert_array_equal(rows[16:], peer["hierarchical_rows"][16:])
    np.testing.assert_array_equal(rows[:16], table)
    np.testing.assert_allclose(peer["hierarchical_rows"][:16], table, atol=1e-6)
