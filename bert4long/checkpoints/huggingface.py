"""Hugging Face model folders (``config.json`` + ``model.safetensors``) without PyTorch.

Every folder is read by the one `bert4long.checkpoints.safetensors_io.SafetensorsReader` (`open_huggingface_folder`),
with the naming its family gives (`tensor_names`). The families declared with ``checkpoint="tf"`` (BERT,
RoBERTa, XLM-RoBERTa: `bert4long.families`) are read under the original Google checkpoint names
(`GoogleNames`), so the model classes' single `variable_mapping()` serves both formats: the rewrite rules
below are the whole format conversion, a table of name patterns, each with how the array changes, and
`GoogleNames.write` runs them backwards. The others (ModernBERT, Longformer, BigBird) are read under their own
tensor names.
"""
import json
import os
import re

import numpy as np

from bert4long.checkpoints.config import read_config, to_google_config
from bert4long.checkpoints.safetensors_io import OwnNames, SafetensorsReader
from bert4long.checkpoints.tf_format import trained_google_name
from bert4long.families import FAMILIES, family_of_model_type

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


def supported_model_types():
    """Every ``model_type`` a declared family reads.

    >>> "xlm-roberta" in supported_model_types()
    True
    """
    return tuple(model_type for family in FAMILIES for model_type in family.model_types)


def config_family(hf, source="config.json"):
    """The `Family` of a Hugging Face ``config.json`` dict (``ValueError`` naming the supported ones if none)."""
    family = family_of_model_type(hf.get("model_type"))
    if family is None:
        raise ValueError(
            f"Unsupported Hugging Face architecture {hf.get('model_type')!r} ({hf.get('architectures')}) in "
            f"{source!r}: supported model_type values are {supported_model_types()}. For other models convert them "
            "to a Google-layout checkpoint first."
        )
    return family


def read_huggingface_config(path):
    """Translate a Hugging Face ``config.json`` (folder or file) into bert4long config keys, by its family's
    key table; ``"model"`` names the family.

    Example:
    >>> from bert4long.checkpoints.huggingface import read_huggingface_config
    >>> read_huggingface_config("all-MiniLM-L6-v2/")["max_position"]  # doctest: +SKIP
    512
    """
    config_file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"Not a Hugging Face model folder: {config_file!r} does not exist (a folder needs "
                                "config.json and model.safetensors).")
    hf = read_config(config_file)
    family = config_family(hf, config_file)
    return {**family.from_huggingface(hf, config_file), "model": family.name}


def google_name(key, family):
    """``(Google name, transform)`` of safetensors ``key`` in a folder of ``family`` by `NAME_RULES`
    (``(None, None)``: no rule).

    >>> from bert4long.families import family
    >>> google_name("roberta.encoder.layer.3.attention.self.query.weight", family("xlm-roberta"))
    ('bert/encoder/layer_3/attention/self/query/kernel', 'transpose')
    """
    stripped = next((key.removeprefix(p) for p in family.task_prefixes if key.startswith(p)), key)
    for pattern, template, transform in NAME_RULES:
        match = re.fullmatch(pattern, stripped)
        if match:
            return template.format(*[g.replace(".", "/") for g in match.groups()]), transform
    return None, None


def huggingface_key(name, family):
    """The safetensors key a ``family`` folder stores Google name ``name`` under: `google_name` backwards
    (the task prefix on the encoder, the family's head names on ``cls/predictions``).

    >>> from bert4long.families import family
    >>> huggingface_key("cls/predictions/transform/LayerNorm/gamma", family("xlm-roberta"))
    'lm_head.layer_norm.weight'
    """
    key = re.sub(r"layer_(\d+)", r"layer.\1", name).replace("/", ".")
    for google, torch in ((".kernel", ".weight"), (".gamma", ".weight"), (".beta", ".bias"),
                          ("_embeddings", "_embeddings.weight"), ("output_weights", "weight"), ("output_bias", "bias")):
        if key.endswith(google):
            key = key.removesuffix(google) + torch
            break
    if key.startswith("bert."):
        return family.task_prefixes[0] + key.removeprefix("bert.")
    if family.head_prefixes[0] == "lm_head.":   # RoBERTa's names of the MLM head
        for google, roberta in (("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
                                ("cls.predictions.transform.", "lm_head."), ("cls.predictions.", "lm_head.")):
            key = key.replace(google, roberta)
    return key


class GoogleNames:
    """The naming of a BERT-layout family's folder (``family.checkpoint == "tf"``): keys read under Google
    checkpoint names by `NAME_RULES` and written back by `huggingface_key`; ``offset`` position rows (RoBERTa's
    unused ones) are left out when read and written as zeros.

    >>> from bert4long.families import family
    >>> names = GoogleNames(family("roberta"), offset=2)
    >>> names.read("roberta.embeddings.position_embeddings.weight")
    ('bert/embeddings/position_embeddings', 'position_offset')
    >>> key, value = names.write("bert/embeddings/position_embeddings", np.ones((3, 2)), task_model=False)
    >>> key, value.shape
    ('embeddings.position_embeddings.weight', (5, 2))
    """

    describes = "BERT"
    lists_keys = False   # a listing shows the Google names

    def __init__(self, family, offset=0):
        self.family, self.offset = family, offset

    def read(self, key):
        """``(Google name, transform)`` of ``key``; ``(None, None)`` for a buffer, `KeyError` for no rule."""
        name, transform = google_name(key, self.family)
        if name is None and not IGNORED_KEYS.match(key):
            raise KeyError(key)
        return name, transform

    def write(self, name, value, task_model):
        """``(key, array)`` storing Google name ``name`` (checked against the rules that read it back); the
        encoder carries the task prefix in a task model's (``*ForMaskedLM``) file."""
        key = huggingface_key(name, self.family)
        read_back, transform = google_name(key, self.family)
        if read_back != name:
            raise ValueError(f"{name!r} would be written as {key!r}, which reads back as {read_back!r}: no "
                             f"{self.family.name} tensor holds it.")
        if not task_model:
            key = key.removeprefix(self.family.task_prefixes[0])
        if transform == "transpose":
            value = value.T
        elif transform == "position_offset":
            value = np.concatenate([np.zeros((self.offset, value.shape[1]), value.dtype), value])
        return key, value

    def trained(self, name):
        return trained_google_name(name)


def tensor_names(family, pad_token_id=0):
    """The naming (`bert4long.checkpoints.safetensors_io.SafetensorsReader`'s data) of a ``family`` folder.

    >>> from bert4long.families import family
    >>> type(tensor_names(family("longformer"))).__name__, type(tensor_names(family("xlm-roberta"))).__name__
    ('OwnNames', 'GoogleNames')
    """
    if family.reads_own_names:
        return OwnNames(family.task_prefixes, family.head_prefixes, family.encoder_prefixes)
    return GoogleNames(family, family.offset(pad_token_id))


def open_huggingface_folder(folder, family=None, config=None):
    """The `bert4long.checkpoints.safetensors_io.SafetensorsReader` of a Hugging Face folder, named as its family's
    (``family``, else the one its ``config.json`` names) tables say (``config``: that ``config.json``, when it
    was read already).

    Example:
    >>> from bert4long.checkpoints.huggingface import open_huggingface_folder
    >>> reader = open_huggingface_folder("all-MiniLM-L6-v2/")  # doctest: +SKIP
    >>> reader.shape("bert/encoder/layer_0/attention/self/query/kernel")  # doctest: +SKIP
    (384, 384)
    """
    config_file = os.path.join(folder, "config.json")
    hf = config or {}
    if config is None and os.path.isfile(config_file):
        hf = read_config(config_file)
    elif config is None and family is None:
        raise FileNotFoundError(f"Not a Hugging Face model folder: {config_file!r} does not exist (a folder needs "
                                "config.json and model.safetensors).")
    if family is None or not family.reads_own_names:
        family = config_family(hf, folder)
    pad_token_id = family.from_huggingface(hf).get("pad_token_id", 0) if family.position_offset else 0
    return SafetensorsReader(folder, tensor_names(family, pad_token_id or 0))


def convert_huggingface_folder(folder, out_dir, overwrite=False):
    """Write a Hugging Face BERT/RoBERTa folder as ``bert_config.json`` + ``vocab.txt`` + ``bert_model.ckpt``.

    Returns ``(config_path, checkpoint_prefix)``; the checkpoint uses the original Google names.
    ``out_dir`` must be new or empty (or an earlier output, with ``overwrite=True``),
    and not ``folder``; it appears only when complete (`bert4long.output_folders.OutputFolder`).

    Example:
    >>> from bert4long.checkpoints.huggingface import convert_huggingface_folder
    >>> convert_huggingface_folder("all-MiniLM-L6-v2/", "minilm-google/")  # doctest: +SKIP
    """
    import shutil

    from bert4long.checkpoints.tf_format import write_checkpoint
    from bert4long.output_folders import OutputFolder

    config = read_huggingface_config(folder)
    reader = open_huggingface_folder(folder)
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
