"""Who may write an output: one lock per output, used by every writer (data generation, the
corpus, the vocabulary, training and fine-tuning runs, exports).

A lock is a small hidden file beside (or inside) the output that names its holder: host, pid,
command and start time. It is held with `flock` for as long as the writer runs, so

- a second writer of the same output is refused at once, with the holder named, while the
  holder lives (two runs into one `--output_dir` would otherwise interleave their checkpoints,
  and two data generations into one `--output_file` their shards);
- a holder that died (killed, crashed, its machine rebooted) holds nothing: the kernel drops
  its `flock`, and the next writer takes the lock over (and says whose it took over). Nothing
  has to be cleaned by hand.

Where the output is a directory (a run's `--output_dir`, an export's `BASE/NAME`) the lock is
`DIR/.albert_tf.lock`; for a file (`corpus.txt`, `spm.model`, a TFRecord prefix) it is
`.NAME.lock` beside it. Dot names keep the locks out of every glob (`train*`, `*.model`).

A process may take the same lock more than once (a command that locks its `--output_dir` and
then runs a `TrainingRun`, which locks it again): the lock is counted and released with the
last holder.

Remote outputs (`gs://...`) cannot be `flock`ed: there the lock is a lease, a file whose holder
rewrites it every `LEASE_REFRESH_S`; a lease not renewed for `LEASE_STALE_S` belongs to a dead
holder and is taken over. Two writers that start within the same moment can both miss each
other's new lease (object stores have no exclusive create); everything else holds.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import shutil
import socket
import sys
import threading
import time

from albert_tf.paths import gfile

LOCK_NAME = ".albert_tf.lock"
LEASE_REFRESH_S = 60.0
LEASE_STALE_S = 600.0
HOLDER_RECORD_WAIT_S = 2.0


class OutputLockedError(ValueError):
    """Another live process writes this output; the message names it and what to do."""


def lock_path(target: str, is_dir: bool) -> str:
    """The lock file of the output `target`: `DIR/.albert_tf.lock` for a directory,
    `.NAME.lock` beside a file."""
    target = target.rstrip("/") or "/"
    if is_dir:
        return f"{target}/{LOCK_NAME}" if "://" in target else os.path.join(target, LOCK_NAME)
    head, name = (target.rsplit("/", 1) if "://" in target else os.path.split(target))
    lock = f".{name}.lock"
    return f"{head}/{lock}" if "://" in target else os.path.join(head or ".", lock)


def _command_line() -> str:
    """This process's command as a person would type it (`python -m albert_tf.data.prepare_corpus
    ...`, `albert-pretrain ...`), for the refusal that names the holder."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        program = f"python -m {spec.name.removesuffix('.__main__')}"
    elif sys.argv and sys.argv[0] == "-c":
        program = "python -c"
    else:
        program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return " ".join([program] + sys.argv[1:])[:500]


def _holder_record(what: str) -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "command": _command_line(),
            "what": what,
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "heartbeat": time.time()}


def _describe(holder: dict) -> str:
    if not holder:
        return "another process"
    return (f"{holder.get('command', '?')} (pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')}, since {holder.get('since', '?')})")


def _parse(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _read_holder(fd, wait_s: float = HOLDER_RECORD_WAIT_S) -> dict:
    """The record of the live holder of the locked file `fd`. A holder writes its record just
    after it takes the lock, so a writer refused in that moment finds the file empty (or still
    naming a dead holder before it): it waits up to `wait_s` for the record to name a live
    process (two commands started together named their rival "another process")."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = _parse(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
        settled = holder and (holder.get("host") != socket.gethostname()
                              or _pid_alive(holder.get("pid")))
        if settled or time.monotonic() >= deadline:
            return holder
        time.sleep(0.02)


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    return True


class _Held:
    """One lock this process holds (re-entrant: `count` holders)."""

    def __init__(self, path, fd=None, lease_stop=None, created=()):
        self.path, self.fd, self.lease_stop, self.count = path, fd, lease_stop, 1
        self.created = created  # directories made to hold the lock, deepest first


_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()


class OutputLock:
    """The lock of one output. `acquire()` / `release()`, or `with OutputLock(...):`.

    Args:
        target: the output: a directory (`is_dir=True`) or a file (or a file prefix).
        what: names the output in messages ("--output_dir", "the export BASE/NAME").
        is_dir: whether `target` is a directory (created if missing, to hold the lock).
        fix: what the refused writer can do instead (default: choose another `what`).
    """

    def __init__(self, target: str, what: str, is_dir: bool, fix: str | None = None):
        self.target = os.fspath(target)
        self.what = what
        self.is_dir = is_dir
        self.fix = fix or f"choose another {what}"
        self.path = lock_path(self.target, is_dir)
        self._key = self.path if "://" in self.path else os.path.abspath(self.path)
        self.taken_over: dict | None = None  # the dead holder this acquire replaced, if any
        self._mine = False

    # ------------------------------------------------------------------------------------------
    def acquire(self) -> "OutputLock":
        if self._mine:
            return self
        with _GUARD:
            held = _HELD.get(self._key)
            if held is not None:
                held.count += 1
                self._mine = True
                return self
            if "://" in self.path:
                held = self._acquire_lease()
            else:
                held = self._acquire_local()
            _HELD[self._key] = held
            self._mine = True
        return self

    def release(self) -> None:
        if not self._mine:
            return
        self._mine = False
        with _GUARD:
            held = _HELD.get(self._key)
            if held is None:
                return
            held.count -= 1
            if held.count > 0:
                return
            del _HELD[self._key]
            if held.lease_stop is not None:
                held.lease_stop.set()
                _remove_remote(held.path)
            else:
                # Unlinked while still locked, then closed: a writer that opened the old file
                # meanwhile finds it is no longer the one at `path` and opens again.
                try:
                    os.unlink(held.path)
                except OSError:
                    pass
                os.close(held.fd)
                for directory in held.created:  # left empty: nothing was written
                    try:
                        os.rmdir(directory)
                    except OSError:
                        break

    def discard_new_output(self) -> bool:
        """Where this process's acquire created the output directory (it did not exist), removes
        everything in it but the lock, so that the release removes the directory and the
        parents the acquire made: a command that failed before writing anything of value (an
        unreadable --init_checkpoint) leaves no new directory behind. An output that existed
        before is never touched. Returns whether it removed anything."""
        with _GUARD:
            held = _HELD.get(self._key)
        target = os.path.abspath(self.target)
        if not (self._mine and self.is_dir and held is not None and held.fd is not None
                and target in held.created):
            return False
        for name in os.listdir(target):
            path = os.path.join(target, name)
            if name == LOCK_NAME:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        return True

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

    # ------------------------------------------------------------------------------------------
    def _refuse(self, holder: dict):
        raise OutputLockedError(
            f"{self.what} {self.target} is being written by {_describe(holder)}. Wait for it "
            f"to finish, or {self.fix}. (A holder that has died holds nothing: rerun then and "
            f"its lock, {self.path}, is taken over.)")

    def _acquire_local(self) -> _Held:
        directory = os.path.dirname(self.path)
        created, missing = [], os.path.abspath(directory)
        while missing and not os.path.exists(missing):
            created.append(missing)
            missing = os.path.dirname(missing)
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise OutputLockedError(f"Cannot create {self.what} {directory}: "
                                    f"{e.strerror}; {self.fix}.") from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError as e:
                raise OutputLockedError(
                    f"Cannot write {self.what} {self.target}: {e.strerror} ({self.path}); "
                    f"{self.fix}.") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                self._refuse(holder)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous holder removed it as we opened it: try again
        previous = _parse(os.pread(fd, 65536, 0).decode("utf-8", "replace"))
        if previous and previous.get("pid") != os.getpid():
            self.taken_over = previous
            print(f"note: {self.what} {self.target} was locked by {_describe(previous)}, "
                  "which is gone; its lock is taken over.", file=sys.stderr, flush=True)
        data = json.dumps(_holder_record(self.what)).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return _Held(self.path, fd=fd, created=tuple(created))

    def _acquire_lease(self) -> _Held:
        remote = gfile()
        if self.is_dir:
            remote.makedirs(self.target)
        if remote.exists(self.path):
            with remote.GFile(self.path) as f:
                holder = _parse(f.read())
            age = time.time() - float(holder.get("heartbeat", 0) or 0)
            ours = holder.get("host") == socket.gethostname() and holder.get("pid") == os.getpid()
            same_host_dead = (holder.get("host") == socket.gethostname()
                              and not _pid_alive(holder.get("pid")))
            if not ours and age < LEASE_STALE_S and not same_host_dead:
                self._refuse(holder)
            if holder and not ours:
                self.taken_over = holder
                print(f"note: {self.what} {self.target} was locked by {_describe(holder)}, "
                      "whose lease has expired; it is taken over.", file=sys.stderr, flush=True)
        stop = threading.Event()
        record = _holder_record(self.what)

        def write():
            record["heartbeat"] = time.time()
            with remote.GFile(self.path, "w") as f:
                f.write(json.dumps(record))

        write()

        def renew():
            while not stop.wait(LEASE_REFRESH_S):
                try:
                    write()
                except Exception:  # a transient store error; the next renewal retries
                    pass

        threading.Thread(target=renew, daemon=True, name="albert_tf-lease").start()
        return _Held(self.path, lease_stop=stop)


def _remove_remote(path: str) -> None:
    try:
        gfile().remove(path)
    except Exception:
        pass


def current_umask() -> int:
    """The process's umask (read without changing it where /proc tells it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    with _GUARD:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


class OutputPathError(ValueError):
    """An output path that cannot hold a file this command writes; the message names it."""


_SPECIAL_ROOTS = ("/dev", "/proc", "/sys")


def regular_output(path: str, flag: str) -> str:
    """The file to write for the output `path`: `path` itself or, for a symbolic link, the file
    it points to (written there, the link kept). Refuses what is not, or would not become, a
    regular file: a directory, a device, a pipe, a terminal, anything under /dev, /proc or /sys
    (`/dev/stdout` included, whatever it points to), so that no writer turns a device into a
    file or a link of the system into one of its outputs."""
    absolute, real = os.path.abspath(path), os.path.realpath(path)
    special = [p for p in _link_chain(absolute) + [real]
               if any(p == root or p.startswith(root + "/") for root in _SPECIAL_ROOTS)]
    if special or (os.path.exists(real) and not os.path.isdir(real)
                   and not os.path.isfile(real)):
        raise OutputPathError(f"{flag} {path} is not a regular file (a device, a pipe, a "
                              "terminal or a file of the system); name a file.")
    if os.path.isdir(real):
        raise OutputPathError(f"{flag} {path} is a directory; name a file.")
    return real


def _link_chain(path: str, hops: int = 40) -> list[str]:
    """`path` and every path its symbolic links lead through (a link into /proc, such as
    /dev/stdout -> /proc/self/fd/1, is seen before it resolves to whatever fd 1 is)."""
    chain = [path]
    while os.path.islink(chain[-1]) and len(chain) <= hops:
        target = os.readlink(chain[-1])
        chain.append(os.path.normpath(os.path.join(os.path.dirname(chain[-1]), target)))
    return chain


def same_file(a: str, b: str) -> bool:
    """Whether the paths `a` and `b` name one file (symbolic and hard links included); False
    when either does not exist."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
