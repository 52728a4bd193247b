"""The task heads on the backbone: SQuAD's span model (v1, null-score v2), the official SQuAD 2.0
answer-class model and RACE's multiple-choice model, each a registered class
(`albert_tf.models.registry`). The model layer only (no task, data or checkpoint code), so that
checkpoints, serving and the tasks can all import them."""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from albert_tf import features as F
from albert_tf.models.backbone import built_backbone
from albert_tf.models.classifier import AlbertClassifier
from albert_tf.layers.common import truncated_normal
from albert_tf.models.registry import RegisteredModel, register
from albert_tf.models.weight_names import NamedWeight

NUM_CHOICES = 4


@register
class AlbertSpanModel(RegisteredModel, keras.Model):
    """ALBERT for SQuAD v1 and BERT-style (null-score) v2: a dense layer of 2 on every position
    of the backbone's sequence output (official `cls/squad` head). Outputs `start_logits`,
    `end_logits` [batch, seq] (float32) and the backbone's.

    Args:
        config: a built `AlbertBackbone` (the head shares it), or an `AlbertConfig` to build one.
        dtype: optional dtype policy name; the logits are float32.
    """

    albert_kind = "span"
    official_head_prefixes = ("cls/squad/",)
    # The official v1 / null-score softmax covers every position, padding included: the
    # encoder must compute the padded positions (`remove_padding` is not applied).
    reads_padding = True

    def __init__(self, config, dtype=None, performance=None, **kwargs):
        if performance is not None:
            performance = dataclasses.replace(performance, remove_padding=False)
        backbone, config = built_backbone(config, dtype, performance)
        inputs = dict(backbone.input)
        outputs = dict(backbone(inputs))
        head = keras.layers.Dense(2, kernel_initializer=truncated_normal(config.initializer_range),
                                  dtype="float32", name="squad")
        logits = head(outputs["sequence_output"])
        outputs["start_logits"] = keras.ops.take(logits, 0, axis=-1)
        outputs["end_logits"] = keras.ops.take(logits, 1, axis=-1)
        super().__init__(inputs=inputs, outputs=outputs, name=kwargs.pop("name", "albert_squad"),
                         **kwargs)
        self.backbone = backbone
        self.config = config
        self.span_head = head

    def official_weights(self):
        """The backbone's names and official `cls/squad/output_weights` [2, H], `output_bias`."""
        return self.backbone.official_weights() + [
            NamedWeight("cls/squad/output_weights", self.span_head.kernel, transposed=True),
            NamedWeight("cls/squad/output_bias", self.span_head.bias)]


class _Regroup(keras.layers.Layer):
    """[..., n] -> [-1, n] (choices into the batch and back)."""

    def __init__(self, n=None, **kwargs):
        super().__init__(**kwargs)
        self.n = n

    def call(self, x):
        return tf.reshape(x, [-1, self.n if self.n else tf.shape(x)[-1]])

    def compute_output_shape(self, shape):
        return (None, self.n or shape[-1])


@register
class AlbertMultipleChoice(RegisteredModel, keras.Model):
    """ALBERT for multiple choice (official RACE head): `AlbertClassifier` with one logit applied
    to each of the `num_choices` sequences. Inputs [batch, num_choices, seq]; outputs `logits`
    [batch, num_choices] (float32). `backbone` and `classifier` are the shared parts; the
    official names are its one-logit classifier's (`output_weights` [1, H], `output_bias`)."""

    albert_kind = "multiple_choice"
    official_head_prefixes = ("output_weights", "output_bias")

    @classmethod
    def for_checkpoint(cls, config, num_labels=None, dtype=None):
        return cls(config, num_labels or NUM_CHOICES, dtype=dtype)

    def __init__(self, config, num_choices: int = NUM_CHOICES, dropout_rate: float = 0.1,
                 dtype=None, performance=None, **kwargs):
        backbone, config = built_backbone(config, dtype, performance)
        classifier = AlbertClassifier(backbone, 1, dropout_rate=dropout_rate, dtype=dtype,
                                      name="albert_classifier")
        inputs = {name: keras.Input((num_choices, None), dtype="int32", name=name)
                  for name in F.BACKBONE_INPUTS}
        flat = {name: _Regroup(name=f"{name}_choices")(t) for name, t in inputs.items()}
        logits = classifier(flat)["logits"]
        outputs = {"logits": _Regroup(num_choices, dtype="float32", name="choices")(logits)}
        super().__init__(inputs=inputs, outputs=outputs,
                         name=kwargs.pop("name", "albert_multiple_choice"), **kwargs)
        self.backbone = backbone
        self.classifier = classifier
        self.config = config
        self.num_labels = num_choices

    def official_weights(self):
        return self.classifier.official_weights()


def context_mask(input_ids, input_mask, segment_ids):
    """float32 [batch, seq]: 1 where a SQuAD answer may start or end (the context pieces of the
    window: segment 1, before the final [SEP]) and at [CLS] (the null answer), 0 elsewhere
    (question, [SEP]s, padding): the official v2 `1 - p_mask`, from the features themselves."""
    mask = tf.cast(input_mask, tf.int32)
    next_real = tf.concat([mask[:, 1:], tf.zeros_like(mask[:, :1])], axis=1)
    context = (tf.cast(segment_ids, tf.int32) == 1) & (mask == 1) & (next_real == 1)
    cls = tf.equal(tf.range(tf.shape(mask)[1])[None, :], 0)
    return tf.cast(context | cls, tf.float32)


@register
class AlbertSquadV2(RegisteredModel, keras.Model):
    """The official ALBERT SQuAD 2.0 model (google-research/albert `squad_utils.create_v2_model`)
    on `AlbertBackbone`: start log-probabilities over the window's context (and [CLS]); end
    log-probabilities conditioned on the start (a dense tanh layer and LayerNorm over
    [sequence output; the start's vector], then one logit per position); an answer-class head
    (`cls_logits`, > 0: no answer) over [the start-probability-weighted vector; [CLS]'s].

    With `start_positions` in the inputs: `start_log_probs`, `end_log_probs` [batch, seq] (the
    end conditioned on the true start, for the loss); `cls_logits` [batch]. Unless training,
    also the beam search as official: `start_top_log_probs`, `start_top_index`
    [batch, start_n_top] and `end_top_log_probs`, `end_top_index` [batch, start_n_top *
    end_n_top] (the end_n_top ends of each top start), and `cls_logits`."""

    albert_kind = "squad_v2"
    official_head_prefixes = ("start_logits/", "end_logits/", "answer_class/")
    SETTINGS = ("start_n_top", "end_n_top")  # carried to a copy of the model (`host_copy`)

    def __init__(self, config, start_n_top: int = 5, end_n_top: int = 5,
                 dropout_prob: float = 0.1, dtype=None, performance=None, **kwargs):
        super().__init__(name=kwargs.pop("name", "albert_squad_v2"), **kwargs)
        backbone, config = built_backbone(config, dtype, performance)
        self.config = config
        self.start_n_top, self.end_n_top = int(start_n_top), int(end_n_top)
        init = truncated_normal(config.initializer_range)
        hidden = config.hidden_size
        self.backbone = backbone
        dense = lambda units, name, **kw: keras.layers.Dense(  # noqa: E731
            units, kernel_initializer=init, dtype="float32", name=name, **kw)
        self.start_dense = dense(1, "start_logits")
        self.end_dense_0 = dense(hidden, "end_logits_dense_0", activation="tanh")
        self.end_layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, dtype="float32",
                                                              name="end_logits_LayerNorm")
        self.end_dense_1 = dense(1, "end_logits_dense_1")
        self.answer_dense_0 = dense(hidden, "answer_class_dense_0", activation="tanh")
        self.answer_dropout = keras.layers.Dropout(dropout_prob, name="answer_class_dropout")
        self.answer_dense_1 = dense(1, "answer_class_dense_1", use_bias=False)
        self.build_weights()

    def build_weights(self):
        """Creates every weight (one call on a small input)."""
        length = min(8, self.config.max_position_embeddings)
        self({F.INPUT_IDS: tf.zeros([1, length], tf.int32),
              F.INPUT_MASK: tf.ones([1, length], tf.int32),
              F.SEGMENT_IDS: tf.zeros([1, length], tf.int32)})

    def _end_log_probs(self, sequence, start_vectors, allowed):
        """[batch, k, seq] end log-probabilities for k start vectors [batch, k, H]."""
        seq_len = tf.shape(sequence)[1]
        k = tf.shape(start_vectors)[1]
        tiled_seq = tf.tile(sequence[:, None], [1, k, 1, 1])
        tiled_start = tf.tile(start_vectors[:, :, None], [1, 1, seq_len, 1])
        x = self.end_dense_0(tf.concat([tiled_seq, tiled_start], axis=-1))
        logits = tf.squeeze(self.end_dense_1(self.end_layer_norm(x)), -1)  # [batch, k, seq]
        allowed = allowed[:, None]
        return tf.nn.log_softmax(logits * allowed - 1e30 * (1 - allowed), axis=-1)

    def call(self, inputs, training=None):
        features = {name: inputs[name] for name in F.BACKBONE_INPUTS}
        sequence = tf.cast(self.backbone(features, training=training)["sequence_output"],
                           tf.float32)  # [batch, seq, H]
        allowed = context_mask(*(inputs[name] for name in F.BACKBONE_INPUTS))
        start_logits = tf.squeeze(self.start_dense(sequence), -1)
        start_logits = start_logits * allowed - 1e30 * (1 - allowed)
        start_log_probs = tf.nn.log_softmax(start_logits, axis=-1)
        start_p = tf.nn.softmax(start_logits, axis=-1)
        answer = tf.concat([tf.einsum("bsh,bs->bh", sequence, start_p), sequence[:, 0]], -1)
        answer = self.answer_dropout(self.answer_dense_0(answer), training=training)
        out = {"cls_logits": tf.squeeze(self.answer_dense_1(answer), -1)}
        if "start_positions" in inputs:  # the loss: the end conditioned on the true start
            start = tf.reshape(tf.cast(inputs["start_positions"], tf.int32), [-1])
            vectors = tf.gather(sequence, start[:, None], axis=1, batch_dims=1)  # [b, 1, H]
            out.update(start_log_probs=start_log_probs,
                       end_log_probs=self._end_log_probs(sequence, vectors, allowed)[:, 0])
            if training:
                return out
        k = tf.minimum(self.start_n_top, tf.shape(sequence)[1])
        top_log_probs, top_index = tf.math.top_k(start_log_probs, k=k)
        vectors = tf.gather(sequence, top_index, axis=1, batch_dims=1)  # [batch, k, H]
        end_log_probs = self._end_log_probs(sequence, vectors, allowed)
        end_k = tf.minimum(self.end_n_top, tf.shape(sequence)[1])
        end_top_log_probs, end_top_index = tf.math.top_k(end_log_probs, k=end_k)
        batch = tf.shape(sequence)[0]
        out.update(start_top_log_probs=top_log_probs, start_top_index=top_index,
                   end_top_log_probs=tf.reshape(end_top_log_probs, [batch, -1]),
                   end_top_index=tf.reshape(end_top_index, [batch, -1]))
        return out

    def official_weights(self):
        """The official v2 head's checkpoint names (`start_logits/dense`, `end_logits/
        dense_0`, `end_logits/LayerNorm`, `end_logits/dense_1`, `answer_class/dense_0`,
        `answer_class/dense_1`) after the backbone's."""
        named = list(self.backbone.official_weights())
        for layer, scope in ((self.start_dense, "start_logits/dense"),
                             (self.end_dense_0, "end_logits/dense_0"),
                             (self.end_dense_1, "end_logits/dense_1"),
                             (self.answer_dense_0, "answer_class/dense_0")):
            named += [NamedWeight(f"{scope}/kernel", layer.kernel),
                      NamedWeight(f"{scope}/bias", layer.bias)]
        named += [NamedWeight("end_logits/LayerNorm/gamma", self.end_layer_norm.gamma),
                  NamedWeight("end_logits/LayerNorm/beta", self.end_layer_norm.beta),
                  NamedWeight("answer_class/dense_1/kernel", self.answer_dense_1.kernel)]
        return named
