"""Output folders: bert4long never deletes or overwrites what the user did not ask it to replace.

Every folder bert4long writes as a command's output carries a marker file,
``.bert4long-output.json``: the command that made it (``pretrain`` and the demo,
``pretrain --demo``, are two) and a record of what it wrote there. Ownership is by
that record, never by a name: a file is bert4long's while the record lists it and it
is still as written, and a temporary is recorded before it is created and forgotten
once renamed or removed. An output folder is accepted when it is new, empty, or a
folder bert4long made (then only with ``overwrite=True``, or ``resume=True`` for the
same command). It is refused when it holds anything else, when it is, is inside, or
contains an input (a checkpoint prefix stands for its folder), or when it is inside
the installed bert4long. One-shot outputs (export, extend, convert) are written into
a hidden staging folder and moved into place only when complete, so a failure leaves
the target as it was. New folders get the usual permissions (``0o777`` less the umask).
"""
import contextlib
import contextvars
import datetime
import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile

MARKER = ".bert4long-output.json"
OWN_PREFIX = ".bert4long-"   # names bert4long itself writes inside an output folder (marker, lock, staging)
HASH_LIMIT = 64 * 2 ** 20    # files up to this size are recorded by content hash, larger ones by size
PACKAGE = os.path.dirname(os.path.realpath(__file__))   # the installed bert4long: never an output folder
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
    tf = sys.modules.get("tensorflow")
    if tf is None:   # no TensorFlow error without TensorFlow: never import it to ask (it may not be installed)
        return False

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

    ``tmp_path`` is a new file made by `temporary` (never an existing one, never through a link). On any failure
    it is removed and ``path`` keeps its old content; a full disk becomes a one-line ``OSError(ENOSPC)`` naming
    ``path``. ``suffix`` ends the temporary name (Keras wants ``.keras``).

    Example:
    >>> import os, tempfile
    >>> from bert4long.output_folders import atomic_write
    >>> path = os.path.join(tempfile.mkdtemp(), "notes.txt")
    >>> atomic_write(path, lambda tmp: open(tmp, "w").write("done"))
    >>> open(path).read()
    'done'
    """
    path = os.fspath(path)
    try:
        with temporary(os.path.dirname(path), os.path.basename(path) + ".tmp-", suffix) as tmp:
            write(tmp)
            os.replace(tmp, path)
        note_written(path)
    except BaseException as error:
        if is_disk_full(error):
            raise disk_full(path) from None
        raise


def disk_full(path):
    """The one-line ``OSError(ENOSPC)`` of a write of ``path`` (a file, or a folder written whole) that found the
    disk full, after what it wrote was removed."""
    return OSError(errno.ENOSPC, f"Could not write {path!r}: the disk is full (nothing was left half written). Free "
                                 "some space and run the command again.")


@contextlib.contextmanager
def temporary(directory, prefix, suffix="", folder=False):
    """A new temporary file (``folder=True``: folder) ``directory/PREFIX<random>SUFFIX`` for the block to fill;
    whatever is left of it when the block ends is removed.

    It is created exclusively (``O_EXCL``: never an existing name, never through a link) with the permissions
    ``open`` and ``mkdir`` give (``0o666`` / ``0o777`` less the umask), which a file renamed into place keeps. In
    the output folder being written (`OutputFolder.writing`) its name is in the marker's record from before it
    is created until it is gone, with its inode once made: after a ``kill -9`` the next run removes it, and
    nothing else (`OutputFolder.remove_stale_temporaries`).
    """
    output = _WRITING.get()
    path = os.path.join(directory, f"{prefix}{secrets.token_hex(8)}{suffix}")
    check_unlinked(directory)
    held = output is not None and output.hold_temporary(path, folder)
    inode = None
    try:
        if folder:
            os.mkdir(path, 0o777)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        inode = os.lstat(path).st_ino
        if held:
            output.hold_temporary(path, folder, inode)
        yield path
    finally:
        if _still_created(path, folder, inode):
            _remove(path)
        if held:
            output.forget_temporary(path)


def _still_created(path, folder, inode):
    """Whether ``path`` is the file (or folder) with ``inode`` that bert4long created: not a link, not replaced."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return inode is not None and info.st_ino == inode and (stat.S_ISDIR if folder else stat.S_ISREG)(info.st_mode)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.remove(path)


def check_unlinked(folder):
    """Refuse (``ValueError``) to write in ``folder`` when it, or a folder on the way to it from the output folder
    being written, is a symbolic link: bert4long writes only inside its output folder, never through a link."""
    output = _WRITING.get()
    if output is not None:
        output.refuse_link(folder)


def remove_written(path):
    """Delete ``path``, a file or folder bert4long wrote; in the output folder being written only while its record
    lists every file under ``path`` as bert4long's and unchanged (else it is left as it is)."""
    output = _WRITING.get()
    if output is None or output.wrote(path):
        _remove(path)


def write_text_atomically(path, text):
    """`atomic_write` of a UTF-8 text file."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def _overlap(out, inputs):
    """The first input that ``out`` would overwrite or mix with, as ``(input, relation)``, or None.

    A folder is read whole, and so is the folder of a checkpoint prefix (``dir/bert_model.ckpt``, whose files are
    ``.index`` and ``.data-*``): ``out`` may not be inside either. Beside a file input it may.
    """
    for given in inputs:
        if not given:
            continue
        path = os.path.realpath(os.fspath(given))
        prefix = not os.path.exists(path) and os.path.exists(path + ".index")
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        if out == folder:
            return given, "is the folder of the input"
        if (os.path.isdir(path) or prefix) and out.startswith(folder + os.sep):
            return given, "is inside the input folder" if os.path.isdir(path) else "is inside the folder of the input"
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
    >>> from bert4long.output_folders import check_output_file
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


def note_written(*paths, growing=False):
    """Record ``paths`` (files, or folders bert4long just made) as bert4long's own in the output folder being written.

    Every writer of bert4long calls it after a write; it does nothing outside an
    `OutputFolder.writing` block or for paths outside that folder. This list, not a
    listing of the folder afterwards, is what ``--overwrite`` may later replace.
    ``growing``: files bert4long keeps appending to (TensorBoard's event files), recorded
    by name only.
    """
    folder = _WRITING.get()
    paths = [p for p in paths if not os.path.basename(os.fspath(p)).startswith(OWN_PREFIX)]   # (the marker itself)
    if folder is not None and paths:
        folder.record(*paths, growing=growing)


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


def folder_bytes(folder):
    """The bytes of every file at or under ``folder`` (links not followed), as ``du --apparent-size`` counts them.

    >>> folder_bytes("/no/such/folder")
    0
    """
    return sum(os.lstat(path).st_size for path in _files_under(folder))


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


def write_marker(folder, command, files=None, created=None, temporaries=None):
    """Mark ``folder`` as made by bert4long's ``command``; ``files``: ``{relative path: {size, sha256}}`` (or
    ``{growing: true}``) of what it wrote so far; ``temporaries``: ``{relative path: {folder, inode}}`` of the
    temporaries it is writing (the inode is None until made)."""
    write_text_atomically(os.path.join(folder, MARKER), json.dumps({
        "made_by": "bert4long", "command": command, "files": files or {}, "temporaries": temporaries or {},
        "created": created or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}, indent=2))


def _unchanged(path, entry):
    """Whether the file at ``path`` is still as its record ``entry`` says bert4long wrote it."""
    if not isinstance(entry, dict) or os.path.islink(path):
        return False
    if entry.get("growing"):
        return os.path.isfile(path)
    return _entry(path) == entry if "sha256" in entry else os.path.getsize(path) == entry.get("size")


def _temporary_left(folder, relative, entry):
    """Whether ``relative`` is still the temporary bert4long created there, as its record ``entry`` says: the same
    inode, never a link or anything reached through one (killed before the inode was recorded: still empty)."""
    path = os.path.join(folder, relative)
    if (not isinstance(entry, dict) or os.path.isabs(relative) or os.path.normpath(relative) != relative
            or relative.split(os.sep)[0] == os.pardir
            or os.path.realpath(path) != os.path.join(os.path.realpath(folder), relative)):
        return False
    if entry.get("inode") is not None:
        return _still_created(path, entry.get("folder"), entry["inode"])
    if entry.get("folder"):
        return os.path.isdir(path) and not os.listdir(path)
    return os.path.isfile(path) and os.path.getsize(path) == 0


def _sort_out(folder, marker):
    """``(owned, temporaries, foreign)`` of ``folder`` (relative paths): the files its ``marker`` records as
    bert4long's and still as written, the recorded temporaries still as bert4long created them (whatever is in
    them), and every other file. bert4long's hidden names at the top are neither. Markers of older versions listed
    top-level names (or null: nothing is known to be bert4long's)."""
    files = marker.get("files")
    left = sorted(t for t, e in (marker.get("temporaries") or {}).items() if _temporary_left(folder, t, e))
    left = [t for t in left if not any(t.startswith(other + os.sep) for other in left)]   # (one inside another)
    owned, foreign = [], []
    for path in _files_under(folder):
        relative = os.path.relpath(path, folder)
        if relative.split(os.sep)[0].startswith(OWN_PREFIX) or any(
                relative == t or relative.startswith(t + os.sep) for t in left):
            continue
        if isinstance(files, list):   # an older marker: top-level names
            mine = relative.split(os.sep)[0] in files
        else:
            mine = _unchanged(path, (files or {}).get(relative))
        (owned if mine else foreign).append(relative)
    return owned, left, foreign


def foreign_files(folder, marker):
    """The files under ``folder`` that its ``marker`` does not record as bert4long's (relative paths, sorted).

    Owned: a recorded file whose size (and, when recorded, sha256) still match, or that bert4long keeps growing;
    what is in a recorded temporary still as bert4long created it; bert4long's hidden names at the top. A name
    alone owns nothing.
    """
    return _sort_out(folder, marker)[2]


def _unwritable(path, error):
    return PermissionError(
        error.errno, f"Cannot write the output folder {path!r} ({_describe_write_error(error)}); nothing was done. "
                     "Choose a folder you can write to.")


class OutputFolder:
    """The output folder of one bert4long command, checked before any work is done.

    Args:
        path: the folder (``--out``).
        command: the command writing it (``'export'``, ``'pretrain'``, ``'pretrain --demo'``, ...), recorded in
            its marker: a folder of one command is never taken for another's.
        inputs: paths the command reads (files, checkpoint prefixes, folders); the
            output may not be, be inside (for folders and a prefix's folder), or contain any of them.
        overwrite: replace a folder bert4long made earlier.
        resume: accept a folder of an earlier run of the same ``command`` as it is.

    Use it as a context manager for one-shot outputs: the block writes into the
    yielded staging folder, which becomes ``path`` when the block succeeds and is
    removed when it fails. Training runs, which write as they go, call `open_run`.

    Example:
    >>> import os, tempfile
    >>> from bert4long.output_folders import OutputFolder
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
        self._files, self._temporaries, self._created = {}, {}, None
        self.state = self.check()

    def check(self):
        """Refuse (``ValueError``) an output that would destroy something; else return
        ``'new'``, ``'empty'``, ``'resume'`` or ``'replace'``."""
        path = self.path
        if os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"Output folder {path!r} is a file, not a folder: choose a folder name "
                             "(a new or empty folder).")
        real = os.path.realpath(path)
        if real == PACKAGE or real.startswith(PACKAGE + os.sep):
            raise ValueError(f"Output folder {path!r} is inside the installed bert4long ({PACKAGE}): its files would "
                             "mix with bert4long's own and go with the next upgrade. Choose a folder outside it.")
        found = _overlap(real, self.inputs)
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
            self._temporaries = dict(marker.get("temporaries") or {})
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
                self._files, self._temporaries, self._created = {}, {}, None
            os.makedirs(self.path, exist_ok=True)
            if self.state == "resume":
                tempfile.TemporaryFile(dir=self.path).close()   # still writable?
                for relative in [*self._files, *self._temporaries]:   # (a folder it writes in, now a link?)
                    self.refuse_link(os.path.dirname(os.path.join(self.path, relative)))
            self._save()
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

    def record(self, *paths, growing=False):
        """Add ``paths`` (files, or folders bert4long made) to the marker's record (``growing``: by name only); forget
        recorded files now gone."""
        for given in paths:
            for path in _files_under(os.path.abspath(given)):
                relative = self._relative(path)
                if relative is not None:
                    self._files[relative] = {"growing": True} if growing else _entry(path)
        self._files = {k: v for k, v in self._files.items() if os.path.lexists(os.path.join(self.path, k))}
        self._save()

    def wrote(self, path):
        """Whether the record lists every file at or under ``path`` as bert4long's and unchanged (``path`` outside
        this folder: not this record's to say, True)."""
        path = os.path.abspath(path)
        if os.path.relpath(path, self.path).split(os.sep)[0] == os.pardir:
            return True
        if self.link_on_the_way(os.path.dirname(path)):
            return False
        return all(_unchanged(p, self._files.get(self._relative(p))) for p in _files_under(path))

    def link_on_the_way(self, folder):
        """The first of ``folder`` and the folders between it and this folder that is a symbolic link (its path), or
        None (none is, or ``folder`` is outside this folder)."""
        relative = os.path.relpath(os.path.abspath(folder), self.path)
        if relative.split(os.sep)[0] == os.pardir:
            return None
        step = self.path
        for part in relative.split(os.sep) if relative != os.curdir else []:
            step = os.path.join(step, part)
            if os.path.islink(step):
                return step
        return None

    def refuse_link(self, folder):
        """`check_unlinked` in this folder."""
        link = self.link_on_the_way(folder)
        if link:
            raise ValueError(f"Output folder {self.path!r}: {os.path.relpath(link, self.path)!r} in it is a link to "
                             f"{os.path.realpath(link)!r}, and bert4long writes only inside its output folder, never "
                             "through a link; nothing was written there. Replace the link by a folder, or choose "
                             "another output folder.")

    def hold_temporary(self, path, folder, inode=None):
        """Record the temporary file (or ``folder``) ``path`` before it is created, then with its ``inode``;
        False when it is not in this folder (nothing recorded)."""
        relative = self._relative(path)
        if relative is None:
            return False
        self._temporaries[relative] = {"folder": folder, "inode": inode}
        self._save()
        return True

    def forget_temporary(self, path):
        """Drop ``path`` from the record of temporaries (it was renamed into place or removed)."""
        self._temporaries.pop(self._relative(path), None)
        self._save()

    def _relative(self, path):
        """``path`` relative to this folder; None outside it and for bert4long's hidden names at the top."""
        relative = os.path.relpath(os.path.abspath(path), self.path)
        if relative.split(os.sep)[0] in (os.curdir, os.pardir) or relative.split(os.sep)[0].startswith(OWN_PREFIX):
            return None
        return relative

    def _save(self):
        write_marker(self.path, self.command, self._files, self._created, self._temporaries)

    def probe(self):
        """Check now, before any work, that the folder can be written (`PermissionError` naming it)."""
        shutil.rmtree(self.__enter__(), ignore_errors=True)
        self._staging = None

    def remove_stale_temporaries(self):
        """Delete the temporaries interrupted writes of bert4long left here: only those the marker records, and
        only while each is still the file or folder bert4long created (anything else under its name is yours)."""
        for relative, entry in list(self._temporaries.items()):
            if _temporary_left(self.path, relative, entry):
                _remove(os.path.join(self.path, relative))
            del self._temporaries[relative]
        self._save()

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
        except OSError as failure:   # (the commit's own: told like the block's below when the disk is full)
            if not is_disk_full(failure):
                raise
            error = failure
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if error is not None and is_disk_full(error):   # (the staging folder is gone: nothing half written is left)
            raise disk_full(self.path) from None
        return False

    def _remove_recorded(self):
        """Delete what the marker records as bert4long's (after `check` found nothing else), then empty folders."""
        owned, temporaries, _ = _sort_out(self.path, read_marker(self.path) or {})
        doomed = owned + temporaries
        old = tempfile.mkdtemp(prefix=OWN_PREFIX + "old-", dir=self.path)
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
