"""One progress display for every long job (data generation, training; the demo shows its
commands' lines): a `tqdm` bar on a terminal, plain lines elsewhere.

On a terminal (stderr is a TTY; `albert_tf.quiet`'s filter keeps it one) the bar redraws in
place with the job's figures beside it (`update(..., loss="2.31")`), and messages go above it
(`write`). Off a terminal (a log file, a pipe, CI, the demo reading its commands' output) there
is no redrawing: one whole line per update that is at least `every` seconds after the last (0:
every update), with the same figures, the rate and the ETA, so a log reads as a log.
"""

from __future__ import annotations

import math
import os
import sys
import time

from tqdm import tqdm


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def _is_terminal(file) -> bool:
    """A terminal with a known width (a pseudo-terminal of width 0, as some job runners open,
    would draw an empty bar: it gets the plain lines)."""
    try:
        return file.isatty() and os.get_terminal_size(file.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):
        return False


_ACTIVE = []  # the bars on screen now (messages go above the last)


def echo(message: str) -> None:
    """Prints `message` (stdout) so that a bar on screen stays whole."""
    if _ACTIVE:
        _ACTIVE[-1].write(message)
    else:
        print(message, flush=True)


class Progress:
    """Progress of `total` units of `name` (the bar's label); `items` names what `update`
    counts besides the units (examples, tokens), whose rate since the start is shown (unless
    `rate=False`: the job puts its own in the figures). Off a terminal each line starts with
    `label` (default `[name]`). `enabled=False` shows nothing; `tty` overrides the terminal
    test."""

    def __init__(self, name: str, total: int, items: str | None = None, enabled: bool = True,
                 every: float = 10.0, start: int = 0, file=None, tty: bool | None = None,
                 label: str | None = None, rate: bool = True):
        self.name, self.total, self.items, self.enabled = name, total, items, enabled
        self.label = label or f"[{name}]"
        self.show_rate = rate
        self.every = every
        self.file = file or sys.stderr
        self.tty = _is_terminal(self.file) if tty is None else tty
        self.done, self.counted = start, 0
        self.shown = None  # `done` at the last line written
        self.first, self.started, self.last = start, time.time(), 0.0
        self.figures = ""
        self.bar = None
        if enabled and self.tty:
            self.bar = tqdm(total=total, initial=start, desc=name, file=self.file,
                            dynamic_ncols=True, mininterval=0.5, leave=True,
                            unit="" if items else " step",
                            bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                       "[{elapsed}<{remaining}]{postfix}")
            _ACTIVE.append(self)

    def rate(self) -> float:
        """Items (or units) per second since the start."""
        elapsed = max(time.time() - self.started, 1e-9)
        return (self.counted if self.items else self.done - self.first) / elapsed

    def eta(self) -> float:
        moved = self.done - self.first
        if moved <= 0:
            return float("nan")
        return (self.total - self.done) * (time.time() - self.started) / moved

    def update(self, n: int = 1, items: int = 0, force: bool = False,
               figures: str | None = None) -> None:
        """`n` more units done (and `items` more items); `figures` ("loss 2.31 | ...") shown
        beside."""
        self.done += n
        self.counted += items
        if figures is not None:
            self.figures = figures
        if not self.enabled:
            return
        if self.bar is not None:
            rate = f"{self.rate():,.1f} {self.items or 'steps'}/s" if self.show_rate else ""
            if self.items and self.show_rate:
                rate = f"{self.counted:,} {self.items}, " + rate
            self.bar.set_postfix_str(" | ".join(x for x in (self.figures, rate) if x),
                                     refresh=False)
            self.bar.update(n)
            return
        now = time.time()
        if not force and self.every and now - self.last < self.every:
            return
        self.last = now
        self.file.write(self.line() + "\n")
        self.file.flush()
        self.shown = self.done

    def line(self) -> str:
        """The off-terminal line: label done/total, figures, items, rate, elapsed, ETA."""
        parts = [f"{self.label} {self.done}/{self.total}"]
        if self.figures:
            parts.append(self.figures)
        if self.show_rate:
            if self.items:
                parts.append(f"{self.counted:,} {self.items}")
            parts.append(f"{self.rate():,.1f} {self.items or 'steps'}/s")
        parts.append(f"elapsed {_duration(time.time() - self.started)}")
        parts.append(f"ETA {_duration(self.eta())}")
        return " | ".join(parts)

    def write(self, message: str) -> None:
        """A message line that leaves the bar whole (above it on a terminal)."""
        if self.bar is not None:
            self.bar.write(message, file=self.file)
        else:
            print(message, flush=True)

    def close(self) -> None:
        """The final figures (off a terminal, one last line), and the bar left in place."""
        if self.bar is not None:
            self.bar.close()
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        elif self.enabled and self.shown != self.done:
            self.update(0, force=True)
