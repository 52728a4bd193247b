"""In-graph: the alignment, windows and decoding as TensorFlow ops, for SavedModels that take
a question and a context as text (`albert_tf.export.serving_tasks`). The windows
(`windows_in_graph`) are the one definition: `features` cuts the records with them too. The
alignment and the decoding have Python twins (`features.align_context`, `decoding`): the
records' alignment follows the Python SentencePiece, which breaks equal-score ties as the
official data does (docs/differences.md); tests compare the twins."""

from __future__ import annotations

import functools
import tensorflow as tf
from albert_tf.tokenization import SPIECE_UNDERLINE
from albert_tf.tokenization.in_graph import _ranges_class
from albert_tf.packing import join_in_graph

# The whitespace the context is split on into words (with str.isspace()); `features` too.
_WHITESPACE = frozenset(" \t\r\n\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                        "\u2009\u200a\u202f\u205f\u3000\u200b\ufeff")


@functools.lru_cache(maxsize=None)  # also keeps autograph from converting the loop
def _word_delimiters() -> str:
    return _ranges_class(lambda c: c in _WHITESPACE or c.isspace()) + "+"


def _flat_index(ragged, rows, columns):
    """Flat-value index of element (rows[i], columns[i]) of a 2-D ragged tensor."""
    return tf.gather(ragged.row_splits, rows) + tf.cast(columns, ragged.row_splits.dtype)


def align_context_in_graph(contexts, tokenizer):
    """`align_context` for a batch, with byte offsets.

    Args:
        contexts: string [batch]; bytes that are not UTF-8 are replaced by U+FFFD first.
        tokenizer: `albert_tf.tokenization.InGraphTokenizer`.

    Returns:
        (text, ids, starts, ends): `text` string [batch], the contexts after the replacement;
        `ids` int32 and `starts`, `ends` int64 RaggedTensors [batch, (pieces)]: the pieces'
        ids and [start, end) byte offsets in `text` (the characters of `align_context`'s
        spans).
    """
    import tensorflow_text as tf_text

    text = tf.strings.unicode_transcode(contexts, "UTF-8", "UTF-8", errors="replace",
                                        replacement_char=0xFFFD)
    words, word_begin, word_end = tf_text.regex_split_with_offsets(text, _word_delimiters())
    flat_words = words.flat_values
    preprocessed = tokenizer.preprocess(flat_words)
    pieces = tokenizer.tokenize_pieces(preprocessed, preprocessed=True)  # [words, (pieces)]
    surfaces = pieces.with_flat_values(
        tf.strings.regex_replace(pieces.flat_values, SPIECE_UNDERLINE, ""))
    word_chars = tf.cast(tf.strings.length(flat_words, unit="UTF8_CHAR"), tf.int64)
    # `_source_characters`: the word's characters preprocessed one by one; character k of the
    # preprocessed word comes from character sources[k] of the word (then the word's length).
    chars = tf.strings.unicode_split(flat_words, "UTF-8")  # [words, (characters)]
    expansion = tf.cast(tf.strings.length(tokenizer.preprocess(chars.flat_values),
                                          unit="UTF8_CHAR"), tf.int64)
    expanded = tf.reduce_sum(chars.with_flat_values(expansion), axis=1)  # [words]
    sources = tf.concat([tf.RaggedTensor.from_row_lengths(tf.repeat(
        tf.ragged.range(chars.row_lengths()).flat_values, expansion), expanded),
        tf.RaggedTensor.from_tensor(word_chars[:, None])], axis=1)
    aligned = (tf.equal(tf.strings.reduce_join(surfaces, axis=1), preprocessed)
               & tf.equal(tf.cast(tf.strings.length(preprocessed, unit="UTF8_CHAR"), tf.int64),
                          expanded))
    # Span of each piece in its preprocessed word: running sum of surface lengths per word.
    lengths = tf.strings.length(surfaces.flat_values, unit="UTF8_CHAR")
    lengths = tf.cast(lengths, tf.int64)
    running = tf.cumsum(lengths)
    before = tf.gather(tf.concat([[0], running], 0), pieces.row_starts())  # per word
    word_of = pieces.value_rowids()
    char_end = running - tf.gather(before, word_of)
    char_start = char_end - lengths
    # Source characters: of the first, and just past the last (empty: the next one's). Clipped
    # to the word, so unaligned words (spans unused) gather inside their own row.
    limit = tf.gather(expanded, word_of)
    first = tf.gather(sources.flat_values, _flat_index(sources, word_of, tf.minimum(
        char_start, limit)))
    last = tf.gather(sources.flat_values, _flat_index(sources, word_of, tf.clip_by_value(
        char_end - 1, 0, limit)))
    past = tf.where(lengths > 0, last + 1, first)
    # Byte offset of each character of each word, plus the word's byte length at the end.
    _, char_bytes = tf.strings.unicode_decode_with_offsets(flat_words, "UTF-8")
    word_bytes = tf.cast(tf.strings.length(flat_words), tf.int64)
    char_bytes = tf.concat([char_bytes, tf.RaggedTensor.from_tensor(word_bytes[:, None])],
                           axis=1)
    aligned_piece = tf.gather(aligned, word_of)
    begin = tf.gather(word_begin.flat_values, word_of)
    end = tf.gather(word_end.flat_values, word_of)
    starts = tf.where(aligned_piece, begin + tf.gather(
        char_bytes.flat_values, _flat_index(char_bytes, word_of, first)), begin)
    ends = tf.where(aligned_piece, begin + tf.gather(
        char_bytes.flat_values, _flat_index(char_bytes, word_of, past)), end)
    # [batch, (words), (pieces)] -> [batch, (pieces)].
    nested = tf.RaggedTensor.from_nested_row_splits(
        pieces.flat_values, [words.row_splits, pieces.row_splits]).merge_dims(1, 2)
    # A piece that is only "▁" (empty span) takes the next piece's start, as `align_context`.
    n = tf.size(starts, out_type=tf.int64)
    index = tf.range(n)
    limit = tf.gather(nested.row_limits(), nested.value_rowids())
    has_next = index + 1 < limit
    next_start = tf.gather(tf.concat([starts, [0]], 0), index + 1)
    empty = tf.equal(starts, ends) & has_next
    starts = tf.where(empty, next_start, starts)
    ends = tf.where(empty, next_start, ends)
    ids = nested.with_flat_values(tokenizer.pieces_to_ids(nested.flat_values))
    return (text, ids, nested.with_flat_values(starts), nested.with_flat_values(ends))


def windows_in_graph(query_ids, context_ids, max_seq_length: int, doc_stride: int):
    """`question_features` for a batch, without labels: one row per context window.

    Args:
        query_ids: int32 RaggedTensor [batch, (pieces)], already cut to `max_query_length`
            (at most `max_seq_length - 4`, so every window holds a piece).
        context_ids: int32 RaggedTensor [batch, (pieces)].

    Returns:
        dict: `input_ids`, `input_mask`, `segment_ids` int32 [windows, length] (padded to the
        longest window), `example` (the batch row of each window), `offset` (index of the
        window's first context piece in the sequence), `window_start`, `window_length` (in
        the context's pieces); int64 [windows], except the features.
    """
    query_length = query_ids.row_lengths()
    pieces = context_ids.row_lengths()
    budget = max_seq_length - query_length - 3
    step = tf.minimum(budget, doc_stride)
    count = 1 + (tf.maximum(pieces - budget, 0) + step - 1) // step  # as `windows`
    example = tf.repeat(tf.range(tf.size(count, out_type=tf.int64)), count)
    start = tf.ragged.range(count).flat_values * tf.gather(step, example)
    length = tf.minimum(tf.gather(budget, example), tf.gather(pieces, example) - start)
    first = tf.gather(context_ids.row_starts(), example) + start
    window = tf.gather(context_ids.flat_values, tf.ragged.range(first, first + length))
    features = join_in_graph(tf.gather(query_ids, example), window)
    return {**features, "example": example,
            "offset": tf.gather(query_length, example) + 2, "window_start": start,
            "window_length": length,
            "max_context": _max_context(first, length, tf.size(context_ids.flat_values))}


def _max_context(first, length, num_pieces):
    """`features.max_context` for every window at once: bool [windows, longest window], True
    where the window is that piece's window of maximum context (integer score 100 x min(left,
    right) + length; the first window on ties). `first`: each window's first piece in the
    batch's flat pieces, `length`: its length (int64 [windows])."""
    j = tf.ragged.range(length)  # [windows, (length)]
    rows = tf.cast(j.value_rowids(), tf.int64)
    j = j.flat_values
    window_length = tf.gather(length, rows)
    score = 100 * tf.minimum(j, window_length - 1 - j) + window_length
    piece = tf.gather(first, rows) + j
    best = tf.math.unsorted_segment_max(score, piece, num_pieces)
    candidate = tf.where(tf.equal(score, tf.gather(best, piece)), rows,
                         tf.int64.max)
    chosen = tf.math.unsorted_segment_min(candidate, piece, num_pieces)
    flags = tf.equal(rows, tf.gather(chosen, piece))
    return tf.RaggedTensor.from_value_rowids(flags, rows,
                                             nrows=tf.size(length, out_type=tf.int64)).to_tensor(
        False)


def _best_window(window_score, window_first, window_last, windows, batch_size):
    """(score, first, last) [batch] of each question's best window (the first of equal scores,
    as the Python decoding): the window's best span score and its pieces in the context (int64;
    0 when no window has a valid span, score -inf). `window_first`/`window_last` are in the
    window's pieces."""
    neg_inf = tf.constant(float("-inf"), window_score.dtype)
    nrows = tf.cast(batch_size, tf.int64)
    per_question = tf.RaggedTensor.from_value_rowids(window_score, windows["example"],
                                                     nrows=nrows)
    chosen = tf.gather(per_question.row_starts(), tf.range(nrows)) \
        + tf.argmax(per_question.to_tensor(neg_inf), axis=1)
    score = tf.gather(window_score, chosen)
    found = score > neg_inf
    start = tf.gather(windows["window_start"], chosen)
    first = tf.where(found, tf.cast(tf.gather(window_first, chosen), tf.int64) + start, 0)
    last = tf.where(found, tf.cast(tf.gather(window_last, chosen), tf.int64) + start, 0)
    return score, first, last


def decode_in_graph(start_logits, end_logits, windows, batch_size, n_best: int = 20,
                    max_answer_length: int = 30):
    """`predict_answers`' choice for a batch: each question's best span over its windows.

    Args:
        start_logits, end_logits: float32 [windows, length].
        windows: `windows_in_graph`'s dict.
        batch_size: number of questions (scalar tensor).

    Returns:
        dict of [batch] tensors: `score` (best span's start + end logit, -inf when no window
        has a valid span), `first`, `last` (its pieces in the context, int64; 0 when none),
        `null_score` ([CLS] start + end, minimum over the windows), `null_odds`
        (`null_score - score`, as `null_odds.json`).
    """
    length = tf.shape(start_logits)[1]
    offset = tf.cast(windows["offset"], tf.int32)[:, None]
    window_end = offset + tf.cast(windows["window_length"], tf.int32)[:, None]  # exclusive
    positions = tf.range(length)[None, :]
    real = positions <= window_end  # through the final [SEP]
    neg_inf = tf.constant(float("-inf"), start_logits.dtype)
    k = tf.minimum(n_best, length)

    def in_top(logits):
        top = tf.math.top_k(tf.where(real, logits, neg_inf), k=k).indices  # [windows, k]
        return tf.reduce_any(tf.equal(positions[:, :, None], top[:, None, :]), axis=-1) & real

    top_start, top_end = in_top(start_logits), in_top(end_logits)
    # Candidate (s, e = s + d) for d < max_answer_length: [windows, length, max_answer_length].
    d = tf.range(max_answer_length)[None, None, :]
    s = tf.broadcast_to(positions[:, :, None],
                        tf.stack([tf.shape(start_logits)[0], length, max_answer_length]))
    e = s + d
    e_clipped = tf.minimum(e, length - 1)
    # The start's window of maximum context (`windows["max_context"]`, by context piece).
    max_context = windows["max_context"]
    piece = tf.clip_by_value(positions - offset, 0, tf.maximum(tf.shape(max_context)[1] - 1, 0))
    start_is_max = tf.gather(tf.pad(max_context, [[0, 0], [0, 1]]), piece, axis=1,
                             batch_dims=1)  # [windows, length]
    valid = (top_start[:, :, None] & tf.gather(top_end, e_clipped, axis=1, batch_dims=1)
             & start_is_max[:, :, None]
             & (s >= offset[:, :, None]) & (e < window_end[:, :, None]))
    score = (start_logits[:, :, None]
             + tf.gather(end_logits, e_clipped, axis=1, batch_dims=1))
    score = tf.reshape(tf.where(valid, score, neg_inf), [tf.shape(score)[0], -1])
    best = tf.argmax(score, axis=1, output_type=tf.int32)
    window_score = tf.reduce_max(score, axis=1)
    window_first = best // max_answer_length - offset[:, 0]
    window_last = window_first + best % max_answer_length
    score, first, last = _best_window(window_score, window_first, window_last, windows,
                                      batch_size)
    null = tf.RaggedTensor.from_value_rowids(start_logits[:, 0] + end_logits[:, 0],
                                             windows["example"],
                                             nrows=tf.cast(batch_size, tf.int64))
    null_score = tf.reduce_min(null, axis=1)
    return {"score": score, "first": first, "last": last, "null_score": null_score,
            "null_odds": null_score - score}


def decode_beam_in_graph(outputs: dict, windows, batch_size, max_answer_length: int = 30):
    """`predict_answers_v2`' choice for a batch of the answer-class model's beam outputs
    (`AlbertSquadV2`, one row per window): each question's best valid span over its windows
    (the rules of `best_beam_spans`, ties to the first in beam order and the first window) and
    its null score, the smallest `cls_logits` of its windows (also `null_odds`).

    Returns dict of [batch] tensors: `score`, `first`, `last` (int64 pieces in the context; 0
    when no span is valid), `null_score`, `null_odds`."""
    starts = tf.cast(outputs["start_top_index"], tf.int32)  # [windows, k1]
    ends = tf.cast(outputs["end_top_index"], tf.int32)  # [windows, k1 * k2]
    per_start = tf.shape(ends)[1] // tf.shape(starts)[1]
    s = tf.repeat(starts, per_start, axis=1)
    score = tf.repeat(tf.cast(outputs["start_top_log_probs"], tf.float32), per_start, axis=1) \
        + tf.cast(outputs["end_top_log_probs"], tf.float32)
    offset = tf.cast(windows["offset"], tf.int32)[:, None]
    window_end = offset + tf.cast(windows["window_length"], tf.int32)[:, None]  # exclusive
    max_context = tf.pad(windows["max_context"], [[0, 0], [0, 1]])
    piece = tf.clip_by_value(s - offset, 0, tf.shape(max_context)[1] - 1)
    valid = ((s >= offset) & (s < window_end) & (ends >= offset) & (ends < window_end)
             & (ends >= s) & (ends - s + 1 <= max_answer_length)
             & tf.gather(max_context, piece, axis=1, batch_dims=1))
    neg_inf = tf.constant(float("-inf"), tf.float32)
    score = tf.where(valid, score, neg_inf)
    best = tf.argmax(score, axis=1, output_type=tf.int32)
    window_score = tf.reduce_max(score, axis=1)
    pick = lambda t: tf.gather(t, best[:, None], axis=1, batch_dims=1)[:, 0]  # noqa: E731
    window_first, window_last = pick(s) - offset[:, 0], pick(ends) - offset[:, 0]
    score, first, last = _best_window(window_score, window_first, window_last, windows,
                                      batch_size)
    nrows = tf.cast(batch_size, tf.int64)
    null = tf.reduce_min(tf.RaggedTensor.from_value_rowids(
        tf.cast(outputs["cls_logits"], tf.float32), windows["example"], nrows=nrows), axis=1)
    return {"score": score, "first": first, "last": last, "null_score": null, "null_odds": null}
