"""A Hugging Face ``model.safetensors`` read and written by every family, through the safetensors numpy API.

`SafetensorsReader` is the reader protocol's (`bert4long.checkpoints.tf_format.WeightReader`) second implementation: the
file's tensors under the names a family's `variable_mapping()` uses. What differs between families is data it
is given, a *naming*: `OwnNames` (the tensor names less the family's task prefix: Longformer, BigBird,
ModernBERT) or `bert4long.checkpoints.huggingface.GoogleNames` (Google checkpoint names: BERT, RoBERTa, XLM-RoBERTa). A
naming reads a key as ``(name, transform)`` and writes ``(name, array)`` back as ``(key, array)``;
`write_safetensors_folder` writes ``model.safetensors`` + ``config.json``.
"""
import json
import os

import numpy as np

from bert4long.checkpoints.tf_format import WeightReader, check_finite
from bert4long.output_folders import atomic_write, write_text_atomically

WEIGHT_FILENAME = "model.safetensors"


class OwnNames:
    """A family's own tensor names: a key less its task prefix (``longformer.``, ``model.``); the heads
    (``head_prefixes``) carry none. ``encoder_prefixes``: the names a model must use or lose.

    >>> names = OwnNames(("longformer.",), ("lm_head.",))
    >>> names.read("longformer.encoder.layer.0.output.dense.weight")
    ('encoder.layer.0.output.dense.weight', None)
    >>> names.write("embeddings.word_embeddings.weight", 0, task_model=True)
    ('longformer.embeddings.word_embeddings.weight', 0)
    """

    offset = 0
    lists_keys = True   # a listing shows its keys as stored (`SafetensorsReader.listed_name`)

    def __init__(self, task_prefixes, head_prefixes, encoder_prefixes=("embeddings.", "encoder.")):
        self.task_prefixes, self.head_prefixes, self.encoder_prefixes = task_prefixes, head_prefixes, encoder_prefixes

    def read(self, key):
        """``(name, transform)`` of safetensors ``key`` (``(None, None)``: not a weight)."""
        return next((key.removeprefix(p) for p in self.task_prefixes if key.startswith(p)), key), None

    def write(self, name, value, task_model):
        """``(key, array)`` that stores ``name``: under the task prefix in a task model's (``*ForMaskedLM``) file."""
        if task_model and self.task_prefixes and not name.startswith(self.head_prefixes):
            return self.task_prefixes[0] + name, value
        return name, value

    def trained(self, name):
        return name.startswith(self.encoder_prefixes) and not name.endswith("position_ids")


def missing_weights_message(folder):
    found = ", ".join(sorted(os.listdir(folder))) if os.path.isdir(folder) else "not a folder"
    return (f"No {WEIGHT_FILENAME} in {folder!r} (found: {found}). bert4long reads safetensors without PyTorch; "
            "convert a pytorch_model.bin once with transformers: python -c \"from transformers import "
            f"AutoModelForMaskedLM as M; M.from_pretrained('{folder}').save_pretrained('{folder}')\" (AutoModel "
            "for a folder without an MLM head), or save with safe_serialization=True.")


class SafetensorsReader(WeightReader):
    """The `WeightReader` of a folder's ``model.safetensors``, under the names ``naming`` gives its keys.

    Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> from safetensors.numpy import save_file
    >>> from bert4long.checkpoints.safetensors_io import OwnNames, SafetensorsReader
    >>> folder = tempfile.mkdtemp()
    >>> save_file({"model.final_norm.weight": np.ones(4, "float32")}, os.path.join(folder, "model.safetensors"))
    >>> with SafetensorsReader(folder, OwnNames(("model.",), ("head.",))) as reader:
    ...     reader.names(), reader.shape("final_norm.weight"), reader.source("final_norm.weight")
    (['final_norm.weight'], (4,), " (safetensors key 'model.final_norm.weight')")
    """

    kind = "weight"
    key_label = "safetensors key"
    rebuild_advice = "Build from the folder alone (its config.json)"

    def __init__(self, folder, naming):
        from safetensors import SafetensorError, safe_open

        self.prefix = folder
        self.path = os.path.join(folder, WEIGHT_FILENAME)
        self.naming = naming
        if not os.path.isfile(self.path):
            raise FileNotFoundError(missing_weights_message(folder))
        try:
            self._file = safe_open(self.path, framework="numpy")
        except SafetensorError as error:
            raise ValueError(f"Weights file {self.path!r} is damaged or truncated ({error}). Copy or download the "
                             "model again.") from None
        self._sources = {}
        for key in self._file.keys():  # noqa: SIM118 -- a safetensors handle, not a dict
            try:
                name, transform = naming.read(key)
            except KeyError:
                raise ValueError(f"Unexpected tensor {key!r} in {self.path!r}: no rule maps it to a "
                                 f"{naming.describes} weight.") from None
            if name is not None:
                self._sources[name] = (key, transform)

    @property
    def architectures(self):
        """What the folder's ``config.json`` says it holds (read only when asked: an error message's detail)."""
        config = os.path.join(self.prefix, "config.json")
        if not os.path.isfile(config):
            return ()
        with open(config, encoding="utf-8") as f:
            return tuple(json.load(f).get("architectures") or ())

    def __contains__(self, name):
        return name in self._sources

    def names(self):
        return sorted(self._sources)

    def source_name(self, name):
        """The safetensors key ``name`` is read from (a name it does not hold: itself)."""
        return self._sources[name][0] if name in self._sources else name

    def listed_name(self, name):
        """``name`` as the file stores it (own names: the key), or the name read (Google names)."""
        return self.source_name(name) if self.naming.lists_keys else name

    def trained(self, name):
        return self.naming.trained(name)

    def get(self, name):
        key, transform = self._sources[name]
        value = self._file.get_tensor(key)
        check_finite(value, f"Weights file {self.path!r}: tensor {key!r}")
        if transform == "transpose":
            value = value.T
        elif transform == "position_offset":
            value = value[self.naming.offset:]
        return np.ascontiguousarray(value)

    def shape(self, name):
        """The shape `get` returns, read from the file's header (no tensor is loaded)."""
        key, transform = self._sources[name]
        shape = tuple(self._file.get_slice(key).get_shape())
        if transform == "transpose":
            return shape[::-1]
        if transform == "position_offset":
            return (shape[0] - self.naming.offset, *shape[1:])
        return shape

    def close(self):
        self._file = None


def write_safetensors_folder(folder, tensors, config):
    """Write ``{key: array}`` as ``model.safetensors`` and ``config`` as ``config.json`` in ``folder``, each
    file atomically.

    Example:
    >>> import tempfile, numpy as np
    >>> from bert4long.checkpoints.safetensors_io import OwnNames, SafetensorsReader, write_safetensors_folder
    >>> folder = tempfile.mkdtemp()
    >>> write_safetensors_folder(folder, {"decoder.bias": np.zeros(3, "float32")}, {"model_type": "modernbert"})
    >>> SafetensorsReader(folder, OwnNames(("model.",), ("decoder.",))).shape("decoder.bias")
    (3,)
    """
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    tensors = {key: np.ascontiguousarray(value) for key, value in tensors.items()}
    atomic_write(os.path.join(folder, WEIGHT_FILENAME), lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    write_text_atomically(os.path.join(folder, "config.json"), json.dumps(config, indent=2))
