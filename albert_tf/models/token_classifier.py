"""`AlbertTokenClassifier`: the backbone plus a tagging head on every position (named entities,
part of speech)."""

from __future__ import annotations

import keras

from albert_tf.models.classifier import LabelledHeadModel, label_maps
from albert_tf.models.registry import register

HEAD_PREFIX = "cls/tagging/"


@register
@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTokenClassifier(LabelledHeadModel):
    """ALBERT for token classification (Hugging Face `AlbertForTokenClassification`): dropout
    on the sequence output, then a dense layer to `num_labels` logits at every position.

    Official-style names of the head (the official ALBERT code has no tagging head):
    `cls/tagging/output_weights` [num_labels, H] and `cls/tagging/output_bias` [num_labels];
    Hugging Face: `classifier.weight`, `classifier.bias` (dropout `classifier_dropout_prob`).
    Hugging Face's model has no pooler; ours keeps the backbone's (never read by the logits).

    Args:
        config: a built `AlbertBackbone` (shared, not copied), or an
            `AlbertConfig` (or a dict of its keys) to build one from.
        num_labels: number of tags.
        dropout_rate: dropout on the sequence output (0.1, as `classifier_dropout_prob`).
        dtype: optional dtype policy name; the logits are float32.

    Inputs: the backbone's `input_ids`, `input_mask`, `segment_ids` [batch, seq].
    Outputs (dict): the backbone's outputs and `logits` [batch, seq, num_labels] (float32).

    Example:
        >>> model = AlbertTokenClassifier(config, num_labels=13)
        >>> model(features)["logits"].shape   # [batch, seq, 13]
    """

    # The registry contract (`albert_tf.models.registry`).
    albert_kind = "token_classifier"
    official_head_prefixes = (HEAD_PREFIX,)
    hf_architecture = "AlbertForTokenClassification"
    hf_head_prefixes = ("classifier.",)
    hf_absent_prefixes = ("albert.pooler.",)  # HF's token classifier has no pooler
    has_tflite = False
    FEATURES = "sequence_output"
    OFFICIAL_SCOPE = HEAD_PREFIX
    DEFAULT_NAME = "albert_token_classifier"

    @classmethod
    def for_checkpoint(cls, config, num_labels=None, dtype=None):
        if num_labels is None:
            raise ValueError("A token classifier checkpoint needs its number of labels "
                             "(num_labels); none was stored with it.")
        return cls(config, num_labels, dtype=dtype)

    def hf_config(self, labels=None) -> dict:
        """`id2label` / `label2id` of Hugging Face's `config.json` (names default to
        "LABEL_i", as Hugging Face's own)."""
        return {**label_maps(labels, self.num_labels),
                "classifier_dropout_prob": self.dropout_rate}
