r"""Turn raw text (books, articles) into the official pretraining input format: one sentence per
line, a blank line between documents.

    # Project Gutenberg books: one document per file, paragraphs separated by blank lines.
    python -m albert_tf.data.prepare_corpus --input_file 'books/*.txt' \
        --output_file corpus/books.txt
    # WikiText: one paragraph per line, articles start at ' = Title = ' lines.
    python -m albert_tf.data.prepare_corpus --input_file wiki.test.raw \
        --output_file corpus/wiki.txt --paragraphs lines --document_marker_regex '^ = [^=].* = $' \
        --drop_line_regex '^ (= )+.*( =)+ $'

Inputs are strict UTF-8 (a BOM is dropped; CRLF and LF both end lines). Project Gutenberg
header and licence are dropped when the `*** START OF ... ***` / `*** END OF ... ***` lines are
present.

Sentence splitter (rule-based, for English prose): a sentence ends at a run of `.`, `!` or `?`,
optionally followed by closing quotes or brackets, then whitespace, when the next text starts
with an uppercase letter, a digit, or an opening quote or bracket. It does not end after a known
abbreviation (Mr., Dr., St., e.g., ...) or a single-letter initial ("J. R. R."), so "Mr. Darcy"
stays whole; an ellipsis followed by lowercase continues the sentence. Text already tokenized with
spaces before punctuation (WikiText's "actor . He") splits the same way.
"""

from __future__ import annotations

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import os
import re
import sys

from absl import app, flags
from albert_tf.commands.cli import run_command

from albert_tf.commands import flags as albert_flags

from albert_tf.ownership import OutputLock, regular_output, same_file
from albert_tf.paths import temporary_name
from albert_tf.data.text_io import InputError, expand_input_patterns, read_text_lines

ABBREVIATIONS = frozenset("""
mr mrs ms messrs mme mlle dr prof rev fr hon st jr sr sen rep gov gen col capt cmdr lt sgt maj
adm cpl pvt mt ft ave blvd rd no nos vol vols ch chap fig figs pp ed eds co corp inc ltd bros
vs etc al approx dept est univ jan feb mar apr jun jul aug sep sept oct nov dec e.g i.e cf viz
a.m p.m u.s u.k
""".split())

_BOUNDARY = re.compile(r"([.!?]+)([\"'\u201d\u2019)\]]*)(\s+)")
_NEXT_STARTS = re.compile(r"[\"'\u201c\u2018(\[]*[A-Z0-9\u00c0-\u00de]")
_LAST_WORD = re.compile(r"(\S+)$")
_GUTENBERG_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG")
_GUTENBERG_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG")


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph (see module docstring for the rules)."""
    text = " ".join(paragraph.split())
    sentences, start = [], 0
    for m in _BOUNDARY.finditer(text):
        end = m.end(2)
        rest = text[m.end():]
        if not rest or not _NEXT_STARTS.match(rest):
            continue
        if m.group(1) == ".":
            before = _LAST_WORD.search(text[start:m.start()])
            word = before.group(1).lower().lstrip("\"'(\u201c\u2018[") if before else ""
            if word in ABBREVIATIONS or re.fullmatch(r"[a-z]", word) or (
                    "." in word and re.fullmatch(r"([a-z]\.)+[a-z]", word)):
                continue
        sentences.append(text[start:end].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if s]


def _gutenberg_body(lines: list[str]) -> list[str]:
    start = next((i for i, line in enumerate(lines) if _GUTENBERG_START.match(line)), None)
    end = next((i for i, line in enumerate(lines) if _GUTENBERG_END.match(line)), None)
    if start is not None:
        lines = lines[start + 1:(end if end is not None and end > start else None)]
    elif end is not None:
        lines = lines[:end]
    return lines


def compile_regex(pattern: str | None, flag: str):
    """`pattern` compiled (None for none); an invalid one raises `InputError` naming `flag`."""
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InputError(f"{flag} {pattern!r} is not a valid regular expression ({e}); "
                         "quote it for the shell and escape ( ) [ ] . * with \\.") from None


def file_documents(path: str, paragraphs: str = "blank_lines",
                   document_marker_regex: str | None = None,
                   drop_line_regex: str | None = None) -> list[list[str]]:
    """Documents (lists of sentences) of one raw text file.

    Args:
        paragraphs: "blank_lines" (paragraphs separated by blank lines, inner line breaks are
            wrapping) or "lines" (each non-empty line is a paragraph).
        document_marker_regex: a line matching it starts a new document (and is dropped);
            without it the whole file is one document.
        drop_line_regex: lines matching it are dropped (e.g. section headings).
    """
    marker = compile_regex(document_marker_regex, "--document_marker_regex")
    drop = compile_regex(drop_line_regex, "--drop_line_regex")
    lines = _gutenberg_body(list(read_text_lines(path)))
    documents, paragraphs_of_doc, current = [], [], []

    def end_paragraph():
        if current:
            paragraphs_of_doc.append(" ".join(current))
            current.clear()

    def end_document():
        end_paragraph()
        sentences = [s for p in paragraphs_of_doc for s in split_sentences(p)]
        if sentences:
            documents.append(sentences)
        paragraphs_of_doc.clear()

    for line in lines:
        if marker and marker.search(line):
            end_document()
            continue
        if drop and drop.search(line):
            end_paragraph()
            continue
        if not line.strip():
            end_paragraph()
        elif paragraphs == "lines":
            end_paragraph()
            current.append(line.strip())
            end_paragraph()
        else:
            current.append(line.strip())
    end_document()
    return documents


def prepare_corpus(input_patterns, output_file, paragraphs="blank_lines",
                   document_marker_regex=None, drop_line_regex=None, heldout_file=None,
                   heldout_every=0, overwrite: bool = False) -> dict:
    """Writes the official format for all inputs (in order) to `output_file`, atomically.

    The output is locked while it is written (`albert_tf.ownership`; a second writer is
    refused), an input is never an output, an output is a regular file (a symbolic link is
    written through; devices and system paths are refused), and an existing output with other
    text is replaced only with `overwrite` (the same text is left as it is;
    `counts["unchanged"]` lists it).

    With `heldout_file` and `heldout_every` N > 1, every N-th document (the N-th, 2N-th, ...,
    counted over all inputs in order) goes to `heldout_file` instead: an evaluation set whose
    documents the training data never saw.
    """
    if paragraphs not in ("blank_lines", "lines"):
        raise ValueError(f"--paragraphs must be blank_lines or lines; got {paragraphs!r}")
    if bool(heldout_file) != (heldout_every > 0) or heldout_every == 1:
        raise ValueError("--heldout_file and --heldout_every N (N >= 2) go together; got "
                         f"--heldout_file={heldout_file!r} --heldout_every={heldout_every}")
    compile_regex(document_marker_regex, "--document_marker_regex")
    compile_regex(drop_line_regex, "--drop_line_regex")
    files = expand_input_patterns(input_patterns)
    counts = {"files": len(files), "documents": 0, "sentences": 0}
    if heldout_file:
        counts.update(heldout_documents=0, heldout_sentences=0)
    output_file = regular_output(output_file, "--output_file")
    heldout_file = heldout_file and regular_output(heldout_file, "--heldout_file")
    targets = [(output_file, "")] + ([(heldout_file, "heldout_")] if heldout_file else [])
    _check_targets(files, output_file, heldout_file, overwrite)
    locks = [OutputLock(path, "--output_file" if not prefix else "--heldout_file",
                        is_dir=False) for path, prefix in targets]
    for lock in locks:
        lock.acquire()
    tmps = {}
    try:
        for path, _ in targets:
            tmps[path] = open(_tmp_name(path), "w", encoding="utf-8", newline="\n")
        index = 0
        for path in files:
            documents = file_documents(path, paragraphs, document_marker_regex,
                                       drop_line_regex)
            if not documents:
                raise InputError(f"{path} holds no text after preparation.")
            for document in documents:
                index += 1
                target, prefix = targets[1] if heldout_every and index % heldout_every == 0 \
                    else targets[0]
                out = tmps[target]
                if counts[prefix + "documents"]:
                    out.write("\n")
                out.write("\n".join(document) + "\n")
                counts[prefix + "documents"] += 1
                counts[prefix + "sentences"] += len(document)
        if heldout_file and not counts["heldout_documents"]:
            raise InputError(f"--heldout_every {heldout_every} held out nothing: the inputs hold "
                             f"{index} documents.")
        for path, _ in targets:
            tmps.pop(path).close()
        unchanged = []
        for path, _ in targets:
            if _same_content(_tmp_name(path), path):
                unchanged.append(path)
            elif os.path.exists(path) and not overwrite:  # appeared while this run read
                raise InputError(_exists_message(path))
        for path, _ in targets:
            if path not in unchanged:
                os.replace(_tmp_name(path), path)
        counts["unchanged"] = unchanged
    finally:
        for path, f in tmps.items():
            f.close()
        for path, _ in targets:
            if os.path.exists(_tmp_name(path)):
                os.remove(_tmp_name(path))
        for lock in locks:
            lock.release()
    return counts


def _tmp_name(path: str) -> str:
    """Where `path` is written before it is renamed into place (`temporary_name`): a hidden
    name beside it, so that no glob of the outputs (`corpus/*.txt`) picks up a file a killed run
    left behind. The outputs are renamed one by one, each only
    where its text changed, so this command keeps its own rename step."""
    return temporary_name(path, str(os.getpid()))


def _exists_message(path: str) -> str:
    return (f"{path} already exists with other text (data generation sidecars name corpus "
            "files by path and hash). Choose another --output_file, or pass --overwrite to "
            "replace it.")


def _check_targets(files, output_file, heldout_file, overwrite) -> None:
    """Refuses outputs that are inputs or each other, and (without `overwrite`) an existing
    output with other text: this is checked again after writing, where a rerun with the same
    inputs finds the same text and leaves the file as it is."""
    outputs = [("--output_file", output_file)] + ([("--heldout_file", heldout_file)]
                                                 if heldout_file else [])
    for flag, path in outputs:
        for source in files:
            if same_file(path, source):
                raise InputError(f"{flag} {path} is also an input ({source}): it would be "
                                 "rewritten while it is read. Write to another file.")
    if heldout_file and same_file(output_file, heldout_file):
        raise InputError(f"--output_file and --heldout_file name one file ({output_file}); "
                         "give two.")


def _same_content(a: str, b: str) -> bool:
    if not os.path.exists(b) or os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            chunk_a, chunk_b = fa.read(1 << 20), fb.read(1 << 20)
            if chunk_a != chunk_b:
                return False
            if not chunk_a:
                return True


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    albert_flags.define("input_file", "output_file", "overwrite", kinds={"input_file": "list"},
                        notes={"input_file": "Raw text.",
                               "output_file": "Text in the official pretraining format.",
                               "overwrite": "Here: an --output_file / --heldout_file of other "
                                            "text (the same text is left as it is)."})
    flags.DEFINE_enum("paragraphs", "blank_lines", ["blank_lines", "lines"],
                      "blank_lines: blank lines separate paragraphs (wrapped text); lines: each line "
                      "is a paragraph.")
    flags.DEFINE_string("document_marker_regex", None,
                        "A line matching this starts a new document (and is dropped). Default: one "
                        "document per file.")
    flags.DEFINE_string("drop_line_regex", None, "Drop lines matching this (e.g. headings).")
    flags.DEFINE_string("heldout_file", None,
                        "Write every --heldout_every-th document here instead (an evaluation "
                        "set of documents the training data never saw).")
    flags.DEFINE_integer("heldout_every", 0, "With --heldout_file: hold out every N-th document.")


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    if not FLAGS.input_file or not FLAGS.output_file:
        raise app.UsageError("--input_file and --output_file are required.")
    try:
        counts = prepare_corpus(FLAGS.input_file, FLAGS.output_file, FLAGS.paragraphs,
                                FLAGS.document_marker_regex, FLAGS.drop_line_regex,
                                FLAGS.heldout_file, FLAGS.heldout_every, FLAGS.overwrite)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {counts['documents']} documents, {counts['sentences']} sentences from "
          f"{counts['files']} files to {FLAGS.output_file}"
          + (f"; held out {counts['heldout_documents']} documents, "
             f"{counts['heldout_sentences']} sentences to {FLAGS.heldout_file}"
             if FLAGS.heldout_file else "")
          + (f" ({', '.join(counts['unchanged'])}: unchanged, the same text)"
             if counts["unchanged"] else ""))
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
