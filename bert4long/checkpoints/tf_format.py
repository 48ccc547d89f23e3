"""Read and write TensorFlow checkpoints in the original (Google) variable layout; the reader protocol.

Every checkpoint bert4long loads is read through one protocol, `WeightReader`, with two implementations:
`CheckpointReader` (a TensorFlow checkpoint, here) and `bert4long.checkpoints.safetensors_io.SafetensorsReader` (a Hugging
Face ``model.safetensors``, under the names its family's table gives).

TF checkpoints are read and written in TensorFlow's own file format (``prefix.index`` + ``prefix.data-00000-of-00001``,
or several data shards) with NumPy alone (`bert4long.checkpoints.tensor_bundle`), so Google's checkpoints load on
JAX or PyTorch with no TensorFlow installed, and what bert4long writes is a standard TF checkpoint that Google's code,
Hugging Face's converters and `tf.train.list_variables` read by its original names.
"""
import errno
import os
import re

import numpy as np

from bert4long.checkpoints.tensor_bundle import BundleReader, write_bundle
from bert4long.output_folders import is_disk_full, note_written, temporary

OPTIMIZER_SLOT_SUFFIXES = ("/adam_m", "/adam_v", "/Adam", "/Adam_1", "/LAMB", "/LAMB_1")
CHECKPOINT_FILENAMES = ("bert_model.ckpt", "albert_model.ckpt", "model.ckpt")
# Unused Google-layout variables that are not an error: heads a model may leave out, ELECTRA's generator.
OPTIONAL_PREFIXES = ("cls/", "bert/pooler/", "electra/pooler/", "discriminator_predictions/", "generator/",
                     "generator_predictions/")


def trained_google_name(name):
    """True for a Google-layout variable a model must use or lose (not a head, ``global_step`` or the like).

    >>> trained_google_name("bert/encoder/layer_0/output/dense/kernel"), trained_google_name("cls/predictions/output_bias")
    (True, False)
    """
    return "/" in name and not name.startswith(OPTIONAL_PREFIXES)


def is_float(dtype):
    """True for floating-point data (numpy's, and TensorFlow's ``bfloat16``), which every model weight holds.

    >>> import numpy as np
    >>> is_float(np.float16), is_float(np.int32), is_float(np.bool_)
    (True, False, False)
    """
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or "float" in dtype.name


def check_finite(value, where):
    """Refuse an array read from a checkpoint that holds NaN or infinite values (``where``: the file and the
    tensor, for the message): a model would compute NaN from it, silently. One pass over the array as it is read.

    >>> import numpy as np
    >>> check_finite(np.array([1.0, np.inf]), "tensor 'x' of 'model.safetensors'")
    Traceback (most recent call last):
    ...
    ValueError: tensor 'x' of 'model.safetensors' holds 1 NaN or infinite value(s) of 2 (first at index (1,)): ...
    """
    if not is_float(value.dtype):
        return
    finite = np.isfinite(value)
    if not finite.all():
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{where} holds {int(finite.size - finite.sum())} NaN or infinite value(s) of {finite.size} "
                         f"(first at index {first}): a model would compute NaN from it. The checkpoint is damaged, or "
                         "its training diverged: use an intact copy, or one saved before the loss became NaN.")


class MissingCheckpointVariableError(ValueError, KeyError):
    """A variable the model needs is not in the checkpoint; ``name`` is that variable's checkpoint name.

    A `ValueError` (what loading raised before) and a `KeyError` (a name that is not there).

    Example:
    >>> from bert4long.checkpoints.tf_format import MissingCheckpointVariableError
    >>> error = MissingCheckpointVariableError("cls/predictions/output_bias", "no head in this checkpoint")
    >>> error.name, str(error)
    ('cls/predictions/output_bias', 'no head in this checkpoint')
    """

    def __init__(self, name, message):
        super().__init__(message)
        self.name = name

    __str__ = ValueError.__str__  # the message as written, not KeyError's quoted repr


def resolve_checkpoint(path):
    """Return the checkpoint prefix for ``path`` (a prefix, an ``.index`` file or a folder).

    Example:
    >>> from bert4long.checkpoints.tf_format import resolve_checkpoint
    >>> resolve_checkpoint("/models/uncased_L-12_H-768_A-12")  # doctest: +SKIP
    '/models/uncased_L-12_H-768_A-12/bert_model.ckpt'
    """
    if path is None:
        raise ValueError("No checkpoint_path given: pass the checkpoint prefix, e.g. '.../bert_model.ckpt'.")
    path = os.fspath(path)
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if os.path.isfile(path + ".index"):
        return path
    if os.path.isdir(path):
        for name in CHECKPOINT_FILENAMES:
            if os.path.isfile(os.path.join(path, name + ".index")):
                return os.path.join(path, name)
        latest = latest_checkpoint(path)
        if latest:
            return latest
        indexes = sorted(f for f in os.listdir(path) if f.endswith(".index"))
        if len(indexes) == 1:
            return os.path.join(path, indexes[0][: -len(".index")])
        raise FileNotFoundError(
            f"No TensorFlow checkpoint found in folder {path!r} (looked for "
            f"{', '.join(n + '.index' for n in CHECKPOINT_FILENAMES)}): pass the checkpoint prefix "
            "explicitly, e.g. checkpoint_path='.../bert_model.ckpt'."
        )
    raise FileNotFoundError(
        f"Checkpoint not found: {path!r} has no {path + '.index'!r}. Pass the prefix of the "
        "checkpoint files (for 'bert_model.ckpt.index' and 'bert_model.ckpt.data-00000-of-00001' "
        "pass '.../bert_model.ckpt') or the folder that holds them."
    )


def latest_checkpoint(folder):
    """The prefix the ``checkpoint`` file of ``folder`` names as the newest (``model_checkpoint_path``, relative to
    the folder unless absolute), when it names one whose index is there; else None.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "checkpoint"), "w").write('model_checkpoint_path: "model.ckpt-20"\\n')
    >>> latest_checkpoint(folder) is None   # (its index is not there)
    True
    """
    try:
        with open(os.path.join(folder, "checkpoint"), encoding="utf-8") as f:
            found = re.search(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', f.read(), re.M)
    except (OSError, UnicodeDecodeError):
        return None
    if found is None:
        return None
    prefix = os.path.join(folder, re.sub(r"\\(.)", r"\1", found.group(1)))   # (a text proto's escapes)
    return prefix if os.path.isfile(prefix + ".index") else None


class WeightReader:
    """The reader protocol: the arrays of one checkpoint by the names a model's `variable_mapping()` uses.

    ``name in reader``, ``reader.names()``, ``reader.shape(name)`` (from the file's header),
    ``reader.get(name)`` (a numpy array as the mapping expects it), ``reader.source_name(name)`` (the name
    the file stores it under; ``reader.source(name)`` says so in a message), ``reader.trained(name)`` (a
    weight a model must use or lose, not a head), ``reader.check()`` (read everything once),
    ``reader.prefix`` (its path) and ``reader.architectures`` (what its config says it holds); it is a
    context manager (`close`).

    Example:
    >>> import numpy as np, tempfile, os
    >>> from bert4long.checkpoints.tf_format import CheckpointReader, WeightReader, write_checkpoint
    >>> prefix = os.path.join(tempfile.mkdtemp(), "bert_model.ckpt")
    >>> write_checkpoint(prefix, {"bert/pooler/dense/bias": np.zeros(4, "float32")})
    >>> with CheckpointReader(prefix) as reader:
    ...     isinstance(reader, WeightReader), reader.names(), reader.get("bert/pooler/dense/bias").shape
    (True, ['bert/pooler/dense/bias'], (4,))
    """

    kind = "variable"   # what a message calls one stored array
    key_label = "stored as"   # ... and the name it is stored under
    architectures = ()
    # What a message advises when the configuration does not describe the checkpoint.
    rebuild_advice = ("Use the configuration stored with the checkpoint (its bert_config.json / config.json and the "
                      "model family it was trained as)")

    def names(self):
        raise NotImplementedError

    def __contains__(self, name):
        raise NotImplementedError

    def shape(self, name):
        raise NotImplementedError

    def get(self, name):
        raise NotImplementedError

    def source_name(self, name):
        """The name the file stores ``name`` under (a TF checkpoint: the same)."""
        return name

    def source(self, name):
        """Where ``name`` is stored, for messages (``""``: under that name)."""
        key = self.source_name(name)
        return "" if key == name else f" ({self.key_label} {key!r})"

    def listed_name(self, name):
        """The name a listing (`bert4long info`) shows for ``name``: as the file stores it."""
        return name

    def trained(self, name):
        """True for a weight a model must use or lose (not a task head, a counter or a buffer)."""
        return trained_google_name(name)

    def check(self):
        """Read every array once, so a damaged file is found now (`ValueError` naming it)."""
        for name in self.names():
            self.get(name)

    def close(self):
        """Let go of the file (a closed reader is not read again)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


class CheckpointReader(WeightReader):
    """The `WeightReader` of a TensorFlow checkpoint: its model variables by name (optimizer slots hidden).

    Example:
    >>> from bert4long.checkpoints.tf_format import CheckpointReader
    >>> reader = CheckpointReader("bert_model.ckpt")  # doctest: +SKIP
    >>> reader.shape("bert/embeddings/word_embeddings")  # doctest: +SKIP
    (30522, 768)
    """

    def __init__(self, path):
        self.prefix = resolve_checkpoint(path)
        try:
            self._reader = BundleReader(self.prefix)
        except (ValueError, OSError, IndexError, KeyError) as error:  # corrupt or truncated files
            raise ValueError(f"Cannot read checkpoint {self.prefix!r}: {error}") from None
        self.shapes = {name: shape for name, shape in self._reader.shapes.items()
                       if not name.endswith(OPTIMIZER_SLOT_SUFFIXES)}

    def __contains__(self, name):
        return name in self.shapes

    def names(self):
        return sorted(self.shapes)

    def shape(self, name):
        return self.shapes[name]

    def data_files(self):
        folder, base = os.path.split(self.prefix)
        return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.startswith(base + ".data-"))

    def get(self, name):
        if name not in self.shapes:
            raise KeyError(name)
        return self._read(name)

    def _read(self, name):
        try:
            value = self._reader.get(name)
        except (ValueError, OSError) as error:   # a short read, a bad checksum, ...
            files = " / ".join(map(repr, self.data_files())) or repr(self.prefix + ".data-*")
            raise ValueError(
                f"Checkpoint data file {files} is damaged or truncated: reading {name!r} failed "
                f"({str(error).splitlines()[0][:200]}). Copy or download the checkpoint again."
            ) from None
        check_finite(value, f"Checkpoint {self.prefix!r}: variable {name!r}")
        return value

    def check(self):
        """Read every variable once (optimizer slots too), so a damaged data file is found now (`ValueError`)."""
        for name in self._reader.shapes:
            self._read(name)

    def close(self):
        self._reader = None


def _shards(names, variables, max_shard_bytes):
    """``names`` in consecutive groups whose arrays hold at most ``max_shard_bytes`` together (None: one group)."""
    if max_shard_bytes is None:
        return [names]
    shards, size = [[]], 0
    for name in names:
        nbytes = np.asarray(variables[name]).nbytes
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def write_checkpoint(prefix, variables, max_shard_bytes=None):
    """Write ``{name: array}`` as a TF checkpoint at ``prefix``, atomically per file.

    The files are written in a temporary folder beside the target and moved into
    place (data first, then index), so an interrupted write never leaves a
    truncated file under the final name. ``max_shard_bytes`` splits the data into
    several ``prefix.data-0000i-of-0000n`` files of at most that size each (a variable
    larger than it gets a file of its own), as TensorFlow's sharded savers write them:
    every reader of TF checkpoints reads them through the one index.

    Example:
    >>> import numpy as np, tempfile, os
    >>> from bert4long.checkpoints.tf_format import write_checkpoint, CheckpointReader
    >>> prefix = os.path.join(tempfile.mkdtemp(), "bert_model.ckpt")
    >>> write_checkpoint(prefix, {"bert/pooler/dense/bias": np.zeros(4, "float32")})
    >>> CheckpointReader(prefix).shape("bert/pooler/dense/bias")
    (4,)
    """
    prefix = os.path.abspath(os.fspath(prefix))
    directory = os.path.dirname(prefix)
    os.makedirs(directory, exist_ok=True)
    with temporary(directory, ".tmp-ckpt-", folder=True) as tmp_dir:
        try:
            write_bundle(os.path.join(tmp_dir, os.path.basename(prefix)), variables,
                         _shards(sorted(variables), variables, max_shard_bytes))
        except OSError as error:
            if not is_disk_full(error):
                raise
            raise OSError(errno.ENOSPC, f"Could not write the checkpoint {prefix!r}: the disk is full (no file "
                                        "under that name was changed). Free some space and run again.") from None
        produced = sorted(os.listdir(tmp_dir), key=lambda f: f.endswith(".index"))
        for filename in produced:
            os.replace(os.path.join(tmp_dir, filename), os.path.join(directory, filename))
            note_written(os.path.join(directory, filename))
        data_prefix = os.path.basename(prefix) + ".data-"
        for filename in os.listdir(directory):   # shards of an older write with another shard count
            if filename.startswith(data_prefix) and filename not in produced:
                os.remove(os.path.join(directory, filename))
