"""Reading text inputs: globs, strict UTF-8 (errors name the file, line and byte), BOMs, CRLF."""

from __future__ import annotations

import os
from typing import Iterator

from albert_tf.paths import expand_patterns

BOM = b"\xef\xbb\xbf"


class InputError(ValueError):
    """Bad input data; the message names the file (and line) and the fix."""


def expand_input_patterns(patterns) -> list[str]:
    """Files matching comma-separated globs, in pattern order (`albert_tf.paths`); raises
    `InputError` naming a pattern that matches nothing or a path that is not a file."""
    return expand_patterns(patterns, error=InputError)


def _lines_before(path: str, offset: int) -> int:
    """The number of lines that end before byte `offset` of `path`."""
    count = 0
    with open(path, "rb") as f:
        while offset > 0:
            block = f.read(min(offset, 1 << 20))
            if not block:
                break
            count += block.count(b"\n")
            offset -= len(block)
    return count


def _decoded_lines(raw_lines, path: str, errors=None, start: int = 0) -> Iterator:
    """Lines (str, line ends removed) of an iterable of raw byte lines, the file's from byte
    `start` (a line start). A leading BOM is dropped; CRLF and LF both end lines. A line that is
    not UTF-8 raises `InputError` with the line number and byte offset in the file, or, when
    `errors` is a list, is yielded as that `InputError`."""
    offset = start
    for number, raw in enumerate(raw_lines, start=1):
        data = raw[len(BOM):] if offset == 0 and raw.startswith(BOM) else raw
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            at = offset + (len(raw) - len(data)) + e.start
            line = number + (_lines_before(path, start) if start else 0)
            error = InputError(
                f"{path}: line {line} is not valid UTF-8 (byte 0x{data[e.start]:02x} at "
                f"file offset {at}). Convert the file to UTF-8, e.g. "
                f"`iconv -f latin1 -t utf-8`.")
            if errors is None:
                raise error from None
            yield error
        else:
            yield text.rstrip("\r\n")
        offset += len(raw)


def read_text_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 text file without line ends. A leading BOM is dropped; CRLF and LF both
    end lines. Invalid UTF-8 raises `InputError` with the line number and byte offset."""
    with open(path, "rb") as f:
        yield from _decoded_lines(f, path)


def documents_of(raw_lines, path: str, errors=None, start: int = 0) -> Iterator[list[str]]:
    """Documents in the official pretraining input format (one sentence per line, blank lines
    between documents) from an iterable of raw byte lines of the file `path` (from its byte
    `start`): lists of non-empty stripped lines. Invalid UTF-8 raises `InputError`; when `errors`
    is a list, a document with such a line is left out instead and its first error appended to
    `errors`."""
    document, bad = [], None
    for line in _decoded_lines(raw_lines, path, errors, start):
        if isinstance(line, InputError):
            bad = bad or line
            continue
        line = line.strip()
        if line:
            document.append(line)
        elif document or bad:
            if bad:
                errors.append(bad)
            else:
                yield document
            document, bad = [], None
    if bad:
        errors.append(bad)
    elif document:
        yield document


def _lines_between(f, start: int, end: int | None) -> Iterator[bytes]:
    f.seek(start)
    position = start
    for raw in f:
        if end is not None and position >= end:
            return
        yield raw
        position += len(raw)


def read_documents(path: str, part: tuple = (0, None)) -> Iterator[list[str]]:
    """Documents of a file in the official pretraining input format: one sentence per line,
    blank lines between documents. Yields lists of non-empty stripped lines. `part`: the byte
    range [start, end) read (end None: the file's end), one of `document_parts`."""
    start, end = part
    with open(path, "rb") as f:
        yield from documents_of(_lines_between(f, start, end), path, start=start)


def document_parts(path: str, parts: int) -> list[tuple]:
    """Byte ranges [start, end) that cover `path` in order, each but the last ending right
    after a blank line (a document boundary, so each part holds whole documents and reading
    the parts one after another gives the file's documents), of about size / `parts` bytes;
    fewer where the file has fewer blank lines. The last range's end is None (the file's end)."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, parts):
            target, limit = size * k // parts, size * (k + 1) // parts
            if target <= cuts[-1]:
                continue
            f.seek(target - 1)
            f.readline()  # to the start of the line at or after `target`
            while f.tell() < limit:
                raw = f.readline()
                if not raw:
                    break
                if not raw.strip():  # ASCII whitespace only: a blank line for str.strip too
                    if f.tell() < size:
                        cuts.append(f.tell())
                    break
    return [(a, b) for a, b in zip(cuts, cuts[1:] + [None])]
