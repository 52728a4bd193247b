"""Benchmarks (see docs/benchmarks.md). Helpers the benchmarks that drive our commands share."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(args, log) -> None:
    """Runs `python -m args...` appending its output to `log`; raises on failure."""
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ python -m " + shlex.join(args) + "\n")
        f.flush()
        proc = subprocess.run([sys.executable, "-m", *args], stdout=f,
                              stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {shlex.join(args)}; see {log}")
