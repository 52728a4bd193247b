"""`--remove_padding` (on by default) gives every task the results of the padded computation.

For each task of the one loop (pretraining, GLUE classification and regression, SQuAD v1, SQuAD
v2 with the null-score head and with the official answer-class model, RACE) the model is built
and set up the way the training loop sets it (`set_remove_padding`), on a right-padded batch of
rows of different lengths, with dropout in the encoder: the loss, its terms, every gradient of a
training step (dropout on, the same seeds), the evaluation outputs and the metrics are equal to
1e-5 with the flag on and off. SQuAD's span head reads the encoder at padded positions (the
official softmax covers the whole window), so for it the loop keeps the padded computation; for
every other head the flag stays on, and the test checks that too, so it compares two different
computations.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import features as F
from albert_tf.models.backbone import set_remove_padding
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.tasks.pretraining import PretrainingTask
from albert_tf.tasks.race import RACE_LEVEL, RaceTask
from albert_tf.tasks.squad import SquadTask, SquadV2Task
from albert_tf.tasks.squad.features import END_POSITIONS, START_POSITIONS, UNIQUE_IDS
from conftest import randomize, tiny_config

pytestmark = pytest.mark.slow  # 5 to 15 s a task on 2 cores

SEQ, BATCH, PREDICTIONS = 16, 5, 6
LENGTHS = (16, 9, 4, 12, 6)  # one full row, one of four tokens
TOLERANCE = 1e-5


def _config():
    return tiny_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                       max_position_embeddings=SEQ)


TASKS = {
    "pretraining": lambda c: PretrainingTask(c, SEQ, PREDICTIONS),
    "glue_classification": lambda c: ClassificationTask("mrpc", c, SEQ),
    "glue_regression": lambda c: ClassificationTask("sts-b", c, SEQ),
    "squad_v1": lambda c: SquadTask(c, SEQ, version=1),
    "squad_v2_null_score": lambda c: SquadTask(c, SEQ, version=2),
    "squad_v2_answer_class": lambda c: SquadV2Task(c, SEQ, start_n_top=3, end_n_top=2),
    "race": lambda c: RaceTask(c, SEQ),
}
# Heads that read the encoder at padded positions: the loop keeps their padded computation.
READS_PADDING = {"squad_v1", "squad_v2_null_score"}


def _rows(rng, config, lengths):
    """input_ids, input_mask, segment_ids [len(lengths), SEQ]: right padding, two segments."""
    n = len(lengths)
    ids, mask, seg = (np.zeros((n, SEQ), np.int32) for _ in range(3))
    for b, length in enumerate(lengths):
        ids[b, :length] = rng.integers(5, config.vocab_size, length)
        mask[b, :length] = 1
        seg[b, length // 2:length] = 1
    return ids, mask, seg


def _features(name, config, seed):
    """A batch of the task's features, every label inside the real tokens / classes."""
    rng = np.random.default_rng(seed)
    real = np.array([[1], [1], [1], [0], [1]], np.int32)  # one padding example
    if name == "race":
        rows = [_rows(rng, config, np.roll(LENGTHS, k)[:4]) for k in range(BATCH)]
        ids, mask, seg = (np.stack([r[i] for r in rows]) for i in range(3))
        return {F.INPUT_IDS: ids, F.INPUT_MASK: mask, F.SEGMENT_IDS: seg,
                F.LABEL_IDS: rng.integers(0, 4, (BATCH, 1)).astype(np.int32),
                F.IS_REAL_EXAMPLE: real, RACE_LEVEL: rng.integers(0, 2, (BATCH, 1))}
    ids, mask, seg = _rows(rng, config, LENGTHS)
    out = {F.INPUT_IDS: ids, F.INPUT_MASK: mask, F.SEGMENT_IDS: seg}
    if name == "pretraining":
        positions = np.zeros((BATCH, PREDICTIONS), np.int32)
        weights = np.zeros((BATCH, PREDICTIONS), np.float32)
        for b, length in enumerate(LENGTHS):
            k = min(PREDICTIONS, length - 1)
            positions[b, :k] = np.sort(rng.choice(np.arange(1, length), k, replace=False))
            weights[b, :k] = 1.0
        out.update({F.MASKED_LM_POSITIONS: positions, F.MASKED_LM_WEIGHTS: weights,
                    F.MASKED_LM_IDS: rng.integers(0, config.vocab_size,
                                                  (BATCH, PREDICTIONS)).astype(np.int32),
                    F.NEXT_SENTENCE_LABELS: rng.integers(0, 2, (BATCH, 1)).astype(np.int32)})
    elif name.startswith("glue"):
        labels = (rng.uniform(0, 5, (BATCH, 1)).astype(np.float32) if name == "glue_regression"
                  else rng.integers(0, 2, (BATCH, 1)).astype(np.int32))
        out.update({F.LABEL_IDS: labels, F.IS_REAL_EXAMPLE: real})
    else:  # SQuAD: answers inside the second segment, one unanswerable (at [CLS])
        starts = np.array([[l // 2 + 1] for l in LENGTHS], np.int32)
        starts[2] = 0
        ends = np.minimum(starts + 1, np.array([[l - 2] for l in LENGTHS]))
        ends[2] = 0
        out.update({START_POSITIONS: starts, END_POSITIONS: ends,
                    UNIQUE_IDS: np.arange(BATCH, dtype=np.int32)[:, None] + 1000,
                    F.IS_REAL_EXAMPLE: real})
    return out


def _step(task, model, features, training):
    """(loss, terms, eval outputs, gradients) of one batch, dropout seeds restored first."""
    inputs = {k: tf.constant(features[k]) for k in task.model_inputs}
    feats = {k: tf.constant(v) for k, v in features.items()}
    with tf.GradientTape() as tape:
        outputs = model(inputs, training=training)
        terms = task.loss_terms(outputs, feats)
        loss = task.loss(terms, task.normalizers(feats, BATCH))
    grads = tape.gradient(loss, model.trainable_variables)
    evaluated = task.eval_outputs(outputs, feats) if not training else {}
    as_np = lambda d: {k: np.asarray(v, np.float64) for k, v in d.items()}  # noqa: E731
    return (float(loss), as_np(terms), as_np(evaluated),
            [np.zeros(v.shape) if g is None else np.asarray(tf.convert_to_tensor(g))
             for g, v in zip(grads, model.trainable_variables)])  # None: unused (the pooler)


def _run(task, model, features, remove_padding, states):
    set_remove_padding(model, remove_padding)
    results = []
    for training in (True, False):
        for v, value in zip(model.non_trainable_variables, states):  # the same dropout seeds
            v.assign(value)
        results.append(_step(task, model, features, training))
    return results


@pytest.mark.parametrize("name", list(TASKS))
def test_losses_gradients_outputs_and_metrics_equal_with_and_without(name):
    config = _config()
    task = TASKS[name](config)
    model = task.build_model()
    features = _features(name, config, seed=1)
    model({k: tf.constant(features[k]) for k in task.model_inputs})
    randomize(model, seed=5)
    states = [v.numpy() for v in model.non_trainable_variables]

    padded = _run(task, model, features, False, states)
    removed = _run(task, model, features, True, states)
    # The loop keeps the flag on wherever it gives the same results, off where the head reads
    # the padding: so the comparison is of two computations except for the span head.
    assert model.backbone.encoder.remove_padding is (name not in READS_PADDING)
    other = _run(task, model, _features(name, config, seed=2), True, states)
    assert abs(other[1][0] - removed[1][0]) > 100 * TOLERANCE  # the loss carries the input

    for (loss_a, terms_a, eval_a, grads_a), (loss_b, terms_b, eval_b, grads_b) in zip(padded,
                                                                                    removed):
        np.testing.assert_allclose(loss_b, loss_a, rtol=TOLERANCE, atol=TOLERANCE)
        assert terms_a.keys() == terms_b.keys()
        for key in terms_a:
            np.testing.assert_allclose(terms_b[key], terms_a[key], rtol=TOLERANCE,
                                       atol=TOLERANCE, err_msg=key)
        assert eval_a.keys() == eval_b.keys()
        for key in eval_a:
            np.testing.assert_allclose(eval_b[key], eval_a[key], rtol=TOLERANCE,
                                       atol=TOLERANCE, err_msg=key)
        assert len(grads_a) == len(grads_b) == len(model.trainable_variables)
        for a, b, v in zip(grads_a, grads_b, model.trainable_variables):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=TOLERANCE, err_msg=v.path)
        assert max(np.abs(g).max() for g in grads_a) > 1e-3
    metrics_a = task.metrics({k: float(np.sum(v)) for k, v in padded[1][1].items()})
    metrics_b = task.metrics({k: float(np.sum(v)) for k, v in removed[1][1].items()})
    assert metrics_a.keys() == metrics_b.keys() and metrics_a
    for key in metrics_a:
        np.testing.assert_allclose(metrics_b[key], metrics_a[key], rtol=TOLERANCE,
                                   atol=TOLERANCE, err_msg=key)


def test_span_head_with_the_padding_removed_would_differ():
    """Why the loop keeps the padded computation for SQuAD's span head: with the padding removed
    the encoder's outputs there are 0, their logits equal the bias, and the official softmax
    over the window (padding included) changes. With the head's kernel at N(0, 1), the scale
    of a trained head's logits, the span loss moves by more than 0.1."""
    config = _config()
    task = TASKS["squad_v1"](config)
    model = task.build_model()
    features = _features("squad_v1", config, seed=1)
    model({k: tf.constant(features[k]) for k in task.model_inputs})
    randomize(model, seed=5)
    kernel = model.get_layer("squad").kernel
    kernel.assign(np.random.default_rng(6).normal(0, 1, kernel.shape).astype(np.float32))
    states = [v.numpy() for v in model.non_trainable_variables]
    padded = _run(task, model, features, False, states)[1][0]
    model.backbone.encoder.remove_padding = True  # by hand, past set_remove_padding
    for v, value in zip(model.non_trainable_variables, states):
        v.assign(value)
    removed = _step(task, model, features, training=False)[0]
    assert abs(removed - padded) > 0.1, (removed, padded)
