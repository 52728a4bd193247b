"""Helpers shared by the ALBERT layers: initializer and activation lookup."""

from __future__ import annotations

import keras

from albert_tf.config import ACTIVATIONS


def truncated_normal(initializer_range: float) -> keras.initializers.Initializer:
    """The official initializer: truncated normal (cut at 2 stddev), stddev `initializer_range`."""
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


def get_activation(name: str):
    """Maps an official `hidden_act` name to a function.

    "gelu" in the official code (and "gelu_new" in Hugging Face) is the tanh approximation
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), not the exact erf form.
    """
    if name in ("gelu", "gelu_new"):
        return lambda x: keras.activations.gelu(x, approximate=True)
    if name == "relu":
        return keras.activations.relu
    if name == "tanh":
        return keras.activations.tanh
    if name == "linear":
        return keras.activations.linear
    raise ValueError(f"`hidden_act` must be one of {ACTIVATIONS}. Received: {name!r}")
