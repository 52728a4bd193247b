"""Every saved form goes into every tool (issue 57 item 2): a `.keras` file of
`AlbertTextClassifier` (and of `AlbertTextTagger`), a training run's --output_dir, `DIR:best`,
our model directory, an official TF1 checkpoint and a Hugging Face folder, each into
`albert_tf.convert` (every target), `albert_tf.export.export_saved_model`,
`albert_tf.export.export_tfhub`, `albert_tf.export.export_tflite` and `--init_checkpoint`; run in
this process through each command's `cli` (as `python -m`), and every cell's answers equal the saved
classifier's own on the same raw text (logits to 1e-5, token ids exactly), its SentencePiece model
and labels travelling with it."""

import filecmp
import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import WIKITEXT, randomize, run_cli, tiny_config

from albert_tf import (AlbertClassifier, AlbertTextClassifier, AlbertTextPreprocessor,
                       AlbertTextTagger, AlbertTokenClassifier)
from albert_tf.checkpoints import CheckpointError, initialize_backbone, initialize_from_checkpoint
from albert_tf.checkpoints.conversion import read_source
from albert_tf.tokenization import Tokenizer

TEXTS = ["a gripping film", "dull and flat , too long", "the 1,000 best scenes"]
LABELS = ["negative", "neutral", "positive"]
SEQ = 16
NO_LABELS = ("tf1",)  # an official checkpoint has no place for class names
TOL = 1e-5
SOURCES = ("keras", "run", "run:best", "ours", "tf1", "hf")


def _run_dir(directory, model, spm, kind, weights_latest=None):
    """A fine-tuning run's --output_dir as the loop writes it: albert_config.json,
    train_settings.json (the model kind), ckpt-1, the SentencePiece model, labels.json; with
    `weights_latest`, ckpt-1 holds those and best/ckpt-best `model`'s (so `DIR:best` differs
    from the latest)."""
    os.makedirs(directory)
    model.config.to_json_file(os.path.join(directory, "albert_config.json"))
    with open(os.path.join(directory, "train_settings.json"), "w") as f:
        json.dump({"kind": kind, "num_labels": model.num_labels}, f)
    with open(os.path.join(directory, "labels.json"), "w") as f:
        json.dump(LABELS, f)
    shutil.copy(spm, directory)
    if weights_latest is None:
        tf.train.Checkpoint(model=model).save(os.path.join(directory, "ckpt"))
        return directory
    saved = [w.numpy() for w in model.weights]
    for w, value in zip(model.weights, weights_latest):
        w.assign(value)
    tf.train.Checkpoint(model=model).save(os.path.join(directory, "ckpt"))
    for w, value in zip(model.weights, saved):
        w.assign(value)
    tf.train.Checkpoint(model=model).write(os.path.join(directory, "best", "ckpt-best"))
    return directory


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    """{"sources": {name: path}, "spm", "features", "logits", "pooled", "ids", "classifier"}:
    one 3-class classifier (tiny, random weights) saved as `clf.save("model.keras")` and as
    every other form (ours, tf1 and hf by `convert` from the `.keras`: cells of the matrix)."""
    from albert_tf.data.train_vocab import train_vocab

    tmp = tmp_path_factory.mktemp("saved_forms")
    spm_dir = tmp / "vocab"
    spm_dir.mkdir()
    train_vocab([WIKITEXT], str(spm_dir / "tiny"), vocab_size=300, do_lower_case=True,
                num_threads=2)
    spm = str(spm_dir / "tiny.model")
    config = tiny_config(vocab_size=300, initializer_range=0.2)
    classifier = AlbertClassifier(config, num_labels=3)
    randomize(classifier, seed=3)
    clf = AlbertTextClassifier(classifier, AlbertTextPreprocessor(spm, SEQ), labels=LABELS)
    keras_file = str(tmp / "model.keras")
    clf.save(keras_file)
    features = clf.preprocessor(TEXTS)
    outputs = classifier(features, training=False)
    sources = {"keras": keras_file}
    sources["run"] = _run_dir(str(tmp / "run"), classifier, spm, "classifier")
    other = [np.full(w.shape, 0.01, np.float32) for w in classifier.weights]
    sources["run:best"] = _run_dir(str(tmp / "run_best"), classifier, spm, "classifier",
                                   weights_latest=other) + ":best"
    for target, name in (("albert_tf", "ours"), ("tf1", "tf1"), ("hf", "hf")):
        out = str(tmp / "converted" / f"keras_to_{target}")
        assert run_cli("albert_tf.convert", "--input", keras_file, "--target", target,
                       "--output", out) == 0
        sources[name] = out
    return {"sources": sources, "spm": spm, "tmp": tmp, "classifier": classifier,
            "features": {k: v.numpy() for k, v in features.items()},
            "logits": outputs["logits"].numpy(), "pooled": outputs["pooled_output"].numpy()}


def _assert_same_vocabulary(spm, reference):
    """The tokenizer travelled: the same SentencePiece model, so the same ids."""
    assert spm and filecmp.cmp(spm, reference, shallow=False), spm
    assert [Tokenizer(spm).encode(t) for t in TEXTS] == [Tokenizer(reference).encode(t)
                                                        for t in TEXTS]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["albert_tf", "tf1", "hf"])
def test_convert_every_source_to_every_target(forms, target):
    """`python -m albert_tf.convert --input SOURCE --target T` (--source left to auto) from
    every form: the model read back gives the saved classifier's logits (1e-5), the
    SentencePiece model is copied into the output, the labels travel (hf: id2label; ours:
    albert_tf.json)."""
    for name, path in forms["sources"].items():
        out = str(forms["tmp"] / "convert" / f"{name.replace(':', '_')}_to_{target}")
        assert run_cli("albert_tf.convert", "--input", path, "--target", target,
                       "--output", out) == 0, name
        read = read_source(out)
        logits = read.model(forms["features"], training=False)["logits"].numpy()
        np.testing.assert_allclose(logits, forms["logits"], atol=TOL, err_msg=name)
        _assert_same_vocabulary(read.spm_model_file, forms["spm"])
        want = None if name in NO_LABELS or target in NO_LABELS else LABELS
        assert read.labels == want, (name, target)


@pytest.mark.slow
def test_the_exports_read_every_source(forms):
    """What `export_saved_model` and `export_tflite` read (`load_for_export`, with the flags'
    defaults) and what `export_tfhub` reads (`load_backbone`), from every form: the saved
    classifier's logits or pooled output (1e-5), its SentencePiece model, its labels and
    sequence length where the form records them. The export after the read does not depend
    on the form: each command runs whole on one form below."""
    from albert_tf.export.saved_model import load_for_export
    from albert_tf.export.tfhub import load_backbone

    for name, path in forms["sources"].items():
        model, spm, record = load_for_export(path)
        np.testing.assert_allclose(model(forms["features"], training=False)["logits"],
                                   forms["logits"], atol=TOL, err_msg=name)
        _assert_same_vocabulary(spm, forms["spm"])
        assert record["labels"] == (None if name in NO_LABELS else LABELS), name
        assert record["max_seq_length"] == (SEQ if name == "keras" else None), name
        backbone, spm, _ = load_backbone(path)
        np.testing.assert_allclose(backbone(forms["features"])["pooled_output"],
                                   forms["pooled"], atol=TOL, err_msg=name)
        _assert_same_vocabulary(spm, forms["spm"])


@pytest.mark.slow
def test_export_saved_model_of_a_saved_text_classifier(forms):
    """`python -m albert_tf.export.export_saved_model --model_dir model.keras` (the README's
    `clf.save`; a TypeError before): the SavedModel answers raw text with the classifier's
    logits (1e-5), tokenized as its preprocessor does, at its sequence length, with its label
    names."""
    base = str(forms["tmp"] / "exports" / "keras")
    assert run_cli("albert_tf.export.export_saved_model", "--model_dir", forms["sources"]["keras"],
                   "--export_dir", base) == 0
    loaded = tf.saved_model.load(os.path.join(base, "1"))
    got = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(got["logits"].numpy(), forms["logits"], atol=TOL)
    np.testing.assert_array_equal(got["input_ids"].numpy(), forms["features"]["input_ids"])
    with open(os.path.join(base, "1", "assets.extra", "albert_export.json")) as f:
        record = json.load(f)
    assert record["labels"] == LABELS and record["max_seq_length"] == SEQ


@pytest.mark.slow
def test_export_tfhub_of_a_hugging_face_folder(forms):
    """`python -m albert_tf.export.export_tfhub --init_checkpoint HF_DIR` (its spiece.model
    travels): the preprocessor packs the text as the classifier's preprocessor (ids equal) and the
    encoder gives its pooled output (1e-5)."""
    import tensorflow_text  # noqa: F401 - the preprocessor's SentencePiece ops

    out = str(forms["tmp"] / "hub")
    assert run_cli("albert_tf.export.export_tfhub", "--init_checkpoint", forms["sources"]["hf"],
                   "--export_dir", out, "--max_seq_length", str(SEQ)) == 0
    pre = tf.saved_model.load(os.path.join(out, "preprocess"))
    encoder = tf.saved_model.load(os.path.join(out, "encoder"))
    inputs = pre(tf.constant(TEXTS))
    np.testing.assert_array_equal(inputs["input_word_ids"].numpy(),
                                  forms["features"]["input_ids"])
    pooled = encoder(inputs)["pooled_output"].numpy()
    np.testing.assert_allclose(pooled, forms["pooled"], atol=TOL)


@pytest.mark.slow
def test_export_tflite_of_an_official_checkpoint(forms):
    """`python -m albert_tf.export.export_tflite --model_dir TF1_DIR` (a TF1 checkpoint was refused
    before: "convert it first"): the on-device model answers raw text with the saved
    classifier's logits (1e-5)."""
    from albert_tf.export.tflite import interpreter, run

    out = str(forms["tmp"] / "tf1.tflite")
    assert run_cli("albert_tf.export.export_tflite", "--model_dir", forms["sources"]["tf1"],
                   "--output",
                   out, "--max_seq_length", str(SEQ)) == 0
    runner = interpreter(out).get_signature_runner()
    logits = np.concatenate([run(runner, {"text": [t]})["logits"] for t in TEXTS])
    np.testing.assert_allclose(logits, forms["logits"], atol=TOL)


@pytest.mark.slow
def test_init_checkpoint_from_every_source(forms):
    """`--init_checkpoint SOURCE` (the fine-tuning commands' readers): the whole classifier
    (`initialize_from_checkpoint`), its backbone (`initialize_backbone`) and
    `AlbertTextClassifier.from_checkpoint` from every form give the saved classifier's logits
    and pooled output (1e-5), tokenized with its SentencePiece model."""
    config = forms["classifier"].config
    for name, path in forms["sources"].items():
        model = AlbertClassifier(config, num_labels=3)
        initialize_from_checkpoint(model, path)
        np.testing.assert_allclose(model(forms["features"], training=False)["logits"],
                                   forms["logits"], atol=TOL, err_msg=name)
        initialize_backbone(model.backbone, path)
        np.testing.assert_allclose(model.backbone(forms["features"])["pooled_output"],
                                   forms["pooled"], atol=TOL, err_msg=name)
        # The Python API: config, SentencePiece model (a .keras file's, not beside it) and
        # the head from the source.
        clf = AlbertTextClassifier.from_checkpoint(path, num_classes=3, sequence_length=SEQ,
                                                   labels=LABELS)
        assert clf.init_report["head"] == "checkpoint", name
        np.testing.assert_allclose(clf.classifier(forms["features"])["logits"],
                                   forms["logits"], atol=TOL, err_msg=name)
        _assert_same_vocabulary(clf.preprocessor.spm_model_file, forms["spm"])


def test_a_missing_path_says_no_such_path(tmp_path, capsys):
    """A mistyped source is "no such path: PATH" in every reader (it was "No model config
    found with ...", or a TF1 reader's message), and convert exits 1 with that line."""
    from albert_tf.checkpoints.conversion import checkpoint_config

    missing = str(tmp_path / "runs" / "sst2_typo")
    for read in (checkpoint_config, read_source, lambda p: initialize_backbone(None, p),
                 lambda p: initialize_from_checkpoint(None, p + ":best")):
        with pytest.raises(CheckpointError, match=f"^no such path: {missing}$"):
            read(missing)
    assert run_cli("albert_tf.convert", "--input", missing, "--output",
                   str(tmp_path / "out")) == 1
    assert f"error: no such path: {missing}" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")


def test_a_keras_file_naming_a_foreign_class_is_refused_and_nothing_runs(tmp_path):
    """A `.keras` file whose config names a class of another module (`os.system`) is refused
    with its name before Keras reads it: the command it carries never runs (issue 58 item
    7). Every reader goes through `load_pretrained`."""
    import zipfile

    from albert_tf.checkpoints import load_pretrained

    marker = tmp_path / "ran"
    path = str(tmp_path / "model.keras")
    config = {"module": "os", "class_name": "system", "registered_name": "system",
              "config": {"command": f"touch {marker}"}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.15.1"}))
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", b"")
    for read in (load_pretrained, read_source, lambda p: initialize_backbone(None, p)):
        with pytest.raises(CheckpointError, match="names the class 'system' of module 'os'"):
            read(path)
    assert not marker.exists()


@pytest.mark.slow
def test_run_tagging_reads_the_config_and_vocabulary_its_checkpoint_carries(forms, tmp_path):
    """`run_tagging --init_checkpoint model.keras` with neither --albert_config_file nor
    --spm_model_file ("--albert_config_file is required" before): the model is built from the
    config the `.keras` carries, tokenized with its SentencePiece model (the run records and
    keeps it), and its backbone starts from the saved weights."""
    from albert_tf.config import AlbertConfig

    train = tmp_path / "train.conll"
    train.write_text("a\tO\ngripping\tB-X\nfilm\tI-X\n\ndull\tB-X\nand\tO\nflat\tO\n\n")
    out = tmp_path / "run"
    assert run_cli("albert_tf.run_tagging", "--init_checkpoint", forms["sources"]["keras"],
                   "--train_file", str(train), "--output_dir", str(out), "--do_train",
                   "--max_seq_length", str(SEQ), "--train_batch_size", "2", "--train_step",
                   "1", "--warmup_step", "0", "--learning_rate", "1e-12") == 0
    assert AlbertConfig.from_json_file(str(out / "albert_config.json")).to_dict() == \
        forms["classifier"].config.to_dict()
    kept = [f for f in os.listdir(out) if f.endswith(".model")]
    assert len(kept) == 1 and filecmp.cmp(out / kept[0], forms["spm"], shallow=False)
    tagger = read_source(str(out))
    np.testing.assert_allclose(tagger.model.backbone(forms["features"])["pooled_output"],
                               forms["pooled"], atol=TOL)


@pytest.mark.slow
def test_a_saved_text_tagger_into_the_tools_and_a_clear_refusal(forms, tmp_path, capsys):
    """A `.keras` file of `AlbertTextTagger` converts (its tags as Hugging Face's id2label,
    its SentencePiece model copied) and is read by the exports with its logits (1e-5); the
    TensorFlow Lite export, which has no on-device form of a token classifier, refuses it by
    name and writes nothing."""
    from albert_tf.export.saved_model import load_for_export

    tags = ["O", "B-X", "I-X"]
    model = AlbertTokenClassifier(forms["classifier"].config, num_labels=3)
    randomize(model, seed=4)
    tagger = AlbertTextTagger(model, AlbertTextPreprocessor(forms["spm"], SEQ), labels=tags)
    path = str(tmp_path / "tagger.keras")
    tagger.save(path)
    want = model(forms["features"], training=False)["logits"].numpy()
    out = str(tmp_path / "hf")
    assert run_cli("albert_tf.convert", "--input", path, "--target", "hf", "--output", out) == 0
    for source in (path, out):
        read = read_source(source)
        assert read.labels == tags, source
        np.testing.assert_allclose(read.model(forms["features"])["logits"], want, atol=TOL)
        _assert_same_vocabulary(read.spm_model_file, forms["spm"])
    exported, spm, record = load_for_export(path)
    np.testing.assert_allclose(exported(forms["features"])["logits"], want, atol=TOL)
    assert record["labels"] == tags
    capsys.readouterr()
    tflite = str(tmp_path / "tagger.tflite")
    assert run_cli("albert_tf.export.export_tflite", "--model_dir", path, "--output", tflite) == 1
    assert "token_classifier" in capsys.readouterr().err and not os.path.exists(tflite)


def _tokenizer_config(folder) -> dict:
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        return json.load(f)


@pytest.mark.slow
def test_a_cased_model_keeps_its_casing_in_every_form(forms, tmp_path, caplog):
    """A cased classifier (do_lower_case=False) stays cased from every form that records its
    casing: a `.keras` file, our directory (albert_tf.json), a Hugging Face folder
    (tokenizer_config.json), a run fine-tuned with --nodo_lower_case (its config.yaml; issue 58
    item 3): `carried_tokenizer`, `from_checkpoint`, `convert --target hf` and
    `export_saved_model --model_dir RUN` without the flag (all said True before); an
    explicit argument or flag still wins (the flag against the record with a warning); an
    official TF1 checkpoint records none."""
    import yaml

    from albert_tf.checkpoints.conversion import carried_tokenizer
    from albert_tf.commands.experiment import ExperimentConfig
    from albert_tf.commands.runner import carried_vocabulary

    cased = AlbertTextClassifier(forms["classifier"],
                                 AlbertTextPreprocessor(forms["spm"], SEQ, do_lower_case=False),
                                 labels=LABELS)
    sources = {"keras": str(tmp_path / "cased.keras")}
    cased.save(sources["keras"])
    for target, name in (("albert_tf", "ours"), ("hf", "hf")):
        sources[name] = str(tmp_path / name)
        assert run_cli("albert_tf.convert", "--input", sources["keras"], "--target", target,
                       "--output", sources[name]) == 0
    with open(os.path.join(sources["ours"], "albert_tf.json")) as f:
        assert json.load(f)["do_lower_case"] is False
    assert _tokenizer_config(sources["hf"])["do_lower_case"] is False
    run = sources["run"] = _run_dir(str(tmp_path / "run"), forms["classifier"], forms["spm"],
                                    "classifier")
    with open(os.path.join(run, "config.yaml"), "w") as f:  # as record_config writes it
        yaml.safe_dump({"command": "albert_tf.run_classifier",
                        "model": {"do_lower_case": False, "max_seq_length": SEQ}}, f)
    texts = ["A Gripping FILM", "UP"]
    cased_ids = [Tokenizer(forms["spm"], do_lower_case=False).encode(t) for t in texts]
    assert cased_ids != [Tokenizer(forms["spm"]).encode(t) for t in texts]
    for name, path in sources.items():
        assert carried_tokenizer(path)["do_lower_case"] is False, name
        assert read_source(path).do_lower_case is False, name
    for name in ("keras", "hf"):
        clf = AlbertTextClassifier.from_checkpoint(sources[name], num_classes=3,
                                                   sequence_length=SEQ)
        assert clf.preprocessor.do_lower_case is False, name
        ids = clf.preprocessor(texts)["input_ids"].numpy()
        assert [row[1:1 + len(want)].tolist() for row, want in zip(ids, cased_ids)] == cased_ids
    assert AlbertTextClassifier.from_checkpoint(sources["hf"], num_classes=3, sequence_length=SEQ,
                                                do_lower_case=True).preprocessor.do_lower_case
    assert carried_tokenizer(forms["sources"]["tf1"])["do_lower_case"] is None  # official: True
    # --init_checkpoint: the casing the source records, unless --do_lower_case was given.
    for given, want in ((frozenset(), False), (frozenset({"do_lower_case"}), True)):
        exp = ExperimentConfig.of("albert_tf.run_classifier", {
            "spm_model_file": None, "vocab_file": None, "do_lower_case": True}, given)
        caplog.clear()
        exp = carried_vocabulary(exp, sources["keras"])
        assert exp.do_lower_case is want and exp.spm_model_file == forms["spm"]
        warned = [r.getMessage() for r in caplog.records if "differs from the casing" in
                  r.getMessage()]
        assert len(warned) == (1 if given else 0), warned
    # A run fine-tuned cased, converted and exported without --do_lower_case.
    hf_of_run = str(tmp_path / "hf_of_run")
    assert run_cli("albert_tf.convert", "--input", run, "--target", "hf", "--output",
                   hf_of_run) == 0
    assert _tokenizer_config(hf_of_run)["do_lower_case"] is False
    base = str(tmp_path / "exports")
    assert run_cli("albert_tf.export.export_saved_model", "--model_dir", run, "--export_dir", base,
                   "--max_seq_length", str(SEQ)) == 0
    with open(os.path.join(base, "1", "assets.extra", "albert_export.json")) as f:
        assert json.load(f)["do_lower_case"] is False
    served = tf.saved_model.load(os.path.join(base, "1")).signatures["serving_default"](
        text=tf.constant(["UP"]))["input_ids"].numpy()[0]
    assert served[1:1 + len(cased_ids[-1])].tolist() == cased_ids[-1]


@pytest.mark.slow
def test_a_keras_model_refuses_another_vocabulary_at_its_path(forms, tmp_path, capsys):
    """A `.keras` file records its vocabulary's sha256 (the preprocessor's config): another
    SentencePiece model put at the same path (here the same pieces and one more proto field,
    a retrained vocabulary alike) is refused by `keras.models.load_model`, the readers and
    `convert`, naming the file and both digests (it was used silently before); a `.keras`
    saved before the digest was recorded still loads."""
    import zipfile

    import keras

    from albert_tf.checkpoints.conversion import carried_tokenizer

    spm = str(tmp_path / "v.model")
    shutil.copy(forms["spm"], spm)
    clf = AlbertTextClassifier(forms["classifier"], AlbertTextPreprocessor(spm, SEQ),
                               labels=LABELS)
    path = str(tmp_path / "model.keras")
    clf.save(path)
    saved = Tokenizer(spm).sha256
    assert clf.preprocessor.get_config()["vocabulary_sha256"] == saved
    with open(spm, "ab") as f:
        f.write(bytes([0xC0, 0x3E, 0x01]))  # field 1000 = 1: a valid model, other bytes
    now = Tokenizer(spm).sha256
    assert Tokenizer(spm).encode(TEXTS[0]) == Tokenizer(forms["spm"]).encode(TEXTS[0])
    message = f"{spm} is not the vocabulary .* sha256 is {now}, the model records {saved}"
    with pytest.raises(TypeError, match=message):  # Keras wraps the preprocessor's ValueError
        keras.models.load_model(path)
    for read in (read_source, carried_tokenizer,
                 lambda p: AlbertTextClassifier.from_checkpoint(p, num_classes=3)):
        with pytest.raises(CheckpointError, match=message):
            read(path)
    out = str(tmp_path / "hf")
    assert run_cli("albert_tf.convert", "--input", path, "--target", "hf", "--output", out) == 1
    assert saved in capsys.readouterr().err and not os.path.exists(out)
    # Saved before the digest was recorded: loads as before.
    old = str(tmp_path / "old.keras")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(old, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                data = data.replace(f', "vocabulary_sha256": "{saved}"'.encode(), b"")
                assert saved.encode() not in data
            dst.writestr(item, data)
    np.testing.assert_allclose(keras.models.load_model(old).classifier(forms["features"])[
        "logits"], forms["logits"], atol=TOL)
    assert read_source(old).spm_model_file == spm


@pytest.mark.slow
def test_convert_overwrite_replaces_the_whole_earlier_conversion(forms, tmp_path):
    """`convert --overwrite` leaves nothing of the earlier conversion: a TF1 target keeps no
    earlier `*.model` beside the new one (two were there, `find_sentencepiece` picking one by
    name), a Hugging Face target no spiece.model / tokenizer files when the new source has no
    vocabulary; a user's own file still makes the directory not replaceable."""
    other = str(tmp_path / "aaa_other.model")  # sorts before tiny.model
    shutil.copy(forms["spm"], other)
    keras_file = forms["sources"]["keras"]
    tf1 = str(tmp_path / "tf1")
    assert run_cli("albert_tf.convert", "--input", keras_file, "--target", "tf1", "--output",
                   tf1, "--spm_model_file", other) == 0
    assert run_cli("albert_tf.convert", "--input", keras_file, "--target", "tf1", "--output",
                   tf1, "--overwrite") == 0
    assert sorted(f for f in os.listdir(tf1) if f.endswith(".model")) == ["tiny.model"]
    assert read_source(tf1).spm_model_file == os.path.join(tf1, "tiny.model")
    no_vocabulary = str(tmp_path / "tf1_without_vocabulary")
    shutil.copytree(tf1, no_vocabulary, ignore=shutil.ignore_patterns("*.model"))
    hf = str(tmp_path / "hf")
    assert run_cli("albert_tf.convert", "--input", keras_file, "--target", "hf", "--output",
                   hf) == 0
    assert run_cli("albert_tf.convert", "--input", no_vocabulary, "--target", "hf",
                   "--output", hf, "--overwrite") == 0
    assert sorted(os.listdir(hf)) == ["config.json", "model.safetensors"]
    np.testing.assert_allclose(read_source(hf).model(forms["features"])["logits"],
                               forms["logits"], atol=TOL)
    (tmp_path / "hf" / "notes.txt").write_text("mine")
    assert run_cli("albert_tf.convert", "--input", keras_file, "--target", "hf", "--output",
                   hf, "--overwrite") == 1
    assert sorted(os.listdir(hf)) == ["config.json", "model.safetensors", "notes.txt"]


@pytest.mark.slow
def test_convert_refuses_before_writing_anything(forms, tmp_path, capsys):
    """Refused with one line (status 1) and nothing written: a SentencePiece model of
    another size than the model's vocab_size (500 pieces for 2000 was written before); an
    --output that is the input folder or inside it (config.json and the weights were
    rewritten before failing on "are the same file"); a `.keras` of a plain Keras model (a
    TypeError traceback before), in convert and export_saved_model."""
    import keras

    from albert_tf.checkpoints import save_albert_tf

    bigger = AlbertClassifier(tiny_config(vocab_size=400), num_labels=3)
    ours = save_albert_tf(bigger, str(tmp_path / "ours_400"))
    out = str(tmp_path / "out")
    for target in ("albert_tf", "tf1", "hf"):
        capsys.readouterr()
        assert run_cli("albert_tf.convert", "--input", ours, "--target", target, "--output",
                       out, "--spm_model_file", forms["spm"]) == 1
        err = capsys.readouterr().err
        assert "has 300 pieces but the model's vocab_size is 400" in err, err
        assert not os.path.exists(out)
    hf = forms["sources"]["hf"]
    before = {f: os.path.getmtime(os.path.join(hf, f)) for f in os.listdir(hf)}
    for output, where in ((hf, "is"), (os.path.join(hf, "sub"), "is inside")):
        assert run_cli("albert_tf.convert", "--input", hf, "--target", "hf", "--output",
                       output, "--overwrite") == 1
        err = capsys.readouterr().err
        assert f"--output {output} {where} the input's directory" in err, err
    assert {f: os.path.getmtime(os.path.join(hf, f)) for f in os.listdir(hf)} == before
    plain = str(tmp_path / "plain.keras")
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(plain)
    for args in (("albert_tf.convert", "--input", plain, "--output", out),
                 ("albert_tf.export.export_saved_model", "--model_dir", plain, "--export_dir",
                  out)):
        assert run_cli(*args) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {plain} holds a Keras Sequential, not an ALBERT model")
        assert "AlbertTextClassifier" in err and "Traceback" not in err
        assert not os.path.exists(out)


def _tagging_args(init, out, train):
    """run_tagging for one step from `init` into `out` (a tiny CoNLL file at `train`)."""
    train.write_text("a\tO\ngripping\tB-X\nfilm\tI-X\n\ndull\tB-X\nand\tO\nflat\tO\n\n")
    return ["--init_checkpoint", init, "--train_file", str(train), "--output_dir", str(out),
            "--do_train", "--max_seq_length", str(SEQ), "--train_batch_size", "2",
            "--train_step", "1"]


def test_an_export_is_not_a_checkpoint(forms, tmp_path, capsys):
    """A SavedModel export (BASE/NAME/N or BASE/NAME) given as --init_checkpoint or to convert
    is refused in one line naming the run its export record says it came from (issue 58
    item 8: it was read as a TF1 checkpoint, a 5 KB list of missing weights), and the
    fine-tuning command creates no --output_dir."""
    version = tmp_path / "exports" / "sst" / "1"
    (version / "assets.extra").mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    run = forms["sources"]["run"]
    (version / "assets.extra" / "albert_export.json").write_text(json.dumps(
        {"source": {"type": "run_classifier", "output_dir": run, "which": "final"}}))
    for path in (str(version), str(version.parent)):
        expected = (f"{path} is an exported SavedModel, not a checkpoint: pass the run "
                    f"directory it was exported from ({run}, as its "
                    "assets.extra/albert_export.json records).")
        for read in (read_source, lambda p: initialize_backbone(None, p),
                     lambda p: initialize_from_checkpoint(None, p)):
            with pytest.raises(CheckpointError) as raised:
                read(path)
            assert str(raised.value) == expected
        assert run_cli("albert_tf.convert", "--input", path, "--output",
                       str(tmp_path / "out")) == 1
        assert capsys.readouterr().err == f"error: {expected}\n"
    out = tmp_path / "runs" / "tagging"
    assert run_cli("albert_tf.run_tagging",
                   *_tagging_args(str(version), out, tmp_path / "train.conll")) == 1
    assert capsys.readouterr().err.endswith(
        f"error: {version} is an exported SavedModel, not a checkpoint: pass the run "
        f"directory it was exported from ({run}, as its assets.extra/albert_export.json "
        "records).\n")
    assert sorted(os.listdir(tmp_path)) == ["exports", "train.conll"]


def test_a_failed_init_checkpoint_leaves_no_new_run_directory(forms, tmp_path, capsys):
    """An --init_checkpoint whose data file is cut short fails after the run directory's
    features and records are written (issue 58 item 9): a directory the command created
    (and the parents it made) is removed; one that was there keeps what it held."""
    source = tmp_path / "tf1"
    shutil.copytree(forms["sources"]["tf1"], source)
    data = source / "model.ckpt.data-00000-of-00001"
    os.truncate(data, os.path.getsize(data) // 2)
    new = tmp_path / "runs" / "tagging"
    assert run_cli("albert_tf.run_tagging",
                   *_tagging_args(str(source), new, tmp_path / "train.conll")) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"error: {data} is damaged (truncated: it ends before the tensors its "
                        f"index lists): the checkpoint {source / 'model.ckpt'} cannot be read. "
                        "Copy the checkpoint again from where it came from, or use another "
                        "checkpoint (of a run: RUN/ckpt-N).\n"), err
    assert sorted(os.listdir(tmp_path)) == ["tf1", "train.conll"]
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    assert run_cli("albert_tf.run_tagging",
                   *_tagging_args(str(source), existing, tmp_path / "train.conll")) == 1
    assert (existing / "notes.txt").read_text() == "mine"


def test_a_keras_file_naming_an_unknown_class_is_refused_by_name(forms, tmp_path, capsys):
    """A saved text classifier whose config names a class Keras and albert_tf do not have
    (with no module, or under albert_tf's but unregistered) is refused in one line naming it
    (issue 58 item 7: Keras's several-line "Could not locate class", or a traceback)."""
    import zipfile

    with zipfile.ZipFile(forms["sources"]["keras"]) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(files["config.json"])
    for module, registered in ((None, None), ("albert_tf.models", "albert_tf>system")):
        config["config"]["preprocessor"]["config"]["dtype"] = {
            "module": module, "class_name": "system", "config": {},
            "registered_name": registered}
        path = tmp_path / f"{module}.keras"
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in files.items():
                archive.writestr(name, json.dumps(config) if name == "config.json" else data)
        assert run_cli("albert_tf.convert", "--input", str(path), "--output",
                       str(tmp_path / "out")) == 1
        where = f"module {module!r}" if module else "no module"
        assert capsys.readouterr().err == (
            f"error: {path} names the class 'system' of {where}, which is neither Keras's nor "
            "albert_tf's: it is not loaded (nothing of the file was run). Load only .keras "
            "files saved from albert_tf models.\n")
    assert not (tmp_path / "out").exists()


def test_a_hugging_face_folder_without_safetensors_installed(forms, monkeypatch):
    """Reading model.safetensors without the safetensors package names the package to
    install (it was "No module named 'safetensors'")."""
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)  # `import` raises ImportError
    weights = os.path.join(forms["sources"]["hf"], "model.safetensors")
    with pytest.raises(CheckpointError) as raised:
        read_source(forms["sources"]["hf"])
    assert str(raised.value) == (f"{weights} is a safetensors file, and reading it needs the "
                                 "safetensors package: pip install safetensors")


@pytest.mark.slow
def test_prediction_from_a_run_with_a_damaged_checkpoint_names_it(forms, tmp_path, capsys):
    """--do_predict without --do_train reads the run's latest checkpoint: a truncated data
    file is named in one line (it was `IndexError: Read less bytes than requested`)."""
    out = tmp_path / "run"
    args = _tagging_args(forms["sources"]["keras"], out, tmp_path / "train.conll")
    assert run_cli("albert_tf.run_tagging", *args) == 0
    prefix = tf.train.latest_checkpoint(str(out))
    data = f"{prefix}.data-00000-of-00001"
    os.truncate(data, os.path.getsize(data) // 2)
    capsys.readouterr()
    predict = [a for a in args if a != "--do_train"] + [
        "--do_predict", "--test_file", str(tmp_path / "train.conll")]
    assert run_cli("albert_tf.run_tagging", *predict) == 1
    assert capsys.readouterr().err.endswith(
        f"error: {data} is damaged (truncated: it ends before the tensors its index lists): "
        f"the checkpoint {prefix} cannot be read. Copy the checkpoint again from where it came "
        "from, or use another checkpoint (of a run: RUN/ckpt-N).\n")
