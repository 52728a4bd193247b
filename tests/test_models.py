"""AlbertBackbone / AlbertPretrainer: outputs, sharing modes, save/load, mixed precision, loss."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertBackbone, AlbertPretrainer
from albert_tf.models import losses
from albert_tf.checkpoints import model_weights
from conftest import random_batch, tiny_config

BACKBONE_KEYS = ("input_ids", "input_mask", "segment_ids")
PRETRAINER_KEYS = BACKBONE_KEYS + ("masked_lm_positions",)


def _inputs(batch, keys):
    return {k: tf.constant(batch[k]) for k in keys}


def _randomize(model, seed=3):
    """Random values everywhere (LayerNorm gammas and biases too), so any mix-up shows."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0, 0.3, v.shape).astype("float32"))


def test_backbone_outputs_and_hidden_states():
    cfg = tiny_config()
    model = AlbertBackbone(cfg)
    _randomize(model)
    batch = random_batch(cfg)
    out = model(_inputs(batch, BACKBONE_KEYS))
    assert len(out["hidden_states"]) == cfg.num_hidden_layers + 1
    np.testing.assert_array_equal(out["hidden_states"][-1].numpy(),
                                  out["sequence_output"].numpy())
    emb = model.embeddings(tf.constant(batch["input_ids"]), tf.constant(batch["segment_ids"]))
    np.testing.assert_array_equal(out["hidden_states"][0].numpy(), emb.numpy())
    pooled = np.tanh(out["sequence_output"].numpy()[:, 0] @ model.pooler.kernel.numpy()
                     + model.pooler.bias.numpy())
    np.testing.assert_allclose(out["pooled_output"].numpy(), pooled, atol=1e-5)
    # Layers differ from one another (the encoder really applies L blocks).
    diffs = [np.abs(a.numpy() - b.numpy()).max()
             for a, b in zip(out["hidden_states"][:-1], out["hidden_states"][1:])]
    assert min(diffs) > 1e-2


def test_official_group_assignment():
    enc = AlbertBackbone(tiny_config(num_hidden_layers=5, num_hidden_groups=2)).encoder
    assert [enc.attention_owner(l) for l in range(5)] == [0, 0, 0, 1, 1]  # int(l / 5 * 2)
    assert [enc.ffn_owner(l) for l in range(5)] == [0, 0, 0, 1, 1]
    enc = AlbertBackbone(tiny_config(sharing="attention", num_hidden_groups=2)).encoder
    assert [enc.ffn_owner(l) for l in range(5)] == [0, 1, 2, 3, 4]
    assert len(enc.attention_layers) == 2 * 2 and len(enc.ffn_layers) == 5 * 2


@pytest.mark.slow
@pytest.mark.parametrize("sharing", ["all", "attention", "ffn"])
def test_sharing_modes_equal_unshared_model_with_tied_copies(sharing):
    """A shared model computes exactly what a not-shared model computes when its per-layer
    sublayers hold copies of the owner's weights: sharing is real reuse, not a count trick."""
    cfg = tiny_config(sharing=sharing)
    shared = AlbertBackbone(cfg)
    _randomize(shared)
    unshared = AlbertBackbone(cfg.replace(sharing="none"))
    s_enc, u_enc = shared.encoder, unshared.encoder
    inner = cfg.inner_group_num
    for layer in range(cfg.num_hidden_layers):
        for i in range(inner):
            pairs = ((s_enc.attention_layers[s_enc.attention_owner(layer) * inner + i],
                      u_enc.attention_layers[layer * inner + i]),
                     (s_enc.ffn_layers[s_enc.ffn_owner(layer) * inner + i],
                      u_enc.ffn_layers[layer * inner + i]))
            for src, dst in pairs:
                for a, b in zip(src.weights, dst.weights):
                    b.assign(a)
    for src, dst in ((shared.embeddings, unshared.embeddings), (shared.pooler, unshared.pooler)):
        for a, b in zip(src.weights, dst.weights):
            b.assign(a)
    batch = _inputs(random_batch(cfg), BACKBONE_KEYS)
    a, b = shared(batch), unshared(batch)
    np.testing.assert_allclose(a["sequence_output"].numpy(), b["sequence_output"].numpy(),
                               atol=1e-6)
    assert shared.count_params() < unshared.count_params()


@pytest.mark.slow
@pytest.mark.parametrize("model_cls, keys", [(AlbertBackbone, BACKBONE_KEYS),
                                             (AlbertPretrainer, PRETRAINER_KEYS)])
def test_save_and_reload_keras_file(tmp_path, model_cls, keys):
    cfg = tiny_config(sharing="attention")
    model = model_cls(cfg)
    _randomize(model)
    batch = _inputs(random_batch(cfg), keys)
    before = model(batch)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert type(loaded) is model_cls and loaded.config == cfg
    after = loaded(batch)
    for x, y in zip(tf.nest.flatten(before), tf.nest.flatten(after)):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert model.get_config() == loaded.get_config()
    if model_cls is AlbertPretrainer:  # the decoder is still tied after reload
        assert loaded.mlm_head.word_embeddings is loaded.backbone.word_embeddings


@pytest.mark.slow
@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_model_only_tf_checkpoint_round_trips_every_weight(tmp_path, sharing):
    """`tf.train.Checkpoint(model=m)` (the best checkpoint, export) holds every variable,
    the encoder blocks included; before the fix it silently held none of them."""
    model = AlbertPretrainer(tiny_config(sharing=sharing))
    _randomize(model, seed=7)
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    fresh = AlbertPretrainer(tiny_config(sharing=sharing))
    tf.train.Checkpoint(model=fresh).read(path).assert_consumed()
    for a, b in zip(model_weights(model), model_weights(fresh)):
        assert a.official_name == b.official_name
        np.testing.assert_array_equal(a.variable.numpy(), b.variable.numpy())


def test_weight_table_covers_every_variable_once():
    for sharing in ("all", "attention", "ffn", "none"):
        model = AlbertPretrainer(tiny_config(sharing=sharing))
        named = model_weights(model)
        assert len(named) == len(model.weights)
        assert len({n.official_name for n in named}) == len(named)
    names = {n.official_name for n in model_weights(AlbertPretrainer(tiny_config()))}
    assert "bert/encoder/transformer/group_1/inner_group_1/ffn_1/intermediate/output/dense/kernel" \
        in names
    assert "cls/seq_relationship/output_weights" in names


def test_mixed_bfloat16_keeps_layernorm_and_softmax_in_float32():
    cfg = tiny_config()
    batch = _inputs(random_batch(cfg), PRETRAINER_KEYS)
    fp32 = AlbertPretrainer(cfg)
    _randomize(fp32, seed=5)
    ref = fp32(batch)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    bf16 = AlbertPretrainer(cfg)
    for a, b in zip(fp32.weights, bf16.weights):
        b.assign(a)
    out = bf16(batch)
    assert all(v.dtype == "float32" for v in bf16.weights)
    attention = bf16.backbone.encoder.attention_layers[0]
    assert attention.query.compute_dtype == "bfloat16"
    assert attention.layer_norm.compute_dtype == "float32"
    # Sublayers end in a float32 LayerNorm; logits are float32.
    assert out["sequence_output"].dtype == tf.float32
    assert out["mlm_logits"].dtype == tf.float32 and out["sop_logits"].dtype == tf.float32
    diff = np.abs(out["sequence_output"].numpy() - ref["sequence_output"].numpy())
    assert 1e-4 < diff.max() < 0.25   # bf16 was used, and stays close to float32
    rel = np.abs(out["mlm_logits"].numpy() - ref["mlm_logits"].numpy()).max() \
        / np.abs(ref["mlm_logits"].numpy()).max()
    assert rel < 0.05


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_pretraining_loss_and_metrics_match_numpy():
    cfg = tiny_config()
    model = AlbertPretrainer(cfg)
    _randomize(model, seed=11)
    batch = random_batch(cfg)
    out = model(_inputs(batch, PRETRAINER_KEYS))
    mlm = out["mlm_logits"].numpy().reshape(-1, cfg.vocab_size)
    ids = batch["masked_lm_ids"].reshape(-1)
    w = batch["masked_lm_weights"].reshape(-1)
    ce = -_log_softmax(mlm)[np.arange(len(ids)), ids]
    mlm_loss = (w * ce).sum() / (w.sum() + 1e-5)
    sop = out["sop_logits"].numpy()
    labels = batch["next_sentence_labels"].reshape(-1)
    sop_ce = -_log_softmax(sop)[np.arange(len(labels)), labels]
    np.testing.assert_allclose(losses.masked_lm_loss(out, batch).numpy(), mlm_loss, rtol=1e-5)
    np.testing.assert_allclose(losses.sentence_order_loss(out, batch).numpy(), sop_ce.mean(),
                               rtol=1e-5)
    np.testing.assert_allclose(losses.pretraining_loss(out, batch).numpy(),
                               mlm_loss + sop_ce.mean(), rtol=1e-5)

    metrics = losses.PretrainingMetrics()
    metrics.update_state(out, batch)
    half = {k: v[:2] for k, v in batch.items()}  # streaming: a second, different batch
    out2 = model(_inputs(half, PRETRAINER_KEYS))
    metrics.update_state(out2, half)
    mlm2 = out2["mlm_logits"].numpy().reshape(-1, cfg.vocab_size)
    all_logits = np.concatenate([mlm, mlm2])
    all_ids = np.concatenate([ids, half["masked_lm_ids"].reshape(-1)])
    all_w = np.concatenate([w, half["masked_lm_weights"].reshape(-1)])
    all_ce = -_log_softmax(all_logits)[np.arange(len(all_ids)), all_ids]
    correct = (all_logits.argmax(-1) == all_ids).astype(float)
    sop_all = np.concatenate([sop, out2["sop_logits"].numpy()])
    lab_all = np.concatenate([labels, half["next_sentence_labels"].reshape(-1)])
    result = {k: float(v) for k, v in metrics.result().items()}
    np.testing.assert_allclose(result["masked_lm_accuracy"], (correct * all_w).sum() / all_w.sum(),
                               rtol=1e-6)
    np.testing.assert_allclose(result["masked_lm_loss"], (all_ce * all_w).sum() / all_w.sum(),
                               rtol=1e-5)
    np.testing.assert_allclose(result["sentence_order_accuracy"],
                               (sop_all.argmax(-1) == lab_all).mean(), rtol=1e-6)
    np.testing.assert_allclose(result["sentence_order_loss"],
                               (-_log_softmax(sop_all)[np.arange(len(lab_all)), lab_all]).mean(),
                               rtol=1e-5)


def test_mlm_loss_with_no_predictions_is_zero_not_nan():
    cfg = tiny_config()
    batch = random_batch(cfg)
    batch["masked_lm_weights"] = np.zeros_like(batch["masked_lm_weights"])
    out = AlbertPretrainer(cfg)(_inputs(batch, PRETRAINER_KEYS))
    assert float(losses.masked_lm_loss(out, batch)) == 0.0


def test_softmax_cross_entropy_equals_tensorflows_in_value_and_gradient():
    """The masked LM's cross entropy (logsumexp form, faster on CPU) against
    `tf.nn.sparse_softmax_cross_entropy_with_logits`: values and gradients to float32
    rounding, on logits of the masked LM's scale and on extreme ones; a label out of range is
    an error or nan, never a number."""
    rng = np.random.default_rng(3)
    labels = tf.constant(rng.integers(0, 500, 64), tf.int32)
    upstream = tf.constant(rng.random(64), tf.float32)
    for scale in (1.0, 30.0, 1e4):
        logits = tf.constant(rng.normal(size=(64, 500)) * scale, tf.float32)
        results = []
        for fn in (losses.softmax_cross_entropy,
                   lambda x, y: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)):
            with tf.GradientTape() as tape:
                tape.watch(logits)
                per_row = fn(logits, labels)
                total = tf.reduce_sum(upstream * per_row)
            results.append((per_row.numpy(), tape.gradient(total, logits).numpy()))
        (ours, our_grad), (theirs, their_grad) = results
        assert np.ptp(theirs) > 0  # rows differ
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6 * scale)
        np.testing.assert_allclose(our_grad, their_grad, atol=1e-6)
        if scale == 30.0:  # compiled by XLA: the same gradient
            @tf.function(jit_compile=True)
            def compiled(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    total = tf.reduce_sum(upstream * losses.softmax_cross_entropy(x, labels))
                return tape.gradient(total, x)

            np.testing.assert_allclose(compiled(logits).numpy(), their_grad, atol=1e-6)
    empty = tf.zeros((0, 5), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(empty)
        total = tf.reduce_sum(losses.softmax_cross_entropy(empty, tf.zeros((0,), tf.int32)))
    assert float(total) == 0.0 and tape.gradient(total, empty).shape == (0, 5)
    logits = tf.constant(rng.normal(size=(2, 5)), tf.float32)
    with pytest.raises(tf.errors.InvalidArgumentError):  # CPU: the gather's error
        losses.softmax_cross_entropy(logits, tf.constant([1, 5]))
    nan = tf.function(losses.softmax_cross_entropy, jit_compile=True)(  # XLA clamps gathers
        logits, tf.constant([1, 5]))
    assert np.isfinite(nan[0]) and np.isnan(nan[1])
