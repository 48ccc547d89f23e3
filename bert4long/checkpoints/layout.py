"""The checkpoint engine: a model's `variable_mapping()` table applied to a checkpoint, both ways, for every family.

A mapping is ``{layer name: {weight path: checkpoint name or (name, transform)}}``
(each model class writes its own). Loading and saving walk the same table by
name, never by list order, and share the transforms (`to_layer` / `to_checkpoint`).

Every checkpoint is read through one protocol, `bert4long.checkpoints.tf_format.WeightReader`, with two
implementations: `bert4long.checkpoints.tf_format.CheckpointReader` (TensorFlow checkpoints: Google, ALBERT, ELECTRA,
NEZHA, RoFormer) and `bert4long.checkpoints.safetensors_io.SafetensorsReader` (Hugging Face folders of every family, under
the names its family's naming gives: `bert4long.checkpoints.huggingface.tensor_names`). One loader (`load_weights`: open,
assign, check), one structure checker (`check_checkpoint_matches`, and `check_sizes_before_build` before a
model is built) and one saver per format (`write_checkpoint`, `save_huggingface_folder`) serve every family.
"""
import json
import os
import re
import warnings

import keras
import numpy as np

from bert4long.checkpoints.config import from_google_config, read_config, to_google_config
from bert4long.checkpoints.huggingface import (
    is_huggingface_folder,
    open_huggingface_folder,
    read_huggingface_config,
    tensor_names,
)
from bert4long.checkpoints.position_record import RECORD_KEY, position_record
from bert4long.checkpoints.safetensors_io import SafetensorsReader, write_safetensors_folder
from bert4long.checkpoints.tf_format import (
    CheckpointReader,
    MissingCheckpointVariableError,
    WeightReader,
    is_float,
    write_checkpoint,
)
from bert4long.families import CONFIG_KEYS, family_of_builder
from bert4long.output_folders import write_text_atomically

LAYER_NAME = re.compile(r"^(?:bert|electra)/encoder/layer_(\d+)/")
# Settings the weights' shapes may not reveal: {bert4long name in a stored config: builder attribute}
STRUCTURE_KEYS = {"num_hidden_layers": "num_hidden_layers", "num_attention_heads": "num_attention_heads",
                  "hidden_size": "hidden_size", "intermediate_size": "intermediate_size", "vocab_size": "vocab_size",
                  "max_position": "max_position", "segment_vocab_size": "segment_vocab_size",
                  "embedding_size": "embedding_size"}
# The config key a checkpoint variable's first dimension comes from (for shape-mismatch messages).
SIZE_KEYS = {"word_embeddings": "vocab_size", "position_embeddings": "max_position_embeddings",
             "token_type_embeddings": "type_vocab_size", "output_bias": "vocab_size"}
# Heads by the layer names that hold them: (what a message calls it, the build option that adds it).
HEAD_LAYERS = (("MLM-", "masked-LM head", "with_mlm"), ("Pooler", "pooler", "with_pool"), ("NSP", "NSP head", "with_nsp"))


def to_layer(value, transform, keep_tokens=None):
    """A checkpoint array as the layer weight holds it (``transform`` from the mapping).

    Example:
    >>> import numpy as np
    >>> from bert4long.checkpoints.layout import to_layer
    >>> to_layer(np.zeros((2, 3)), "transpose").shape, to_layer(np.arange(4), "keep_tokens", [3, 0]).tolist()
    ((3, 2), [3, 0])
    """
    if transform == "transpose":
        return value.T
    if transform == "keep_tokens" and keep_tokens is not None:
        return value[keep_tokens]
    return value


def to_checkpoint(value, transform):
    """A layer weight as the checkpoint stores it: the inverse of `to_layer` (``keep_tokens`` rows stay chosen).

    Example:
    >>> import numpy as np
    >>> from bert4long.checkpoints.layout import to_checkpoint
    >>> to_checkpoint(np.zeros((3, 2)), "transpose").shape
    (2, 3)
    """
    return value.T if transform == "transpose" else value


def mapped_weights(model, mapping):
    """Yield ``(layer name, weight path, variable, checkpoint name, transform)`` for the layers ``model`` has.

    A layer in ``mapping`` that this configuration does not build (e.g. no pooler) is skipped.
    """
    for layer_name, weights in mapping.items():
        try:
            layer = model.get_layer(layer_name)
        except ValueError:
            continue
        for path, target in weights.items():
            ckpt_name, transform = (target, None) if isinstance(target, str) else target
            variable = layer
            for attribute in path.split("."):
                variable = getattr(variable, attribute)
            yield layer_name, path, variable, ckpt_name, transform


def load_mapped_weights(builder, reader, without=()):
    """Assign every weight of ``builder``'s mapping from ``reader`` (the layers named in ``without`` left as they are):
    a missing variable raises `MissingCheckpointVariableError`, a shape mismatch ``ValueError`` naming the config key
    that differs."""
    for layer_name, path, variable, ckpt_name, transform in builder._mapped_weights():
        if layer_name in without:
            continue
        if ckpt_name not in reader:
            raise MissingCheckpointVariableError(ckpt_name, missing_message(builder, reader, layer_name, path, ckpt_name))
        value = to_layer(reader.get(ckpt_name), transform, builder.keep_tokens)
        if is_float(value.dtype) != is_float(variable.dtype):
            expected_kind = "floating-point" if is_float(variable.dtype) else "integer"
            raise ValueError(
                f"Checkpoint {reader.kind} {ckpt_name!r}{reader.source(ckpt_name)} in {reader.prefix!r} holds "
                f"{value.dtype} data, but layer {layer_name!r} weight {path!r} takes {expected_kind} values "
                f"({variable.dtype}): the file declares another type than the weight's, so its values would be misread. "
                "Use an intact copy of the checkpoint, or write it again with each weight's own type."
            )
        expected = tuple(variable.shape)
        if value.shape != expected:
            if value.size == int(np.prod(expected)) and transform is None and value.shape[0] == expected[0]:
                value = value.reshape(expected)  # 3-D attention kernels stored by some exporters
            else:
                key = "hidden_size / intermediate_size"
                if value.shape[:1] != expected[:1]:
                    key = SIZE_KEYS.get(ckpt_name.rsplit("/", 1)[-1], key)
                raise ValueError(
                    f"Shape mismatch: checkpoint {reader.kind} {ckpt_name!r}{reader.source(ckpt_name)} has shape "
                    f"{tuple(reader.shape(ckpt_name))} but the configuration builds {expected} for layer "
                    f"{layer_name!r} weight {path!r}: the configuration's {key} differs from the checkpoint's. "
                    "Use the checkpoint's own bert_config.json, or fix that setting."
                )
        variable.assign(value.astype(variable.dtype))


def missing_message(builder, reader, layer_name, path, name):
    """Why ``name``, needed by ``layer_name``'s ``path``, is not in ``reader``, and what to do."""
    message = (f"Checkpoint {reader.prefix!r} has no {reader.kind} {name!r}{reader.source(name)}, needed by layer "
               f"{layer_name!r} ({path}).")
    head = next((head for head in HEAD_LAYERS if layer_name.startswith(head[0])), None)
    if head is not None:
        held = f" (architectures {list(reader.architectures)})" if reader.architectures else ""
        return (f"{message} It holds no {head[1]}{held}: check that it matches model={builder.family.name!r}, or "
                f"build without {head[2]}.")
    return (f"{message} Check that the checkpoint matches model={builder.family.name!r} and that the configuration "
            "describes it (num_hidden_layers, its *_bias flags, ...).")


def check_sizes_before_build(builder, reader, config_path=None):
    """Raise ``ValueError`` where the sizes ``builder``'s configuration gives its tables
    (`CheckpointIO.checkpoint_sizes`) differ from ``reader``'s tensors. Run before the model is built: a
    ``vocab_size`` of 10**9 is then a message naming the file, the key, both sizes and the fix, not an
    out-of-memory error. Tensors the checkpoint lacks are left to the load, which names them."""
    mapping = builder.variable_mapping()
    for (layer_name, path), sizes in builder.checkpoint_sizes().items():
        target = mapping.get(layer_name, {}).get(path)
        name, transform = (target, None) if isinstance(target, str) or target is None else target
        if name is None or name not in reader or len(reader.shape(name)) != len(sizes):
            continue
        stored = tuple(reader.shape(name))
        theirs = stored[::-1] if transform == "transpose" else stored
        for axis, ((key, size), their_size) in enumerate(zip(sizes, theirs)):
            if size == their_size or axis == 0 and transform == "keep_tokens" and builder.keep_tokens is not None:
                continue
            raise ValueError(
                f"Shape mismatch: checkpoint {reader.kind} {name!r}{reader.source(name)} has shape {stored} but the "
                f"configuration builds {tuple(s for _, s in sizes)} for layer {layer_name!r} weight {path!r}: the "
                f"configuration's {key} differs from the checkpoint's ({size} in {config_path or 'the arguments'}, "
                f"{their_size} in {reader.prefix!r}). Fix {key} to match the checkpoint, or use the config stored "
                "with it. Nothing was built."
            )


def check_checkpoint_matches(builder, reader, partial_load=False):
    """Raise ``ValueError`` where ``reader``'s checkpoint and ``builder``'s configuration disagree: trained
    variables it would drop, structural settings that differ from the config stored beside the checkpoint.
    With ``partial_load`` warn instead."""
    used = {name for _, _, _, name, _ in builder._mapped_weights()}
    unused = sorted(name for name in reader.names() if name not in used and reader.trained(name)  # not heads
                    and not (builder.segment_vocab_size == 0 and name.endswith("/token_type_embeddings")))
    problems = []
    if unused:
        layers = sorted({int(m.group(1)) for m in map(LAYER_NAME.search, reader.names()) if m})
        if layers and layers[-1] + 1 > builder.num_hidden_layers and not builder.shared_block:
            problems.append(f"the checkpoint has {layers[-1] + 1} layers, the configuration "
                            f"num_hidden_layers={builder.num_hidden_layers}")
        problems.append(f"{len(unused)} trained {reader.kind}(s) would be dropped by model={builder.family.name!r}: "
                        + ", ".join(unused[:4]) + (", ..." if len(unused) > 4 else ""))
    stored, stored_path = stored_config(reader)
    for key, ours in STRUCTURE_KEYS.items():
        theirs = stored.get(key)
        mine = getattr(builder, ours)
        if key == "vocab_size" and builder.keep_tokens is not None or key == "segment_vocab_size" and mine == 0:
            continue
        if theirs is not None and mine is not None and theirs != mine:
            problems.append(f"{key}={mine} here but {theirs} in {stored_path}")
    if not problems:
        return
    message = (f"The configuration does not match checkpoint {reader.prefix!r}: " + "; ".join(problems) + ". ")
    if partial_load:
        warnings.warn(message + "Loading what matches; the rest is left out (partial_load=True).", stacklevel=4)
        return
    raise ValueError(message + reader.rebuild_advice + ", or pass partial_load=True to load only what matches.")


def checkpoint_variables(builder):
    """``{checkpoint name: array}`` of ``builder``'s weights in its checkpoint layout (what saving writes).

    A name that several layers map to (ALBERT's shared block) must hold one value in all of them.
    """
    variables = {}
    for layer_name, _, variable, ckpt_name, transform in builder._mapped_weights():
        value = to_checkpoint(keras.ops.convert_to_numpy(variable), transform)
        if ckpt_name in variables and not np.array_equal(variables[ckpt_name], value):
            raise ValueError(
                f"Layers map different values to checkpoint variable {ckpt_name!r} ({layer_name!r}): "
                f"the {builder.family.name!r} layout stores one shared copy, which cannot hold unshared weights."
            )
        variables[ckpt_name] = value
    return variables


# The config files `stored_config` looks for beside a Google checkpoint, in order.
BESIDE_CHECKPOINT = ("bert_config.json", "albert_config.json", "config.json")


def stored_config(reader):
    """``(config in bert4long names, its path)`` stored beside the checkpoint ``reader`` reads; ``({}, None)`` if none."""
    if getattr(reader, "stored_config", None) is not None:   # read once already (`bert4long.checkpoints.source`)
        return reader.stored_config
    if isinstance(reader, SafetensorsReader):
        path = os.path.join(reader.prefix, "config.json")
        return (read_huggingface_config(path), path) if os.path.isfile(path) else ({}, None)
    for name in BESIDE_CHECKPOINT:
        path = os.path.join(os.path.dirname(reader.prefix), name)
        if os.path.isfile(path):
            try:
                config = read_config(path)
            except ValueError:
                return {}, None
            if "model_type" in config:
                return {}, None
            return from_google_config(config), path
    return {}, None


def open_checkpoint(path, family=None, config=None):
    """The `WeightReader` of a Google checkpoint (prefix or folder) or a Hugging Face folder (named as
    ``family``'s, else its ``config.json``'s family says; ``config``: that file, read already); an open reader is
    returned as it is.

    Example:
    >>> import tempfile
    >>> from bert4long.checkpoints.layout import open_checkpoint
    >>> from bert4long.testing import write_tiny_checkpoint
    >>> _, prefix, _ = write_tiny_checkpoint(tempfile.mkdtemp())
    >>> open_checkpoint(prefix).shape("bert/embeddings/word_embeddings")
    (64, 16)
    """
    if isinstance(path, WeightReader):
        return path
    if family is not None and family.reads_own_names:
        return open_huggingface_folder(path, family, config)
    if is_huggingface_folder(path) and not os.path.isfile(os.path.join(path, "bert_model.ckpt.index")):
        return open_huggingface_folder(path, config=config)
    return CheckpointReader(path)


def load_weights(builder, checkpoint, partial_load=False, without=()):
    """Load ``builder``'s weights from ``checkpoint`` (a path or an open `WeightReader`): open it through the
    builder's format, assign every mapped weight but those of the layers named in ``without``
    (`load_mapped_weights`), then check that configuration and checkpoint agree (`check_checkpoint_matches`; with
    ``partial_load`` a warning), and let layers derive weights from the loaded ones (``after_weights_loaded``). The one
    loader of every family."""
    reader = builder.open_checkpoint(checkpoint)
    load_mapped_weights(builder, reader, without)
    check_checkpoint_matches(builder, reader, partial_load)
    for layer in builder.model.layers:  # layers that derive weights from loaded ones (attention kernels)
        if hasattr(layer, "after_weights_loaded"):
            layer.after_weights_loaded()


def save_huggingface_folder(builder, folder, family):
    """Write ``builder``'s weights as ``family``'s Hugging Face folder (``model.safetensors`` + ``config.json``,
    the position extension it reads recorded): a ``*ForMaskedLM`` folder with an MLM head (the encoder under
    the task prefix), else ``*Model``. The one safetensors saver of every family."""
    naming = tensor_names(family, builder.pad_token_id or 0)
    tensors = dict(naming.write(name, value, task_model=bool(builder.with_mlm))
                   for name, value in checkpoint_variables(builder).items())
    config = builder.to_huggingface_config(family)
    record = position_record(builder.position_extension, builder.max_position)
    if record is not None:
        config = {**config, RECORD_KEY: record}
    write_safetensors_folder(folder, tensors, config)


# Rows a model's word-embedding table may have beyond the ids of a Hugging Face tokenizer.json (``allow_padded``):
# a table padded for the hardware gets fewer than 128 (ModernBERT: 50,368 rows over its tokenizer's 50,280 ids). A
# vocab.txt or a sentencepiece model (XLM-RoBERTa's fairseq ids and <mask> included) numbers every row of the table
# it came with, so that table matches it exactly.
PADDING_ROWS = 127


def check_vocab_size(vocab_size, model_size, vocab_path="the vocabulary", allow_padded=False):
    """Refuse a tokenizer vocabulary whose size differs from the model's, naming both sizes.

    ``model_size``: ``(size, where it was read)`` of the model's vocabulary, as
    `bert4long.checkpoints.source.Source.model_vocab_size` gives it (the checkpoint's word-embedding rows, else the
    config's ``vocab_size``; ``(None, None)``: unknown, nothing checked). A larger vocabulary gives ids the model has
    no row for; a smaller one means the files do not belong together (its ids may mean other tokens), except with
    ``allow_padded`` (a tokenizer.json) for a table at most `PADDING_ROWS` rows larger: padded for the hardware, as
    ModernBERT's.

    Example:
    >>> from bert4long.checkpoints.layout import check_vocab_size
    >>> check_vocab_size(30522, (64, "rows of 'bert/embeddings/word_embeddings'"), "vocab.txt")
    Traceback (most recent call last):
    ...
    ValueError: vocab.txt has 30522 entries but the model's vocabulary has 64 (...
    """
    expected, source = model_size
    padding = PADDING_ROWS if allow_padded else 0
    if expected is None or 0 <= expected - vocab_size <= padding:
        return
    why = ("the tokenizer would produce ids the model has no row for" if vocab_size > expected else
           f"{expected - vocab_size} rows of the table would never be read and the ids may mean other tokens than "
           "the model learnt" + (f" (a tokenizer.json's table may be padded by at most {PADDING_ROWS} rows)"
                                 if allow_padded else ""))
    raise ValueError(
        f"{vocab_path} has {vocab_size} entries but the model's vocabulary has {expected} ({source}): {why}. Use the "
        "tokenizer that came with this checkpoint (the vocab.txt with --vocab, or the folder's own tokenizer files)."
    )


class CheckpointIO:
    """The checkpoint methods of a model builder (`bert4long.models.Transformer` inherits them).

    The builder provides ``model`` (its Keras model), ``variable_mapping()``,
    ``keep_tokens`` and the configuration attributes `google_config` reads.

    Example:
    >>> from bert4long.models import Transformer
    >>> issubclass(Transformer, CheckpointIO)
    True
    """

    # The `bert4long.families.Family` whose declaration names this class as its builder (the first such: BERT's is
    # "bert"); a class no family declares (a subclass of one) keeps its base's.
    family = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declared = family_of_builder(f"{cls.__module__}:{cls.__qualname__}")
        if declared is not None:
            cls.family = declared

    def variable_mapping(self):
        """``{layer name: {weight path: checkpoint name or (name, transform)}}``."""
        raise NotImplementedError

    def checkpoint_sizes(self):
        """``{(layer name, weight path): ((config key, size) per dimension)}``: the shapes, as the layers hold
        them, that this configuration gives the weights whose size a checkpoint reveals (the embedding tables and
        the feed-forward width), for `check_sizes_before_build`. A family whose tables differ overrides it.

        Example:
        >>> from bert4long.models import build_transformer_model
        >>> bert = build_transformer_model(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...                                intermediate_size=16, return_keras_model=False)
        >>> bert.checkpoint_sizes()[("Embedding-Token", "embeddings")]
        (('vocab_size', 50), ('hidden_size', 8))
        """
        width = ("embedding_size" if self.embedding_size != self.hidden_size else "hidden_size", self.embedding_size)
        sizes = {("Embedding-Token", "embeddings"): (("vocab_size", self.vocab_size), width),
                 ("Embedding-Position", "embeddings"): (("max_position_embeddings", self.max_position), width),
                 (self.layer_names(0)[1], "output_dense.kernel"): (("intermediate_size", self.intermediate_size),
                                                                    ("hidden_size", self.hidden_size))}
        if self.segment_vocab_size:
            sizes["Embedding-Segment", "embeddings"] = (("type_vocab_size", self.segment_vocab_size), width)
        return sizes

    def _mapped_weights(self):
        """Yield ``(layer name, weight path, variable, checkpoint name, transform)`` for present layers."""
        return mapped_weights(self.model, self.variable_mapping())

    @classmethod
    def open_checkpoint(cls, checkpoint_path):
        """The `WeightReader` `load_weights_from_checkpoint` reads (see `open_checkpoint`; a reader is kept); a
        class method, since reading a checkpoint needs no built model."""
        return open_checkpoint(checkpoint_path, cls.family)

    def load_weights_from_checkpoint(self, checkpoint_path, partial_load=False, without=()):
        """Load every mapped weight by its checkpoint name (but the layers named in ``without``, which keep their
        weights), checking that config and checkpoint agree.

        ``checkpoint_path``: a checkpoint (prefix or folder), a Hugging Face folder, or a reader already open
        (`open_checkpoint`).

        Refused unless ``partial_load=True`` (then a warning lists what is left
        out): trained variables this model would drop (more layers than
        ``num_hidden_layers``, a position table ``model='roformer'``/``'nezha'``
        has no place for, ...; optional heads, ``global_step`` and optimizer
        slots are not counted), and a structural setting that differs from the
        config stored beside the checkpoint (``bert_config.json`` or a Hugging
        Face ``config.json``), which is the only way to see a wrong
        ``num_attention_heads``: the weights' shapes do not show it. A shape
        mismatch is always an error; a missing variable raises
        `MissingCheckpointVariableError`. The engine is `bert4long.checkpoints.layout` (`load_weights`).

        Example:
        >>> from bert4long.models import build_transformer_model
        >>> bert = build_transformer_model("bert_config.json", return_keras_model=False)  # doctest: +SKIP
        >>> bert.load_weights_from_checkpoint("bert_model.ckpt")  # doctest: +SKIP
        """
        load_weights(self, checkpoint_path, partial_load, without)

    def check_checkpoint_matches(self, reader, partial_load=False):
        """Raise ``ValueError`` where ``reader``'s checkpoint and this configuration disagree (see
        `load_weights_from_checkpoint`); with ``partial_load`` warn instead."""
        check_checkpoint_matches(self, reader, partial_load)

    def to_huggingface_config(self, family=None):
        """The ``config.json`` of this model as ``family`` (default: its own) writes it: the family's key table
        read backwards, and ``*ForMaskedLM`` or ``*Model``."""
        family = family or self.family
        config = family.to_huggingface(family.builder_settings(self))
        config["architectures"] = [family.architecture + ("ForMaskedLM" if self.with_mlm else "Model")]
        return config

    def google_config(self):
        """The Google ``bert_config.json`` keys that rebuild this model (every setting that changes its outputs),
        with the position extension it reads recorded (`bert4long.checkpoints.position_record`).

        Example:
        >>> from bert4long.models import build_transformer_model
        >>> bert = build_transformer_model(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...                                intermediate_size=16, layer_norm_epsilon=1e-5, pad_token_id=1,
        ...                                return_keras_model=False)
        >>> {k: bert.google_config()[k] for k in ("layer_norm_eps", "pad_token_id")}
        {'layer_norm_eps': 1e-05, 'pad_token_id': 1}
        """
        settings = {ours: getattr(self, ours) for ours, _, _, _ in CONFIG_KEYS if ours != "initializer_range"}
        config = to_google_config({**settings, "initializer_range": float(self.initializer.stddev)})
        if self.embedding_size != self.hidden_size:
            config["embedding_size"] = self.embedding_size
        if self.attention_head_size != self.hidden_size // self.num_attention_heads:
            config["attention_head_size"] = self.attention_head_size
        if self.attention_key_size != self.attention_head_size:
            config["attention_key_size"] = self.attention_key_size
        if self.max_relative_position is not None:
            config["max_relative_position"] = self.max_relative_position
        record = position_record(self.position_extension, self.max_position)
        if record is not None:
            config[RECORD_KEY] = record
        return config

    def write_config(self, path):
        """Write `google_config` as JSON to ``path``, atomically (so a checkpoint folder rebuilds this model exactly)."""
        write_text_atomically(path, json.dumps(self.google_config(), indent=2))

    def save_weights_as_checkpoint(self, checkpoint_path, max_shard_bytes=None):
        """Write the weights back in the original layout (hierarchical positions add no rows): a TF checkpoint
        (``max_shard_bytes`` splits the data file: `bert4long.checkpoints.tf_format.write_checkpoint`), or for a family
        read under its own tensor names a Hugging Face folder transformers loads (`save_huggingface_folder`).

        Example:
        >>> bert.save_weights_as_checkpoint("out/bert_model.ckpt")  # doctest: +SKIP
        """
        if self.family is not None and self.family.reads_own_names:
            if max_shard_bytes is not None:
                raise ValueError(f"model={self.family.name!r} writes one model.safetensors: max_shard_bytes applies "
                                 "to TensorFlow checkpoints only.")
            save_huggingface_folder(self, checkpoint_path, self.family)
            return
        write_checkpoint(checkpoint_path, checkpoint_variables(self), max_shard_bytes)
