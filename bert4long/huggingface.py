"""Hugging Face model folders (``config.json`` + ``model.safetensors``) without PyTorch.

The safetensors file is read with the `safetensors` package's numpy API and
presented under the original Google checkpoint names, so the model classes'
single `variable_mapping()` serves both formats. The rewrite rules below are the
whole format conversion: a table of name patterns, each with how the array changes.
Supported architectures: BERT (``model_type: bert``) and RoBERTa (``roberta``); the families in
`FAMILY_MODELS` (ModernBERT) have their own module, which reads their weights and config keys.
"""
import json
import os
import re

import numpy as np

from bert4long.config_keys import from_huggingface_config, position_offset, read_config, to_google_config
from bert4long.model_registry import FAMILY_MODELS, family_model_class

SUPPORTED_MODEL_TYPES = ("bert", "roberta")
WEIGHT_FILENAME = "model.safetensors"

_DENSE = r"(?:weight|gamma)"
# (pattern on the key without its 'bert.'/'roberta.' prefix, Google name template, transform)
NAME_RULES = [
    (r"embeddings\.word_embeddings\.weight", "bert/embeddings/word_embeddings", None),
    (r"embeddings\.position_embeddings\.weight", "bert/embeddings/position_embeddings", "position_offset"),
    (r"embeddings\.token_type_embeddings\.weight", "bert/embeddings/token_type_embeddings", None),
    (r"embeddings\.LayerNorm\.(?:weight|gamma)", "bert/embeddings/LayerNorm/gamma", None),
    (r"embeddings\.LayerNorm\.(?:bias|beta)", "bert/embeddings/LayerNorm/beta", None),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.weight",
     "bert/encoder/layer_{0}/attention/self/{1}/kernel", "transpose"),
    (r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.bias",
     "bert/encoder/layer_{0}/attention/self/{1}/bias", None),
    (r"encoder\.layer\.(\d+)\.(attention\.output|intermediate|output)\.dense\.weight",
     "bert/encoder/layer_{0}/{1}/dense/kernel", "transpose"),
    (r"encoder\.layer\.(\d+)\.(attention\.output|intermediate|output)\.dense\.bias",
     "bert/encoder/layer_{0}/{1}/dense/bias", None),
    (r"encoder\.layer\.(\d+)\.(attention\.output|output)\.LayerNorm\.(?:weight|gamma)",
     "bert/encoder/layer_{0}/{1}/LayerNorm/gamma", None),
    (r"encoder\.layer\.(\d+)\.(attention\.output|output)\.LayerNorm\.(?:bias|beta)",
     "bert/encoder/layer_{0}/{1}/LayerNorm/beta", None),
    (r"pooler\.dense\.weight", "bert/pooler/dense/kernel", "transpose"),
    (r"pooler\.dense\.bias", "bert/pooler/dense/bias", None),
    (r"(?:cls\.predictions\.transform\.dense|lm_head\.dense)\.weight", "cls/predictions/transform/dense/kernel",
     "transpose"),
    (r"(?:cls\.predictions\.transform\.dense|lm_head\.dense)\.bias", "cls/predictions/transform/dense/bias", None),
    (r"(?:cls\.predictions\.transform\.LayerNorm|lm_head\.layer_norm)\.(?:weight|gamma)",
     "cls/predictions/transform/LayerNorm/gamma", None),
    (r"(?:cls\.predictions\.transform\.LayerNorm|lm_head\.layer_norm)\.(?:bias|beta)",
     "cls/predictions/transform/LayerNorm/beta", None),
    (r"(?:cls\.predictions|lm_head)\.bias", "cls/predictions/output_bias", None),
    (r"cls\.seq_relationship\.weight", "cls/seq_relationship/output_weights", None),
    (r"cls\.seq_relationship\.bias", "cls/seq_relationship/output_bias", None),
]
# Keys that carry no weights of their own (buffers, decoder tied to the word embeddings).
IGNORED_KEYS = re.compile(
    r"(.*position_ids|cls\.predictions\.decoder\.(weight|bias)|lm_head\.decoder\.(weight|bias))$")


def is_huggingface_folder(path):
    return path is not None and os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))


def family_model_type(config_path):
    """The ``model_type`` of the Hugging Face ``config.json`` at ``config_path`` when its own module builds it
    (one of `FAMILY_MODELS`), else None."""
    model_type = read_config(config_path).get("model_type")
    return model_type if model_type in FAMILY_MODELS else None


def is_family_folder(path):
    """True for a Hugging Face folder whose ``model_type`` is one of `FAMILY_MODELS` (read by its own module)."""
    return is_huggingface_folder(path) and family_model_type(os.path.join(path, "config.json")) is not None


def read_huggingface_config(path):
    """Translate a Hugging Face ``config.json`` (folder or file) into bert4long config keys.

    Example:
    >>> from bert4long.huggingface import read_huggingface_config
    >>> read_huggingface_config("all-MiniLM-L6-v2/")["max_position"]  # doctest: +SKIP
    512
    """
    config_file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"Not a Hugging Face model folder: {config_file!r} does not exist (a folder needs "
                                "config.json and model.safetensors).")
    hf = read_config(config_file)
    model_type = hf.get("model_type")
    if model_type in FAMILY_MODELS:  # its class translates its own keys
        return {**family_model_class(model_type).from_huggingface_config(hf), "model": model_type}
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"Unsupported Hugging Face architecture {model_type!r} ({hf.get('architectures')}) in {config_file!r}: "
            f"supported model_type values are {SUPPORTED_MODEL_TYPES + tuple(FAMILY_MODELS)}. For other models "
            "convert them to a Google-layout checkpoint first."
        )
    config = from_huggingface_config(hf)
    config["model"] = model_type
    return config


class HuggingFaceReader:
    """A ``model.safetensors`` file read as if it were a Google checkpoint.

    Example:
    >>> from bert4long.huggingface import HuggingFaceReader
    >>> reader = HuggingFaceReader("all-MiniLM-L6-v2/")  # doctest: +SKIP
    >>> reader.shape("bert/encoder/layer_0/attention/self/query/kernel")  # doctest: +SKIP
    (384, 384)
    """

    def __init__(self, folder):
        from safetensors import SafetensorError, safe_open

        self.prefix = folder
        weights = os.path.join(folder, WEIGHT_FILENAME)
        if not os.path.isfile(weights):
            found = ", ".join(sorted(os.listdir(folder)))
            raise FileNotFoundError(
                f"No {WEIGHT_FILENAME} in Hugging Face folder {folder!r} (found: {found}). Save the model with "
                "safe_serialization=True (pytorch_model.bin needs PyTorch to read)."
            )
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            self.offset = position_offset(json.load(f))
        try:
            self._file = safe_open(weights, framework="numpy")
        except SafetensorError as error:
            raise ValueError(f"Weights file {weights!r} is damaged or truncated ({error}). Copy or download the "
                             "model again.") from None
        self._sources = {}
        for key in self._file.keys():
            stripped = re.sub(r"^(bert|roberta)\.", "", key)
            for pattern, template, transform in NAME_RULES:
                match = re.fullmatch(pattern, stripped)
                if match:
                    groups = [g.replace(".", "/") for g in match.groups()]
                    self._sources[template.format(*groups)] = (key, transform)
                    break
            else:
                if not IGNORED_KEYS.match(key):
                    raise ValueError(f"Unexpected tensor {key!r} in {weights!r}: no rule maps it to a BERT weight.")

    def __contains__(self, name):
        return name in self._sources

    def check(self):
        """Read every weight once (a truncated file already fails when opened)."""
        for name in self.names():
            self.get(name)

    def names(self):
        return sorted(self._sources)

    def source_name(self, name):
        """The safetensors key a Google name would be read from (for error messages)."""
        return self._sources[name][0] if name in self._sources else "(no matching safetensors key)"

    def get(self, name):
        key, transform = self._sources[name]
        value = self._file.get_tensor(key)
        if transform == "transpose":
            value = value.T
        elif transform == "position_offset":
            value = value[self.offset:]
        return np.ascontiguousarray(value)

    def shape(self, name):
        """The shape `get` returns, read from the file's header (no tensor is loaded)."""
        key, transform = self._sources[name]
        shape = tuple(self._file.get_slice(key).get_shape())
        if transform == "transpose":
            return shape[::-1]
        if transform == "position_offset":
            return (shape[0] - self.offset, *shape[1:])
        return shape


def convert_huggingface_folder(folder, out_dir, overwrite=False):
    """Write a Hugging Face BERT/RoBERTa folder as ``bert_config.json`` + ``vocab.txt`` + ``bert_model.ckpt``.

    Returns ``(config_path, checkpoint_prefix)``; the checkpoint uses the original Google names.
    ``out_dir`` must be new or empty (or an earlier output, with ``overwrite=True``),
    and not ``folder``; it appears only when complete (`bert4long.outputs.OutputFolder`).

    Example:
    >>> from bert4long.huggingface import convert_huggingface_folder
    >>> convert_huggingface_folder("all-MiniLM-L6-v2/", "minilm-google/")  # doctest: +SKIP
    """
    import shutil

    from bert4long.checkpoints import write_checkpoint
    from bert4long.outputs import OutputFolder

    config = read_huggingface_config(folder)
    reader = HuggingFaceReader(folder)
    output = OutputFolder(out_dir, "convert", inputs=[folder], overwrite=overwrite)
    google_config = to_google_config(config)
    with output as staging:
        with open(os.path.join(staging, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(google_config, f, indent=2)
        vocab = os.path.join(folder, "vocab.txt")
        if os.path.isfile(vocab):
            shutil.copyfile(vocab, os.path.join(staging, "vocab.txt"))
        write_checkpoint(os.path.join(staging, "bert_model.ckpt"), {name: reader.get(name) for name in reader.names()})
    return os.path.join(out_dir, "bert_config.json"), os.path.join(out_dir, "bert_model.ckpt")
