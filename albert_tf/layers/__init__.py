"""Keras layers of ALBERT (arXiv 1909.11942)."""

from albert_tf.layers.embedding import AlbertEmbedding
from albert_tf.layers.heads import AlbertMaskedLMHead
from albert_tf.layers.transformer import (AlbertAttention, AlbertEncoder, AlbertFeedForward,
                                          MASK_ADDER)

__all__ = ["AlbertEmbedding", "AlbertAttention", "AlbertFeedForward", "AlbertEncoder",
           "AlbertMaskedLMHead", "MASK_ADDER"]
