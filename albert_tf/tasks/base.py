"""What a task plugs into the one training loop (`albert_tf.training.train_lib.TrainingRun`).

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

`LabelledTask` is fine-tuning on labelled records (GLUE, RACE); `albert_tf.tasks.pretraining.
PretrainingTask` is ALBERT pretraining (masked LM + sentence order).

A task's methods run inside the traced training, evaluation and prediction steps without
AutoGraph (as Keras 3 traces its own `train_step`): they branch on Python values only; a choice
that depends on a tensor's value is a tensor op (`tf.where`, `tf.cond`), as everywhere in the
model. A Python `if`, `while` or `assert` on a tensor raises `OperatorNotAllowedInGraphError`
when the step is traced, and `print` prints once, at tracing (`tf.print` prints every step).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.checkpoints import initialize_backbone, initialize_from_checkpoint
from albert_tf.input_pipeline import DataMismatchError, ordered_dataset
from albert_tf.records import read_sidecar

SUM = tf.distribute.ReduceOp.SUM


class Task:
    """The interface; see the module docstring. Subclasses set the class attributes."""

    name = "task"
    term_names: tuple = ()
    metric_names: tuple = ()
    loss_name = "cross_entropy"  # the metric that is the training loss (not repeated in progress)
    best_metric = ""
    examples_term = ""
    model_inputs: tuple = ()
    # `initialize` fills the whole model (heads too), so an --init_checkpoint is a model to
    # evaluate alone (--do_eval without --do_train); a fine-tuning task's head starts new.
    init_checkpoint_is_the_model = True

    def build_model(self, dtype=None, performance=None):
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
        """The task's figures on a training progress line, from `metrics` (`metrics(sums)` of
        the loop): each once, the loss left to the line's own `loss`."""
        return " | ".join(f"{name} {value:.4f}" for name, value in metrics.items()
                          if isinstance(value, float) and name != self.loss_name)

    def initialize(self, model, path: str, init_from_group0: bool = False) -> dict:
        """`--init_checkpoint`: fills `model` strictly by official weight names."""
        return initialize_from_checkpoint(model, path, init_from_group0=init_from_group0)

    def predict_outputs(self, model, path: str, batch_size: int, names=("logits",),
                        drop_remainder: bool = True) -> dict:
        """{output name: float32 array} of `model` over the records of `path` (comma-separated
        files) in file order; where the schema marks real examples (`is_real_example`), the
        padding examples are dropped."""
        schema = self.schema()

        @tf.function(autograph=False)  # Python control flow only
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
    init_checkpoint_is_the_model = False  # the backbone only: the head is new
    writer = ""  # the function that writes the task's records (named when a file does not fit)

    def expected_sidecar(self) -> dict:
        """{sidecar key: the value this run needs, or a tuple of the values it accepts}."""
        raise NotImplementedError

    def check_files(self, files):
        """Raises `DataMismatchError` for a file without a sidecar or written for another task,
        sequence length or vocabulary; returns {path: sidecar}."""
        expected, found = self.expected_sidecar(), {}
        for path in files:
            meta = read_sidecar(path)
            if meta is None:
                raise DataMismatchError(f"{path} has no sidecar; write the records with "
                                        f"{self.writer}.")
            wrong = {key: meta.get(key) for key, want in expected.items()
                     if meta.get(key) not in (want if isinstance(want, tuple) else (want,))}
            if wrong:
                raise DataMismatchError(
                    f"{path} was written with {wrong}; this run needs "
                    f"{ {k: expected[k] for k in wrong} } (write the records again with "
                    f"{self.writer}, or change the flags).")
            found[path] = meta
        return found

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
