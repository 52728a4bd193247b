"""tf.data reader: static int32 batches, per-worker file sharding, refusal of mismatched data;
the training stream's position as a function of the step."""

import json
import math
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer, features as F
from albert_tf.input_pipeline import (DataMismatchError, InputPlan, count_records,
                                      find_unreadable_files, parse_fn, pretraining_dataset,
                                      training_dataset)
from albert_tf.models.losses import masked_lm_loss


def _all_records(files, seq=64, preds=10):
    parse = parse_fn(seq, preds)
    return [{k: v.numpy() for k, v in parse(r).items()}
            for f in files for r in tf.data.TFRecordDataset(f)]


@pytest.mark.slow
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
    ds = pretraining_dataset(pattern, 8, 64, 10, is_training=True, seed=5, shuffle_window=50)
    spec = ds.element_spec
    assert spec["input_ids"].shape.as_list() == [8, 64]
    assert spec["masked_lm_positions"].shape.as_list() == [8, 10]
    assert spec["next_sentence_labels"].shape.as_list() == [8, 1]
    first = [b["input_ids"].numpy() for b in ds.take(3)]
    again = [b["input_ids"].numpy() for b in pretraining_dataset(
        pattern, 8, 64, 10, is_training=True, seed=5, shuffle_window=50).take(3)]
    other = [b["input_ids"].numpy() for b in pretraining_dataset(
        pattern, 8, 64, 10, is_training=True, seed=6, shuffle_window=50).take(3)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))
    # Repeats past one epoch.
    total = generated_data["summary"]["total_examples"]
    assert sum(1 for _ in ds.take(total // 8 + 5)) == total // 8 + 5


def _numbered_files(directory, sizes):
    """TFRecord files whose records are their global numbers ("0", "1", ...)."""
    files, number = [], 0
    for i, size in enumerate(sizes):
        path = os.path.join(directory, f"part-{i:02d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(size):
                writer.write(str(number).encode())
                number += 1
        files.append(path)
    return files


def _records(plan, shard, step, n):
    return [int(r) for r in plan.records_dataset(shard, step).take(n).as_numpy_iterator()]


@pytest.mark.slow
def test_training_stream_position_is_a_function_of_the_step(tmp_path):
    """Started at any step (inside a window, at a file boundary, in a later epoch), each shard's
    stream is exactly the uninterrupted stream from that step's position; every epoch is a
    permutation of the shard's records, in another order each epoch, and each record stays in
    its window (moves fewer than `shuffle_window` places from its place in file order)."""
    sizes = [7, 13, 5, 11, 9, 3, 8]
    files = _numbered_files(str(tmp_path), sizes)
    assert [count_records(f) for f in files] == sizes
    plan = InputPlan.create(",".join(files), global_batch_size=6, num_shards=2, seed=3,
                            shuffle_window=5)
    assert plan.shard_batch_size == 3 and plan.records == tuple(sizes)
    for shard in range(2):
        shard_files, counts = plan.shard(shard)
        assert shard_files == files[shard::2]
        total = sum(counts)
        full = _records(plan, shard, 0, 7 * total)
        epochs = [full[e * total:(e + 1) * total] for e in range(3)]
        for e, epoch in enumerate(epochs):
            order = plan.file_order(shard, e)
            in_file_order = [int(r) for i in order
                             for r in tf.data.TFRecordDataset(shard_files[i]).as_numpy_iterator()]
            assert sorted(epoch) == sorted(in_file_order)  # each record once per epoch
            for w in range(0, total, 5):  # windows hold consecutive records in file order
                assert sorted(epoch[w:w + 5]) == sorted(in_file_order[w:w + 5])
        assert epochs[0] != epochs[1] != epochs[2]
        for step in (1, 2, 3, 5, 7, 11, 16, 23, 40):
            k = step * 3
            assert _records(plan, shard, step, 2 * total) == full[k:k + 2 * total], (shard, step)


def test_restart_skips_consumed_files_without_reading_them(tmp_path):
    """The restart cost is bounded: the files of an epoch before the position are not opened
    (replaced by garbage here, the restarted stream is unchanged), and `restart_reads` is at
    most one file's records plus one window."""
    sizes = [40, 25, 31, 50, 12, 44]
    files = _numbered_files(str(tmp_path), sizes)
    plan = InputPlan.create(files, global_batch_size=4, num_shards=1, seed=8, shuffle_window=10)
    step = 76  # 304 records: epoch 1 (202 records each), offset 102: window 10, 2 into it
    position = plan.position(0, step)
    expected = _records(plan, 0, step, 300)
    assert (position["epoch"], position["offset"], position["window"]) == (1, 102, 10)
    assert position["in_window"] == 2
    assert position["restart_reads"] <= max(sizes) + plan.shuffle_window
    order = plan.file_order(0, position["epoch"])
    for i in order[:position["file_index"]]:  # consumed earlier in this epoch
        with open(files[i], "wb") as f:
            f.write(b"not a tfrecord" * 100)
    assert position["file_index"] > 0
    # The rest of the epoch (100 records) comes from the files not yet reached.
    remaining = sum(sizes) - position["offset"]
    assert _records(plan, 0, step, remaining) == expected[:remaining]


def test_the_data_order_does_not_depend_on_the_number_of_hosts(generated_data):
    """Global batch of a step = the per-replica batches of every input pipeline in replica
    order. With 2 input shards it is the same for 1 host with 1 or 2 replicas and 2 hosts with
    1 or 2 replicas each (what makes a 2-worker run equal a 1-device run of 2 shards)."""
    plan = InputPlan.create(generated_data["files"], 8, num_shards=2, seed=4, shuffle_window=16)

    def global_batches(hosts, replicas, steps=3):
        per_host = []
        for host in range(hosts):
            context = tf.distribute.InputContext(num_input_pipelines=hosts,
                                                 input_pipeline_id=host,
                                                 num_replicas_in_sync=replicas)
            per_host.append(list(training_dataset(plan, 5, 64, 10, context)
                                 .take(steps * replicas // hosts)))
        local = replicas // hosts
        batches = []
        for step in range(steps):
            parts = [per_host[h][step * local + r] for h in range(hosts) for r in range(local)]
            assert all(p["input_ids"].shape[0] == 8 // replicas for p in parts)
            batches.append(np.concatenate([p["input_ids"].numpy() for p in parts]))
        return batches

    reference = global_batches(1, 1)
    for hosts, replicas in ((1, 2), (2, 2), (2, 4)):
        for a, b in zip(reference, global_batches(hosts, replicas)):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(DataMismatchError, match=r"2 input shards cannot be split over 3 input "
                                                r"pipelines"):
        training_dataset(plan, 0, 64, 10, tf.distribute.InputContext(3, 0, 3))


def test_damaged_or_changed_files_are_named(tmp_path):
    files = _numbered_files(str(tmp_path), [6, 9])
    plan = InputPlan.create(files, 3, 1, seed=1, shuffle_window=4)
    data = open(files[1], "rb").read()
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(data[:-3])
    with pytest.raises(DataMismatchError, match=r"truncated.tfrecord is truncated: it ends inside "
                                                r"record 9"):
        count_records(str(truncated))
    garbage = tmp_path / "garbage.tfrecord"
    garbage.write_bytes(b"\x07" * 64)
    with pytest.raises(DataMismatchError, match=r"garbage.tfrecord is not a TFRecord file or is "
                                                r"damaged: the header of record 1"):
        count_records(str(garbage))
    # A file that ends early at a record boundary after the plan was made: an error when the
    # stream reaches its end, not a silent shift of every later position.
    with open(files[1], "wb") as f:
        f.write(data[:sum(len(str(n)) + 16 for n in range(6, 12))])  # 6 of its 9 records
    with pytest.raises(tf.errors.FailedPreconditionError, match=r"expected to contain 9"):
        _records(plan, 0, 0, 15)
    assert find_unreadable_files(files, plan.records) == [
        (files[1], "it holds 6 records, but the run planned its input with 9 (the file changed "
                   "since the run started, or ends early)")]
    with pytest.raises(DataMismatchError, match=r"2 input file\(s\) cannot feed 3 input shards"):
        InputPlan.create(files, 6, 3)
    with pytest.raises(DataMismatchError, match=r"global batch size 7 must be a multiple of the "
                                                r"number of input shards 2"):
        InputPlan.create(files, 7, 2)


@pytest.mark.slow
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
        pretraining_dataset(",".join(files), 8, 64, 10, is_training=False, input_context=context)
    with pytest.raises(DataMismatchError, match=r"3 input file\(s\) cannot feed 4 input shards "
                                                r"\(one per input pipeline"):
        pretraining_dataset(",".join(files), 8, 64, 10, input_context=context)


@pytest.mark.slow
def test_evaluation_records_are_sharded_over_workers_in_equal_batch_counts(generated_data):
    """One file or several, any number of workers: each worker takes every P-th record, all
    workers yield the same number of batches, and together they score exactly the records the
    single-device pass scores (the loop's evaluation under MultiWorkerMirrored)."""
    from albert_tf import features as F
    from albert_tf.input_pipeline import ordered_dataset, record_counts

    schema = F.pretraining_schema(64, 10)
    for files in (generated_data["files"][:1], generated_data["files"]):
        total = sum(record_counts(files))
        batch = 12
        single = np.concatenate([b["input_ids"].numpy() for b in ordered_dataset(
            files, batch, schema, num_batches=total // batch)])
        assert len(single) == total // batch * batch
        every = [r.tobytes() for r in np.concatenate([b["input_ids"].numpy() for b in
                                                      ordered_dataset(files, 1, schema)])]
        assert len(every) == total
        for workers in (2, 3, 4):
            rows, counts = [], []
            for worker in range(workers):
                context = tf.distribute.InputContext(num_input_pipelines=workers,
                                                     input_pipeline_id=worker,
                                                     num_replicas_in_sync=workers)
                ds = ordered_dataset(files, batch, schema, context, shard_records=True,
                                     num_batches=total // batch)
                parts = [b["input_ids"].numpy() for b in ds]
                counts.append(len(parts))
                assert all(len(p) == batch // workers for p in parts)
                rows += [r.tobytes() for p in parts for r in p]
            assert counts == [total // batch] * workers
            # Worker w's k-th record is record k * workers + w of the concatenation.
            want = sorted(every[i] for i in range(len(every))
                          if i // workers < total // batch * (batch // workers))
            assert sorted(rows) == want


def test_mismatched_data_is_refused(generated_data, tmp_path):
    files = generated_data["files"]
    with pytest.raises(DataMismatchError, match=r"wiki-00000-of-00003.tfrecord does not match the "
                                                r"model: its sidecar says max_seq_length=64, "
                                                r"max_predictions_per_seq=10; the model expects "
                                                r"max_seq_length=128, max_predictions_per_seq=20"):
        pretraining_dataset(files[0], 8, 128, 20)
    with pytest.raises(DataMismatchError, match=r"vocabulary of 8000 pieces .* vocab_size=30000: "
                                                r"set \"vocab_size\": 8000 in "
                                                r"--albert_config_file, or regenerate the data "
                                                r"with a vocabulary of 30000 pieces \(train_vocab "
                                                r"--vocab_size 30000\)\.$"):
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
    with pytest.raises(DataMismatchError, match=r"corrupt.tfrecord is not a readable TFRecord "
                                                r"file \(corrupted record at 0 .*\): training "
                                                r"reads records made by python -m albert_tf.data"
                                                r".create_pretraining_data"):
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


def test_examples_are_the_bytes_tensorflow_writes():
    """`albert_tf.records` builds tf.train.Examples without TensorFlow: the bytes equal
    TensorFlow's deterministic serialization for int64 (negative and 64-bit values too),
    float32 and bytes features (UTF-8 text, empty values, empty lists)."""
    from albert_tf.records import encode_example, example_of

    features = {"input_ids": ([2, 300, 70000, -5, 2 ** 62], "int64"),
                "weights": ([0.5, -1.25, 3e-8], "float32"), "empty": ([], "int64"),
                "text": (["Café naïve, 1,000".encode(), b"", b"\xff\xfe"], "bytes"),
                "no_text": ([], "bytes")}

    def feature(values, dtype):
        if dtype == "int64":
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        if dtype == "float32":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    want = tf.train.Example(features=tf.train.Features(feature={
        k: feature(*v) for k, v in features.items()})).SerializeToString(deterministic=True)
    assert encode_example(features) == want
    row = {"text": "a gripping film", "text_b": b"raw", "input_ids": [2, 7, 3]}
    parsed = tf.train.Example.FromString(example_of(row)).features.feature
    assert parsed["text"].bytes_list.value == [b"a gripping film"]
    assert parsed["text_b"].bytes_list.value == [b"raw"]
    assert parsed["input_ids"].int64_list.value == [2, 7, 3]


def test_a_batch_of_examples_is_the_bytes_of_each_row():
    """`encode_examples` (numpy, a batch at once: the data workers' path) gives every row the
    bytes `encode_example` gives it, for values of every varint width (1 to 10 bytes: large,
    negative), empty features, one row and none; `tf.train.Example` reads them back."""
    from albert_tf.records import encode_example, encode_examples

    rng = np.random.default_rng(7)
    for rows, width, top in [(5, 128, 2), (40, 20, 130), (7, 3, 70000), (3, 4, 2 ** 40),
                             (9, 2, 2 ** 63 - 1), (1, 5, 8000), (4, 0, 10), (0, 3, 10)]:
        ids = rng.integers(0, top, (rows, width), dtype=np.int64)
        if ids.size:
            ids.flat[0] = -3  # ten bytes
        columns = {"input_ids": (ids, "int64"),
                   "labels": (rng.integers(0, 2, (rows, 1)), "int64"),
                   "masked_lm_weights": (rng.normal(size=(rows, 3)).astype(np.float32),
                                         "float32")}
        batch = encode_examples(columns)
        assert batch == [encode_example({name: (values[i], dtype) for name, (values, dtype)
                                         in columns.items()}) for i in range(rows)]
        for i, record in enumerate(batch):
            parsed = tf.train.Example.FromString(record).features.feature
            assert list(parsed["input_ids"].int64_list.value) == ids[i].tolist()
    with pytest.raises(ValueError, match="different row counts"):
        encode_examples({"a": (np.zeros((2, 1)), "int64"), "b": (np.zeros((3, 1)), "int64")})


def test_tfrecord_files_are_the_bytes_tensorflow_writes(tmp_path):
    """`write_file` frames records without TensorFlow on a local disk: the file equals
    `tf.io.TFRecordWriter`'s byte for byte (empty records, long ones, none), and reads back."""
    from albert_tf.records import write_file

    rng = np.random.default_rng(3)
    records = [b"", b"x", rng.integers(0, 256, 70000, dtype=np.uint8).tobytes(),
               *(rng.integers(0, 256, int(n), dtype=np.uint8).tobytes()
                 for n in rng.integers(1, 300, 20))]
    for name, batch in (("some", records), ("none", [])):
        ours, theirs = tmp_path / f"{name}.tfrecord", tmp_path / f"{name}.tf.tfrecord"
        write_file(batch, str(ours), {"num_examples": len(batch)})
        with tf.io.TFRecordWriter(str(theirs)) as writer:
            for record in batch:
                writer.write(record)
        assert ours.read_bytes() == theirs.read_bytes()
        assert [r.numpy() for r in tf.data.TFRecordDataset(str(ours))] == batch
        assert json.loads((tmp_path / f"{name}.tfrecord.json").read_text())["num_examples"] \
            == len(batch)
    assert sorted(os.listdir(tmp_path)) == sorted(  # no temporary left
        ["some.tfrecord", "some.tfrecord.json", "some.tf.tfrecord", "none.tfrecord",
         "none.tfrecord.json", "none.tf.tfrecord"])


def test_crc32c_fallback_equals_google_crc32c():
    """The framing check's Python CRC-32C (used only where google-crc32c is missing) equals the
    package's on random data and on the CRC-32C check value of "123456789"."""
    import google_crc32c

    from albert_tf import records

    rng = np.random.default_rng(0)
    for n in (0, 1, 8, 12, 333, 4096):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert records._crc32c_python(data) == google_crc32c.value(data)
    assert records._crc32c_python(b"123456789") == 0xE3069283
