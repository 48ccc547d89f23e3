"""What a training run leaves behind and prints: final models without training state, only the resumable states
asked for, plain progress lines in a redirected log, and a short error when a final model is loaded without
``import bert4long``."""
import json
import os
import subprocess
import sys
import zipfile

import pytest
from paths import ROOT


@pytest.fixture(scope="module")
def finetuned(tiny_bert, tmp_path_factory):
    """A 4-step fine-tune saving every step, keeping one resumable state: its --out folder."""
    from bert4long.cli import main

    _, checkpoint, _ = tiny_bert
    root = tmp_path_factory.mktemp("outputs")
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w3", "label": "ab"[i % 2]}) + "\n"
                             for i in range(4)))
    assert main(["finetune", "--checkpoint", checkpoint, "--train", str(train), "--seq-len", "8", "--batch-size",
                 "2", "--steps", "4", "--save-every", "1", "--keep-checkpoints", "1", "--no-xla", "--quiet",
                 "--out", str(root / "run")]) == 0
    return root / "run"


@pytest.mark.slow
def test_final_model_holds_the_weights_only_and_one_state_is_kept(finetuned):
    import h5py
    import keras

    with zipfile.ZipFile(finetuned / "classifier.keras") as archive:
        with archive.open("model.weights.h5") as stored, h5py.File(stored) as weights:
            groups = list(weights)
        config = json.loads(archive.read("config.json"))
    assert "optimizer" not in groups and config["compile_config"] in (None, {})
    model = keras.models.load_model(str(finetuned / "classifier.keras"))
    assert getattr(model, "optimizer", None) is None   # nothing to resume from here: checkpoints/ holds that
    assert sorted(os.listdir(finetuned / "checkpoints")) == ["latest", "step-000000004"]


@pytest.mark.slow
def test_progress_is_plain_lines_when_stdout_is_not_a_terminal(compiled_mlm, finetuned, tmp_path, capsys,
                                                                 monkeypatch):
    """Keras's bar redraws with \\b, \\r and colour codes even into a file; `fit_resumable` and `predict` write
    plain lines there (pytest's captured stdout is not a terminal), and the bar on a terminal."""
    from bert4long.cli import main
    from bert4long.training import fit_resumable
    from bert4long.training.loop import progress_verbosity

    model, batches = compiled_mlm
    fit_resumable(model, batches, 4, str(tmp_path), {}, save_every=2, tensorboard=False)
    out = capsys.readouterr().out
    assert not any(code in out for code in ("\r", "\b", "\x1b[")), repr(out[:300])
    assert [line.split(" - ")[0] for line in out.splitlines() if " - loss:" in line] == ["2/2", "2/2"]
    assert main(["predict", "--run", str(finetuned), "--input", str(finetuned.parent / "train.jsonl"), "--output",
                 str(tmp_path / "out.jsonl")]) == 0
    out = capsys.readouterr().out
    assert not any(code in out for code in ("\r", "\b", "\x1b[")) and "4/4 - " in out, repr(out[:300])
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert progress_verbosity() == 1 and progress_verbosity(0) == 0


@pytest.fixture
def compiled_mlm(tiny_bert):
    import numpy as np

    from bert4long.data.masking import MLMMasker
    from bert4long.training import build_mlm_model, compile_mlm, make_optimizer, mlm_batches

    config, checkpoint, _ = tiny_bert
    model, _, _ = build_mlm_model(config, checkpoint)
    compile_mlm(model, make_optimizer(1e-3, 4), jit_compile=False)
    masker = MLMMasker(vocab_size=64, mask_id=4, special_ids=[0, 1, 2, 3, 4], max_predictions=2)
    sequences = np.random.default_rng(0).integers(5, 64, (8, 12)).astype("int32")
    return model, lambda start: mlm_batches(sequences, masker, 2, start_step=start)


LOAD = """
import sys
import keras
try:
    keras.models.load_model(sys.argv[1])
except Exception as error:
    print(f"{type(error).__name__}: {error}")
    sys.exit(1)
"""


@pytest.mark.slow
def test_loading_without_bert4long_fails_short_and_names_it(finetuned):
    """A clean interpreter that did not register bert4long's classes: Keras stops at the first bert4long class and
    prints its config. The final model is a plain functional model, so that class is a layer (about 1 kB), not the
    whole model's graph (27 kB for this 2-layer model before, 50 kB for a 12-layer one). After
    ``bert4long.register_keras_classes()`` it loads."""
    path = str(finetuned / "classifier.keras")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    bare = subprocess.run([sys.executable, "-c", LOAD, path], capture_output=True, text=True, env=env)
    assert bare.returncode == 1, bare.stdout + bare.stderr[-2000:]
    assert "Could not locate class" in bare.stdout and "'module': 'bert4long." in bare.stdout
    assert len(bare.stdout) < 2500, len(bare.stdout)
    env["PYTHONPATH"] = ROOT
    registered = "import bert4long\nbert4long.register_keras_classes()\n" + LOAD
    imported = subprocess.run([sys.executable, "-c", registered, path], capture_output=True,
                              text=True, env=env)
    assert imported.returncode == 0, imported.stdout + imported.stderr[-2000:]
