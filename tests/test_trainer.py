"""The Trainer by itself: a model and optimizer given to it, batches from memory (no run
directory, no input files, no Controller). Its step is the task's loss and update, micro-batches
add up to the whole batch, a non-finite step is not applied, and a model built outside the
strategy's scope is refused."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import features as F
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.training.optimization import create_optimizer
from albert_tf.training.train_lib import TrainingConfig
from albert_tf.training.trainer import Trainer, build_model_and_optimizer
from conftest import tiny_config

SEQ, BATCH = 12, 4
CONFIG = tiny_config(num_hidden_layers=2, num_hidden_groups=1, inner_group_num=1,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     initializer_range=0.2)


def _cfg(**changes) -> TrainingConfig:
    return TrainingConfig(**dict(dict(
        albert_config=CONFIG, input_file="unused", output_dir="unused", max_seq_length=SEQ,
        train_batch_size=BATCH, optimizer="adamw", learning_rate=1e-2, num_train_steps=10,
        num_warmup_steps=0, verbose=False), **changes))


def _batch(seed=0) -> dict:
    rng = np.random.default_rng(seed)
    lengths = np.array([SEQ, 9, 5, 7])
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    return {F.INPUT_IDS: rng.integers(5, CONFIG.vocab_size, (BATCH, SEQ)).astype(np.int32) * mask,
            F.INPUT_MASK: mask,
            F.SEGMENT_IDS: ((np.arange(SEQ)[None, :] >= lengths[:, None] // 2) * mask
                            ).astype(np.int32),
            F.LABEL_IDS: np.array([0, 1, 1, 0], np.int32),
            F.IS_REAL_EXAMPLE: np.array([1, 1, 1, 0], np.int32)}  # the last is padding


def _trainer(cfg, strategy=None):
    strategy = strategy or tf.distribute.get_strategy()
    task = ClassificationTask("sst-2", CONFIG, SEQ, dropout_rate=0.0)
    model, optimizer = build_model_and_optimizer(task, cfg, strategy, seed=7)
    return Trainer(task, cfg, strategy, model, optimizer, seed=7)


def _iterator(trainer, batches):
    dataset = tf.data.Dataset.from_tensor_slices(
        {k: np.stack([b[k] for b in batches]) for k in batches[0]})
    return iter(trainer.strategy.experimental_distribute_dataset(dataset))


def _weights(trainer) -> dict:
    return {v.path: v.numpy().copy() for v in trainer.model.weights}


@pytest.mark.slow
def test_a_step_is_the_tasks_loss_and_micro_batches_add_up_to_the_batch():
    batches = [_batch(0), _batch(1)]
    trainer = _trainer(_cfg())
    inputs = {k: batches[0][k] for k in F.BACKBONE_INPUTS}
    logits = trainer.model(inputs, training=False)["logits"].numpy()
    assert not np.allclose(logits[0], logits[1], atol=1e-3)  # different rows differ
    # the loss of the first step, by hand: cross entropy over the 3 real examples
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    expected = -np.mean(log_p[np.arange(3), batches[0][F.LABEL_IDS][:3]])
    correct = np.mean(logits[:3].argmax(-1) == batches[0][F.LABEL_IDS][:3])
    before = _weights(trainer)
    logs = trainer.train(_iterator(trainer, batches[:1]), 1)
    assert trainer.step == 1 and trainer.failed_step() is None
    assert logs["loss"] == pytest.approx(expected, rel=1e-5)
    assert logs["cross_entropy"] == pytest.approx(expected, rel=1e-5)
    assert logs["accuracy"] == pytest.approx(correct)
    # the learning rate after step 1 of a linear decay over 10 steps
    assert logs["learning_rate"] == pytest.approx(1e-2 * 0.9, rel=1e-6)
    after = _weights(trainer)
    assert [p for p in before if np.array_equal(before[p], after[p])] == []  # all updated
    # a second step; the same two steps with each batch in 2 micro-batches: the same loss
    # and weights
    loss = trainer.train(_iterator(trainer, batches[1:]), 1)["loss"]
    split = _trainer(_cfg(grad_accum_steps=2))
    assert split.train(_iterator(split, batches), 2)["loss"] == pytest.approx(loss, rel=1e-5)
    for path, value in _weights(trainer).items():  # Adam's steps are about 1e-2
        np.testing.assert_allclose(_weights(split)[path], value, rtol=1e-4, atol=1e-5)


def test_a_non_finite_step_is_not_applied_and_is_named():
    trainer = _trainer(_cfg())
    weight = trainer.model.backbone.weights[0]
    poisoned = weight.numpy().copy()
    poisoned[3, 1] = np.inf
    weight.assign(poisoned)
    before = _weights(trainer)
    trainer.train(_iterator(trainer, [_batch(0)] * 3), 3)
    # the first step (0-based 0) closed the gate: none of the three was applied
    assert trainer.failed_step() == 0
    for path, value in _weights(trainer).items():
        np.testing.assert_array_equal(value, before[path])
    assert trainer.largest_weight() == (np.inf, weight.path)
    assert not trainer.weights_finite()
    trainer.set_back(0)
    assert trainer.step == 0 and trainer.failed_step() is None


def test_a_model_built_outside_the_strategys_scope_is_refused():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    task = ClassificationTask("sst-2", CONFIG, SEQ, dropout_rate=0.0)
    cfg = _cfg()
    model, optimizer = build_model_and_optimizer(task, cfg, tf.distribute.get_strategy(), 7)
    with pytest.raises(ValueError, match="The Trainer's model must be built .* inside the "
                                         "scope of the strategy"):
        Trainer(task, cfg, strategy, model, optimizer)
    model, optimizer = build_model_and_optimizer(task, cfg, strategy, 7)
    assert Trainer(task, cfg, strategy, model, optimizer).in_cluster is False
    # the model in the scope, its optimizer's slots built outside it
    outside = create_optimizer("adamw", 1e-3, 10)
    outside.build(model.trainable_variables)
    with pytest.raises(ValueError, match="The Trainer's optimizer must be built"):
        Trainer(task, cfg, strategy, model, outside)
