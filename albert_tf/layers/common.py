"""Helpers shared by the ALBERT layers: initializer, activation lookup, and the dense layer."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

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


def add_bias(x, bias):
    """`x + bias` with `bias` [units] broadcast over the last axis: what `keras.layers.Dense`
    computes, and with its op (`BiasAdd`) except in bfloat16, where it is a plain `AddV2`: the
    same values, but the bias gradient becomes a `Sum`, which accumulates bfloat16 in float32
    and rounds once, where TensorFlow's CPU `BiasAddGrad` accumulates in bfloat16 (at 1,024
    rows it rounds under a tenth of the sums correctly; tests/test_layers.py)."""
    bias = tf.convert_to_tensor(bias)  # a Keras variable: cast to the compute dtype in a call
    if x.dtype == tf.bfloat16:
        return tf.add(x, tf.cast(bias, x.dtype))
    return keras.ops.add(x, bias)


@keras.saving.register_keras_serializable(package="albert_tf")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` (the same variables, config and values) whose bias gradient under a
    bfloat16 compute dtype is summed in float32 (`add_bias`)."""

    def call(self, inputs, training=None):
        x = keras.ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = add_bias(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras's Dense refuses to quantize a subclass (it might change what `call` computes),
        # and `Model.quantize` turns that into a warning and skips the layer. A quantized layer
        # runs Keras's own `quantized_call`, not the `call` above, so it is Keras's layer.
        del type_check
        super().quantize(mode, type_check=False, config=config)


_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


@tf.custom_gradient
def gelu_tanh_lean(x):
    """The tanh GELU (official "gelu") with a hand-written gradient that keeps only `x`.

    The forward is `tf.nn.gelu(x, approximate=True)`, bit for bit what `get_activation("gelu")`
    returns. Autodiff through it keeps five [tokens, I] intermediates (x^3, the tanh argument,
    the tanh, ...) alive until the backward pass: 32 MB per layer for ALBERT-base at batch 8,
    seq 128, a sixth of a training step's peak memory. This backward recomputes the tanh from
    `x` in float32 whatever the compute dtype:
    d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2), t = tanh(c (x + a x^3)).
    Written as TensorFlow ops that is some 20 passes over a [tokens, I] tensor; it runs as one
    XLA-compiled function instead (`_gelu_grad_fused`: one pass), directly where `x`'s shape is
    fixed when the graph is built (padded batches), with the tokens padded to one of a few
    sizes where it is not (`_gelu_grad_bucketed`: the padding-free layers, whose token count
    changes from batch to batch, and eager calls; XLA compiles once per shape, about 40 ms
    here). The TensorFlow ops (`_gelu_grad`) remain for an unknown last dimension. Both are
    within a float32 rounding of each other and as close to the float64 derivative as
    autodiff (tests/test_layers.py).
    """
    y = tf.nn.gelu(x, approximate=True)

    def grad(dy):
        if x.shape.rank is None or x.shape[-1] is None:
            return _gelu_grad(x, dy)
        if x.shape.is_fully_defined() and not tf.executing_eagerly():
            return _gelu_grad_fused(x, dy)  # a graph's fixed shape: one compilation
        return _gelu_grad_bucketed(x, dy)  # eager calls too: a shape each would compile each

    return y, grad


def _gelu_grad(x, dy):
    """dy times GELU's derivative at x, computed in float32, in dy's dtype."""
    xf = tf.cast(x, tf.float32)
    x2 = xf * xf
    t = tf.tanh(_GELU_C * (xf + _GELU_A * x2 * xf))
    d = 0.5 * (1.0 + t) + 0.5 * xf * (1.0 - t * t) * (_GELU_C * (1.0 + 3.0 * _GELU_A * x2))
    return tf.cast(tf.cast(dy, tf.float32) * d, dy.dtype)


_gelu_grad_fused = tf.function(_gelu_grad, jit_compile=True, reduce_retracing=True)


def _gelu_grad_bucketed(x, dy):
    """`_gelu_grad_fused` where the number of rows (tokens) is known only when the graph runs
    (or each eager call brings its own): the rows are padded up to a multiple of
    max(64, 2^(floor(log2 rows) - 3)) (from 512 rows on, 8 sizes per octave and at most 12.5%
    more rows; below, a multiple of 64; none added to a multiple), so XLA compiles once per
    size, not once per batch; the padding rows are cut off again (a pad of x and dy and a
    slice: three copies besides the fused pass). Elementwise, so each row's values are the
    fused function's. The octave is computed in float64: exact for any row count."""
    width = x.shape[-1]
    shape = tf.shape(x)
    rows_x, rows_dy = tf.reshape(x, [-1, width]), tf.reshape(dy, [-1, width])
    n = tf.shape(rows_x)[0]
    octave = tf.floor(tf.math.log(tf.cast(tf.maximum(n, 1), tf.float64)) / math.log(2.0))
    step = tf.cast(tf.maximum(tf.constant(64.0, tf.float64), tf.pow(tf.constant(2.0, tf.float64),
                                                                    octave - 3.0)), tf.int32)
    pad = [[0, (step - n % step) % step], [0, 0]]
    out = _gelu_grad_fused(tf.pad(rows_x, pad), tf.pad(rows_dy, pad))
    return tf.reshape(out[:n], shape)
