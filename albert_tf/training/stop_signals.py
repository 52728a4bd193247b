"""SIGTERM and Ctrl-C during training: the first asks for a stop, the second ends the process.

Python runs a signal handler only when the main thread executes Python code, and a loop of
`iterations_per_loop` steps is one `tf.function` call that can run for minutes: a handler
alone would see both signals only after the loop, and the second could not stop anything. So
the signals also go, byte by byte, to a pipe (`signal.set_wakeup_fd`, written by the
interpreter's C-level handler on every delivery) that a thread reads at once: the first signal
is acknowledged on stderr and recorded (the controller saves at the end of the loop and stops);
the second restores the system's default action and raises the signal again, so the process
ends there, with the status of that signal, without saving: the last checkpoint stays intact.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

_MESSAGES = {
    signal.SIGINT: "\nCtrl-C: the run saves a checkpoint at the end of this loop of steps and "
                   "stops (Ctrl-C again stops now, without saving).",
    signal.SIGTERM: "\nSIGTERM: the run saves a checkpoint at the end of this loop of steps and "
                    "stops (SIGTERM again stops now, without saving).",
}


def _die_of(signum: int):
    """End the process as `signum`'s default action would (from any thread: Python's
    `signal.signal` may only be called from the main one, so libc's is called)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(signum, ctypes.c_void_p(0))  # SIG_DFL
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the kernel ends the process before this returns
    except (OSError, AttributeError):
        pass
    os._exit(128 + signum)  # no libc to call: exit with the shell's status for the signal


class StopSignals:
    """`with StopSignals(signals) as stop:` — while inside, `stop.requested` is the name of the
    first of `signals` received (None before); a second one of the same signal ends the
    process. Outside the main thread it installs nothing (Python allows handlers only there)."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
        self.signals = tuple(signals)
        self.requested = None
        self._received = {}
        self._lock = threading.Lock()
        self._previous = {}
        self._previous_fd = None
        self._pipe = None
        self._reader = None

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handler)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the C handler must never block
        self._pipe = (read_fd, write_fd)
        self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._reader = threading.Thread(target=self._read, name="stop-signals", daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc):
        if self._pipe is None:
            return False
        signal.set_wakeup_fd(self._previous_fd)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        os.close(self._pipe[1])  # the reader sees the end of the pipe and returns
        self._reader.join()
        os.close(self._pipe[0])
        self._pipe = None
        return False

    def _read(self):
        while True:
            try:
                data = os.read(self._pipe[0], 64)
            except InterruptedError:
                continue
            if not data:
                return
            for signum in data:
                if signum in self.signals:
                    self._receive(signum)

    def _handler(self, signum, frame):
        """The Python-level handler (run by the main thread between Python statements): the
        reader thread has already counted this delivery; here only the request is recorded,
        for a process whose wakeup descriptor was replaced by someone else."""
        with self._lock:
            if self.requested is None:
                self.requested = signal.Signals(signum).name

    def _receive(self, signum: int):
        with self._lock:
            count = self._received[signum] = self._received.get(signum, 0) + 1
            if self.requested is None:
                self.requested = signal.Signals(signum).name
        if count == 1:
            print(_MESSAGES.get(signum, f"\n{signal.Signals(signum).name}: stopping at the end "
                                        "of this loop of steps."), file=sys.stderr, flush=True)
        else:
            _die_of(signum)
