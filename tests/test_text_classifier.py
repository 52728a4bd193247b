"""`AlbertTextClassifier` and `AlbertTextPreprocessor`: Keras `compile`/`fit`/`predict` on raw
text, the official schedule over what `fit` runs, strategies and callbacks, and the export the
commands write."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, SHARED_DIR, randomize

from albert_tf import AlbertConfig, AlbertTextClassifier, AlbertTextPreprocessor
from albert_tf.export.saved_model import load_for_export
from albert_tf.tasks import glue
from albert_tf.tasks.classification import example_features
from albert_tf.tokenization import Tokenizer

SST2 = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2")
TINY = dict(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=40, max_position_embeddings=64)
TEXTS = ["a gripping film", "dull and flat", "the 1,000 best scenes , in order",
         "it is neither funny nor moving", "an utterly charming , well-made picture",
         "the plot goes nowhere", "smart and sad", "a mess", "superb", "tedious , too long"]
LABELS = [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]


def _pretraining_run(directory, sample_vocab, config=None):
    """A pretraining run's --output_dir as the loop writes it (albert_config.json, ckpt-1, the
    SentencePiece model it keeps), with seeded random weights."""
    from albert_tf.models.pretrainer import AlbertPretrainer

    os.makedirs(directory)
    config = config or AlbertConfig(**TINY)
    config.to_json_file(os.path.join(directory, "albert_config.json"))
    model = AlbertPretrainer(config)
    randomize(model, seed=7)
    tf.train.Checkpoint(model=model).save(os.path.join(directory, "ckpt"))
    shutil.copy(sample_vocab, directory)
    return str(directory)


@pytest.fixture(scope="module")
def pretraining_run(tmp_path_factory, sample_vocab):
    return _pretraining_run(str(tmp_path_factory.mktemp("text_clf") / "run"), sample_vocab)


@pytest.mark.parametrize("task_name,length", [
    ("sst-2", 24), *(pytest.param(name, length, marks=pytest.mark.needs_shared("data/glue"))
                     for name, length in (("sts-b", 24), ("rte", 64)))])
def test_preprocessor_features_equal_run_classifier_features(sample_vocab, task_name, length):
    """Real GLUE sentences and pairs (truncated longest first at these lengths), tokenized and
    packed in the graph, equal `run_classifier`'s Python features exactly."""
    task = glue.get_task(task_name)
    data_dir = SST2 if task_name == "sst-2" else os.path.join(SHARED_DIR, "data", "glue",
                                                              task.name.upper())
    examples = glue.load_split(task, data_dir, "dev")[:64]
    tokenizer = Tokenizer(sample_vocab)
    pre = AlbertTextPreprocessor(sample_vocab, sequence_length=length)
    x = [e.text_a if e.text_b is None else (e.text_a, e.text_b) for e in examples]
    got = {k: v.numpy() for k, v in pre(x).items()}
    truncated, ties = 0, 0
    for i, example in enumerate(examples):
        want = example_features(example, task, tokenizer, length)
        truncated += want["input_mask"][-1]
        for name in ("input_mask", "segment_ids"):
            assert got[name][i].tolist() == want[name], (i, name)
        if got["input_ids"][i].tolist() != want["input_ids"]:
            # InGraphTokenizer's documented divergence (albert_tf/tokenization/in_graph.py): a tie
            # between segmentations of equal score broken the other way ("000" as "00" + "0").
            pieces = [tokenizer.ids_to_pieces(ids) for ids in (got["input_ids"][i].tolist(),
                                                                want["input_ids"])]
            assert "".join(pieces[0]) == "".join(pieces[1]), (i, pieces)
            ties += 1
    assert truncated > 0  # the truncation rule was exercised
    assert ties == {"sst-2": 0, "sts-b": 0, "rte": 0}[task_name]  # 4 with sentencepiece 0.2.3's vocabulary


def test_text_in_every_form_and_bad_text(sample_vocab):
    pre = AlbertTextPreprocessor(sample_vocab, sequence_length=12)
    pairs = pre([("a gripping film", "dull"), ("flat", "")])
    columns = pre((np.array(["a gripping film", "flat"]), np.array(["dull", ""])))
    for name in pairs:
        np.testing.assert_array_equal(pairs[name], columns[name])
    # An empty text_b packs as one segment (official `if tokens_b`).
    assert pairs["segment_ids"].numpy()[1].sum() == 0
    assert pre("one text")["input_ids"].shape == (1, 12)
    with pytest.raises(ValueError, match="all strings .* or all .* pairs"):
        pre(["one", ("a", "b")])
    with pytest.raises(ValueError, match="at least 3"):
        AlbertTextPreprocessor(sample_vocab, sequence_length=2)


def _lr_recorder(model, seen):
    return keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: seen.append(
        float(model.optimizer.learning_rate)))


@pytest.mark.slow
def test_default_schedule_spans_what_fit_runs(pretraining_run):
    """compile(): run_classifier's AdamW at its learning rate; the linear warmup and decay span
    epochs x batches of each `fit`, so the last step's rate is lr / steps and 0 follows it; a
    second `fit` runs its own schedule from where the first stopped."""
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                               sequence_length=16)
    assert clf.init_report["head"] == "new"
    assert clf.init_report["source"]["type"] == "pretraining_output_dir"
    clf.compile(warmup_steps=2)
    assert clf.optimizer.layer_adaptation is False and clf.optimizer.clip_norm == 1.0
    seen = []
    clf.fit(TEXTS, LABELS, batch_size=4, epochs=2, callbacks=[_lr_recorder(clf, seen)],
            verbose=0)
    lr, steps = 5e-5, 2 * 3  # 10 texts in batches of 4: 3 per epoch
    want = [lr * s / 2 if s < 2 else lr * (1 - s / steps) for s in range(steps)]
    np.testing.assert_allclose(seen, want, rtol=1e-5, atol=1e-12)
    assert int(clf.optimizer.iterations.numpy()) == steps
    assert float(clf.optimizer.learning_rate) == 0.0
    seen.clear()
    clf.fit(TEXTS, LABELS, batch_size=5, epochs=3, initial_epoch=1,
            callbacks=[_lr_recorder(clf, seen)], verbose=0)
    np.testing.assert_allclose(seen, [lr * s / 2 if s < 2 else lr * (1 - s / 4)
                                      for s in range(4)], rtol=1e-5, atol=1e-12)
    assert float(clf.optimizer.learning_rate) == 0.0


@pytest.mark.slow
def test_fit_with_tensorboard_and_early_stopping(pretraining_run, tmp_path):
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                               sequence_length=16)
    clf.compile()
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=10.0, patience=1)
    board = keras.callbacks.TensorBoard(log_dir=str(tmp_path / "tb"))
    history = clf.fit(TEXTS, LABELS, batch_size=4, epochs=5, verbose=0,
                      validation_data=(TEXTS[:6], LABELS[:6]), callbacks=[stop, board])
    assert len(history.history["loss"]) == 2 and stop.stopped_epoch == 1
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    for split in ("train", "validation"):
        assert any(f.startswith("events.out") for f in os.listdir(tmp_path / "tb" / split))


@pytest.mark.slow
def test_regression_fits_with_mean_squared_error(pretraining_run):
    """num_classes=1 (STS-B): mean squared error on float targets, predict gives the value."""
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=1,
                                               sequence_length=16)
    clf.compile()
    assert isinstance(clf.loss, keras.losses.MeanSquaredError)
    scores = [float(i) / 2 for i in range(10)]
    history = clf.fit(list(zip(TEXTS, TEXTS[::-1])), scores, batch_size=5, epochs=1, verbose=0)
    assert set(history.history) == {"loss"} and clf.text_pair is True
    values = clf.predict(list(zip(TEXTS, TEXTS[::-1])))
    assert values.shape == (10, 1)
    mse = clf.evaluate(list(zip(TEXTS, TEXTS[::-1])), scores, verbose=0)
    np.testing.assert_allclose(mse, np.mean((values[:, 0] - scores) ** 2), rtol=1e-4)
    with pytest.raises(ValueError, match="class ids"):
        AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                             sequence_length=16).fit(TEXTS, scores)


MIRRORED = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from albert_tf import AlbertTextClassifier
run, texts, labels = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
weights = {}
for name in ("mirrored", "one_device"):
    keras.utils.set_random_seed(3)
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if name == "mirrored"
                else tf.distribute.get_strategy())
    with strategy.scope():
        clf = AlbertTextClassifier.from_checkpoint(run, num_classes=2, sequence_length=16,
                                                   dropout_rate=0.0)
        clf.compile(learning_rate=1e-2)
    weights["start"] = [v.numpy().tolist() for v in clf.weights]
    clf.fit(texts, labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
    weights[name] = [v.numpy().tolist() for v in clf.weights]
    print(name, strategy.num_replicas_in_sync, int(clf.optimizer.iterations.numpy()),
          flush=True)
print(json.dumps(weights))
"""


@pytest.mark.slow
def test_fit_under_mirrored_strategy_equals_one_device(pretraining_run):
    """Two replicas (logical CPUs) and one device train to the same weights (1e-5): Keras's
    per-replica gradients are summed before the global-norm clip (at lr 1e-2 the clip acts)."""
    proc = subprocess.run(
        [sys.executable, "-c", MIRRORED, pretraining_run, json.dumps(TEXTS[:8]),
         json.dumps(LABELS[:8])], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "mirrored 2 2" and lines[1] == "one_device 1 2", lines[:2]
    weights = json.loads(lines[-1])
    moved = 0.0
    for a, b, start in zip(weights["mirrored"], weights["one_device"], weights["start"]):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-5)
        moved = max(moved, float(np.abs(np.array(a) - np.array(start)).max()))
    assert moved > 1e-3  # 1,000 times the tolerance: a step taken without the sum fails


@pytest.mark.slow
def test_export_answers_as_predict(tmp_path, sample_vocab):
    """clf.export writes the commands' versioned SavedModel; its raw-text signatures answer as
    clf.predict (one segment and pairs) within 1e-5."""
    import tensorflow_text  # noqa: F401 - the SentencePiece ops of the SavedModel

    # Weights of std 0.2 (conftest.export_config): at 0.02 this tiny model's answers hardly
    # depend on the text, and a 1e-5 comparison would mean little.
    run = _pretraining_run(str(tmp_path / "run"), sample_vocab,
                           AlbertConfig(**dict(TINY, initializer_range=0.2)))
    clf = AlbertTextClassifier.from_checkpoint(run, num_classes=3, sequence_length=32,
                                               labels=["neg", "mid", "pos"])
    randomize(clf.classifier, seed=11)
    path = clf.export(str(tmp_path / "models" / "sentiment"), text_pair=True)
    assert path == str(tmp_path / "models" / "sentiment" / "1")
    loaded = tf.saved_model.load(path)
    pairs = list(zip(TEXTS, reversed(TEXTS)))
    got = loaded.signatures["serving_default"](text=tf.constant(TEXTS),
                                               text_b=tf.constant(TEXTS[::-1]))
    want = clf.predict(pairs)
    assert want.shape == (10, 3)
    np.testing.assert_allclose(got["probabilities"].numpy(), want, atol=1e-5)
    assert float(np.abs(want - want[::-1]).max()) > 1e-3  # the answers depend on the text
    single = loaded.signatures["serve_text"](text=tf.constant(TEXTS)) \
        if "serve_text" in loaded.signatures else None
    if single is not None:
        np.testing.assert_allclose(single["probabilities"].numpy(), clf.predict(TEXTS),
                                   atol=1e-5)
    with open(os.path.join(path, "assets.extra", "albert_export.json"), encoding="utf-8") as f:
        record = json.load(f)
    assert record["model"] == "classifier"


def test_a_fine_tuned_classifier_keeps_its_head(tmp_path, sample_vocab):
    """A fine-tuned official TF1 classifier (config beside it): num_classes equal to its head
    reads the whole model; another number reads the backbone and starts a new head."""
    from albert_tf.checkpoints import write_tf1_checkpoint
    from albert_tf.models.classifier import AlbertClassifier

    config = AlbertConfig(**TINY)
    source = AlbertClassifier(config, 3)
    randomize(source, seed=2)
    prefix = write_tf1_checkpoint(source, str(tmp_path / "tf1"))
    config.to_json_file(str(tmp_path / "tf1" / "albert_config.json"))
    same = AlbertTextClassifier.from_checkpoint(prefix, sample_vocab, num_classes=3,
                                                sequence_length=16)
    assert same.init_report["head"] == "checkpoint"
    for a, b in zip(source.weights, same.classifier.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.warns(UserWarning, match=r"a new head of 2 classes starts from the "
                                         r"initializer \(the checkpoint is not a classifier "
                                         r"of 2 classes"):
        other = AlbertTextClassifier.from_checkpoint(prefix, sample_vocab, num_classes=2,
                                                     sequence_length=16)
    assert other.init_report["head"] == "new" and "output_weights" in other.init_report[
        "skipped"]
    with pytest.raises(ValueError, match="max_position_embeddings 64"):
        AlbertTextClassifier.from_checkpoint(prefix, sample_vocab, sequence_length=128)


def _readme_example() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### In Python: Keras `fit` on raw text"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("\n```", start)]


@pytest.mark.grappler  # training as users run it
@pytest.mark.slow
def test_readme_example_on_the_bundled_sst2(tmp_path, sample_vocab):
    """The README's example, run as written, on the bundled SST-2: 1,000 training sentences,
    the 872 dev ones. A pretrained ALBERT costs more than a test may spend, so CKPT stands in
    for one: a tiny model (H=32, 2 layers) first trained one epoch on 4,000 other SST-2
    sentences at lr 1e-3 and saved in our model format. The example (lr 5e-5, 3 epochs) then
    ends well above the dev majority class (0.509); docs/training.md has the measured
    figures."""
    from albert_tf.checkpoints import save_albert_tf

    sst2 = glue.get_task("sst-2")
    train = glue.load_split(sst2, SST2, "train")
    dev = glue.load_split(sst2, SST2, "dev")
    run = _pretraining_run(str(tmp_path / "run"), sample_vocab,
                           AlbertConfig(**dict(TINY, max_position_embeddings=128)))
    stand_in = AlbertTextClassifier.from_checkpoint(run, num_classes=2, sequence_length=32)
    stand_in.compile(learning_rate=1e-3, warmup_proportion=0.1)
    stand_in.fit([e.text_a for e in train[4000:8000]], [int(e.label) for e in train[4000:8000]],
                 batch_size=32, epochs=1, verbose=0)
    ckpt = save_albert_tf(stand_in.classifier, str(tmp_path / "stand_in"), sample_vocab)
    dev_texts, dev_labels = [e.text_a for e in dev], [int(e.label) for e in dev]
    before = stand_in.evaluate(dev_texts, dev_labels, return_dict=True, verbose=0)["accuracy"]
    scope = {"CKPT": ckpt, "SPM": sample_vocab, "EXPORT_BASE": str(tmp_path / "models" / "sst2"),
             "texts": [e.text_a for e in train[:1000]],
             "labels": [int(e.label) for e in train[:1000]],
             "dev_texts": dev_texts, "dev_labels": dev_labels}
    exec(_readme_example(), scope)  # noqa: S102 - the README's code, as a reader runs it
    clf, probs = scope["clf"], scope["probs"]
    assert clf.init_report["head"] == "checkpoint"
    assert probs.shape == (2, 2) and np.allclose(probs.sum(-1), 1.0, atol=1e-6)
    after = clf.evaluate(dev_texts, dev_labels, return_dict=True, verbose=0)["accuracy"]
    majority = max(np.mean(dev_labels), 1 - np.mean(dev_labels))
    print(f"\nSST-2 dev accuracy: stand-in {before:.4f}, after the README example "
          f"{after:.4f}, majority class {majority:.4f}")
    assert after >= 0.62 > majority + 0.1
    assert os.path.exists(tmp_path / "models" / "sst2" / "1" / "saved_model.pb")


@pytest.mark.slow
def test_keras_file_round_trip(pretraining_run, tmp_path):
    """get_config is the constructor's arguments: a `.keras` file reloads the same answers."""
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                               sequence_length=16, labels=["neg", "pos"])
    want = clf.predict(TEXTS, verbose=0)
    clf.save(str(tmp_path / "clf.keras"))
    back = keras.models.load_model(str(tmp_path / "clf.keras"))
    assert isinstance(back, AlbertTextClassifier) and back.labels == ["neg", "pos"]
    assert back.preprocessor.sequence_length == 16
    # the performance switches travel with the file (a padded reload differs in the last bit)
    assert back.albert_model.backbone.encoder.remove_padding is True
    np.testing.assert_array_equal(back.predict(TEXTS, verbose=0), want)
    # the same file is a checkpoint: its classifier is read whole
    again = AlbertTextClassifier.from_checkpoint(str(tmp_path / "clf.keras"), num_classes=2,
                                                 sequence_length=16,
                                                 spm_model_file=clf.preprocessor.spm_model_file)
    assert again.init_report["head"] == "checkpoint"
    np.testing.assert_allclose(again.predict(TEXTS, verbose=0), want, atol=1e-6)


@pytest.mark.slow
def test_export_serves_what_the_last_fit_trained_on_and_bad_datasets(pretraining_run):
    """`predict` on single texts does not fix the export's form; the last `fit` does. An
    unbatched dataset and a strategy scope the model was not built in are named."""
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                               sequence_length=16)
    clf.predict(TEXTS[:2], verbose=0)
    clf.compile()
    clf.fit([(t, "it is") for t in TEXTS], LABELS, batch_size=5, verbose=0)
    assert clf.text_pair is True
    rows = tf.data.Dataset.from_tensor_slices((tf.constant(TEXTS), tf.constant(LABELS)))
    with pytest.raises(ValueError, match=r"single strings \(rank 0\).*dataset.batch\(32\)"):
        clf.fit(rows, verbose=0)
    clf.fit(rows.batch(5), verbose=0)
    assert clf.text_pair is False
    with pytest.raises(ValueError, match="Call from_checkpoint .* inside `with strategy"):
        with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
            clf.compile()


def test_a_kept_head_needs_the_checkpoints_label_order(pretraining_run, tmp_path):
    """A `.keras` classifier records its class names: read as a checkpoint, its head is kept
    only for the same list (the same names in another order: refused, naming both lists;
    other names: a new head, warned); names come as a sequence of distinct strings."""
    clf = AlbertTextClassifier.from_checkpoint(pretraining_run, num_classes=2,
                                               sequence_length=16, labels=["neg", "pos"])
    clf.compile(warmup_steps=2)
    saved = str(tmp_path / "clf.keras")
    clf.save(saved)
    back = keras.models.load_model(saved)  # compiled again with compile()'s own arguments
    assert back.compiled and back.get_compile_config() == {
        "albert_tf_auto": {"learning_rate": None, "warmup_steps": 2, "warmup_proportion": None},
        "optimizer_state": {"built": False, "scheduled": False}}
    assert back._fit_schedule == (5e-5, 2, None)
    spm = clf.preprocessor.spm_model_file
    with pytest.raises(ValueError, match=r"trained on the labels \['neg', 'pos'\] .*another "
                                         r"order: \['pos', 'neg'\]"):
        AlbertTextClassifier.from_checkpoint(saved, spm, num_classes=2, sequence_length=16,
                                             labels=["pos", "neg"])
    kept = AlbertTextClassifier.from_checkpoint(saved, spm, num_classes=2, sequence_length=16,
                                                labels=("neg", "pos"))
    assert kept.init_report["head"] == "checkpoint" and kept.labels == ["neg", "pos"]
    np.testing.assert_allclose(kept.predict(TEXTS, verbose=0), clf.predict(TEXTS, verbose=0),
                               atol=1e-6)
    with pytest.warns(UserWarning, match=r"a new head of 2 classes.*its labels"):
        other = AlbertTextClassifier.from_checkpoint(saved, spm, num_classes=2,
                                                     sequence_length=16, labels=["no", "yes"])
    assert other.init_report["head"] == "new"
    with pytest.raises(ValueError, match=r"`labels` is a set"):
        AlbertTextClassifier.from_checkpoint(saved, spm, num_classes=2, sequence_length=16,
                                             labels={"neg", "pos"})


@pytest.mark.slow
def test_a_pretrained_model_starts_a_classifier_quietly(pretraining_run, tmp_path, sample_vocab):
    """The usual path, a pretraining run (or an official TF1 pretrained checkpoint) into a
    classifier, warns nothing: its encoder is read, its pretraining heads are reported as
    skipped, and the new head starts from the initializer; a fine-tuned classifier of other
    classes still says that its head is dropped."""
    import warnings

    from albert_tf.checkpoints import write_tf1_checkpoint
    from albert_tf.models.classifier import AlbertClassifier
    from albert_tf.models.pretrainer import AlbertPretrainer

    pretrainer = AlbertPretrainer(AlbertConfig(**TINY))
    randomize(pretrainer, seed=4)
    tf1 = write_tf1_checkpoint(pretrainer, str(tmp_path / "tf1"))
    AlbertConfig(**TINY).to_json_file(str(tmp_path / "tf1" / "albert_config.json"))
    for source in (pretraining_run, tf1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            clf = AlbertTextClassifier.from_checkpoint(source, sample_vocab, num_classes=3,
                                                       sequence_length=16)
        said = [str(w.message) for w in caught if "Cannot load" in str(w.message)
                or "new head" in str(w.message)]
        assert said == [], said
        assert clf.init_report["head"] == "new"
        skipped = clf.init_report["skipped"]
        assert "cls/predictions/output_bias" in skipped and "output_weights" not in skipped
    np.testing.assert_array_equal(  # the encoder was read
        clf.classifier.backbone.weights[0].numpy(), pretrainer.backbone.weights[0].numpy())
    other = AlbertClassifier(AlbertConfig(**TINY), 2)
    prefix = write_tf1_checkpoint(other, str(tmp_path / "clf"))
    AlbertConfig(**TINY).to_json_file(str(tmp_path / "clf" / "albert_config.json"))
    with pytest.warns(UserWarning, match=r"a new head of 3 classes.*Cannot load"):
        AlbertTextClassifier.from_checkpoint(prefix, sample_vocab, num_classes=3,
                                             sequence_length=16)


def test_a_fine_tuning_run_gives_the_model_its_runner_delivers(tmp_path, sample_vocab):
    """from_checkpoint(RUN) of a fine-tuning run reads the model its runner predicts with and
    exports (best/ckpt-best, where its evaluation kept one), not its latest checkpoint, and
    adopts the class names the run records; RUN/ckpt-N reads that checkpoint."""
    from albert_tf.models.classifier import AlbertClassifier

    config = AlbertConfig(**dict(TINY, initializer_range=0.2))
    run = tmp_path / "run"
    (run / "best").mkdir(parents=True)
    config.to_json_file(str(run / "albert_config.json"))
    shutil.copy(sample_vocab, run / "spm.model")
    (run / "train_settings.json").write_text(json.dumps({"kind": "classifier",
                                                         "num_labels": 3}))
    (run / "labels.json").write_text(json.dumps(["neg", "mid", "pos"]))
    (run / "config.yaml").write_text("command: albert_tf.run_classifier\nmodel:\n"
                                     "  max_seq_length: 24\n  do_lower_case: true\n")
    latest, best = AlbertClassifier(config, 3), AlbertClassifier(config, 3)
    randomize(latest, seed=1)
    randomize(best, seed=2)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=latest), str(run), 1,
                               checkpoint_name="ckpt").save(checkpoint_number=8)
    tf.train.Checkpoint(model=best).write(str(run / "best" / "ckpt-best"))
    clf = AlbertTextClassifier.from_checkpoint(str(run), num_classes=3, sequence_length=16)
    assert clf.labels == ["neg", "mid", "pos"] and clf.init_report["head"] == "checkpoint"
    assert clf.init_report["read"] == f"{run}:best"
    # without num_classes: the run's 3 (a new head of 2 classes, with a warning, before)
    adopted = AlbertTextClassifier.from_checkpoint(str(run), sequence_length=16)
    assert adopted.num_classes == 3 and adopted.init_report["head"] == "checkpoint"
    assert adopted.labels == ["neg", "mid", "pos"]
    # the export of the run directory is the same delivered model (it exported the latest)
    exported, _, record = load_for_export(str(run))
    assert record["checkpoint"].endswith(os.path.join("best", "ckpt-best"))
    for got, want in zip(exported.weights, best.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert load_for_export(str(run), "latest")[2]["checkpoint"].endswith("ckpt-8")
    assert clf.preprocessor.sequence_length == 16  # as given
    assert AlbertTextClassifier.from_checkpoint(  # the run's --max_seq_length, as it predicted
        str(run), num_classes=3).preprocessor.sequence_length == 24
    for got, want, other in zip(clf.classifier.weights, best.weights, latest.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert not np.array_equal(got.numpy(), other.numpy())
    one = AlbertTextClassifier.from_checkpoint(str(run / "ckpt-8"), num_classes=3,
                                               sequence_length=16)
    for got, want in zip(one.classifier.weights, latest.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert one.labels == ["neg", "mid", "pos"]
    # another number of classes: a new head on the encoder of the same delivered model
    with pytest.warns(UserWarning, match="its encoder is read, and a new head of 2 classes"):
        two = AlbertTextClassifier.from_checkpoint(str(run), num_classes=2, sequence_length=16)
    assert two.init_report["head"] == "new" and two.init_report["read"] == f"{run}:best"
    for got, want in zip(two.classifier.backbone.weights, best.backbone.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
