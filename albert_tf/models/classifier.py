"""`AlbertClassifier`: the backbone plus the official fine-tuning classification head."""

from __future__ import annotations

import keras

from albert_tf.models.backbone import AlbertConfigSerialization, built_backbone
from albert_tf.layers.common import truncated_normal
from albert_tf.models.registry import RegisteredModel, register
from albert_tf.models.weight_names import NamedWeight


def label_maps(labels, num_labels: int) -> dict:
    """Hugging Face's `id2label` / `label2id` (names default to `LABEL_i`, as HF's own)."""
    names = list(labels) if labels else [f"LABEL_{i}" for i in range(num_labels)]
    if len(names) != num_labels:
        raise ValueError(f"{len(names)} label names for {num_labels} labels.")
    return {"id2label": {str(i): name for i, name in enumerate(names)},
            "label2id": {name: i for i, name in enumerate(names)}}


class LabelledHeadModel(RegisteredModel, AlbertConfigSerialization, keras.Model):
    """The backbone, dropout on one of its outputs (`FEATURES`) and a dense layer to
    `num_labels` float32 logits: the sequence classifier on `pooled_output`, the token
    classifier on `sequence_output`. The head's official names are `OFFICIAL_SCOPE` +
    `output_weights` [num_labels, H] and `output_bias`."""

    FEATURES = "pooled_output"
    OFFICIAL_SCOPE = ""
    DEFAULT_NAME = None

    def __init__(self, config, num_labels, dropout_rate=0.1, dtype=None, performance=None,
                 **kwargs):
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
            raise ValueError(f"`num_labels` must be a positive integer. Received: {num_labels!r}")
        backbone, config = built_backbone(config, dtype, performance)
        inputs = dict(backbone.input)
        outputs = dict(backbone(inputs))
        dropout = keras.layers.Dropout(dropout_rate, dtype=dtype, name="classifier_dropout")
        head = keras.layers.Dense(
            num_labels, kernel_initializer=truncated_normal(config.initializer_range),
            dtype="float32", name="classifier")
        outputs["logits"] = head(dropout(outputs[self.FEATURES]))
        if self.DEFAULT_NAME:
            kwargs.setdefault("name", self.DEFAULT_NAME)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        self.config = config
        self.num_labels = num_labels
        self.dropout_rate = dropout_rate
        self._dtype_arg = dtype
        self.backbone = backbone
        self.classifier_head = head

    def official_weights(self) -> list:
        """[NamedWeight]: the backbone's official names and the head's (the kernel stored
        transposed, [num_labels, H], officially)."""
        head = self.classifier_head
        return self.backbone.official_weights() + [
            NamedWeight(self.OFFICIAL_SCOPE + "output_weights", head.kernel, transposed=True),
            NamedWeight(self.OFFICIAL_SCOPE + "output_bias", head.bias)]

    def get_config(self):
        config = super().get_config()
        config.update(num_labels=self.num_labels, dropout_rate=self.dropout_rate)
        return config


@register
@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifier(LabelledHeadModel):
    """ALBERT for sequence classification or regression (official `run_classifier.py` head):
    dropout on the pooled output, then a dense layer to `num_labels` logits.

    Official names of the head: `output_weights` [num_labels, H] and `output_bias`
    [num_labels] (root scope of a fine-tuned checkpoint); Hugging Face: `classifier.weight`,
    `classifier.bias`. `num_labels=1` is the regression head (STS-B).

    Args:
        config: a built `AlbertBackbone` (the head shares it), or an `AlbertConfig` (or a dict
            of its keys) to build a new one.
        num_labels: number of classes (1 for regression).
        dropout_rate: dropout on the pooled output (official: 0.1 while fine-tuning).
        dtype: optional dtype policy name; the logits are float32.

    Inputs: the backbone's `input_ids`, `input_mask`, `segment_ids`.
    Outputs (dict): the backbone's outputs and `logits` [batch, num_labels].
    """

    # The registry contract (`albert_tf.models.registry`): what checkpoints, serving and export ask.
    albert_kind = "classifier"
    official_head_prefixes = ("output_weights", "output_bias")
    hf_architecture = "AlbertForSequenceClassification"
    hf_head_prefixes = ("classifier.",)
    has_tflite = True

    @classmethod
    def for_checkpoint(cls, config, num_labels=None, dtype=None):
        if not num_labels:
            raise ValueError("A classifier needs `num_labels`.")
        return cls(config, num_labels=num_labels, dtype=dtype)

    def hf_config(self, labels=None) -> dict:
        """`id2label`/`label2id` (default names `LABEL_i`); one label is HF's regression."""
        values = label_maps(labels, self.num_labels)
        if self.num_labels == 1:
            values["problem_type"] = "regression"
        return values
