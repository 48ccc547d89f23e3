"""``import bert4long`` alone registers every Keras class the package defines.

A ``model.keras`` saved by any bert4long road (a Longformer classifier from
``bert4long finetune``, a ModernBERT encoder, a loss-scaled optimizer) must load
in a fresh process that ran only ``import bert4long``: Keras finds a class only
once the module that registers it has run. The modules are found by reading the
source for ``register_keras_serializable``, so a new one is covered without
editing this test.
"""
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bert4long"


def registering_modules():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "register_keras_serializable" in path.read_text(encoding="utf-8"):
            parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_import_bert4long_runs_every_module_that_registers_a_class():
    modules = registering_modules()
    assert "bert4long.longformer" in modules and "bert4long.layers.embeddings" in modules
    check = "import sys, bert4long; print(' '.join(m for m in sys.argv[1:] if m not in sys.modules))"
    run = subprocess.run([sys.executable, "-c", check, *modules], capture_output=True, text=True, timeout=300,
                         cwd=PACKAGE.parent, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [], f"`import bert4long` does not import {run.stdout.split()}: add them to bert4long/__init__.py"
