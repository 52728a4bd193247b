"""SQuAD inputs: SentencePiece pieces aligned to the characters of the original context, answer
character spans mapped to piece spans, and windows of long contexts (document stride).

Alignment. The context is split on whitespace into words (SentencePiece never joins pieces
across whitespace, so a word's pieces are the same alone as in the whole text). Inside a word,
the pieces' surface strings (the `▁` removed) concatenated equal the preprocessed word whenever
preprocessing keeps its length (lowercasing ASCII and most scripts, quote replacement of
`` and '' aside); then each piece gets its exact character span in the original. Otherwise
(accents removed by NFKD, an unknown piece, SentencePiece's own normalisation) every piece of
the word spans the whole word, so an answer maps to whole words there. A predicted piece span is
turned back into text by slicing the original context between the first piece's start and the
last piece's end, so the answer text is the context's own characters.
"""

from __future__ import annotations

import dataclasses

from albert_tf.tokenization import SPIECE_UNDERLINE

_WHITESPACE = frozenset(" \t\r\n\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u202f\u205f\u3000\u200b\ufeff")


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


def align_context(text: str, tokenizer) -> AlignedContext:
    ids, pieces, starts, ends, exact = [], [], [], [], 0
    for word_start, word_end in _words(text):
        word = text[word_start:word_end]
        word_pieces = tokenizer.tokenize(word)
        surfaces = [p.replace(SPIECE_UNDERLINE, "") for p in word_pieces]
        preprocessed = tokenizer.preprocess(word)
        aligned = "".join(surfaces) == preprocessed and len(preprocessed) == len(word)
        offset = word_start
        for piece, surface in zip(word_pieces, surfaces):
            if aligned:
                starts.append(offset)
                offset += len(surface)
                ends.append(offset)
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


def windows(num_pieces: int, max_pieces: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over the context's pieces: each at most `max_pieces` long, each
    starting `doc_stride` after the previous, the last reaching the end (official rule)."""
    if max_pieces < 1 or doc_stride < 1:
        raise ValueError(f"max_pieces ({max_pieces}) and doc_stride ({doc_stride}) must be "
                         "positive; raise --max_seq_length or lower --max_query_length.")
    spans, start = [], 0
    while True:
        length = min(max_pieces, num_pieces - start)
        spans.append((start, length))
        if start + length >= num_pieces:
            return spans
        start += min(length, doc_stride)
