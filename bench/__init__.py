"""Benchmarks (see docs/benchmarks.md). Helpers the benchmarks that drive our commands share."""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys
import time

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
    from albert_tf.data.train_vocab import train_vocab

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


def call_times(fn, warmup: int, repeats: int) -> list[float]:
    """Seconds each of `repeats` timed calls of `fn` took, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def write_results(output_dir: str, name: str, results, table: str, doc: str | None = None,
                  section: str | None = None) -> None:
    """Writes `results` to NAME.json and the markdown `table` to NAME.md in `output_dir` (made
    if missing), prints the table and, with `doc`, puts it in that Markdown file's `section`
    (default bench.NAME; `replace_section`)."""
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, f"{name}.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(output_dir, f"{name}.md"), "w") as f:
        f.write(table)
    print(table)
    if doc:
        replace_section(doc, section or f"bench.{name}", table)


def machine() -> str:
    """This machine in a few words: the CPU model, its cores and the vector extensions that
    decide a figure (AVX-512, bf16, AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return f"{os.cpu_count()} CPUs"
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines()
                  if line.startswith("model name")), "unknown CPU")
    flags_line = next((line for line in info.splitlines() if line.startswith("flags")), "")
    extensions = [name for name in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                  if f" {name}" in flags_line]
    return f"{model}, {os.cpu_count()} CPUs ({', '.join(extensions) or 'no AVX2'})"


def replace_section(path: str, name: str, text: str) -> None:
    """Rewrites the part of the Markdown file `path` between `<!-- NAME: begin -->` and
    `<!-- NAME: end -->` with `text` (the section a benchmark generates)."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        raise SystemExit(f"{path} has no {begin} ... {end} section to rewrite; add the two "
                         "markers where the generated table belongs.")
    head, rest = doc.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{begin}\n{text.rstrip()}\n{end}{tail}")
