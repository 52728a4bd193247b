"""Every layer serializes: get_config() holds exactly the constructor arguments, from_config()
rebuilds an equal layer, and the rebuilt layer with the same weights computes the same values."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.layers import (MASK_ADDER, AlbertAttention, AlbertEmbedding, AlbertEncoder,
                              AlbertFeedForward, AlbertMaskedLMHead)

BASE_KEYS = {"name", "trainable", "dtype"}  # keras.layers.Layer's own constructor kwargs
RNG = np.random.default_rng(7)


def _x(*shape):
    return tf.constant(RNG.normal(size=shape).astype("float32"))


def _ids(high, *shape):
    return tf.constant(RNG.integers(0, high, shape).astype("int32"))


def _layers_and_inputs():
    mask = np.ones((2, 9), np.int32)
    mask[1, 6:] = 0
    bias = tf.constant(((1 - mask) * MASK_ADDER)[:, None, None, :].astype("float32"))
    embedding = keras.layers.Embedding(31, 6, name="word_embeddings")
    return [
        (AlbertEmbedding(31, 6, 14, 12, 3, hidden_dropout_prob=0.1, initializer_range=0.3),
         (_ids(31, 2, 9), _ids(3, 2, 9))),
        (AlbertAttention(14, 2, attention_probs_dropout_prob=0.05, initializer_range=0.3),
         (_x(2, 9, 14), bias)),
        (AlbertFeedForward(14, 23, hidden_act="relu", initializer_range=0.3), (_x(2, 9, 14),)),
        (AlbertEncoder(14, 3, 2, 23, num_hidden_groups=2, inner_group_num=2, sharing="ffn",
                       initializer_range=0.3), (_x(2, 9, 14), tf.constant(mask))),
        (AlbertMaskedLMHead(31, 6, 14, embedding, initializer_range=0.3),
         (_x(2, 9, 14), _ids(9, 2, 4))),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(5))
def test_get_config_is_exactly_the_constructor_arguments(index):
    layer, inputs = _layers_and_inputs()[index]
    layer(*inputs)
    config = layer.get_config()
    params = set(inspect.signature(type(layer).__init__).parameters) - {"self", "kwargs"}
    assert set(config) == params | BASE_KEYS
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    clone(*inputs)
    assert len(clone.weights) == len(layer.weights)
    for source, target in zip(layer.weights, clone.weights):
        assert source.shape == target.shape
        target.assign(source)
    a, b = layer(*inputs), clone(*inputs)
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def test_attention_matches_numpy_with_padding():
    """The attention sublayer against a NumPy transcription of the official formula."""
    layer = AlbertAttention(14, 2, initializer_range=0.3)
    x = _x(2, 9, 14)
    mask = np.ones((2, 9), np.float32)
    mask[1, 5:] = 0
    bias = ((1 - mask) * MASK_ADDER)[:, None, None, :]
    out = layer(x, tf.constant(bias)).numpy()
    for v in layer.layer_norm.weights:  # non-trivial gamma/beta
        v.assign(RNG.uniform(0.5, 1.5, v.shape).astype("float32"))
    out = layer(x, tf.constant(bias)).numpy()

    xn = x.numpy()
    dense = lambda l, v: v @ l.kernel.numpy() + l.bias.numpy()  # noqa: E731
    split = lambda v: v.reshape(2, 9, 2, 7).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = (split(dense(l, xn)) for l in (layer.query, layer.key, layer.value))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(7) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(2, 9, 14)
    y = dense(layer.output_dense, context) + xn
    mean, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    expected = ((y - mean) / np.sqrt(var + 1e-12) * layer.layer_norm.gamma.numpy()
                + layer.layer_norm.beta.numpy())
    np.testing.assert_allclose(out, expected, atol=2e-5)
    # Padded keys get no attention: changing them leaves the real rows of sequence 1 unchanged.
    x2 = xn.copy()
    x2[1, 5:] = RNG.normal(size=(4, 14))
    out2 = layer(tf.constant(x2), tf.constant(bias)).numpy()
    np.testing.assert_allclose(out2[1, :5], out[1, :5], atol=1e-6)
    assert np.abs(out2[1, 5:] - out[1, 5:]).max() > 0.1


def test_feed_forward_uses_tanh_gelu():
    layer = AlbertFeedForward(14, 23, initializer_range=0.3)
    x = _x(2, 9, 14)
    out = layer(x).numpy()
    xn = x.numpy()
    h = xn @ layer.intermediate.kernel.numpy() + layer.intermediate.bias.numpy()
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    y = h @ layer.output_dense.kernel.numpy() + layer.output_dense.bias.numpy() + xn
    expected = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(out, expected, atol=2e-5)


def test_embedding_rejects_overlong_sequence():
    layer = AlbertEmbedding(31, 6, 14, max_position_embeddings=8, type_vocab_size=2)
    with pytest.raises(ValueError, match=r"sequence length 9 exceeds max_position_embeddings=8"):
        layer(_ids(31, 2, 9), _ids(2, 2, 9))


def test_embedding_equal_e_and_h_has_no_projection():
    """Official rule: E == H creates no embedding_hidden_mapping_in; the output is the
    LayerNorm of the summed embeddings."""
    layer = AlbertEmbedding(31, 14, 14, 12, 2)
    ids, seg = _ids(31, 2, 9), _ids(2, 2, 9)
    out = layer(ids, seg).numpy()
    assert layer.projection is None and len(layer.weights) == 5
    x = (layer.word_embeddings.embeddings.numpy()[ids.numpy()]
         + layer.token_type_embeddings.embeddings.numpy()[seg.numpy()]
         + layer.position_embeddings.embeddings.numpy()[:9][None])
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(out, expected, atol=2e-5)
    assert len(AlbertEmbedding(31, 6, 14, 12, 2)(ids, seg).shape) == 3  # E != H still projects


def _ragged_backbone(**config):
    """A tiny backbone (every dimension distinct, 2 groups of 2 inner blocks over 3 layers) and
    a right-padded batch of rows of lengths 9, 4, 1 and 6: (model, mask, inputs)."""
    from albert_tf import AlbertBackbone, AlbertConfig

    model = AlbertBackbone(AlbertConfig(
        vocab_size=37, embedding_size=6, hidden_size=14, num_hidden_layers=3,
        num_attention_heads=2, intermediate_size=23, num_hidden_groups=2, inner_group_num=2,
        initializer_range=0.3, **config))
    mask = (np.arange(9)[None, :] < np.array([9, 4, 1, 6])[:, None]).astype(np.int32)
    inputs = {"input_ids": tf.constant(RNG.integers(1, 37, (4, 9)).astype(np.int32) * mask),
              "input_mask": tf.constant(mask),
              "segment_ids": tf.constant((np.arange(9)[None, :] >= 3).astype(np.int32) * mask)}
    return model, mask, inputs


@pytest.mark.slow
@pytest.mark.parametrize("sharing", ["all", "attention", "none"])
def test_remove_padding_equals_the_padded_encoder(sharing):
    """`remove_padding` runs the per-token matmuls on the real tokens only: every hidden state at
    a real token and every gradient equal the padded computation's to 1e-5; padding rows are 0.
    Rows of lengths 9, 4, 1 and 6 (one full row, one of a single token)."""
    model, mask, inputs = _ragged_backbone(sharing=sharing)
    weights = tf.constant((RNG.normal(size=(4, 9, 14)) * mask[..., None]).astype(np.float32))

    def run(remove_padding):
        model.encoder.remove_padding = remove_padding
        with tf.GradientTape() as tape:
            out = tf.function(lambda x: model(x, training=False))(inputs)
            loss = (tf.reduce_sum(out["sequence_output"] * weights)
                    + tf.reduce_sum(out["pooled_output"] ** 2))
        grads = tape.gradient(loss, model.trainable_variables)
        return out, [tf.convert_to_tensor(g).numpy() for g in grads]

    padded, padded_grads = run(False)
    removed, removed_grads = run(True)
    real = mask.astype(bool)
    assert len(removed["hidden_states"]) == 4
    for a, b in zip(padded["hidden_states"], removed["hidden_states"]):
        np.testing.assert_allclose(b.numpy()[real], a.numpy()[real], atol=1e-5)
        assert np.all(b.numpy()[~real] == 0)
    np.testing.assert_allclose(removed["pooled_output"], padded["pooled_output"], atol=1e-5)
    assert len(removed_grads) == len(padded_grads) == len(model.trainable_variables)
    for a, b in zip(padded_grads, removed_grads):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)
    assert max(np.abs(g).max() for g in padded_grads) > 1e-2  # the gradients are not all ~0


def test_gelu_tanh_lean_equals_autodiff():
    """The training GELU's hand-written gradient: the forward is tf.nn.gelu's bit for bit, the
    gradient as close to the float64 derivative as autodiff's over [-10, 10] (both tails and 0
    included); in bfloat16 within one rounding of the exact derivative."""
    from albert_tf.layers.common import gelu_tanh_lean

    x = tf.constant(np.concatenate([np.linspace(-10, 10, 2001), [0.0, 1e-7, -1e-7]]),
                    tf.float32)
    dy = tf.constant(np.random.default_rng(3).normal(size=x.shape), tf.float32)

    def grad(fn, x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x, output_gradients=dy)

    plain = lambda t: tf.nn.gelu(t, approximate=True)  # noqa: E731
    y, g = grad(gelu_tanh_lean, x, dy)
    y_ref, g_ref = grad(plain, x, dy)
    np.testing.assert_array_equal(y.numpy(), y_ref.numpy())
    # Against the float64 derivative: as close as autodiff's (both lose digits to 1 + tanh
    # cancelling in the left tail) and within 2e-5 of it.
    xd = x.numpy().astype(np.float64)
    c, a = np.sqrt(2 / np.pi), 0.044715
    t = np.tanh(c * (xd + a * xd ** 3))
    exact = dy.numpy() * (0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * c * (1 + 3 * a * xd ** 2))
    ours, autodiff = np.abs(g.numpy() - exact).max(), np.abs(g_ref.numpy() - exact).max()
    assert ours <= max(autodiff, 1e-6), (ours, autodiff)
    np.testing.assert_allclose(g.numpy(), g_ref.numpy(), atol=2e-5)
    assert np.abs(exact).max() > 1.0
    xb, dyb = tf.cast(x, tf.bfloat16), tf.cast(dy, tf.bfloat16)
    yb, gb = grad(gelu_tanh_lean, xb, dyb)
    np.testing.assert_array_equal(yb.numpy(), plain(xb).numpy())
    xd = tf.cast(xb, tf.float64).numpy()
    t = np.tanh(c * (xd + a * xd ** 3))
    exact = tf.cast(dyb, tf.float64).numpy() * (
        0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * c * (1 + 3 * a * xd ** 2))
    # One bfloat16 rounding (half a unit in the last place); the left tail's float32
    # cancellation, as in float32, below 1e-5.
    np.testing.assert_allclose(tf.cast(gb, tf.float64).numpy(), exact, rtol=2 ** -8, atol=1e-5)


def _xla_calls(concrete) -> int:
    """Calls of XLA-compiled functions in a traced function's graph and its functions."""
    graph = concrete.graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return sum(1 for n in nodes if n.attr["_XlaMustCompile"].b)


def test_gelu_gradient_fused_where_the_shape_is_known_and_equal_either_way():
    """The training GELU's backward runs as one XLA-compiled function: directly where x's
    shape is known when the graph is built (padded batches), on rows padded to a bucket where
    only the token count is unknown (the padding-free layers: bit for bit the direct one,
    whatever the count, 0 included; eager calls too, without a compilation per shape), and as
    TensorFlow ops where even the last dimension is unknown. Each is picked where it should be,
    different inputs give different gradients, and the fused values agree with the ops within a
    float32 rounding of the value (the left tail, where 1 + tanh cancels, within 2e-5, the
    bound the test above allows autodiff) and within one bfloat16 rounding in bfloat16."""
    from albert_tf.layers import common
    from albert_tf.layers.common import gelu_tanh_lean

    rng = np.random.default_rng(11)
    x = rng.normal(scale=3.0, size=(100, 96)).astype("float32")
    x[0, :5] = [0.0, 1e-7, -1e-7, 10.0, -10.0]
    dy = rng.normal(size=x.shape).astype("float32")

    def backward(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = gelu_tanh_lean(x)
        return tape.gradient(y, x, output_gradients=dy)

    def traced(shape, dtype):
        spec = tf.TensorSpec(shape, dtype)
        return tf.function(backward).get_concrete_function(spec, spec)

    for dtype in (tf.float32, tf.bfloat16):
        known, rows = traced(x.shape, dtype), traced([None, x.shape[1]], dtype)
        ops = traced([None, None], dtype)
        assert [_xla_calls(f) for f in (known, rows, ops)] == [1, 1, 0]
        xs, dys = tf.cast(x, dtype), tf.cast(dy, dtype)
        fused = tf.cast(known(xs, dys), tf.float64).numpy()
        plain = tf.cast(ops(xs, dys), tf.float64).numpy()
        for n in (100, 64, 63, 1, 0):  # padded to 128, a bucket's own size, padded, 1, none
            np.testing.assert_array_equal(tf.cast(rows(xs[:n], dys[:n]), tf.float64).numpy(),
                                          fused[:n])
        # Eagerly every shape is known: the rows go to buckets too, so 20 row counts retrace
        # nothing after the first two (reduce_retracing) and compile once, with the same bits.
        traces = common._gelu_grad_fused.experimental_get_tracing_count()
        for n in range(10, 30):
            np.testing.assert_array_equal(
                tf.cast(backward(xs[:n], dys[:n]), tf.float64).numpy(), fused[:n])
        assert common._gelu_grad_fused.experimental_get_tracing_count() - traces <= 2
        other = tf.cast(known(xs + tf.cast(0.5, dtype), dys), tf.float64).numpy()
        assert np.abs(other - fused).max() > 0.1
        if dtype == tf.float32:
            np.testing.assert_allclose(fused, plain, rtol=2e-6, atol=2e-5)
        else:  # each the float32 value rounded once to bfloat16: one unit apart at most
            np.testing.assert_allclose(fused, plain, rtol=2 ** -7, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("remove_padding", [False, True])
def test_recompute_replays_dropout_and_equals_the_plain_step(remove_padding, monkeypatch):
    """`recompute` keeps only each layer's input and reruns the layer in the backward pass.
    With dropout on (0.2 hidden, 0.3 attention) the masks are replayed, not redrawn: the
    outputs equal the plain training forward exactly, every gradient to 1e-5, and every dropout
    generator ends in the same state (each drew). Dropout is on: training outputs differ from
    inference's. The layers really run twice: the FFN's forward calls while tracing the step."""
    model, mask, inputs = _ragged_backbone(sharing="all", hidden_dropout_prob=0.2,
                                           attention_probs_dropout_prob=0.3)
    generators = [v for v in model.variables if "seed_generator" in v.path]
    assert len(generators) == 13  # embeddings + 2 attention groups x 2 inner x (2 + 1)
    start = [v.numpy() for v in generators]
    model.encoder.remove_padding = remove_padding

    def run(recompute):
        for variable, value in zip(generators, start):
            variable.assign(value)
        model.encoder.recompute = recompute

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                out = model(x, training=True)
                loss = (tf.reduce_sum(out["sequence_output"] ** 2)
                        + tf.reduce_sum(out["pooled_output"]))
            return out["sequence_output"], tape.gradient(loss, model.trainable_variables)

        calls.clear()
        out, grads = step(inputs)
        runs[recompute] = len(calls)
        return (out.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads],
                [v.numpy() for v in generators])

    # Count the FFN sublayer's forward calls while the step is traced: the recomputing step
    # runs each layer's forward again for the backward pass (6 block applications, twice).
    from albert_tf.layers.transformer import AlbertFeedForward

    calls, runs, ffn_call = [], {}, AlbertFeedForward.call
    monkeypatch.setattr(AlbertFeedForward, "call",
                        lambda self, *a, **k: calls.append(1) or ffn_call(self, *a, **k))
    plain, plain_grads, plain_state = run(False)
    recomputed, recomputed_grads, recomputed_state = run(True)
    assert runs == {False: 6, True: 12}, runs
    np.testing.assert_array_equal(recomputed, plain)
    assert len(recomputed_grads) == len(plain_grads) == len(model.trainable_variables)
    for a, b in zip(plain_grads, recomputed_grads):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5)
    assert max(np.abs(g).max() for g in plain_grads) > 1e-1
    for a, b in zip(plain_state, recomputed_state):
        np.testing.assert_array_equal(a, b)
    assert all((a != b).any() for a, b in zip(start, plain_state))  # every generator drew
    inference = model(inputs, training=False)["sequence_output"].numpy()
    assert np.abs(plain - inference)[mask.astype(bool)].mean() > 0.1  # dropout was on


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16", "float32"])
def test_dense_equals_keras_dense_with_the_bias_gradient_summed_in_float32(policy):
    """Our `Dense` is `keras.layers.Dense` (the same weights give the same outputs and kernel
    gradients, bit for bit, in eager and graph mode) except for the bias gradient under
    bfloat16: it is the float32 sum of the rows rounded once (equal to the float64 sum rounded
    to bfloat16 for all 3,072 units), where TensorFlow's `BiasAddGrad`, which Keras's layer
    gets, accumulates in bfloat16 and rounds most sums wrongly (under a fifth right here, errors
    of many units on sums of some 300). float16 and float32 are Keras's own op."""
    from albert_tf.layers.common import Dense

    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(8, 128, 64)).astype(np.float32))
    dy = tf.constant((rng.normal(size=(8, 128, 3072)) + 0.3).astype(np.float32))
    layers = [cls(3072, kernel_initializer="glorot_uniform", bias_initializer="random_normal",
                  dtype=policy) for cls in (keras.layers.Dense, Dense)]
    for layer in layers:
        layer.build((None, None, 64))
    layers[1].set_weights(layers[0].get_weights())

    def step(layer, x):
        with tf.GradientTape() as tape:
            y = layer(x)
        grads = tape.gradient(y, [layer.kernel, layer.bias], output_gradients=tf.cast(dy, y.dtype))
        return [tf.cast(t, tf.float64) for t in [y] + grads]

    def run(layer, x, graph=False):
        return [np.asarray(t) for t in (tf.function(step) if graph else step)(layer, x)]

    for mode in ("eager", "graph"):
        keras_run, ours = [run(layer, x, mode == "graph") for layer in layers]
        np.testing.assert_array_equal(ours[0], keras_run[0])
        np.testing.assert_array_equal(ours[1], keras_run[1])
        assert np.abs(ours[1]).max() > 1.0
        if policy != "mixed_bfloat16":
            np.testing.assert_array_equal(ours[2], keras_run[2])
            continue
        # the bias gradient: the gradient reaching it is dy in bfloat16, summed over 1,024 rows
        rows = np.asarray(tf.cast(tf.cast(dy, tf.bfloat16), tf.float64)).reshape(-1, 3072)
        exact = np.asarray(tf.cast(tf.cast(rows.sum(0), tf.bfloat16), tf.float64))
        np.testing.assert_array_equal(ours[2], exact)
        assert (keras_run[2] == exact).mean() < 0.2
        assert np.abs(keras_run[2] - exact).max() > 4.0
    other = run(layers[1], x + 1.0)
    assert np.abs(other[0] - ours[0]).max() > 0.1


@pytest.mark.parametrize("mode", ["int8", "float8"])
def test_model_quantize_quantizes_our_dense_layers_as_keras_dense(mode, monkeypatch):
    """`Model.quantize` quantizes every dense layer of the backbone (Keras skips subclasses of
    its `Dense` with only a warning unless they allow it): 8 of 8 here, and the quantized
    backbone answers as the same backbone built of `keras.layers.Dense` quantized alike."""
    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.models import backbone as backbone_module
    from albert_tf.layers import common, embedding, heads, transformer

    config = AlbertConfig(vocab_size=37, embedding_size=6, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=24, initializer_range=0.3)
    inputs = {"input_ids": _ids(37, 2, 9), "input_mask": tf.ones((2, 9), tf.int32),
              "segment_ids": tf.zeros((2, 9), tf.int32)}
    outputs, weights = [], None
    for dense_class in (common.Dense, keras.layers.Dense):
        for module in (transformer, embedding, heads, backbone_module):
            monkeypatch.setattr(module, "Dense", dense_class)
        model = AlbertBackbone(config)
        model(inputs)
        if weights is None:
            weights = model.get_weights()
        model.set_weights(weights)
        before = model(inputs)["sequence_output"].numpy()
        model.quantize(mode, filters=lambda layer: isinstance(layer, keras.layers.Dense))
        denses = [layer for layer in model._flatten_layers()
                  if isinstance(layer, keras.layers.Dense)]
        assert len(denses) == 8 and all(d.quantization_mode == mode for d in denses)
        after = model(inputs)["sequence_output"].numpy()
        assert np.abs(after - before).max() > 1e-4  # quantization changed the answers
        outputs.append(after)
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_float32_sum_of_the_calls_gradients_is_autodiffs_bit_for_bit():
    """`_cast_once`'s gradient sums the calls' gradients as autodiff sums them for a variable
    read once per call: `tf.add_n`'s order for 1 to 41 terms (values over four decades, so
    other orders round differently), and with the tape's early sums: a float32 variable of
    7M elements cast to float16 in each of 12 chained calls (its gradients pass 128 MB at the
    fifth), bit for bit."""
    from albert_tf.layers.transformer import _add_n_in_order, _sum_in_float32_fused

    rng = np.random.default_rng(11)
    for n in range(1, 42):
        xs = [tf.constant(rng.normal(size=4096).astype(np.float32) * 10 ** rng.uniform(-2, 2))
              for _ in range(n)]
        expected = tf.add_n(xs).numpy()
        np.testing.assert_array_equal(tf.function(_add_n_in_order, jit_compile=True)(xs),
                                      expected)
        if n > 2:
            assert not np.array_equal(sum(x.numpy() for x in reversed(xs)), expected)

    size = 7 * 1024 * 1024
    variable = tf.Variable(rng.normal(size=size).astype(np.float32))
    scales = [tf.constant(rng.normal(size=size).astype(np.float16)) for _ in range(12)]
    with tf.GradientTape() as tape:
        h = tf.zeros([size], tf.float16)
        for scale in scales:
            h = tf.tanh(h) + tf.cast(variable, tf.float16) * scale
        loss = tf.reduce_sum(tf.cast(h, tf.float32))
    expected = tape.gradient(loss, variable).numpy()
    # each call's gradient: its scale times the backward of the later calls' tanh chain
    upstream, per_call = tf.ones([size], tf.float16), []
    for scale, h_in in reversed(list(zip(scales, _chain_inputs(variable, scales)))):
        per_call.append(upstream * scale)
        upstream = upstream * (1 - tf.tanh(h_in) ** 2)
    np.testing.assert_array_equal(_sum_in_float32_fused(*per_call).numpy(), expected)
    left_to_right = tf.add_n([tf.cast(g, tf.float32) for g in per_call]).numpy()
    assert not np.array_equal(left_to_right, expected)


def _chain_inputs(variable, scales):
    """The input h of each call of the chain in the test above."""
    h, inputs = tf.zeros(variable.shape, tf.float16), []
    for scale in scales:
        inputs.append(h)
        h = tf.tanh(h) + tf.cast(variable, tf.float16) * scale
    return inputs


def _weight_casts(graph) -> int:
    """Casts of a variable's value to a 16-bit float in a traced graph."""
    return sum(op.type == "Cast" and op.inputs[0].op.type == "ReadVariableOp"
               and op.outputs[0].dtype in (tf.bfloat16, tf.float16)
               for op in graph.get_operations())


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_shared_weights_cast_once_equal_the_casts_on_every_call(policy, monkeypatch):
    """Under mixed precision a shared sublayer's weights are cast once per forward pass, and each
    call's weight gradient is cast back and the L summed in float32 in autodiff's order, in one
    fused pass (`_cast_once`), where Keras casts them on every call. The training step's
    sequence output and every gradient equal the casts on every call bit for bit, with dropout
    on, for each sharing mode (4 layers on one block; 2 groups of 2 inner blocks; attention or
    FFN shared; none), with and without `remove_padding` and `recompute`. Grappler's
    arithmetic rewrites are off for the comparison: they reassociate the 16-bit GELU differently
    in every graph (graph and eager mode differ by them too). The traced step casts each shared
    weight once, not once per call. The cast-once code has no dtype branch, so each sharing
    mode that shares weights runs each padding and recompute variant under one of the two
    policies: float16 on the two "all" configurations, bfloat16 on the attention and FFN modes;
    both run the plain variant on every mode (the bias add has a bfloat16 path,
    `layers.common.add_bias`). "none" shares nothing, so nothing is cast once and both graphs
    are the same: it runs the plain variant only."""
    from albert_tf import AlbertBackbone, AlbertConfig
    from albert_tf.layers import transformer

    # off for this test only: tests/conftest.py puts the suite's options back exactly after it
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    mask = (np.arange(9)[None, :] < np.array([9, 4, 1, 6])[:, None]).astype(np.int32)
    ids = RNG.integers(1, 37, (4, 9)).astype(np.int32) * mask
    for sharing, layers, groups, inner, casts_saved in (
            ("all", 4, 1, 1, 3 * 12), ("all", 3, 2, 2, 2 * 12),
            ("attention", 4, 2, 1, 2 * 8), ("ffn", 3, 1, 1, 2 * 4), ("none", 3, 1, 1, 0)):
        model = AlbertBackbone(AlbertConfig(
            vocab_size=37, embedding_size=6, hidden_size=16, num_hidden_layers=layers,
            num_attention_heads=2, intermediate_size=24, num_hidden_groups=groups,
            inner_group_num=inner, sharing=sharing, initializer_range=0.3,
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1), dtype=policy)
        generators = [v for v in model.variables if "seed_generator" in v.path]
        variants = ((False, False), (True, True), (True, False))
        # see the docstring: each (mode, variant) in one of the two 16-bit policies
        if (sharing == "none" or (policy == "mixed_float16") != (sharing == "all")):
            variants = variants[:1]
        for remove_padding, recompute in variants:
            model.encoder.remove_padding, model.encoder.recompute = remove_padding, recompute
            runs, casts = {}, {}
            for once in (False, True):
                monkeypatch.setattr(transformer, "CAST_SHARED_WEIGHTS_ONCE", once)
                step = tf.function(lambda x: _sum_of_squares_step(model, x))
                inputs = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
                          "segment_ids": tf.constant(ids % 2)}
                traced = step.get_concrete_function(inputs)
                casts[once] = _weight_casts(traced.graph)
                start = [v.numpy() for v in generators]
                runs[once] = [np.asarray(t, np.float32) for t in
                              tf.nest.flatten(tf.nest.map_structure(
                                  lambda t: tf.cast(tf.convert_to_tensor(t), tf.float32),
                                  step(inputs)))]
                for variable, value in zip(generators, start):
                    variable.assign(value)
            if recompute:  # the calls' casts run again in the backward pass; one does not
                assert casts[False] - casts[True] >= casts_saved, (sharing, casts)
            else:
                assert casts[False] - casts[True] == casts_saved, (sharing, casts)
            assert len(runs[True]) == 1 + len(model.trainable_variables)
            for a, b in zip(runs[False], runs[True]):
                np.testing.assert_array_equal(b, a, err_msg=f"{sharing} {layers} {groups} "
                                              f"{inner} {remove_padding} {recompute}")
            assert all(np.abs(g).max() > 0 for g in runs[True][1:])  # every weight learns
            assert max(np.abs(g).max() for g in runs[True][1:]) > 0.1
        other = _sum_of_squares_step(model, {"input_ids": tf.constant((ids % 36 + 1) * mask),
                                             "input_mask": tf.constant(mask),
                                             "segment_ids": tf.constant(ids % 2)})
        assert np.abs(np.asarray(tf.cast(other[0], tf.float32)) - runs[True][0]).max() > 0.1


def _sum_of_squares_step(model, inputs):
    """The training forward's sequence output and the gradients of a loss on it."""
    with tf.GradientTape() as tape:
        out = model(inputs, training=True)
        loss = (tf.reduce_sum(tf.cast(out["sequence_output"], tf.float32) ** 2)
                + tf.reduce_sum(tf.cast(out["pooled_output"], tf.float32)))
    return [out["sequence_output"]] + tape.gradient(loss, model.trainable_variables)
