"""Sentence(-pair) classification and regression fine-tuning (GLUE): examples to TFRecords, and
the task the training loop runs (`ClassificationTask`).

Features (official `run_classifier.py` names): `input_ids`, `input_mask`, `segment_ids`
[max_seq_length] (`[CLS] A [SEP] (B [SEP])`, official longest-first truncation,
`albert_tf.packing`), `label_ids` [1] (int64; float32 for regression) and `is_real_example` [1].
Evaluation files are padded with `is_real_example = 0` examples to a whole number of batches,
so every real example is scored with static batch shapes and no remainder is dropped; padding
counts in no loss or metric.

Loss: mean cross entropy over the real examples of the global batch (mean squared error for
regression), the denominator all-reduced so replicas add up to the single-device loss.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os

import numpy as np

from albert_tf import features as F
from albert_tf.tasks import glue
from albert_tf.packing import for_batches, pack_in_graph, packed_length, ragged_rows
from albert_tf.records import files_for, read_cached, to_example, write_records
from albert_tf.tasks.base import LabelledTask
from albert_tf.tokenization import FEATURES_REVISION
from albert_tf.models.classifier import AlbertClassifier

LABEL_IDS = F.LABEL_IDS
IS_REAL_EXAMPLE = F.IS_REAL_EXAMPLE
SIDECAR_FORMAT = "albert_classifier_tfrecord"


def classifier_schema(max_seq_length: int, regression: bool = False) -> dict:
    return {F.INPUT_IDS: (max_seq_length, "int64"), F.INPUT_MASK: (max_seq_length, "int64"),
            F.SEGMENT_IDS: (max_seq_length, "int64"),
            LABEL_IDS: (1, "float32" if regression else "int64"),
            IS_REAL_EXAMPLE: (1, "int64")}


def examples_features(examples, task: glue.GlueTask, tokenizer, max_seq_length: int,
                      batch_size: int = 512):
    """(features as lists, whether the pair was truncated) of each example, in order: the
    Python tokenizer (the official data's SentencePiece), then `pack_in_graph`, the packing
    `AlbertTextPreprocessor` and the SavedModels run, padded to `max_seq_length`."""
    pair = any(e.text_b is not None for e in examples)  # a None B packs as an empty one
    pack = for_batches(functools.partial(pack_in_graph, max_seq_length=max_seq_length,
                                         special=tokenizer),
                       len(examples), batch_size, 2 if pair else 1)
    for begin in range(0, len(examples), batch_size):
        batch = examples[begin:begin + batch_size]
        ids_a = [tokenizer.encode(e.text_a) for e in batch]
        ids_b = [tokenizer.encode(e.text_b) if e.text_b is not None else [] for e in batch]
        out = pack(ragged_rows(ids_a), ragged_rows(ids_b)) if pair else pack(ragged_rows(ids_a))
        arrays = {name: out[name].numpy() for name in F.BACKBONE_INPUTS}
        for i, example in enumerate(batch):
            features = {name: arrays[name][i].tolist() + [0] * (max_seq_length
                                                                - arrays[name].shape[1])
                        for name in F.BACKBONE_INPUTS}
            if task.is_regression:
                features[LABEL_IDS] = [float(example.label) if example.label is not None
                                       else 0.0]
            else:
                features[LABEL_IDS] = [task.labels.index(example.label)
                                       if example.label is not None else 0]
            features[IS_REAL_EXAMPLE] = [1]
            truncated = packed_length(len(ids_a[i]), None if example.text_b is None
                                      else len(ids_b[i])) > max_seq_length
            yield features, truncated


def example_features(example: glue.InputExample, task: glue.GlueTask, tokenizer,
                     max_seq_length: int) -> dict:
    """One example's features (lists; `examples_features`)."""
    return next(examples_features([example], task, tokenizer, max_seq_length))[0]


def write_examples(examples, task: glue.GlueTask, tokenizer, max_seq_length: int, path: str,
                   shuffle_seed: int | None = None, pad_to_multiple: int = 1,
                   num_files: int = 1) -> dict:
    """Writes `examples` as TFRecords with JSON sidecars (counts, lengths, labels), atomically;
    files made from the same examples and settings are kept. Returns the split's sidecar with
    `files` (the paths written: `path`, or `num_files` shards of it, see `write_records`).
    `shuffle_seed` writes the examples in a seeded order (training files); `pad_to_multiple`
    appends `is_real_example = 0` examples up to a multiple of it."""
    schema = classifier_schema(max_seq_length, task.is_regression)
    digest = hashlib.sha256(json.dumps(
        [task.name, task.labels, max_seq_length, shuffle_seed, pad_to_multiple,
         tokenizer.sha256, tokenizer.do_lower_case, FEATURES_REVISION,
         [(e.guid, e.text_a, e.text_b, e.label) for e in examples]],
        ensure_ascii=False).encode()).hexdigest()
    num_files = files_for(len(examples), num_files)
    cached = read_cached(path, digest, num_files)
    if cached:
        return cached
    order = np.arange(len(examples))
    if shuffle_seed is not None:
        order = np.random.default_rng([shuffle_seed, 0xC1A55]).permutation(len(examples))
    truncated = 0
    records = []
    for features, cut in examples_features([examples[i] for i in order.tolist()], task,
                                           tokenizer, max_seq_length):
        records.append(to_example(features, schema))
        truncated += int(cut)
    padding = (-len(records)) % pad_to_multiple
    if padding:
        pad = {name: [0] * length for name, (length, _) in schema.items()}
        pad[LABEL_IDS] = [0.0] if task.is_regression else [0]
        records.extend([to_example(pad, schema)] * padding)
    meta = {"format": SIDECAR_FORMAT, "task": task.name, "num_examples": len(records),
            "real_examples": len(examples), "padding_examples": padding,
            "truncated_examples": truncated, "max_seq_length": max_seq_length,
            "labels": list(task.labels) if task.labels else None,
            "vocab_size": tokenizer.vocab_size, "spm_model_sha256": tokenizer.sha256,
            "digest": digest}
    files = write_records(records, path, meta, num_files)
    return dict(meta, files=files)


def write_split_features(task: glue.GlueTask, tokenizer, data_dir, cache_dir, max_seq_length,
                         splits, seed, eval_batch_size, predict_batch_size, num_train_files=1,
                         train_examples=0):
    """{split: (TFRecord paths, comma-separated; sidecar; examples)} for the requested GLUE
    splits of `data_dir` (a `glue.custom_task`'s: its own files; kept when up to date):
    training in `num_train_files` files, its first
    `train_examples` examples only when that is positive; dev and test padded to whole
    batches."""
    written = {}
    for split in splits:
        examples = glue.load_split(task, data_dir, split)
        if split == "train" and train_examples:
            if not 0 < train_examples <= len(examples):
                raise ValueError(f"--train_examples={train_examples}: the train split of "
                                 f"{glue.task_file(task, data_dir, split)} has "
                                 f"{len(examples)} examples; give 1 to "
                                 f"{len(examples)}, or 0 for all.")
            examples = examples[:train_examples]
        path = os.path.join(cache_dir, f"{split}.tfrecord")
        meta = write_examples(
            examples, task, tokenizer, max_seq_length, path,
            shuffle_seed=seed if split == "train" else None,
            pad_to_multiple={"train": 1, "dev": eval_batch_size,
                             "test": predict_batch_size}[split],
            num_files=num_train_files if split == "train" else 1)
        written[split] = (",".join(meta["files"]), meta, examples)
        print(f"{split}: {meta['real_examples']:,} examples ({meta['padding_examples']} padding, "
              f"{meta['truncated_examples']} truncated to {max_seq_length}) -> {path}"
              + (f" ({len(meta['files'])} files)" if len(meta["files"]) > 1 else ""),
              flush=True)
    return written


class ClassificationTask(LabelledTask):
    """A GLUE task on `write_examples` files: `AlbertClassifier` (dropout, then dense on the
    pooled output), cross entropy (MSE for STS-B), GLUE's metrics; the best checkpoint by the
    task's GLUE metric."""

    model_inputs = F.BACKBONE_INPUTS
    writer = "albert_tf.tasks.classification.write_examples"

    def __init__(self, glue_task: glue.GlueTask | str, albert_config, max_seq_length: int,
                 dropout_rate: float = 0.1):
        self.glue_task = glue.get_task(glue_task) if isinstance(glue_task, str) else glue_task
        self.albert_config = albert_config
        self.max_seq_length = max_seq_length
        self.dropout_rate = dropout_rate
        self.name = self.glue_task.name
        self.best_metric = glue.main_metric(self.glue_task)
        regression = self.regression = self.glue_task.is_regression
        self.term_names = ("loss_sum", "count") + (() if regression else ("correct_sum",))
        self.loss_name = "mse" if regression else "cross_entropy"
        self.metric_names = (self.loss_name,) + glue.metric_names(self.glue_task)

    def build_model(self, dtype=None, performance=None):
        return AlbertClassifier(self.albert_config, self.glue_task.num_labels,
                                dropout_rate=self.dropout_rate, dtype=dtype,
                                performance=performance)

    def schema(self):
        return classifier_schema(self.max_seq_length, self.glue_task.is_regression)

    def expected_sidecar(self):
        return {"task": self.glue_task.name, "max_seq_length": self.max_seq_length,
                "vocab_size": (None, self.albert_config.vocab_size)}

    def eval_outputs(self, outputs, features):
        prediction, label, _, real = self._per_example(outputs, features)
        return {"prediction": prediction, "label": label, "real": real}

    def metrics(self, sums, collected=None):
        count = max(float(sums["count"]), 1.0)
        metrics = {self.loss_name: float(sums["loss_sum"]) / count}
        if collected:
            real = collected["real"] > 0.5
            metrics.update(glue.glue_metrics(self.glue_task, collected["prediction"][real],
                                             collected["label"][real]))
        elif not self.glue_task.is_regression:
            metrics["accuracy"] = float(sums["correct_sum"]) / count
        return metrics
