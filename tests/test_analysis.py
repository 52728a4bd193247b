"""Analyses that draw: the paper's Figure 2 (transitions), training curves, the parameter chart."""

import pytest
import csv
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from conftest import GENERATION_KW, PRETRAINING_MODEL, export_config, pretraining_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG = b"\x89PNG\r\n\x1a\n"


def _direct(model_dir, batches):
    """Figure 2's numbers computed independently: TF ops (float64: arccos near 1 needs it) over
    every real token."""
    from albert_tf import load_pretrained

    backbone = load_pretrained(model_dir, backbone_only=True)
    sums, tokens = None, 0
    for batch in batches:
        out = backbone({k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")})
        hidden = [tf.cast(h, tf.float64) for h in out["hidden_states"]]
        mask = tf.cast(batch["input_mask"], tf.float64)
        rows = []
        for x, y in zip(hidden[:-1], hidden[1:]):
            l2 = tf.norm(y - x, axis=-1)
            cos = tf.reduce_sum(tf.math.l2_normalize(x, -1) * tf.math.l2_normalize(y, -1), -1)
            angle = tf.acos(tf.clip_by_value(cos, -1.0, 1.0)) * 180.0 / np.pi
            rows.append([float(tf.reduce_sum(v * mask)) for v in (l2, cos, angle)])
        sums = np.array(rows) if sums is None else sums + np.array(rows)
        tokens += int(np.sum(batch["input_mask"]))
    return sums / tokens, tokens


@pytest.mark.slow
def test_transitions_of_two_models_equal_a_direct_computation(tmp_path, generated_data):
    from albert_tf import AlbertBackbone
    from albert_tf.analysis.transitions import examples
    from albert_tf.checkpoints import save_albert_tf
    from conftest import randomize

    dirs = {}
    for name, config in (("albert", export_config(num_hidden_groups=1, inner_group_num=1)),
                         ("bert", export_config(sharing="none", num_hidden_groups=1,
                                                inner_group_num=1))):
        model = AlbertBackbone(config)
        model({"input_ids": tf.ones((1, 4), tf.int32), "input_mask": tf.ones((1, 4), tf.int32),
               "segment_ids": tf.zeros((1, 4), tf.int32)})
        randomize(model, seed=len(dirs))
        dirs[name] = str(tmp_path / name)
        save_albert_tf(model, dirs[name])
    records = ",".join(generated_data["files"])
    out = tmp_path / "transitions"
    proc = subprocess.run(
        [sys.executable, "-m", "albert_tf.analysis.transitions", "--model_dir",
         f"{dirs['albert']},{dirs['bert']}", "--label", "ALBERT,BERT", "--input_file", records,
         "--output_dir", str(out), "--max_seq_length", str(GENERATION_KW["max_seq_length"]),
         "--max_predictions_per_seq", str(GENERATION_KW["max_predictions_per_seq"]),
         "--max_examples", "40"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "transitions.png").read_bytes()[:8] == PNG
    with open(out / "transitions.csv") as f:
        rows = list(csv.DictReader(f))
    layers = export_config().num_hidden_layers
    assert [(r["model"], int(r["layer"])) for r in rows] == \
        [(m, i) for m in ("ALBERT", "BERT") for i in range(1, layers + 1)]
    batches = examples(records, GENERATION_KW["max_seq_length"],
                       GENERATION_KW["max_predictions_per_seq"], 40, batch_size=16)
    assert sum(len(b["input_ids"]) for b in batches) == 40
    for label, name in (("ALBERT", "albert"), ("BERT", "bert")):
        expected, tokens = _direct(dirs[name], batches)
        got = np.array([[float(r[k]) for k in ("l2_distance", "cosine_similarity",
                                               "angle_degrees")]
                        for r in rows if r["model"] == label])
        assert all(int(r["tokens"]) == tokens for r in rows)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # an all-shared model and a not-shared one move their inputs differently
    assert not np.allclose(got, _direct(dirs["albert"], batches)[0], rtol=1e-3)


def test_curves_read_back_what_the_loop_wrote(tmp_path):
    from albert_tf.analysis.curves import plot_panels, read_scalars

    writer = tf.summary.create_file_writer(str(tmp_path / "train"))
    with writer.as_default():
        for step in (10, 20, 30):
            tf.summary.scalar("loss", 1.0 / step, step=step)
            tf.summary.scalar("accuracy", step / 100.0, step=step)
        tf.summary.scalar("loss", 0.5, step=30)  # a resumed run rewrites a step: the last wins
    writer.close()
    scalars = read_scalars(str(tmp_path / "train"))
    assert [s for s, _ in scalars["accuracy"]] == [10, 20, 30]
    np.testing.assert_allclose([v for _, v in scalars["accuracy"]], [0.1, 0.2, 0.3], rtol=1e-6)
    assert [s for s, _ in scalars["loss"]] == [10, 20, 30]
    np.testing.assert_allclose([v for _, v in scalars["loss"]], [0.1, 0.05, 0.5], rtol=1e-6)
    assert read_scalars(str(tmp_path / "missing")) == {}
    path = plot_panels([("loss", "loss", [("train", scalars["loss"], {})], [("floor", 0.0)])],
                       str(tmp_path / "c.png"))
    assert open(path, "rb").read()[:8] == PNG


def test_params_plot(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "albert_tf.params", "--tables", "1,5", "--plot",
                           "--plot_file", str(tmp_path / "p.png")], capture_output=True,
                          text=True, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "| ALBERT base " in proc.stdout and "11,683,584" in proc.stdout
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG


@pytest.mark.slow
def test_fill_mask_random_init_is_the_runs_starting_point(tmp_path, generated_data,
                                                          sample_vocab):
    """`albert_tf.analysis.fill_mask --random_seed N` rebuilds the exact weights a pretraining
    run of --random_seed N started from (a one-step run whose step is the first of its warmup
    runs at rate 0 and keeps them: every weight equal), and its answers are the softmax of the model's own masked-LM logits."""
    from albert_tf import AlbertConfig
    from albert_tf.analysis.fill_mask import build_models, top_k_answers
    from albert_tf.tokenization import MASK_ID, Tokenizer
    from albert_tf.training.train_lib import PretrainingRun

    out = str(tmp_path / "run")
    PretrainingRun(pretraining_config(
        generated_data["files"][0], out, albert_config=AlbertConfig(**PRETRAINING_MODEL),
        train_batch_size=8, num_train_steps=1, num_warmup_steps=1, learning_rate=1e-3,
        save_checkpoints_steps=1, seed=21)).run()
    models = build_models(out, random_seed=21)
    trained, random_init = models["trained"], models["random_init"]
    assert len(trained.weights) == len(random_init.weights) > 20
    for a, b in zip(trained.weights, random_init.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    other = build_models(out, random_seed=22)["random_init"]
    assert not np.array_equal(other.weights[0].numpy(), trained.weights[0].numpy())
    tokenizer = Tokenizer(sample_vocab)
    texts = ["The [MASK] sat on the mat.", "She [MASK] the [MASK] quickly."]
    answers = top_k_answers(trained, tokenizer, texts, top_k=4)
    assert [len(a) for a in answers] == [1, 2] and all(len(row) == 4 for a in answers for row in a)
    ids = [2] + tokenizer.encode_with_masks(texts[1]) + [3]
    positions = [i for i, t in enumerate(ids) if t == MASK_ID]
    logits = trained({"input_ids": tf.constant([ids]), "input_mask": tf.ones([1, len(ids)],
                                                                             tf.int32),
                      "segment_ids": tf.zeros([1, len(ids)], tf.int32),
                      "masked_lm_positions": tf.constant([positions])})["mlm_logits"]
    probs = tf.nn.softmax(tf.reshape(logits, [2, -1])).numpy()
    for row, p in zip(answers[1], probs):
        best = np.argsort(-p)[:4]
        assert [piece for piece, _ in row] == tokenizer.ids_to_pieces([int(i) for i in best])
        np.testing.assert_allclose([q for _, q in row], p[best], rtol=1e-6)
