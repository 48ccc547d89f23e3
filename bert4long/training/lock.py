"""One run per output folder: a lock file created exclusively, naming the process that holds it."""
import json
import os
import socket
import time

LOCK_NAME = ".bert4long-run.lock"


class RunInProgress(FileExistsError):
    """Another live process holds the run lock of this output folder."""


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # exists, owned by someone else
        return True
    return True


class RunLock:
    """Hold ``folder/.bert4long-run.lock`` (``O_EXCL``) while a run writes into ``folder``.

    A second run on the same folder gets `RunInProgress` naming the holder's
    process id and host. A lock left by a process that is no longer running on
    this host is taken over, with a message. Taking the lock again in the
    process that holds it is a no-op, so a command and the training loop inside it
    can both take it.

    Example:
    >>> import tempfile
    >>> from bert4long.training.lock import RunLock
    >>> with RunLock(tempfile.mkdtemp()) as lock:
    ...     lock.held
    True
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = os.path.abspath(os.fspath(folder))
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.held = False
        self._owner = False

    def _holder(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                holder = json.load(f)
            if isinstance(holder, dict) and isinstance(holder.get("pid"), int) and holder["pid"] > 0:
                return holder
        except FileNotFoundError:
            return None
        except (OSError, ValueError):   # being written, or left half written by a crash
            pass
        try:   # unreadable, or not a lock bert4long wrote (no numeric pid): judged by its age
            return {"pid": None, "age": time.time() - os.path.getmtime(self.path)}
        except FileNotFoundError:
            return None

    def _take_over(self, holder):
        """Remove the stale lock ``holder`` read, unless another process took it over first.

        Only the process that creates ``LOCK.takeover`` (``O_EXCL``) may remove the lock, and it removes
        it only if the lock still holds what was judged stale, so two processes cannot both win.
        """
        guard = self.path + ".takeover"
        try:
            os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            try:
                if time.time() - os.path.getmtime(guard) > 60:   # left by a process killed while taking over
                    os.remove(guard)
            except FileNotFoundError:
                pass
            time.sleep(0.05)
            return
        try:
            current = self._holder()
            unchanged = current == holder or (current is not None and current["pid"] is None and holder["pid"] is None)
            if unchanged:   # (an unreadable lock's age changes between reads: it is the same if still unreadable)
                print(f"Taking over the lock of {self.folder!r}: its run (process {holder.get('pid')}) is no "
                      "longer running.", flush=True)
                os.remove(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.remove(guard)

    def acquire(self) -> "RunLock":
        os.makedirs(self.folder, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        while True:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                holder = self._holder()
                if holder is None:
                    continue   # released meanwhile
                if holder.get("pid") == me["pid"] and holder.get("host") == me["host"]:
                    self.held = True   # this process holds it already
                    return self
                stale = (holder.get("host") == me["host"] and not _alive(holder["pid"])) if holder.get("pid") \
                    else holder.get("age", 0) > 60
                if not stale:
                    where = f"process {holder.get('pid')} on {holder.get('host')}" if holder.get("pid") else "a process"
                    raise RunInProgress(
                        f"Another run is writing to {self.folder!r} ({where}, lock file {self.path!r}). Wait for it "
                        "to finish or choose another --out; if that run is gone (another machine), delete the "
                        "lock file.") from None
                self._take_over(holder)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({**me, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, f)
            self.held = self._owner = True
            return self

    def release(self) -> None:
        if self._owner:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
        self.held = self._owner = False

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> bool:
        self.release()
        return False
