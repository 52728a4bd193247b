"""Pretraining heads: the masked-LM head tied to the word embeddings."""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf.layers.common import Dense, get_activation, truncated_normal


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMaskedLMHead(keras.layers.Layer):
    """Masked-LM head: gather the masked positions, dense H -> E, activation, LayerNorm, then the
    decoder tied to the word-embedding table [V, E] plus a per-token `output_bias` [V].

    Official names: `cls/predictions/transform/dense`, `cls/predictions/transform/LayerNorm`,
    `cls/predictions/output_bias`.

    Args:
        vocab_size: V.
        embedding_size: E.
        hidden_size: H.
        word_embeddings: the `keras.layers.Embedding` whose [V, E] table is the decoder (tied).
        hidden_act: activation of the transform ("gelu" = tanh approximation).
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_epsilon: LayerNorm epsilon (official: 1e-12 here too).

    Call args:
        sequence_output: [batch, seq, H].
        masked_lm_positions: int [batch, P] positions to predict (padding entries may be 0).

    Returns:
        float32 logits [batch, P, V].
    """

    def __init__(self, vocab_size, embedding_size, hidden_size, word_embeddings,
                 hidden_act="gelu", initializer_range=0.02, layer_norm_epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        if isinstance(word_embeddings, dict):  # from_config of a standalone head
            word_embeddings = keras.layers.deserialize(word_embeddings)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.word_embeddings = word_embeddings
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

        self.activation = get_activation(hidden_act)
        self.dense = Dense(
            embedding_size, kernel_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy, name="transform_dense")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype="float32", name="transform_LayerNorm")

    def build(self, sequence_output_shape, masked_lm_positions_shape=None):
        if not self.word_embeddings.built:
            self.word_embeddings.build((None, None))
        self.dense.build((None, None, self.hidden_size))
        self.layer_norm.build((None, None, self.embedding_size))
        self.output_bias = self.add_weight(
            shape=(self.vocab_size,), initializer="zeros", name="output_bias")
        self.built = True

    def call(self, sequence_output, masked_lm_positions):
        gathered = tf.gather(sequence_output, tf.cast(masked_lm_positions, tf.int32),
                             batch_dims=1)
        x = self.layer_norm(self.activation(self.dense(gathered)))
        x = tf.cast(x, self.compute_dtype)
        table = tf.cast(self.word_embeddings.embeddings, self.compute_dtype)
        logits = tf.einsum("bpe,ve->bpv", x, table)
        return tf.cast(logits, tf.float32) + tf.cast(self.output_bias, tf.float32)

    def compute_output_shape(self, sequence_output_shape, masked_lm_positions_shape):
        return tuple(masked_lm_positions_shape) + (self.vocab_size,)

    def compute_output_spec(self, sequence_output, masked_lm_positions):
        return keras.KerasTensor(tuple(masked_lm_positions.shape) + (self.vocab_size,),
                                 dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, embedding_size=self.embedding_size,
            hidden_size=self.hidden_size,
            word_embeddings=keras.layers.serialize(self.word_embeddings),
            hidden_act=self.hidden_act, initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon)
        return config
