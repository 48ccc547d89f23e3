"""The registration contract: ``import bert4long`` is light and changes nothing outside the package;
`bert4long.register_keras_classes` registers every Keras class the package defines.

- ``import bert4long`` imports neither TensorFlow nor Keras, adds no import hook and no warning filter.
- In a fresh process, ``bert4long.register_keras_classes()`` (or the first use of
  ``bert4long.build_transformer_model``) runs every module that registers a class, so a ``model.keras`` any
  bert4long road wrote loads with ``keras.models.load_model(path)`` and no ``custom_objects``. The modules are
  found by reading the source for ``register_keras_serializable``, so a new one is covered without editing this test.
- A model built in a process loads there with ``keras.models.load_model`` alone (its classes' modules ran).
- The command line (not the library) starts TensorFlow quietly, unless ``--verbose``.
"""
import os
import pathlib
import subprocess
import sys

import pytest
from paths import ROOT

PACKAGE = pathlib.Path(ROOT) / "bert4long"
# as a user's shell has it: no TF_CPP_MIN_LOG_LEVEL (tests elsewhere set it to silence TensorFlow)
QUIET_UNSET = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def registering_modules():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "register_keras_serializable" in path.read_text(encoding="utf-8"):
            parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def run_python(code, *argv):
    run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_import_bert4long_starts_nothing_and_changes_nothing_outside_it():
    check = ("import sys, warnings; filters, finders = list(warnings.filters), list(sys.meta_path); import bert4long; "
             "print('tensorflow' in sys.modules, 'keras' in sys.modules, warnings.filters == filters, "
             "sys.meta_path == finders)")
    assert run_python(check).stdout.split() == ["False", "False", "True", "True"]


@pytest.mark.slow
@pytest.mark.parametrize("registers", ["bert4long.register_keras_classes()", "bert4long.build_transformer_model"])
def test_registering_runs_every_module_that_registers_a_class(registers):
    modules = registering_modules()
    assert "bert4long.models.longformer" in modules and "bert4long.layers.embeddings" in modules
    check = f"import sys, bert4long; {registers}; print(' '.join(m for m in sys.argv[1:] if m not in sys.modules))"
    missing = run_python(check, *modules).stdout.split()
    assert missing == [], f"not imported: {missing}: add them to bert4long/__init__.py's _REGISTERING"


@pytest.mark.slow
def test_a_saved_model_loads_in_a_fresh_process_after_registering(tiny_bert, tmp_path):
    """Hierarchical positions, the MLM head and a Longformer-style kernel: classes from several modules."""
    from bert4long.models import build_transformer_model

    config, checkpoint, _ = tiny_bert
    model = build_transformer_model(config, checkpoint, hierarchical_position=True, with_mlm=True,
                                    attention="sliding_window", attention_config={"window": 4})
    model.save(tmp_path / "model.keras")
    load = ("import sys, bert4long, keras; bert4long.register_keras_classes(); "
            "print(keras.models.load_model(sys.argv[1]).count_params())")
    assert run_python(load, str(tmp_path / "model.keras")).stdout.split() == [str(model.count_params())]


def test_the_tokenizers_and_the_command_line_parser_do_not_start_tensorflow():
    check = ("import sys, bert4long.tokenizers; from bert4long.cli import build_parser; build_parser(); "
             "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    assert run_python(check).stdout.split() == ["False", "False"]
    help_run = subprocess.run([sys.executable, "-m", "bert4long.cli", "pretrain", "--help"], capture_output=True,
                              text=True, cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
    assert help_run.returncode == 0 and "--corpus" in help_run.stdout and help_run.stderr == ""


@pytest.mark.slow
def test_the_command_starts_tensorflow_quietly_unless_verbose():
    from bert4long.pretrained import path

    runs = {flag: subprocess.run([sys.executable, "-m", "bert4long.cli", "info", path(), *flag], capture_output=True,
                                 text=True, cwd=PACKAGE.parent, check=False, env=QUIET_UNSET)
            for flag in ((), ("--verbose",))}
    assert all(run.returncode == 0 for run in runs.values()), [run.stderr[-2000:] for run in runs.values()]
    assert "I0000" not in runs[()].stderr and "E0000" not in runs[()].stderr, runs[()].stderr
    assert "I0000" in runs[("--verbose",)].stderr   # --verbose asks for TensorFlow's start-up logs
