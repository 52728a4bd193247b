"""GLUE's metrics (`albert_tf.tasks.glue`), computed by scikit-learn and SciPy, equal to the
hand-written implementation they replaced (issue 42 item 6), kept below as the oracle.

The oracle was the library's own code until the swap; this file ran against it first. Degenerate
cases keep its behaviour: Matthews correlation 0 when a row or column of the confusion matrix is
empty (scikit-learn's convention too), F1 0 without a true positive, and Pearson / Spearman 0.0
(not SciPy's nan) when either side is constant or has fewer than two values.
"""

import warnings

import numpy as np
import pytest

from albert_tf.tasks import glue


# ---------------------------------------------------------------------------------------------
# The oracle: the hand-written metrics as they stood before scikit-learn and SciPy.
def _f1_positive(predictions, labels, positive=1):
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    tp = float(np.sum((predictions == positive) & (labels == positive)))
    fp = float(np.sum((predictions == positive) & (labels != positive)))
    fn = float(np.sum((predictions != positive) & (labels == positive)))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def _matthews(predictions, labels):
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions == 0) & (labels == 0)))
    fp = float(np.sum((predictions == 1) & (labels == 0)))
    fn = float(np.sum((predictions == 0) & (labels == 1)))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denominator == 0 else float((tp * tn - fp * fn) / denominator)


def _pearson(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return 0.0 if denominator == 0 else float(np.sum(x * y) / denominator)


def _ranks(values):
    values = np.asarray(values)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), np.float64)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + 1 + end) / 2.0
            start = end
    return ranks


def _spearman(x, y):
    return _pearson(_ranks(x), _ranks(y))


# ---------------------------------------------------------------------------------------------
# Data shaped like the dev sets: CoLA (1,043 sentences, 69% acceptable), MRPC (408 pairs, 68%
# paraphrases), STS-B (1,500 pairs, gold scores in steps of 0.2 so many ties, predictions a
# regression head's float32 outputs rounded to 2 places, so ties there too).
def _classification(n, positive_rate, accuracy, seed):
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < positive_rate).astype(np.int64)
    flip = rng.random(n) > accuracy
    return np.where(flip, 1 - labels, labels), labels


def _sts_b(seed, n=1500):
    rng = np.random.default_rng(seed)
    labels = np.round(rng.uniform(0, 5, n) / 0.2) * 0.2
    predictions = np.clip(labels + rng.normal(0, 0.7, n), 0, 5).astype(np.float32)
    return np.round(predictions, 2), labels


CLASSIFICATION_CASES = {
    "cola": _classification(1043, 0.69, 0.82, 1),
    "mrpc": _classification(408, 0.68, 0.88, 2),
    "chance": _classification(277, 0.5, 0.5, 3),
    "all_ones": ([1] * 40, _classification(40, 0.7, 1.0, 4)[1]),
    "all_zeros": ([0] * 40, _classification(40, 0.7, 1.0, 5)[1]),
    "labels_constant": (_classification(30, 0.5, 1.0, 6)[0], [1] * 30),
    "both_constant_zero": ([0] * 9, [0] * 9),
    "both_constant_one": ([1] * 9, [1] * 9),
    "perfect": ([0, 1, 1, 0, 1], [0, 1, 1, 0, 1]),
    "inverse": ([1, 0, 0, 1, 0], [0, 1, 1, 0, 1]),
    "no_true_positive": ([1, 0, 0], [0, 1, 0]),
    "one_example": ([1], [1]),
}

REGRESSION_CASES = {
    "sts_b": _sts_b(7),
    "sts_b_small": _sts_b(8, n=25),
    "ties": ([1, 2, 2, 3, 3, 3, 0.5], [1, 3, 2, 4, 4, 0, 0]),
    "all_tied_but_one": ([2.0, 2.0, 2.0, 2.5], [0.0, 1.0, 2.0, 3.0]),
    "negative": ([0.1, 0.4, 0.35, 0.8], [4.0, 2.0, 3.0, 1.0]),
    "predictions_constant": ([2.5] * 12, _sts_b(9, n=12)[1]),
    "labels_constant": (_sts_b(10, n=12)[0], [3.0] * 12),
    "both_constant": ([1.0] * 5, [4.0] * 5),
    "one_pair": ([1.5], [3.0]),
    "float32_large_offset": (np.float32(1000) + np.float32([0.01, 0.02, 0.04, 0.03]),
                             [0.0, 1.0, 2.0, 3.0]),
}


@pytest.mark.parametrize("case", sorted(CLASSIFICATION_CASES))
def test_classification_metrics_equal_the_hand_written_ones(case):
    predictions, labels = CLASSIFICATION_CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UndefinedMetricWarning from degenerate cases
        matthews = glue.matthews_corrcoef(predictions, labels)
        f1 = glue.f1_positive(predictions, labels)
    assert isinstance(matthews, float) and isinstance(f1, float)
    assert matthews == pytest.approx(_matthews(predictions, labels), abs=1e-12)
    assert f1 == pytest.approx(_f1_positive(predictions, labels), abs=1e-12)
    assert glue.f1_positive(predictions, labels, positive=0) == pytest.approx(
        _f1_positive(predictions, labels, positive=0), abs=1e-12)


@pytest.mark.parametrize("case", sorted(REGRESSION_CASES))
def test_correlations_equal_the_hand_written_ones(case):
    predictions, labels = REGRESSION_CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConstantInputWarning: degenerate cases are 0.0
        pearson = glue.pearson(predictions, labels)
        spearman = glue.spearman(predictions, labels)
    assert isinstance(pearson, float) and isinstance(spearman, float)
    assert pearson == pytest.approx(_pearson(predictions, labels), abs=1e-9)
    assert spearman == pytest.approx(_spearman(predictions, labels), abs=1e-9)


def test_degenerate_cases_keep_their_values():
    assert glue.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # an empty column
    assert glue.matthews_corrcoef([0, 0], [0, 0]) == 0.0
    assert glue.f1_positive([0, 0], [0, 0]) == 0.0  # no positive anywhere
    assert glue.pearson([2.5] * 4, [1, 2, 3, 4]) == 0.0
    assert glue.spearman([1, 2, 3, 4], [3.0] * 4) == 0.0
    assert glue.pearson([1.0], [2.0]) == 0.0
    assert glue.matthews_corrcoef([0, 1, 1, 0, 1], [0, 1, 1, 0, 1]) == pytest.approx(1.0)
    assert glue.pearson([0.1, 0.4, 0.35, 0.8], [4.0, 2.0, 3.0, 1.0]) < -0.9


def test_real_looking_values_are_not_trivial():
    """The cases above compare numbers that mean something: neither 0 nor 1."""
    predictions, labels = CLASSIFICATION_CASES["cola"]
    assert 0.4 < glue.matthews_corrcoef(predictions, labels) < 0.8
    predictions, labels = REGRESSION_CASES["sts_b"]
    assert 0.8 < glue.spearman(predictions, labels) < glue.pearson(predictions, labels) + 0.05
    assert len(np.unique(predictions)) < len(predictions)  # ties on both sides
    assert len(np.unique(labels)) == 26
    metrics = glue.glue_metrics("sts-b", predictions, labels)
    assert metrics == {"pearson": pytest.approx(_pearson(predictions, labels), abs=1e-9),
                       "spearman": pytest.approx(_spearman(predictions, labels), abs=1e-9)}
    predictions, labels = CLASSIFICATION_CASES["mrpc"]
    assert glue.glue_metrics("mrpc", predictions, labels) == {
        "accuracy": pytest.approx(np.mean(np.equal(predictions, labels))),
        "f1": pytest.approx(_f1_positive(predictions, labels), abs=1e-12)}
