"""The task models built on the backbone that are not classes of their own: SQuAD's span model
and RACE's multiple-choice model. The model layer only (no task, data or checkpoint code), so
that checkpoints, serving and the tasks can all import them."""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf import features as F
from albert_tf.backbone import AlbertBackbone
from albert_tf.classifier import AlbertClassifier
from albert_tf.layers.common import truncated_normal
from albert_tf.weight_names import NamedWeight

NUM_CHOICES = 4


def span_model(config, dtype=None):
    """`AlbertBackbone` + a dense layer of 2 on every position (official `cls/squad` head):
    outputs `start_logits`, `end_logits` [batch, seq] (float32) and the backbone's."""
    backbone = AlbertBackbone(config, dtype=dtype, name="albert")
    inputs = dict(backbone.input)
    outputs = dict(backbone(inputs))
    logits = keras.layers.Dense(2, kernel_initializer=truncated_normal(config.initializer_range),
                                dtype="float32", name="squad")(outputs["sequence_output"])
    outputs["start_logits"] = keras.ops.take(logits, 0, axis=-1)
    outputs["end_logits"] = keras.ops.take(logits, 1, axis=-1)
    model = keras.Model(inputs=inputs, outputs=outputs, name="albert_squad")
    model.backbone = backbone
    model.config = config
    model.albert_kind = "span"
    # official `cls/squad/output_weights` [2, H] and `cls/squad/output_bias` [2]
    model.official_weights = lambda: backbone.official_weights() + [
        NamedWeight("cls/squad/output_weights", model.get_layer("squad").kernel, transposed=True),
        NamedWeight("cls/squad/output_bias", model.get_layer("squad").bias)]
    return model


def multiple_choice_model(config, num_choices: int = NUM_CHOICES, dropout_rate: float = 0.1,
                          dtype=None):
    """`AlbertClassifier` with one logit applied to each of the `num_choices` sequences:
    inputs [batch, num_choices, seq]; outputs `logits` [batch, num_choices] (float32).
    `model.backbone` and `model.classifier` are the shared parts."""
    class Regroup(keras.layers.Layer):
        """[..., n] -> [-1, n] (choices into the batch and back)."""

        def __init__(self, n=None, **kwargs):
            super().__init__(**kwargs)
            self.n = n

        def call(self, x):
            return tf.reshape(x, [-1, self.n if self.n else tf.shape(x)[-1]])

        def compute_output_shape(self, shape):
            return (None, self.n or shape[-1])

    classifier = AlbertClassifier(config, 1, dropout_rate=dropout_rate, dtype=dtype,
                                  name="albert_classifier")
    inputs = {name: keras.Input((num_choices, None), dtype="int32", name=name)
              for name in F.BACKBONE_INPUTS}
    flat = {name: Regroup(name=f"{name}_choices")(t) for name, t in inputs.items()}
    logits = classifier(flat)["logits"]
    outputs = {"logits": Regroup(num_choices, dtype="float32", name="choices")(logits)}
    model = keras.Model(inputs=inputs, outputs=outputs, name="albert_multiple_choice")
    model.backbone = classifier.backbone
    model.classifier = classifier
    model.config = config
    model.albert_kind = "multiple_choice"
    # its one-logit classifier's (official RACE `output_weights` [1, H], `output_bias` [1])
    model.official_weights = classifier.official_weights
    model.num_labels = num_choices
    return model
