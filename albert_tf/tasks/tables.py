"""A user's own table of examples: CSV, TSV or JSON Lines, the format from the file's extension.

    columns, rows = read_table("train.csv")   # rows: [(line, {column: value})]

- `.csv`: comma-separated; `.tsv` / `.tab`: tab-separated. The first row is the header (the
  column names). Fields may be quoted with `"` (a quoted field may hold the separator, `""` for
  a quote, and line breaks), as spreadsheets and pandas write them; a quote inside an unquoted
  field is text.
- `.jsonl` / `.ndjson`: one JSON object per line; its keys are the columns, each given once. A
  number is read as its text in the file, as a CSV field is (`2` is "2", `1.0` is "1.0", so `1`
  and `1.0` are two labels; `1e400` is "1e400"), a boolean as "true" / "false", null as None;
  an object or an array is kept as it is (a list or dict): an error only in a column the task
  reads.

UTF-8 with or without a BOM, LF or CRLF (a line break inside a quoted field is read as LF),
with or without a final newline; blank lines are skipped; a field may be of any length (csv's
own limit, 131,072 characters, is raised to the file's size). A row is numbered by the line it
starts on. What cannot be read is a `TableError` naming the file and line (and the column where
there is one): bytes that are not UTF-8, a quote left open, a row whose field count differs from
the header's, a header naming a column twice (a JSON line giving a key twice), a line that is
not a JSON object, a file without rows.

This module only reads; which columns hold the texts and the label, and what a label may be,
is the task's (`albert_tf.tasks.glue.read_table_examples`).
"""

from __future__ import annotations

import csv
import io
import json
import os

EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl",
              ".ndjson": "jsonl"}


class TableError(ValueError):
    """A table file that cannot be read; the message names the file and line."""


def table_format(path: str) -> str:
    """"csv", "tsv" or "jsonl", from the extension of `path`."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if os.path.isdir(path):
        raise TableError(f"{path} is a directory; give a .csv, .tsv or .jsonl file.")
    if ext not in EXTENSIONS:
        raise TableError(f"{path}: the format is taken from the extension, and {ext or 'none'!r}"
                         f" is not one of {', '.join(sorted(EXTENSIONS))}: rename the file "
                         "(.csv comma-separated, .tsv tab-separated, .jsonl one JSON object "
                         "per line).")
    return EXTENSIONS[ext]


def _text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TableError(f"No such file: {path}") from None
    except IsADirectoryError:
        raise TableError(f"{path} is a directory; give a .csv, .tsv or .jsonl file.") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise TableError(f"{path}: line {line} is not valid UTF-8 (byte 0x{data[e.start]:02x} "
                         f"at column {column}); save the file as UTF-8.") from None


def read_table(path: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """(column names, [(line number, {column: text})]) of the table at `path` (module
    docstring). JSON Lines: the columns are the first object's keys; each row holds its own
    keys (a key missing from a row is the task's error); a value is text, or None (null), or
    a list or dict (an array or object: the task refuses it in a column it reads)."""
    kind = table_format(path)
    text = _text(path)
    rows = _read_jsonl(path, text) if kind == "jsonl" else _read_delimited(
        path, text, "," if kind == "csv" else "\t")
    if not rows[1]:
        raise TableError(f"{path} holds no rows" + (" below its header" if kind != "jsonl"
                                                     else "") + ".")
    return rows


def _read_delimited(path: str, text: str, separator: str):
    # No field is longer than the file: csv's limit (131,072 by default) raised to its size, so
    # a long text reads as JSON Lines reads it (a quote left open still ends the file unclosed:
    # "unexpected end of data" at its line). The limit is the process's: only ever raised.
    if csv.field_size_limit() <= len(text):
        csv.field_size_limit(min(len(text) + 1, 2 ** 31 - 1))
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=separator, quotechar='"',
                        doublequote=True, skipinitialspace=False, strict=True)
    header, header_line, rows = None, 0, []
    consumed = 0  # lines read so far: the next row starts on the line after
    while True:
        start = consumed + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise TableError(f"{path}: line {start}: {e} (a quote opened and not closed? a "
                             "field with the separator, a quote or a line break must be "
                             "quoted, a quote inside it doubled: \"say \"\"hi\"\"\").") from None
        consumed = reader.line_num
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # a blank line
        if header is None:
            header, header_line = [f.strip() for f in fields], start
            seen = set()
            for i, name in enumerate(header):
                if name in seen:
                    raise TableError(f"{path}: line {start}: the header names column {name!r} "
                                     f"twice (columns {header.index(name) + 1} and {i + 1}).")
                seen.add(name)
            continue
        if len(fields) != len(header):
            name = "tab" if separator == "\t" else "comma"
            raise TableError(f"{path}: line {start} has {len(fields)} field(s) and the header "
                             f"(line {header_line}) has {len(header)} {header}: quote a field "
                             f"that holds a {name}. The row: {fields!r:.200}")
        # a line break inside a quoted field is "\n" whatever the file's line ends
        rows.append((start, {name: field.replace("\r\n", "\n")
                             for name, field in zip(header, fields)}))
    if header is None:
        raise TableError(f"{path} is empty: no header and no rows.")
    return header, rows


class _JsonObject(dict):
    """A JSON object as parsed, with the keys it gives more than once (`duplicates`; json keeps
    the last value of a key given twice, silently)."""

    duplicates = ()

    @classmethod
    def of(cls, pairs):
        value = cls(pairs)
        if len(value) != len(pairs):
            keys = [key for key, _ in pairs]
            value.duplicates = [k for i, k in enumerate(keys) if k in keys[:i]]
        return value


def _read_jsonl(path: str, text: str):
    columns, rows = None, []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            value = json.loads(line, object_pairs_hook=_JsonObject.of, parse_int=str,
                               parse_float=str, parse_constant=str)
        except json.JSONDecodeError as e:
            raise TableError(f"{path}: line {number}, column {e.colno}: not valid JSON "
                             f"({e.msg}); each line must be one JSON object.") from None
        if not isinstance(value, dict):
            kind = type(value).__name__  # a number was parsed as its text
            kind = "number" if kind == "str" and not line.lstrip().startswith('"') else kind
            raise TableError(f"{path}: line {number} is a JSON {kind}, not an "
                             "object; each line must be one object of column: value, e.g. "
                             '{"text": "...", "label": "..."}.')
        if value.duplicates:
            raise TableError(f"{path}: line {number} gives the key {value.duplicates[0]!r} "
                             "twice; give each column once (a CSV header may not name a column "
                             "twice either).")
        # numbers are already their text (parse_int/parse_float); objects and arrays are kept
        row = {key: ("true" if field else "false") if isinstance(field, bool) else field
               for key, field in value.items()}
        if columns is None:
            columns = list(row)
        rows.append((number, row))
    return columns or [], rows
