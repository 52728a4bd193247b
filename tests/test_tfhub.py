"""The TF Hub pair (`python -m albert_tf.export.export_tfhub`, albert_tf/export/tfhub.py): loaded as
TF Hub users load BERT (`hub.KerasLayer`, a tf-keras layer) and as Keras 3 users can
(`keras.layers.TFSMLayer`); outputs equal to our backbone's, ids equal to the Python feature path's,
one training step changes the encoder."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the SentencePiece ops of the preprocessor

from albert_tf.models.backbone import AlbertBackbone
from albert_tf.checkpoints import (CheckpointError, initialize_backbone, initialize_from_checkpoint,
                                   save_albert_tf, write_tf1_checkpoint)
from albert_tf.config import AlbertConfig
from albert_tf.packing import pack_ids, pad_features
from albert_tf.tokenization import Tokenizer
from conftest import assert_spread, export_config, randomize, run_command
from albert_tf.export.tfhub import ExportError, export_tfhub, load_backbone

pytestmark = pytest.mark.slow

SEQ_LENGTH = 40
CONFIG = export_config(hidden_dropout_prob=0.1)  # dropout, so `training` is seen to reach it
TOLERANCE = 1e-5
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "In 1889, the Eiffel Tower was 1,063 feet tall; nobody expected it to stay.",
    "Café owners in Zürich said the ÉLAN of the season was gone.",
    "She sold 12,500 copies.",
    "A",
    ("Why would anyone read a sentence that goes on and on, clause after clause, long past the "
     "point where the reader has forgotten how it began and why it was written at all?"),
]
SECOND = [
    "A fast dark fox leapt over a sleeping hound.",
    "",
    "It was built for the World's Fair.",
    "The publisher printed more in 2021, after the film came out and sales tripled overnight.",
    "B",
    "Short.",
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, sample_vocab):
    """(backbone, export dir, source dir): a randomized tiny backbone saved in our format, read
    back through `load_backbone` (the `--init_checkpoint` loader) and exported."""
    base = tmp_path_factory.mktemp("tfhub")
    backbone = AlbertBackbone(CONFIG, name="albert")
    randomize(backbone, seed=5)
    source = str(base / "model")
    save_albert_tf(backbone, source, sample_vocab)
    loaded, spm, report = load_backbone(source)
    assert os.path.basename(spm) == os.path.basename(sample_vocab)
    assert len(report["assigned"]) == len(backbone.weights)
    export_dir = str(base / "hub")
    export_tfhub(loaded, export_dir, spm, seq_length=SEQ_LENGTH, source=report["source"])
    return backbone, export_dir, source


def _reference(backbone, features, training=False):
    return backbone({"input_ids": features["input_word_ids"],
                     "input_mask": features["input_mask"],
                     "segment_ids": features["input_type_ids"]}, training=training)


def _python_features(tokenizer, a, b=None, seq_length=SEQ_LENGTH):
    """The feature path of fine-tuning (tokenize, pack, pad), renamed as TF Hub names them."""
    ids, segments = pack_ids(tokenizer.encode(a), None if b is None else tokenizer.encode(b),
                             seq_length, tokenizer)
    row = pad_features(ids, segments, seq_length)
    return {"input_word_ids": row["input_ids"], "input_mask": row["input_mask"],
            "input_type_ids": row["segment_ids"]}


def test_layout_assets_and_trainable_variables(pair):
    backbone, export_dir, _ = pair
    assert sorted(os.listdir(export_dir)) == ["encoder", "preprocess"]
    assert os.path.exists(os.path.join(export_dir, "encoder", "assets", "albert_config.json"))
    assert any(f.endswith(".model")
               for f in os.listdir(os.path.join(export_dir, "preprocess", "assets")))
    encoder = tf.saved_model.load(os.path.join(export_dir, "encoder"))
    assert len(encoder.trainable_variables) == len(backbone.trainable_weights) == 73
    assert len(encoder.variables) == len(backbone.variables)  # + dropout's seed states
    assert all(v.trainable for v in encoder.trainable_variables)
    assert sorted(v.shape.num_elements() for v in encoder.trainable_variables) == sorted(
        int(np.prod(w.shape)) for w in backbone.trainable_weights)
    assert not [f for f in os.listdir(os.path.dirname(export_dir)) if f.startswith(".tmp")]


def test_preprocessor_ids_equal_the_python_feature_path(pair, sample_vocab):
    _, export_dir, _ = pair
    tokenizer = Tokenizer(sample_vocab)
    preprocess = tf.saved_model.load(os.path.join(export_dir, "preprocess"))
    singles = {k: v.numpy().tolist() for k, v in preprocess(tf.constant(SENTENCES)).items()}
    for i, text in enumerate(SENTENCES):
        expected = _python_features(tokenizer, text)
        assert {k: v[i] for k, v in singles.items()} == expected, text
    tokens = preprocess.tokenize(tf.constant(SENTENCES))
    assert tokens.to_list() == [tokenizer.encode(t) for t in SENTENCES]
    for seq_length in (SEQ_LENGTH, 17):  # 17: the long pairs are truncated, longest first
        packed = preprocess.bert_pack_inputs(
            [tokens, preprocess.tokenize(tf.constant(SECOND))], seq_length=seq_length)
        packed = {k: v.numpy().tolist() for k, v in packed.items()}
        for i, (a, b) in enumerate(zip(SENTENCES, SECOND)):
            expected = _python_features(tokenizer, a, b, seq_length)
            assert {k: v[i] for k, v in packed.items()} == expected, (a, b, seq_length)
    special = {k: int(v) for k, v in preprocess.tokenize.get_special_tokens_dict().items()}
    assert special == {"vocab_size": 8000, "start_of_sequence_id": 2, "end_of_segment_id": 3,
                       "padding_id": 0, "mask_id": 4}


def _tf_keras_models(export_dir):
    """What a TF Hub user writes (tf-keras: hub.KerasLayer is a Keras 2 layer): the encoder's
    outputs of text, and a classifier on its pooled output sharing the layers."""
    hub = pytest.importorskip("tensorflow_hub")
    import tf_keras

    text = tf_keras.layers.Input(shape=(), dtype=tf.string)
    encoder = hub.KerasLayer(os.path.join(export_dir, "encoder"), trainable=True)
    outputs = encoder(hub.KerasLayer(os.path.join(export_dir, "preprocess"))(text))
    logits = tf_keras.layers.Dense(2)(outputs["pooled_output"])
    return tf_keras.Model(text, outputs), tf_keras.Model(text, logits), encoder


def _assert_parity(outputs, reference):
    for name in ("pooled_output", "sequence_output"):
        np.testing.assert_allclose(outputs[name], reference[name], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(outputs["default"], reference["pooled_output"], atol=TOLERANCE,
                               rtol=0)
    assert len(outputs["encoder_outputs"]) == len(reference["hidden_states"]) - 1 == 5
    for got, want in zip(outputs["encoder_outputs"], reference["hidden_states"][1:]):
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)


def test_hub_keras_layer_outputs_equal_the_backbone_and_train(pair):
    backbone, export_dir, _ = pair
    model, classifier, encoder = _tf_keras_models(export_dir)
    assert len(encoder.trainable_weights) == len(backbone.trainable_weights)
    texts = tf.constant(SENTENCES)
    outputs = model(texts)
    features = tf.saved_model.load(os.path.join(export_dir, "preprocess"))(texts)
    reference = _reference(backbone, features)
    spread = assert_spread(reference["pooled_output"][0], reference["pooled_output"][1],
                           TOLERANCE)
    _assert_parity(outputs, reference)
    classifier.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    before = outputs["pooled_output"].numpy()
    classifier.train_on_batch(texts, np.arange(len(SENTENCES)) % 2)
    change = np.abs(model(texts)["pooled_output"].numpy() - before).max()
    assert change > 100 * TOLERANCE, (change, spread)
    dropped = encoder(features, training=True)["pooled_output"].numpy()
    assert np.abs(dropped - encoder(features)["pooled_output"].numpy()).max() > TOLERANCE


def _keras3_models(export_dir):
    """The Keras 3 composition docs/serving.md shows, its `TrainableTFSMLayer` as written there:
    TFSMLayer on `__call__`, `training` passed on so dropout runs in training, and each weight
    named without TensorFlow's ":0" (TFSMLayer keeps it, and Keras' adam/adamw make their slot
    variables' scope names from it: "'..._embeddings:0_momentum' is not a valid scope name").
    Returns (classifier of text, encoder layer, preprocess layer)."""
    import keras

    class TrainableTFSMLayer(keras.layers.TFSMLayer):
        def _add_existing_weight(self, weight):
            self._track_variable(keras.Variable(
                weight, trainable=weight.trainable,
                name=weight.name.split(":")[0].replace("/", "_")))

        def call(self, inputs, training=False):
            return self.call_endpoint_fn(inputs, training=bool(training))

    preprocess = keras.layers.TFSMLayer(os.path.join(export_dir, "preprocess"),
                                        call_endpoint="__call__", trainable=False)
    encoder = TrainableTFSMLayer(os.path.join(export_dir, "encoder"), call_endpoint="__call__")
    text = keras.Input(shape=(), dtype="string")
    pooled = encoder(preprocess(text))["pooled_output"]
    return keras.Model(text, keras.layers.Dense(2)(pooled)), encoder, preprocess


def test_keras3_tfsm_layer_outputs_equal_the_backbone_and_train(pair):
    import keras

    backbone, export_dir, _ = pair
    model, encoder, preprocess = _keras3_models(export_dir)
    texts = tf.constant(SENTENCES)
    features = preprocess(texts)
    _assert_parity(encoder(features), _reference(backbone, features))
    before = encoder(features)["pooled_output"].numpy()
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(texts, np.arange(len(SENTENCES)) % 2)
    assert np.abs(encoder(features)["pooled_output"].numpy() - before).max() > 100 * TOLERANCE
    dropped = encoder(features, training=True)["pooled_output"].numpy()
    assert np.abs(dropped - encoder(features)["pooled_output"].numpy()).max() > TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_keras3_composition_fits_with_adam_and_adamw(pair, optimizer):
    """`compile(optimizer="adam")` / `"adamw"` then `fit`, as a Keras 3 user writes it: the
    encoder's 73 weights all get slot variables and change, the loss falls; before training the
    outputs equal the backbone's within 1e-5 (the weights are the SavedModel's, not copies)."""
    import keras

    backbone, export_dir, _ = pair
    model, encoder, preprocess = _keras3_models(export_dir)
    assert len(encoder.trainable_weights) == 73
    assert all(":" not in w.path for w in encoder.trainable_weights)
    texts = tf.constant(SENTENCES)
    features = preprocess(texts)
    _assert_parity(encoder(features), _reference(backbone, features))
    before = [w.numpy() for w in encoder.trainable_weights]
    labels = np.arange(len(SENTENCES)) % 2
    data = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(len(SENTENCES))
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    losses = model.fit(data, epochs=4, verbose=0).history["loss"]
    assert losses[-1] < 0.9 * losses[0], losses
    changed = [float(np.abs(w.numpy() - b).max()) for w, b in zip(encoder.trainable_weights,
                                                                   before)]
    assert min(changed) > 0, changed
    # The layer's weights are the SavedModel's variables (wrapped, not copied): the encoder's
    # answers moved away from the backbone's.
    assert {id(v) for v in encoder._reloaded_obj.trainable_variables} == {
        id(w.value) for w in encoder.trainable_weights}
    moved = encoder(features)["pooled_output"].numpy() - _reference(backbone, features)[
        "pooled_output"].numpy()
    assert np.abs(moved).max() > 100 * TOLERANCE


def test_export_refuses_a_non_empty_dir_and_takes_an_empty_one(tmp_path, sample_vocab):
    backbone = AlbertBackbone(CONFIG, name="albert")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("a user's file")
    with pytest.raises(ExportError, match="not an empty directory"):
        export_tfhub(backbone, str(tmp_path / "full"), sample_vocab)
    assert os.listdir(tmp_path / "full") == ["mine.txt"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExportError, match="max_position_embeddings"):
        export_tfhub(backbone, str(tmp_path / "empty"), sample_vocab, seq_length=65)
    assert sorted(os.listdir(tmp_path)) == ["empty", "full"]  # no temporary directory left
    assert os.listdir(tmp_path / "empty") == []


def test_command_loads_a_tf1_checkpoint_and_refuses_an_existing_dir(pair, tmp_path,
                                                                    sample_vocab):
    """`--init_checkpoint` reads the official format too (config found beside it); the command
    refuses an existing export (status 1, the reason on stderr)."""
    backbone, export_dir, _ = pair
    tf1 = tmp_path / "tf1"
    write_tf1_checkpoint(backbone, str(tf1))
    CONFIG.to_json_file(str(tf1 / "albert_config.json"))
    loaded, _, report = load_backbone(str(tf1), spm_model_file=sample_vocab)
    assert report["source"]["type"] == "tf1"
    for got, want in zip(loaded.weights, backbone.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    run = run_command("albert_tf.export.export_tfhub", "--init_checkpoint", str(tf1),
                      "--spm_model_file",
                      sample_vocab, "--export_dir", export_dir, process=True)  # `python -m`
    assert run.returncode == 1, run.stderr[-2000:]
    assert "not an empty directory" in run.stderr


def test_encoder_reads_back_as_init_checkpoint(pair):
    """The encoder SavedModel is an `--init_checkpoint`: every backbone weight read back
    exactly (a fresh backbone differs first); another architecture is refused by name."""
    backbone, export_dir, _ = pair
    fresh = AlbertBackbone(CONFIG, name="albert")
    assert any(not np.array_equal(g.numpy(), w.numpy())
               for g, w in zip(fresh.weights, backbone.weights))
    report = initialize_backbone(fresh, os.path.join(export_dir, "encoder"))
    assert report["source"]["type"] == "tfhub_encoder"
    assert len(report["assigned"]) == len(fresh.weights) and not report["skipped"]
    for got, want in zip(fresh.weights, backbone.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    layers = CONFIG.num_hidden_layers
    other = AlbertBackbone(AlbertConfig(**dict(CONFIG.to_dict(), num_hidden_layers=layers + 1)),
                           name="albert")
    with pytest.raises(CheckpointError,
                       match=f"num_hidden_layers {layers} there, {layers + 1} here"):
        initialize_backbone(other, os.path.join(export_dir, "encoder"))
    with pytest.raises(CheckpointError, match="holds the backbone only"):
        initialize_from_checkpoint(fresh, os.path.join(export_dir, "encoder"))
