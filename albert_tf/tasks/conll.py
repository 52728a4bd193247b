"""Tagged sentences from CoNLL and CoNLL-U files, and the CoNLL prediction file.

Formats, detected from the file (`read_tagged_file`):

- CoNLL-U (a first data line whose first column is a token id, "1", and that has 10
  tab-separated columns, or a `.conllu` name): the word is column 2 (FORM), the tag column 4
  (UPOS); `#` comment lines, multiword-token ranges (`1-2`) and empty nodes (`1.1`) are skipped.
- CoNLL (anything else): one word per line, the word first and the tag last; columns are
  tab-separated when the first data line holds a tab, else separated by runs of spaces. Every
  data line of a file has the same number of columns; a file whose lines all have one column
  holds words without tags (a `--test_file` to tag).

Either way sentences end at blank lines (whitespace only: WNUT-17 separates them with a lone
tab); a UTF-8 byte-order mark, CRLF line ends and a missing final newline are accepted. A CoNLL
line whose word is `-DOCSTART-` (CoNLL-2003's document separator, "-DOCSTART- -X- -X- O") is
skipped, as Hugging Face's conll2003 reader skips it: it ends a sentence and is no word of
any, so it is neither trained on nor tagged nor counted (`TaggedFile.document_starts` counts
them). (conlleval.pl reads it as one more token, gold and guess "O": no entity score
changes, only its token accuracy.) A CoNLL-U file whose UPOS is `_` on every token is
unannotated: its words are read without tags, for `--do_predict`; training or evaluation on it
is refused, and so is a file that tags some tokens and leaves others `_`. Problems are
`ConllError`s naming the file and the 1-based line.
"""

from __future__ import annotations

import dataclasses
import os
import re

from albert_tf.paths import atomic_write


DOCSTART = "-DOCSTART-"  # CoNLL-2003's document separator line's first column
UNANNOTATED = "_"  # CoNLL-U's value of a field that is not given


class ConllError(ValueError):
    """A tagged file that cannot be read as asked (names the file and line)."""


@dataclasses.dataclass
class Sentence:
    """One sentence: its words, their tags (None for an untagged file), the 1-based line of
    each word in its file, and each word's line as read (for the prediction file)."""

    words: list
    tags: list | None
    line_numbers: list
    lines: list


@dataclasses.dataclass
class TaggedFile:
    """What `read_tagged` read: the sentences, the format ("conll" or "conllu") and how many
    `-DOCSTART-` lines it skipped."""

    sentences: list
    format: str
    document_starts: int = 0


def _is_conllu(path: str, first_columns: list) -> bool:
    if path.endswith(".conllu"):
        return True
    return len(first_columns) == 10 and first_columns[0] == "1"


def _columns(line: str, tab_separated: bool) -> list:
    return line.split("\t") if tab_separated else line.split()


def _read_lines(path: str) -> list:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ConllError(f"{path} is not UTF-8 text: {e}") from None
    return re.split(r"\r\n|\n|\r", text)


def read_tagged_file(path: str, require_tags: bool = True) -> tuple[list, str]:
    """([Sentence], format name "conll" or "conllu") of a CoNLL or CoNLL-U file (see the module
    docstring). `require_tags=False` also accepts a CoNLL file of words only and an unannotated
    CoNLL-U file (tags None)."""
    read = read_tagged(path, require_tags)
    return read.sentences, read.format


def _is_docstart(line: str) -> bool:
    columns = line.split()
    return bool(columns) and columns[0] == DOCSTART


def read_tagged(path: str, require_tags: bool = True) -> TaggedFile:
    """`read_tagged_file`'s sentences and format, and the number of `-DOCSTART-` lines
    skipped."""
    if not os.path.isfile(path):
        raise ConllError(f"{path}: no such file.")
    lines = _read_lines(path)
    first = next((line for line in lines if line.strip() and not line.startswith("#")
                  and not _is_docstart(line)), None)
    if first is None:
        raise ConllError(f"{path} holds no sentences.")
    tab_separated = "\t" in first.strip(" ")
    conllu = _is_conllu(path, _columns(first, True))
    sentences, current, expected, document_starts = [], None, None, 0
    tagged_at = untagged_at = None  # CoNLL-U: the first line with a tag, and with UPOS "_"
    for number, line in enumerate(lines, 1):
        if not line.strip():
            current = None
            continue
        if conllu and line.startswith("#"):
            continue
        if not conllu and _is_docstart(line):
            document_starts += 1
            current = None  # a document separator also ends a sentence
            continue
        columns = line.split("\t") if conllu else _columns(line, tab_separated)
        if conllu:
            if len(columns) != 10:
                raise ConllError(f"{path}, line {number}: a CoNLL-U token line has 10 "
                                 f"tab-separated columns; this one has {len(columns)}.")
            if "-" in columns[0] or "." in columns[0]:
                continue  # a multiword-token range or an empty node
            word, tag = columns[1], columns[3]
            if tag.strip() == UNANNOTATED:
                untagged_at = untagged_at or (number, tag)
                tag = None
            else:
                tagged_at = tagged_at or (number, tag)
            if untagged_at and tagged_at:
                raise ConllError(
                    f"{path}, line {max(untagged_at[0], tagged_at[0])}: UPOS "
                    f"{untagged_at[1]!r} (unannotated) on line {untagged_at[0]} but "
                    f"{tagged_at[1]!r} on line {tagged_at[0]}: tag every token, or none (an "
                    "unannotated file is tagged by --do_predict, never scored).")
            if untagged_at and require_tags:
                raise ConllError(
                    f"{path}, line {number}: UPOS '_' (unannotated): training and evaluation "
                    "need every token's tag; tag the file, or pass it as --test_file with "
                    "--do_predict alone to tag it.")
        else:
            if expected is None:
                expected = len(columns)
                if expected == 1 and require_tags:
                    raise ConllError(f"{path}, line {number}: one column (a word and no tag); "
                                     "a CoNLL file for training or evaluation ends each line "
                                     "with the word's tag.")
            if len(columns) != expected:
                why = ("a stray column, or a space inside a word of a space-separated file"
                       if len(columns) > expected else "a missing column: a word without its "
                       "tag, or a tab or space lost")
                raise ConllError(f"{path}, line {number}: {len(columns)} columns where the "
                                 f"file's first line has {expected} ({why}).")
            word, tag = columns[0], (columns[-1] if expected > 1 else None)
        if not word.strip() or (tag is not None and not tag.strip()):
            raise ConllError(f"{path}, line {number}: an empty word or tag.")
        if current is None:
            current = Sentence([], None if tag is None else [], [], [])
            sentences.append(current)
        current.words.append(word.strip())
        if tag is not None:
            current.tags.append(tag.strip())
        current.line_numbers.append(number)
        current.lines.append(line)
    if not sentences:
        raise ConllError(f"{path} holds no sentences.")
    return TaggedFile(sentences, "conllu" if conllu else "conll", document_starts)


def check_sentences(sentences, path: str) -> None:
    """Raises `ConllError` for an empty sentence or one whose words and tags differ in number
    (a reader of another format, or sentences built by hand)."""
    for s in sentences:
        where = f"{path}, line {s.line_numbers[0]}" if s.line_numbers else path
        if not s.words:
            raise ConllError(f"{where}: an empty sentence (no words).")
        if s.tags is not None and len(s.tags) != len(s.words):
            raise ConllError(f"{where}: {len(s.words)} words but {len(s.tags)} tags.")


def label_list(sentences) -> list:
    """The tag set of training sentences, sorted, "O" first where it occurs."""
    tags = {t for s in sentences for t in s.tags}
    return (["O"] if "O" in tags else []) + sorted(tags - {"O"})


def check_known_tags(sentences, labels, path: str) -> None:
    """Raises `ConllError` at the first tag that is not in `labels` (the training tag set)."""
    known = set(labels)
    for s in sentences:
        for tag, number in zip(s.tags or (), s.line_numbers):
            if tag not in known:
                raise ConllError(f"{path}, line {number}: tag {tag!r} is not one of the "
                                 f"{len(known)} tags of the training data ({sorted(known)}).")


def write_predictions(path: str, sentences, predicted) -> None:
    """The input's lines with the predicted tag appended as the last column (tab-separated),
    sentences separated by empty lines; written under a temporary name, then renamed."""
    with atomic_write(path) as f:
        for i, (sentence, tags) in enumerate(zip(sentences, predicted)):
            if i:
                f.write("\n")
            for line, tag in zip(sentence.lines, tags):
                f.write(f"{line.rstrip()}\t{tag}\n")
