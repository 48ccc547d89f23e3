"""Output folders: bert4long never deletes or overwrites what the user did not ask it to replace.

Every folder bert4long writes as a command's output carries a marker file,
``.bert4long-output.json`` (the command that made it). An output folder is
accepted when it is new, empty, or a folder bert4long made (then only with
``overwrite=True``, or ``resume=True`` for the same training command). It is
refused when it holds anything else, or when it is, is inside, or contains an
input. One-shot outputs (export, extend, convert) are written into a hidden
staging folder and moved into place only when complete, so a failure leaves the
target as it was. New folders get the usual permissions (``0o777`` less the umask).
"""
import contextlib
import datetime
import errno
import json
import os
import shutil
import tempfile

MARKER = ".bert4long-output.json"
OWN_PREFIX = ".bert4long-"   # names bert4long itself writes inside an output folder (marker, lock, staging)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_readable(path):
    """Give a folder made by `tempfile.mkdtemp` (``0o700``) the permissions ``mkdir`` would have."""
    os.chmod(path, 0o777 & ~_umask())


def is_disk_full(error):
    """True for an ``ENOSPC`` `OSError` or TensorFlow's ``ResourceExhaustedError`` from a file write."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    import tensorflow as tf

    return isinstance(error, tf.errors.ResourceExhaustedError) or (
        isinstance(error, tf.errors.OpError) and "No space left on device" in str(error))


def _describe_write_error(error):
    if is_disk_full(error):
        return "the disk is full"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error).splitlines()[0][:200]


def atomic_write(path, write, suffix=""):
    """Call ``write(tmp_path)`` beside ``path``, then move the result onto ``path`` in one rename.

    On any failure the temporary file is removed and ``path`` keeps its old
    content; a full disk becomes a one-line ``OSError(ENOSPC)`` naming ``path``.
    ``suffix`` ends the temporary name (Keras wants ``.keras``).

    Example:
    >>> import os, tempfile
    >>> from bert4long.outputs import atomic_write
    >>> path = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> atomic_write(path, lambda tmp: open(tmp, "w").write("done"))
    >>> open(path).read()
    'done'
    """
    tmp = f"{path}.tmp-{os.getpid()}{suffix}"
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        if is_disk_full(error):
            raise OSError(errno.ENOSPC, f"Could not write {path!r}: the disk is full (nothing was left half "
                                        "written). Free some space and run the command again.") from None
        raise


def write_text_atomically(path, text):
    """`atomic_write` of a UTF-8 text file."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def _overlap(out, inputs):
    """The first input that ``out`` would overwrite or mix with, as ``(input, relation)``, or None."""
    for given in inputs:
        if not given:
            continue
        path = os.path.realpath(os.fspath(given))
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        if out == folder:
            return given, "is the folder of the input"
        if os.path.isdir(path) and out.startswith(folder + os.sep):
            return given, "is inside the input folder"
        if path.startswith(out + os.sep):
            return given, "contains the input"
    return None


def check_output_file(path, inputs=()):
    """Refuse (``ValueError``) an output *file* that is a folder, is an input, or sits in an input folder.

    Example:
    >>> from bert4long.outputs import check_output_file
    >>> check_output_file("predictions.jsonl", inputs=["documents.jsonl"])
    """
    real = os.path.realpath(os.fspath(path))
    if os.path.isdir(real):
        raise ValueError(f"Output file {path!r} is a folder: name a file, e.g. {os.path.join(path, 'out.jsonl')!r}.")
    for given in inputs:
        if not given:
            continue
        source = os.path.realpath(os.fspath(given))
        if real == source or (os.path.isdir(source) and real.startswith(source + os.sep)):
            relation = "is the input" if real == source else "is inside the input folder"
            raise ValueError(f"Output file {path!r} {relation} {given!r}: writing it would overwrite or add to what "
                             "this command reads. Choose another file.")


def read_marker(folder):
    """The marker of a folder bert4long made (``{'command': ..., ...}``), or None."""
    try:
        with open(os.path.join(folder, MARKER), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _own_names(folder):
    return sorted(n for n in os.listdir(folder) if not n.startswith(OWN_PREFIX))


def write_marker(folder, command, files=None):
    """Mark ``folder`` as made by bert4long's ``command``; ``files``: the names it wrote (None: still writing)."""
    write_text_atomically(os.path.join(folder, MARKER), json.dumps({
        "made_by": "bert4long", "command": command, "files": files,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}, indent=2))


def _unwritable(path, error):
    return PermissionError(
        error.errno, f"Cannot write the output folder {path!r} ({_describe_write_error(error)}); nothing was done. "
                     "Choose a folder you can write to.")


class OutputFolder:
    """The output folder of one bert4long command, checked before any work is done.

    Args:
        path: the folder (``--out``).
        command: the command writing it (``'export'``, ``'pretrain'``, ...), recorded in its marker.
        inputs: paths the command reads (files, checkpoint prefixes, folders); the
            output may not be, be inside (for folders), or contain any of them.
        overwrite: replace a folder bert4long made earlier.
        resume: accept a folder of an earlier run of the same ``command`` as it is.

    Use it as a context manager for one-shot outputs: the block writes into the
    yielded staging folder, which becomes ``path`` when the block succeeds and is
    removed when it fails. Training runs, which write as they go, call `open_run`.

    Example:
    >>> import os, tempfile
    >>> from bert4long.outputs import OutputFolder
    >>> out = os.path.join(tempfile.mkdtemp(), "served")
    >>> with OutputFolder(out, "export") as staging:
    ...     _ = open(os.path.join(staging, "saved_model.pb"), "w").write("...")
    >>> sorted(os.listdir(out))
    ['.bert4long-output.json', 'saved_model.pb']
    >>> OutputFolder(out, "export", overwrite=True).state   # without overwrite=True: a ValueError
    'replace'
    """

    def __init__(self, path, command, inputs=(), overwrite=False, resume=False):
        self.path = os.path.abspath(os.fspath(path))
        self.command = command
        self.inputs = [os.fspath(p) for p in inputs if p]
        self.overwrite = overwrite
        self.resume = resume
        self._staging = None
        self.state = self.check()

    def check(self):
        """Refuse (``ValueError``) an output that would destroy something; else return
        ``'new'``, ``'empty'``, ``'resume'`` or ``'replace'``."""
        path = self.path
        if os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"Output folder {path!r} is a file, not a folder: choose a folder name "
                             "(a new or empty folder).")
        found = _overlap(os.path.realpath(path), self.inputs)
        if found:
            raise ValueError(f"Output folder {path!r} {found[1]} {found[0]!r}: writing there would overwrite or "
                             "mix with what this command reads. Choose another folder (a new or empty one).")
        if not os.path.isdir(path):
            ancestor = os.path.dirname(path)
            while not os.path.lexists(ancestor):
                ancestor = os.path.dirname(ancestor)
            if not os.path.isdir(ancestor):
                raise ValueError(f"Output folder {path!r} cannot be made there: {ancestor!r} is a file. Choose "
                                 "another folder.")
            return "new"
        names = _own_names(path)
        marker = read_marker(path)
        if marker is None:
            if not names:
                return "empty"
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            raise ValueError(f"Output folder {path!r} already holds files bert4long did not write ({shown}); "
                             "nothing was changed. Choose another folder (a new or empty one); --overwrite "
                             "replaces only folders bert4long made.")
        added = sorted(set(names) - set(marker["files"])) if marker.get("files") is not None else []
        if self.overwrite and added:
            raise ValueError(f"Output folder {path!r} was made by `bert4long {marker.get('command', '?')}` but "
                             f"also holds files it did not write ({', '.join(added[:5])}); nothing was changed. "
                             "Move them away first, or choose another folder.")
        if self.overwrite:
            return "replace"
        if self.resume and marker.get("command") == self.command:
            return "resume"
        raise ValueError(f"Output folder {path!r} holds the output of an earlier `bert4long "
                         f"{marker.get('command', '?')}`: pass --overwrite to replace it, or choose another folder.")

    def open_run(self):
        """Create (or, with ``overwrite``, empty) the folder of a training run, mark it, and return its path."""
        try:
            if self.state == "replace":
                self._move_aside(os.listdir(self.path))
            os.makedirs(self.path, exist_ok=True)
            if self.state != "resume":
                write_marker(self.path, self.command)
            else:
                tempfile.TemporaryFile(dir=self.path).close()   # still writable?
        except OSError as error:
            raise _unwritable(self.path, error) from error
        return self.path

    def probe(self):
        """Check now, before any work, that the folder can be written (`PermissionError` naming it)."""
        shutil.rmtree(self.__enter__(), ignore_errors=True)
        self._staging = None

    def record_files(self):
        """At the end of a run: note in the marker which files it wrote (`--overwrite` replaces only those)."""
        write_marker(self.path, self.command, _own_names(self.path))

    def remove_if_unused(self):
        """Undo `open_run` when the run wrote nothing: remove the folder it made, or its marker in an empty one."""
        if self.state not in ("new", "empty") or not all(n.startswith(OWN_PREFIX) for n in os.listdir(self.path)):
            return
        if self.state == "new":
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            os.remove(os.path.join(self.path, MARKER))

    def __enter__(self):
        try:
            if os.path.isdir(self.path):   # stage inside: the parent (e.g. of '.') may not be writable
                self._staging = tempfile.mkdtemp(prefix=OWN_PREFIX + "staging-", dir=self.path)
            else:
                parent = os.path.dirname(self.path)
                os.makedirs(parent, exist_ok=True)
                self._staging = tempfile.mkdtemp(prefix=f".tmp-{os.path.basename(self.path)}-", dir=parent)
            make_readable(self._staging)
        except OSError as error:
            raise _unwritable(self.path, error) from error
        return self._staging

    def __exit__(self, kind, error, traceback):
        staging, self._staging = self._staging, None
        try:
            if kind is None:
                self.check()   # still ours to write (nothing appeared meanwhile)?
                write_marker(staging, self.command, _own_names(staging))
                self._commit(staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return False

    def _move_aside(self, names):
        """Move ``names`` (inside the folder) into a hidden folder and delete that; nothing else is touched."""
        names = [n for n in names if n == MARKER or not n.startswith(OWN_PREFIX)]   # keep staging and lock
        if not names:
            return
        old = tempfile.mkdtemp(prefix=OWN_PREFIX + "old-", dir=self.path)
        for name in names:
            os.rename(os.path.join(self.path, name), os.path.join(old, name))
        shutil.rmtree(old, ignore_errors=True)

    def _commit(self, staging):
        if not os.path.exists(self.path):
            os.rename(staging, self.path)
            return
        if self.state == "replace":
            self._move_aside(os.listdir(self.path))
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(self.path, name))
