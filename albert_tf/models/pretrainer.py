"""`AlbertPretrainer`: the backbone plus the MLM and SOP heads of ALBERT pretraining."""

from __future__ import annotations

import keras

from albert_tf import features
from albert_tf.models.backbone import LAYER_NORM_EPSILON, AlbertConfigSerialization, built_backbone
from albert_tf.layers import AlbertMaskedLMHead
from albert_tf.layers.common import truncated_normal
from albert_tf.models.registry import RegisteredModel, register
from albert_tf.models.weight_names import NamedWeight, dense_weights, layer_norm_weights


@register
@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertPretrainer(RegisteredModel, AlbertConfigSerialization, keras.Model):
    """ALBERT with its pretraining heads: masked LM (tied decoder) and sentence-order prediction.

    Args:
        config: a built `AlbertBackbone` (the heads share it), or an `AlbertConfig` (or a dict
            of its keys) to build a new one.
        dtype: optional dtype policy name for every layer; None uses the global policy. Logits
            are returned in float32.

    Inputs (dict of int32): the backbone's `input_ids`, `input_mask`, `segment_ids`
    [batch, seq], and `masked_lm_positions` [batch, P].

    Outputs (dict): the backbone's outputs, plus `mlm_logits` [batch, P, V] and `sop_logits`
    [batch, 2] (float32). Loss and metrics: `albert_tf.models.losses`.

    The backbone is `self.backbone`, reachable alone for fine-tuning and export.
    """

    # The registry contract (`albert_tf.models.registry`): what checkpoints, serving and export ask.
    albert_kind = "pretrainer"
    official_head_prefixes = ("cls/predictions/", "cls/seq_relationship/")
    hf_architecture = "AlbertForPreTraining"
    hf_head_prefixes = ("predictions.", "sop_classifier.")
    has_tflite = True

    def hf_extra_state(self, state: dict) -> dict:
        """HF also saves the MLM decoder, tied to the word embeddings and the output bias."""
        return {**state, "predictions.decoder.weight": state[
                    "albert.embeddings.word_embeddings.weight"],
                "predictions.decoder.bias": state["predictions.bias"]}

    def __init__(self, config, dtype=None, performance=None, **kwargs):
        backbone, config = built_backbone(config, dtype, performance)
        inputs = dict(backbone.input)
        inputs[features.MASKED_LM_POSITIONS] = keras.Input(
            shape=(None,), dtype="int32", name=features.MASKED_LM_POSITIONS)
        outputs = dict(backbone({k: inputs[k] for k in features.BACKBONE_INPUTS}))

        mlm_head = AlbertMaskedLMHead(
            vocab_size=config.vocab_size, embedding_size=config.embedding_size,
            hidden_size=config.hidden_size, word_embeddings=backbone.word_embeddings,
            hidden_act=config.hidden_act, initializer_range=config.initializer_range,
            layer_norm_epsilon=LAYER_NORM_EPSILON, dtype=dtype, name="predictions")
        # Logits in float32 for a stable loss; the layer is tiny.
        sop_head = keras.layers.Dense(
            2, kernel_initializer=truncated_normal(config.initializer_range), dtype="float32",
            name="seq_relationship")
        outputs["mlm_logits"] = mlm_head(outputs["sequence_output"],
                                         inputs[features.MASKED_LM_POSITIONS])
        outputs["sop_logits"] = sop_head(outputs["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        self.config = config
        self._dtype_arg = dtype
        self.backbone = backbone
        self.mlm_head = mlm_head
        self.sop_head = sop_head

    def official_weights(self) -> list:
        """[NamedWeight]: the backbone's official names and both heads' (`cls/predictions/...`,
        `cls/seq_relationship/...`; the SOP weights stored [2, H] officially)."""
        head = self.mlm_head
        return self.backbone.official_weights() + [
            *dense_weights("cls/predictions/transform/dense", head.dense),
            *layer_norm_weights("cls/predictions/transform/LayerNorm", head.layer_norm),
            NamedWeight("cls/predictions/output_bias", head.output_bias),
            NamedWeight("cls/seq_relationship/output_weights", self.sop_head.kernel,
                        transposed=True),
            NamedWeight("cls/seq_relationship/output_bias", self.sop_head.bias),
        ]
