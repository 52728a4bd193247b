"""tf.data readers of ALBERT pretraining TFRecords (official feature format).

TPU rules live here: static shapes (fixed-length features, `drop_remainder=True`), int32
features. Files are sharded per input pipeline (`tf.distribute.InputContext`), so each worker
reads its own files. Before reading, every file is checked against the model: its JSON sidecar
(written by `albert_tf.data.create_pretraining_data`) or, for files without one (official tooling),
its first record must have `max_seq_length` / `max_predictions_per_seq` features of the model's
lengths.
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.paths import expand_patterns
from albert_tf.records import masked_crc32c, read_sidecar


class DataMismatchError(ValueError):
    """The data does not fit the model or the input pipeline; the message says what differs."""


def list_files(input_patterns) -> list[str]:
    """Sorted TFRecord files matching comma-separated globs (sidecar `.json` files excluded)."""
    files = expand_patterns(input_patterns, what="TFRecord file", exclude_suffixes=(".json",),
                            error=DataMismatchError)
    # Hidden names are writers' temporaries and locks (`albert_tf.paths.temporary_name`),
    # never data, even where a glob (`gs://.../*`) matches them.
    data = sorted(f for f in files if not os.path.basename(f.rstrip("/")).startswith("."))
    if not data:
        raise DataMismatchError(f"{input_patterns!r} matches only hidden files ({files[0]}, "
                                "...): writers' temporaries and locks, not data.")
    return data


def _first_record_lengths(path):
    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        first = (e.message or "").splitlines()[0] if e.message else ""
        reason = first.split("}}")[-1].split(" [Op:")[0].strip() or first
        raise DataMismatchError(
            f"{path} is not a readable TFRecord file ({reason}): "
            "training reads records made by python -m albert_tf.data.create_pretraining_data "
            "(pretraining) or by the fine-tuning command itself, not text.") from None
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

    `max_predictions_per_seq=None` accepts any prediction count, the same in every file (an
    evaluation set keeps the count it was generated with: the masked-LM head gathers however
    many positions a record has, so a model trained at 40% masking is evaluated on records
    masked at 15%); `prediction_count` then gives it.

    Returns {path: sidecar dict or None}.
    """
    found, counts = {}, {}
    for path in files:
        meta = read_sidecar(path, required=("max_seq_length", "max_predictions_per_seq"))
        if meta is not None:
            seq, preds = meta["max_seq_length"], meta["max_predictions_per_seq"]
            if vocab_size is not None and meta.get("vocab_size") not in (None, vocab_size):
                raise DataMismatchError(
                    f"{path} was generated with a vocabulary of {meta['vocab_size']} pieces "
                    f"({meta.get('spm_model_file')}), but the model has vocab_size={vocab_size}: "
                    f"set \"vocab_size\": {meta['vocab_size']} in --albert_config_file, or "
                    f"regenerate the data with a vocabulary of {vocab_size} pieces (train_vocab "
                    f"--vocab_size {vocab_size}).")
            source = "its sidecar says"
        else:
            seq, preds = _first_record_lengths(path)
            source = "its records have"
        expected = preds if max_predictions_per_seq is None else max_predictions_per_seq
        if seq != max_seq_length or preds != expected:
            raise DataMismatchError(
                f"{path} does not match the model: {source} max_seq_length={seq}, "
                f"max_predictions_per_seq={preds}; the model expects "
                f"max_seq_length={max_seq_length}, max_predictions_per_seq="
                f"{expected}. Regenerate the data or change the flags.")
        found[path] = meta
        counts.setdefault(preds, path)
    if len(counts) > 1:
        raise DataMismatchError(
            "The evaluation files were generated with different max_predictions_per_seq ("
            + ", ".join(f"{n} in {path}" for n, path in sorted(counts.items()))
            + "); evaluate files of one setting at a time.")
    return found


def prediction_count(files, sidecars=None) -> int:
    """max_predictions_per_seq of pretraining files (their sidecar's, or their first record's
    length); `check_files` with `max_predictions_per_seq=None` has made sure they agree."""
    path = files[0]
    meta = (sidecars or {}).get(path)
    if meta is None:
        meta = read_sidecar(path, required=("max_predictions_per_seq",))
    if meta is not None:
        return int(meta["max_predictions_per_seq"])
    return _first_record_lengths(path)[1]


def _parse_spec(schema: dict) -> dict:
    return {name: tf.io.FixedLenFeature(list(length) if isinstance(length, (tuple, list))
                                        else [length],
                                        tf.int64 if dtype == "int64" else tf.float32)
            for name, (length, dtype) in schema.items()}


def schema_parser(schema: dict):
    """Record -> dict of fixed-shape tensors of `schema` ({name: (length or shape tuple,
    "int64" | "float32")}); int64 features become int32 (TPU-friendly)."""
    spec = _parse_spec(schema)

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
                for name, t in example.items()}

    return parse


def parse_fn(max_seq_length: int, max_predictions_per_seq: int):
    """Pretraining record -> dict of fixed-shape tensors (`schema_parser` of its schema)."""
    return schema_parser(F.pretraining_schema(max_seq_length, max_predictions_per_seq))


def pretraining_dataset(input_patterns, global_batch_size: int, max_seq_length: int,
                        max_predictions_per_seq: int, is_training: bool = True,
                        input_context: tf.distribute.InputContext | None = None,
                        vocab_size: int | None = None, seed: int | None = None,
                        shuffle_window: int = 10000, num_shards: int | None = None,
                        start_step: int = 0, drop_remainder: bool = True) -> tf.data.Dataset:
    """Batches of pretraining features.

    Args:
        input_patterns: comma-separated globs (or a list) of TFRecord files.
        global_batch_size: batch size over all replicas; the dataset yields per-replica batches
            (`input_context.get_per_replica_batch_size`).
        max_seq_length, max_predictions_per_seq: the model's; files that differ are refused.
        is_training: the training stream of `InputPlan` (deterministic, endless, positioned at
            `start_step`); otherwise one ordered pass, files sharded by input pipeline.
        input_context: from `strategy.distribute_datasets_from_function`.
        vocab_size: the model's; checked against the sidecars when given.
        seed, shuffle_window, num_shards, start_step: of the training stream (`InputPlan`);
            `seed=None` draws one. `num_shards` defaults to the number of input pipelines.
        drop_remainder: keep evaluation batch shapes static (required on TPU).

    Returns:
        A dataset of dicts: `input_ids`, `input_mask`, `segment_ids`, `token_boundary`
        [batch, max_seq_length]; `masked_lm_positions`, `masked_lm_ids` (int32),
        `masked_lm_weights` (float32) [batch, max_predictions_per_seq];
        `next_sentence_labels` [batch, 1].
    """
    files = list_files(input_patterns)
    sidecars = check_files(files, max_seq_length, max_predictions_per_seq, vocab_size)
    if is_training:
        pipelines = input_context.num_input_pipelines if input_context else 1
        plan = InputPlan.create(files, global_batch_size, num_shards or pipelines, seed,
                                shuffle_window, sidecars=sidecars)
        return training_dataset(plan, start_step, max_seq_length, max_predictions_per_seq,
                                input_context)
    return ordered_dataset(files, global_batch_size,
                           F.pretraining_schema(max_seq_length, max_predictions_per_seq),
                           input_context, drop_remainder)


def ordered_dataset(files, global_batch_size: int, schema: dict,
                    input_context: tf.distribute.InputContext | None = None,
                    drop_remainder: bool = True, shard_records: bool = False,
                    num_batches: int | None = None) -> tf.data.Dataset:
    """One ordered pass over `files`, batches of the input pipeline's share of
    `global_batch_size`, features of `schema`.

    With several input pipelines, each reads its own files (`files[i::pipelines]`), or with
    `shard_records` every file and its own records (`records[i::pipelines]` of the
    concatenation): any number of files then serves any number of pipelines, and with
    `num_batches` (the global record count // `global_batch_size`) every pipeline yields the
    same number of batches, which lock-step evaluation across workers needs."""
    batch_size = global_batch_size
    dataset = tf.data.Dataset.from_tensor_slices(files)
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        if pipelines > 1 and not shard_records:
            if len(files) < pipelines:
                raise DataMismatchError(
                    f"{len(files)} input file(s) cannot be sharded over {pipelines} input "
                    "pipelines (workers); generate at least that many shards "
                    "(--num_output_shards).")
            dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    dataset = dataset.flat_map(tf.data.TFRecordDataset)
    if shard_records and pipelines > 1:
        dataset = dataset.shard(pipelines, input_context.input_pipeline_id)
    dataset = dataset.map(schema_parser(schema), num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    if num_batches is not None:
        dataset = dataset.take(num_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------------------------------------
# The training stream: deterministic, and positioned from the step alone.
#
# The files are dealt round-robin (in sorted order) into `num_shards` independent streams. Each
# step takes `global_batch_size / num_shards` consecutive records from every stream, in shard
# order, and that is the step's global batch. A stream runs through epochs; epoch e of shard s
# reads the shard's files one after the other in a seeded order (seed, s, e), each file from its
# first record to its last, and permutes consecutive windows of `shuffle_window` records, the
# permutation of window w seeded by (seed, s, e, w). Nothing random is drawn from state, so the
# record at any position is a function of the position, and the position after step t is
# t * global_batch_size / num_shards records into each stream: a restarted run seeks there from
# the record counts (sidecars, or the framing of files without one) instead of restoring
# buffers. Reaching it opens one file and reads at most that file's records before the
# position plus one window; no whole file before it is read.
#
# The data order depends on the files, their record counts, the seed, the global batch size,
# the shard count and the window, never on the hardware: an input pipeline (a host or worker)
# takes a contiguous block of num_shards / num_input_pipelines shards, so any number of hosts
# that divides num_shards reads the same global batches.

_FILE_ORDER, _WINDOW_ORDER = 1, 2  # seed streams


def _stream_key(seed: int, purpose: int, *data):
    key = tf.constant([seed, purpose], tf.int64)
    for value in data:
        key = tf.random.experimental.stateless_fold_in(key, tf.cast(value, tf.int64))
    return key


def _permutation(n, key):
    return tf.random.experimental.stateless_shuffle(tf.range(n, dtype=tf.int64), seed=key)


def count_records(path: str) -> int:
    """Records in a TFRecord file, from its framing alone: each record's 12-byte header (length
    and the length's CRC) is read and its data skipped by seeking, so counting costs a few bytes
    per record. A damaged header or a file that ends inside a record raises DataMismatchError
    naming the file."""
    count, position = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        size = f.size()
        while position < size:
            f.seek(position)
            header = f.read(12)
            if len(header) == 12:
                length, crc = struct.unpack("<QI", header)
                if masked_crc32c(header[:8]) != crc:
                    raise DataMismatchError(
                        f"{path} is not a TFRecord file or is damaged: the header of record "
                        f"{count + 1} (byte {position}) fails its checksum. Regenerate it.")
                position += 12 + length + 4
            if len(header) < 12 or position > size:
                raise DataMismatchError(
                    f"{path} is truncated: it ends inside record {count + 1}. Regenerate it "
                    "(python -m albert_tf.data.create_pretraining_data) or restore a complete "
                    "copy.")
            count += 1
    return count


def record_counts(files, sidecars=None) -> list[int]:
    """Records per file: the sidecar's `num_examples`, or counted from the framing."""
    sidecars = sidecars or {}
    counts = []
    for path in files:
        meta = sidecars.get(path)
        if meta is None:
            meta = read_sidecar(path)
        if meta is not None and "num_examples" in meta:
            meta = read_sidecar(path, required=("num_examples",)) or meta
        counts.append(int(meta["num_examples"]) if meta and "num_examples" in meta
                      else count_records(path))
    return counts


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """Where every training example of a run comes from (see the comment above): the files
    with their record counts, the global batch size, the number of shards, the seed and the
    shuffle window. Saved as JSON beside the checkpoints; a resumed run must have the same."""

    files: tuple[str, ...]
    records: tuple[int, ...]
    global_batch_size: int
    num_shards: int
    seed: int
    shuffle_window: int
    # What each file holds, beyond its name and record count: its sidecar's run identity
    # (`run_hash` of the pretraining data, `digest` of fine-tuning records), else its size. A
    # file regenerated under the same name with other flags (another masking rate) and the
    # same number of records is another input. Empty for plans of earlier versions.
    identities: tuple = ()

    def __post_init__(self):
        problems = []
        if self.num_shards < 1 or self.global_batch_size % self.num_shards:
            problems.append(f"the global batch size {self.global_batch_size} must be a multiple "
                            f"of the number of input shards {self.num_shards}")
        if len(self.files) < self.num_shards:
            problems.append(f"{len(self.files)} input file(s) cannot feed {self.num_shards} "
                            "input shards (one per input pipeline: worker or TPU host, unless "
                            "--input_shards says otherwise); generate at least that many files "
                            "(--num_output_shards)")
        if self.shuffle_window < 1:
            problems.append(f"the shuffle window must be at least 1; got {self.shuffle_window}")
        empty = [f for f, n in zip(self.files, self.records) if n == 0]
        if empty:
            problems.append(f"{', '.join(empty)} hold(s) no records")
        if problems:
            raise DataMismatchError("Training input: " + "; ".join(problems) + ".")

    @classmethod
    def create(cls, input_patterns, global_batch_size, num_shards, seed=None,
               shuffle_window=10000, sidecars=None) -> "InputPlan":
        files = list_files(input_patterns)
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little") >> 1
        sidecars = dict(sidecars or {})
        for path in files:
            if sidecars.get(path) is None:
                sidecars[path] = read_sidecar(path)
        return cls(tuple(files), tuple(record_counts(files, sidecars)), global_batch_size,
                   num_shards, int(seed), shuffle_window,
                   tuple(file_identity(path, sidecars[path]) for path in files))

    # -- the position of a step ---------------------------------------------------------------
    def shard(self, shard: int) -> tuple[list[str], list[int]]:
        return list(self.files[shard::self.num_shards]), list(self.records[shard::self.num_shards])

    @property
    def shard_batch_size(self) -> int:
        return self.global_batch_size // self.num_shards

    def file_order(self, shard: int, epoch: int):
        n = len(self.shard(shard)[0])
        return _permutation(n, _stream_key(self.seed, _FILE_ORDER, shard, epoch)).numpy()

    def position(self, shard: int, step: int) -> dict:
        """Where shard `shard` stands after `step` steps: epoch, offset in it, the window, the
        file (index into the epoch's file order, and path) and the record in that file where
        the window starts, and the records a restart reads before its first batch."""
        files, counts = self.shard(shard)
        consumed = step * self.shard_batch_size
        epoch, offset = divmod(consumed, sum(counts))
        window, in_window = divmod(offset, self.shuffle_window)
        start = window * self.shuffle_window
        order = self.file_order(shard, epoch)
        ends = np.cumsum([counts[i] for i in order])
        index = int(np.searchsorted(ends, start, side="right"))
        skip = start - (int(ends[index - 1]) if index else 0)
        return dict(epoch=epoch, offset=offset, window=window, file_index=index,
                    file=files[order[index]], skip_records=skip, in_window=in_window,
                    restart_reads=skip + in_window)

    def records_dataset(self, shard: int, start_step: int = 0) -> tf.data.Dataset:
        """The serialized records of one shard from the position of `start_step` on, forever."""
        files, counts = self.shard(shard)
        names, sizes = tf.constant(files), tf.constant(counts, tf.int64)
        window_size = self.shuffle_window
        seed = self.seed

        def epoch_records(epoch, first_file, skip, first_window):
            order = _permutation(len(files), _stream_key(seed, _FILE_ORDER, shard, epoch))
            ds = tf.data.Dataset.from_tensor_slices((tf.gather(names, order[first_file:]),
                                                     tf.gather(sizes, order[first_file:])))
            # A file that yields another number of records than planned (changed, or truncated
            # at a record boundary) stops the run instead of shifting every later position.
            ds = ds.flat_map(lambda name, size: tf.data.TFRecordDataset(name).apply(
                tf.data.experimental.assert_cardinality(size))).skip(skip)

            def permute(index, window):
                key = _stream_key(seed, _WINDOW_ORDER, shard, epoch, first_window + index)
                return tf.gather(window, _permutation(tf.shape(window, tf.int64)[0], key))

            return ds.batch(window_size).enumerate().map(permute).unbatch()

        at = self.position(shard, start_step)
        first = epoch_records(tf.constant(at["epoch"], tf.int64), at["file_index"],
                              tf.constant(at["skip_records"], tf.int64),
                              tf.constant(at["window"], tf.int64)).skip(at["in_window"])
        zero = tf.constant(0, tf.int64)
        rest = tf.data.Dataset.range(at["epoch"] + 1, 2 ** 62).flat_map(
            lambda epoch: epoch_records(epoch, 0, zero, zero))
        return first.concatenate(rest)

    # -- persistence --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        files = [{"path": f, "records": n} for f, n in zip(self.files, self.records)]
        for entry, identity in zip(files, self.identities):
            entry["identity"] = identity
        return {"format": "albert_tf.input_plan", "version": 1,
                "global_batch_size": self.global_batch_size, "num_shards": self.num_shards,
                "seed": self.seed, "shuffle_window": self.shuffle_window, "files": files}

    @classmethod
    def from_dict(cls, d: dict) -> "InputPlan":
        identities = tuple(f.get("identity") for f in d["files"])
        return cls(tuple(f["path"] for f in d["files"]), tuple(f["records"] for f in d["files"]),
                   d["global_batch_size"], d["num_shards"], d["seed"], d["shuffle_window"],
                   identities if all(i is not None for i in identities) else ())

    def differences(self, other: "InputPlan") -> list[str]:
        """What would make `other` read different batches (file paths may move: compared by
        name and record count)."""
        found = []
        for name in ("global_batch_size", "num_shards", "seed", "shuffle_window"):
            if getattr(self, name) != getattr(other, name):
                found.append(f"{name} {getattr(self, name)} -> {getattr(other, name)}")
        mine = [(os.path.basename(f), n) for f, n in zip(self.files, self.records)]
        theirs = [(os.path.basename(f), n) for f, n in zip(other.files, other.records)]
        if mine != theirs:
            gone = sorted(set(mine) - set(theirs))
            new = sorted(set(theirs) - set(mine))
            parts = ([f"no longer there: {gone[:5]}"] if gone else []) + (
                [f"new: {new[:5]}"] if new else [])
            found.append("files (name, records) " + ("; ".join(parts) or "in another order"))
        elif self.identities and other.identities and self.identities != other.identities:
            changed = [os.path.basename(f) for f, a, b in zip(self.files, self.identities,
                                                               other.identities) if a != b]
            found.append(f"files with the same names and record counts but other contents: "
                         f"{changed[:5]}{' ...' if len(changed) > 5 else ''} (regenerated "
                         "with other inputs or flags)")
        return found


def file_identity(path: str, sidecar: dict | None) -> str:
    """What `path` holds, for `InputPlan.differences`: its sidecar's run identity (`run_hash`
    of pretraining data with the shard, `digest` of fine-tuning records with the file's index),
    else its size in bytes."""
    if sidecar:
        if sidecar.get("run_hash"):
            return f"run_hash:{sidecar['run_hash']}:{sidecar.get('shard_index')}"
        if sidecar.get("digest"):
            return f"digest:{sidecar['digest']}:{sidecar.get('file_index')}"
    return f"size:{tf.io.gfile.stat(path).length}"


def training_dataset(plan: InputPlan, start_step: int, max_seq_length: int,
                     max_predictions_per_seq: int,
                     input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Per-replica pretraining batches of the plan's stream from step `start_step` on
    (`stream_dataset` with the pretraining schema)."""
    return stream_dataset(plan, start_step,
                          F.pretraining_schema(max_seq_length, max_predictions_per_seq),
                          input_context)


def stream_dataset(plan: InputPlan, start_step: int, schema: dict,
                   input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Per-replica batches (features of `schema`) of the plan's stream from step `start_step`
    on.

    With an `input_context` (from `strategy.distribute_datasets_from_function`), this input
    pipeline reads only its block of shards and yields one batch per local replica per step,
    in replica order, so that the replicas of all pipelines together hold the step's global
    batch in shard order."""
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline = input_context.input_pipeline_id if input_context else 0
    replicas = input_context.num_replicas_in_sync if input_context else 1
    if plan.num_shards % pipelines:
        raise DataMismatchError(
            f"{plan.num_shards} input shards cannot be split over {pipelines} input pipelines "
            "(workers or TPU hosts): use a multiple of the number of pipelines (--input_shards).")
    if replicas % pipelines or plan.global_batch_size % replicas:
        raise DataMismatchError(f"The global batch size {plan.global_batch_size} must be a "
                                f"multiple of the {replicas} replicas.")
    per_pipeline = plan.num_shards // pipelines
    shards = range(pipeline * per_pipeline, (pipeline + 1) * per_pipeline)
    streams = [plan.records_dataset(s, start_step).batch(plan.shard_batch_size)
               for s in shards]
    dataset = (streams[0] if len(streams) == 1 else
               tf.data.Dataset.zip(tuple(streams)).map(lambda *parts: tf.concat(parts, 0)))
    spec = _parse_spec(schema)
    local = replicas // pipelines
    per_replica = plan.global_batch_size // replicas

    def parse(records):
        example = tf.io.parse_example(records, spec)
        return {name: tf.reshape(tf.cast(t, tf.int32) if t.dtype == tf.int64 else t,
                                 [local, per_replica, *t.shape[1:]])
                for name, t in example.items()}

    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.unbatch().prefetch(tf.data.AUTOTUNE)


def find_unreadable_files(files, expected_records=None) -> list[tuple[str, str]]:
    """[(path, error)] of the TFRecord files that cannot be read to the end (truncated or
    corrupt records) or, given `expected_records` (one count per file), hold another number of
    records. Reads every file once: meant for after a failure, not before training."""
    found = []
    for i, path in enumerate(files):
        try:
            n = int(tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64),
                                                         lambda n, _: n + 1))
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            message = re.sub(r"\{\{.*?\}\}\s*", "", e.message.splitlines()[0])
            found.append((path, re.sub(r"\s*\[Op:.*$", "", message)))
            continue
        if expected_records is not None and n != expected_records[i]:
            found.append((path, f"it holds {n} records, but the run planned its input with "
                                f"{expected_records[i]} (the file changed since the run "
                                "started, or ends early)"))
    return found
