"""ALBERT pretraining examples: segments, sentence-order labels, truncation and n-gram masking.

Pure functions of their inputs and an explicit `numpy.random.Generator`; no global randomness,
no flags. The algorithm is the official `create_pretraining_data.py` (google-research/albert)
working on token ids, with these deliberate differences:

1. Every draw comes from the generators passed in: the chunking's (target length, `a_end`, the
   coins, which other document and from which sentence: `plan_document`) from one, truncation
   and masking (`instances_of_plan`) from another, so which segments of other documents a pass
   reads is known before any is read. The official script draws all from one generator, and the
   n-gram length from numpy's global, unseeded one, so its output is not reproducible.
2. The "skip a start whose first word is already covered" check works. In the official script it
   is a no-op (`continue` inside an inner loop); the later overlap check rejects such n-grams
   anyway, so only the number of random draws differs, not the distribution.
3. A continuation piece right after [CLS]/[SEP] (possible after front truncation) starts a new
   word; the official script joins it to the last word of the previous segment, across [SEP].
4. The 10% random replacement draws from ordinary pieces only (`Vocabulary.replacement_ids`:
   not pad, unknown or control; of a WordPiece vocabulary, no reserved "[...]" token); the
   official script can draw [CLS], [SEP], [MASK] or pad.
5. `random_next_sentence=True` selects random-document negatives (NSP-style), which is what the
   official code does; its help text says the opposite.

Everything else follows the official algorithm step by step (`create_pretraining_data.py`; docs/data.md): one target
length per document and pass (`max_seq_length - 3`, or with probability `short_seq_prob` a
uniform integer in [2, max_seq_length - 3]), chunking sentences up to it, `a_end` uniform in
[1, n-1], swap with probability 1/2 (label 1), one-sentence chunks completed from a random other
document (label 1, unused sentences put back), truncation of the longer segment from the front
or back with probability 1/2, whole-word n-grams
with P(n) proportional to 1/n falling back to shorter n-grams within the budget
`min(max_predictions_per_seq, max(1, round(masked_lm_prob * len(tokens))))`, and 80/10/10.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools

import numpy as np
from albert_tf import features as F


@dataclasses.dataclass(frozen=True)
class GenerationParams:
    """The generation settings that shape examples (official flag names)."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    random_next_sentence: bool = False
    # Not official: every example is two segments of one document (an evaluation set of
    # sentence order whose labels are balanced and cannot be told by topic); see
    # `create_instances_from_document`.
    sentence_order_pairs_only: bool = False

    def __post_init__(self):
        checks = [
            (self.max_seq_length >= 5, "--max_seq_length must be at least 5 ([CLS] A [SEP] B "
                                       f"[SEP]); got {self.max_seq_length}"),
            (1 <= self.max_predictions_per_seq <= self.max_seq_length - 3,
             f"--max_predictions_per_seq={self.max_predictions_per_seq} must be in [1, "
             f"max_seq_length - 3 = {self.max_seq_length - 3}]: a sequence of "
             f"--max_seq_length={self.max_seq_length} has at most {self.max_seq_length - 3} "
             "maskable tokens"),
            (0 < self.masked_lm_prob <= 1,
             f"--masked_lm_prob must be in (0, 1]; got {self.masked_lm_prob}"),
            (0 <= self.short_seq_prob <= 1,
             f"--short_seq_prob must be in [0, 1]; got {self.short_seq_prob}"),
            (self.ngram >= 1, f"--ngram must be at least 1; got {self.ngram}"),
            (not (self.sentence_order_pairs_only and self.random_next_sentence),
             "--sentence_order_pairs_only takes both segments from one document; it cannot be "
             "combined with --random_next_sentence (B from random documents)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def max_num_tokens(self) -> int:
        return self.max_seq_length - 3

    @property
    def ngram_probabilities(self) -> np.ndarray:
        """P(n) for n = 1..ngram: proportional to 1/n, reversed unless favor_shorter_ngram."""
        p = 1.0 / np.arange(1, self.ngram + 1)
        p /= p.sum()
        return p if self.favor_shorter_ngram else p[::-1].copy()


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """What masking needs to know about the vocabulary (SentencePiece or WordPiece)."""

    cls_id: int
    sep_id: int
    mask_id: int
    start_piece_mask: np.ndarray  # bool [V]: the piece starts a word
    replacement_ids: np.ndarray   # int32: ids the 10% random replacement may draw

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "Vocabulary":
        if tokenizer.mask_id is None:
            raise ValueError(f"The vocabulary {tokenizer.vocabulary_file} has no [MASK] token, "
                             "which masked-LM pretraining data is made with: add a [MASK] line "
                             "to it (fine-tuning and serving need none).")
        return cls(tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id,
                   tokenizer.start_piece_mask, tokenizer.replacement_ids)


@dataclasses.dataclass
class Instance:
    """One pretraining example (unpadded), plus diagnostics that are not written."""

    input_ids: np.ndarray          # int32 [n]: [CLS] A [SEP] B [SEP], masked
    segment_ids: np.ndarray        # int32 [n]
    token_boundary: np.ndarray     # int32 [n]: 1 where a word starts (and at [CLS]/[SEP])
    masked_lm_positions: np.ndarray  # int32 [k], ascending
    masked_lm_ids: np.ndarray      # int32 [k]: original ids at those positions
    next_sentence_label: int       # 1: segments swapped (or B from another document)
    # Diagnostics.
    random_document: bool = False  # B came from another document
    short_target: bool = False     # the document's target length (this pass) was short
    masked_unit_lengths: tuple = ()  # words per accepted n-gram, in acceptance order
    num_to_predict: int = 0


class Documents:
    """Minimal document store interface: `len(store)`, `store.num_sentences(d)`,
    `store.sentence(d, j)` (int array). `ListDocuments` holds lists in memory; the generator
    uses a memory-mapped token cache with the same interface."""

    def __len__(self) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def num_sentences(self, doc: int) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def sentence(self, doc: int, index: int) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class ListDocuments(Documents):
    """Documents as lists of sentences of token ids."""

    def __init__(self, documents):
        self.documents = [[np.asarray(s, np.int32) for s in d] for d in documents]

    def __len__(self):
        return len(self.documents)

    def num_sentences(self, doc):
        return len(self.documents[doc])

    def sentence(self, doc, index):
        return self.documents[doc][index]


# ---------------------------------------------------------------------------------------------
def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int, rng) -> None:
    """Truncates in place: one token at a time from the longer segment (B on ties), from the
    front or the back with probability 1/2, until len(A) + len(B) <= max_num_tokens."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def _word_bounds(is_special: np.ndarray, starts_word: np.ndarray, whole_word: bool):
    """(positions of the non-special tokens, word boundaries into them): word k is
    positions[bounds[k]:bounds[k + 1]]. A word is a run of non-special tokens, each new one at a
    piece that starts a word, after a special token, or at every token without whole words."""
    positions = np.flatnonzero(~is_special)
    after_special = np.ones(len(is_special), bool)
    after_special[1:] = is_special[:-1]
    new_word = after_special | starts_word if whole_word else np.ones(len(is_special), bool)
    bounds = np.append(np.flatnonzero(new_word[positions]), len(positions))
    return positions, bounds


@functools.lru_cache(maxsize=None)
def _ngram_cumulative(params: GenerationParams) -> tuple:
    """The cumulative n-gram probabilities (Python floats: `bisect` on them equals numpy's
    `searchsorted(side="right")` on the same float64 values)."""
    return tuple(np.cumsum(params.ngram_probabilities).tolist())


def create_masked_lm_predictions(tokens: np.ndarray, params: GenerationParams,
                                 vocab: Vocabulary, rng):
    """Whole-word n-gram masking with 80/10/10 replacement.

    Returns (output_tokens, masked_positions [ascending], masked_original_ids,
    token_boundary, unit_lengths, num_to_predict).
    """
    is_special = (tokens == vocab.cls_id) | (tokens == vocab.sep_id)
    starts_word = vocab.start_piece_mask[tokens]
    token_boundary = (is_special | starts_word).astype(np.int32)
    positions, bounds = _word_bounds(is_special, starts_word, params.do_whole_word_mask)
    positions, bounds = positions.tolist(), bounds.tolist()
    num_words = len(bounds) - 1
    num_to_predict = min(params.max_predictions_per_seq,
                         max(1, int(round(len(tokens) * params.masked_lm_prob))))
    ngram = params.ngram
    cumulative = _ngram_cumulative(params)
    total = cumulative[-1]
    starts = np.arange(num_words)
    rng.shuffle(starts)
    random, integers = rng.random, rng.integers
    mask_id, replacement_ids = vocab.mask_id, vocab.replacement_ids
    output = tokens.tolist()
    covered = bytearray(len(positions))  # by index into `positions`
    masked = []
    unit_lengths = []
    for start in starts.tolist():
        if len(masked) >= num_to_predict:
            break
        first = bounds[start]
        if covered[first]:
            continue  # its first word is already masked (difference 2)
        # P(n) proportional to 1/n over n = 1..ngram; the n-gram is cut at the sequence end.
        n = min(bisect.bisect_right(cumulative, random() * total) + 1, ngram)
        while True:
            end = bounds[min(start + n, num_words)]
            if len(masked) + end - first <= num_to_predict or n == 1:
                break
            n -= 1
        if len(masked) + end - first > num_to_predict:
            continue
        if 1 in covered[first:end]:
            continue
        covered[first:end] = b"\x01" * (end - first)
        unit_lengths.append(min(n, num_words - start))
        for index in positions[first:end]:
            if random() < 0.8:
                output[index] = mask_id
            elif random() < 0.5:
                pass  # keep the original token
            else:
                output[index] = int(replacement_ids[integers(len(replacement_ids))])
            masked.append(index)
    masked.sort()
    masked_positions = np.asarray(masked, np.int32)
    return (np.asarray(output, tokens.dtype), masked_positions,
            tokens[masked_positions].astype(np.int32), token_boundary, tuple(unit_lengths),
            num_to_predict)


def _concat(store: Documents, doc: int, indexes) -> list:
    out = []
    for j in indexes:
        out.extend(store.sentence(doc, j).tolist())
    return out


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One example's segments before truncation and masking (`plan_document`): sentence indexes
    of its own document, or a segment of another one."""

    a: tuple                # sentence indexes of segment A (before the swap)
    b: tuple = ()           # sentence indexes of segment B (own document)
    swapped: bool = False   # label 1 by the swap (B written first)
    short: bool = False     # the document's target length (this pass) was short
    other: int = -1         # B from this other document (label 1), from sentence `start` on,
    start: int = 0          # until it holds at least `target_b` tokens (`random_segment`)
    target_b: int = 0

    @property
    def request(self) -> tuple:
        """(other document, start sentence, target_b): what B reads from another document."""
        return self.other, self.start, self.target_b


def random_segment(store: Documents, doc: int, start: int, target_b: int) -> list:
    """Segment B taken from another document: its sentences from `start` on, until they hold at
    least `target_b` tokens (or the document ends)."""
    tokens = []
    for j in range(start, store.num_sentences(doc)):
        tokens.extend(store.sentence(doc, j).tolist())
        if len(tokens) >= target_b:
            break
    return tokens


def plan_document(store: Documents, doc_index: int, params: GenerationParams,
                  rng) -> list[Chunk]:
    """The chunking of one document (one pass): every structural draw - the target length (one
    for the whole document, as the official script draws it), `a_end`, swap and random-document
    coins, which other document and from which sentence. It reads only
    this document's sentence lengths, `len(store)` and the other document's sentence count, never
    another document's tokens, so the segments a pass needs from other documents are known before
    any of them is read (the Beam pipeline fetches them with a keyed join).

    With `params.sentence_order_pairs_only` a chunk is closed only once it holds two sentences
    (or at the document's end), and a chunk of one sentence (a document's lone last sentence, a
    one-sentence document) gives no example: no segment B comes from another document, so the
    sentence-order label is the swap's coin flip alone (balanced) and says nothing about topic."""
    num_sentences = store.num_sentences(doc_index)
    max_num_tokens = params.max_num_tokens
    pairs_only = params.sentence_order_pairs_only
    # One target for the whole document (this pass), as the official script draws it: with
    # probability short_seq_prob every chunk of the document aims at the same short length.
    target, short = max_num_tokens, False
    if rng.random() < params.short_seq_prob:
        target, short = int(rng.integers(2, max_num_tokens + 1)), True
    chunks = []
    chunk, lengths, length, i = [], [], 0, 0
    while i < num_sentences:
        chunk.append(i)
        lengths.append(len(store.sentence(doc_index, i)))
        length += lengths[-1]
        if i == num_sentences - 1 or (length >= target
                                      and (len(chunk) >= 2 or not pairs_only)):
            if pairs_only and len(chunk) == 1:  # the document's lone last sentence
                break
            a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
            a = tuple(chunk[:a_end])
            if len(chunk) == 1 or (params.random_next_sentence and rng.random() < 0.5):
                for _ in range(10):
                    other = int(rng.integers(len(store)))
                    if other != doc_index:
                        break
                start = int(rng.integers(store.num_sentences(other)))
                chunks.append(Chunk(a, short=short, other=other, start=start,
                                    target_b=target - sum(lengths[:a_end])))
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                swapped = not params.random_next_sentence and bool(rng.random() < 0.5)
                chunks.append(Chunk(a, tuple(chunk[a_end:]), swapped, short))
            chunk, lengths, length = [], [], 0
        i += 1
    return chunks


def instances_of_plan(store: Documents, doc_index: int, chunks, params: GenerationParams,
                      vocab: Vocabulary, rng, segments=None) -> list[Instance]:
    """The examples of `plan_document`'s chunks: segments, truncation and masking, every draw
    from `rng`. `segments` maps a chunk's `request` to its B tokens; without it they are read
    from `store` (`random_segment`)."""
    instances = []
    for c in chunks:
        tokens_a = _concat(store, doc_index, c.a)
        if c.other >= 0:
            tokens_b = (list(segments[c.request]) if segments is not None
                        else random_segment(store, *c.request))
        else:
            tokens_b = _concat(store, doc_index, c.b)
            if c.swapped:
                tokens_a, tokens_b = tokens_b, tokens_a
        truncate_seq_pair(tokens_a, tokens_b, params.max_num_tokens, rng)
        tokens = np.asarray([vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b
                            + [vocab.sep_id], np.int32)
        segment_ids = np.zeros(len(tokens), np.int32)
        segment_ids[len(tokens_a) + 2:] = 1
        (output, positions, labels, boundary, units,
         num_to_predict) = create_masked_lm_predictions(tokens, params, vocab, rng)
        label = int(c.other >= 0 or c.swapped)
        instances.append(Instance(output, segment_ids, boundary, positions, labels, label,
                                  c.other >= 0, c.short, units, num_to_predict))
    return instances


def create_instances_from_document(store: Documents, doc_index: int, params: GenerationParams,
                                   vocab: Vocabulary, rng) -> list[Instance]:
    """All examples of one document (one pass of `dupe_factor`), every draw from `rng`:
    `plan_document`, then `instances_of_plan`. Off `sentence_order_pairs_only`, the official
    algorithm's steps (differences above). The generator gives the two steps generators of their
    own (`albert_tf.data.generator.unit_examples`)."""
    chunks = plan_document(store, doc_index, params, rng)
    return instances_of_plan(store, doc_index, chunks, params, vocab, rng)


def instances_features(instances, params: GenerationParams) -> dict:
    """The official TFRecord features of `instances`, padded, one row per instance: {name:
    (values [n, length], dtype)} for `albert_tf.records.encode_examples`."""
    n, seq, preds = len(instances), params.max_seq_length, params.max_predictions_per_seq
    columns = {name: np.zeros((n, seq), np.int64) for name in
               (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS, F.TOKEN_BOUNDARY)}
    positions, ids = np.zeros((n, preds), np.int64), np.zeros((n, preds), np.int64)
    weights, labels = np.zeros((n, preds), np.float32), np.zeros((n, 1), np.int64)
    for row, inst in enumerate(instances):
        length, k = len(inst.input_ids), len(inst.masked_lm_positions)
        columns[F.INPUT_IDS][row, :length] = inst.input_ids
        columns[F.INPUT_MASK][row, :length] = 1
        columns[F.SEGMENT_IDS][row, :length] = inst.segment_ids
        columns[F.TOKEN_BOUNDARY][row, :length] = inst.token_boundary
        positions[row, :k] = inst.masked_lm_positions
        ids[row, :k] = inst.masked_lm_ids
        weights[row, :k] = 1.0
        labels[row, 0] = inst.next_sentence_label
    features = {name: (values, "int64") for name, values in columns.items()}
    features.update({F.MASKED_LM_POSITIONS: (positions, "int64"),
                     F.MASKED_LM_IDS: (ids, "int64"), F.MASKED_LM_WEIGHTS: (weights, "float32"),
                     F.NEXT_SENTENCE_LABELS: (labels, "int64")})
    return features
