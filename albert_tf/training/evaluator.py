"""The evaluation pass of the loop: the task's metrics of a model over the evaluation records,
computed by every replica of the strategy and reduced (`Evaluator.evaluate`).

Each worker reads every `num_workers`-th record of the evaluation files (one evaluation file
serves any number of workers) and every worker runs the same number of batches (global records
// `eval_batch_size`: the single-device pass; fine-tuning files are padded to whole batches).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from albert_tf.input_pipeline import list_files, ordered_dataset, record_counts

SUM = tf.distribute.ReduceOp.SUM


class Evaluator:
    """The evaluation of `model` (built in `strategy`'s scope) on `task`'s evaluation records
    (`cfg.eval_input_file`, else `cfg.input_file`), at most `cfg.max_eval_steps` batches of
    `cfg.eval_batch_size`."""

    def __init__(self, task, cfg, strategy, model, num_workers: int = 1,
                 worker_index: int = 0):
        self.task, self.cfg, self.strategy, self.model = task, cfg, strategy, model
        self.num_workers, self.worker_index = num_workers, worker_index
        self.replicas = strategy.num_replicas_in_sync
        self.local_replicas = self.replicas // num_workers
        self._step = None
        self._files = None  # the files the schema and batch count below are of
        self._schema, self._batches = None, 0

    def dataset(self) -> tf.data.Dataset:
        """This worker's evaluation batches, in order."""
        cfg = self.cfg
        context = None
        if self.num_workers > 1:
            context = tf.distribute.InputContext(
                num_input_pipelines=self.num_workers, input_pipeline_id=self.worker_index,
                num_replicas_in_sync=self.num_workers)  # -> this worker's share of the batch
        files = list_files(cfg.eval_input_file or cfg.input_file)
        if self._files != files:
            self._schema, sidecars = self.task.eval_schema(files)
            self._files = files
            self._batches = sum(record_counts(files, sidecars)) // cfg.eval_batch_size
        return ordered_dataset(files, cfg.eval_batch_size, self._schema, context,
                               shard_records=True, num_batches=self._batches)

    def _distribute(self, batch):
        """A worker's evaluation batch -> per-replica values: local replica i takes the i-th
        slice."""
        if self.replicas == 1:
            return batch
        k = self.local_replicas
        parts = {name: tf.split(t, k, axis=0) for name, t in batch.items()}
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: {name: parts[name][ctx.replica_id_in_sync_group % k]
                         for name in parts})

    def _build_step(self):
        task, strategy, model = self.task, self.strategy, self.model

        def replica_eval(features):
            inputs = {name: features[name] for name in task.model_inputs}
            outputs = model(inputs, training=False)
            return task.loss_terms(outputs, features), task.eval_outputs(outputs, features)

        @tf.function(autograph=False)  # Python control flow only
        def eval_step(batch):
            terms, per_example = strategy.run(replica_eval, args=(self._distribute(batch),))
            sums = {k: strategy.reduce(SUM, v, axis=None) for k, v in terms.items()}
            gathered = {k: strategy.gather(v, axis=0) for k, v in per_example.items()}
            return sums, gathered

        return eval_step

    def evaluate(self) -> dict:
        """The task's metrics over at most `max_eval_steps` batches, with `eval_steps` (the
        batches run) and `examples`."""
        task = self.task
        if self._step is None:
            self._step = self._build_step()
        sums = {name: 0.0 for name in task.term_names}
        collected = {}
        steps = 0
        for batch in self.dataset():
            if steps >= self.cfg.max_eval_steps:
                break
            batch_sums, per_example = self._step(batch)
            for name, value in batch_sums.items():
                sums[name] += float(value)
            for name, value in per_example.items():
                collected.setdefault(name, []).append(value.numpy())
            steps += 1
        collected = {name: np.concatenate(parts) for name, parts in collected.items()}
        metrics = task.metrics(sums, collected)
        metrics.update(eval_steps=steps, examples=int(sums[task.examples_term]))
        return metrics
