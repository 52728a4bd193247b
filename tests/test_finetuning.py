"""Fine-tuning through the one training loop: GLUE classification and regression tasks."""

import json
import re
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.tasks import glue
from albert_tf.tasks.classification import (ClassificationTask, write_examples,
                                            write_split_features)
from albert_tf.tokenization import Tokenizer
from albert_tf.training.train_lib import TrainingConfig, TrainingRun
from conftest import ROOT, SHARED_DIR, free_port, run_command

GLUE_DIR = os.path.join(SHARED_DIR, "data", "glue")
SST2 = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2")  # dev.tsv: the GLUE one
TINY = dict(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=40, max_position_embeddings=64)


def _config(tmp_path, train, dev, **changes):
    values = dict(albert_config=AlbertConfig(**TINY), input_file=train, eval_input_file=dev,
                  output_dir=str(tmp_path / "run"), max_seq_length=32, train_batch_size=16,
                  eval_batch_size=24, optimizer="adamw", learning_rate=2e-3,
                  num_train_steps=60, num_warmup_steps=6, save_checkpoints_steps=60,
                  iterations_per_loop=20, do_eval=True, max_eval_steps=10**6, seed=3,
                  shuffle_window=64, verbose=False)
    values.update(changes)
    return TrainingConfig(**values)


@pytest.mark.needs_shared("data/glue")
@pytest.mark.slow
def test_sst2_slice_is_learned_to_every_example_and_padding_is_not_scored(tmp_path,
                                                                            sample_vocab):
    task = glue.get_task("sst-2")
    examples = glue.load_split(task, os.path.join(GLUE_DIR, "SST-2"), "train")[:40]
    tokenizer = Tokenizer(sample_vocab)
    train = write_examples(examples, task, tokenizer, 32, str(tmp_path / "train.tfrecord"),
                           shuffle_seed=1)
    dev = write_examples(examples, task, tokenizer, 32, str(tmp_path / "dev.tfrecord"),
                         pad_to_multiple=24)
    assert (train["num_examples"], dev["num_examples"], dev["padding_examples"]) == (40, 48, 8)
    run = TrainingRun(ClassificationTask(task, AlbertConfig(**TINY), 32),
                      _config(tmp_path, str(tmp_path / "train.tfrecord"),
                              str(tmp_path / "dev.tfrecord")))
    summary = run.run()
    metrics = summary["eval"]
    print(f"\nSST-2 slice (40 examples) after 60 steps: {metrics}")
    assert metrics["examples"] == 40 and metrics["eval_steps"] == 2
    assert metrics["accuracy"] == 1.0
    best = json.load(open(tmp_path / "run" / "best" / "best_eval.json"))
    assert best["accuracy"] == 1.0 and best["global_step"] == 60


@pytest.mark.needs_shared("data/glue")
@pytest.mark.slow
def test_sts_b_regression_slice(tmp_path, sample_vocab):
    task = glue.get_task("sts-b")
    examples = glue.load_split(task, os.path.join(GLUE_DIR, "STS-B"), "train")[:40]
    tokenizer = Tokenizer(sample_vocab)
    write_examples(examples, task, tokenizer, 32, str(tmp_path / "train.tfrecord"),
                   shuffle_seed=1)
    write_examples(examples, task, tokenizer, 32, str(tmp_path / "dev.tfrecord"),
                   pad_to_multiple=24)
    cfg = _config(tmp_path, str(tmp_path / "train.tfrecord"), str(tmp_path / "dev.tfrecord"),
                  num_train_steps=200, save_checkpoints_steps=200, learning_rate=1e-3)
    metrics = TrainingRun(ClassificationTask(task, AlbertConfig(**TINY), 32), cfg).run()["eval"]
    labels = np.array([e.label for e in examples])
    print(f"\nSTS-B slice (40 pairs) after 200 steps: {metrics}; label variance "
          f"{labels.var():.3f}")
    assert metrics["examples"] == 40
    assert metrics["pearson"] > 0.95 and metrics["spearman"] > 0.85
    assert metrics["mse"] < 0.1 * labels.var()


def test_classifier_backbone_from_every_pretrained_source(tmp_path):
    """Official TF1 checkpoint, pretraining output_dir, our directory: the classifier's backbone
    equals the source's, the pretraining heads are dropped and reported, the new head keeps its
    initialisation; a source of another shape is refused, assigning nothing."""
    from albert_tf.checkpoints import (CheckpointMismatchError, model_weights, save_albert_tf,
                                       write_tf1_checkpoint)
    from albert_tf.models.classifier import AlbertClassifier
    from albert_tf.models.pretrainer import AlbertPretrainer
    from conftest import tiny_config

    config = tiny_config()
    source = AlbertPretrainer(config)
    rng = np.random.default_rng(5)
    for v in source.weights:
        v.assign(rng.normal(0, 0.5, v.shape).astype(np.float32))
    expected = {w.official_name: w.variable.numpy() for w in model_weights(source.backbone)}
    heads = {w.official_name for w in model_weights(source)} - set(expected)
    sources = {"tf1": write_tf1_checkpoint(source, str(tmp_path / "tf1")),
               "albert_tf": save_albert_tf(source, str(tmp_path / "ours"))}
    run_dir = tmp_path / "pretraining_run"
    run_dir.mkdir()
    config.to_json_file(run_dir / "albert_config.json")
    tf.train.Checkpoint(model=source).save(str(run_dir / "ckpt"))
    sources["pretraining_output_dir"] = str(run_dir)
    task = ClassificationTask("rte", config, 16)
    for kind, path in sources.items():
        classifier = AlbertClassifier(config, 2)
        head = [w.numpy() for w in classifier.classifier_head.weights]
        report = task.initialize(classifier, path)
        assert report["source"]["type"] == kind, kind
        got = {w.official_name: w.variable.numpy() for w in model_weights(classifier.backbone)}
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value, err_msg=f"{kind}: {name}")
        for before, after in zip(head, classifier.classifier_head.weights):
            np.testing.assert_array_equal(before, after.numpy())
        skipped = {k for k in report["skipped"]}
        assert heads <= skipped, (kind, heads - skipped)
        assert all("head" in report["skipped"][k] for k in heads)
    bigger = AlbertClassifier(tiny_config(intermediate_size=38), 2)
    before = [v.numpy() for v in bigger.weights]
    with pytest.raises(CheckpointMismatchError, match=r"intermediate_size: config 38, "
                                                      r"checkpoint 37"):
        task.initialize(bigger, sources["pretraining_output_dir"])
    for a, b in zip(before, bigger.weights):
        np.testing.assert_array_equal(a, b.numpy())


@pytest.mark.needs_shared("data/glue")
@pytest.mark.slow
def test_run_classifier_command_line(tmp_path, sample_vocab):
    """The official command line on RTE's original files, initialised from a pretraining
    output_dir: eval_results.json scores all 277 dev examples, the GLUE submission file holds
    all 3,000 test predictions, and the exported SavedModel classifies raw sentence pairs."""

    import tensorflow_text  # noqa: F401 - SentencePiece ops of the SavedModel

    from albert_tf.models.pretrainer import AlbertPretrainer

    config = AlbertConfig(**TINY)
    config_file = tmp_path / "albert_config.json"
    config.to_json_file(config_file)
    pretrained = tmp_path / "pretraining_run"
    pretrained.mkdir()
    config.to_json_file(pretrained / "albert_config.json")
    tf.train.Checkpoint(model=AlbertPretrainer(config)).save(str(pretrained / "ckpt"))
    out = tmp_path / "rte"
    args = ["--task_name", "RTE", "--data_dir", os.path.join(GLUE_DIR, "RTE"),
            "--albert_config_file", str(config_file), "--spm_model_file", sample_vocab,
            "--output_dir", str(out), "--init_checkpoint", str(pretrained), "--do_train",
            "--do_eval", "--do_predict", "--max_seq_length", "32", "--train_batch_size", "16",
            "--eval_batch_size", "16", "--predict_batch_size", "64", "--train_step", "4",
            "--warmup_step", "1", "--save_checkpoints_steps", "4", "--iterations_per_loop", "2",
            "--learning_rate", "1e-3", "--export_dir", str(tmp_path / "exports" / "rte")]
    proc = run_command("albert_tf.run_classifier", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dev: 277 examples (11 padding" in proc.stdout
    assert re.search(r"Initialized 25 weights from .*; not used: 7 entries \(pretrainer head, "
                     r"not part of the backbone\)", proc.stdout), proc.stdout[-2000:]
    results = json.load(open(out / "eval_results.json"))
    assert results["examples"] == 277 and results["global_step"] == 4
    assert 0.0 <= results["accuracy"] <= 1.0 and results["task"] == "rte"
    rows = open(out / "RTE.tsv").read().splitlines()
    assert rows[0] == "index\tprediction" and len(rows) == 3001
    assert {r.split("\t")[1] for r in rows[1:]} <= {"entailment", "not_entailment"}
    probabilities = np.loadtxt(out / "test_results.tsv")
    assert probabilities.shape == (3000, 2)
    np.testing.assert_allclose(probabilities.sum(1), 1.0, atol=1e-5)
    loaded = tf.saved_model.load(str(tmp_path / "exports" / "rte" / "1"))
    served = loaded.signatures["serving_default"](
        text=tf.constant(["A man is playing a flute."]),
        text_b=tf.constant(["A man plays music."]))
    probs = [v.numpy() for k, v in served.items() if "prob" in k]
    assert probs and probs[0].shape == (1, 2)
    np.testing.assert_allclose(probs[0].sum(), 1.0, atol=1e-5)
    # --export_dir alone exports the finished run with what it recorded (config, vocabulary,
    # sequence length, task): the same model as the export written while training
    proc = run_command("albert_tf.run_classifier", "--output_dir", str(out), "--export_dir",
                       str(tmp_path / "exports" / "alone"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout.splitlines()[0]
    assert said.startswith(f"Exporting the run in {out} as it recorded ({out / 'config.yaml'}): "
                           "--max_seq_length 32, --task_name RTE, "), said
    assert f"--albert_config_file {out / 'albert_config.json'}" in said
    alone = tf.saved_model.load(str(tmp_path / "exports" / "alone" / "1"))
    pairs = dict(text=tf.constant(["A man is playing a flute.", "Two dogs run."]),
                 text_b=tf.constant(["A man plays music.", "Cats sleep."]))
    want = loaded.signatures["serving_default"](**pairs)
    got = alone.signatures["serving_default"](**pairs)
    assert int(got["max_seq_length"].numpy()[0]) == 32
    np.testing.assert_allclose(got["logits"].numpy(), want["logits"].numpy(), atol=1e-7,
                               rtol=0)
    assert np.abs(np.diff(want["logits"].numpy(), axis=0)).max() > 1e-5  # rows differ
    # --do_eval later, without the flags the run recorded: the same evaluation
    proc = run_command("albert_tf.run_classifier", "--output_dir", str(out), "--do_eval")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith(f"Using the run in {out} as it recorded"), \
        proc.stdout[:500]
    again = json.load(open(out / "eval_results.json"))
    assert again["accuracy"] == results["accuracy"] and again["examples"] == 277
    assert again["global_step"] == 4  # the step evaluated (0 before)


@pytest.mark.needs_shared("data/glue")
@pytest.mark.slow
def test_run_classifier_on_two_workers_equals_one_device(tmp_path, sample_vocab):
    """`run_classifier --distribution_strategy multi_worker_mirrored` in 2 processes sharing one
    output_dir (both write the same feature files at once): the fine-tuned weights equal one
    device reading the same global batches (`--input_shards 2`) within 1e-5, and the evaluation,
    sharded by record over the workers, scores all 277 RTE dev examples as one device does."""
    import subprocess
    import sys

    from albert_tf.models.classifier import AlbertClassifier

    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**TINY, hidden_dropout_prob=0.0,
                 attention_probs_dropout_prob=0.0).to_json_file(config_file)

    def args(out, *extra):
        return ["--task_name", "rte", "--data_dir", os.path.join(GLUE_DIR, "RTE"),
                "--albert_config_file", str(config_file), "--spm_model_file", sample_vocab,
                "--output_dir", str(out), "--do_train", "--do_eval", "--max_seq_length", "32",
                "--train_batch_size", "16", "--eval_batch_size", "16", "--train_step", "4",
                "--warmup_step", "1", "--save_checkpoints_steps", "4",
                "--iterations_per_loop", "2", "--learning_rate", "1e-3", "--dropout_rate", "0",
                *extra]

    ports = [free_port(), free_port()]
    procs = []
    for index in range(2):
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                     "task": {"type": "worker", "index": index}}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "albert_tf.run_classifier",
             *args(tmp_path / "workers", "--distribution_strategy", "multi_worker_mirrored")],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, TF_CONFIG=json.dumps(tf_config)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "albert_tf.run_classifier",
         *args(tmp_path / "single", "--input_shards", "2")], cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True))
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("a fine-tuning process did not finish in 600 s")
        assert proc.returncode == 0, err[-3000:]

    def weights(out):
        model = AlbertClassifier(AlbertConfig(**TINY), num_labels=2)
        tf.train.Checkpoint(model=model).read(str(out / "ckpt-4")).expect_partial()
        return {v.path: v.numpy() for v in model.weights}

    workers, single = weights(tmp_path / "workers"), weights(tmp_path / "single")
    diff = max(float(np.abs(workers[k] - single[k]).max()) for k in single)
    print(f"\n2 workers vs one device (same global batches), max |dw| after 4 steps: {diff:.2e}")
    assert diff <= 1e-5
    initial = AlbertClassifier(AlbertConfig(**TINY), num_labels=2)
    assert any(float(np.abs(workers[v.path] - v.numpy()).max()) > 1e-4 for v in initial.weights)
    got = json.load(open(tmp_path / "workers" / "eval_results.json"))
    want = json.load(open(tmp_path / "single" / "eval_results.json"))
    assert got["examples"] == want["examples"] == 277
    assert got["accuracy"] == want["accuracy"]
    assert got["cross_entropy"] == pytest.approx(want["cross_entropy"], abs=1e-5)
    assert not [n for n in os.listdir(tmp_path / "workers") if ".tmp-" in n]


@pytest.mark.needs_shared("data/glue")
@pytest.mark.slow
def test_train_examples_takes_the_first_labels_only(tmp_path, sample_vocab):
    """`run_classifier --train_examples N`: the training features are exactly those of the
    split's first N examples (same digest as writing them directly); out-of-range N names the
    flag and the split's size."""
    task = glue.get_task("sst-2")
    tokenizer = Tokenizer(sample_vocab)
    data_dir = os.path.join(GLUE_DIR, "SST-2")
    written = write_split_features(task, tokenizer, data_dir, str(tmp_path / "cache"), 32,
                                   ["train"], 7, 8, 8, num_train_files=1, train_examples=123)
    files, meta, examples = written["train"]
    first = glue.load_split(task, data_dir, "train")[:123]
    assert meta["real_examples"] == 123 and [e.guid for e in examples] == [e.guid for e in first]
    direct = write_examples(first, task, tokenizer, 32, str(tmp_path / "direct.tfrecord"),
                            shuffle_seed=7)
    assert meta["digest"] == direct["digest"]
    for bad in (-1, 67_350):
        with pytest.raises(ValueError, match=rf"--train_examples={bad}: the train split .* has "
                                             r"67349 examples"):
            write_split_features(task, tokenizer, data_dir, str(tmp_path / "bad"), 32,
                                 ["train"], 7, 8, 8, train_examples=bad)


@pytest.mark.slow
def test_a_separable_task_is_learned_beyond_the_majority_class(tmp_path, sample_vocab):
    """From random weights, a task whose label is one cue word among random filler words is
    learned from 320 examples well beyond the majority class on 200 unseen dev sentences: a
    classifier or loop that does not learn fails here. (Measured: 0.995 after 300 steps at
    lr 1e-3; 200 steps at 2e-3 had not yet left the majority class.)"""
    rng = np.random.default_rng(5)
    filler = ("the a house river walked quietly under over table seven green letter morning "
              "station garden window paper stone city road music evening").split()
    cues = {"1": ["excellent", "wonderful", "delightful"], "0": ["awful", "terrible", "dreadful"]}
    data_dir = tmp_path / "toy"
    data_dir.mkdir()
    for split, n in (("train", 320), ("dev", 200)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            label = str(rng.integers(2))
            words = list(rng.choice(filler, rng.integers(6, 14)))
            words.insert(int(rng.integers(len(words) + 1)), str(rng.choice(cues[label])))
            rows.append(" ".join(words) + "\t" + label)
        (data_dir / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    task = glue.get_task("sst-2")
    tokenizer = Tokenizer(sample_vocab)
    train = write_examples(glue.load_split(task, str(data_dir), "train"), task, tokenizer, 32,
                           str(tmp_path / "train.tfrecord"), shuffle_seed=1)
    dev_examples = glue.load_split(task, str(data_dir), "dev")
    write_examples(dev_examples, task, tokenizer, 32, str(tmp_path / "dev.tfrecord"),
                   pad_to_multiple=24)
    majority = max(np.mean([e.label == "1" for e in dev_examples]),
                   np.mean([e.label == "0" for e in dev_examples]))
    run = TrainingRun(ClassificationTask(task, AlbertConfig(**TINY), 32),
                      _config(tmp_path, train["files"][0], str(tmp_path / "dev.tfrecord"),
                              num_train_steps=300, save_checkpoints_steps=300,
                              learning_rate=1e-3, num_warmup_steps=30))
    metrics = run.run()["eval"]
    print(f"\nseparable toy task: dev accuracy {metrics['accuracy']:.3f}, majority {majority:.3f}")
    assert metrics["examples"] == 200 and majority < 0.6
    assert metrics["accuracy"] >= 0.9


def test_records_of_another_task_length_or_vocabulary_are_refused(tmp_path, sample_vocab):
    """`check_files` (shared by GLUE and RACE through LabelledTask): a file written for another
    task, sequence length or vocabulary, or one without a sidecar, is refused with the file, the
    values it was written with and the writer to run; a fitting file passes with its sidecar."""
    from albert_tf.input_pipeline import DataMismatchError

    task = glue.get_task("sst-2")
    examples = glue.load_split(task, SST2, "dev")[:20]
    path = str(tmp_path / "dev.tfrecord")
    write_examples(examples, task, Tokenizer(sample_vocab), 32, path)
    fits = ClassificationTask("sst-2", AlbertConfig(**TINY), 32).check_files([path])
    assert fits[path]["real_examples"] == 20 and fits[path]["max_seq_length"] == 32
    for name, length, vocab, wrong in (("cola", 32, 8000, "'task': 'sst-2'"),
                                       ("sst-2", 48, 8000, "'max_seq_length': 32"),
                                       ("sst-2", 32, 9000, "'vocab_size': 8000")):
        config = AlbertConfig(**dict(TINY, vocab_size=vocab))
        with pytest.raises(DataMismatchError, match=re.escape(path) + ".*" + re.escape(wrong)
                           + ".*albert_tf.tasks.classification.write_examples"):
            ClassificationTask(name, config, length).check_files([path])
    os.remove(path + ".json")
    with pytest.raises(DataMismatchError, match="has no sidecar; write the records with "
                                                "albert_tf.tasks.classification.write_examples"):
        ClassificationTask("sst-2", AlbertConfig(**TINY), 32).check_files([path])
