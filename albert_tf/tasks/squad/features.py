"""SQuAD inputs: SentencePiece pieces aligned to the characters of the original context, answer
character spans mapped to piece spans, and windows of long contexts (document stride).

Alignment. The context is split on whitespace into words (SentencePiece never joins pieces
across whitespace, so a word's pieces are the same alone as in the whole text). Inside a word,
each character of the preprocessed word comes from one character of the original, the
preprocessing taken character by character (`_source_characters`: "…" gives "...", three
characters from one; "ﬁ" gives "fi"; a combining mark of its own gives none). When the
pieces' surface strings (the `▁` removed) concatenated equal the preprocessed word, each piece
spans the original characters its own characters come from, from the first to the last: the
official character alignment (`convert_examples_to_features`' `_lcs_match` and
`_convert_index`), so "paused" in "paused…" maps to exactly its pieces and the three "." of "…"
each span "…". Otherwise (SentencePiece's own normalisation changed the text) every piece of the
word spans the whole word, so an answer maps to whole words there. A predicted piece span is
turned back into text by slicing the original context between the first piece's start and the
last piece's end, so the answer text is the context's own characters.

Training labels (`training_questions`, the official ALBERT `read_squad_examples` rule): every
training question is trained, an answerable one on the pieces of its characters
[answer_start, answer_start + len(text)), and it must have exactly one answer (the official
reader raises otherwise). An answer whose text, whitespace collapsed, is not in the context's
words there (BERT's "Could not find answer", which skips the question; ALBERT's reader does not)
is trained all the same and counted in one warning. An answer_start outside the context, or an
empty answer text, is refused by name (the official reader fails there with an IndexError or an
assertion, or reads from the end). Evaluation files are never filtered (official).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json

import numpy as np
from absl import logging

from albert_tf.packing import for_batches, ragged_rows
from albert_tf.tasks.squad import evaluation as squad_eval
from albert_tf.tasks.squad.in_graph import _WHITESPACE, windows_in_graph
from albert_tf.tokenization import SPIECE_UNDERLINE, file_sha256
from albert_tf.records import files_for, to_example, write_records


@dataclasses.dataclass
class AlignedContext:
    """A context's piece ids with each piece's [start, end) character span in `text`."""

    text: str
    ids: list
    pieces: list
    starts: list
    ends: list
    exact: int  # pieces aligned to their own characters (not to a whole word)

    def piece_span(self, char_start: int, char_end: int) -> tuple[int, int] | None:
        """(first, last) piece index covering characters [char_start, char_end), or None when
        the span holds no piece (whitespace only)."""
        first = next((i for i, e in enumerate(self.ends) if e > char_start), None)
        last = next((i for i in range(len(self.starts) - 1, -1, -1)
                     if self.starts[i] < char_end), None)
        if first is None or last is None or last < first:
            return None
        return first, last

    def text_of(self, first: int, last: int) -> str:
        """The context's characters from piece `first` to piece `last` (inclusive)."""
        return self.text[self.starts[first]:self.ends[last]]


def _words(text: str):
    start = None
    for i, ch in enumerate(text):
        if ch in _WHITESPACE or ch.isspace():
            if start is not None:
                yield start, i
                start = None
        elif start is None:
            start = i
    if start is not None:
        yield start, len(text)


def _source_characters(word: str, tokenizer) -> list[int]:
    """For each character of `word`'s preprocessed form, the index in `word` of the character
    it comes from, then len(word): the preprocessing taken character by character ("…" gives
    "...", three characters from one; "ﬁ" gives "fi"; a lone combining mark gives none, so no
    piece spans it)."""
    if word.isascii():  # preprocessing keeps every ASCII character as one character
        return list(range(len(word) + 1))
    sources = [i for i, ch in enumerate(word) for _ in tokenizer.preprocess(ch)]
    return sources + [len(word)]


class _ParagraphPieces:
    """The pieces of the paragraph encoded whole, as the official reader encodes it
    (`encode_pieces` of the preprocessed paragraph), handed out word by word: SentencePiece
    can break a tie between segmentations of equal score differently for a word alone and
    inside its paragraph ("8,000" as 0 00 or 00 0), and the paragraph's are the official ids.
    A word takes the next pieces whose characters ("▁" left out) are its own; where they are
    not (the preprocessing made or removed a word boundary), the word keeps its own pieces
    and the rest of the paragraph too."""

    def __init__(self, text: str, tokenizer):
        self.pieces = (tokenizer.tokenize(text) if getattr(tokenizer, "kind", None)
                       == "sentencepiece" else None)
        self.next = 0

    def take(self, word_pieces: list, surface: str) -> list:
        if self.pieces is None:
            return word_pieces
        taken, length, i = [], 0, self.next
        while i < len(self.pieces) and length < len(surface):
            taken.append(self.pieces[i])
            length += len(self.pieces[i].replace(SPIECE_UNDERLINE, ""))
            i += 1
        if "".join(taken).replace(SPIECE_UNDERLINE, "") != surface:
            self.pieces = None  # out of step: every word its own pieces from here
            return word_pieces
        self.next = i
        return taken


def align_context(text: str, tokenizer) -> AlignedContext:
    ids, pieces, starts, ends, exact = [], [], [], [], 0
    paragraph = _ParagraphPieces(text, tokenizer)
    for word_start, word_end in _words(text):
        word = text[word_start:word_end]
        word_pieces = tokenizer.tokenize(word)
        word_pieces = paragraph.take(word_pieces, "".join(
            p.replace(SPIECE_UNDERLINE, "") for p in word_pieces))
        surfaces = [p.replace(SPIECE_UNDERLINE, "") for p in word_pieces]
        preprocessed = tokenizer.preprocess(word)
        sources = _source_characters(word, tokenizer)
        aligned = "".join(surfaces) == preprocessed and len(sources) == len(preprocessed) + 1
        offset = 0  # in the preprocessed word
        for piece, surface in zip(word_pieces, surfaces):
            if aligned:
                # From the source of the first character to just past that of the last.
                starts.append(word_start + sources[offset])
                ends.append(word_start + (sources[offset + len(surface) - 1] + 1 if surface
                                          else sources[offset]))
                offset += len(surface)
                exact += 1
            else:
                starts.append(word_start)
                ends.append(word_end)
            pieces.append(piece)
        ids.extend(tokenizer.pieces_to_ids(word_pieces))
    # A piece that is only "▁" has no characters: give it the next piece's start (empty span).
    for i, (s, e) in enumerate(zip(starts, ends)):
        if s == e and i + 1 < len(starts):
            starts[i] = ends[i] = starts[i + 1]
    return AlignedContext(text, ids, pieces, starts, ends, exact)


def _check_budget(max_pieces: int, doc_stride: int, question: str = "a question") -> None:
    if isinstance(doc_stride, bool) or not isinstance(doc_stride, int) or doc_stride < 1:
        raise ValueError(f"--doc_stride must be a positive integer (official: 128). Received: "
                         f"{doc_stride!r}")
    if max_pieces < 1:
        raise ValueError(f"{question} leaves no context piece in --max_seq_length (the "
                         "question, [CLS] and two [SEP] fill it): raise --max_seq_length or "
                         "lower --max_query_length.")


def windows(num_pieces: int, max_pieces: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over the context's pieces: each at most `max_pieces` long, each
    starting `doc_stride` after the previous, the last reaching the end (official rule;
    `windows_in_graph`'s)."""
    _check_budget(max_pieces, doc_stride)
    max_seq_length = max_pieces + 3  # a query of no pieces
    out = windows_in_graph(ragged_rows([[]]), ragged_rows([[0] * num_pieces]), max_seq_length,
                           doc_stride)
    return list(zip(out["window_start"].numpy().tolist(), out["window_length"].numpy().tolist()))


# Features: [CLS] question [SEP] window of the context [SEP].
START_POSITIONS, END_POSITIONS, UNIQUE_IDS = "start_positions", "end_positions", "unique_ids"


def squad_schema(max_seq_length: int) -> dict:
    return {"input_ids": (max_seq_length, "int64"), "input_mask": (max_seq_length, "int64"),
            "segment_ids": (max_seq_length, "int64"), START_POSITIONS: (1, "int64"),
            END_POSITIONS: (1, "int64"), UNIQUE_IDS: (1, "int64"),
            "is_real_example": (1, "int64")}


def question_features(question: dict, context: AlignedContext, tokenizer, max_seq_length: int,
                      doc_stride: int, max_query_length: int, unique_id: int,
                      is_training: bool) -> list[dict]:
    """The features of one question (one per context window). Each carries `offset` (index of
    the window's first piece in the sequence), `window` (start, length) in the context's pieces,
    `max_context` (per window piece, `windows_in_graph`'s official `_check_is_max_context`)
    and, when training, the answer's piece positions in the sequence (0, 0 = [CLS] when the
    window does not hold the whole answer, or the question has none or is marked
    `is_impossible`, as official)."""
    return questions_features([question], [context], tokenizer, max_seq_length, doc_stride,
                              max_query_length, unique_id, is_training)


def questions_features(questions, contexts, tokenizer, max_seq_length: int, doc_stride: int,
                       max_query_length: int, unique_id: int, is_training: bool,
                       batch_size: int = 512) -> list[dict]:
    """`question_features` of many questions (with their `AlignedContext`s), in order, unique
    ids from `unique_id` on: the windows are `windows_in_graph`'s, the records' and the
    SavedModel's one definition."""
    if isinstance(max_query_length, bool) or not isinstance(max_query_length, int) \
            or max_query_length < 0:
        raise ValueError("--max_query_length must be a non-negative integer (official: 64). "
                         f"Received: {max_query_length!r}")
    window_fn = for_batches(functools.partial(windows_in_graph, max_seq_length=max_seq_length,
                                              doc_stride=doc_stride),
                            len(questions), batch_size, 2)
    features = []
    for begin in range(0, len(questions), batch_size):
        batch = questions[begin:begin + batch_size]
        queries = [tokenizer.encode(q["question"])[:max_query_length] for q in batch]
        for query, q in zip(queries, batch):
            _check_budget(max_seq_length - len(query) - 3, doc_stride,
                          f"question {q['id']!r} ({len(query)} pieces)")
        out = {k: v.numpy() for k, v in window_fn(
            ragged_rows(queries), ragged_rows([c.ids for c in contexts[begin:begin + batch_size]])
        ).items()}
        features += _labelled(batch, contexts[begin:begin + batch_size], out, max_seq_length,
                              unique_id + len(features))
    return features


def _labelled(questions, contexts, out: dict, max_seq_length: int, unique_id: int) -> list:
    """The features of `windows_in_graph`'s numpy output for `questions`, with labels."""
    answers = []
    for question, context in zip(questions, contexts):
        answer = None
        if question["answers"] and not question.get("is_impossible"):
            text, start = question["answers"][0], question["answer_starts"][0]
            answer = context.piece_span(start, start + len(text))
            if answer is None:  # whitespace only: the piece after it, as the official
                # `_convert_index` maps such a span (never [CLS] for an answerable question)
                after = next((i for i, e in enumerate(context.ends) if e > start), None)
                answer = None if after is None else (after, after)
        answers.append(answer)
    features = []
    for w, example in enumerate(out["example"].tolist()):
        start, length = int(out["window_start"][w]), int(out["window_length"][w])
        offset = int(out["offset"][w])
        n = offset + length + 1
        pad = max_seq_length - n
        answer = answers[example]
        start_position = end_position = 0
        if answer is not None and start <= answer[0] and answer[1] < start + length:
            start_position, end_position = answer[0] - start + offset, answer[1] - start + offset
        features.append({
            "input_ids": out["input_ids"][w, :n].tolist() + [0] * pad,
            "input_mask": [1] * n + [0] * pad,
            "segment_ids": out["segment_ids"][w, :n].tolist() + [0] * pad,
            START_POSITIONS: [start_position], END_POSITIONS: [end_position],
            UNIQUE_IDS: [unique_id + w], "is_real_example": [1], "offset": offset,
            "window": (start, length), "max_context": out["max_context"][w, :length].tolist(),
            "id": questions[example]["id"]})
    return features


# The span model and the task the training loop runs.
def write_features(features, path: str, max_seq_length: int, num_files: int = 1,
                   digest: str | None = None, pad_to_multiple: int = 1, **meta) -> dict:
    """The features as TFRecords with sidecars (counts, `digest`: `features_digest` of what
    they were made from, and `meta`), atomically, in `num_files` files
    (`albert_tf.records.write_records`); `pad_to_multiple` appends `is_real_example = 0`
    features (all zeros) up to a multiple of it (an evaluation file read in whole batches).
    Returns the sidecar with `files`."""
    schema = squad_schema(max_seq_length)
    records = [to_example(feature, schema) for feature in features]
    padding = (-len(records)) % pad_to_multiple
    if padding:
        pad = {name: [0] * length for name, (length, _) in schema.items()}
        records.extend([to_example(pad, schema)] * padding)
    meta = dict(meta, format="albert_squad_tfrecord", num_examples=len(records),
                real_examples=len(features), padding_examples=padding,
                max_seq_length=max_seq_length, digest=digest)
    files = write_records(records, path, meta, files_for(len(records), num_files))
    return dict(meta, files=files)


# Raised when the features of the same inputs change. 2: pieces aligned to their own
# characters where NFKD changes a word's length (official alignment).
# 3: the re-encoded part of a digit-comma piece keeps its "▁" (official); every training
# question trained (the official ALBERT reader), none skipped.
FEATURES_REVISION = 3


def features_digest(path: str, tokenizer, max_seq_length: int, doc_stride: int,
                    max_query_length: int, is_training: bool, seed: int | None,
                    pad_to_multiple: int = 1) -> str:
    """What a feature file was made from: the SQuAD file's bytes, the tokenizer (its model's
    SHA-256 and case), every windowing flag, the shuffle seed and the padding. A file whose
    sidecar records the same digest is reused (as the official runners reuse their
    `--train_feature_file` / `--predict_feature_file`); another is not."""
    return hashlib.sha256(json.dumps(
        [file_sha256(path), tokenizer.sha256, tokenizer.do_lower_case, max_seq_length,
         doc_stride, max_query_length, bool(is_training), seed, pad_to_multiple,
         FEATURES_REVISION]).encode()).hexdigest()


@functools.lru_cache(maxsize=16)  # a context's questions come one after another
def _context_words(context: str) -> tuple[tuple, tuple]:
    """(whitespace-separated words, index of the word of each character): a whitespace
    character belongs to the word before it (-1 before the first), as in the official reader."""
    words, word_of_char = [], []
    previous_is_space = True
    for ch in context:
        if ch.isspace():
            previous_is_space = True
        else:
            if previous_is_space:
                words.append(ch)
            else:
                words[-1] += ch
            previous_is_space = False
        word_of_char.append(len(words) - 1)
    return tuple(words), tuple(word_of_char)


def answer_found(context: str, text: str, start) -> tuple[bool, str]:
    """(whether the answer is where it says, the context's words it points at): the official
    BERT `read_squad_examples` check, `" ".join(text.split())` found in the whitespace-separated
    words that characters [start, start + len(text)) touch. Words are split on the same
    whitespace as the answer (BERT splits the context on ASCII whitespace only, so it would
    also drop an answer holding a no-break space that its context holds too). An empty text, a
    negative start and a span past the context's end are not found (BERT would index from the
    end or raise an IndexError)."""
    cleaned = " ".join(text.split())
    if not isinstance(start, int) or start < 0 or not cleaned or start + len(text) > len(context):
        return False, ""
    words, word_of_char = _context_words(context)
    first = max(word_of_char[start], 0)  # -1: whitespace before the first word
    actual = " ".join(words[first:word_of_char[start + len(text) - 1] + 1])
    return cleaned in actual, actual


def training_questions(dataset, source: str) -> tuple[list[dict], list[dict]]:
    """(questions to train on, unfound) of a training set, as the official ALBERT reader: every
    question is trained; one marked `is_impossible` toward [CLS]; an answerable one needs
    exactly one answer with an answer_start and a text inside its context (else
    `SquadDataError`). `unfound`: the answerable ones whose text is not where answer_start
    says (`answer_found`), trained on the span there as official: {"id", "actual" (the
    context's words there), "answer"}."""
    questions = squad_eval.questions(dataset)
    several = [q["id"] for q in questions if not q["is_impossible"] and len(q["answers"]) > 1]
    if several:
        shown = ", ".join(repr(qid) for qid in several[:5])
        raise squad_eval.SquadDataError(
            f"{source}: {len(several)} training question(s) have several answers ({shown}"
            f"{' ...' if len(several) > 5 else ''}); the official reader trains on exactly one "
            "per question and refuses the file too (an evaluation file lists several: train on "
            "a training file, or keep one answer per question).")
    kept, unfound = [], []
    for q in questions:
        kept.append(q)
        if q["is_impossible"]:
            continue
        where = f"{source}: training question {q['id']!r}"
        if not q["answers"]:
            raise squad_eval.SquadDataError(
                f"{where} has no answer and is not marked \"is_impossible\": true; the official "
                "reader refuses it too.")
        text, start = q["answers"][0], q["answer_starts"][0]
        if start is None:
            raise squad_eval.SquadDataError(f"{where}: its answer has no \"answer_start\".")
        if not text.strip() or start < 0 or start + len(text) > len(q["context"]):
            raise squad_eval.SquadDataError(
                f"{where}: its answer {text[:60]!r} at answer_start {start} is "
                + ("empty" if not text.strip() else
                   f"outside its context ({len(q['context'])} characters)")
                + "; the official reader fails on it (or reads from the context's end).")
        found, actual = answer_found(q["context"], text, start)
        if not found:
            unfound.append({"id": q["id"], "actual": actual, "answer": " ".join(text.split())})
    return kept, unfound


def _log_unfound(source: str, unfound: list[dict], total: int, shown: int = 5) -> None:
    first = "; ".join(f"{s['id']} ({s['actual'][:60]!r} vs. {s['answer'][:60]!r})"
                      for s in unfound[:shown])
    logging.warning("%s: %d of %d training questions have an answer text that is not in the "
                    "context at answer_start; each is trained on the span there, as the "
                    "official ALBERT reader does (BERT's reader skips them: \"Could not find "
                    "answer\"): %s%s", source, len(unfound), total, first,
                    " ..." if len(unfound) > shown else "")


def build_features(path: str, tokenizer, max_seq_length: int, doc_stride: int,
                   max_query_length: int, is_training: bool, seed: int | None = None):
    """(dataset, features, {question id: AlignedContext}) of a SQuAD file; training features in
    a seeded order. When training, every question is trained (`training_questions`); those
    whose answer text is not at their answer_start are counted in one warning."""
    dataset = squad_eval.load_dataset(path)
    if is_training:
        chosen, unfound = training_questions(dataset, path)
        if unfound:
            _log_unfound(path, unfound, len(chosen))
    else:
        chosen = squad_eval.questions(dataset)
    contexts, aligned = {}, {}
    for q in chosen:
        if q["context"] not in aligned:
            aligned[q["context"]] = align_context(q["context"], tokenizer)
        contexts[q["id"]] = aligned[q["context"]]
    features = questions_features(chosen, [contexts[q["id"]] for q in chosen], tokenizer,
                                  max_seq_length, doc_stride, max_query_length, 1000000,
                                  is_training)
    if is_training and seed is not None:
        order = np.random.default_rng([seed, 0x5A0AD]).permutation(len(features))
        features = [features[i] for i in order]
    return dataset, features, contexts
