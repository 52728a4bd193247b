"""ALBERT pretraining loss and the four official metrics (official `run_pretraining.py`).

- masked LM: sum(w * CE) / (sum(w) + 1e-5) over the `masked_lm_positions`, where w is
  `masked_lm_weights` (1 for a real prediction, 0 for padding);
- sentence order: mean CE over the batch;
- total = masked LM + sentence order.

Metrics, streamed like the official `tf.metrics` ones: `masked_lm_accuracy` and
`masked_lm_loss` (weighted by `masked_lm_weights`), `sentence_order_accuracy` and
`sentence_order_loss` (unweighted means).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf import features

MLM_DENOMINATOR_GUARD = 1e-5
TERM_NAMES = ("mlm_loss_sum", "mlm_weight_sum", "mlm_correct_sum", "sop_loss_sum",
              "sop_correct_sum", "sop_count")  # official: keeps the loss finite for a batch with no predictions


def _labels(features_dict, name):
    return tf.reshape(tf.cast(features_dict[name], tf.int32), [-1])


def softmax_cross_entropy(logits, labels):
    """Per-row cross entropy of float32 `logits` [n, classes] at int32 `labels` [n]:
    log(sum(exp(s))) - s[label] with s = logits - the row maximum; its gradient
    softmax(logits) - one_hot(label), from the exponentials the forward pass kept, the label's
    -1 written at n positions (no dense one-hot, no dense scatter of the gather's gradient).
    Equal to `tf.nn.sparse_softmax_cross_entropy_with_logits` in value and gradient to float32
    rounding (tests/test_models.py), and faster on CPU at the masked LM's shape ([batch x
    predictions, vocabulary]; docs/benchmarks.md, "bench.small_training"). A label outside
    [0, classes) is an error on CPU (the gather's) and a nan loss elsewhere (which stops the
    run, as that op's nan does on GPU), never a silently wrong loss."""
    classes = tf.shape(logits, out_type=labels.dtype)[-1]
    valid = (labels >= 0) & (labels < classes)

    @tf.custom_gradient
    def cross_entropy(logits):
        shifted = logits - tf.reduce_max(logits, -1, keepdims=True)
        exponentials = tf.exp(shifted)
        total = tf.reduce_sum(exponentials, -1)
        per_row = tf.math.log(total) - tf.gather(shifted, labels, batch_dims=1)

        def gradient(upstream):
            rows = tf.range(tf.shape(labels)[0], dtype=labels.dtype)
            softmax_part = exponentials * (upstream / total)[:, tf.newaxis]
            return tf.tensor_scatter_nd_sub(softmax_part, tf.stack([rows, labels], 1),
                                            upstream)

        return per_row, gradient

    return tf.where(valid, cross_entropy(logits), float("nan"))


def _per_position_mlm(outputs, features_dict):
    logits = tf.cast(outputs["mlm_logits"], tf.float32)
    vocab = tf.shape(logits)[-1]
    logits = tf.reshape(logits, [-1, vocab])
    labels = _labels(features_dict, features.MASKED_LM_IDS)
    weights = tf.reshape(tf.cast(features_dict[features.MASKED_LM_WEIGHTS], tf.float32), [-1])
    per_position = softmax_cross_entropy(logits, labels)
    return logits, labels, weights, per_position


def _per_example_sop(outputs, features_dict):
    logits = tf.cast(outputs["sop_logits"], tf.float32)
    labels = _labels(features_dict, features.NEXT_SENTENCE_LABELS)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return logits, labels, per_example


def loss_terms(outputs, features_dict) -> dict:
    """Additive sums of a batch, from which every loss and metric follows. Sums add up over
    replicas and micro-batches, so a distributed step can normalise by global totals and equal
    the single-device loss exactly.

    Returns float32 scalars: `mlm_loss_sum` (sum of w * CE), `mlm_weight_sum` (sum of w),
    `mlm_correct_sum` (sum of w * [argmax == label]), `sop_loss_sum`, `sop_correct_sum`,
    `sop_count`.
    """
    mlm_logits, mlm_labels, weights, mlm_ce = _per_position_mlm(outputs, features_dict)
    sop_logits, sop_labels, sop_ce = _per_example_sop(outputs, features_dict)
    mlm_correct = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), mlm_labels),
                          tf.float32)
    sop_correct = tf.cast(tf.equal(tf.argmax(sop_logits, -1, output_type=tf.int32), sop_labels),
                          tf.float32)
    return {
        "mlm_loss_sum": tf.reduce_sum(weights * mlm_ce),
        "mlm_weight_sum": tf.reduce_sum(weights),
        "mlm_correct_sum": tf.reduce_sum(weights * mlm_correct),
        "sop_loss_sum": tf.reduce_sum(sop_ce),
        "sop_correct_sum": tf.reduce_sum(sop_correct),
        "sop_count": tf.cast(tf.size(sop_ce), tf.float32),
    }


def loss_from_terms(terms, mlm_weight_total=None, sop_count_total=None) -> tf.Tensor:
    """MLM + SOP loss from `loss_terms`. The denominators default to the terms' own (the
    official single-batch loss); a distributed step passes the global totals instead, so the
    per-replica losses sum to the global loss."""
    w = terms["mlm_weight_sum"] if mlm_weight_total is None else mlm_weight_total
    n = terms["sop_count"] if sop_count_total is None else sop_count_total
    return terms["mlm_loss_sum"] / (w + MLM_DENOMINATOR_GUARD) + terms["sop_loss_sum"] / n


def metrics_from_terms(terms) -> dict:
    """The four official metrics from (summed) `loss_terms` (plain floats or tensors)."""
    return {
        "masked_lm_accuracy": terms["mlm_correct_sum"] / max(float(terms["mlm_weight_sum"]), 1e-12),
        "masked_lm_loss": terms["mlm_loss_sum"] / max(float(terms["mlm_weight_sum"]), 1e-12),
        "sentence_order_accuracy": terms["sop_correct_sum"] / max(float(terms["sop_count"]), 1.0),
        "sentence_order_loss": terms["sop_loss_sum"] / max(float(terms["sop_count"]), 1.0),
    }


def masked_lm_loss(outputs, features_dict) -> tf.Tensor:
    """Weighted masked-LM cross entropy, official normalisation (sum(w) + 1e-5)."""
    t = loss_terms(outputs, features_dict)
    return t["mlm_loss_sum"] / (t["mlm_weight_sum"] + MLM_DENOMINATOR_GUARD)


def sentence_order_loss(outputs, features_dict) -> tf.Tensor:
    """Mean sentence-order-prediction cross entropy."""
    t = loss_terms(outputs, features_dict)
    return t["sop_loss_sum"] / t["sop_count"]


def pretraining_loss(outputs, features_dict) -> tf.Tensor:
    """Total ALBERT pretraining loss: masked LM + sentence order.

    Args:
        outputs: `AlbertPretrainer` outputs (`mlm_logits` [B, P, V], `sop_logits` [B, 2]).
        features_dict: `masked_lm_ids` [B, P], `masked_lm_weights` [B, P],
            `next_sentence_labels` [B] or [B, 1].
    """
    return loss_from_terms(loss_terms(outputs, features_dict))


class PretrainingMetrics:
    """The four official pretraining metrics as streaming Keras metrics.

    Example:
        >>> metrics = PretrainingMetrics()
        >>> metrics.update_state(outputs, batch)   # doctest: +SKIP
        >>> metrics.result()                        # doctest: +SKIP
        {'masked_lm_accuracy': ..., 'masked_lm_loss': ..., 'sentence_order_accuracy': ...,
         'sentence_order_loss': ...}
    """

    NAMES = ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
             "sentence_order_loss")

    def __init__(self):
        # Streaming sums of `loss_terms`; the metrics follow from them (`metrics_from_terms`),
        # the same definitions the training loop reports.
        self.sums = {name: keras.metrics.Sum(name=name) for name in TERM_NAMES}

    def update_state(self, outputs, features_dict):
        for name, value in loss_terms(outputs, features_dict).items():
            self.sums[name].update_state(value)

    def result(self) -> dict:
        return metrics_from_terms({name: m.result() for name, m in self.sums.items()})

    def reset_state(self):
        for m in self.sums.values():
            m.reset_state()
