"""Benchmarks (see docs/benchmarks.md). Helpers the benchmarks that drive our commands share."""

from __future__ import annotations

import glob
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


def novels_vocab(directory: str) -> str:
    """An 8,000-piece SentencePiece model trained on the bundled novels in `directory`; its
    path."""
    from data.train_vocab import train_vocab

    prefix = os.path.join(directory, "bench8k")
    train_vocab(sorted(glob.glob(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text",
                                              "gutenberg", "*-0.txt"))), prefix,
                vocab_size=8000, num_threads=2)
    return prefix + ".model"


def sst2_dev_sentences(n: int) -> list[str]:
    """The first n SST-2 dev sentences (real text of mixed lengths)."""
    path = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2", "dev.tsv")
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [row[0] for row in rows[:n]]
