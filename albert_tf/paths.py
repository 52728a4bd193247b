"""The one expander of comma-separated file globs, for every command that takes input files
(text for the data tools, TFRecords for training). Local paths use Python's `glob` (no
TensorFlow import); paths with a scheme (`gs://...`) use `tf.io.gfile`."""

from __future__ import annotations

import contextlib
import glob
import os


# The data shipped inside the package (albert_tf/sample_data: MANIFEST.tsv lists each file).
SAMPLE_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample_data")
# Real English text that no check, calibration or test request is drawn from: WikiText-2's test
# split, one article line per line.
HELD_OUT_TEXT = os.path.join(SAMPLE_DATA_DIR, "pretrain_text", "wikitext-2-raw", "wiki.test.raw")


def _is_remote(path: str) -> bool:
    return "://" in path


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", newline: str | None = None):
    """Opens a hidden temporary file beside `path` (`.NAME.tmp-PID`, which no output glob
    matches) for writing; when the block ends without an error the file is flushed to disk
    and renamed over `path`, so a reader sees the old file or the whole new one. On an error
    the temporary file is removed and `path` is left as it was. Text modes are UTF-8."""
    head, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(head, f".{name}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode, newline=newline,
                  encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


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
            import tensorflow as tf

            matches = sorted(tf.io.gfile.glob(pattern))
            is_dir = tf.io.gfile.isdir
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
