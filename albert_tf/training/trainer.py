"""The replicated step: the model and optimizer built in the strategy's scope
(`build_model_and_optimizer`), one step split into micro-batches, computed, all-reduced,
clipped, gated on finiteness and applied (`Trainer`). The evaluation pass is
`albert_tf.training.evaluator.Evaluator`'s.

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
import tensorflow as tf

from albert_tf.input_pipeline import stream_dataset
from albert_tf.models.backbone import Performance
from albert_tf.training.evaluator import Evaluator
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


def build_model_and_optimizer(task, cfg, strategy, seed: int | None):
    """The task's model (`cfg.mixed_precision`'s dtype policy, `performance_of(cfg)`) and the
    optimizer of `cfg` (`create_optimizer`) with its slots, built in `strategy`'s scope (Keras 3
    under tf.distribute: the slots too); initialization seeded by `seed` (None: unseeded)."""
    if seed is not None:  # initialization (and, in the input pipeline, shuffling)
        keras.utils.set_random_seed(seed)
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    with strategy.scope():
        model = task.build_model(dtype=PRECISIONS[cfg.mixed_precision],
                                 performance=performance_of(cfg, tpu))
        optimizer = create_optimizer(
            cfg.optimizer, cfg.learning_rate, cfg.num_train_steps, cfg.num_warmup_steps,
            cfg.poly_power, cfg.start_warmup_step, cfg.weight_decay_rate)
        optimizer.build(model.trainable_variables)
    return model, optimizer


def _built_in_scope(strategy, variables) -> bool:
    """Whether every one of `variables` (Keras or tf) was created in `strategy`'s scope."""
    return all(strategy.extended.variable_created_in_scope(getattr(v, "value", v))
               for v in variables)


class Trainer:
    """Trains `model` with `optimizer` (both built in `strategy`'s scope:
    `build_model_and_optimizer`) on `task`: the compiled loop of steps, the (float16) loss
    scale, the finiteness gate and the checkpoint of them all; the evaluation pass is the
    `Evaluator`'s.

    What the `Controller` uses: `step`, `iterator_at(plan, step)`, `train(iterator, n)`,
    `failed_step()`, `set_back(step)`, `weights_finite()`, `largest_weight()`,
    `progress(metrics)`, `cluster_resolver` and `in_cluster`; the actions use `evaluate()`,
    `task` and `model`; the run saves `checkpoint`."""

    def __init__(self, task, cfg, strategy, model, optimizer, seed: int | None = None,
                 num_workers: int = 1, worker_index: int = 0):
        for what, variables in (("model", model.weights), ("optimizer", optimizer.variables)):
            if not variables or not _built_in_scope(strategy, variables):
                raise ValueError(f"The Trainer's {what} must be built (its variables created) "
                                 f"inside the scope of the strategy it trains under; build "
                                 "both with build_model_and_optimizer(task, cfg, strategy, "
                                 "seed).")
        self.task, self.cfg, self.strategy = task, cfg, strategy
        self.model, self.optimizer = model, optimizer
        self.replicas = strategy.num_replicas_in_sync
        self.tpu = isinstance(strategy, tf.distribute.TPUStrategy)
        with strategy.scope():
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
        self.evaluator = Evaluator(task, cfg, strategy, model, num_workers, worker_index)
        self.train_loop = None
        self._all_finite = None

    # -----------------------------------------------------------------------------------------
    # What the Controller uses.
    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    @property
    def in_cluster(self) -> bool:
        """Whether the strategy spans workers or a TPU system (the preemption handler's)."""
        return isinstance(self.strategy, (tf.distribute.MultiWorkerMirroredStrategy,
                                          tf.distribute.TPUStrategy))

    @property
    def cluster_resolver(self):
        """The cluster's resolver (`in_cluster` strategies that have one), else None."""
        return getattr(self.strategy, "cluster_resolver", None) if self.in_cluster else None

    def iterator_at(self, plan, step: int):
        """The distributed training iterator of the input `plan` at `step`."""
        options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
        dataset = self.strategy.distribute_datasets_from_function(
            lambda context: stream_dataset(plan, step, self.task.schema(), context), options)
        return iter(dataset)

    def train(self, iterator, num_steps: int) -> dict:
        """`num_steps` steps from `iterator` in one call (`build_train_loop`): the task's
        training metrics of them (`Task.metrics`), `loss` and `grad_norm` of the last step,
        the `learning_rate`, and under float16 the `loss_scale` and the `skipped_steps`
        since the run began."""
        if self.train_loop is None:
            self.build_train_loop()
        sums, loss, norm = self.train_loop(iterator, tf.constant(num_steps, tf.int32))
        rate = self.optimizer.learning_rate
        logs = dict(loss=float(loss), grad_norm=float(norm),
                    learning_rate=float(rate.numpy() if hasattr(rate, "numpy") else rate),
                    **self.task.metrics({k: float(v) for k, v in sums.items()}))
        if self.loss_scale is not None:
            logs.update(loss_scale=float(self.loss_scale.scale.numpy()),
                        skipped_steps=int(self.loss_scale.skipped_steps.numpy()))
        return logs

    def progress(self, metrics: dict) -> str:
        """The task's training metrics as the progress line shows them (`Task.progress`)."""
        return self.task.progress(metrics)

    def failed_step(self) -> int | None:
        """None while every step was applied; after a non-finite step closed the update gate,
        that step (it and the loop's later steps were not applied)."""
        if float(self.optimizer.update_gate.numpy()) >= 0.5:
            return None
        return int(self.bad_step.numpy())

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

    def largest_weight(self) -> tuple[float, str]:
        """(largest absolute value, the weight's path) over the model's weights."""
        return max((float(tf.reduce_max(tf.abs(v))), v.path) for v in self.model.weights)

    def set_back(self, good_step: int) -> None:
        """After a failure inside a loop of steps: the model is at `good_step` (a failed read
        applies nothing; after a non-finite step the gate stays closed), so only the step
        counter and the gate are set back."""
        self.optimizer.iterations.assign(good_step)
        self.optimizer.update_gate.assign(1.0)

    def evaluate(self) -> dict:
        """The task's metrics on the evaluation records (`Evaluator.evaluate`)."""
        return self.evaluator.evaluate()

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
