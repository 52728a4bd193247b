"""The Keras API checks its numbers as the commands do (issue 58): `compile`'s learning rate
and warmup by the commands' flag ranges (the settings' definitions,
`albert_tf.configs.definitions`), regression targets and sample weights finite, a step that
would write nan or inf never applied (`fit` stops with `NonFiniteLossError`, the commands'
gate), `save`/`save_weights`/`export` refusing non-finite weights, and one reading of text
pairs: a tuple of two sequences is the two columns, a list is rows, whatever the number of
rows."""

import os
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_text_classifier import LABELS, TEXTS, _pretraining_run

from albert_tf import AlbertTextClassifier, AlbertTextPreprocessor, AlbertTextTagger
from albert_tf.training.controller import NonFiniteLossError

TAGS = ["O", "B-X", "I-X"]


@pytest.fixture(scope="module")
def pretraining_run(tmp_path_factory, sample_vocab):
    return _pretraining_run(str(tmp_path_factory.mktemp("api_checks") / "run"), sample_vocab)


@pytest.fixture(scope="module")
def classifier(pretraining_run):
    return AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                                sequence_length=16)


@pytest.fixture(scope="module")
def regressor(pretraining_run):
    return AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=1,
                                                sequence_length=16)


@pytest.fixture(scope="module")
def tagger(pretraining_run):
    return AlbertTextTagger.from_checkpoint(pretraining_run, labels=TAGS, sequence_length=16)


# ---------------------------------------------------------------------------------------------
# compile's numbers: the commands' ranges.
@pytest.mark.parametrize("kwargs,message", [
    (dict(learning_rate=float("nan")),
     "`learning_rate` must be a finite number > 0, as the commands' --learning_rate; got nan."),
    (dict(learning_rate=float("inf")),
     "`learning_rate` must be a finite number > 0, as the commands' --learning_rate; got inf."),
    (dict(learning_rate=0), "`learning_rate` must be a finite number > 0, as the commands' "
                            "--learning_rate; got 0."),
    (dict(learning_rate=-0.01), "`learning_rate` must be a finite number > 0, as the commands' "
                                "--learning_rate; got -0.01."),
    (dict(learning_rate="1e-3"), "`learning_rate` must be a finite number > 0, as the "
                                 "commands' --learning_rate; got '1e-3'."),
    (dict(warmup_steps=-1), "`warmup_steps` must be a finite number >= 0 (an integer), as the "
                            "commands' --warmup_step; got -1."),
    (dict(warmup_steps=2.5), "`warmup_steps` must be a finite number >= 0 (an integer), as the "
                             "commands' --warmup_step; got 2.5."),
    (dict(warmup_proportion=float("nan")), "`warmup_proportion` must be between 0 and 1, as "
                                           "the commands' --warmup_proportion; got nan."),
    (dict(warmup_proportion=1.5), "`warmup_proportion` must be between 0 and 1, as the "
                                  "commands' --warmup_proportion; got 1.5."),
])
def test_compile_refuses_numbers_out_of_the_commands_ranges(classifier, tagger, kwargs,
                                                            message):
    for model in (classifier, tagger):
        with pytest.raises(ValueError) as e:
            model.compile(**kwargs)
        assert str(e.value) == message


def test_batch_sizes_out_of_range_are_refused(classifier, tagger):
    """0 was taken as 32, silently; -1 and 2.0 failed inside tf.data."""
    classifier.compile()
    tagger.compile()
    sentences, tags = [["a", "film"]], [["O", "B-X"]]
    calls = ((lambda b: classifier.fit(TEXTS, LABELS, batch_size=b, verbose=0),
              "train_batch_size"),
             (lambda b: classifier.evaluate(TEXTS, LABELS, batch_size=b, verbose=0),
              "eval_batch_size"),
             (lambda b: classifier.predict(TEXTS, batch_size=b, verbose=0), "predict_batch_size"),
             (lambda b: tagger.fit(sentences, tags, batch_size=b, verbose=0),
              "train_batch_size"),
             (lambda b: tagger.predict(sentences, batch_size=b, verbose=0),
              "predict_batch_size"))
    for call, flag in calls:
        for bad in (0, -1, 2.0):
            with pytest.raises(ValueError) as e:
                call(bad)
            assert str(e.value) == ("`batch_size` must be a finite number > 0 (an integer), "
                                    f"as the commands' --{flag}; got {bad!r}.")


@pytest.mark.parametrize("bad", [float("nan"), 1.0, -0.1])
def test_from_checkpoint_refuses_a_dropout_rate_out_of_range(pretraining_run, bad):
    """1.0 zeroed the pooled output of every training step, silently (Keras takes it)."""
    for build in (lambda: AlbertTextClassifier.from_checkpoint(
            pretraining_run, sequence_length=16, dropout_rate=bad),
                  lambda: AlbertTextTagger.from_checkpoint(
            pretraining_run, labels=TAGS, sequence_length=16, dropout_rate=bad)):
        with pytest.raises(ValueError) as e:
            build()
        assert str(e.value) == ("`dropout_rate` must be at least 0 and below 1, as the "
                                f"commands' --dropout_rate; got {bad!r}.")


# ---------------------------------------------------------------------------------------------
# Targets and weights.
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_regression_targets_must_be_finite(regressor, bad):
    regressor.compile()
    scores = [0.5] * 10
    scores[3] = bad
    scores[7] = bad
    before = [w.numpy() for w in regressor.weights]
    for call in (regressor.fit, regressor.evaluate):
        with pytest.raises(ValueError) as e:
            call(TEXTS, scores, verbose=0)
        assert str(e.value) == (f"`y`[3] (a regression target) is {bad}: each must be a finite "
                                "number (nan and inf train every weight to nan); fix or drop "
                                "that row (2 such rows: [3, 7]).")
    for a, b in zip(before, regressor.weights):
        np.testing.assert_array_equal(a, b.numpy())


def test_sample_weights_must_be_finite_and_not_negative(classifier):
    classifier.compile()
    for bad in (float("nan"), -1.0):
        weights = [1.0] * 10
        weights[4] = bad
        with pytest.raises(ValueError) as e:
            classifier.fit(TEXTS, LABELS, sample_weight=weights, verbose=0)
        assert str(e.value) == (f"`sample_weight`[4] (a sample weight) is {bad}: each must be a "
                                "finite number >= 0; fix or drop that row (1 such row: [4]).")


# ---------------------------------------------------------------------------------------------
# A step that would write nan or inf is never applied; fit stops, naming it.
@pytest.mark.slow
def test_a_huge_learning_rate_stops_fit_with_the_model_before_the_bad_step(pretraining_run):
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                               sequence_length=16, dropout_rate=0.0)
    clf.compile(learning_rate=1e6)
    kept = {}

    class Keep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            kept["weights"] = [w.numpy() for w in clf.weights]
            kept["step"] = int(clf.optimizer.iterations.numpy())

    with pytest.raises(NonFiniteLossError) as e:
        clf.fit(TEXTS * 4, LABELS * 4, batch_size=2, epochs=5, shuffle=False, verbose=0,
                callbacks=[Keep()])
    bad = kept["step"] + 1
    assert str(e.value) == (
        f"fit(): non-finite loss, gradient or updated weights at optimizer step {bad}; that "
        "step was not applied, so the model is the one after the step before (its weights "
        "finite). Compile with a lower learning_rate (now 1000000.0), or check the data (the "
        "labels, the sample weights).")
    # The weights are those before the bad step, bit for bit, and finite; the step counter
    # and the gate are set back, so the model trains (and saves) again.
    for a, b in zip(kept["weights"], clf.weights):
        np.testing.assert_array_equal(a, b.numpy())
    assert all(np.isfinite(w.numpy()).all() for w in clf.weights)
    assert int(clf.optimizer.iterations.numpy()) == kept["step"]
    assert float(clf.optimizer.update_gate.numpy()) == 1.0


@pytest.mark.slow
def test_a_nan_target_in_a_dataset_stops_fit_before_it_is_applied(regressor):
    regressor.compile(learning_rate=1e-3)
    before = [w.numpy() for w in regressor.weights]
    data = tf.data.Dataset.from_tensor_slices(
        (tf.constant(TEXTS[:4]), tf.constant([[0.5], [np.nan], [1.0], [2.0]]))).batch(4)
    with pytest.raises(NonFiniteLossError, match="at optimizer step 1; that step was not "
                                                 "applied"):
        regressor.fit(data, verbose=0)
    for a, b in zip(before, regressor.weights):
        np.testing.assert_array_equal(a, b.numpy())


@pytest.mark.slow
def test_a_non_finite_loss_stops_fit_with_an_optimizer_of_your_own(pretraining_run):
    """An optimizer without the gate: fit stops at the first non-finite loss, saying so."""
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=1,
                                               sequence_length=16)
    clf.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse")
    data = tf.data.Dataset.from_tensor_slices(
        (tf.constant(TEXTS[:4]), tf.constant([[0.5], [np.inf], [1.0], [2.0]]))).batch(2)
    with pytest.raises(NonFiniteLossError) as e:
        clf.fit(data, epochs=2, verbose=0)
    assert str(e.value) == (
        "fit(): the loss is inf at optimizer step 1, and your optimizer has no finiteness "
        "gate: its weights may hold nan or inf now (save() and export() refuse them). Use a "
        "lower learning rate, or compile() with the default optimizer, whose gate never "
        "applies a non-finite step.")


# ---------------------------------------------------------------------------------------------
# Saving and exporting: never non-finite weights.
@pytest.mark.parametrize("kind", ["classifier", "tagger"])
def test_save_and_export_refuse_non_finite_weights(pretraining_run, tmp_path, kind):
    if kind == "classifier":
        model = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                                     sequence_length=16)
    else:
        model = AlbertTextTagger.from_checkpoint(pretraining_run, labels=TAGS,
                                                 sequence_length=16)
    weight = model.albert_model.backbone.weights[3]
    value = weight.numpy()
    value.flat[5] = np.nan
    weight.assign(value)
    for call, path in ((model.save, tmp_path / "m.keras"),
                       (model.save_weights, tmp_path / "m.weights.h5"),
                       (model.export, tmp_path / "export" / "m")):
        with pytest.raises(NonFiniteLossError) as e:
            call(path)
        assert str(e.value) == (
            f"{call.__name__}({str(path)!r}): the model's weights are not finite (1 hold nan "
            f"or inf, e.g. {weight.path}); nothing is written. Rebuild the model "
            "(from_checkpoint) or load good weights, and train with a lower learning rate.")
    assert os.listdir(tmp_path) == []
    # Finite again: a file at the path that is not a Keras model is never written over
    # (hostile pass: Keras' overwrite=True replaced it); a .keras archive is, as Keras does.
    weight.assign(np.nan_to_num(value))
    precious = tmp_path / "precious.keras"
    precious.write_text("precious")
    with pytest.raises(FileExistsError, match=r"exists and is not a saved Keras model"):
        model.save(precious)
    assert precious.read_text() == "precious"
    model.save(tmp_path / "m.keras")
    model.save(tmp_path / "m.keras")
    assert zipfile.is_zipfile(tmp_path / "m.keras")


# ---------------------------------------------------------------------------------------------
# Pairs: a tuple of two sequences is the two columns, a list is rows, for any number of rows.
@pytest.mark.parametrize("n", [2, 3])
def test_a_tuple_of_two_lists_is_the_two_columns_for_any_number_of_rows(sample_vocab, n):
    pre = AlbertTextPreprocessor(sample_vocab, sequence_length=16)
    text_a = ["a gripping film", "dull and flat", "smart and sad"][:n]
    text_b = ["it is", "not at all", "a mess"][:n]
    want = pre(list(zip(text_a, text_b)))
    for columns in ((text_a, text_b), (tuple(text_a), tuple(text_b)),
                    (np.array(text_a), np.array(text_b))):
        got = pre(columns)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    assert (want["segment_ids"].numpy().sum(axis=1) > 0).all()  # every row a pair
    # A list is rows: n strings are n single texts, never columns.
    assert pre(text_a)["segment_ids"].numpy().sum() == 0


def test_rows_and_columns_that_cannot_be_read_one_way_are_refused(sample_vocab):
    pre = AlbertTextPreprocessor(sample_vocab, sequence_length=16)
    pairs = (("a1", "b1"), ("a2", "b2"), ("a3", "b3"))
    with pytest.raises(ValueError) as e:
        pre(pairs)  # tuple(zip(a, b)) of 3 pairs: the rows belong in a list
    assert str(e.value) == ("A tuple of text is the two columns (text_a, text_b) of pairs; this "
                            "one has 3 sequences. Give rows of pairs as a list, e.g. "
                            "list(zip(text_a, text_b)), or the columns as (text_a, text_b).")
    np.testing.assert_array_equal(pre(list(pairs))["segment_ids"].numpy().sum(axis=1) > 0,
                                  [True] * 3)
    with pytest.raises(ValueError) as e:
        pre([["a1", "a2", "a3"], ["b1", "b2", "b3"]])  # columns given as a list
    assert str(e.value) == ("Text must be all strings (one segment) or all (text_a, text_b) "
                            "pairs (the columns of pairs are a tuple: (text_a, text_b)). "
                            "Received at row 0: ['a1', 'a2', 'a3']")
    with pytest.raises(ValueError) as e:
        pre((["a1", "a2"], ["b1"]))
    assert str(e.value) == ("The columns (text_a, text_b) have 2 and 1 texts: give one text_b "
                            "per text_a (\"\" for none).")


@pytest.mark.parametrize("cls", [AlbertTextClassifier, AlbertTextTagger])
def test_from_checkpoint_of_no_path_says_what_to_give(cls):
    """Hostile pass: from_checkpoint(None, ...) was a TypeError from os.fspath."""
    with pytest.raises(ValueError, match=r"from_checkpoint\(None\): give the path of a "
                                         r"pretrained model .* a model from random weights "
                                         r"is built directly"):
        cls.from_checkpoint(None, spm_model_file="x.model")

