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
