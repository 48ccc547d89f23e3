"""What a command or a build reads, resolved once: `resolve_source` -> `Source`.

The config file is read (and validated) once, the family decided once, the checkpoint opened once; everything
downstream (the command line's checks, the tokenizer's checks, `bert4long.models.build_transformer_model`,
weight loading) asks the `Source` instead of opening the files again.

Example:
>>> import tempfile
>>> from bert4long.checkpoints.source import resolve_source
>>> from bert4long.testing import write_tiny_checkpoint
>>> config_path, prefix, _ = write_tiny_checkpoint(tempfile.mkdtemp())
>>> source = resolve_source(checkpoint=prefix, config=config_path)
>>> source.family.name, source.trained_positions, source.pad_id, source.model_vocab_size()[0]
('bert', 16, 0, 64)
>>> source.reader.shape("bert/embeddings/word_embeddings")
(64, 16)
"""
import functools
import os
from dataclasses import dataclass, replace

from bert4long.checkpoints.config import from_google_config, read_config
from bert4long.checkpoints.huggingface import config_family, is_huggingface_folder
from bert4long.checkpoints.layout import BESIDE_CHECKPOINT, open_checkpoint
from bert4long.checkpoints.position_record import recorded_extension, restore_position_options, trained_positions
from bert4long.families import family as family_named

# The word-embedding tables whose rows are a Google-layout checkpoint's vocabulary size.
WORD_EMBEDDINGS = ("bert/embeddings/word_embeddings", "electra/embeddings/word_embeddings")


@dataclass(frozen=True)
class Source:
    """A resolved checkpoint and config (build it with `resolve_source`).

    Attributes:
        family: its `bert4long.families.Family` (None when a builder class was given as ``model``).
        config: builder arguments in bert4long keys (a Google file's keys kept beside their bert4long names).
        file_config: the config file as read and validated (``{}`` without one).
        config_path: that file (a Hugging Face folder's ``config.json`` when no config was given), or None.
        checkpoint: the checkpoint path (prefix or folder), or None.
        model: the ``model=`` name or builder class asked for.
        from_folder: True when the config is a Hugging Face folder's own ``config.json`` (none was given).
        opens_reader: False: `reader` is None (a build that loads its weights later).
    """

    family: object
    config: dict
    file_config: dict
    config_path: str | None = None
    checkpoint: str | None = None
    model: object = "bert"
    from_folder: bool = False
    opens_reader: bool = True

    @functools.cached_property
    def reader(self):
        """The checkpoint's name-keyed reader, opened on first use and kept (None without a checkpoint, or with
        ``opens_reader`` False); it carries the config read here (``stored_config``), so loading reads no file
        again."""
        if self.checkpoint is None or not self.opens_reader:
            return None
        if self.from_folder and self.huggingface:   # its config.json, read here already
            reader = open_checkpoint(self.checkpoint, self.family, self.file_config)
        else:
            reader = self.builder_class().open_checkpoint(self.checkpoint)
        stored = _stored_config(self, reader)
        if stored is not None:
            reader.stored_config = stored
        return reader

    @property
    def huggingface(self):
        """True when the config is a Hugging Face ``config.json`` (it names a ``model_type``)."""
        return "model_type" in self.file_config

    @property
    def trained_positions(self):
        """The trained number of positions the config gives (None without a config)."""
        if self.huggingface:
            return self.config.get("max_position")
        return trained_positions(self.file_config) if self.file_config else None

    @property
    def pad_id(self):
        """The model's padding id: its config's ``pad_token_id`` (a Google config without one: 0, BERT's)."""
        return self.config.get("pad_token_id", None if self.huggingface else 0)

    @property
    def position_extension(self):
        """The `PositionExtension` the config records (`bert4long.checkpoints.position_record`), or None."""
        return recorded_extension(self.file_config)

    @functools.cached_property
    def tokenizer(self):
        """`bert4long.tokenizers.load_tokenizer` of the checkpoint's (else the config's) folder, read on first use."""
        from bert4long.tokenizers import load_tokenizer

        base = self.checkpoint or self.config_path
        return load_tokenizer(base if os.path.isdir(base) else os.path.dirname(base) or ".")

    def built_family(self):
        """The family `build_transformer_model` builds: a Hugging Face folder's family with its own tensor names,
        else ``model``'s (None for a builder class)."""
        if self.huggingface and self.family.reads_own_names:
            return self.family
        return family_named(self.model) if isinstance(self.model, str) else None

    def builder_class(self):
        """The builder class of `built_family` (``model`` itself when it is a class)."""
        built = self.built_family()
        return built.builder_class() if built is not None else self.model

    def builder_arguments(self, kwargs, override_position_extension=False):
        """The config merged with ``kwargs`` (bert4long keys; the recorded position extension restored, see
        `bert4long.checkpoints.position_record.restore_position_options`) for `build_transformer_model`."""
        if self.config_path is not None:
            kwargs = restore_position_options(self.file_config, kwargs, repr(os.fspath(self.config_path)),
                                              override_position_extension)
        base = {k: v for k, v in self.config.items() if k != "model"} if self.huggingface else self.file_config
        return from_google_config({**base, **kwargs}), kwargs

    def model_vocab_size(self):
        """``(size, where it was read)`` of the model's vocabulary: a Google-layout checkpoint's word-embedding
        rows, else the config's ``vocab_size``; ``(None, None)`` if neither says."""
        own_names = self.huggingface and self.family.reads_own_names   # families: their config.json
        if self.reader is not None and not own_names:
            name = next((n for n in WORD_EMBEDDINGS if n in self.reader), None)
            if name is not None:
                return self.reader.shape(name)[0], f"rows of {name!r} in {self.reader.prefix!r}"
        if self.config_path is not None and self.file_config.get("vocab_size") is not None:
            return self.file_config["vocab_size"], f"vocab_size in {self.config_path!r}"
        return None, None

    def without_reader(self):
        """This source with no reader (a build that loads its weights later)."""
        return replace(self, opens_reader=False)


def _stored_config(source, reader):
    """What `bert4long.checkpoints.layout.stored_config` would read beside ``reader``, when it is ``source``'s
    config file (then the reader carries it, and the loader does not read the file again); else None."""
    if source.huggingface:
        beside = os.path.join(reader.prefix, "config.json")
        return (source.config, beside) if beside == source.config_path else None
    folder = os.path.dirname(reader.prefix)
    beside = next((p for p in (os.path.join(folder, n) for n in BESIDE_CHECKPOINT) if os.path.isfile(p)), None)
    if beside is None or source.config_path is None or not os.path.samefile(beside, source.config_path):
        return None
    return from_google_config(source.file_config), beside


def resolve_source(checkpoint=None, config=None, model="bert", open_reader=True, reader=None):
    """Read the config once and decide the family once; the checkpoint is opened once, on first use (`Source.reader`).

    Args:
        checkpoint: a Google checkpoint prefix or folder, or a Hugging Face folder (None: no weights).
        config: the JSON config (default: a Hugging Face folder's ``config.json``).
        model: the ``model=`` name (or builder class) of a Google-layout checkpoint; a Hugging Face
            ``config.json`` names its own family.
        open_reader: False: never open the checkpoint (``reader`` None).
        reader: the checkpoint's reader when it is open already (it becomes the source's ``reader``).

    Raises the config's errors (`bert4long.checkpoints.config.read_config`: missing file, bad JSON, bad values); the
    checkpoint's (`bert4long.checkpoints.layout.open_checkpoint`) come with the first use of ``reader``.
    """
    checkpoint = os.fspath(checkpoint) if checkpoint is not None else None
    config_path = os.fspath(config) if config is not None else None
    from_folder = config_path is None and is_huggingface_folder(checkpoint)
    if from_folder:
        config_path = os.path.join(checkpoint, "config.json")
    file_config = read_config(config_path) if config_path is not None else {}
    if "model_type" in file_config:   # a Hugging Face config.json: its family's key table
        declared = config_family(file_config, config_path)
        translated = {**declared.from_huggingface(file_config, config_path), "model": declared.name}
    else:
        declared = family_named(model) if isinstance(model, str) else getattr(model, "family", None)
        translated = from_google_config(file_config)
    source = Source(declared, translated, file_config, config_path, checkpoint, model, from_folder, open_reader)
    if reader is not None:
        source.__dict__["reader"] = reader   # where `Source.reader` keeps the reader it opened
    return source
