"""tf.data readers of ALBERT pretraining TFRecords (official feature format).

TPU rules live here: static shapes (fixed-length features, `drop_remainder=True`), int32
features. Files are sharded per input pipeline (`tf.distribute.InputContext`), so each worker
reads its own files. Before reading, every file is checked against the model: its JSON sidecar
(written by `data.create_pretraining_data`) or, for files without one (official tooling), its
first record must have `max_seq_length` / `max_predictions_per_seq` features of the model's
lengths.
"""

from __future__ import annotations

import json
import re

import tensorflow as tf

from albert_tf import features as F


class DataMismatchError(ValueError):
    """The data does not fit the model or the input pipeline; the message says what differs."""


def list_files(input_patterns) -> list[str]:
    """Sorted files matching comma-separated globs (sidecar `.json` files excluded)."""
    if isinstance(input_patterns, str):
        input_patterns = [input_patterns]
    patterns = [p.strip() for pattern in input_patterns for p in pattern.split(",") if p.strip()]
    files = []
    for pattern in patterns:
        matches = [m for m in tf.io.gfile.glob(pattern) if not m.endswith(".json")]
        if not matches:
            raise DataMismatchError(f"Input pattern {pattern!r} matches no TFRecord file.")
        files.extend(matches)
    return sorted(set(files))


def _first_record_lengths(path):
    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        raise DataMismatchError(f"{path} is not a readable TFRecord file: {e.message}") from None
    if record is None:
        raise DataMismatchError(f"{path} holds no records.")
    example = tf.train.Example.FromString(record.numpy())
    feats = example.features.feature
    lengths = {}
    for name in (F.INPUT_IDS, F.MASKED_LM_POSITIONS):
        if name not in feats:
            raise DataMismatchError(f"{path}: its records have no {name!r} feature; is it "
                                    "pretraining data?")
        lengths[name] = len(feats[name].int64_list.value)
    return lengths[F.INPUT_IDS], lengths[F.MASKED_LM_POSITIONS]


def check_files(files, max_seq_length, max_predictions_per_seq, vocab_size=None) -> dict:
    """Refuses files made for another sequence length, prediction count or vocabulary.

    Returns {path: sidecar dict or None}.
    """
    found = {}
    for path in files:
        sidecar = F.sidecar_path(path)
        meta = None
        if tf.io.gfile.exists(sidecar):
            with tf.io.gfile.GFile(sidecar) as f:
                meta = json.load(f)
            seq, preds = meta["max_seq_length"], meta["max_predictions_per_seq"]
            if vocab_size is not None and meta.get("vocab_size") not in (None, vocab_size):
                raise DataMismatchError(
                    f"{path} was generated with a vocabulary of {meta['vocab_size']} pieces "
                    f"({meta.get('spm_model_file')}), but the model has vocab_size={vocab_size}.")
            source = "its sidecar says"
        else:
            seq, preds = _first_record_lengths(path)
            source = "its records have"
        if seq != max_seq_length or preds != max_predictions_per_seq:
            raise DataMismatchError(
                f"{path} does not match the model: {source} max_seq_length={seq}, "
                f"max_predictions_per_seq={preds}; the model expects "
                f"max_seq_length={max_seq_length}, max_predictions_per_seq="
                f"{max_predictions_per_seq}. Regenerate the data or change the flags.")
        found[path] = meta
    return found


def parse_fn(max_seq_length: int, max_predictions_per_seq: int):
    """Record -> dict of fixed-shape tensors; int64 features become int32 (TPU-friendly)."""
    schema = F.pretraining_schema(max_seq_length, max_predictions_per_seq)
    spec = {name: tf.io.FixedLenFeature([length], tf.int64 if dtype == "int64" else tf.float32)
            for name, (length, dtype) in schema.items()}

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
                for name, t in example.items()}

    return parse


def pretraining_dataset(input_patterns, global_batch_size: int, max_seq_length: int,
                        max_predictions_per_seq: int, is_training: bool = True,
                        input_context: tf.distribute.InputContext | None = None,
                        vocab_size: int | None = None, seed: int | None = None,
                        shuffle_buffer_size: int = 10000, cycle_length: int = 8,
                        drop_remainder: bool = True) -> tf.data.Dataset:
    """Batches of pretraining features.

    Args:
        input_patterns: comma-separated globs (or a list) of TFRecord files.
        global_batch_size: batch size over all replicas; each input pipeline yields its
            per-replica share (`input_context.get_per_replica_batch_size`).
        max_seq_length, max_predictions_per_seq: the model's; files that differ are refused.
        is_training: shuffle files and records and repeat forever; otherwise one ordered pass.
        input_context: from `strategy.distribute_datasets_from_function`; files are sharded by
            input pipeline.
        vocab_size: the model's; checked against the sidecars when given.
        seed: makes shuffling reproducible (and the interleave deterministic).
        drop_remainder: keep batch shapes static (required on TPU).

    Returns:
        A dataset of dicts: `input_ids`, `input_mask`, `segment_ids`, `token_boundary`
        [batch, max_seq_length]; `masked_lm_positions`, `masked_lm_ids` (int32),
        `masked_lm_weights` (float32) [batch, max_predictions_per_seq];
        `next_sentence_labels` [batch, 1].
    """
    files = list_files(input_patterns)
    check_files(files, max_seq_length, max_predictions_per_seq, vocab_size)
    batch_size = global_batch_size
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        pipelines = input_context.num_input_pipelines
        if pipelines > 1:
            if len(files) < pipelines:
                raise DataMismatchError(
                    f"{len(files)} input file(s) cannot be sharded over {pipelines} input "
                    "pipelines (workers); generate at least that many shards "
                    "(--num_output_shards).")
            dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    deterministic = seed is not None or not is_training
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
        dataset = dataset.interleave(
            tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    else:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)
    dataset = dataset.map(parse_fn(max_seq_length, max_predictions_per_seq),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)


def find_unreadable_files(files) -> list[tuple[str, str]]:
    """[(path, error)] of the TFRecord files that cannot be read to the end (truncated or
    corrupt records). Reads every file once: meant for after a failure, not before training."""
    found = []
    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            message = re.sub(r"\{\{.*?\}\}\s*", "", e.message.splitlines()[0])
            found.append((path, re.sub(r"\s*\[Op:.*$", "", message)))
    return found
