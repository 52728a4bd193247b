"""The factorized embedding of ALBERT (paper section 3.1)."""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf.layers.common import Dense, truncated_normal


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertEmbedding(keras.layers.Layer):
    """Word, position and token-type embeddings of size E, summed, LayerNorm, dropout, then the
    projection E -> H (`embedding_hidden_mapping_in`).

    The vocabulary table is [V, E] instead of BERT's [V, H]: V*E + E*H parameters instead of V*H.
    As in official `modeling.py` (`transformer_model`) and TF Model Garden, the projection exists
    only when E != H: with E == H (BERT) there is no `embedding_hidden_mapping_in` variable, so
    official E == H checkpoints load strictly and BERT counts carry no extra H*H + H.

    Args:
        vocab_size: V.
        embedding_size: E.
        hidden_size: H.
        max_position_embeddings: rows of the absolute position table; longer inputs are an error.
        type_vocab_size: number of segment ids.
        hidden_dropout_prob: dropout after the LayerNorm.
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_epsilon: LayerNorm epsilon (official: 1e-12).

    Call args:
        input_ids: int [batch, seq] token ids.
        segment_ids: int [batch, seq] token-type ids.

    Returns:
        [batch, seq, H] float tensor.

    Example:
        >>> layer = AlbertEmbedding(100, 8, 12, 16, 2)
        >>> layer(tf.constant([[2, 5, 3]]), tf.constant([[0, 0, 0]])).shape
        TensorShape([1, 3, 12])
    """

    def __init__(self, vocab_size, embedding_size, hidden_size, max_position_embeddings,
                 type_vocab_size, hidden_dropout_prob=0.0, initializer_range=0.02,
                 layer_norm_epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.hidden_dropout_prob = hidden_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

        init = truncated_normal(initializer_range)
        self.word_embeddings = keras.layers.Embedding(
            vocab_size, embedding_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="word_embeddings")
        self.token_type_embeddings = keras.layers.Embedding(
            type_vocab_size, embedding_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="token_type_embeddings")
        self.position_embeddings = keras.layers.Embedding(
            max_position_embeddings, embedding_size, embeddings_initializer=init,
            dtype=self.dtype_policy, name="position_embeddings")
        # LayerNorm statistics in float32 whatever the compute dtype.
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype="float32", name="LayerNorm")
        self.dropout = keras.layers.Dropout(hidden_dropout_prob, dtype=self.dtype_policy,
                                            name="dropout")
        self.projection = None
        if embedding_size != hidden_size:
            self.projection = Dense(
                hidden_size, kernel_initializer=init, dtype=self.dtype_policy,
                name="embedding_hidden_mapping_in")

    def build(self, input_ids_shape, segment_ids_shape=None):
        self.word_embeddings.build(input_ids_shape)
        self.token_type_embeddings.build(input_ids_shape)
        self.position_embeddings.build(input_ids_shape)
        self.layer_norm.build((None, None, self.embedding_size))
        if self.projection is not None:
            self.projection.build((None, None, self.embedding_size))
        self.built = True

    def call(self, input_ids, segment_ids, training=None):
        seq_length = input_ids.shape[1]
        if seq_length is not None and seq_length > self.max_position_embeddings:
            raise ValueError(
                f"Input sequence length {seq_length} exceeds max_position_embeddings="
                f"{self.max_position_embeddings}; truncate the input or use a model with a longer "
                "position table.")
        dynamic_length = tf.shape(input_ids)[1]
        if seq_length is None:
            tf.debugging.assert_less_equal(
                dynamic_length, self.max_position_embeddings,
                message="Input sequence length exceeds max_position_embeddings")
        positions = self.position_embeddings.embeddings[:dynamic_length]
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(segment_ids)
             + tf.cast(positions, self.compute_dtype)[tf.newaxis])
        x = self.layer_norm(x)
        x = self.dropout(x, training=training)
        if self.projection is None:  # E == H
            return tf.cast(x, self.compute_dtype)
        return self.projection(x)

    def compute_output_shape(self, input_ids_shape, segment_ids_shape=None):
        return tuple(input_ids_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, embedding_size=self.embedding_size,
            hidden_size=self.hidden_size, max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size, hidden_dropout_prob=self.hidden_dropout_prob,
            initializer_range=self.initializer_range, layer_norm_epsilon=self.layer_norm_epsilon)
        return config
