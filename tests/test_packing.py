"""The packing rule: closed-form truncation equals the official loop; in-graph equals Python."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.packing import pack_ids, pack_in_graph, pad_features, truncated_lengths
from albert_tf.tokenization import CLS_ID, SEP_ID


def official_truncate(len_a, len_b, budget):
    """Official `_truncate_seq_pair`: pop from the longer (B on ties) until it fits."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_closed_form_equals_the_official_loop():
    for budget in range(0, 41):
        for len_a in range(0, 41):
            for len_b in range(0, 41):
                assert truncated_lengths(len_a, len_b, budget) == official_truncate(
                    len_a, len_b, budget), (len_a, len_b, budget)


def test_pack_ids_layout_and_truncation():
    ids, seg = pack_ids([11, 12, 13, 14, 15, 16], [21, 22], max_seq_length=7)
    # budget 4: A keeps max(2, 4 - 2) = 2, B keeps 2.
    assert ids == [CLS_ID, 11, 12, SEP_ID, 21, 22, SEP_ID]
    assert seg == [0, 0, 0, 0, 1, 1, 1]
    ids, seg = pack_ids([11, 12, 13, 14, 15], None, max_seq_length=5)
    assert ids == [CLS_ID, 11, 12, 13, SEP_ID] and seg == [0] * 5
    assert pad_features(ids, seg, 7) == {"input_ids": ids + [0, 0],
                                         "input_mask": [1] * 5 + [0, 0],
                                         "segment_ids": [0] * 7}
    with pytest.raises(ValueError, match=r"max_seq_length` must be an integer of at least 3"):
        pack_ids([1], [2], max_seq_length=2)


@pytest.mark.parametrize("pair", [False, True])
def test_in_graph_packing_equals_python(pair):
    rng = np.random.default_rng(3)
    rows_a = [rng.integers(5, 90, n).tolist() for n in (0, 1, 7, 19, 30, 4, 12)]
    rows_b = [rng.integers(5, 90, n).tolist() for n in (3, 0, 25, 2, 30, 4, 13)]
    for max_seq_length in (5, 16, 64):
        got = pack_in_graph(tf.ragged.constant(rows_a, tf.int32),
                            tf.ragged.constant(rows_b, tf.int32) if pair else None,
                            max_seq_length)
        packed = [pack_ids(a, b if pair else None, max_seq_length)
                  for a, b in zip(rows_a, rows_b)]
        length = max(len(ids) for ids, _ in packed)
        assert got["input_ids"].shape == (len(rows_a), length)  # padded to the longest row
        assert length <= max_seq_length
        for name in ("input_ids", "input_mask", "segment_ids"):
            expected = [pad_features(ids, seg, length)[name] for ids, seg in packed]
            np.testing.assert_array_equal(got[name].numpy(), expected)
