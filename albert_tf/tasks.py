"""What a task plugs into the one training loop (`albert_tf.train_lib.TrainingRun`).

The loop owns everything a task does not: the strategy, the optimizer and schedule, gradient
accumulation, the all-reduce and clipping, the finiteness gate, checkpoints and exact resume,
the deterministic input stream (`InputPlan`), evaluation passes, the best checkpoint,
TensorBoard, progress and export. A task supplies:

- its model (`build_model`) and the features the model takes (`model_inputs`);
- the TFRecord schema of its examples (`schema`) and a check of its input files against the
  model (`check_files`);
- its loss as additive per-batch sums (`loss_terms`, named by `term_names`) and the global
  normalisers of one step (`normalizers`: computed from the replica's batch in replica
  context, all-reduced where they depend on the data), so that the per-replica losses
  (`loss`) add up to exactly the single-device loss of the global batch;
- its metrics from summed terms (`metrics`, named by `metric_names`), the one that picks the
  best checkpoint (`best_metric`, higher is better), the term that counts examples, and the
  fragment it contributes to the progress line.

`PretrainingTask` is ALBERT pretraining (masked LM + sentence order).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from albert_tf import features as F, losses
from albert_tf.checkpoints import initialize_backbone, initialize_from_checkpoint
from albert_tf.input_pipeline import check_files, ordered_dataset, prediction_count
from albert_tf.pretrainer import AlbertPretrainer

SUM = tf.distribute.ReduceOp.SUM


class Task:
    """The interface; see the module docstring. Subclasses set the class attributes."""

    name = "task"
    term_names: tuple = ()
    metric_names: tuple = ()
    best_metric = ""
    examples_term = ""
    model_inputs: tuple = ()

    def build_model(self, dtype=None):
        raise NotImplementedError

    def schema(self) -> dict:
        """{feature name: (length, "int64" | "float32")} of the task's TFRecords."""
        raise NotImplementedError

    def check_files(self, files) -> dict:
        """Raises `DataMismatchError` for files that do not fit the model; returns {path:
        sidecar dict or None}."""
        return {path: None for path in files}

    def eval_schema(self, files) -> tuple[dict, dict]:
        """(schema, {path: sidecar dict or None}) of evaluation files; by default the training
        schema, the files checked as `check_files` does."""
        return self.schema(), self.check_files(files)

    def normalizers(self, features, global_batch_size: int) -> dict:
        """Global denominators of one step (replica context)."""
        raise NotImplementedError

    def loss_terms(self, outputs, features) -> dict:
        raise NotImplementedError

    def loss(self, terms, normalizers) -> tf.Tensor:
        raise NotImplementedError

    def eval_outputs(self, outputs, features) -> dict:
        """Per-example tensors [batch] the evaluation collects for `metrics` (e.g. predictions
        and labels, for metrics that are not sums: F1, correlations)."""
        return {}

    def metrics(self, sums, collected=None) -> dict:
        """Metrics from summed terms and, in evaluation, the collected `eval_outputs` (numpy
        arrays over every evaluated example)."""
        raise NotImplementedError

    def progress(self, metrics) -> str:
        return " | ".join(f"{name} {metrics[name]:.4f}" for name in self.metric_names)

    def initialize(self, model, path: str, init_from_group0: bool = False) -> dict:
        """`--init_checkpoint`: fills `model` strictly by official weight names."""
        return initialize_from_checkpoint(model, path, init_from_group0=init_from_group0)

    def predict_outputs(self, model, path: str, batch_size: int, names=("logits",),
                        drop_remainder: bool = True) -> dict:
        """{output name: float32 array} of `model` over the records of `path` (comma-separated
        files) in file order; where the schema marks real examples (`is_real_example`), the
        padding examples are dropped."""
        schema = self.schema()

        @tf.function
        def outputs_of(batch):
            out = model({k: batch[k] for k in self.model_inputs}, training=False)
            return {name: tf.cast(out[name], tf.float32) for name in names}

        collected, real = {name: [] for name in names}, []
        for batch in ordered_dataset(path.split(","), batch_size, schema,
                                     drop_remainder=drop_remainder):
            for name, value in outputs_of(batch).items():
                collected[name].append(value.numpy())
            if F.IS_REAL_EXAMPLE in schema:
                real.append(batch[F.IS_REAL_EXAMPLE].numpy()[:, 0] > 0)
        arrays = {name: np.concatenate(values) for name, values in collected.items()}
        if real:
            keep = np.concatenate(real)
            arrays = {name: value[keep] for name, value in arrays.items()}
        return arrays


class LabelledTask(Task):
    """Fine-tuning on records with `label_ids` and `is_real_example` (GLUE, RACE): the task
    model on the pretrained backbone (the head keeps its initialisation), cross entropy over
    the logits averaged over the real examples of the global batch (the denominator all-reduced,
    so replicas add up to the single-device loss), accuracy. `regression` tasks (STS-B) use the
    squared error of one output instead."""

    examples_term = "count"
    regression = False

    def initialize(self, model, path, init_from_group0=False):
        """The backbone from any pretrained source (`initialize_backbone`: strict, the
        source's heads dropped and reported)."""
        return initialize_backbone(model.backbone, path, init_from_group0=init_from_group0)

    def normalizers(self, features, global_batch_size):
        ctx = tf.distribute.get_replica_context()
        real = tf.reduce_sum(tf.cast(features[F.IS_REAL_EXAMPLE], tf.float32))
        return {"count": ctx.all_reduce(SUM, real)}

    def _per_example(self, outputs, features):
        """(prediction, label, loss, real) per example [batch]."""
        logits = tf.cast(outputs["logits"], tf.float32)
        real = tf.reshape(tf.cast(features[F.IS_REAL_EXAMPLE], tf.float32), [-1])
        if self.regression:
            prediction = tf.reshape(logits, [-1])
            label = tf.reshape(tf.cast(features[F.LABEL_IDS], tf.float32), [-1])
            return prediction, label, tf.square(prediction - label), real
        label = tf.reshape(tf.cast(features[F.LABEL_IDS], tf.int32), [-1])
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        return tf.argmax(logits, -1, output_type=tf.int32), label, loss, real

    def loss_terms(self, outputs, features):
        prediction, label, loss, real = self._per_example(outputs, features)
        terms = {"loss_sum": tf.reduce_sum(real * loss), "count": tf.reduce_sum(real)}
        if not self.regression:
            terms["correct_sum"] = tf.reduce_sum(
                real * tf.cast(tf.equal(prediction, label), tf.float32))
        return terms

    def loss(self, terms, normalizers):
        return terms["loss_sum"] / tf.maximum(normalizers["count"], 1.0)

    def predict(self, model, path: str, batch_size: int):
        """(predicted class, or score for regression; class probabilities or None) of the
        real examples of `path`."""
        logits = self.predict_outputs(model, path, batch_size)["logits"]
        if self.regression:
            return logits[:, 0], None
        probabilities = tf.nn.softmax(logits).numpy()
        return probabilities.argmax(-1), probabilities


class PretrainingTask(Task):
    """Masked LM + sentence order on official-format pretraining TFRecords; the official loss
    and metrics (`albert_tf.losses`): the masked-LM loss is normalised by the global sum of
    `masked_lm_weights` (+ 1e-5), the sentence-order loss by the global batch size."""

    name = "pretraining"
    term_names = losses.TERM_NAMES
    metric_names = losses.PretrainingMetrics.NAMES
    best_metric = "masked_lm_accuracy"
    examples_term = "sop_count"
    model_inputs = F.PRETRAINER_INPUTS

    def __init__(self, albert_config, max_seq_length: int, max_predictions_per_seq: int):
        self.albert_config = albert_config
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq

    def build_model(self, dtype=None):
        return AlbertPretrainer(self.albert_config, dtype=dtype)

    def schema(self) -> dict:
        return F.pretraining_schema(self.max_seq_length, self.max_predictions_per_seq)

    def check_files(self, files) -> dict:
        return check_files(files, self.max_seq_length, self.max_predictions_per_seq,
                           self.albert_config.vocab_size)

    def eval_schema(self, files):
        """Evaluation records keep the prediction count they were generated with (a held-out
        set masked at 15% evaluates a model trained at 40%); sequence length and vocabulary
        must be the model's."""
        sidecars = check_files(files, self.max_seq_length, None, self.albert_config.vocab_size)
        return (F.pretraining_schema(self.max_seq_length, prediction_count(files, sidecars)),
                sidecars)

    def normalizers(self, features, global_batch_size):
        ctx = tf.distribute.get_replica_context()
        weights = tf.reduce_sum(tf.cast(features[F.MASKED_LM_WEIGHTS], tf.float32))
        return {"mlm_weight_total": ctx.all_reduce(SUM, weights),
                "sop_total": tf.constant(float(global_batch_size))}

    def loss_terms(self, outputs, features):
        return losses.loss_terms(outputs, features)

    def loss(self, terms, normalizers):
        return losses.loss_from_terms(terms, normalizers["mlm_weight_total"],
                                      normalizers["sop_total"])

    def metrics(self, sums, collected=None):
        return {k: float(v) for k, v in losses.metrics_from_terms(sums).items()}

    def progress(self, metrics):
        return (f"mlm {metrics['masked_lm_loss']:.4f} acc {metrics['masked_lm_accuracy']:.3f} | "
                f"sop {metrics['sentence_order_loss']:.4f} acc "
                f"{metrics['sentence_order_accuracy']:.3f}")
