"""Dynamic loss scaling for float16 training (`--mixed_precision float16`).

float16 has 5 exponent bits: gradients below about 6e-8 flush to zero and activations' gradients
above 65504 overflow. The loss is multiplied by a scale S before the backward pass, so small
gradients stay representable, and the summed gradients are divided by S before global-norm
clipping and the optimizer (ALBERT's LAMB or AdamW), which therefore see the same gradients as
in float32. A step whose unscaled gradients (or loss, or updated weights) are not finite is
skipped: weights and optimizer slots unchanged, the step still counted (its batch is consumed
and the learning-rate schedule moves on, as Megatron and Apex count skipped iterations), S
halved. After `growth_interval` finite steps in a row S doubles. The scale, the run of good
steps and the count of skipped steps are variables, saved in the checkpoint, so a resumed run
goes on with the scale it had.

A step that is not finite at the smallest scale (`min_scale`) is not an overflow of the scale:
the training loop treats it as float32 treats any non-finite step (it stops, nothing saved
after it). Defaults as TensorFlow's and Keras' dynamic loss scale: S starts at 2^15 and doubles
after 2,000 good steps.
"""

from __future__ import annotations

import tensorflow as tf

ONLY_FIRST = tf.VariableAggregation.ONLY_FIRST_REPLICA


class DynamicLossScale(tf.Module):
    """The scale S and its update rule (module docstring). Create it inside the strategy's
    scope; `update` runs in the replica context on values that are the same on every replica
    (after the all-reduce), so every replica keeps the same scale."""

    def __init__(self, initial_scale: float = 2.0 ** 15, growth_interval: int = 2000,
                 min_scale: float = 1.0, name: str = "loss_scale"):
        super().__init__(name=name)
        if not initial_scale >= min_scale > 0:
            raise ValueError(f"initial_scale ({initial_scale}) must be at least min_scale "
                             f"({min_scale}), which must be positive.")
        if growth_interval < 1:
            raise ValueError(f"growth_interval must be a positive step count. Received: "
                             f"{growth_interval}")
        self.growth_interval = int(growth_interval)
        self.min_scale = float(min_scale)
        self.scale = tf.Variable(float(initial_scale), dtype=tf.float32, trainable=False,
                                 aggregation=ONLY_FIRST, name="scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=ONLY_FIRST,
                                      name="good_steps")
        self.skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         aggregation=ONLY_FIRST, name="skipped_steps")

    def scale_loss(self, loss):
        """The loss times S (in the loss' dtype)."""
        return loss * tf.cast(self.scale, loss.dtype)

    def unscale(self, gradients):
        """The gradients divided by S (float32 arithmetic, back to each gradient's dtype)."""
        inverse = 1.0 / self.scale
        return [tf.cast(tf.cast(g, tf.float32) * inverse, g.dtype) for g in gradients]

    def overflowed(self, finite):
        """Whether a step that is `finite` (or not) is a skippable overflow: not finite while
        S is above `min_scale`."""
        return tf.logical_and(tf.logical_not(finite), self.scale > self.min_scale)

    def update(self, finite) -> None:
        """After a step: on an overflow S halves (not below `min_scale`), the run of good
        steps restarts and the skip is counted; after a finite step the run grows, and at
        `growth_interval` S doubles (float32's largest finite value at most)."""
        overflow = self.overflowed(finite)
        good = tf.where(finite, self.good_steps + 1, tf.zeros_like(self.good_steps))
        grow = good >= self.growth_interval
        grown = tf.minimum(self.scale * 2.0, tf.float32.max)
        halved = tf.maximum(self.scale * 0.5, self.min_scale)
        self.scale.assign(tf.where(overflow, halved, tf.where(grow, grown, self.scale)))
        self.good_steps.assign(tf.where(grow, tf.zeros_like(good), good))
        self.skipped_steps.assign_add(tf.cast(overflow, tf.int64))
