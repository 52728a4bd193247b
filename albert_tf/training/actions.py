"""What a run does at its checkpoints and at its end, besides training: evaluate and keep the
best checkpoint (`EvaluateAndKeepBest`, the official `model.ckpt-best`), and export
(`export_models`, the one path every command's SavedModels take: pretraining's final and best
models, a fine-tuning run's chosen one).
"""

from __future__ import annotations

import tensorflow as tf


class EvaluateAndKeepBest:
    """After each checkpoint: the task's metrics (`trainer.evaluate()`) to TensorBoard, to
    `eval_results_step_N.json` (`RunDirectory.write_eval`), and the model to `best/` when its
    `task.best_metric` beats the best so far. Only the chief writes; every worker
    evaluates (the evaluation is collective)."""

    def __init__(self, trainer, directory, log=print):
        self.trainer, self.directory, self.log = trainer, directory, log
        self.last = None  # (step, metrics) of the latest evaluation

    @property
    def writer(self):
        return self.directory.writer("eval")

    def __call__(self, step: int, resumed: bool = False) -> None:
        if resumed and self.directory.has_eval(step):
            return  # a resumed run evaluates only a checkpoint the stopped run did not
        self.last = (step, self.trainer.evaluate())
        self.write(step, self.last[1])
        self.writer.flush()

    def metrics_at(self, step: int) -> dict:
        """The evaluation at `step`: the one just run there, or a new one."""
        if self.last is not None and self.last[0] == step:
            return self.last[1]
        return self.trainer.evaluate()

    def write(self, step: int, metrics: dict, keep_best: bool = True) -> None:
        """The evaluation at `step` to TensorBoard and `eval_results_step_N.json`, and the
        model to `best/` where it beats the best so far and `keep_best` (False: the model
        evaluated is no checkpoint of the run, an `--init_checkpoint` evaluated alone)."""
        task, directory = self.trainer.task, self.directory
        metrics = dict(metrics, global_step=step)
        if not directory.is_chief:
            return
        with self.writer.as_default(step=step):
            for name in task.metric_names:
                tf.summary.scalar(name, metrics[name])
        best = directory.best_metrics()
        key = task.best_metric
        if keep_best and (best is None or metrics[key] > best[key]):
            directory.write_best(self.trainer.model, metrics)
        directory.write_eval(step, metrics)  # last: the evaluation is complete
        self.log(f"eval at step {step}: " + ", ".join(
            f"{k} {metrics[k]:.4f}" for k in task.metric_names))


def best_model(task, directory):
    """The model of `best/ckpt-best` as a plain (host, float32) model, or None."""
    prefix = directory.best_prefix()
    if not tf.io.gfile.exists(prefix + ".index"):
        return None
    with tf.device("/cpu:0"):
        model = task.build_model()
    tf.train.Checkpoint(model=model).read(prefix).assert_existing_objects_matched()
    return model


def export_models(exporter, models) -> dict:
    """The one export path: `exporter(model, which, step)`
    (`albert_tf.export.run_exporter.make_exporter`) for each (model, which, step) of `models`;
    returns {which: where it wrote}. The caller runs it on the chief only (the loop writes no SavedModel
    itself: the library floors do not import `albert_tf.export`)."""
    return {which: exporter(model, which, step) for model, which, step in models}
