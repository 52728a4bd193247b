"""SQuAD span extraction as a task of the one training loop."""

from __future__ import annotations

import tensorflow as tf
from albert_tf.tasks.squad import evaluation as squad_eval
from albert_tf.models.task_models import AlbertSpanModel, AlbertSquadV2
from albert_tf.tasks.base import Task
from albert_tf.checkpoints import initialize_backbone
from albert_tf.tasks.squad.decoding import predict_answers, predict_answers_v2
from albert_tf.tasks.squad.features import END_POSITIONS, START_POSITIONS, UNIQUE_IDS, squad_schema


def feature_rows(collected: dict, features) -> list[int]:
    """The row of each of `features` (file order) in an evaluation's `collected` outputs, by
    unique id (the padding examples skipped)."""
    row = {int(u): i for i, (u, r) in enumerate(zip(collected["unique_ids"],
                                                    collected["real"])) if r > 0.5}
    return [row[f[UNIQUE_IDS][0]] for f in features]


def official_metrics(metrics: dict, dataset, texts: dict, null_odds: dict) -> dict:
    """`metrics` updated with the official ALBERT v2 headline of the best non-null `texts` and
    their `null_odds` (`squad_eval.official_v2`; its threshold search as `search_*`); returns
    the answers it scored."""
    scores, answers = squad_eval.official_v2(dataset, texts, null_odds)
    search = scores.pop("threshold_search")
    metrics.update(scores)
    metrics.update({f"search_{k}": v for k, v in search.items()})
    return answers


def _real_examples(features):
    """float32 [batch]: 1 for a real feature, 0 for a padding example."""
    return tf.reshape(tf.cast(features["is_real_example"], tf.float32), [-1])


class SquadTask(Task):
    """SQuAD span extraction for the one loop: loss = mean of the start and end cross entropies
    over the real features of the global batch; evaluation decodes every question's best span
    over its windows and scores it with the official evaluator (`evaluation` must be set:
    (dataset, features in file order, {question id: AlignedContext})).

    `version=2` (SQuAD v2.0, BERT's null-score head): unanswerable questions train toward
    [CLS]; evaluation reports what the official ALBERT `run_squad_v2.py` reports
    (`squad_eval.official_v2`: `exact` and `f1` of the answers at the best F1 threshold of the
    null odds, HasAns/NoAns, `null_score_diff_threshold`; `search_*` our first-pass figures);
    the best checkpoint by `f1`, the official key."""

    model_inputs = ("input_ids", "input_mask", "segment_ids")
    term_names = ("loss_sum", "count", "start_correct", "end_correct")
    metric_names = ("span_loss", "start_accuracy", "end_accuracy", "exact_match", "f1")
    best_metric = "f1"
    examples_term = "count"
    name = "squad_v1"
    # The span head's per-position scores: outputs "start_logits" and "end_logits".
    span_scores = "logits"

    def __init__(self, albert_config, max_seq_length: int, n_best: int = 20,
                 max_answer_length: int = 30, version: int = 1,
                 null_threshold: float | None = None):
        if version not in (1, 2):
            raise ValueError(f"SQuAD version must be 1 or 2, not {version!r}.")
        self.version = version
        self.null_threshold = (0.0 if null_threshold is None else null_threshold) \
            if version == 2 else None
        if version == 2:
            self.name = "squad_v2"
            self.metric_names = ("span_loss", "start_accuracy", "end_accuracy", "exact", "f1",
                                 "null_score_diff_threshold")
        self.albert_config = albert_config
        self.max_seq_length = max_seq_length
        self.n_best = n_best
        self.max_answer_length = max_answer_length
        self.evaluation = None
        self.last_predictions = None

    def build_model(self, dtype=None, performance=None):
        return AlbertSpanModel(self.albert_config, dtype, performance=performance)

    def schema(self):
        return squad_schema(self.max_seq_length)

    def check_files(self, files):
        return {path: None for path in files}

    def initialize(self, model, path, init_from_group0=False):
        return initialize_backbone(model.backbone, path, init_from_group0=init_from_group0)

    def normalizers(self, features, global_batch_size):
        ctx = tf.distribute.get_replica_context()
        real = tf.reduce_sum(tf.cast(features["is_real_example"], tf.float32))
        return {"count": ctx.all_reduce(tf.distribute.ReduceOp.SUM, real)}

    def span_loss(self, scores, labels):
        """float32 [batch]: the loss of the true positions `labels` [batch] under the span
        head's `scores` [batch, seq] (here logits: their cross entropy)."""
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=scores)

    def loss_terms(self, outputs, features):
        real = _real_examples(features)
        terms = {"loss_sum": 0.0, "count": tf.reduce_sum(real)}
        for name, key in (("start", START_POSITIONS), ("end", END_POSITIONS)):
            scores = tf.cast(outputs[f"{name}_{self.span_scores}"], tf.float32)
            labels = tf.reshape(tf.cast(features[key], tf.int32), [-1])
            terms["loss_sum"] += 0.5 * tf.reduce_sum(real * self.span_loss(scores, labels))
            correct = tf.equal(tf.argmax(scores, -1, output_type=tf.int32), labels)
            terms[f"{name}_correct"] = tf.reduce_sum(real * tf.cast(correct, tf.float32))
        return terms

    def loss(self, terms, normalizers):
        return terms["loss_sum"] / tf.maximum(normalizers["count"], 1.0)

    def eval_outputs(self, outputs, features):
        return {"start_logits": tf.cast(outputs["start_logits"], tf.float32),
                "end_logits": tf.cast(outputs["end_logits"], tf.float32),
                "unique_ids": tf.reshape(features[UNIQUE_IDS], [-1]),
                "real": _real_examples(features)}

    def metrics(self, sums, collected=None):
        count = max(float(sums["count"]), 1.0)
        metrics = {"span_loss": float(sums["loss_sum"]) / count,
                   "start_accuracy": float(sums["start_correct"]) / count,
                   "end_accuracy": float(sums["end_correct"]) / count}
        if collected and self.evaluation is not None:
            dataset, features, contexts = self.evaluation
            rows = feature_rows(collected, features)
            answers, null_odds = predict_answers(
                features, collected["start_logits"][rows], collected["end_logits"][rows],
                contexts, self.n_best, self.max_answer_length, None)
            if self.version == 1:
                metrics.update(squad_eval.evaluate_v1(dataset, answers))
            else:
                answers = official_metrics(metrics, dataset, answers, null_odds)
            self.last_predictions = answers
        return metrics

    def progress(self, metrics):
        return (f"span loss {metrics['span_loss']:.4f} | start acc "
                f"{metrics['start_accuracy']:.3f} | end acc {metrics['end_accuracy']:.3f}")


V2_BEAM_OUTPUTS = ("start_top_log_probs", "start_top_index", "end_top_log_probs",
                   "end_top_index", "cls_logits")


class SquadV2Task(SquadTask):
    """SQuAD 2.0 with the official ALBERT answer-class model (`AlbertSquadV2`): loss = mean of
    the start and end cross entropies (the end conditioned on the true start) + 0.5 x the
    answer-class cross entropy (target: no answer in this window, i.e. the label is [CLS]), as
    official `create_v2_model`; evaluation decodes the beam (`predict_answers_v2`) and scores
    with the official v2.0 evaluator over the null scores (`cls_logits`)."""

    model_inputs = ("input_ids", "input_mask", "segment_ids", START_POSITIONS)
    term_names = ("loss_sum", "count", "start_correct", "end_correct", "class_correct")
    span_scores = "log_probs"  # outputs "start_log_probs" and "end_log_probs"

    def __init__(self, albert_config, max_seq_length: int, max_answer_length: int = 30,
                 null_threshold: float | None = None, start_n_top: int = 5,
                 end_n_top: int = 5, dropout_prob: float = 0.1):
        super().__init__(albert_config, max_seq_length, max_answer_length=max_answer_length,
                         version=2, null_threshold=null_threshold)
        self.name = "squad_v2_answer_class"
        self.start_n_top, self.end_n_top, self.dropout_prob = start_n_top, end_n_top, \
            dropout_prob
        self.metric_names = self.metric_names + ("class_accuracy",)

    def build_model(self, dtype=None, performance=None):
        return AlbertSquadV2(self.albert_config, self.start_n_top, self.end_n_top,
                             self.dropout_prob, dtype=dtype, performance=performance)

    def span_loss(self, scores, labels):
        """The negative log-probability of the true positions (the scores are
        log-probabilities; the end's conditioned on the true start)."""
        return -tf.gather(scores, labels[:, None], axis=1, batch_dims=1)[:, 0]

    def loss_terms(self, outputs, features):
        terms = super().loss_terms(outputs, features)
        real = _real_examples(features)
        impossible = tf.cast(tf.equal(tf.reshape(features[START_POSITIONS], [-1]), 0),
                             tf.float32)
        logits = tf.cast(outputs["cls_logits"], tf.float32)
        cls_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=impossible, logits=logits)
        terms["loss_sum"] += 0.5 * tf.reduce_sum(real * cls_loss)
        terms["class_correct"] = tf.reduce_sum(real * tf.cast(
            tf.equal(tf.cast(logits > 0, tf.float32), impossible), tf.float32))
        return terms

    def eval_outputs(self, outputs, features):
        collected = {name: tf.cast(outputs[name], tf.float32) for name in V2_BEAM_OUTPUTS}
        collected.update(unique_ids=tf.reshape(features[UNIQUE_IDS], [-1]),
                         real=_real_examples(features))
        return collected

    def metrics(self, sums, collected=None):
        count = max(float(sums["count"]), 1.0)
        metrics = {"span_loss": float(sums["loss_sum"]) / count,
                   "start_accuracy": float(sums["start_correct"]) / count,
                   "end_accuracy": float(sums["end_correct"]) / count,
                   "class_accuracy": float(sums.get("class_correct", 0.0)) / count}
        if collected and self.evaluation is not None:
            dataset, features, contexts = self.evaluation
            rows = feature_rows(collected, features)
            texts, null_odds = predict_answers_v2(
                features, {name: collected[name][rows] for name in V2_BEAM_OUTPUTS},
                contexts, self.max_answer_length, None)
            self.last_predictions = official_metrics(metrics, dataset, texts, null_odds)
        return metrics
