"""The one expander of comma-separated file globs, for every command that takes input files
(text for the data tools, TFRecords for training). Local paths use Python's `glob` (no
TensorFlow import); paths with a scheme (`gs://...`) use `tf.io.gfile`."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import uuid


# The data shipped inside the package (albert_tf/sample_data: MANIFEST.tsv lists each file).
SAMPLE_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample_data")
# Real English text that no check, calibration or test request is drawn from: WikiText-2's test
# split, one article line per line.
HELD_OUT_TEXT = os.path.join(SAMPLE_DATA_DIR, "pretrain_text", "wikitext-2-raw", "wiki.test.raw")


def _is_remote(path: str) -> bool:
    return "://" in path


def gfile():
    """`tf.io.gfile`, for paths with a scheme (TensorFlow loaded on first use only)."""
    import tensorflow as tf

    return tf.io.gfile


def temporary_name(path: str, suffix: str) -> str:
    """Where `path` is written before it is renamed into place: `.NAME.tmp-SUFFIX` beside it.
    A hidden name, so that no glob of the outputs (`train-*`, `*.tfrecord`) picks up a file
    that a killed writer left behind."""
    if _is_remote(path):
        head, name = path.rsplit("/", 1)
        return f"{head}/.{name}.tmp-{suffix}"
    head, name = os.path.split(os.path.abspath(path))
    return os.path.join(head, f".{name}.tmp-{suffix}")


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", newline: str | None = None, durable: bool = True,
                 suffix: str | None = None):
    """The one way a file is written whole: opens a hidden temporary file beside `path`
    (`temporary_name`, `.NAME.tmp-PID-RANDOM`, which no output glob matches); when the block ends
    without an error the file is renamed over `path`, so a reader (another worker, a rerun after
    a crash) sees the old file or the whole new one. On an error the temporary file is removed
    and `path` is left as it was. Text modes are UTF-8. A local file is flushed to disk before
    the rename (`durable=False`: not, for bulk data a rerun regenerates); a path with a scheme
    (`gs://`) goes through `tf.io.gfile` (its rename replaces the file). `suffix`: the
    temporary name's (by default the process id and a random part, so that two threads of one
    process writing the same path never share a temporary file)."""
    with atomic_files([(path, mode)], newline, durable, suffix) as (f,):
        yield f


@contextlib.contextmanager
def atomic_files(paths_and_modes, newline: str | None = None, durable: bool = True,
                 suffix: str | None = None):
    """Several files written whole together (`atomic_write`'s promise for each): yields their
    open temporary files; when the block ends without an error they are renamed into place in
    the order given, so the last one (a sidecar) marks the others complete. On an error none is
    renamed and every temporary file is removed."""
    suffix = suffix or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temporaries = [temporary_name(path, suffix) for path, _ in paths_and_modes]
    remote = gfile() if any(_is_remote(p) for p, _ in paths_and_modes) else None
    exists = remote.exists if remote else os.path.exists
    remove = remote.remove if remote else os.remove
    try:
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(_open(tmp, mode, newline, remote))
                     for tmp, (_, mode) in zip(temporaries, paths_and_modes)]
            yield files
            if durable and not remote:
                for f in files:
                    f.flush()
                    os.fsync(f.fileno())
        for tmp, (path, _) in zip(temporaries, paths_and_modes):
            if remote:
                remote.rename(tmp, path, overwrite=True)
            else:
                os.replace(tmp, path)
    finally:
        for tmp in temporaries:
            with contextlib.suppress(Exception):  # never in place of the error being raised
                if exists(tmp):
                    remove(tmp)


def _open(path: str, mode: str, newline: str | None, remote):
    """`path` opened for writing: through `remote` (`tf.io.gfile`) when given, else locally
    (text as UTF-8)."""
    if remote:
        return remote.GFile(path, mode)
    return open(path, mode, newline=newline, encoding=None if "b" in mode else "utf-8")


def atomic_copy(source: str, target: str) -> None:
    """`source` copied to `target` whole (`atomic_write`); either may be a `gs://` path."""
    opener = gfile().GFile if _is_remote(source) else open
    with opener(source, "rb") as src, atomic_write(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def write_json(path: str, value, indent: int = 2) -> None:
    """`value` as indented JSON (UTF-8, not ASCII-escaped) at `path`, whole (`atomic_write`)."""
    with atomic_write(path) as f:
        json.dump(value, f, indent=indent, ensure_ascii=False)


def expand_patterns(patterns, what: str = "file", exclude_suffixes=(),
                    error=ValueError) -> list[str]:
    """Files matching comma-separated globs (a string or a list of them), in the order of the
    patterns, each pattern's matches sorted, duplicates dropped.

    Args:
        patterns: "a/*.txt,b.txt" or ["a/*.txt", "b.txt"].
        what: names the files in the error message ("TFRecord file").
        exclude_suffixes: matches ending so are left out (e.g. TFRecord sidecars ".json").
        error: the exception class raised for a pattern matching nothing, a path that is not a
            file, or no pattern at all.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    parts = [p.strip() for pattern in patterns for p in pattern.split(",") if p.strip()]
    if not parts:
        raise error(f"No input {what}s given.")
    files, seen = [], set()
    for pattern in parts:
        if _is_remote(pattern):
            matches = sorted(gfile().glob(pattern))
            is_dir = gfile().isdir
        else:
            matches = (sorted(glob.glob(pattern)) if glob.has_magic(pattern)
                       else [pattern] if os.path.exists(pattern) else [])
            is_dir = os.path.isdir
        matches = [m for m in matches if not m.endswith(tuple(exclude_suffixes))]
        if not matches:
            raise error(f"Input pattern {pattern!r} matches no {what}.")
        for match in matches:
            if is_dir(match):
                raise error(f"Input {match!r} is a directory, not a {what}; give a glob of "
                            "the files in it.")
            if match not in seen:
                seen.add(match)
                files.append(match)
    return files
