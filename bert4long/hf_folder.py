"""Hugging Face folders read and written under their own tensor names, without PyTorch.

The families declared with ``checkpoint="safetensors"`` (Longformer, BigBird) write their
`variable_mapping()` directly in the safetensors names, so that table is the whole format: a name is the key
without the task prefix (``longformer.``, ``bert.``: their `bert4long.family.Family`'s ``task_prefixes``) that
``*Model``, ``*ForMaskedLM`` and ``*ForSequenceClassification`` save it under or not, and the heads' names
(``lm_head.``, ``cls.``) carry none. `SafetensorsFolder` serves those names (through the `safetensors` numpy
API); `HuggingFaceFamily` is the builder mixin that loads through it and writes a folder back.
`write_huggingface_folder` writes a folder of the families read under Google names (BERT, RoBERTa,
XLM-RoBERTa).
"""
import json
import os
import warnings

import keras
import numpy as np

from bert4long.checkpoint_layout import STRUCTURE_KEYS, checkpoint_variables, to_checkpoint
from bert4long.huggingface import WEIGHT_FILENAME, google_name, huggingface_key, read_huggingface_config
from bert4long.model_registry import family
from bert4long.outputs import atomic_write, write_text_atomically
from bert4long.position_record import RECORD_KEY, position_record


class SafetensorsFolder:
    """``model.safetensors`` of a folder, by tensor name with the task prefix removed.

    Example:
    >>> from bert4long.hf_folder import SafetensorsFolder
    >>> weights = SafetensorsFolder("longformer-base-4096/", "longformer.")  # doctest: +SKIP
    >>> weights.get("embeddings.word_embeddings.weight").shape  # doctest: +SKIP
    (50265, 768)
    """

    def __init__(self, folder, task_prefix):
        from safetensors import safe_open

        self.prefix = folder
        self.task_prefix = task_prefix
        weights = os.path.join(folder, WEIGHT_FILENAME)
        if not os.path.isfile(weights):
            found = ", ".join(sorted(os.listdir(folder))) if os.path.isdir(folder) else "not a folder"
            raise FileNotFoundError(
                f"No {WEIGHT_FILENAME} in {folder!r} (found: {found}). bert4long reads safetensors without "
                "PyTorch; convert a pytorch_model.bin once with transformers: python -c \"from transformers import "
                f"AutoModelForMaskedLM as M; M.from_pretrained('{folder}').save_pretrained('{folder}')\" "
                "(AutoModel for a folder without an MLM head)."
            )
        self._file = safe_open(weights, framework="numpy")
        self._keys = {}
        for key in self._file.keys():  # noqa: SIM118 -- a safetensors handle, not a dict
            self._keys[key.removeprefix(task_prefix)] = key

    def __contains__(self, name):
        return name in self._keys

    def names(self):
        return sorted(self._keys)

    def source_name(self, name):
        """The safetensors key a name is read from (for error messages)."""
        return self._keys.get(name, self.task_prefix + name)

    def get(self, name):
        return self._file.get_tensor(self._keys[name])

    def shape(self, name):
        return tuple(self._file.get_slice(self._keys[name]).get_shape())


def dense_weights(name):
    """Mapping of a Keras ``Dense`` from a torch ``Linear`` ``name`` (its weight is the transposed kernel)."""
    return {"kernel": (name + ".weight", "transpose"), "bias": name + ".bias"}


def norm_weights(name):
    """Mapping of a Keras ``LayerNormalization`` from a torch ``LayerNorm`` ``name``."""
    return {"gamma": name + ".weight", "beta": name + ".bias"}


class HuggingFaceFamily:
    """Mixin of a `bert4long.models.Transformer` whose `variable_mapping()` uses safetensors names.

    Subclasses set ``family``, their `bert4long.family.Family`: its task prefix, head names (saved without
    the task prefix) and key table (``config.json`` <-> builder arguments, read both ways).
    """

    family = None

    @property
    def task_prefix(self):
        return self.family.task_prefixes[0]

    @property
    def head_prefixes(self):
        return self.family.head_prefixes

    @classmethod
    def from_huggingface_config(cls, hf):
        """`build_transformer_model` keyword arguments from a ``config.json`` dict (the family's key table)."""
        return cls.family.from_huggingface(hf)

    def encoder_mapping(self):
        """Embeddings and post-norm blocks in the BERT layout that Longformer and BigBird share.

        `attention_weights(index)` adds weights of a layer's attention beyond its query/key/value/output.
        """
        mapping = {
            "Embedding-Token": {"embeddings": ("embeddings.word_embeddings.weight", "keep_tokens")},
            "Embedding-Segment": {"embeddings": "embeddings.token_type_embeddings.weight"},
            "Embedding-Position": {"embeddings": "embeddings.position_embeddings.weight"},
            "Embedding-Norm": norm_weights("embeddings.LayerNorm"),
        }
        for index in range(self.num_hidden_layers):
            attention_name, feed_forward_name = self.layer_names(index)
            prefix = f"encoder.layer.{index}."
            attention = {}
            for attribute, name in (("q_dense", "attention.self.query"), ("k_dense", "attention.self.key"),
                                    ("v_dense", "attention.self.value"), ("o_dense", "attention.output.dense"),
                                    *self.attention_weights(index)):
                attention.update({f"{attribute}.{k}": v for k, v in dense_weights(prefix + name).items()})
            feed_forward = {f"intermediate_dense.{k}": v for k, v in dense_weights(prefix + "intermediate.dense").items()}
            feed_forward.update({f"output_dense.{k}": v for k, v in dense_weights(prefix + "output.dense").items()})
            mapping[attention_name] = attention
            mapping[attention_name + "-Norm"] = norm_weights(prefix + "attention.output.LayerNorm")
            mapping[feed_forward_name] = feed_forward
            mapping[feed_forward_name + "-Norm"] = norm_weights(prefix + "output.LayerNorm")
        return mapping

    def attention_weights(self, index):
        """``(attribute path, torch Linear name)`` of extra attention projections of layer ``index``."""
        return ()

    def open_checkpoint(self, checkpoint_path):
        return SafetensorsFolder(checkpoint_path, self.task_prefix)

    def check_checkpoint_matches(self, reader, partial_load=False):
        """Refuse encoder tensors this model would drop and structural settings that differ from the folder's
        ``config.json`` (with ``partial_load``, warn); task heads (``lm_head.``, ``classifier.``, ...) are optional."""
        used = {name for _, _, _, name, _ in self._mapped_weights()}
        unused = [name for name in reader.names() if name not in used
                  and name.startswith(("embeddings.", "encoder.")) and not name.endswith("position_ids")]
        problems = []
        if unused:
            problems.append(f"{len(unused)} trained tensor(s) would be dropped by model={self.model_name!r}: "
                            + ", ".join(unused[:4]) + (", ..." if len(unused) > 4 else ""))
        config_path = os.path.join(reader.prefix, "config.json")
        stored = (reader.stored_config[0] if getattr(reader, "stored_config", None) is not None   # `bert4long.source`
                  else read_huggingface_config(config_path) if os.path.isfile(config_path) else {})
        for key, attribute in STRUCTURE_KEYS.items():
            theirs, mine = stored.get(key), getattr(self, attribute, None)
            if key == "vocab_size" and self.keep_tokens is not None:
                continue
            if theirs is not None and mine is not None and theirs != mine:
                problems.append(f"{key}={mine} here but {theirs} in {config_path}")
        if not problems:
            return
        message = f"The configuration does not match checkpoint {reader.prefix!r}: " + "; ".join(problems) + ". "
        if partial_load:
            warnings.warn(message + "Loading what matches (partial_load=True).", stacklevel=3)
            return
        raise ValueError(message + "Build from the folder alone (its config.json), or pass partial_load=True to "
                         "load only what matches.")

    def huggingface_config(self):
        """The ``config.json`` of this model (the family's key table read backwards)."""
        config = self.family.to_huggingface(self.family.builder_settings(self))
        config["architectures"] = [self.family.architecture + ("ForMaskedLM" if self.with_mlm else "Model")]
        return config

    def save_weights_as_checkpoint(self, folder):
        """Write ``config.json`` + ``model.safetensors`` that transformers loads (and bert4long reads back); an
        extended position table is recorded in ``config.json`` (`bert4long.position_record`).

        Example:
        >>> model = build_transformer_model(checkpoint_path="longformer/", return_keras_model=False)  # doctest: +SKIP
        >>> model.save_weights_as_checkpoint("longformer-tuned/")  # doctest: +SKIP
        """
        tensors = {}
        for _, _, variable, name, transform in self._mapped_weights():
            value = keras.ops.convert_to_numpy(variable)
            key = name if name.startswith(self.head_prefixes) else self.task_prefix + name
            tensors[key] = np.ascontiguousarray(to_checkpoint(value, transform))
        write_folder(folder, tensors, self.huggingface_config(), self)


def write_folder(folder, tensors, config, builder):
    """Write ``tensors`` as ``model.safetensors`` and ``config`` as ``config.json`` in ``folder``, with the
    position extension ``builder`` reads recorded (`bert4long.position_record`; transformers keeps the key)."""
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    atomic_write(os.path.join(folder, WEIGHT_FILENAME), lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    record = position_record(builder.position_extension, builder.max_position)
    if record is not None:
        config = {**config, RECORD_KEY: record}
    write_text_atomically(os.path.join(folder, "config.json"), json.dumps(config, indent=2))


def write_huggingface_folder(builder, folder, model="bert"):
    """Write a model of a family read under Google names (``model``: ``'bert'``, ``'roberta'``,
    ``'xlm-roberta'``) as a Hugging Face folder that transformers loads (``*ForMaskedLM`` with an MLM head,
    else ``*Model``): each weight under `bert4long.huggingface.huggingface_key`, checked against the rules
    that read it back; RoBERTa's unused position rows (before the first position) are written as zeros.

    Example:
    >>> builder = build_transformer_model(checkpoint_path="xlm-roberta-base/", with_mlm=True,
    ...                                   return_keras_model=False)  # doctest: +SKIP
    >>> write_huggingface_folder(builder, "xlm-roberta-tuned/", model="xlm-roberta")  # doctest: +SKIP
    """
    declared = family(model)
    if declared.reads_own_names:
        raise ValueError(f"model={model!r} folders are written by the builder: save_weights_as_checkpoint(folder).")
    tensors = {}
    for name, value in checkpoint_variables(builder).items():
        key = huggingface_key(name, declared)
        read_back, transform = google_name(key, declared)
        if read_back != name:
            raise ValueError(f"{name!r} would be written as {key!r}, which reads back as {read_back!r}: no "
                             f"{declared.name} tensor holds it.")
        if transform == "transpose":
            value = value.T
        elif transform == "position_offset":
            value = np.concatenate([np.zeros((declared.offset(builder.pad_token_id), value.shape[1]), value.dtype),
                                    value])
        tensors[key] = np.ascontiguousarray(value)
    config = declared.to_huggingface(declared.builder_settings(builder))
    config["architectures"] = [declared.architecture + ("ForMaskedLM" if builder.with_mlm else "Model")]
    write_folder(folder, tensors, config, builder)
