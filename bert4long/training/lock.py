"""One run per output folder: a lock file created exclusively, naming the process that holds it."""
import json
import os
import socket
import time

LOCK_NAME = ".bert4long-run.lock"


class RunInProgress(FileExistsError):
    """Another live process holds the run lock of this output folder."""


def _possible_pid(pid):
    """True for a number that can be a process id anywhere: an int (not a bool) from 1 to 2**31 - 1 (``pid_t``).

    >>> [_possible_pid(p) for p in (1, 0, -5, 2**31, "12", True, 1.5)]
    [True, False, False, False, False, False, False]
    """
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31


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
    this host is taken over, with a message, and so is a whole lock (a JSON object)
    whose pid cannot be a process (zero, negative, past ``pid_t``, text, missing):
    no live run wrote it, so refusing would only send the user to delete it by hand.
    A lock that cannot be read (empty or cut short: a run may be writing it this
    moment) is judged by its age: taken over after 60 seconds. Taking the lock again in the
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
        """The lock's JSON object; ``{"unreadable": True, "age": seconds}`` when it cannot be read; None without one."""
        try:
            with open(self.path, encoding="utf-8") as f:
                holder = json.load(f)
            if isinstance(holder, dict):
                return holder
        except FileNotFoundError:
            return None
        except (OSError, ValueError):   # being written, or left half written by a crash
            pass
        try:   # unreadable, or not a lock bert4long wrote: judged by its age
            return {"unreadable": True, "age": time.time() - os.path.getmtime(self.path)}
        except FileNotFoundError:
            return None

    @staticmethod
    def _stale(holder, host):
        """True when no live run can hold the lock ``holder`` (`_holder`) on ``host``."""
        if holder.get("unreadable"):
            return holder["age"] > 60
        if not _possible_pid(holder.get("pid")):
            return True
        return holder.get("host") == host and not _alive(holder["pid"])

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
            unchanged = current == holder or (current is not None and current.get("unreadable")
                                              and holder.get("unreadable"))
            if unchanged:   # (an unreadable lock's age changes between reads: it is the same if still unreadable)
                why = ("its run is no longer running" if _possible_pid(holder.get("pid"))
                       else "it names no process that can be running")
                print(f"Taking over the lock of {self.folder!r}: {why} (process {holder.get('pid')!r}).",
                      flush=True)
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
                if not self._stale(holder, me["host"]):
                    where = ("a process" if holder.get("unreadable")
                             else f"process {holder['pid']} on {holder.get('host') or 'an unnamed host'}")
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
