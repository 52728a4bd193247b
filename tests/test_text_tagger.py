"""`AlbertTextTagger`: Keras `compile`/`fit`/`predict` on words and tags, tagging as
`run_tagging --do_predict` does (`TaggingTask.predict_tags`) with the same weights, the export
answering as `predict`, the README example on the bundled UD English EWT sample, and the
errors of bad input."""

import collections
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT
from test_text_classifier import TINY, _pretraining_run

from albert_tf import AlbertConfig, AlbertTextTagger
from albert_tf.tasks import conll
from albert_tf.tasks.tagging import TaggingTask, write_examples

EWT = os.path.join(ROOT, "albert_tf", "sample_data", "tagging", "ud_english_ewt")


def _ewt():
    """(train, dev) sentences of the bundled EWT sample and the tag set of both (dev has tags
    train lacks: INTJ)."""
    train, _ = conll.read_tagged_file(os.path.join(EWT, "train.conllu"))
    dev, _ = conll.read_tagged_file(os.path.join(EWT, "dev.conllu"))
    return train, dev, conll.label_list(train + dev)


def _readme_example() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    at = text.index("from albert_tf import AlbertTextTagger")
    start = text.rindex("```python\n", 0, at) + len("```python\n")
    return text[start:text.index("\n```", start)]


@pytest.fixture(scope="module")
def pretraining_run(tmp_path_factory, sample_vocab):
    return _pretraining_run(str(tmp_path_factory.mktemp("text_tagger") / "run"), sample_vocab)


@pytest.mark.slow
def test_readme_example_on_the_bundled_ewt(tmp_path, sample_vocab):
    """The README's example, run as written, on the bundled UD English EWT sample (150
    training sentences, 3,145 words; dev 60 sentences, 462 words; 17 UPOS tags). A pretrained
    ALBERT costs more than a test may spend, so CKPT stands in for one: a tiny random model
    (H=32, 2 layers) fitted 10 epochs on the training sentences at lr 1e-3 (windows of 32) and
    saved in our model format; the example then fine-tunes it at lr 5e-5 for 3 epochs.
    Measured, seeds 0/1/2: dev token accuracy 0.606/0.641/0.595 after the stand-in's fit and
    0.610/0.641/0.595 after the example, against 0.206 for the majority tag (NOUN); asserted:
    at least 0.50 for both."""
    from albert_tf.checkpoints import save_albert_tf

    train, dev, tags_set = _ewt()
    sentences, tags = [s.words for s in train], [s.tags for s in train]
    dev_sentences, dev_tags = [s.words for s in dev], [s.tags for s in dev]
    keras.utils.set_random_seed(0)
    run = _pretraining_run(str(tmp_path / "run"), sample_vocab,
                           AlbertConfig(**dict(TINY, max_position_embeddings=128)))
    stand_in = AlbertTextTagger.from_checkpoint(run, labels=tags_set, sequence_length=32)
    stand_in.compile(learning_rate=1e-3, warmup_proportion=0.1)
    stand_in.fit(sentences, tags, batch_size=16, epochs=10, verbose=0)
    fitted = stand_in.evaluate(dev_sentences, dev_tags, return_dict=True, verbose=0)
    ckpt = save_albert_tf(stand_in.token_classifier, str(tmp_path / "stand_in"), sample_vocab)
    scope = {"CKPT": ckpt, "SPM": sample_vocab, "TAGS": tags_set,
             "EXPORT_BASE": str(tmp_path / "models" / "ewt"), "sentences": sentences,
             "tags": tags, "dev_sentences": dev_sentences, "dev_tags": dev_tags}
    exec(_readme_example(), scope)  # noqa: S102 - the README's code, as a reader runs it
    tagger, predicted = scope["tagger"], scope["predicted"]
    assert tagger.init_report["head"] == "checkpoint"
    assert len(predicted) == 1 and len(predicted[0]) == 3 and set(predicted[0]) <= set(tags_set)
    assert set(tagger.history.history) == {"loss", "token_accuracy", "val_loss",
                                           "val_token_accuracy"}
    assert float(tagger.optimizer.learning_rate) == 0.0  # the schedule spanned the fit
    after = tagger.evaluate(dev_sentences, dev_tags, return_dict=True, verbose=0)
    scores = tagger.score(dev_sentences, dev_tags)
    # Keras's token accuracy (first pieces of the windows) is the word-level one.
    assert abs(after["token_accuracy"] - scores["token_accuracy"]) < 1e-6
    top = collections.Counter(t for s in tags for t in s).most_common(1)[0][0]
    majority = float(np.mean([t == top for s in dev_tags for t in s]))
    print(f"\nEWT dev token accuracy: stand-in fit {fitted['token_accuracy']:.4f}, after the "
          f"README example {after['token_accuracy']:.4f}, majority tag {majority:.4f}")
    assert round(majority, 3) == 0.206
    assert fitted["token_accuracy"] >= 0.50 and after["token_accuracy"] >= 0.50
    assert os.path.exists(tmp_path / "models" / "ewt" / "1" / "saved_model.pb")


@pytest.mark.slow
def test_predict_tags_as_do_predict_and_the_export(tmp_path, pretraining_run):
    """On the EWT dev sentences in windows of 16 (long sentences split), after a short `fit`
    (so the tags vary with the words): `predict` equals `TaggingTask.predict_tags` (what
    `run_tagging --do_predict` writes) with the same weights; the export's `serving_default`
    on the joined sentences answers the same tags; a `.keras` file reloads the same tagger."""
    importlib.import_module("tensorflow_text")  # the SentencePiece ops of the SavedModel
    train, dev, tags_set = _ewt()
    keras.utils.set_random_seed(1)
    tagger = AlbertTextTagger.from_checkpoint(pretraining_run, labels=tags_set,
                                              sequence_length=16)
    tagger.compile(learning_rate=1e-3)
    tagger.fit([s.words for s in train], [s.tags for s in train], batch_size=16, epochs=3,
               verbose=0)
    sentences = [s.words for s in dev]
    got = tagger.predict(sentences, batch_size=8, verbose=0)
    assert [len(t) for t in got] == [len(s) for s in sentences]
    counts = collections.Counter(t for row in got for t in row)
    print(f"\npredicted tags: {dict(counts)}")
    assert len(counts) >= 3 and max(counts.values()) < 0.9 * sum(counts.values())

    # as run_tagging writes its test file: padded to whole batches of --predict_batch_size
    meta = write_examples(dev, tagger.tagging, str(tmp_path / "dev.tfrecord"), "dev.conllu",
                          pad_to_multiple=8)
    assert meta["split_sentences"] >= 10  # the windows are exercised
    task = TaggingTask(tagger.token_classifier.config, tags_set, 16)
    want = task.predict_tags(tagger.token_classifier, meta["files"][0], 8, tagger.tagging,
                             meta["windows"])
    assert got == want

    path = tagger.export(str(tmp_path / "models" / "ewt"))
    assert path == str(tmp_path / "models" / "ewt" / "1")
    served = tf.saved_model.load(path).signatures["serving_default"](
        text=tf.constant([" ".join(s) for s in sentences]))
    counts = served["num_words"].numpy()
    assert served["num_windows"].numpy().max() > 1
    assert [[t.decode() for t in row[:n]] for row, n in zip(served["tags"].numpy(),
                                                             counts)] == got
    with open(os.path.join(path, "assets.extra", "albert_export.json"), encoding="utf-8") as f:
        assert json.load(f)["model"] == "token_classifier"

    tagger.save(str(tmp_path / "tagger.keras"))
    back = keras.models.load_model(str(tmp_path / "tagger.keras"))
    assert isinstance(back, AlbertTextTagger) and back.labels == tags_set
    assert back.predict(sentences, batch_size=8, verbose=0) == got


def test_bad_input_names_the_row_and_the_fix(pretraining_run):
    tags_set = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    with pytest.raises(ValueError, match=r"`labels` \(the tag set.*is required"):
        AlbertTextTagger.from_checkpoint(pretraining_run, sequence_length=16)
    tagger = AlbertTextTagger.from_checkpoint(pretraining_run, labels=tags_set,
                                              sequence_length=16)
    tagger.compile()
    x, y = [["Obama", "visited", "Paris"], ["Hi"]], [["B-PER", "O", "B-LOC"], ["O"]]
    cases = [
        ("Obama visited Paris", y, r"`x` is one string.*\[x.split\(\)\]"),
        ([x[0], "Obama visited Paris"], y, r"x\[1\] is a string \('Obama visited Paris'\), "
                                          r"not a list of words: pass x\[1\].split\(\)"),
        ([x[0], []], y, r"x\[1\] is an empty sentence \(no words\): drop it"),
        ([["New York", "is"], ["Hi"]], [["B-LOC", "O"], ["O"]],
         r"x\[0\]\[0\] is 'New York': a word is a non-empty string without whitespace"),
        (x, [["B-PER", "O"], ["O"]], r"x\[0\] has 3 words but y\[0\] has 2 tags: give "
                                     r"exactly one tag per word"),
        (x, [y[0], ["B-ORG"]], r"y\[1\]: tag 'B-ORG' is not one of the model's 5 tags.*"
                               r"`labels=` of from_checkpoint"),
        (x, y[:1], r"2 sentences in x but 1 rows in y"),
        (x, [y[0], "O"], r"y\[1\] is a string \('O'\), not a list of tags"),
    ]
    for bad_x, bad_y, message in cases:
        with pytest.raises(ValueError, match=message):
            tagger.fit(bad_x, bad_y, epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"validation_data\[1\]\[0\]: tag 'B-ORG'"):
        tagger.fit(x, y, validation_data=(x[:1], [["B-ORG", "O", "O"]]), verbose=0)
    with pytest.raises(ValueError, match=r"x\[0\] is a string"):
        tagger.predict(["Obama visited Paris"])
    with pytest.raises(ValueError, match="`sample_weight` is not supported"):
        tagger.evaluate(x, y, sample_weight=[1.0, 2.0], verbose=0)
    with pytest.raises(ValueError, match="5 distinct tag names"):
        AlbertTextTagger(tagger.token_classifier, tagger.preprocessor, ["O", "O", "a", "b", "c"])
    # a long word keeps its first piece: one tag per word for any sentence length
    long = [["Obama"] * 40 + ["supercalifragilisticexpialidocious" * 3]]
    assert [len(t) for t in tagger.predict(long, verbose=0)] == [41]


TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
X = [["Obama", "visited", "Paris"], ["Hi"]]
Y = [["B-PER", "O", "B-LOC"], ["O"]]


@pytest.fixture(scope="module")
def tagger(pretraining_run):
    keras.utils.set_random_seed(0)
    tagger = AlbertTextTagger.from_checkpoint(pretraining_run, labels=TAGS, sequence_length=16)
    tagger.compile(learning_rate=1e-3)
    return tagger


def test_a_kept_head_needs_the_checkpoints_tag_order(tmp_path, sample_vocab, tagger):
    """A tagger checkpoint that records its tags (a `.keras` file's config, run_tagging's
    labels.json) keeps its head only for the same list: the same tags in another order are
    refused (the head would rename them by position), labels=None adopts them, other tags of
    the same count give a new head."""
    from albert_tf.checkpoints import save_albert_tf

    saved = str(tmp_path / "tagger.keras")
    tagger.save(saved)
    want = tagger.predict(X, verbose=0)
    shuffled = TAGS[::-1]
    with pytest.raises(ValueError, match=re.escape(
            f"trained on the tags {TAGS} ({saved} (its config)), and `labels` gives the same "
            f"tags in another order: {shuffled}") + r".*Pass labels=.* or labels=None"):
        AlbertTextTagger.from_checkpoint(saved, sample_vocab, labels=shuffled,
                                         sequence_length=16)
    adopted = AlbertTextTagger.from_checkpoint(saved, sample_vocab, sequence_length=16)
    assert adopted.labels == TAGS and adopted.init_report["head"] == "checkpoint"
    assert adopted.predict(X, verbose=0) == want
    other = ["O", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
    with pytest.warns(UserWarning, match=r"a new head of 5 classes.*its tags"):
        fresh = AlbertTextTagger.from_checkpoint(saved, sample_vocab, labels=other,
                                                 sequence_length=16)
    assert fresh.init_report["head"] == "new" and fresh.labels == other
    # run_tagging's OUTPUT_DIR/labels.json beside the model
    run = save_albert_tf(tagger.token_classifier, str(tmp_path / "run"), sample_vocab)
    with open(os.path.join(run, "labels.json"), "w", encoding="utf-8") as f:
        json.dump(TAGS, f)
    with pytest.raises(ValueError, match=r"labels\.json\), and `labels` gives the same tags"):
        AlbertTextTagger.from_checkpoint(run, labels=shuffled, sequence_length=16)
    kept = AlbertTextTagger.from_checkpoint(run, labels=TAGS, sequence_length=16)
    assert kept.init_report["head"] == "checkpoint" and kept.predict(X, verbose=0) == want


def test_labels_are_a_sequence_of_distinct_names(pretraining_run):
    for bad, message in [
            (set(TAGS), r"`labels` is a set: .*fixed order.*pass a list, e.g. sorted"),
            (dict.fromkeys(TAGS), r"`labels` is a dict"),
            ([0, 1, 2], r"`labels` holds 0: each name is a non-empty string"),
            (["O", "", "B-PER"], r"`labels` holds '': each name is a non-empty string"),
            (["O", "B-PER", "O"], r"`labels` names 'O' 2 times: each name must be distinct"),
            ("OBI", r"`labels` is one string")]:
        with pytest.raises(ValueError, match=message):
            AlbertTextTagger.from_checkpoint(pretraining_run, labels=bad, sequence_length=16)
    tagger = AlbertTextTagger.from_checkpoint(pretraining_run, labels=np.array(TAGS[:3]),
                                              sequence_length=16)
    assert tagger.labels == TAGS[:3] and all(type(t) is str for t in tagger.labels)


def test_predict_never_drops_windows(tagger, monkeypatch):
    long = ["the", "queen", "said", "nothing", "to", "alice"] * 10  # several windows of 16
    with pytest.raises(ValueError, match="`steps` is not supported.*would drop words"):
        tagger.predict([long, ["a"]], batch_size=2, steps=1, verbose=0)
    assert [len(t) for t in tagger.predict([long, ["a"]], batch_size=2, verbose=0)] == [60, 1]
    full = keras.Model.predict
    monkeypatch.setattr(keras.Model, "predict",
                        lambda self, *a, **k: full(self, *a, **k)[:-1])
    with pytest.raises(ValueError, match=r"predict gave \d+ windows of logits for the \d+ "
                                         r"windows of the sentences"):
        tagger.predict([long, ["a"]], verbose=0)


def test_windows_of_many_sentences_run_the_window_ops_once(tagger, monkeypatch):
    """fit/evaluate/predict cut all their sentences into windows in one run of the window ops
    (one run per sentence made 1,500 sentences cost more than their training)."""
    from albert_tf.tasks.tagging import TaggingPreprocessor

    runs = []
    original = TaggingPreprocessor._windows_of_pieces
    monkeypatch.setattr(TaggingPreprocessor, "_windows_of_pieces",
                        lambda self, *a, **k: runs.append(1) or original(self, *a, **k))
    features, labels, windows = tagger._windows(X * 20, Y * 20)
    assert len(runs) == 1 and len(windows) == 40
    assert (labels >= 0).sum() == 20 * 4 and features["input_ids"].shape == (40, 16)


def test_empty_missing_and_invalid_input(tagger):
    assert tagger.predict([], verbose=0) == []
    for call in (lambda: tagger.score([], []), lambda: tagger.evaluate([], [], verbose=0),
                 lambda: tagger.fit([], [], verbose=0)):
        with pytest.raises(ValueError, match="`x` holds no sentences"):
            call()
    with pytest.raises(ValueError, match=r"x\[0\]\[0\] is 'ab\\udc80cd', not valid Unicode"):
        tagger.predict([["ab\udc80cd", "x"]], verbose=0)
    for call, what in ((lambda: tagger.fit(X, verbose=0), "fit"),
                       (lambda: tagger.evaluate(X, verbose=0), "evaluate"),
                       (lambda: tagger.score(X, None), "score")):
        with pytest.raises(ValueError, match=what + r"\(\): `y` is None; give the"):
            call()
    with pytest.raises(ValueError, match="`x` is None; give a list of sentences"):
        tagger.predict(None)
    for call, what in ((lambda: tagger.fit(X, Y, verbose=0), "fit"),
                       (lambda: tagger.evaluate(X, Y, verbose=0), "evaluate")):
        with pytest.raises(ValueError, match=what + r"\(\) is called under a tf.distribute "
                                                    r"strategy scope the model was not built"):
            with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
                call()


def test_keras_file_reloads_compiled_and_needs_its_vocabulary(tmp_path, sample_vocab,
                                                              pretraining_run):
    """A `.keras` tagger compiled with the defaults reloads compiled, its optimizer state
    with it, and fits on; without its SentencePiece file the load names the path."""
    spm = str(tmp_path / "copy.model")
    shutil.copy(sample_vocab, spm)
    keras.utils.set_random_seed(0)
    tagger = AlbertTextTagger.from_checkpoint(pretraining_run, spm, labels=TAGS,
                                              sequence_length=16)
    tagger.compile(learning_rate=1e-3)
    tagger.fit(X, Y, batch_size=1, verbose=0)
    path = str(tmp_path / "tagger.keras")
    tagger.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # e.g. "Skipping variable loading"
        back = keras.models.load_model(path)
    assert back.compiled and int(back.optimizer.iterations.numpy()) == 2
    assert back.get_compile_config() == tagger.get_compile_config() == {
        "albert_tf_auto": {"learning_rate": 1e-3, "warmup_steps": None,
                           "warmup_proportion": None},
        "optimizer_state": {"built": True, "scheduled": True}}
    for a, b in zip(back.optimizer.variables, tagger.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    loss = back.fit(X, Y, batch_size=1, verbose=0).history["loss"][0]
    assert np.isfinite(loss) and int(back.optimizer.iterations.numpy()) == 4
    os.remove(spm)
    with pytest.raises(FileNotFoundError, match=re.escape(f"spm_model_file={spm!r}, is gone")
                       + r".*Put the file back at that path"):
        keras.models.load_model(path)


MIRRORED = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
from albert_tf import AlbertTextTagger
run, x, y = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
out = {}
for name in ("one_device", "mirrored"):
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if name == "mirrored"
                else tf.distribute.get_strategy())
    with strategy.scope():
        keras.utils.set_random_seed(3)
        tagger = AlbertTextTagger.from_checkpoint(run, labels=tags, sequence_length=16,
                                                  dropout_rate=0.0)
        tagger.compile(learning_rate=1e-2)
    out[name] = tagger.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)["loss"]
    if name == "one_device":  # the loss by hand: the mean over all words, and the old mean
        features, labels, _ = tagger._windows(x, y)
        logits = keras.Model.predict(tagger, features, verbose=0)
        lp = tf.nn.log_softmax(logits).numpy()
        ce = [-lp[i][labels[i] != -100, labels[i][labels[i] != -100]] for i in range(4)]
        out["words"] = float(np.concatenate(ce).mean())
        out["replica_means"] = float((np.concatenate(ce[:2]).mean()
                                      + np.concatenate(ce[2:]).mean()) / 2)
    tagger.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    out[name + "_weights"] = [v.numpy().tolist() for v in tagger.weights]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_loss_under_mirrored_strategy_equals_one_device(pretraining_run):
    """Two replicas (logical CPUs) on one batch of 4 sentences whose halves hold 9 and 3
    words: the loss is the mean over the batch's 12 words, as on one device (1e-5), not the
    mean of the replicas' means; one `fit` step moves the weights alike (1e-5)."""
    x = [X[0] + ["and", "the", "queen", "said", "so"], ["Hi"], ["a", "b"], ["x"]]
    y = [Y[0] + ["O"] * 5, ["B-PER"], ["O", "B-LOC"], ["I-LOC"]]
    proc = subprocess.run(
        [sys.executable, "-c", MIRRORED, pretraining_run, json.dumps(x), json.dumps(y)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\nloss: one device {out['one_device']:.6f}, mirrored {out['mirrored']:.6f}, "
          f"by hand {out['words']:.6f}, mean of replica means {out['replica_means']:.6f}")
    assert abs(out["one_device"] - out["words"]) < 1e-5
    assert abs(out["mirrored"] - out["one_device"]) < 1e-5
    assert abs(out["replica_means"] - out["words"]) > 1e-3  # what the old loss gave differs
    for a, b in zip(out["mirrored_weights"], out["one_device_weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-5)
