"""The replicated step: the model and optimizer built in the strategy's scope, one step split
into micro-batches, computed, all-reduced, clipped, gated on finiteness and applied; and the
evaluation pass.

One step, per replica: forward and backward over `grad_accum_steps` micro-batches, losses
normalised by the task's *global* totals (pretraining: the all-reduced masked-LM weight count
and the global batch size), so the per-replica losses sum to exactly the single-device loss;
gradients summed over micro-batches and replicas; float16's loss scale removed; global norm;
clipping at `clip_norm`; a finiteness gate (a non-finite step is not applied); the optimizer
update. `iterations_per_loop` steps run inside one `tf.function` call (TPU's
`iterations_per_loop`). What runs the steps, when, is `albert_tf.training.controller.Controller`.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from albert_tf.models.backbone import Performance
from albert_tf.input_pipeline import list_files, ordered_dataset, record_counts
from albert_tf.training.loss_scale import DynamicLossScale
from albert_tf.training.optimization import create_optimizer

SUM = tf.distribute.ReduceOp.SUM
# --mixed_precision: the Keras dtype policy of each (float16 adds the loss scale).
PRECISIONS = {"float32": None, "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def performance_of(cfg, tpu: bool = False) -> Performance:
    """The model's performance switches (`albert_tf.models.backbone.Performance`) of a
    `TrainingConfig`: padding removal only where shapes may vary (not under TPUStrategy, not
    with XLA)."""
    return Performance(remove_padding=cfg.remove_padding and not cfg.jit_compile and not tpu,
                       recompute=cfg.recompute, use_einsum=cfg.use_einsum)


def dropout_state(model) -> tf.Module:
    """A checkpointable holder of `model`'s seed-generator states (its dropout layers'), in
    model order; empty without dropout."""
    holder = tf.Module()
    holder.seeds = [v for v in model.variables if v.path.endswith("seed_generator_state")]
    return holder


def has_dropout_state(prefix: str) -> bool:
    """Whether the checkpoint `prefix` holds the dropout state (`dropout_state`)."""
    return any(name.startswith("dropout_state/") for name, _ in tf.train.list_variables(prefix))


class Trainer:
    """The model, optimizer and (float16) loss scale of `task` in `strategy`'s scope, and the
    compiled loop of training steps and the evaluation step over them."""

    def __init__(self, task, cfg, strategy, seed: int | None, num_workers: int = 1,
                 worker_index: int = 0):
        self.task, self.cfg, self.strategy = task, cfg, strategy
        self.replicas = strategy.num_replicas_in_sync
        self.num_workers, self.worker_index = num_workers, worker_index
        self.local_replicas = self.replicas // num_workers
        self.tpu = isinstance(strategy, tf.distribute.TPUStrategy)
        if seed is not None:  # initialization (and, in the input pipeline, shuffling)
            keras.utils.set_random_seed(seed)
        with strategy.scope():
            self.model = task.build_model(dtype=PRECISIONS[cfg.mixed_precision],
                                          performance=performance_of(cfg, self.tpu))
            self.optimizer = create_optimizer(
                cfg.optimizer, cfg.learning_rate, cfg.num_train_steps, cfg.num_warmup_steps,
                cfg.poly_power, cfg.start_warmup_step, cfg.weight_decay_rate)
            # Keras 3 under tf.distribute: slots must be built inside the scope.
            self.optimizer.build(self.model.trainable_variables)
            self.bad_step = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            # float16: the loss scale (saved in the checkpoint; `albert_tf.training.loss_scale`).
            self.loss_scale = (DynamicLossScale() if cfg.mixed_precision == "float16"
                               else None)
            # Data seed: every worker must use the same. A variable created in the scope starts
            # with the chief's value on every worker.
            drawn = seed if seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
            self.data_seed = int(tf.Variable(drawn, dtype=tf.int64, trainable=False).numpy())
        saved = {} if self.loss_scale is None else {"loss_scale": self.loss_scale}
        # Dropout's random state: each dropout layer's seed generator (Keras does not track it
        # for checkpoints), so a resumed run draws the masks the uninterrupted run draws.
        self.dropout_state = dropout_state(self.model)
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                              dropout_state=self.dropout_state, **saved)
        # a checkpoint written before the dropout state was saved resumes without it
        self.checkpoint_without_dropout_state = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, **saved)
        self.train_loop = None
        self._eval_step = None
        self._all_finite = None

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def weights_finite(self) -> bool:
        """Whether every weight of the model is finite (reduced where the weights live)."""
        if self._all_finite is None:
            variables = self.model.weights

            @tf.function(autograph=False)
            def all_finite():
                return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v))
                                               for v in variables]))

            self._all_finite = all_finite
        return bool(self._all_finite().numpy())

    def gate_open(self) -> bool:
        """False once a non-finite step closed the update gate (`bad_step` names it)."""
        return float(self.optimizer.update_gate.numpy()) >= 0.5

    def set_back(self, good_step: int) -> None:
        """After a failure inside a loop of steps: the model is at `good_step` (a failed read
        applies nothing; after a non-finite step the gate stays closed), so only the step
        counter and the gate are set back."""
        self.optimizer.iterations.assign(good_step)
        self.optimizer.update_gate.assign(1.0)

    # -----------------------------------------------------------------------------------------
    def _split(self, features):
        k = self.cfg.grad_accum_steps
        if k == 1:
            return [features]
        parts = {name: tf.split(t, k, axis=0) for name, t in features.items()}
        return [{name: parts[name][i] for name in features} for i in range(k)]

    def _compute(self, features, normalizers):
        """Forward/backward of one micro-batch; loss normalised by the step's global totals."""
        inputs = {name: features[name] for name in self.task.model_inputs}
        with tf.GradientTape() as tape:
            outputs = self.model(inputs, training=True)
            terms = self.task.loss_terms(outputs, features)
            loss = self.task.loss(terms, normalizers)
            scaled = loss if self.loss_scale is None else self.loss_scale.scale_loss(loss)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        # Embedding gradients come as IndexedSlices; dense tensors sum and all-reduce simply.
        # A weight off the loss path (the pooler under a span head) gets a zero gradient.
        grads = [tf.zeros_like(v) if g is None else
                 tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g, v in zip(grads, self.model.trainable_variables)]
        return grads, terms, loss

    def _accumulate(self, features, normalizers):
        """Gradients, loss terms and loss summed over the step's micro-batches, one at a
        time."""
        grads, terms, loss = None, None, 0.0
        for micro in self._split(features):
            deps = [] if grads is None else [g for g in grads if g is not None]
            with tf.control_dependencies(deps):  # one micro-batch at a time
                g, t, step_loss = self._compute_fn(micro, normalizers)
            if grads is None:
                grads, terms = list(g), dict(t)
            else:
                grads = [a + b for a, b in zip(grads, g)]
                terms = {name: terms[name] + t[name] for name in terms}
            loss += step_loss
        return grads, terms, loss

    def _replica_step(self, features):
        cfg = self.cfg
        ctx = tf.distribute.get_replica_context()
        normalizers = self.task.normalizers(features, cfg.train_batch_size)
        grads, terms, loss = self._accumulate(features, normalizers)
        grads = ctx.all_reduce(SUM, grads)
        total_loss = ctx.all_reduce(SUM, loss)
        if self.loss_scale is not None:  # unscaled before clipping: the float32 gradients
            grads = self.loss_scale.unscale(grads)
        grad_norm = tf.linalg.global_norm(grads)
        grads, _ = tf.clip_by_global_norm(grads, cfg.clip_norm, use_norm=grad_norm)
        # The gate covers the updated weights too (a learning rate of nan or inf, an update
        # that overflows): a step is applied only when everything it writes is finite.
        finite = (tf.math.is_finite(grad_norm) & tf.math.is_finite(total_loss)
                  & self.optimizer.updates_finite(grads, self.model.trainable_variables))
        # float16: an overflow of the loss scale skips this step only
        # (`albert_tf.training.loss_scale`); any other non-finite step closes the gate and stops the
        # run, as in float32.
        skip = (tf.constant(False) if self.loss_scale is None
                else self.loss_scale.overflowed(finite))
        gate = self.optimizer.update_gate
        was_open = gate > 0.5
        stop = ~finite & ~skip
        self.bad_step.assign(tf.where(was_open & stop, self.optimizer.iterations,
                                      self.bad_step))
        gate.assign(tf.where(stop, tf.zeros_like(gate), gate))
        if self.loss_scale is None:
            self.optimizer.apply(grads, self.model.trainable_variables)
        else:
            kept = tf.identity(gate.value)
            gate.assign(tf.where(skip, tf.zeros_like(kept), kept))  # this step only
            self.optimizer.apply(grads, self.model.trainable_variables)
            gate.assign(kept)
            self.loss_scale.update(finite)
        return terms, total_loss, grad_norm

    def build_train_loop(self):
        """train_loop(iterator, num_steps) -> (summed loss terms, last loss, last gradient
        norm): `num_steps` steps in one tf.function call."""
        single_device = self.replicas == 1 and not self.tpu
        jit = self.cfg.jit_compile and not self.tpu
        # XLA: on one device the whole step compiles (the TPU proxy); across replicas the
        # forward/backward compiles and the all-reduce and update run outside it.
        self._compute_fn = (tf.function(self._compute, jit_compile=True, autograph=False)
                            if jit and not single_device else self._compute)
        replica_step = (tf.function(self._replica_step, jit_compile=True,
                                    autograph=False) if jit and single_device
                        else self._replica_step)
        # AutoGraph converts the loop below only: the step branches on Python values alone
        # (Keras' layers and optimizers are never converted; converting the step's own, the
        # task's and the loss code cost about a CPU second in every process).
        replica_step = tf.autograph.experimental.do_not_convert(replica_step)
        strategy, names = self.strategy, self.task.term_names

        @tf.function
        def train_loop(iterator, num_steps):
            sums = {name: tf.constant(0.0) for name in names}
            last_loss, last_norm = tf.constant(0.0), tf.constant(0.0)
            for _ in tf.range(num_steps):
                batch = next(iterator)
                terms, loss, norm = strategy.run(replica_step, args=(batch,))
                sums = {name: sums[name] + strategy.reduce(SUM, terms[name], axis=None)
                        for name in names}
                last_loss = strategy.experimental_local_results(loss)[0]
                last_norm = strategy.experimental_local_results(norm)[0]
            return sums, last_loss, last_norm

        self.train_loop = train_loop
        return train_loop

    # -----------------------------------------------------------------------------------------
    def _eval_dataset(self):
        """The evaluation pass: the evaluation records in order, each worker taking every
        `num_workers`-th record (so one evaluation file serves any number of workers), batches
        of its share, and every worker the same number of batches (global records //
        `eval_batch_size`: the single-device pass; fine-tuning files are padded to whole
        batches)."""
        cfg = self.cfg
        context = None
        if self.num_workers > 1:
            context = tf.distribute.InputContext(
                num_input_pipelines=self.num_workers, input_pipeline_id=self.worker_index,
                num_replicas_in_sync=self.num_workers)  # -> this worker's share of the batch
        files = list_files(cfg.eval_input_file or cfg.input_file)
        if getattr(self, "_eval_files", None) != files:
            self._eval_schema, sidecars = self.task.eval_schema(files)
            self._eval_files = files
            self._eval_batches = sum(record_counts(files, sidecars)) // cfg.eval_batch_size
        return ordered_dataset(files, cfg.eval_batch_size, self._eval_schema, context,
                               shard_records=True, num_batches=self._eval_batches)

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

    def _build_eval_step(self):
        task, strategy = self.task, self.strategy

        def replica_eval(features):
            inputs = {name: features[name] for name in task.model_inputs}
            outputs = self.model(inputs, training=False)
            return task.loss_terms(outputs, features), task.eval_outputs(outputs, features)

        @tf.function(autograph=False)  # Python control flow only
        def eval_step(batch):
            terms, per_example = strategy.run(replica_eval, args=(self._distribute(batch),))
            sums = {k: strategy.reduce(SUM, v, axis=None) for k, v in terms.items()}
            gathered = {k: strategy.gather(v, axis=0) for k, v in per_example.items()}
            return sums, gathered

        return eval_step

    def evaluate(self) -> dict:
        """The task's metrics over at most `max_eval_steps` batches."""
        task = self.task
        if self._eval_step is None:
            self._eval_step = self._build_eval_step()
        sums = {name: 0.0 for name in task.term_names}
        collected = {}
        steps = 0
        for batch in self._eval_dataset():
            if steps >= self.cfg.max_eval_steps:
                break
            batch_sums, per_example = self._eval_step(batch)
            for name, value in batch_sums.items():
                sums[name] += float(value)
            for name, value in per_example.items():
                collected.setdefault(name, []).append(value.numpy())
            steps += 1
        collected = {name: np.concatenate(parts) for name, parts in collected.items()}
        metrics = task.metrics(sums, collected)
        metrics.update(eval_steps=steps, examples=int(sums[task.examples_term]))
        return metrics
