"""ALBERT's optimizers and learning-rate schedule (official `lamb_optimizer.py`,
`optimization.py`).

LAMB, per variable w with gradient g (no bias correction):

    m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
    u = m / (sqrt(v) + eps)          u += wd * w           (unless w is excluded from decay)
    r = ||w|| / ||u|| if both > 0 else 1                   (1 if w is excluded from adaptation)
    w = w - lr * r * u

AdamW is the same without the trust ratio r (BERT's `AdamWeightDecayOptimizer`). Excluded by
name (substring): "LayerNorm", "layer_norm", "bias" -- from decay and, by default, from
adaptation. Keras 3's built-in `Lamb` differs on every point (no exclusions, decay outside the
trust ratio, bias correction).

Gradients reach these optimizers already summed over replicas and clipped by the training loop
(global-norm clipping must see the summed gradient; Keras would clip each replica's share), so
the optimizer does no all-reduce of its own. An `update_gate` variable lets the loop turn a step
into a no-op (weights and slots unchanged) when its loss or gradient is not finite.
"""

from __future__ import annotations

import re

import keras
import tensorflow as tf

from albert_tf.configs.definitions import PRETRAINING_DEFAULTS, SETTINGS

DEFAULT_EXCLUDE = ("LayerNorm", "layer_norm", "bias")


@keras.saving.register_keras_serializable(package="albert_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then polynomial decay to `end_learning_rate` (official schedule).

    lr(step) = learning_rate * (step - start_warmup_step) / num_warmup_steps while
    step - start_warmup_step < num_warmup_steps (floored at 0: the official formula goes
    negative before start_warmup_step); else
    (learning_rate - end) * (1 - min(step, num_train_steps) / num_train_steps) ** poly_power + end.
    Note the decay counts from step 0, not from the end of warmup, as in the official code.
    """

    def __init__(self, learning_rate, num_train_steps, num_warmup_steps=0, poly_power=1.0,
                 start_warmup_step=0, end_learning_rate=0.0):
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive; got {num_train_steps}")
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.poly_power = poly_power
        self.start_warmup_step = start_warmup_step
        self.end_learning_rate = end_learning_rate

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        progress = tf.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
        decayed = ((self.learning_rate - self.end_learning_rate)
                   * tf.pow(1.0 - progress, self.poly_power) + self.end_learning_rate)
        if not self.num_warmup_steps:
            return decayed
        warm_step = step - float(self.start_warmup_step)
        warmup = self.learning_rate * tf.maximum(warm_step, 0.0) / float(self.num_warmup_steps)
        return tf.where(warm_step < float(self.num_warmup_steps), warmup, decayed)

    def get_config(self):
        return dict(learning_rate=self.learning_rate, num_train_steps=self.num_train_steps,
                    num_warmup_steps=self.num_warmup_steps, poly_power=self.poly_power,
                    start_warmup_step=self.start_warmup_step,
                    end_learning_rate=self.end_learning_rate)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertOptimizer(keras.optimizers.Optimizer):
    """LAMB (`layer_adaptation=True`, ALBERT's default) or AdamW (`layer_adaptation=False`).

    Args:
        learning_rate: float or schedule.
        weight_decay_rate: decoupled decay added to the update (0.01 in ALBERT).
        beta_1, beta_2, epsilon: moment decay rates and denominator epsilon (1e-6).
        exclude_from_weight_decay: name substrings (regexes) of variables not decayed.
        exclude_from_layer_adaptation: likewise for the trust ratio; defaults to
            `exclude_from_weight_decay`, as in the official optimizer.
        layer_adaptation: True for LAMB, False for AdamW.
    """

    def __init__(self, learning_rate=PRETRAINING_DEFAULTS["learning_rate"],
                 weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=DEFAULT_EXCLUDE, exclude_from_layer_adaptation=None,
                 layer_adaptation=True, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name or (
            "lamb" if layer_adaptation else "adamw"), **kwargs)
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.exclude_from_layer_adaptation = tuple(
            self.exclude_from_weight_decay if exclude_from_layer_adaptation is None
            else exclude_from_layer_adaptation)
        self.layer_adaptation = layer_adaptation

    @staticmethod
    def _matches(name, patterns):
        return any(re.search(p, name) for p in patterns)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m, self._v, self._decay, self._adapt = [], [], [], []
        for var in var_list:
            self._m.append(self.add_variable_from_reference(var, "m"))
            self._v.append(self.add_variable_from_reference(var, "v"))
            name = getattr(var, "path", var.name)
            self._decay.append(bool(self.weight_decay_rate)
                               and not self._matches(name, self.exclude_from_weight_decay))
            self._adapt.append(self.layer_adaptation
                               and not self._matches(name, self.exclude_from_layer_adaptation))
        self.update_gate = self.add_variable(
            shape=(), initializer="ones", dtype="float32", name="update_gate",
            aggregation="only_first_replica")

    def decayed_and_adapted(self, variables):
        """[(path, decayed, adapted)] for inspection and tests."""
        return [(getattr(v, "path", v.name), self._decay[self._get_variable_index(v)],
                 self._adapt[self._get_variable_index(v)]) for v in variables]

    def _new_values(self, gradient, variable, learning_rate):
        """(m, v, w) after one step with `gradient` (nothing assigned)."""
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        w = variable.value if isinstance(variable, keras.Variable) else variable
        dtype = w.dtype
        g = tf.cast(gradient, dtype)
        lr = tf.cast(learning_rate, dtype)
        m_new = self.beta_1 * m + (1.0 - self.beta_1) * g
        v_new = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(g)
        update = m_new / (tf.sqrt(v_new) + self.epsilon)
        if self._decay[index]:
            update += self.weight_decay_rate * w
        ratio = tf.constant(1.0, dtype)
        if self._adapt[index]:
            w_norm = tf.norm(w)
            u_norm = tf.norm(update)
            ratio = tf.where(w_norm > 0.0,
                             tf.where(u_norm > 0.0, w_norm / tf.where(u_norm > 0.0, u_norm, 1.0),
                                      1.0), 1.0)
        return m_new, v_new, w - ratio * lr * update

    def updates_finite(self, gradients, variables) -> tf.Tensor:
        """Whether the step with `gradients` leaves every weight finite: the finiteness gate
        checks the result, not only the loss and the gradient, so a learning rate of nan or
        inf, or an overflowing update, is never applied (and never saved)."""
        lr = self.learning_rate
        checks = [tf.math.is_finite(tf.cast(lr, tf.float32))]
        # One replica (not TPU): `update_step` takes these values instead of computing them a
        # second time (it runs next, in the same graph). Several replicas compute them again:
        # there `update_step` runs per device, in the strategy's merge context. So does Keras's
        # own `weight_decay` option, which changes the weights between the two.
        strategy = tf.distribute.get_strategy()
        keep = (strategy.num_replicas_in_sync == 1 and self.weight_decay is None
                and not isinstance(strategy, tf.distribute.TPUStrategy))
        computed = {}
        object.__setattr__(self, "_computed", computed)  # not tracked (nor checkpointed)
        for gradient, variable in zip(gradients, variables):
            values = self._new_values(gradient, variable, lr)
            if keep:
                computed[self._var_key(variable)] = (gradient, values)
            checks.append(tf.reduce_all(tf.math.is_finite(values[2])))
        return tf.reduce_all(tf.stack(checks))

    def _take_computed(self, gradient, variable):
        """The new values `updates_finite` computed for `variable` from this same `gradient`
        tensor in this graph, or None (then `update_step` computes them)."""
        kept = getattr(self, "_computed", {}).pop(self._var_key(variable), None)
        if kept is None or kept[0] is not gradient or (
                getattr(kept[0], "graph", None) is not tf.compat.v1.get_default_graph()):
            return None
        return kept[1]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        m_new, v_new, w_new = (self._take_computed(gradient, variable)
                               or self._new_values(gradient, variable, learning_rate))
        gate = tf.cast(self.update_gate, tf.float32) > 0.5
        self.assign(m, tf.where(gate, m_new, m))
        self.assign(v, tf.where(gate, v_new, v))
        self.assign(variable, tf.where(gate, w_new, variable))

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # The training loop all-reduces (and clips) before calling the optimizer; see the module
        # docstring. A second all-reduce would multiply gradients by the number of replicas.
        return grads_and_vars

    def get_config(self):
        config = super().get_config()
        config.update(weight_decay_rate=self.weight_decay_rate, beta_1=self.beta_1,
                      beta_2=self.beta_2, epsilon=self.epsilon,
                      exclude_from_weight_decay=list(self.exclude_from_weight_decay),
                      exclude_from_layer_adaptation=list(self.exclude_from_layer_adaptation),
                      layer_adaptation=self.layer_adaptation)
        return config


OPTIMIZERS = ("lamb", "adamw")


def create_optimizer(name: str, learning_rate: float, num_train_steps: int,
                     num_warmup_steps: int = 0, poly_power: float = 1.0,
                     start_warmup_step: int = 0, weight_decay_rate: float = 0.01
                     ) -> AlbertOptimizer:
    """The official optimizer setup: warmup + polynomial decay, LAMB or AdamW."""
    if name not in OPTIMIZERS:
        raise ValueError(f"--optimizer must be one of {OPTIMIZERS}; got {name!r}")
    schedule = WarmupPolynomialDecay(learning_rate, num_train_steps, num_warmup_steps,
                                     poly_power, start_warmup_step)
    return AlbertOptimizer(schedule, weight_decay_rate=weight_decay_rate,
                           layer_adaptation=(name == "lamb"))


# ---------------------------------------------------------------------------------------------
# Keras `fit` (`albert_tf.api.text_classifier`): the same update, Keras's loop around it.
@keras.saving.register_keras_serializable(package="albert_tf")
class OffsetSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule` started at optimizer step `offset`: lr(step) = schedule(step - offset), so a
    second `fit` runs its own warmup and decay from where the first one stopped."""

    def __init__(self, schedule, offset=0):
        self.schedule = schedule
        self.offset = int(offset)

    def __call__(self, step):
        return self.schedule(tf.cast(step, tf.int64) - self.offset)

    def get_config(self):
        return {"schedule": keras.saving.serialize_keras_object(self.schedule),
                "offset": self.offset}

    @classmethod
    def from_config(cls, config):
        return cls(keras.saving.deserialize_keras_object(config["schedule"]), config["offset"])


@keras.saving.register_keras_serializable(package="albert_tf")
class KerasFitOptimizer(AlbertOptimizer):
    """`AlbertOptimizer` for Keras's `fit`, which (unlike our loop) hands each replica's own
    gradient to the optimizer: sums them over the replicas (Keras's all-reduce, which
    `AlbertOptimizer` skips because the loop has done it), then clips the sum to global norm
    `clip_norm` as the loop does, so a step under a strategy equals the one-device step on the
    global batch. Keras's `global_clipnorm` would clip each replica's share before the sum.
    The loop's finiteness gate too (`Trainer._replica_step`): a step whose summed gradient or
    updated weights are not finite closes `update_gate`, so neither it nor any step after it is
    applied until the gate is opened again (`text_classifier._StopOnNonFinite` stops `fit`)."""

    def __init__(self, learning_rate=SETTINGS["learning_rate"].default, clip_norm=1.0, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.clip_norm = clip_norm

    def _all_reduce_sum_gradients(self, grads_and_vars):
        summed = [(None if g is None else tf.convert_to_tensor(g), v)  # embeddings: sparse
                  for g, v in super(AlbertOptimizer, self)._all_reduce_sum_gradients(
                      grads_and_vars)]
        present = [i for i, (g, _) in enumerate(summed) if g is not None]
        grads = [summed[i][0] for i in present]
        norm = tf.linalg.global_norm(grads)
        if self.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm, use_norm=norm)
            for i, g in zip(present, grads):
                summed[i] = (g, summed[i][1])
        finite = tf.math.is_finite(norm) & self.updates_finite(
            grads, [summed[i][1] for i in present])
        self.update_gate.assign(tf.where(finite, self.update_gate, 0.0))
        return summed

    def get_config(self):
        config = super().get_config()
        config.update(clip_norm=self.clip_norm)
        return config
