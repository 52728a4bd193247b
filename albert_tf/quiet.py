"""Keeps TensorFlow's start-up noise out of our commands' terminals.

Importing TensorFlow (and tensorflow-text's op libraries) on a machine without a GPU prints lines
such as `Could not find cuda drivers on your machine, GPU will not be used.` and
`WARNING: All log messages before absl::InitializeLog() is called are written to STDERR` from
C++, before absl logging is initialised, so `TF_CPP_MIN_LOG_LEVEL` does not silence them; the
first op then logs `failed call to cuInit`. They are not errors and they bury a command's own
output.

`install()` routes file descriptor 2 through a pipe whose reader (a small forked process) drops
exactly those lines (the patterns below) and passes everything else through unchanged, line by
line: warnings, errors
and tracebacks still reach the terminal. Our commands call it before TensorFlow is imported:
`python -m albert_tf.…`, `python -m data.…` and `python -m export.…` through the packages'
`__init__` (`install_for_module_commands`), the console scripts through `albert_tf.cli`.
Importing the library from your own code changes nothing. `ALBERT_TF_VERBOSE=1` turns the
filter off.
"""

from __future__ import annotations

import atexit
import gc
import os
import re
import sys
import signal
import time

# C++ log lines TensorFlow prints on every start on a machine without CUDA (glog prefix:
# severity, date, time, thread, file:line).
_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IWE]\d{4} [\d:.]+\s+\d+ (port\.cc|cudart_stub\.cc|cpu_feature_guard\.cc|cuda_platform\.cc"
    r"|cuda_executor\.cc|cuda_diagnostics\.cc|cuda_dnn\.cc|cuda_fft\.cc|cuda_blas\.cc"
    r"|dso_loader\.cc|gpu_device\.cc|gpu_timer\.cc|rocm_platform\.cc):\d+\] .*"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate "
    r"compiler flags\.)$")

_state = {"pid": None}


def is_noise(line: str) -> bool:
    """Whether `line` (without its newline) is one of TensorFlow's start-up lines."""
    return bool(_NOISE.match(line.rstrip("\r\n")))


def _pump(read_fd: int, out_fd: int) -> None:
    pending = b""
    while True:
        try:
            chunk = os.read(read_fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        kept = [line for line in lines if not is_noise(line.decode("utf-8", "replace"))]
        if kept:
            _write_all(out_fd, b"\n".join(kept) + b"\n")
    if pending and not is_noise(pending.decode("utf-8", "replace")):
        _write_all(out_fd, pending)
    os.close(read_fd)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


def install() -> bool:
    """Filters TensorFlow's start-up lines out of this process's stderr (fd 2). Idempotent.

    The filter is a forked process reading a pipe that becomes fd 2 (of this process and of the
    processes it starts): it outlives a crash of this process, so an abort's last words still
    arrive, and ends when the last writer closes the pipe. Also sets `TF_CPP_MIN_LOG_LEVEL=2`
    unless it is set. Returns whether the filter is on.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if _state["pid"] is not None:
        return True
    if os.environ.get("ALBERT_TF_VERBOSE", "") not in ("", "0") or not hasattr(os, "fork"):
        return False
    try:
        sys.stderr.flush()
        original = os.dup(2)
        read_fd, write_fd = os.pipe()
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
            _pump(read_fd, original)
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


def skip_exit_collection() -> None:
    """Makes this process's exit skip the interpreter's final garbage collections. Idempotent.

    Registered before TensorFlow is imported, the handler runs after every other exit handler
    and freezes the heap (`gc.freeze`), so the collections that interpreter shutdown runs do not
    traverse TensorFlow's objects again: 0.75 s off the exit after a bare import, 2.6 s after
    loading a SavedModel (BUILD.md, design notes). Objects are still released as modules are
    cleared; only garbage in reference cycles left at exit is not finalized (our commands close
    their files and flush their writers themselves).
    """
    if not _state.get("exit_collection_skipped"):
        _state["exit_collection_skipped"] = True
        atexit.register(gc.freeze)


def install_for_module_commands() -> None:
    """`install()` and `skip_exit_collection()` when this interpreter is starting one of our
    modules (`python -m pkg.mod`).

    While `-m` imports the module's packages, `sys.argv[0]` is "-m"; any other import of the
    packages (your code, a notebook, pytest) leaves stderr and exit alone.
    """
    if sys.argv[:1] == ["-m"]:
        skip_exit_collection()
        install()
