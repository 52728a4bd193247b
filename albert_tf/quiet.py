"""Keeps TensorFlow's start-up lines out of our commands' terminals, and nothing else.

TensorFlow's own switch comes first: our commands set `TF_CPP_MIN_LOG_LEVEL=2` (unless you set
it), which silences its C++ INFO and WARNING logs once absl logging is initialised. A handful of
lines are printed *before* that, on every start on a machine without a GPU, and no switch
reaches them:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 ... port.cc:153] oneDNN custom operations are on. You may see slightly different ...
    I0000 ... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not ...
    I0000 ... cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use available ...
    To enable the following instructions: AVX2 AVX512F ..., rebuild TensorFlow with the ...
    E0000 ... cuda_platform.cc:52] failed call to cuInit: ... (only where there is no GPU)

`install()` routes file descriptor 2 through a small forked filter that drops exactly these
messages (matched by their text, not by the file that logs them: any other line from the same
files, at any severity, passes) and passes everything else through unchanged and in order:
warnings, errors, tracebacks. `failed call to cuInit` is dropped only on a machine with no
NVIDIA device node; where a GPU exists it is a real error and is shown. When stderr is a
terminal the filter reads a pseudo-terminal, so programs still see a terminal (progress lines
redraw in place), and a partial line (a progress update ending in a carriage return) is passed
on at once instead of waiting for its newline. What the filter cannot promise: lines written to
stdout and stderr at the same instant may reach a shared terminal in the other order (they
travel separately, as they do through any pipe).

It is installed by the command layer only: the console scripts (`albert_tf.commands.cli`) and
`python -m` of an entry module (`entry_point(__name__)` at its top). The Python API gets the
same lines dropped for the import only: the first use of a model class from the package
(`from albert_tf import AlbertTextClassifier`, `albert_tf.AlbertBackbone`, ...) imports
TensorFlow through `import_tensorflow`, which passes fd 2 through the same filter for the
import and the device probe that prints the cuInit line; fd 2 is the program's own again
before the class is returned. A program that imported TensorFlow
itself first has seen the lines already. `ALBERT_TF_VERBOSE=1` turns both off.
"""

from __future__ import annotations

import atexit
import gc
import glob
import os
import re
import signal
import sys
import time

# The pre-initialisation lines, by their message (glog prefix: severity, date, time, thread,
# file:line). Only INFO/WARNING lines, and the cuInit error where there is no GPU.
_PREFIX = r"[IW]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] "
_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rf"|{_PREFIX}oneDNN custom operations are on\. .*"
    rf"|{_PREFIX}Could not find cuda drivers on your machine, GPU will not be used\."
    rf"|{_PREFIX}This TensorFlow binary is optimized to use available CPU instructions in "
    r"performance-critical operations\."
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate "
    r"compiler flags\.)$")
_NO_GPU_NOISE = re.compile(
    r"^E\d{4} [\d:.]+\s+\d+ cuda_(platform|executor)\.cc:\d+\] failed call to cuInit: .*$")

_state = {"pid": None}


def has_nvidia_device() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def is_noise(line: str, gpu_present: bool | None = None) -> bool:
    """Whether `line` (without its line ending) is one of TensorFlow's start-up lines."""
    line = line.rstrip("\r\n")
    if _NOISE.match(line):
        return True
    if gpu_present is None:
        gpu_present = has_nvidia_device()
    return not gpu_present and bool(_NO_GPU_NOISE.match(line))


def _pump(read_fd: int, out_fd: int, gpu_present: bool) -> None:
    """Copies `read_fd` to `out_fd`, dropping noise lines. A chunk that ends without a newline
    is passed on at once when it cannot be the start of a noise line (a progress update), so
    nothing waits for a newline that may never come."""
    pending = b""
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except OSError:  # EIO: the pseudo-terminal's last writer closed it
            chunk = b""
        if not chunk:
            break
        pending += chunk
        *lines, pending = re.split(rb"(?<=\n)", pending)
        kept = [line for line in lines
                if not is_noise(line.decode("utf-8", "replace"), gpu_present)]
        if pending and not _may_become_noise(pending):
            kept.append(pending)
            pending = b""
        if kept:
            _write_all(out_fd, b"".join(kept))
    if pending and not is_noise(pending.decode("utf-8", "replace"), gpu_present):
        _write_all(out_fd, pending)
    os.close(read_fd)


def _may_become_noise(partial: bytes) -> bool:
    """Whether an unfinished line could still turn out to be a noise line (it starts like one)."""
    text = partial.decode("utf-8", "replace")
    if "\r" in text:
        return False
    starts = ("WARNING: All log", "To enable the following")
    return bool(re.match(r"^[IWE]\d{0,4}( [\d:.]*)?", text)) or any(
        s.startswith(text) or text.startswith(s) for s in starts)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


def _channel(original: int) -> tuple[int, int]:
    """(read end, write end): a pseudo-terminal in raw mode when stderr is a terminal (so the
    command still sees one), else a pipe."""
    if os.isatty(original):
        try:
            import tty

            master, slave = os.openpty()
            tty.setraw(slave)
            try:  # the terminal's size, so a progress bar (`albert_tf.training.progress`) fits it
                import fcntl
                import termios

                size = fcntl.ioctl(original, termios.TIOCGWINSZ, b"\0" * 8)
                fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
            except OSError:
                pass
            return master, slave
        except OSError:
            pass
    return os.pipe()


def install() -> bool:
    """Filters TensorFlow's start-up lines out of this process's stderr (fd 2). Idempotent.

    The filter is a forked process reading the pipe (or pseudo-terminal) that becomes fd 2 of
    this process and of the processes it starts: it outlives a crash of this process, so an
    abort's last words still arrive, and ends when the last writer closes it. Also sets
    `TF_CPP_MIN_LOG_LEVEL=2` unless it is set. Returns whether the filter is on.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if _state["pid"] is not None:
        return True
    if _verbose() or not hasattr(os, "fork"):
        return False
    gpu_present = has_nvidia_device()
    try:
        sys.stderr.flush()
        original = os.dup(2)
        read_fd, write_fd = _channel(original)
        pid = os.fork()
    except OSError:  # no fd 2 (some embedded interpreters), no fork: nothing to filter
        return False
    if pid == 0:  # the filter: reads until every writer is gone, then exits
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the command, not this
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.close(write_fd)
            for fd in (0, 1, 2):
                try:
                    os.close(fd)
                except OSError:
                    pass
            _pump(read_fd, original, gpu_present)
        finally:
            os._exit(0)
    os.close(read_fd)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    os.set_inheritable(original, False)
    _state["pid"] = pid

    def restore():
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(original, 2)  # this process's end of the pipe closes
        _stop_resource_tracker()  # another writer that would otherwise outlive this process
        deadline = time.monotonic() + 2.0  # a child still holding the pipe must not block exit
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            time.sleep(0.005)

    atexit.register(restore)
    return True


def _verbose() -> bool:
    return os.environ.get("ALBERT_TF_VERBOSE", "") not in ("", "0")


def import_tensorflow() -> None:
    """Imports TensorFlow and probes its devices with this process's fd 2 passed through the
    filter (`_pump` in a forked process, as `install` does), then gives fd 2 back: the start-up
    lines (`is_noise`) are dropped, everything else arrives in order, and what TensorFlow
    prints before it aborts (a CPU without the instructions the wheel needs) still arrives,
    the filter outliving this process. Does nothing when TensorFlow is imported already, the
    filter is on (`install`) or `ALBERT_TF_VERBOSE` is set; without fork or fd 2, a plain
    import. Sets `TF_CPP_MIN_LOG_LEVEL=2` unless it is set. The device probe
    (`tf.config.list_physical_devices`) is what prints the cuInit line; it leaves the devices
    and threads configurable (`tf.config.set_visible_devices` still works after it)."""
    if "tensorflow" in sys.modules or _state["pid"] is not None or _verbose():
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    gpu_present = has_nvidia_device()
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
        saved = os.dup(2)
        read_fd, write_fd = os.pipe()
        pid = os.fork() if hasattr(os, "fork") else None
    except (OSError, ValueError, AttributeError):  # no fd 2, no fork: nothing to filter
        pid = None
        saved = None
    if pid == 0:  # the filter: reads until every writer is gone, then exits
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.close(write_fd)
            _pump(read_fd, saved, gpu_present)
        finally:
            os._exit(0)
    if pid is None:
        if saved is not None:
            for fd in (saved, read_fd, write_fd):
                os.close(fd)
        import tensorflow  # noqa: F401
        return
    os.close(read_fd)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        import tensorflow as tf

        tf.config.list_physical_devices()
    finally:
        try:
            if sys.stderr is not None:
                sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # the pipe's last writer closes: the filter writes out and ends
        os.close(saved)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _stop_resource_tracker() -> None:
    """Stops multiprocessing's resource tracker, if this process started one (spawned worker
    pools do). It inherited fd 2 and lives until this process has exited, so the filter would
    see the pipe close only then, and every command with worker processes waited out the
    2 s deadline at exit (measured: data generation with 2 workers, 7.4 s instead of 5.0 s).
    Stopping it runs its usual clean-up now (`ResourceTracker._stop`, CPython 3.8+)."""
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    stop = getattr(getattr(tracker, "_resource_tracker", None), "_stop", None)
    if stop is not None:
        try:
            stop()
        except Exception:  # noqa: BLE001 - never fail an exit over it
            pass


def skip_exit_collection() -> None:
    """Makes this process's exit skip the interpreter's final garbage collections. Idempotent.

    Registered before TensorFlow is imported, the handler runs after every other exit handler
    and freezes the heap (`gc.freeze`), so the collections that interpreter shutdown runs do not
    traverse TensorFlow's objects again (bench/ measures the exit time). Objects are still
    released as modules are cleared; only garbage in reference cycles left at exit is not
    finalized (our commands close their files and flush their writers themselves).
    """
    if not _state.get("exit_collection_skipped"):
        _state["exit_collection_skipped"] = True
        atexit.register(gc.freeze)


def entry_point(module_name: str) -> None:
    """First line of an entry module: when it runs as the program (`python -m`, module_name
    "__main__"), the command-layer settings: `KERAS_BACKEND=tensorflow`, the filter, the exit
    without final collections. Imported as a library module, it does nothing."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if module_name == "__main__":
        skip_exit_collection()
        install()
