"""The main job (`python -m albert_tf.demo`) in its reduced form: every step runs, the report's
numbers are the files' numbers and within their bounds, and a second run resumes (skips)."""

import glob
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG = b"\x89PNG\r\n\x1a\n"
STEPS = ["corpus", "vocab", "data", "pretrain", "finetune", "export", "serve", "analysis",
         "report"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([sys.executable, "-m", "albert_tf.demo", "--smoke", "--quiet"],
                          capture_output=True, text=True, cwd=str(cwd),
                          env=dict(os.environ, ALBERT_TF_VERBOSE="0"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = glob.glob(str(cwd / "runs" / "*"))
    with open(os.path.join(run_dir, "results.json")) as f:
        return {"cwd": cwd, "dir": run_dir, "stdout": proc.stdout, "stderr": proc.stderr,
                "results": json.load(f)}


def test_smoke_run_metrics_within_bounds(smoke_run):
    r, run_dir = smoke_run["results"], smoke_run["dir"]
    assert list(r["steps"]) == STEPS and not any(s["skipped"] for s in r["steps"].values())
    assert smoke_run["stderr"] == ""  # no TensorFlow start-up noise, no warnings
    # held-out evaluation: every held-out masked position, counted by the generator's sidecar
    with open(os.path.join(run_dir, "pretraining", "heldout.tfrecord.json")) as f:
        counts = json.load(f)["counts"]
    mlm, sop = r["baselines"]["masked_lm"], r["baselines"]["sentence_order"]
    evaluated = r["pretrain_best"]["examples"]
    assert evaluated == counts["examples"] // 64 * 64  # whole batches of --eval_batch_size 64
    assert mlm["eval_examples"] == sop["examples"] == evaluated
    # the baselines count the positions and labels of exactly those records (read raw here)
    import tensorflow as tf

    spec = {"masked_lm_weights": tf.io.FixedLenFeature([10], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    raw = [tf.io.parse_single_example(x, spec) for x in tf.data.TFRecordDataset(
        os.path.join(run_dir, "pretraining", "heldout.tfrecord")).take(evaluated)]
    assert mlm["eval_positions"] == int(sum(float(tf.reduce_sum(x["masked_lm_weights"]))
                                            for x in raw))
    assert sop["swapped_share"] == sum(int(x["next_sentence_labels"][0]) for x in raw) / evaluated
    assert 0.0 < mlm["accuracy"] < 0.2 and 0.5 <= sop["accuracy"] < 0.7
    final = r["pretrain_final"]
    assert final["global_step"] == r["settings"]["pretrain_steps"] == 40
    # 40 steps already beat a uniform guess over the 8,000 pieces on unseen text
    assert final["masked_lm_loss"] < math.log(8000) - 0.3
    assert 0.0 <= final["masked_lm_accuracy"] <= 1.0
    # SST-2: all 872 dev sentences, majority label 1 (444 of them)
    majority = r["baselines"]["sst-2"]
    assert majority["majority_label"] == "1" and majority["examples"] == 872
    assert majority["accuracy"] == pytest.approx(444 / 872, abs=1e-12)
    for init in ("pretrained", "random"):
        ft = r["finetune"][init]
        assert ft["examples"] == 872 and ft["global_step"] == 40
        assert 0.4 <= ft["accuracy"] <= 1.0


def test_smoke_run_served_both_models(smoke_run):
    r = smoke_run["results"]
    fm, st = r["fill_mask"], r["sentiment"]
    # --smoke loads in Python (the C++ loader's 20 s build is tested in test_export*.py)
    assert fm["runtime"] == st["runtime"] == "python"
    probs = np.array(fm["outputs"]["fill_mask_probabilities"])
    assert probs.shape == (3, 1, 5)  # 3 requests, one [MASK] each, top 5
    assert np.all(np.diff(probs, axis=-1) <= 0) and np.all(probs.sum(-1) <= 1 + 1e-6)
    assert all(len(p[0]) == 5 and all(isinstance(x, str) for x in p[0])
               for p in fm["outputs"]["fill_mask_pieces"])
    p = np.array(st["outputs"]["probabilities"])
    assert p.shape == (4, 2)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
    assert st["outputs"]["label"] == np.argmax(p, -1).tolist()


def test_smoke_run_report(smoke_run):
    r, run_dir = smoke_run["results"], smoke_run["dir"]
    report = open(os.path.join(run_dir, "report.md"), encoding="utf-8").read()
    page = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    for number in (f"{r['pretrain_final']['masked_lm_accuracy']:.4f}",
                   f"{r['baselines']['masked_lm']['accuracy']:.4f}",
                   f"{r['finetune']['pretrained']['accuracy']:.4f}",
                   f"{r['finetune']['random']['accuracy']:.4f}", "0.5092"):
        assert number in report and number in page
    for command in ("python -m data.prepare_corpus", "python -m data.train_vocab",
                    "python -m data.create_pretraining_data", "python -m albert_tf.run_pretraining",
                    "python -m albert_tf.run_classifier", "python -m export.export_saved_model",
                    "python -m export.cc_loader", "python -m albert_tf.analysis.transitions"):
        assert command in report
    for chart in r["charts"]:
        assert open(os.path.join(run_dir, chart), "rb").read()[:8] == PNG
        assert f"]({chart})" in report and f'src="{chart}"' in page
    with open(os.path.join(run_dir, "transitions", "transitions.csv")) as f:
        assert len(f.read().strip().splitlines()) == 1 + 4  # header + the tiny model's 4 layers


def test_second_run_resumes_without_redoing_anything(smoke_run):
    before = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(smoke_run["dir"], "*", "*"))
              if os.sep + "charts" + os.sep not in p}  # the report redraws its charts
    proc = subprocess.run([sys.executable, "-m", "albert_tf.demo", "--smoke", "--quiet"],
                          capture_output=True, text=True, cwd=str(smoke_run["cwd"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert glob.glob(str(smoke_run["cwd"] / "runs" / "*")) == [smoke_run["dir"]]
    assert proc.stdout.count("done before: skipped") == 8
    with open(os.path.join(smoke_run["dir"], "results.json")) as f:
        again = json.load(f)
    assert all(again["steps"][s]["skipped"] for s in STEPS[:-1])
    assert again["finetune"] == smoke_run["results"]["finetune"]
    after = {p: os.path.getmtime(p) for p in before}
    assert after == before  # no step's output was rewritten

