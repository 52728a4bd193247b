"""Analytic FLOP counts of ALBERT (multiply-add = 2 FLOPs): the benchmarks' floors and the
compute a pretraining run spent (the main job's report).

Per sequence of n tokens through L layers of hidden size H, intermediate size I, embedding size
E: the E -> H projection 2*n*E*H; per layer the Q, K, V and output projections 8*n*H^2, the
scores and the context 4*n^2*H, the FFN 4*n*H*I. The MLM head on P positions: 2*P*H*E (dense)
+ 2*P*E*V (decoder); pooler + SOP/classifier 2*H^2 + 2*H*C. Softmax, LayerNorm, GELU and
gathers are not counted (under 2% at albert-base).
"""

from __future__ import annotations
from albert_tf.config import AlbertConfig

FORMULA = ("forward FLOPs = sum over sequences of n*(2*E*H + L*(8*H^2 + 4*n*H + 4*H*I)) "
           "+ B*P*(2*H*E + 2*E*V) + B*(2*H^2 + 2*H*C); training step = 3 x forward "
           "(backward = 2 x forward)")


def model_dims(preset: str) -> dict:
    return config_dims(AlbertConfig.from_preset(preset))


def config_dims(c) -> dict:
    """The dimensions the formulas use, of an `AlbertConfig`."""
    return {"V": c.vocab_size, "E": c.embedding_size, "H": c.hidden_size,
            "I": c.intermediate_size, "L": c.num_hidden_layers, "heads": c.num_attention_heads,
            "max_positions": c.max_position_embeddings}


def encoder_flops(d: dict, lengths) -> float:
    """The embedding projection and the L layers over sequences of the given lengths."""
    E, H, I, L = d["E"], d["H"], d["I"], d["L"]
    return float(sum(n * (2 * E * H + L * (8 * H * H + 4 * n * H + 4 * H * I))
                     for n in lengths))


def forward_flops(d: dict, B: int, S: int, P: int, classes: int = 2) -> float:
    """The pretraining (P > 0: MLM on P positions + SOP) or classifier (P = 0) forward pass of
    B sequences of S tokens."""
    E, H, V = d["E"], d["H"], d["V"]
    return (encoder_flops(d, [S] * B) + B * P * (2 * H * E + 2 * E * V)
            + B * (2 * H * H + 2 * H * classes))


def pretraining_flops(d: dict, steps: int, batch_size: int, seq_length: int,
                      max_predictions_per_seq: int) -> float:
    """Training FLOPs of `steps` pretraining steps of `batch_size` sequences padded to
    `seq_length` (an upper bound: the loop runs on real tokens only) with
    `max_predictions_per_seq` masked positions each: 3 x forward per step."""
    return 3.0 * steps * forward_flops(d, batch_size, seq_length, max_predictions_per_seq)
