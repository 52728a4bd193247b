"""ALBERT pretraining as a task of the one loop: masked LM + sentence order."""

from __future__ import annotations

import tensorflow as tf

from albert_tf import features as F
from albert_tf.models import losses
from albert_tf.input_pipeline import check_files, prediction_count
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.tasks.base import SUM, Task


class PretrainingTask(Task):
    """Masked LM + sentence order on official-format pretraining TFRecords; the official loss
    and metrics (`albert_tf.models.losses`): the masked-LM loss is normalised by the global sum of
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

    def build_model(self, dtype=None, performance=None):
        return AlbertPretrainer(self.albert_config, dtype=dtype, performance=performance)

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
