"""Drop-in fidelity with Google's official fine-tuning scripts: their command lines run
unchanged (GLUE root as --data_dir, every official task name, --albert_hub_module_handle,
--vocab_file, --threshold_to_export, --use_einsum) or fail with an error that names the flag and
the fix; prediction and export use the best evaluated checkpoint and never a model with a random
head."""

import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertClassifier, AlbertConfig
from albert_tf.checkpoints import model_weights
from albert_tf.packing import pack_ids, pad_features
from albert_tf.records import example_of
from albert_tf.tasks import glue
from albert_tf.tokenization import Tokenizer
from conftest import (ROOT, SHARED_DIR, assert_spread, random_batch, randomize, run_command,
                      tiny_config)
from albert_tf.export.serving import OFFICIAL_SIGNATURE

GLUE_ROOT = os.path.join(SHARED_DIR, "data", "glue")
SST2 = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2")
TINY = dict(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=40, max_position_embeddings=64)
# The task names of the official run_classifier.py's `processors`.
OFFICIAL_TASKS = ("cola", "mnli", "mismnli", "mrpc", "qnli", "qqp", "rte", "sst-2", "sts-b",
                  "wnli")
# Header of MNLI's train file and dev files in the GLUE distribution.
MNLI_TRAIN = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
              "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
              "sentence2", "label1", "gold_label"]
MNLI_DEV = MNLI_TRAIN[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
MNLI_TEST = MNLI_TRAIN[:10]


def test_every_official_task_name_and_folder():
    """The official processors' names are ours, any case; `mismnli` is MNLI's train file scored
    on dev_mismatched.tsv; each task's folder is the GLUE distribution's."""
    assert sorted(glue.TASKS) == sorted(OFFICIAL_TASKS)
    for name in OFFICIAL_TASKS:
        assert glue.get_task(name.upper()).name == name
    mismatched = glue.get_task("mismnli")
    assert mismatched.folder == "MNLI" and mismatched.files == {
        "train": "train.tsv", "dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"}
    assert glue.get_task("mnli-mm") is mismatched  # the name this project used before
    assert {t.folder for t in glue.TASKS.values()} == {
        "CoLA", "MNLI", "MRPC", "QNLI", "QQP", "RTE", "SST-2", "STS-B", "WNLI"}


@pytest.mark.needs_shared("data/glue")
@pytest.mark.parametrize("task", ["cola", "sst-2", "rte", "sts-b"])
def test_data_dir_is_the_glue_root_or_the_task_folder(task):
    """--data_dir as the official runner takes it (the GLUE root: ROOT/SST-2/dev.tsv) and as a
    task's own folder give the same examples; a root without the task names both paths."""
    spec = glue.get_task(task)
    from_root = glue.load_split(task, GLUE_ROOT, "dev")
    from_folder = glue.load_split(task, os.path.join(GLUE_ROOT, spec.folder), "dev")
    assert from_root == from_folder and len(from_root) > 200
    with pytest.raises(glue.GlueDataError, match=r"MRPC/dev.tsv \(data_dir as the GLUE root"):
        glue.load_split("mrpc", GLUE_ROOT, "dev")


def _write_tsv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\",
                            lineterminator="\n")
        if header:
            writer.writerow(header)
        writer.writerows(rows)


def _mnli_row(i, header, label, sentences):
    row = {name: "x" for name in header}
    row.update(index=str(i), sentence1=sentences[i % len(sentences)],
               sentence2=sentences[(i * 7 + 3) % len(sentences)])
    if "gold_label" in header:
        row["gold_label"] = label
    return [row[name] for name in header]


def _glue_root_with_mnli(root, n_train=48, n_dev=21, n_test=13):
    """A GLUE root holding MNLI with the official columns (sentences from the bundled SST-2)."""
    sentences = [e.text_a for e in glue.load_split("sst-2", SST2, "dev")]
    labels = ("contradiction", "entailment", "neutral")
    mnli = os.path.join(root, "MNLI")
    _write_tsv(os.path.join(mnli, "train.tsv"), MNLI_TRAIN,
               [_mnli_row(i, MNLI_TRAIN, labels[i % 3], sentences) for i in range(n_train)])
    for split in ("matched", "mismatched"):
        n = n_dev + (split == "matched")
        _write_tsv(os.path.join(mnli, f"dev_{split}.tsv"), MNLI_DEV,
                   [_mnli_row(i, MNLI_DEV, labels[i % 3], sentences) for i in range(n)])
        _write_tsv(os.path.join(mnli, f"test_{split}.tsv"), MNLI_TEST,
                   [_mnli_row(i, MNLI_TEST, None, sentences) for i in range(n_test)])
    return root


def test_mismnli_reads_the_official_columns(tmp_path):
    root = _glue_root_with_mnli(str(tmp_path / "glue"))
    dev = glue.load_split("mismnli", root, "dev")
    matched = glue.load_split("mnli", root, "dev")
    assert (len(dev), len(matched)) == (21, 22)
    row = next(csv.reader(open(tmp_path / "glue" / "MNLI" / "dev_mismatched.tsv"),
                          delimiter="\t"))
    assert row == MNLI_DEV
    first = next(csv.reader(list(open(tmp_path / "glue" / "MNLI" / "dev_mismatched.tsv"))[1:],
                            delimiter="\t"))
    # official MnliProcessor: text_a line[8], text_b line[9], label line[-1]
    assert (dev[0].text_a, dev[0].text_b, dev[0].label) == (first[8], first[9], first[-1])
    assert len(glue.load_split("mismnli", root, "test")) == 13


def test_qqp_rows_with_missing_columns_are_skipped_as_official(tmp_path):
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    rows = [["0", "1", "2", "How?", "Why?", "0"], ["1", "3", "4", "broken row"],
            ["2", "5", "6", "Who?", "When?", "1"]]
    _write_tsv(str(tmp_path / "QQP" / "train.tsv"), header, rows)
    examples = glue.load_split("qqp", str(tmp_path), "train")
    assert [(e.text_a, e.label) for e in examples] == [("How?", "0"), ("Who?", "1")]
    _write_tsv(str(tmp_path / "RTE" / "train.tsv"), ["index", "sentence1", "sentence2", "label"],
               [["0", "a", "b", "entailment"], ["1", "broken"]])
    with pytest.raises(glue.GlueDataError, match=r"line 3 has 2 column\(s\)"):
        glue.load_split("rte", str(tmp_path), "train")


def test_vocab_file_must_describe_the_sentencepiece_model(sample_vocab, tmp_path):
    tok = Tokenizer(sample_vocab)
    vocab = sample_vocab[: -len(".model")] + ".vocab"
    tok.check_vocab_file(vocab)  # the .vocab written with the model
    lines = open(vocab, encoding="utf-8").read().splitlines()
    swapped = tmp_path / "swapped.vocab"
    swapped.write_text("\n".join(lines[:100] + [lines[101], lines[100]] + lines[102:]) + "\n",
                       encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 101 is .* but piece 100 of --spm_model_file"):
        tok.check_vocab_file(str(swapped))
    short = tmp_path / "short.vocab"
    short.write_text("\n".join(lines[:-5]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"lists 7995 pieces but --spm_model_file .* has 8000"):
        tok.check_vocab_file(str(short))
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        tok.check_vocab_file(sample_vocab)


def test_tpu_zone_and_project_reach_the_tpu_resolver(monkeypatch):
    """--tpu_name, --tpu_zone and --gcp_project are the official TPUClusterResolver's
    arguments: they are passed to it, not dropped."""
    from albert_tf.training.distribute import StrategyError, get_strategy

    seen = {}

    def resolver(**kwargs):
        seen.update(kwargs)
        raise ValueError("no TPU here")

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)
    with pytest.raises(StrategyError, match="no TPU here"):
        get_strategy("tpu", tpu="my-tpu", connect_timeout_s=5, zone="us-central1-f",
                     project="my-project")
    assert seen == {"tpu": "my-tpu", "zone": "us-central1-f", "project": "my-project"}


def test_einsum_attention_equals_the_batched_matmuls():
    """--use_einsum (the official flag): attention as tf.einsum gives the matmul path's values
    to 1e-6, on inputs whose outputs differ far more than that."""
    from albert_tf import AlbertBackbone
    from albert_tf.models.backbone import Performance

    cfg = tiny_config(initializer_range=0.2)
    model = AlbertBackbone(cfg)
    randomize(model, seed=3)
    with_einsum = AlbertBackbone(cfg, performance=Performance(use_einsum=True))
    with_einsum.set_weights(model.get_weights())
    assert with_einsum.encoder.attention_layers[0].use_einsum
    assert not model.encoder.attention_layers[0].use_einsum
    batch = random_batch(cfg, batch=3, seq=13)
    inputs = {k: tf.constant(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    matmul = model(inputs)["sequence_output"].numpy()
    einsum = with_einsum(inputs)["sequence_output"].numpy()
    assert_spread(matmul[0, :5], matmul[1, :5], 1e-6)
    real = batch["input_mask"].astype(bool)
    np.testing.assert_allclose(einsum[real], matmul[real], atol=1e-6, rtol=0)


def _hub_module(source, directory):
    """A TF-Hub module of `source` as Google released ALBERT's (TF1 format): variables under
    `module/` + the official names in variables/variables, a saved_model.pb beside them."""
    os.makedirs(os.path.join(directory, "variables"))
    named = model_weights(source)
    tf.raw_ops.SaveV2(prefix=os.path.join(directory, "variables", "variables"),
                      tensor_names=["module/" + w.official_name for w in named],
                      shape_and_slices=[""] * len(named),
                      tensors=[tf.constant(w.to_official(w.variable.numpy())) for w in named])
    open(os.path.join(directory, "tfhub_module.pb"), "wb").close()
    return directory


def _run(args, cwd):
    return run_command("albert_tf.run_classifier", *args, cwd=cwd)


@pytest.mark.slow
def test_official_command_line_with_hub_module_glue_root_and_mismnli(tmp_path, sample_vocab):
    """The official run_classifier command line, unchanged: GLUE root, `mismnli`, a TF-Hub
    module directory as --albert_hub_module_handle, --vocab_file, --threshold_to_export and
    --use_einsum. The model starts from the module's weights (the backbone after 0 steps would
    equal it: the run reports every weight assigned), predictions and the export come from the
    best evaluated checkpoint and say its step, and the export serves the threshold."""
    import tensorflow_text  # noqa: F401 - SentencePiece ops of the SavedModel

    from albert_tf.models.pretrainer import AlbertPretrainer

    # initializer_range 0.2 (about 1/sqrt(H) at H=32): at 0.02 the trained model's answers
    # differ by 1e-4 between inputs, too little for the exports' 1e-5 parity to mean anything.
    config = AlbertConfig(**dict(TINY, initializer_range=0.2))
    config.to_json_file(tmp_path / "albert_config.json")
    source = AlbertPretrainer(config)
    hub = _hub_module(source, str(tmp_path / "albert_hub"))
    root = _glue_root_with_mnli(str(tmp_path / "glue"))
    out = tmp_path / "mismnli"
    common = ["--task_name=MisMNLI", f"--data_dir={root}",
              f"--albert_config_file={tmp_path / 'albert_config.json'}",
              f"--spm_model_file={sample_vocab}",
              f"--vocab_file={sample_vocab[:-len('.model')] + '.vocab'}",
              f"--output_dir={out}", "--max_seq_length=32", "--train_batch_size=8",
              "--eval_batch_size=8", "--predict_batch_size=8", "--learning_rate=1e-3"]
    proc = _run(common + [f"--albert_hub_module_handle={hub}", "--do_train=true",
                          "--do_eval=true", "--do_predict=true", "--train_step=6",
                          "--warmup_step=1", "--save_checkpoints_steps=3",
                          "--iterations_per_loop=3", "--use_einsum=true",
                          "--threshold_to_export=0.7",
                          f"--export_dir={tmp_path / 'exports' / 'mnli'}"], ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"Initialized 25 weights from .*albert_hub; not used: 7 entries "
                     r"\(head, not part of a backbone\)", proc.stdout), proc.stdout[-2000:]
    assert "dev: 21 examples" in proc.stdout
    best = json.load(open(out / "best" / "best_eval.json"))
    assert best["global_step"] in (3, 6) and best["examples"] == 21
    assert (f"predicting and exporting with the best evaluated checkpoint (accuracy "
            f"{best['accuracy']:.4f} at step {best['global_step']}") in proc.stdout
    assert f"exported the best model (step {best['global_step']})" in proc.stdout
    rows = open(out / "MNLI-mm.tsv").read().splitlines()
    assert len(rows) == 14 and rows[0] == "index\tprediction"
    version = tmp_path / "exports" / "mnli" / "1"
    assert sorted(os.listdir(tmp_path / "exports")) == ["mnli"]
    record = json.load(open(version / "assets.extra" / "albert_export.json"))
    assert record["source"]["which"] == "best" and record["threshold"] == 0.7
    assert record["source"]["step"] == best["global_step"]
    served = tf.saved_model.load(str(version)).signatures["serving_default"](
        text=tf.constant(["A man plays."]), text_b=tf.constant(["Someone plays music."]))
    np.testing.assert_allclose(served["threshold"].numpy(), [0.7])
    _export_alone(common, tmp_path, config, sample_vocab, best, str(version))


def _export_alone(common, tmp_path, config, sample_vocab, best, first_export):
    """The official action --export_dir alone (no --do_train, --do_eval, --do_predict), as a
    second command on the run of `common`: it exports the run's best evaluated checkpoint, and
    the export answers as that trained model does: the official run_classifier contract
    (`official_serving_default`, tf.Examples as the official runner writes them) gives the
    model's softmax within 1e-5, its argmax and the threshold as a scalar; the raw-text
    signature gives the first export's answers."""
    proc = _run(common + ["--threshold_to_export=0.7",
                          f"--export_dir={tmp_path / 'exports' / 'alone'}"], ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"exported the best model (step {best['global_step']})" in proc.stdout
    version = str(tmp_path / "exports" / "alone" / "1")
    record = json.load(open(os.path.join(version, "assets.extra", "albert_export.json")))
    assert record["source"]["which"] == "best" and record["source"]["step"] == best["global_step"]
    model = AlbertClassifier(config, 3)
    tf.train.Checkpoint(model=model).read(str(tmp_path / "mismnli" / "best" / "ckpt-best")) \
        .expect_partial().assert_existing_objects_matched()
    tok = Tokenizer(sample_vocab)
    texts = ["A man plays.", "The cat sat on the mat.", "Nobody came.", "It rained all day."]
    texts_b = ["Someone plays music.", "A dog barked.", "Everyone came early.", "It was dry."]
    rows = [pad_features(*pack_ids(tok.encode(a), tok.encode(b), 32), 32)
            for a, b in zip(texts, texts_b)]
    logits = model({k: tf.constant([r[k] for r in rows]) for k in rows[0]},
                   training=False)["logits"].numpy()
    assert_spread(logits.max(axis=0), logits.min(axis=0), 1e-5)
    official = [example_of(dict(r, label_ids=[0], is_real_example=[1])) for r in rows]
    loaded = tf.saved_model.load(version)
    got = loaded.signatures[OFFICIAL_SIGNATURE](input=tf.constant(official))
    np.testing.assert_allclose(got["probabilities"].numpy(), tf.nn.softmax(logits).numpy(),
                               atol=1e-5, rtol=0)
    np.testing.assert_array_equal(got["predictions"].numpy(), logits.argmax(-1))
    assert got["threshold"].shape == () and float(got["threshold"]) == np.float32(0.7)
    text = {"text": tf.constant(texts), "text_b": tf.constant(texts_b)}
    first = tf.saved_model.load(first_export).signatures["serving_default"](**text)
    np.testing.assert_allclose(loaded.signatures["serving_default"](**text)["logits"].numpy(),
                               first["logits"].numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(first["logits"].numpy(), logits, atol=1e-5, rtol=0)


@pytest.mark.needs_shared("data/glue")
@pytest.mark.slow
def test_official_flags_that_cannot_act_fail_with_the_fix(tmp_path, sample_vocab):
    """A hub URL (nothing is downloaded), TPU flags without a TPU, both a hub module and an
    init checkpoint, and prediction from a pretraining checkpoint (no classifier head in it):
    each fails with status 1 and one line naming the flag and what to do, writing nothing."""
    from albert_tf.models.pretrainer import AlbertPretrainer

    config = AlbertConfig(**TINY)
    config.to_json_file(tmp_path / "albert_config.json")
    out = tmp_path / "run"
    out.mkdir()
    tf.train.Checkpoint(model=AlbertPretrainer(config)).save(str(out / "ckpt"))
    base = ["--task_name=rte", f"--data_dir={GLUE_ROOT}",
            f"--albert_config_file={tmp_path / 'albert_config.json'}",
            f"--spm_model_file={sample_vocab}", f"--output_dir={out}", "--max_seq_length=32"]
    cases = {
        "--albert_hub_module_handle=https://tfhub.dev/google/albert_base/3":
            r"is a URL, and this command downloads nothing\. Download the module .*"
            r"pass that directory as --albert_hub_module_handle, or .* --init_checkpoint",
        "--tpu_zone=us-central1-f":
            r"--tpu_zone is for a TPU run .*add --use_tpu",
        f"--albert_hub_module_handle={tmp_path} --init_checkpoint={out}":
            r"both name the pretrained weights; give one",
        f"--albert_hub_module_handle={tmp_path}":
            r"is not a TF-Hub module directory: .*variables.index does not exist",
    }
    before = sorted(os.listdir(out))
    for extra, message in cases.items():
        proc = _run(base + extra.split() + ["--do_train", "--train_step=2"], ROOT)
        assert proc.returncode == 1, (extra, proc.stderr[-2000:])
        assert re.search(message, proc.stderr), (extra, proc.stderr[-2000:])
    # --export_dir alone (an official action) from a directory with no fine-tuned checkpoint.
    empty = [a for a in base if not a.startswith("--output_dir")]
    empty.append(f"--output_dir={tmp_path / 'empty'}")
    proc = _run(empty + [f"--export_dir={tmp_path / 'exports' / 'rte'}"], ROOT)
    assert proc.returncode == 1 and re.search(
        r"--export_dir without --do_train needs a fine-tuned checkpoint in --output_dir "
        r".*empty, and it holds none: fine-tune first \(--do_train\)", proc.stderr), \
        proc.stderr[-2000:]
    assert not (tmp_path / "exports").exists()
    proc = _run(base + ["--do_predict"], ROOT)
    assert proc.returncode == 1
    assert re.search(r"ckpt-1 does not hold a rte model: it has no value for "
                     r"classifier/(kernel|bias).*Is --output_dir a pretraining run\?",
                     proc.stderr), proc.stderr[-2000:]
    assert not (out / "RTE.tsv").exists()
    assert sorted(n for n in os.listdir(out) if not n.endswith(".tfrecord")
                  and not n.endswith(".json")) == before


def test_hub_module_directory_initializes_the_backbone(tmp_path):
    """A TF-Hub module directory (what --albert_hub_module_handle names) fills the classifier's
    backbone with the module's values, every weight; its pretraining heads are reported."""
    from albert_tf.models.classifier import AlbertClassifier
    from albert_tf.models.pretrainer import AlbertPretrainer
    from albert_tf.tasks.classification import ClassificationTask

    config = tiny_config(initializer_range=0.2)
    source = AlbertPretrainer(config)
    randomize(source, seed=9)
    hub = _hub_module(source, str(tmp_path / "module"))
    classifier = AlbertClassifier(config, 3)
    report = ClassificationTask("mismnli", config, 16).initialize(classifier, hub)
    assert report["source"]["type"] == "tf1"
    expected = {w.official_name: w.variable.numpy() for w in model_weights(source.backbone)}
    got = {w.official_name: w.variable.numpy() for w in model_weights(classifier.backbone)}
    assert got.keys() == expected.keys() and len(got) == len(report["assigned"])
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.slow
def test_squad_v2_answer_class_flags_are_refused_not_ignored(tmp_path, sample_vocab):
    """run_squad_v2 builds the official answer-class model by default; with --v2_head
    null_score (BERT's head) the answer-class flags (--start_n_top, --end_n_top,
    --dropout_prob) stop the command with the reason."""
    config = tmp_path / "albert_config.json"
    AlbertConfig(**TINY).to_json_file(config)
    for flag in ("--start_n_top=5", "--end_n_top=5", "--dropout_prob=0.1"):
        proc = subprocess.run(
            [sys.executable, "-m", "albert_tf.run_squad_v2", f"--albert_config_file={config}",
             f"--spm_model_file={sample_vocab}", f"--output_dir={tmp_path / 'out'}",
             "--do_predict", f"--predict_file={tmp_path / 'dev.json'}", "--v2_head=null_score",
             flag], cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0
        assert re.search(rf"{flag.split('=')[0]} sets the official v2 answer-class model .*"
                         r"Drop --v2_head null_score for the official model, or drop the "
                         r"flag\.", proc.stderr), proc.stderr[-1500:]
    assert not (tmp_path / "out").exists()
