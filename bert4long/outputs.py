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
import contextvars
import datetime
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile

MARKER = ".bert4long-output.json"
OWN_PREFIX = ".bert4long-"   # names bert4long itself writes inside an output folder (marker, lock, staging)
HASH_LIMIT = 64 * 2 ** 20    # files up to this size are recorded by content hash, larger ones by size
# Files bert4long's own tools append to while a run trains (TensorBoard's event files, under logs/): recorded by
# name, and owned when they sit under that folder with that prefix.
GROWING_FOLDER, GROWING_PREFIX = "logs", "events.out.tfevents."
_WRITING = contextvars.ContextVar("bert4long_output_folder", default=None)


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
        note_written(path)
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
    for given in inputs:   # an input reached through a link inside ``out``
        if given and os.path.abspath(os.fspath(given)).startswith(out + os.sep):
            return given, "contains the input"
    return None


def check_output_file(path, inputs=(), overwrite=True):
    """Refuse (``ValueError``) an output *file* that is a folder, is an input, sits in an input folder, or
    exists already (unless ``overwrite``).

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
    if not overwrite and os.path.lexists(real):
        raise ValueError(f"Output file {path!r} exists already: pass --overwrite to replace it, or choose another "
                         "file.")


def note_written(*paths):
    """Record ``paths`` (files, or folders bert4long just made) as bert4long's own in the output folder being written.

    Every writer of bert4long calls it after a write; it does nothing outside an
    `OutputFolder.writing` block or for paths outside that folder. This list, not a
    listing of the folder afterwards, is what ``--overwrite`` may later replace.
    """
    folder = _WRITING.get()
    paths = [p for p in paths if not os.path.basename(os.fspath(p)).startswith(OWN_PREFIX)]   # (the marker itself)
    if folder is not None and paths:
        folder.record(*paths)


def _entry(path):
    size = os.path.getsize(path)
    if size > HASH_LIMIT:
        return {"size": size}
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2 ** 20), b""):
            digest.update(block)
    return {"size": size, "sha256": digest.hexdigest()}


def _files_under(path):
    """Every file at or under ``path`` (symlinks are listed, never followed)."""
    if os.path.isdir(path) and not os.path.islink(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                yield os.path.join(root, name)
    elif os.path.lexists(path):
        yield path


def _is_growing(relative):
    parts = relative.split(os.sep)
    return parts[0] == GROWING_FOLDER and parts[-1].startswith(GROWING_PREFIX)


# Temporaries of bert4long's writers that an interrupted process may leave: a training state being saved and a
# checkpoint being written (folders), `atomic_write`'s NAME.tmp-PID[.suffix], the corpus cache's tmpXXXX.tmp.
_TEMPORARY = re.compile(r"^(.*?\.tmp-(step|ckpt)-[^/]*)(/|$)|^(.*\.tmp-\d+(\.\w+)?)$|^(corpus_cache/tmp\w+\.tmp)$")


def _stale_temporary(relative):
    """The temporary (a file, or the folder it sits in) an interrupted write left at ``relative``, or None."""
    match = _TEMPORARY.search(relative.replace(os.sep, "/"))
    return next(group for group in match.group(1, 4, 6) if group) if match else None


def _ancestors(folder, top):
    while folder != top and folder.startswith(top + os.sep):
        yield folder
        folder = os.path.dirname(folder)


def read_marker(folder):
    """The marker of a folder bert4long made (``{'command': ..., ...}``), or None."""
    try:
        with open(os.path.join(folder, MARKER), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _own_names(folder):
    return sorted(n for n in os.listdir(folder) if not n.startswith(OWN_PREFIX))


def write_marker(folder, command, files=None, created=None):
    """Mark ``folder`` as made by bert4long's ``command``; ``files``: ``{relative path: {size, sha256}}`` of what it
    wrote so far."""
    write_text_atomically(os.path.join(folder, MARKER), json.dumps({
        "made_by": "bert4long", "command": command, "files": files or {},
        "created": created or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}, indent=2))


def foreign_files(folder, marker):
    """The files under ``folder`` that its ``marker`` does not record as bert4long's (relative paths, sorted).

    Owned: a recorded file whose size (and, when recorded, sha256) still match; TensorBoard's event files under
    logs/; temporaries an interrupted write left; bert4long's hidden names at the top. Markers of older versions
    listed top-level names (or null: nothing is known to be bert4long's).
    """
    files = marker.get("files")
    foreign = []
    for path in _files_under(folder):
        relative = os.path.relpath(path, folder)
        if relative.split(os.sep)[0].startswith(OWN_PREFIX) or _is_growing(relative) or _stale_temporary(relative):
            continue
        if isinstance(files, list):   # an older marker: top-level names
            owned = relative.split(os.sep)[0] in files
        else:
            entry = (files or {}).get(relative)
            owned = entry is not None and not os.path.islink(path) and (
                _entry(path) == entry if "sha256" in entry else os.path.getsize(path) == entry["size"])
        if not owned:
            foreign.append(relative)
    return foreign


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
        self._files, self._created = {}, None
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
        if self.overwrite:
            foreign = foreign_files(path, marker)
            if foreign:
                shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
                raise ValueError(
                    f"Output folder {path!r} was made by `bert4long {marker.get('command', '?')}` but also holds "
                    f"files it did not write ({shown}); nothing was changed. They are yours, or changed since "
                    "bert4long wrote them: move them away first, or choose another folder.")
            return "replace"
        if self.resume and marker.get("command") == self.command:
            self._files = dict(marker["files"]) if isinstance(marker.get("files"), dict) else {}
            self._created = marker.get("created")
            return "resume"
        raise ValueError(f"Output folder {path!r} holds the output of an earlier `bert4long "
                         f"{marker.get('command', '?')}`: pass --overwrite to replace it, or choose another folder.")

    def open_run(self):
        """Create (or, with ``overwrite``, empty of what bert4long wrote) the folder of a training run and mark it.

        Call it once every input has been read and the model built: before that, nothing in the folder is touched.
        Returns the folder's path.
        """
        try:
            if self.state == "replace":
                self.check()   # (nothing of the user's appeared meanwhile)
                self._remove_recorded()
                self._files, self._created = {}, None
            os.makedirs(self.path, exist_ok=True)
            if self.state == "resume":
                tempfile.TemporaryFile(dir=self.path).close()   # still writable?
            write_marker(self.path, self.command, self._files, self._created)
        except OSError as error:
            raise _unwritable(self.path, error) from error
        self.state = "resume" if self.state == "replace" else self.state
        return self.path

    @contextlib.contextmanager
    def writing(self):
        """While the block runs, every `note_written` path inside this folder is recorded in its marker."""
        token = _WRITING.set(self)
        try:
            yield self
        finally:
            _WRITING.reset(token)

    def record(self, *paths):
        """Add ``paths`` (files, or folders bert4long made) to the marker's record; forget recorded files now gone."""
        for given in paths:
            for path in _files_under(os.path.abspath(given)):
                relative = os.path.relpath(path, self.path)
                if relative.startswith(os.pardir) or relative.split(os.sep)[0].startswith(OWN_PREFIX):
                    continue
                self._files[relative] = _entry(path)
        self._files = {k: v for k, v in self._files.items() if os.path.lexists(os.path.join(self.path, k))}
        write_marker(self.path, self.command, self._files, self._created)

    def probe(self):
        """Check now, before any work, that the folder can be written (`PermissionError` naming it)."""
        shutil.rmtree(self.__enter__(), ignore_errors=True)
        self._staging = None

    def remove_stale_temporaries(self):
        """Delete what interrupted writes of bert4long left here (``.tmp-step-*`` states and the like)."""
        stale = {_stale_temporary(os.path.relpath(path, self.path)) for path in _files_under(self.path)} - {None}
        for relative in stale:
            target = os.path.join(self.path, relative)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.remove(target)

    def remove_if_unused(self):
        """Undo `open_run` when the run wrote nothing: remove the folder it made, or its marker in an empty one."""
        if self.state not in ("new", "empty") or not os.path.isdir(self.path) or not all(
                n.startswith(OWN_PREFIX) for n in os.listdir(self.path)):
            return
        if self.state == "new":
            shutil.rmtree(self.path, ignore_errors=True)
        elif os.path.exists(os.path.join(self.path, MARKER)):
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
                files = {os.path.relpath(p, staging): _entry(p) for p in _files_under(staging)}
                write_marker(staging, self.command, files)
                self._commit(staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return False

    def _remove_recorded(self):
        """Delete what the marker records as bert4long's (after `check` found nothing else), then empty folders."""
        marker = read_marker(self.path) or {}
        files = marker.get("files")
        old = tempfile.mkdtemp(prefix=OWN_PREFIX + "old-", dir=self.path)
        if isinstance(files, list):   # an older marker: top-level names
            doomed = [n for n in files if os.path.lexists(os.path.join(self.path, n))]
        else:
            doomed = [os.path.relpath(p, self.path) for p in _files_under(self.path)
                      if not os.path.relpath(p, self.path).startswith(OWN_PREFIX)]   # all owned: check() said so
        for relative in doomed:
            target = os.path.join(old, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(os.path.join(self.path, relative), target)
        shutil.rmtree(old, ignore_errors=True)
        emptied = {os.path.dirname(os.path.join(self.path, r)) for r in doomed}
        for folder in sorted({f for d in emptied for f in _ancestors(d, self.path)}, key=len, reverse=True):
            with contextlib.suppress(OSError):   # (not empty: left as it is)
                os.rmdir(folder)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.path, MARKER))

    def _commit(self, staging):
        if not os.path.exists(self.path):
            os.rename(staging, self.path)
            return
        if self.state == "replace":
            self._remove_recorded()
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(self.path, name))
