"""The post-LN transformer block of ALBERT, and the encoder that reuses it across depth.

A block is an attention sublayer followed by a feed-forward sublayer, each ending in
`LayerNorm(residual + sublayer(x))` (post-LN, as BERT and the official ALBERT code). The two
sublayers are separate Keras layers because the paper's sharing modes (Table 5) share them
independently: shared-attention reuses one attention sublayer across layers while each layer has
its own FFN, and shared-FFN the reverse.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras.src.backend import AutocastScope

from albert_tf.config import (ATTENTION_SHARED_MODES, FFN_SHARED_MODES, SHARING_MODES,
                              layer_group)
from albert_tf.layers.common import (Dense, add_bias, gelu_tanh_lean, get_activation,
                                     truncated_normal)

# Added to the attention logits of padded keys (official value; HF uses dtype-min, which gives
# the same softmax because exp(-10000) underflows to 0 in float32).
MASK_ADDER = -10000.0

# Cast a shared sublayer's weights once per forward pass under mixed precision
# (`AlbertEncoder._cast_shared_weights`); False: on every call, as Keras does (the baseline of
# `bench.compare`'s `albert_tf_keras_dense`).
CAST_SHARED_WEIGHTS_ONCE = True


def _dropout(layer: keras.layers.Dropout, x, training, seed=None, token_indices=None,
             padded_shape=None):
    """`layer(x, training=training)`, or with `seed` (int [2], drawn beforehand from the layer's
    own generator by `_draw_seed`) the same mask without touching the generator: what
    `keras.layers.Dropout` computes after drawing that seed, so a recomputed forward pass
    (`AlbertEncoder`'s `recompute`) replays the masks of the first one bit for bit.

    With `token_indices` (x: the real tokens [tokens, H] of a `padded_shape` [batch, seq, H]
    batch, `remove_padding`), the mask is the padded layout's mask at those tokens: the
    uniform draw covers [batch, seq, H] and is gathered, so a training step drops the same
    units with and without `remove_padding` (equal results, not only the same distribution)."""
    if seed is None:
        return layer(x, training=training)
    if seed.dtype != tf.int32:  # as Keras casts its int64 generator state
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    if token_indices is None:
        return tf.nn.experimental.stateless_dropout(x, rate=layer.rate,
                                                    noise_shape=tf.shape(x), seed=seed)

    def gathered_uniform(shape, dtype):
        del shape  # the real tokens' [tokens, H]: the draw covers the padded layout
        uniform = tf.random.stateless_uniform(padded_shape, seed=seed, dtype=dtype)
        return tf.gather_nd(uniform, token_indices)

    return tf.nn.experimental.general_dropout(x, rate=layer.rate,
                                              uniform_sampler=gathered_uniform)


def _project(dense: Dense, x, weights=None):
    """`dense(x)`; with `weights`, its (kernel, bias) already in the compute dtype
    (`_cast_once`), the ops `Dense` runs on its autocast variables: the same values."""
    if weights is None:
        return dense(x)
    kernel, bias = weights
    x = tf.cast(x, kernel.dtype)  # as Keras casts a layer's floating inputs
    return add_bias(keras.ops.matmul(x, kernel), bias)


# TensorFlow's tape sums a tensor's gradients early, to free memory, once more than this many
# are waiting and they hold more than this many bytes (counted 4 per element): tape.h.
_TAPE_AGGREGATE_COUNT, _TAPE_AGGREGATE_BYTES = 4, 128 * 1024 * 1024


def _add_n_in_order(xs):
    """`tf.add_n(xs)` with the additions in the CPU `AddN` kernel's order, whatever compiles
    it: the first n mod 8 inputs (8 where that is 0, 9 where it is 1 and n > 8) left to right,
    then each further 8 summed left to right and added to the total."""
    first = len(xs) % 8 or 8
    if first == 1 and len(xs) > 8:
        first = 9
    total = xs[0]
    for x in xs[1:first]:
        total = total + x
    for start in range(first, len(xs), 8):
        chunk = xs[start]
        for x in xs[start + 1:start + 8]:
            chunk = chunk + x
        total = total + chunk
    return total


def _sum_in_float32(*grads):
    """The float32 sum of `grads` (in the order autodiff delivers them), each cast to float32
    first, with the additions autodiff makes for a float32 variable read once per call: the
    tape's early sums where they would happen and `AddN`'s order in each (bit for bit)."""
    pending, elements = [], grads[0].shape.num_elements()
    for grad in grads:
        pending.append(tf.cast(grad, tf.float32))
        if (len(pending) > _TAPE_AGGREGATE_COUNT
                and len(pending) * elements * 4 > _TAPE_AGGREGATE_BYTES):
            pending = [_add_n_in_order(pending)]
    return _add_n_in_order(pending)


_sum_in_float32_fused = tf.function(_sum_in_float32, jit_compile=True)


def _cast_once(denses, dtype, uses):
    """The kernels and biases of `denses` cast to `dtype` once, for `uses` calls of a shared
    sublayer: a list of `uses` lists of (kernel, bias), one per dense.

    Under mixed precision Keras casts a layer's float32 variables on every call: a shared block
    called L times casts its weights L times and each call's weight gradient back, and the L
    float32 gradients are then summed. Here the forward casts once; the gradient casts each
    call's gradient to float32 and sums them in float32 as autodiff does (last call first,
    `_sum_in_float32`), in one fused pass: the same values."""
    with AutocastScope(None):  # the float32 variables themselves (read once, on the tape)
        values = [tf.convert_to_tensor(v) for d in denses for v in (d.kernel, d.bias)]
    n = len(values)

    @tf.custom_gradient
    def fan_out(*values):
        cast = [tf.cast(v, dtype) for v in values]

        def grad(*dys):
            return [_sum_in_float32_fused(*[dys[u * n + i] for u in reversed(range(uses))])
                    for i in range(n)]

        return [c for _ in range(uses) for c in cast], grad

    flat = fan_out(*values)
    return [[(flat[u * n + 2 * j], flat[u * n + 2 * j + 1]) for j in range(len(denses))]
            for u in range(uses)]


def _plain_dense(dense) -> bool:
    """Whether `_project` may run `dense` on cast weights: ours (`Dense`), a bias, no LoRA, not
    quantized, no activation."""
    return (isinstance(dense, Dense) and dense.use_bias
            and dense.activation in (None, keras.activations.linear)
            and not getattr(dense, "lora_enabled", False)
            and getattr(dense, "quantization_mode", None) is None)


def _draw_seed(layer: keras.layers.Dropout, training):
    """The seed `layer` would draw on this call (advancing its generator), or None where it
    draws nothing (not training, or rate 0)."""
    if training is True and layer.rate > 0:
        return layer.seed_generator.next()
    return None


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertAttention(keras.layers.Layer):
    """Multi-head self-attention sublayer: `LayerNorm(x + dropout(W_o . attention(x)))`.

    Query/key/value/output are [H, H] dense kernels, the layout of the official checkpoint
    (`attention_1/self/{query,key,value}`, `attention_1/output/dense`). Scores and softmax are
    computed in float32 whatever the compute dtype.

    Args:
        hidden_size: H.
        num_attention_heads: heads; must divide H.
        attention_probs_dropout_prob: dropout on the attention probabilities.
        hidden_dropout_prob: dropout on the projected output, before the residual.
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_epsilon: LayerNorm epsilon (official: 1e-12).

    Call args:
        x: [batch, seq, H]; or [tokens, H], the real tokens only, with `token_indices`.
        attention_bias: float [batch, 1, 1, seq]; 0 for real tokens, -10000 for padding.
        token_indices: optional int32 [tokens, 2], the (row, position) of each row of `x` (see
            `AlbertEncoder`'s `remove_padding`): the projections run on real tokens only and
            only the attention itself sees the padded [batch, seq] layout.
        dropout_seeds: optional (probs seed, output seed), drawn beforehand (`draw_seeds`)
            for a forward pass that must be replayed exactly (`AlbertEncoder`'s `recompute`).

    Returns:
        [batch, seq, H], or [tokens, H] with `token_indices`.
    """

    def __init__(self, hidden_size, num_attention_heads, attention_probs_dropout_prob=0.0,
                 hidden_dropout_prob=0.0, initializer_range=0.02, layer_norm_epsilon=1e-12,
                 use_einsum=False, **kwargs):
        super().__init__(**kwargs)
        # Attention as einsums instead of transposes + batched matmuls (the official
        # --use_einsum; the same values).
        self.use_einsum = bool(use_einsum)
        if hidden_size % num_attention_heads:
            raise ValueError(
                "`hidden_size` must be a multiple of `num_attention_heads`. Received: "
                f"hidden_size={hidden_size}, num_attention_heads={num_attention_heads}")
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.hidden_dropout_prob = hidden_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.head_size = hidden_size // num_attention_heads

        init = truncated_normal(initializer_range)
        dense = lambda name: Dense(  # noqa: E731
            hidden_size, kernel_initializer=init, dtype=self.dtype_policy, name=name)
        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.output_dense = dense("output_dense")
        self.attention_dropout = keras.layers.Dropout(
            attention_probs_dropout_prob, dtype=self.dtype_policy, name="attention_dropout")
        self.output_dropout = keras.layers.Dropout(
            hidden_dropout_prob, dtype=self.dtype_policy, name="output_dropout")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype="float32", name="LayerNorm")

    def build(self, x_shape, attention_bias_shape=None):
        shape = (None, None, self.hidden_size)
        for layer in (self.query, self.key, self.value, self.output_dense):
            layer.build(shape)
        self.layer_norm.build(shape)
        self.built = True

    def dense_layers(self):
        return [self.query, self.key, self.value, self.output_dense]

    def _split_heads(self, x, batch, seq):
        return tf.reshape(x, [batch, seq, self.num_attention_heads, self.head_size])

    def draw_seeds(self, training):
        return (_draw_seed(self.attention_dropout, training),
                _draw_seed(self.output_dropout, training))

    def call(self, x, attention_bias=None, training=None, token_indices=None,
             dropout_seeds=(None, None), cast_weights=None):
        if token_indices is None:
            batch, seq = tf.shape(x)[0], tf.shape(x)[1]
            padded = lambda t: t  # noqa: E731
        else:
            if attention_bias is None:
                raise ValueError("`token_indices` needs `attention_bias` (its shape gives the "
                                 "padded [batch, seq] layout).")
            batch, seq = tf.shape(attention_bias)[0], tf.shape(attention_bias)[3]
            shape = tf.stack([batch, seq, self.hidden_size])
            padded = lambda t: tf.scatter_nd(token_indices, t, shape)  # noqa: E731
        # Heads to the batch dimension with one transpose each, K straight to [b, n, d, k],
        # then plain batched matmuls: the same values as the einsums "bqnd,bknd->bnqk" and
        # "bnqk,bknd->bqnd", whose lowering transposes more slowly (`python -m
        # bench.attention_layout`; figures in docs/benchmarks.md).
        # `use_einsum` (the official flag) computes them as those einsums.
        weights = cast_weights or (None,) * 4  # query, key, value, output: `dense_layers`
        q = self._split_heads(padded(_project(self.query, x, weights[0])), batch, seq)
        k = self._split_heads(padded(_project(self.key, x, weights[1])), batch, seq)
        v = self._split_heads(padded(_project(self.value, x, weights[2])), batch, seq)
        if self.use_einsum:
            scores = tf.einsum("bqnd,bknd->bnqk", q, k)
        else:
            q, k = tf.transpose(q, [0, 2, 1, 3]), tf.transpose(k, [0, 2, 3, 1])
            v = tf.transpose(v, [0, 2, 1, 3])
            scores = tf.matmul(q, k)  # [b, n, q, k]
        scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.head_size))
        if attention_bias is not None:
            scores += tf.cast(attention_bias, tf.float32)
        probs = tf.nn.softmax(scores, axis=-1)
        probs = _dropout(self.attention_dropout, tf.cast(probs, self.compute_dtype), training,
                         dropout_seeds[0])
        if self.use_einsum:
            context = tf.einsum("bnqk,bknd->bqnd", probs, v)
        else:
            context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])  # [b, q, n, d]
        context = tf.reshape(context, [batch, seq, self.hidden_size])
        if token_indices is not None:
            context = tf.gather_nd(context, token_indices)
        out = _dropout(self.output_dropout, _project(self.output_dense, context, weights[3]),
                       training, dropout_seeds[1], token_indices,
                       None if token_indices is None else shape)
        return self.layer_norm(out + tf.cast(x, out.dtype))

    def compute_output_shape(self, x_shape, attention_bias_shape=None, token_indices_shape=None):
        return tuple(x_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            hidden_dropout_prob=self.hidden_dropout_prob,
            initializer_range=self.initializer_range, layer_norm_epsilon=self.layer_norm_epsilon,
            use_einsum=self.use_einsum)
        return config


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertFeedForward(keras.layers.Layer):
    """Feed-forward sublayer: `LayerNorm(x + dropout(W_2 . act(W_1 . x)))`.

    Official names: `ffn_1/intermediate/dense` (W_1), `ffn_1/intermediate/output/dense` (W_2),
    `LayerNorm_1`.

    Args:
        hidden_size: H.
        intermediate_size: I.
        hidden_act: official activation name ("gelu" = tanh approximation).
        hidden_dropout_prob: dropout before the residual.
        initializer_range: stddev of the truncated-normal initializer.
        layer_norm_epsilon: LayerNorm epsilon (official: 1e-12).
    """

    def __init__(self, hidden_size, intermediate_size, hidden_act="gelu", hidden_dropout_prob=0.0,
                 initializer_range=0.02, layer_norm_epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon

        init = truncated_normal(initializer_range)
        self.activation = get_activation(hidden_act)
        self.intermediate = Dense(
            intermediate_size, kernel_initializer=init, dtype=self.dtype_policy,
            name="intermediate")
        self.output_dense = Dense(
            hidden_size, kernel_initializer=init, dtype=self.dtype_policy, name="output_dense")
        self.dropout = keras.layers.Dropout(hidden_dropout_prob, dtype=self.dtype_policy,
                                            name="dropout")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype="float32", name="LayerNorm_1")

    def build(self, input_shape):
        self.intermediate.build((None, None, self.hidden_size))
        self.output_dense.build((None, None, self.intermediate_size))
        self.layer_norm.build((None, None, self.hidden_size))
        self.built = True

    def draw_seeds(self, training):
        return (_draw_seed(self.dropout, training),)

    def dense_layers(self):
        return [self.intermediate, self.output_dense]

    def call(self, x, training=None, dropout_seeds=(None,), token_indices=None,
             padded_shape=None, cast_weights=None):
        weights = cast_weights or (None, None)  # intermediate, output: `dense_layers`
        h = _project(self.intermediate, x, weights[0])
        # Training keeps only GELU's input for its gradient (gelu_tanh_lean: same forward bits);
        # inference and export use the plain op.
        lean = training is True and self.hidden_act in ("gelu", "gelu_new")
        h = gelu_tanh_lean(h) if lean else self.activation(h)
        out = _dropout(self.dropout, _project(self.output_dense, h, weights[1]), training,
                       dropout_seeds[0], token_indices, padded_shape)
        return self.layer_norm(out + tf.cast(x, out.dtype))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act, hidden_dropout_prob=self.hidden_dropout_prob,
            initializer_range=self.initializer_range, layer_norm_epsilon=self.layer_norm_epsilon)
        return config


def _owner_of_layer(layer_index, shared, num_hidden_layers, num_hidden_groups):
    """Index of the parameter owner of a sublayer at depth `layer_index`: its group when the
    sublayer kind is shared, else the layer itself."""
    if shared:
        return layer_group(layer_index, num_hidden_layers, num_hidden_groups)
    return layer_index


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertEncoder(keras.layers.Layer):
    """Applies `num_hidden_layers` post-LN blocks with ALBERT's cross-layer sharing.

    Layer l (0-based) runs `inner_group_num` blocks in sequence. Each block is an attention
    sublayer then an FFN sublayer. A shared sublayer kind is owned by group `int(l / L * G)`; an
    unshared kind by layer l. `sharing`:

    - "all": attention and FFN shared (official ALBERT; one block reused L times when G = 1);
    - "attention": attention shared, each layer its own FFN;
    - "ffn": FFN shared, each layer its own attention;
    - "none": every layer its own block (BERT).

    Sublayers are named `group_{o}_inner_group_{i}_attention` / `..._ffn`, where o is the owner:
    the official checkpoint scope `transformer/group_{o}/inner_group_{i}` one-to-one.

    `remove_padding=True` runs every per-token matmul (query/key/value/output projections,
    FFN, LayerNorms) on the real tokens only, gathered by `input_mask` into [tokens, H]; only
    the attention scores and context see the padded [batch, seq] layout. A batch of mixed
    lengths then costs about its number of real tokens, not batch x longest. Outputs at real
    tokens equal the padded computation's (to float rounding); outputs at padding positions are
    0 (the padded computation gives values there that nothing should read). Shapes become
    data-dependent, so leave it off for XLA/TPU; the attribute may be changed before tracing.

    `recompute=True` (training only) keeps only each layer's input for the backward pass and
    runs the layer's forward again there (`tf.recompute_grad`): activation memory of one layer
    instead of L, for about one more forward pass of compute. Dropout seeds are drawn before
    the layer runs and replayed, so the masks, outputs and gradients are those of the plain
    computation, bit for bit.

    Under mixed precision a sublayer called at several depths gets its dense weights cast to
    the compute dtype once per call of the encoder, not once per depth, with the float32
    gradient autodiff gives the per-depth casts (`_cast_once`; `CAST_SHARED_WEIGHTS_ONCE`).

    Call args:
        x: [batch, seq, H], the projected embeddings.
        input_mask: int [batch, seq], 1 for real tokens, 0 for padding (right-padded).

    Returns:
        A list of L + 1 tensors [batch, seq, H]: the input, then every layer's output.
    """

    def __init__(self, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
                 num_hidden_groups=1, inner_group_num=1, sharing="all", hidden_act="gelu",
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                 initializer_range=0.02, layer_norm_epsilon=1e-12, remove_padding=False,
                 recompute=False, use_einsum=False, **kwargs):
        super().__init__(**kwargs)
        if sharing not in SHARING_MODES:
            raise ValueError(f"`sharing` must be one of {SHARING_MODES}. Received: {sharing!r}")
        if not 1 <= num_hidden_groups <= num_hidden_layers:
            raise ValueError(
                "`num_hidden_groups` must be in [1, num_hidden_layers]. Received: "
                f"num_hidden_groups={num_hidden_groups}, num_hidden_layers={num_hidden_layers}")
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.num_hidden_groups = num_hidden_groups
        self.inner_group_num = inner_group_num
        self.sharing = sharing
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.remove_padding = bool(remove_padding)
        self.recompute = bool(recompute)
        self.use_einsum = bool(use_einsum)

        self.attention_shared = sharing in ATTENTION_SHARED_MODES
        self.ffn_shared = sharing in FFN_SHARED_MODES
        num_attention_owners = num_hidden_groups if self.attention_shared else num_hidden_layers
        num_ffn_owners = num_hidden_groups if self.ffn_shared else num_hidden_layers
        common = dict(hidden_dropout_prob=hidden_dropout_prob, initializer_range=initializer_range,
                      layer_norm_epsilon=layer_norm_epsilon, dtype=self.dtype_policy)
        # Flat lists indexed owner * inner_group_num + inner.
        self.attention_layers = [
            AlbertAttention(hidden_size, num_attention_heads,
                            attention_probs_dropout_prob=attention_probs_dropout_prob,
                            use_einsum=use_einsum,
                            name=f"group_{o}_inner_group_{i}_attention", **common)
            for o in range(num_attention_owners) for i in range(inner_group_num)]
        self.ffn_layers = [
            AlbertFeedForward(hidden_size, intermediate_size, hidden_act=hidden_act,
                              name=f"group_{o}_inner_group_{i}_ffn", **common)
            for o in range(num_ffn_owners) for i in range(inner_group_num)]

    def attention_owner(self, layer_index: int) -> int:
        return _owner_of_layer(layer_index, self.attention_shared, self.num_hidden_layers,
                               self.num_hidden_groups)

    def ffn_owner(self, layer_index: int) -> int:
        return _owner_of_layer(layer_index, self.ffn_shared, self.num_hidden_layers,
                               self.num_hidden_groups)

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        # Keras 3 holds the sublayer lists in its own TrackedList, which TensorFlow's object
        # graph does not traverse for checkpoints: without this, `tf.train.Checkpoint(model=m)`
        # silently leaves every block out (a checkpoint that also holds the optimizer reaches
        # the variables through its slots, which hid it). Each block is a named child.
        children = super()._trackable_children(save_type, **kwargs)
        for layer in self.attention_layers + self.ffn_layers:
            children.setdefault(layer.name, layer)
        return children

    def build(self, x_shape, input_mask_shape=None):
        for layer in self.attention_layers + self.ffn_layers:
            layer.build((None, None, self.hidden_size))
        self.built = True

    def call(self, x, input_mask, training=None):
        mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
        attention_bias = (1.0 - mask) * MASK_ADDER
        token_indices = shape = None
        if self.remove_padding:
            token_indices = tf.cast(tf.where(tf.not_equal(input_mask, 0)), tf.int32)
            shape = tf.shape(x)
            x = tf.gather_nd(x, token_indices)
        inner = self.inner_group_num
        blocks = [[(self.attention_layers[self.attention_owner(depth) * inner + i],
                    self.ffn_layers[self.ffn_owner(depth) * inner + i]) for i in range(inner)]
                  for depth in range(self.num_hidden_layers)]
        cast_weights = self._cast_shared_weights(blocks)
        hidden_states = [x]
        for layer_blocks in blocks:
            seeds = [(attention.draw_seeds(training), ffn.draw_seeds(training))
                     for attention, ffn in layer_blocks]
            # Each sublayer's weights cast for this call, or None (`_cast_shared_weights`); as
            # arguments, so `tf.recompute_grad` differentiates them.
            weights = [(cast_weights[id(attention)].pop(0) if id(attention) in cast_weights
                        else None,
                        cast_weights[id(ffn)].pop(0) if id(ffn) in cast_weights else None)
                       for attention, ffn in layer_blocks]
            flat = tf.nest.flatten(weights)
            tensors = [t for t in flat if t is not None]

            def layer(h, *tensors, blocks=layer_blocks, seeds=seeds, structure=weights,
                      flat=flat):
                given = iter(tensors)
                weights = tf.nest.pack_sequence_as(
                    structure, [None if t is None else next(given) for t in flat])
                for (attention, ffn), (attention_seeds, ffn_seeds), (a_w, f_w) in zip(
                        blocks, seeds, weights):
                    h = attention(h, attention_bias, training=training,
                                  token_indices=token_indices, dropout_seeds=attention_seeds,
                                  cast_weights=a_w)
                    h = ffn(h, training=training, dropout_seeds=ffn_seeds,
                            token_indices=token_indices, padded_shape=shape, cast_weights=f_w)
                return h

            run = tf.recompute_grad(layer) if self.recompute and training is True else layer
            x = run(x, *tensors)
            hidden_states.append(x)
        if token_indices is not None:
            hidden_states = [tf.scatter_nd(token_indices, h, shape) for h in hidden_states]
        return hidden_states

    def _cast_shared_weights(self, blocks):
        """Under mixed precision, each sublayer called more than once gets its dense weights
        cast to the compute dtype once for all its calls (`_cast_once`: the same values,
        fewer casts): {id(sublayer): [per call, in order, a list of (kernel, bias)]}. Empty
        where the variables are already in the compute dtype."""
        if not CAST_SHARED_WEIGHTS_ONCE or self.compute_dtype == self.variable_dtype:
            return {}
        calls = {}
        for layer_blocks in blocks:
            for sublayers in layer_blocks:
                for sublayer in sublayers:
                    calls.setdefault(id(sublayer), [sublayer, 0])[1] += 1
        return {key: _cast_once(sublayer.dense_layers(), sublayer.compute_dtype, uses)
                for key, (sublayer, uses) in calls.items()
                if uses > 1 and all(_plain_dense(d) for d in sublayer.dense_layers())}

    def compute_output_shape(self, x_shape, input_mask_shape=None):
        return [tuple(x_shape)] * (self.num_hidden_layers + 1)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size, num_hidden_groups=self.num_hidden_groups,
            inner_group_num=self.inner_group_num, sharing=self.sharing,
            hidden_act=self.hidden_act, hidden_dropout_prob=self.hidden_dropout_prob,
            attention_probs_dropout_prob=self.attention_probs_dropout_prob,
            initializer_range=self.initializer_range, layer_norm_epsilon=self.layer_norm_epsilon,
            remove_padding=self.remove_padding, recompute=self.recompute,
            use_einsum=self.use_einsum)
        return config
