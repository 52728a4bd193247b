"""Reading text inputs: globs, strict UTF-8 (errors name the file, line and byte), BOMs, CRLF."""

from __future__ import annotations

from typing import Iterator

from albert_tf.paths import expand_patterns

BOM = b"\xef\xbb\xbf"


class InputError(ValueError):
    """Bad input data; the message names the file (and line) and the fix."""


def expand_input_patterns(patterns) -> list[str]:
    """Files matching comma-separated globs, in pattern order (`albert_tf.paths`); raises
    `InputError` naming a pattern that matches nothing or a path that is not a file."""
    return expand_patterns(patterns, error=InputError)


def _decoded_lines(raw_lines, path: str, errors=None) -> Iterator:
    """Lines (str, line ends removed) of an iterable of raw byte lines. A leading BOM is dropped;
    CRLF and LF both end lines. A line that is not UTF-8 raises `InputError` with the line number
    and byte offset, or, when `errors` is a list, is yielded as that `InputError`."""
    offset = 0
    for number, raw in enumerate(raw_lines, start=1):
        data = raw[len(BOM):] if number == 1 and raw.startswith(BOM) else raw
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            at = offset + (len(raw) - len(data)) + e.start
            error = InputError(
                f"{path}: line {number} is not valid UTF-8 (byte 0x{data[e.start]:02x} at "
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


def documents_of(raw_lines, path: str, errors=None) -> Iterator[list[str]]:
    """Documents in the official pretraining input format (one sentence per line, blank lines
    between documents) from an iterable of raw byte lines of the file `path`: lists of non-empty
    stripped lines. Invalid UTF-8 raises `InputError`; when `errors` is a list, a document with
    such a line is left out instead and its first error appended to `errors`."""
    document, bad = [], None
    for line in _decoded_lines(raw_lines, path, errors):
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


def read_documents(path: str) -> Iterator[list[str]]:
    """Documents of a file in the official pretraining input format: one sentence per line,
    blank lines between documents. Yields lists of non-empty stripped lines."""
    with open(path, "rb") as f:
        yield from documents_of(f, path)
