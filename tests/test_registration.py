"""Keras with bert4long registers every Keras class the package defines; ``import bert4long`` stays light.

A ``model.keras`` saved by any bert4long road (a Longformer classifier from
``bert4long finetune``, a ModernBERT encoder, a loss-scaled optimizer) must load
in a fresh process that ran only ``import bert4long``: Keras finds a class only
once the module that registers it has run. The modules are found by reading the
source for ``register_keras_serializable``, so a new one is covered without
editing this test.
"""
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bert4long"
# as a user's shell has it: no TF_CPP_MIN_LOG_LEVEL (tests elsewhere set it to silence TensorFlow)
QUIET_UNSET = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def registering_modules():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "register_keras_serializable" in path.read_text(encoding="utf-8"):
            parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


CHECK = "import sys; {imports}; print(' '.join(m for m in sys.argv[1:] if m not in sys.modules))"


@pytest.mark.parametrize("imports", ["import bert4long, keras", "import keras, bert4long",
                                     "import bert4long; bert4long.build_transformer_model",
                                     # TensorFlow imports Keras itself (the command line starts it this way)
                                     "import bert4long, tensorflow", "import tensorflow, bert4long",
                                     "import bert4long; from bert4long.tf_startup import import_tensorflow_quietly; "
                                     "import_tensorflow_quietly()"])
def test_keras_with_bert4long_runs_every_module_that_registers_a_class(imports):
    """``import bert4long`` is light, but once Keras is imported (before or after it, or by TensorFlow) or a public
    name is used, every registering module has run: a saved model loads with ``keras.models.load_model``."""
    modules = registering_modules()
    assert "bert4long.longformer" in modules and "bert4long.layers.embeddings" in modules
    run = subprocess.run([sys.executable, "-c", CHECK.format(imports=imports), *modules], capture_output=True,
                         text=True, timeout=300, cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [], f"not imported: {run.stdout.split()}: add them to bert4long/__init__.py"
    if imports.startswith("import bert4long"):   # bert4long first: TensorFlow starts quietly (else: as the user had it)
        assert "cuInit" not in run.stderr and "oneDNN" not in run.stderr, run.stderr


def test_the_tokenizers_and_the_command_line_parser_do_not_start_tensorflow():
    check = ("import sys, bert4long.tokenizers; from bert4long.cli import build_parser; build_parser(); "
             "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300,
                         cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["False", "False"]
    help_run = subprocess.run([sys.executable, "-m", "bert4long_command", "pretrain", "--help"], capture_output=True,
                              text=True, timeout=300, cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
    assert help_run.returncode == 0 and "--corpus" in help_run.stdout and help_run.stderr == ""


def test_the_command_starts_tensorflow_quietly_unless_verbose():
    from bert4long.pretrained import path

    runs = {flag: subprocess.run([sys.executable, "-m", "bert4long_command", "info", path(), *flag], capture_output=True,
                                 text=True, timeout=300, cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
            for flag in ((), ("--verbose",))}
    assert all(run.returncode == 0 for run in runs.values()), [run.stderr[-2000:] for run in runs.values()]
    assert "I0000" not in runs[()].stderr and "E0000" not in runs[()].stderr, runs[()].stderr
    assert "I0000" in runs[("--verbose",)].stderr   # --verbose asks for TensorFlow's start-up logs
