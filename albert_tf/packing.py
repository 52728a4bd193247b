"""Packing token ids into model inputs: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, with the
official fine-tuning truncation rule, in Python and in-graph (one rule, two implementations that
tests compare).

Truncation (official `run_classifier.py` / `_truncate_seq_pair`): while the pair is longer than
the budget (`max_seq_length - 3` for a pair, `max_seq_length - 2` for one segment), drop the last
token of the longer segment (of B when they are equally long). Pretraining data truncates
differently (front or back at random, `albert_tf.data.pretraining`), which is a training
augmentation; everything that feeds a trained model (fine-tuning features, serving) uses this rule.

The loop above has a closed form, used by both implementations: with budget T,
`len_a' = min(len_a, max(ceil(T/2), T - len_b))` and `len_b' = min(len_b, max(floor(T/2),
T - len_a))`. Tests check it against the loop for every pair of lengths up to 40.

Segment ids are 0 through the first [SEP] and 1 after it; the input mask is 1 on real tokens.
The [CLS] and [SEP] ids are the tokenizer's (`special`: a SentencePiece model's 2 and 3 when
not given; a WordPiece vocabulary has its own, `vocab_chinese.txt` 101 and 102).

An empty B packs as one segment, `[CLS] A [SEP]` (official `convert_single_example`: text_b is
tokenized only `if example.text_b`, and packed only `if tokens_b`): a pair whose B has no token
(an empty or all-whitespace text_b) gets no second [SEP] and the one-segment budget
`max_seq_length - 2`, in every implementation here.
"""

from __future__ import annotations

import numbers

from albert_tf.tokenization import CLS_ID, SEP_ID

PAIR_SPECIAL_TOKENS = 3  # [CLS] A [SEP] B [SEP]
SINGLE_SPECIAL_TOKENS = 2  # [CLS] A [SEP]


def _check_max_seq_length(max_seq_length: int, pair: bool) -> None:
    need = PAIR_SPECIAL_TOKENS if pair else SINGLE_SPECIAL_TOKENS
    if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) \
            or max_seq_length < need:
        raise ValueError(f"`max_seq_length` must be an integer of at least {need} (the [CLS] and "
                         f"[SEP] tokens of {'a pair' if pair else 'one segment'}). Received: "
                         f"max_seq_length={max_seq_length!r}")


def _special_ids(special) -> tuple[int, int]:
    """([CLS] id, [SEP] id) of `special`, a tokenizer (anything with `cls_id` and `sep_id`), or
    the SentencePiece ones when it is None."""
    return (CLS_ID, SEP_ID) if special is None else (special.cls_id, special.sep_id)


def truncated_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Lengths of A and B after longest-first truncation to `budget` tokens (closed form)."""
    keep_a = min(len_a, max((budget + 1) // 2, budget - len_b))
    keep_b = min(len_b, max(budget // 2, budget - len_a))
    return keep_a, keep_b


def packed_length(len_a, len_b=None):
    """The length of `[CLS] A [SEP] (B [SEP])` before truncation: `len_a + 2`, plus
    `len_b + 1` when B has tokens (an empty B packs as one segment). Python ints, or int
    tensors of one shape (`len_b` None: one segment)."""
    if len_b is None:
        return len_a + SINGLE_SPECIAL_TOKENS
    if isinstance(len_b, numbers.Integral):
        return len_a + SINGLE_SPECIAL_TOKENS + (len_b + 1 if len_b else 0)
    import tensorflow as tf

    return len_a + SINGLE_SPECIAL_TOKENS + tf.where(len_b > 0, len_b + 1, tf.zeros_like(len_b))


def pack_ids(ids_a, ids_b=None, max_seq_length: int = 512, special=None):
    """`[CLS] A [SEP] (B [SEP])` after truncation.

    Args:
        ids_a, ids_b: token ids (no special tokens); `ids_b` None for one segment. An empty
            `ids_b` also packs as one segment (official: `if tokens_b`).
        max_seq_length: the longest packed sequence.
        special: the tokenizer whose [CLS] and [SEP] ids to use (None: SentencePiece's).

    Returns:
        (input_ids, segment_ids), unpadded lists of equal length <= max_seq_length.
    """
    _check_max_seq_length(max_seq_length, ids_b is not None)
    cls_id, sep_id = _special_ids(special)
    ids_a = list(ids_a)
    ids_b = None if ids_b is None else list(ids_b)
    if not ids_b:
        a = ids_a[: max_seq_length - SINGLE_SPECIAL_TOKENS]
        return [cls_id, *a, sep_id], [0] * (len(a) + 2)
    keep_a, keep_b = truncated_lengths(len(ids_a), len(ids_b),
                                       max_seq_length - PAIR_SPECIAL_TOKENS)
    a, b = ids_a[:keep_a], ids_b[:keep_b]
    return [cls_id, *a, sep_id, *b, sep_id], [0] * (len(a) + 2) + [1] * (len(b) + 1)


def pad_features(input_ids, segment_ids, length: int) -> dict:
    """Right-pads one packed sequence to `length`: `input_ids`, `input_mask`, `segment_ids`."""
    n = len(input_ids)
    if n > length:
        raise ValueError(f"A packed sequence of {n} tokens does not fit length {length}.")
    pad = [0] * (length - n)
    return {"input_ids": list(input_ids) + pad, "input_mask": [1] * n + pad,
            "segment_ids": list(segment_ids) + pad}


# ---------------------------------------------------------------------------------------------
# In-graph.
def ragged_rows(rows):
    """An int32 RaggedTensor [len(rows), (ids)] (int64 row splits) of Python id lists."""
    import numpy as np
    import tensorflow as tf

    return tf.RaggedTensor.from_row_lengths(
        np.fromiter((i for row in rows for i in row), np.int32),
        np.array([len(row) for row in rows], np.int64))


def for_batches(fn, num_items: int, batch_size: int, num_ragged: int, *extra_specs):
    """`fn`, to call once per batch of `num_items` items with `num_ragged` `ragged_rows`
    tensors (then inputs of `extra_specs`): traced once with that fixed signature when there
    are several batches (no retracing as the batches' shapes change), else `fn` itself (eager:
    the same ops without the cost of tracing, for a few items)."""
    import tensorflow as tf

    if num_items <= batch_size:
        return fn
    ragged = tf.RaggedTensorSpec([None, None], tf.int32, 1, tf.int64)
    return tf.function(fn, input_signature=[ragged] * num_ragged + list(extra_specs))


def keep_first(ragged, keep):
    """The first `keep[i]` values of each row of a 2-D RaggedTensor (`keep`: one per row, or
    one for all; all of a shorter row, none for keep <= 0)."""
    return _keep(ragged, keep, from_end=False)


def keep_last(ragged, keep):
    """The last `keep[i]` values of each row of a 2-D RaggedTensor (all when shorter)."""
    return _keep(ragged, keep, from_end=True)


def _keep(ragged, keep, from_end: bool):
    """`keep_first` / `keep_last` on the flat values: each value's position in its row against
    its row's count, with no ragged broadcasting (whose shape checks made 8 assertions per call,
    most of the serving signature's tracing time)."""
    import tensorflow as tf

    lengths = ragged.row_lengths()
    keep = tf.minimum(tf.maximum(tf.broadcast_to(tf.cast(keep, lengths.dtype),
                                                 tf.shape(lengths)), 0), lengths)
    rows, position = _positions(ragged)
    start = tf.cast(lengths - keep if from_end else tf.zeros_like(keep), tf.int64)
    kept = (position >= tf.gather(start, rows)) & (
        position < tf.gather(start + tf.cast(keep, tf.int64), rows))
    return tf.RaggedTensor.from_row_lengths(tf.boolean_mask(ragged.values, kept), keep,
                                            validate=False)


def join_in_graph(ids_a, ids_b=None, empty_b_is_one_segment: bool = False,
                  special=None) -> dict:
    """`[CLS] A [SEP] (B [SEP])` of already-truncated rows, as model inputs.

    Args:
        ids_a, ids_b: int RaggedTensors [rows, (tokens)]; `ids_b` None for one segment.
        empty_b_is_one_segment: a row whose B is empty gets no second [SEP] (`[CLS] A [SEP]`,
            the official classifier packing); otherwise it gets `[CLS] A [SEP] [SEP]`.
        special: the tokenizer whose [CLS] and [SEP] ids to use (None: SentencePiece's).

    Returns:
        dict of int32 [rows, length] tensors `input_ids`, `input_mask`, `segment_ids` (segment
        0 through the first [SEP], 1 after), padded with 0 to the longest row.

    Each id is scattered to its (row, column) in one dense tensor: dense ops only, no ragged
    concatenation (whose row-count checks were assertions in every serving graph).
    """
    import tensorflow as tf

    cls, sep = (tf.constant(i, tf.int32) for i in _special_ids(special))
    len_a = tf.cast(ids_a.row_lengths(), tf.int64)
    rows = tf.range(tf.size(len_a, out_type=tf.int64), dtype=tf.int64)
    sep_a = len_a + 1  # column of the first [SEP]
    length = sep_a + 1  # each row's packed length
    index, values = [tf.stack([rows, tf.zeros_like(rows)], 1), _value_index(ids_a, 1),
                     tf.stack([rows, sep_a], 1)], [tf.fill(tf.shape(rows), cls),
                                                   tf.cast(ids_a.values, tf.int32),
                                                   tf.fill(tf.shape(rows), sep)]
    if ids_b is not None:  # as many rows as A (an error otherwise, without an Assert op)
        len_b = tf.reshape(tf.cast(ids_b.row_lengths(), tf.int64), tf.shape(len_a))
        closing = (len_b > 0) if empty_b_is_one_segment else tf.ones_like(len_b, tf.bool)
        ends = tf.boolean_mask(rows, closing)
        index += [_value_index(ids_b, length),
                  tf.stack([ends, tf.gather(length + len_b, ends)], 1)]
        values += [tf.cast(ids_b.values, tf.int32), tf.fill(tf.shape(ends), sep)]
        length += len_b + tf.cast(closing, tf.int64)
    width = tf.reduce_max(tf.concat([length, tf.zeros([1], tf.int64)], 0))
    input_ids = tf.scatter_nd(tf.concat(index, 0), tf.concat(values, 0),
                              tf.stack([tf.size(len_a, out_type=tf.int64), width]))
    column = tf.range(width, dtype=tf.int64)[None, :]
    real = column < length[:, None]
    second = real & (column > sep_a[:, None]) if ids_b is not None else tf.zeros_like(real)
    return {"input_ids": input_ids, "input_mask": tf.cast(real, tf.int32),
            "segment_ids": tf.cast(second, tf.int32)}


def _positions(ragged):
    """The row of each value of a 2-D RaggedTensor and its position in that row (int64)."""
    import tensorflow as tf

    rows = tf.cast(ragged.value_rowids(), tf.int64)
    position = tf.range(tf.size(rows, out_type=tf.int64), dtype=tf.int64) - tf.gather(
        tf.cast(ragged.row_starts(), tf.int64), rows)
    return rows, position


def _value_index(ragged, offset):
    """The (row, column) of each value of a 2-D RaggedTensor placed from column `offset` of
    its row (an int, or an int64 tensor with one offset per row), as int64 [values, 2]."""
    import tensorflow as tf

    rows, position = _positions(ragged)
    offset = tf.gather(offset, rows) if tf.is_tensor(offset) else offset
    return tf.stack([rows, position + offset], 1)


def pack_in_graph(ids_a, ids_b=None, max_seq_length: int = 512, special=None) -> dict:
    """The same packing with TensorFlow ops, for a batch.

    Args:
        ids_a, ids_b: int32 `tf.RaggedTensor` [batch, (tokens)]; `ids_b` None for one segment;
            a row whose B is empty packs as one segment (as `pack_ids`).
        max_seq_length: the longest packed sequence: a Python int, or a scalar int64 tensor
            (a SavedModel's argument, TF Hub's `bert_pack_inputs(..., seq_length)`; the caller
            checks it).
        special: the tokenizer whose [CLS] and [SEP] ids to use (None: SentencePiece's).

    Returns:
        dict of int32 [batch, length] tensors `input_ids`, `input_mask`, `segment_ids`, padded
        with 0 to the longest packed row of the batch (`length` <= max_seq_length).
    """
    import tensorflow as tf

    pair = ids_b is not None
    if not tf.is_tensor(max_seq_length):
        _check_max_seq_length(max_seq_length, pair)
    len_a = ids_a.row_lengths()
    if not pair:
        return join_in_graph(keep_first(ids_a, tf.minimum(
            len_a, max_seq_length - SINGLE_SPECIAL_TOKENS)), special=special)
    len_b = ids_b.row_lengths()
    budget = tf.cast(max_seq_length - PAIR_SPECIAL_TOKENS, tf.int64)
    keep_a = tf.where(len_b > 0, tf.minimum(len_a, tf.maximum((budget + 1) // 2, budget - len_b)),
                      tf.minimum(len_a, max_seq_length - SINGLE_SPECIAL_TOKENS))
    keep_b = tf.minimum(len_b, tf.maximum(budget // 2, budget - len_a))
    return join_in_graph(keep_first(ids_a, keep_a), keep_first(ids_b, keep_b),
                         empty_b_is_one_segment=True, special=special)


def pack_row_in_graph(ids_a, ids_b=None, max_seq_length: int = 512, special=None) -> dict:
    """`pack_in_graph` of one example of 1-D int32 ids, with dense ops only (no ragged tensors),
    as a TensorFlow Lite graph needs: the same truncation (longest first, from the end) and
    layout (an empty B: one segment).

    Returns:
        dict of int32 [1, length] tensors `input_ids`, `input_mask`, `segment_ids` (no padding).
    """
    import tensorflow as tf

    pair = ids_b is not None
    _check_max_seq_length(max_seq_length, pair)
    len_a = tf.size(ids_a)
    keep_a = tf.minimum(len_a, max_seq_length - SINGLE_SPECIAL_TOKENS)
    if pair:
        len_b = tf.size(ids_b)
        has_b = tf.cast(len_b > 0, tf.int32)  # 0: B is empty, one segment
        budget = max_seq_length - PAIR_SPECIAL_TOKENS
        keep_a = tf.where(len_b > 0, tf.minimum(len_a, tf.maximum((budget + 1) // 2,
                                                                  budget - len_b)), keep_a)
        keep_b = tf.minimum(len_b, tf.maximum(budget // 2, budget - len_a))
    cls_id, sep_id = _special_ids(special)
    cls, sep = tf.constant([cls_id], tf.int32), tf.constant([sep_id], tf.int32)
    parts = [cls, tf.cast(ids_a[:keep_a], tf.int32), sep]
    segment_ids = tf.zeros([keep_a + 2], tf.int32)
    if pair:
        parts += [tf.cast(ids_b[:keep_b], tf.int32), sep[:has_b]]
        segment_ids = tf.concat([segment_ids, tf.ones([keep_b + has_b], tf.int32)], axis=0)
    input_ids = tf.concat(parts, axis=0)
    return {"input_ids": input_ids[None], "input_mask": tf.ones_like(input_ids)[None],
            "segment_ids": segment_ids[None]}
