"""Reading text inputs: globs, strict UTF-8 (errors name the file, line and byte), BOMs, CRLF."""

from __future__ import annotations

import glob
import os
from typing import Iterator

BOM = b"\xef\xbb\xbf"


class InputError(ValueError):
    """Bad input data; the message names the file (and line) and the fix."""


def expand_input_patterns(patterns) -> list[str]:
    """Sorted, de-duplicated files matching comma-separated globs. Raises `InputError` naming
    a pattern that matches nothing or a path that is not a file."""
    if isinstance(patterns, str):
        patterns = [patterns]
    parts = [p.strip() for pattern in patterns for p in pattern.split(",") if p.strip()]
    if not parts:
        raise InputError("No input files given.")
    files = []
    for pattern in parts:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise InputError(f"Input pattern {pattern!r} matches no file.")
        for m in matches:
            if not os.path.isfile(m):
                raise InputError(f"Input {m!r} is not a file.")
            if m not in files:
                files.append(m)
    return files


def read_text_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 text file without line ends. A leading BOM is dropped; CRLF and LF both
    end lines. Invalid UTF-8 raises `InputError` with the line number and byte offset."""
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            data = raw[len(BOM):] if number == 1 and raw.startswith(BOM) else raw
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                at = offset + (len(raw) - len(data)) + e.start
                raise InputError(
                    f"{path}: line {number} is not valid UTF-8 (byte 0x{data[e.start]:02x} at "
                    f"file offset {at}). Convert the file to UTF-8, e.g. "
                    f"`iconv -f latin1 -t utf-8`.") from None
            offset += len(raw)
            yield text.rstrip("\r\n")


def read_documents(path: str) -> Iterator[list[str]]:
    """Documents of a file in the official pretraining input format: one sentence per line,
    blank lines between documents. Yields lists of non-empty stripped lines."""
    document = []
    for line in read_text_lines(path):
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document
