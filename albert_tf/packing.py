"""Packing token ids into model inputs: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, with the
official fine-tuning truncation rule, in Python and in-graph (one rule, two implementations that
tests compare).

Truncation (official `run_classifier.py` / `_truncate_seq_pair`): while the pair is longer than
the budget (`max_seq_length - 3` for a pair, `max_seq_length - 2` for one segment), drop the last
token of the longer segment (of B when they are equally long). Pretraining data truncates
differently (front or back at random, `data.pretraining`), which is a training augmentation;
everything that feeds a trained model (fine-tuning features, serving) uses this rule.

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
    """The first `keep[i]` values of each row of a 2-D RaggedTensor."""
    import tensorflow as tf

    positions = tf.ragged.range(ragged.row_lengths())
    return tf.ragged.boolean_mask(ragged, positions < tf.expand_dims(
        tf.cast(keep, positions.dtype), 1))


def keep_last(ragged, keep):
    """The last `keep[i]` values of each row of a 2-D RaggedTensor (all when shorter)."""
    import tensorflow as tf

    lengths = ragged.row_lengths()
    positions = tf.ragged.range(lengths)
    return tf.ragged.boolean_mask(ragged, positions >= tf.expand_dims(
        lengths - tf.cast(keep, lengths.dtype), 1))


def join_in_graph(ids_a, ids_b=None, empty_b_is_one_segment: bool = False,
                  special=None) -> dict:
    """`[CLS] A [SEP] (B [SEP])` of already-truncated rows, as model inputs.

    Args:
        ids_a, ids_b: int32 RaggedTensors [rows, (tokens)]; `ids_b` None for one segment.
        empty_b_is_one_segment: a row whose B is empty gets no second [SEP] (`[CLS] A [SEP]`,
            the official classifier packing); otherwise it gets `[CLS] A [SEP] [SEP]`.
        special: the tokenizer whose [CLS] and [SEP] ids to use (None: SentencePiece's).

    Returns:
        dict of int32 [rows, length] tensors `input_ids`, `input_mask`, `segment_ids` (segment
        0 through the first [SEP], 1 after), padded with 0 to the longest row.
    """
    import tensorflow as tf

    cls_id, sep_id = _special_ids(special)
    ids_a = tf.cast(ids_a, tf.int32)
    rows = ids_a.nrows()

    def column(value, lengths=None):
        lengths = tf.ones([rows], tf.int64) if lengths is None else lengths
        return tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(lengths)], tf.constant(value, tf.int32)), lengths)

    parts = [column(cls_id), ids_a, column(sep_id)]
    segments = [0, 0, 0]
    if ids_b is not None:
        ids_b = tf.cast(ids_b, tf.int32)
        closing = (tf.cast(ids_b.row_lengths() > 0, tf.int64) if empty_b_is_one_segment
                   else None)
        parts += [ids_b, column(sep_id, closing)]
        segments += [1, 1]
    input_ids = tf.concat(parts, axis=1)
    segment_ids = tf.concat([tf.ones_like(p) * s for p, s in zip(parts, segments)], axis=1)
    return {"input_ids": input_ids.to_tensor(0),
            "input_mask": tf.ones_like(input_ids).to_tensor(0),
            "segment_ids": segment_ids.to_tensor(0)}


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
