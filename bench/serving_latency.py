"""Serving latency of an exported SavedModel's `serving_default` (raw text in, tokenization
included), loaded the way a Python server would (`tf.saved_model.load`, tensorflow-text ops).

    python -m bench.serving_latency --preset albert-base --kinds pretrainer,classifier

Exports a randomly initialized model of the preset (vocabulary: `--spm_model_file`, or an 8k
SentencePiece model trained here on the bundled novels) with `max_seq_length` 128, then times one
real sentence and a batch of 32 real sentences from the bundled corpus: `--warmup` untimed calls,
then `--repeats` timed calls each; prints p50 and p99 in milliseconds and writes JSON.
"""

import glob
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_list("kinds", ["pretrainer", "classifier"], "Models to export and time.")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (default: train an 8k one).")
flags.DEFINE_integer("max_seq_length", 128, "max_seq_length of the export.")
flags.DEFINE_integer("warmup", 3, "Untimed calls per case.")
flags.DEFINE_integer("repeats", 50, "Timed calls per case.")
flags.DEFINE_string("output", None, "JSON results file.")
FLAGS = flags.FLAGS

SENTENCE = "ALBERT shares a single transformer block across all of its layers, [MASK] memory."


def _vocab(directory):
    from data.train_vocab import train_vocab

    prefix = os.path.join(directory, "bench8k")
    train_vocab(sorted(glob.glob(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text", "gutenberg",
                                              "*-0.txt"))), prefix, vocab_size=8000,
                num_threads=2)
    return prefix + ".model"


def _sentences(n):
    path = os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text", "gutenberg", "1342-0.txt")
    with open(path, encoding="utf-8-sig") as f:
        lines = [" ".join(line.split()) for line in f if len(line.split()) >= 8]
    return lines[200:200 + n]


def _time(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times = np.array(times) * 1000
    return {"p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)),
            "mean_ms": float(times.mean()), "repeats": repeats}


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from albert_tf import AlbertClassifier, AlbertConfig, AlbertPretrainer
    from albert_tf.tokenization import Tokenizer
    from export.saved_model import export_saved_model

    work = tempfile.mkdtemp(prefix="serving_latency-")
    spm = FLAGS.spm_model_file or _vocab(work)
    vocab_size = Tokenizer(spm).vocab_size
    import dataclasses

    config = dataclasses.replace(AlbertConfig.from_preset(FLAGS.preset), vocab_size=vocab_size)
    batch = _sentences(32)
    results = {"preset": FLAGS.preset, "vocab_size": vocab_size,
               "max_seq_length": FLAGS.max_seq_length, "cpu_count": os.cpu_count(),
               "tensorflow": tf.__version__, "cases": {}}
    for kind in FLAGS.kinds:
        model = (AlbertPretrainer(config) if kind == "pretrainer"
                 else AlbertClassifier(config, num_labels=2))
        path = export_saved_model(model, os.path.join(work, kind), spm,
                                  max_seq_length=FLAGS.max_seq_length)
        fn = tf.saved_model.load(path).signatures["serving_default"]
        one = tf.constant([SENTENCE])
        many = tf.constant(batch)
        lengths = fn(text=many)["input_mask"].numpy().sum(1)
        for name, text in (("1 sentence", one), ("batch of 32", many)):
            r = _time(lambda: fn(text=text), FLAGS.warmup, FLAGS.repeats)
            results["cases"][f"{kind}, {name}"] = r
            print(f"{FLAGS.preset} {kind:10s} {name:12s} p50 {r['p50_ms']:8.1f} ms  "
                  f"p99 {r['p99_ms']:8.1f} ms", flush=True)
        results[f"{kind}_batch_tokens"] = {"mean": float(lengths.mean()),
                                           "max": int(lengths.max())}
    if FLAGS.output:
        with open(FLAGS.output, "w") as f:
            json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
