"""bert4long: pretrained BERT-family models that read long documents, on Keras 3.

``import bert4long`` is light: it does not start TensorFlow, so the tokenizers
(``bert4long.tokenizers``) and the command's ``--help`` stay fast. The Keras
classes bert4long defines (layers, attention kernels, models, optimizers) are
registered as soon as Keras is imported (before or after bert4long), or on the
first use of a name below, so a saved ``model.keras`` loads with
``keras.models.load_model(path)`` and no ``custom_objects``. When bert4long is
what starts TensorFlow, its start-up noise is hidden (`bert4long.tf_startup`).

>>> from bert4long import build_transformer_model, Tokenizer  # doctest: +SKIP
"""
import importlib
import importlib.abc
import importlib.util
import os
import sys

if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
    raise ImportError(
        f"bert4long runs Keras 3 on the TensorFlow backend, but KERAS_BACKEND={os.environ['KERAS_BACKEND']!r}: "
        "unset it or set KERAS_BACKEND=tensorflow before importing keras."
    )
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"

from bert4long.lazy_names import lazy_getattr  # noqa: E402 (after the backend check)

# The public names and the module of each, imported on first use.
_PUBLIC = {"MissingCheckpointVariableError": "bert4long.checkpoints", "build_transformer_model": "bert4long.models",
           "Tokenizer": "bert4long.tokenizers", "load_vocab": "bert4long.tokenizers"}
# Keras registers a class when its module runs: every module that defines one.
_REGISTERING = ("attention", "layers", "longformer", "masked_lm_model", "modernbert", "optimizers", "recurrence",
                "training.finetune")
__all__ = sorted(_PUBLIC)


def register_keras_classes():
    """Import every module that registers a Keras class (TensorFlow starts quietly if it has not yet)."""
    from bert4long.tf_startup import import_tensorflow_quietly

    import_tensorflow_quietly()
    for name in _REGISTERING:
        importlib.import_module(f"bert4long.{name}")


_public_name = lazy_getattr(__name__, _PUBLIC)


def __getattr__(name):
    if _PUBLIC.get(name, "bert4long.tokenizers") != "bert4long.tokenizers":   # a model: its classes registered first
        register_keras_classes()
    return _public_name(name)


class _QuietStartAndRegister(importlib.abc.MetaPathFinder):
    """Wraps the first ``import tensorflow`` and ``import keras`` (by anyone, after bert4long): TensorFlow starts
    quietly (`bert4long.tf_startup`), and once Keras has loaded, `register_keras_classes` runs.

    When a bert4long module (or TensorFlow, which imports Keras itself) is what imports Keras, the registration
    waits until that module (and any bert4long module importing it) has finished, so that it never re-enters a
    half-initialised module: the finder counts the bert4long modules, and TensorFlow, being executed.
    """

    def __init__(self):
        self.pending = {"tensorflow", "keras"} - set(sys.modules)
        self.depth = 0   # bert4long modules executing now
        self.register_when_done = False

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending and not name.startswith("bert4long."):
            return None
        spec = self._found_by_others(name)   # (`pending` shrinks when the module runs: TensorFlow asks for Keras's
        # spec several times, with importlib.util.find_spec, before it imports Keras)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module
        if name.startswith("bert4long."):
            def run_counted(module):
                self.depth += 1
                try:
                    run_module(module)
                finally:
                    self.depth -= 1
                if not self.depth and self.register_when_done:
                    self.register_when_done = False
                    register_keras_classes()

            spec.loader.exec_module = run_counted
            return spec
        started = name == "keras" and "tensorflow" in sys.modules

        def run_quietly(module):
            from bert4long.tf_startup import quiet_startup

            self.pending.discard(name)
            inside = name == "tensorflow"   # TensorFlow imports Keras itself: register once TensorFlow is whole
            self.depth += inside
            try:
                with quiet_startup(started):
                    run_module(module)
                    if name == "tensorflow":
                        module.config.list_physical_devices()   # the CUDA probe's lines, parked too
            finally:
                self.depth -= inside
            if name == "keras" and self.depth:
                self.register_when_done = True
            elif name == "keras" or (self.register_when_done and not self.depth):
                self.register_when_done = False
                register_keras_classes()

        spec.loader.exec_module = run_quietly
        return spec

    def _found_by_others(self, name):
        sys.meta_path.remove(self)
        try:
            return importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)


if "keras" in sys.modules:
    register_keras_classes()
elif not any(isinstance(finder, _QuietStartAndRegister) for finder in sys.meta_path):
    sys.meta_path.insert(0, _QuietStartAndRegister())
