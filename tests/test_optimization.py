"""ALBERT's LAMB / AdamW against a NumPy transcription of the official update; the schedule."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertPretrainer
from albert_tf.training.optimization import AlbertOptimizer, WarmupPolynomialDecay, create_optimizer
from conftest import tiny_config


def _model():
    """Dense (kernel decayed and adapted; bias excluded), LayerNorm (excluded), and a kernel
    that starts at zero (trust ratio falls back to 1)."""
    inputs = keras.Input((5,))
    x = keras.layers.Dense(4, name="dense")(inputs)
    x = keras.layers.LayerNormalization(name="LayerNorm")(x)
    x = keras.layers.Dense(3, kernel_initializer="zeros", use_bias=False, name="zero_dense")(x)
    return keras.Model(inputs, x)


def numpy_step(w, g, m, v, lr, decay, adapt, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    """Official lamb_optimizer.py, line by line."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = m / (np.sqrt(v) + eps)
    if decay:
        update = update + wd * w
    ratio = 1.0
    if adapt:
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
        ratio = w_norm / u_norm if (w_norm > 0 and u_norm > 0) else 1.0
    return w - ratio * lr * update, m, v


@pytest.mark.parametrize("layer_adaptation", [True, False], ids=["lamb", "adamw"])
def test_update_matches_numpy(layer_adaptation):
    model = _model()
    variables = model.trainable_variables
    opt = AlbertOptimizer(learning_rate=0.05, layer_adaptation=layer_adaptation)
    opt.build(variables)
    names = [v.path for v in variables]
    flags = {p: (d, a) for p, d, a in opt.decayed_and_adapted(variables)}
    assert flags == {
        "dense/kernel": (True, layer_adaptation), "dense/bias": (False, False),
        "LayerNorm/gamma": (False, False), "LayerNorm/beta": (False, False),
        "zero_dense/kernel": (True, layer_adaptation)}
    rng = np.random.default_rng(0)
    state = {n: (v.numpy().astype(np.float64), 0.0, 0.0) for n, v in zip(names, variables)}
    for _ in range(6):
        grads = [rng.normal(0, 1.0, v.shape).astype(np.float32) for v in variables]
        opt.apply([tf.constant(g) for g in grads], variables)
        for n, g in zip(names, grads):
            w, m, v = state[n]
            state[n] = numpy_step(w, g.astype(np.float64), m, v, 0.05, *flags[n])
    for n, var in zip(names, variables):
        np.testing.assert_allclose(var.numpy(), state[n][0], rtol=1e-5, atol=1e-6, err_msg=n)
    # The zero-initialised kernel moved (trust ratio 1, not 0 / ||u||).
    assert np.abs(model.get_layer("zero_dense").kernel.numpy()).max() > 0.01


@pytest.mark.parametrize("layer_adaptation", [True, False], ids=["lamb", "adamw"])
def test_the_benches_torch_lamb_matches_numpy(layer_adaptation):
    """`bench.torch_lamb`, Hugging Face's optimizer in bench.pretraining_judge and
    bench.small_training, makes the official update too (exclusions by name, the trust ratio's
    fallback to 1 for a zero weight)."""
    torch = pytest.importorskip("torch")
    from bench.torch_lamb import TorchAlbertOptimizer

    rng = np.random.default_rng(1)
    shapes = {"dense.weight": (4, 5), "dense.bias": (4,), "attention.LayerNorm.weight": (4,),
              "full_layer_layer_norm.weight": (4,), "zero.weight": (3, 4)}
    params = {n: torch.nn.Parameter(torch.tensor(
        np.zeros(s) if n == "zero.weight" else rng.normal(0, 0.5, s), dtype=torch.float32))
        for n, s in shapes.items()}
    optimizer = TorchAlbertOptimizer(params.items(), layer_adaptation)
    state = {n: (p.detach().numpy().astype(np.float64), 0.0, 0.0) for n, p in params.items()}
    for _ in range(6):
        for n, p in params.items():
            g = rng.normal(0, 1.0, p.shape).astype(np.float32)
            p.grad = torch.tensor(g)
            decay = n in ("dense.weight", "zero.weight")
            w, m, v = state[n]
            state[n] = numpy_step(w, g.astype(np.float64), m, v, 0.05, decay,
                                  decay and layer_adaptation)
        optimizer.step(0.05)
    for n, p in params.items():
        np.testing.assert_allclose(p.detach().numpy(), state[n][0], rtol=1e-5, atol=1e-6,
                                   err_msg=n)
    assert np.abs(params["zero.weight"].detach().numpy()).max() > 0.01


def test_lamb_trust_ratio_scales_the_step():
    """With LAMB the kernel's step is ||w|| / ||u|| times AdamW's."""
    steps = {}
    for adapt in (True, False):
        keras.utils.set_random_seed(3)
        model = _model()
        kernel = model.get_layer("dense").kernel
        before = kernel.numpy().copy()
        opt = AlbertOptimizer(learning_rate=0.01, layer_adaptation=adapt)
        opt.build(model.trainable_variables)
        grads = [tf.ones_like(v) * 0.3 for v in model.trainable_variables]
        opt.apply(grads, model.trainable_variables)
        steps[adapt] = kernel.numpy() - before
        update = 0.1 * 0.3 / (np.sqrt(0.001 * 0.09) + 1e-6) + 0.01 * before
        ratio = np.linalg.norm(before) / np.linalg.norm(update)
    np.testing.assert_allclose(steps[True], steps[False] * ratio, rtol=1e-4)


def test_exclusions_on_the_albert_model():
    model = AlbertPretrainer(tiny_config())
    opt = create_optimizer("lamb", 1e-3, 100, 10)
    opt.build(model.trainable_variables)
    flags = opt.decayed_and_adapted(model.trainable_variables)
    excluded = [p for p, d, a in flags if not d]
    assert excluded and all("LayerNorm" in p or "bias" in p for p in excluded)
    assert all(d == a for _, d, a in flags)  # adaptation exclusions default to decay's
    decayed = {p for p, d, _ in flags if d}
    assert "embeddings/word_embeddings/embeddings" in decayed
    assert "seq_relationship/kernel" in decayed and "predictions/output_bias" not in decayed
    assert len(excluded) == sum(1 for v in model.trainable_variables
                                if "LayerNorm" in v.path or "bias" in v.path)


def test_closed_gate_changes_nothing():
    model = _model()
    opt = AlbertOptimizer(learning_rate=0.1)
    opt.build(model.trainable_variables)
    before = [v.numpy().copy() for v in model.trainable_variables]
    opt.update_gate.assign(0.0)
    opt.apply([tf.ones_like(v) for v in model.trainable_variables], model.trainable_variables)
    for b, v in zip(before, model.trainable_variables):
        np.testing.assert_array_equal(b, v.numpy())
    assert all(float(tf.reduce_max(tf.abs(m))) == 0.0 for m in opt._m)



@pytest.mark.parametrize("keras_weight_decay", [None, 0.5])
def test_the_gates_values_are_applied_only_when_nothing_changes_the_weights_between(
        keras_weight_decay, monkeypatch):
    """In one traced step the update applies the new values `updates_finite` computed (the
    gate's), unless Keras's own `weight_decay` option changes the weights in between: then they
    are computed again, so the decay is not lost. Either way the weights equal those of the
    update computed afresh."""
    results = {}
    for reuse in (True, False):
        if not reuse:
            monkeypatch.setattr(AlbertOptimizer, "_take_computed", lambda self, g, v: None)
        variable = keras.Variable([1.0, -2.0, 3.0], name="kernel")
        opt = AlbertOptimizer(learning_rate=0.1, weight_decay=keras_weight_decay)
        opt.build([variable])
        taken = []
        original = AlbertOptimizer.update_step

        def update_step(self, gradient, var, learning_rate, taken=taken):
            taken.append(bool(self._computed))
            return original(self, gradient, var, learning_rate)

        monkeypatch.setattr(AlbertOptimizer, "update_step", update_step)

        @tf.function
        def step(gradient):
            finite = opt.updates_finite([gradient], [variable])
            opt.apply([gradient], [variable])
            return finite

        assert bool(step(tf.constant([0.5, 0.25, -1.0])))
        results[reuse] = (variable.numpy(), taken)
        monkeypatch.setattr(AlbertOptimizer, "update_step", original)
    np.testing.assert_array_equal(results[True][0], results[False][0])
    assert np.abs(results[True][0] - [1.0, -2.0, 3.0]).min() > 1e-3  # the step moved them
    assert results[True][1] == [keras_weight_decay is None]  # reused only without it


def test_schedule_values():
    s = WarmupPolynomialDecay(1e-3, num_train_steps=100, num_warmup_steps=10)
    values = {step: float(s(step)) for step in (0, 5, 9, 10, 55, 100, 150)}
    np.testing.assert_allclose(
        [values[k] for k in (0, 5, 9, 10, 55, 100, 150)],
        [0.0, 5e-4, 9e-4, 1e-3 * 0.9, 1e-3 * 0.45, 0.0, 0.0], rtol=1e-6, atol=1e-12)
    quadratic = WarmupPolynomialDecay(1e-3, 100, 0, poly_power=2.0)
    np.testing.assert_allclose(float(quadratic(50)), 1e-3 * 0.25, rtol=1e-6)
    late = WarmupPolynomialDecay(1e-3, 100, 10, start_warmup_step=20)
    np.testing.assert_allclose([float(late(s)) for s in (10, 20, 25, 30, 40)],
                               [0.0, 0.0, 5e-4, 1e-3 * 0.7, 1e-3 * 0.6], rtol=1e-6, atol=1e-12)
    with pytest.raises(ValueError, match="--optimizer must be one of"):
        create_optimizer("sgd", 1e-3, 10)


def test_dynamic_loss_scale_rules():
    """float16's loss scale: halves on an overflow (counted), not below min_scale, where a
    non-finite step is no longer an overflow; doubles after growth_interval good steps in a
    row (an overflow restarts the run); scale/unscale are inverse."""
    from albert_tf.training.loss_scale import DynamicLossScale

    scale = DynamicLossScale(initial_scale=8.0, growth_interval=3, min_scale=2.0)
    seen = []
    for finite in (True, True, False, True, True, True, True, False, False, False):
        overflow = bool(scale.overflowed(tf.constant(finite)))
        scale.update(tf.constant(finite))
        seen.append((overflow, float(scale.scale.numpy()), int(scale.good_steps.numpy())))
    assert seen == [(False, 8.0, 1), (False, 8.0, 2), (True, 4.0, 0), (False, 4.0, 1),
                    (False, 4.0, 2), (False, 8.0, 0), (False, 8.0, 1), (True, 4.0, 0),
                    (True, 2.0, 0), (False, 2.0, 0)]  # at min_scale: not an overflow
    assert int(scale.skipped_steps.numpy()) == 3
    grads = [tf.constant([3.0, -6.0]), tf.constant([[0.5]], tf.float16)]
    loss = scale.scale_loss(tf.constant(1.5))
    assert float(loss) == 3.0
    back = scale.unscale([g * 2.0 for g in grads])
    assert [b.dtype for b in back] == [tf.float32, tf.float16]
    for b, g in zip(back, grads):
        np.testing.assert_array_equal(b.numpy(), g.numpy())
    with pytest.raises(ValueError, match="growth_interval"):
        DynamicLossScale(growth_interval=0)
