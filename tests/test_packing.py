"""The packing rule: closed-form truncation equals the official loop; in-graph equals Python."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import packing
from albert_tf.models.classifier import AlbertClassifier
from albert_tf.packing import (pack_ids, pack_in_graph, pack_row_in_graph, packed_length,
                               pad_features, truncated_lengths)
from albert_tf.tasks import classification, glue
from albert_tf.tokenization import CLS_ID, SEP_ID, Tokenizer
from conftest import tiny_config
from albert_tf.export.serving_tasks import ClassifierServingModule


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


def test_an_empty_b_packs_as_one_segment_as_official():
    """Official `convert_single_example` packs B only `if tokens_b`: an empty B gives
    `[CLS] A [SEP]` (no second [SEP]) with the one-segment budget max_seq_length - 2, in Python,
    in-graph (ragged batch) and the dense TFLite form."""
    a = [11, 12, 13, 14, 15, 16]
    assert pack_ids(a, [], max_seq_length=6) == ([CLS_ID, 11, 12, 13, 14, SEP_ID], [0] * 6)
    assert pack_ids(a, (), max_seq_length=6) == pack_ids(a, None, max_seq_length=6)
    # A B of one token keeps the pair layout and budget (6 - 3: A keeps 2).
    assert pack_ids(a, [21], max_seq_length=6) == ([CLS_ID, 11, 12, SEP_ID, 21, SEP_ID],
                                                   [0, 0, 0, 0, 1, 1])
    assert packed_length(6, 0) == 8 and packed_length(6, 1) == 10 and packed_length(6) == 8
    got = pack_in_graph(tf.ragged.constant([a, a, [7]], tf.int32),
                        tf.ragged.constant([[], [21], []], tf.int32), max_seq_length=6)
    np.testing.assert_array_equal(got["input_ids"].numpy(), [
        [CLS_ID, 11, 12, 13, 14, SEP_ID], [CLS_ID, 11, 12, SEP_ID, 21, SEP_ID],
        [CLS_ID, 7, SEP_ID, 0, 0, 0]])
    np.testing.assert_array_equal(got["segment_ids"].numpy(), [
        [0] * 6, [0, 0, 0, 0, 1, 1], [0] * 6])
    np.testing.assert_array_equal(got["input_mask"].numpy(), [[1] * 6, [1] * 6, [1] * 3 + [0] * 3])
    np.testing.assert_array_equal(packed_length(tf.constant([6, 6, 1]),
                                                tf.constant([0, 1, 0])).numpy(), [8, 10, 3])
    for b, ids, segments in (([], [CLS_ID, 11, 12, 13, 14, SEP_ID], [0] * 6),
                             ([21], [CLS_ID, 11, 12, SEP_ID, 21, SEP_ID], [0, 0, 0, 0, 1, 1])):
        row = pack_row_in_graph(tf.constant(a, tf.int32), tf.constant(b, tf.int32), 6)
        assert row["input_ids"].numpy().tolist() == [ids]
        assert row["segment_ids"].numpy().tolist() == [segments]
        assert row["input_mask"].numpy().tolist() == [[1] * 6]


def test_glue_and_raw_text_serving_pack_an_empty_text_b_as_one_segment(sample_vocab, tmp_path):
    """An RTE file whose sentence2 is empty or only whitespace: the fine-tuning features and
    the in-graph packing of the raw-text serving signatures give `[CLS] A [SEP]`, segment 0,
    as official (`if example.text_b:` after `process_text`, which leaves "" of "   ")."""
    path = tmp_path / "dev.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\tThe cat sat.\tA cat.\tentailment\n"
                    "1\tThe cat sat.\t\tentailment\n2\tThe cat sat.\t \u3000 \tentailment\n",
                    encoding="utf-8")
    examples = glue.read_examples("rte", str(path), "dev")
    assert [e.text_b.strip() for e in examples] == ["A cat.", "", ""]
    tok = Tokenizer(sample_vocab)
    a, b = tok.encode("The cat sat."), tok.encode("A cat.")
    assert len(a) >= 3 and len(b) >= 2
    pair = [CLS_ID, *a, SEP_ID, *b, SEP_ID]
    single = [CLS_ID, *a, SEP_ID]
    task = glue.get_task("rte")
    features = [classification.example_features(e, task, tok, 16) for e in examples]
    assert {k: features[0][k] for k in ("input_ids", "input_mask", "segment_ids")} == \
        pad_features(pair, [0] * (len(a) + 2) + [1] * (len(b) + 1), 16)
    for f in features[1:]:
        assert f["input_ids"] == single + [0] * (16 - len(single))
        assert f["segment_ids"] == [0] * 16
        assert f["input_mask"] == [1] * len(single) + [0] * (16 - len(single))
    config = tiny_config(vocab_size=tok.vocab_size)
    module = ClassifierServingModule(AlbertClassifier(config, num_labels=2),
                                     tok.model_proto, max_seq_length=16, text_pair=True)
    texts = tf.constant([e.text_a for e in examples])
    texts_b = tf.constant([e.text_b for e in examples])
    got = module.tokens_from_text(texts, texts_b)
    width = len(pair)
    np.testing.assert_array_equal(got["input_ids"].numpy(), [
        pair, single + [0] * (width - len(single)), single + [0] * (width - len(single))])
    np.testing.assert_array_equal(got["segment_ids"].numpy(), [
        [0] * (len(a) + 2) + [1] * (len(b) + 1), [0] * width, [0] * width])
    np.testing.assert_array_equal(got["input_mask"].numpy(), [
        [1] * width, [1] * len(single) + [0] * (width - len(single)),
        [1] * len(single) + [0] * (width - len(single))])
    counted = module.text_outputs(lambda tokens: {}, texts, texts_b)
    assert counted["num_tokens"].numpy().tolist() == [len(pair), len(single), len(single)]


class _RowPacker(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)] * 2)
    def pack(self, a, b):
        out = pack_row_in_graph(a, b, 6)
        out["num_tokens"] = tf.reshape(packed_length(tf.size(a), tf.size(b)), [1])
        return out


def test_the_tflite_form_packs_an_empty_b_as_one_segment():
    """`pack_row_in_graph` converts with TFLite builtins only and, run by the interpreter, packs
    an empty B as `[CLS] A [SEP]` (and counts its tokens so)."""
    module = _RowPacker()
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [module.pack.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    runner = tf.lite.Interpreter(model_content=converter.convert()).get_signature_runner()
    a = np.array([11, 12, 13, 14, 15, 16], np.int32)
    for b, ids, segments, num in (
            ([], [CLS_ID, 11, 12, 13, 14, SEP_ID], [0] * 6, 8),
            ([21], [CLS_ID, 11, 12, SEP_ID, 21, SEP_ID], [0, 0, 0, 0, 1, 1], 10),
            ([21, 22, 23], [CLS_ID, 11, 12, SEP_ID, 21, SEP_ID], [0, 0, 0, 0, 1, 1], 12)):
        got = runner(a=a, b=np.array(b, np.int32))
        assert got["input_ids"].tolist() == [ids] and got["segment_ids"].tolist() == [segments]
        assert got["input_mask"].tolist() == [[1] * 6] and got["num_tokens"].tolist() == [num]


def test_in_graph_packing_traces_no_assertion():
    """`pack_in_graph` (every serving text signature, the Keras preprocessors, RACE and SQuAD
    packing) works on flat values and one scatter: no ragged broadcasting or concatenation,
    whose shape checks were 48 of a classifier export's 165 assertions (each a cond to trace,
    and to run on every request). Its output equals `pack_ids` (the tests above)."""
    ragged = tf.RaggedTensorSpec([None, None], tf.int32, 1, tf.int64)
    for pair in (False, True):
        traced = tf.function(
            lambda a, b: pack_in_graph(a, b if pair else None, max_seq_length=16)
        ).get_concrete_function(ragged, ragged)
        ops = collections.Counter(op.type for op in traced.graph.get_operations())
        assert ops["Assert"] + ops["If"] + ops["StatelessIf"] == 0, ops
        assert ops["ScatterNd"] == 1


def test_keep_and_join_in_graph_equal_the_rule_written_in_python():
    """`keep_first`, `keep_last` and `join_in_graph` (both B layouts) against the rule written
    out on Python lists, on random rows (empty rows, zero rows, keeps below 0 and past the
    row, one keep for all rows), eagerly and traced (once each, keeps as tensors); rows of B
    that do not match A's are an error, not a silent packing."""
    rng = np.random.default_rng(7)

    def ragged(rows):
        return tf.RaggedTensor.from_row_lengths(
            np.array([i for r in rows for i in r], np.int32), np.array([len(r) for r in rows],
                                                                       np.int64))

    def joined(a, b, one_segment):
        ids, segments = [CLS_ID] + a + [SEP_ID], [0] * (len(a) + 2)
        if b is not None:
            closing = [SEP_ID] if b or not one_segment else []
            ids, segments = ids + b + closing, segments + [1] * (len(b) + len(closing))
        return ids, segments

    # traced once each, for any rows and keeps (the serving graph's case: keeps are tensors)
    rows_spec = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1,
                                    row_splits_dtype=tf.int64)
    keeps, one_keep = tf.TensorSpec([None], tf.int64), tf.TensorSpec([], tf.int64)
    traced = {
        "first": tf.function(packing.keep_first, input_signature=[rows_spec, keeps]),
        "last": tf.function(packing.keep_last, input_signature=[rows_spec, keeps]),
        "last_single": tf.function(packing.keep_last, input_signature=[rows_spec, one_keep]),
        "join_a": tf.function(packing.join_in_graph, input_signature=[rows_spec]),
        **{f"join_ab_{one}": tf.function(
            lambda x, y, one=one: packing.join_in_graph(x, y, empty_b_is_one_segment=one),
            input_signature=[rows_spec, rows_spec]) for one in (False, True)}}
    eager = {"first": packing.keep_first, "last": packing.keep_last,
             "last_single": packing.keep_last, "join_a": packing.join_in_graph,
             **{f"join_ab_{one}": lambda x, y, one=one: packing.join_in_graph(
                 x, y, empty_b_is_one_segment=one) for one in (False, True)}}
    checked = 0
    for trial in range(40):
        n = int(rng.integers(0, 5))
        rows_a = [[int(i) for i in rng.integers(5, 99, rng.integers(0, 9))] for _ in range(n)]
        rows_b = [[int(i) for i in rng.integers(5, 99, rng.integers(0, 9))] for _ in range(n)]
        keep = rng.integers(-2, 11, n)
        single = int(rng.integers(-1, 10))
        fn = traced if trial % 2 == 1 else eager
        got = fn["first"](ragged(rows_a), keep).to_list()
        assert got == [r[:max(k, 0)] for r, k in zip(rows_a, keep)]
        got = fn["last"](ragged(rows_a), keep).to_list()
        assert got == [r[len(r) - min(max(k, 0), len(r)):] for r, k in zip(rows_a, keep)]
        got = fn["last_single"](ragged(rows_a), single).to_list()
        assert got == [r[len(r) - min(max(single, 0), len(r)):] for r in rows_a]
        for b, one_segment in ((None, False), (rows_b, False), (rows_b, True)):
            if b is None:
                out = fn["join_a"](ragged(rows_a))
            else:
                out = fn[f"join_ab_{one_segment}"](ragged(rows_a), ragged(b))
            expected = [joined(a, None if b is None else b[i], one_segment)
                        for i, a in enumerate(rows_a)]
            width = max([len(ids) for ids, _ in expected], default=0)
            assert out["input_ids"].shape == (n, width)
            for i, (ids, segments) in enumerate(expected):
                pad = [0] * (width - len(ids))
                assert out["input_ids"][i].numpy().tolist() == ids + pad
                assert out["segment_ids"][i].numpy().tolist() == segments + pad
                assert out["input_mask"][i].numpy().tolist() == [1] * len(ids) + pad
            checked += n
    assert checked > 200
    for traced in (False, True):
        join = tf.function(packing.join_in_graph) if traced else packing.join_in_graph
        with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="reshape"):
            join(ragged([[5, 6], [7], [8]]), ragged([[9]]))  # traced: refused at trace time
