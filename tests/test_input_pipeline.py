"""tf.data reader: static int32 batches, per-worker file sharding, refusal of mismatched data."""

import math
import shutil

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer, features as F
from albert_tf.input_pipeline import DataMismatchError, parse_fn, pretraining_dataset
from albert_tf.losses import masked_lm_loss


def _all_records(files, seq=64, preds=10):
    parse = parse_fn(seq, preds)
    return [{k: v.numpy() for k, v in parse(r).items()}
            for f in files for r in tf.data.TFRecordDataset(f)]


def test_eval_pass_reads_every_record_in_order(generated_data):
    files = generated_data["files"]
    ds = pretraining_dataset(",".join(files), 16, 64, 10, is_training=False, vocab_size=8000,
                             drop_remainder=False)
    batches = list(ds)
    expected = _all_records(files)
    got = {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}
    assert len(got["input_ids"]) == len(expected) == generated_data["summary"]["total_examples"]
    for name in F.pretraining_schema(64, 10):
        np.testing.assert_array_equal(got[name], np.stack([e[name] for e in expected]))
    assert batches[0]["input_ids"].dtype == tf.int32
    assert batches[0]["masked_lm_weights"].dtype == tf.float32


def test_training_batches_are_static_and_seeded(generated_data):
    pattern = generated_data["files"][0].replace("00000-of", "*-of")
    ds = pretraining_dataset(pattern, 8, 64, 10, is_training=True, seed=5, shuffle_buffer_size=50)
    spec = ds.element_spec
    assert spec["input_ids"].shape.as_list() == [8, 64]
    assert spec["masked_lm_positions"].shape.as_list() == [8, 10]
    assert spec["next_sentence_labels"].shape.as_list() == [8, 1]
    first = [b["input_ids"].numpy() for b in ds.take(3)]
    again = [b["input_ids"].numpy() for b in pretraining_dataset(
        pattern, 8, 64, 10, is_training=True, seed=5, shuffle_buffer_size=50).take(3)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    # Repeats past one epoch.
    total = generated_data["summary"]["total_examples"]
    assert sum(1 for _ in ds.take(total // 8 + 5)) == total // 8 + 5


def test_files_are_sharded_per_input_pipeline(generated_data):
    files = generated_data["files"]  # 3 files
    seen = []
    for pipeline in range(3):
        context = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=pipeline,
                                             num_replicas_in_sync=3)
        ds = pretraining_dataset(",".join(files), 6, 64, 10, is_training=False,
                                 input_context=context, drop_remainder=False)
        ids = np.concatenate([b["input_ids"].numpy() for b in ds])
        assert next(iter(ds))["input_ids"].shape[0] == 2  # per-replica share of 6
        seen.append({row.tobytes() for row in ids})
        assert len(ids) == len(_all_records([files[pipeline]]))
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2])
    context = tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=0)
    with pytest.raises(DataMismatchError, match=r"3 input file\(s\) cannot be sharded over 4 "
                                                r"input pipelines"):
        pretraining_dataset(",".join(files), 8, 64, 10, input_context=context)


def test_mismatched_data_is_refused(generated_data, tmp_path):
    files = generated_data["files"]
    with pytest.raises(DataMismatchError, match=r"wiki-00000-of-00003.tfrecord does not match the "
                                                r"model: its sidecar says max_seq_length=64, "
                                                r"max_predictions_per_seq=10; the model expects "
                                                r"max_seq_length=128, max_predictions_per_seq=20"):
        pretraining_dataset(files[0], 8, 128, 20)
    with pytest.raises(DataMismatchError, match=r"vocabulary of 8000 pieces .* vocab_size=30000"):
        pretraining_dataset(files[0], 8, 64, 10, vocab_size=30000)
    # Without a sidecar (official tooling), the first record is checked.
    bare = tmp_path / "official.tfrecord"
    shutil.copy(files[0], bare)
    with pytest.raises(DataMismatchError, match=r"official.tfrecord does not match the model: its "
                                                r"records have max_seq_length=64"):
        pretraining_dataset(str(bare), 8, 512, 20)
    assert sum(1 for _ in pretraining_dataset(str(bare), 8, 64, 10, is_training=False)) > 0
    corrupt = tmp_path / "corrupt.tfrecord"
    corrupt.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(DataMismatchError, match=r"corrupt.tfrecord is not a readable TFRecord"):
        pretraining_dataset(str(corrupt), 8, 64, 10)
    with pytest.raises(DataMismatchError, match=r"matches no TFRecord file"):
        pretraining_dataset(str(tmp_path / "none-*"), 8, 64, 10)


def test_batches_feed_the_pretrainer(generated_data):
    cfg = AlbertConfig(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=48, max_position_embeddings=64)
    model = AlbertPretrainer(cfg)
    batch = next(iter(pretraining_dataset(generated_data["files"][0], 8, 64, 10,
                                          is_training=False)))
    out = model({k: batch[k] for k in model.input})
    # A freshly initialised model predicts close to uniform over the 8,000 pieces.
    assert abs(float(masked_lm_loss(out, batch)) - math.log(8000)) < 0.1
