"""Serving latency of an exported SavedModel's `serving_default` (raw text in, tokenization
included), loaded the way a Python server would (`tf.saved_model.load`, tensorflow-text ops).

    python -m bench.serving_latency --preset albert-base --kinds pretrainer,classifier

Exports a randomly initialized model of the preset (vocabulary: `--spm_model_file`, or an 8k
SentencePiece model trained here on the bundled novels) with `max_seq_length` 128, then times one
real sentence and a batch of the first 32 SST-2 dev sentences (1,056 pieces, the longest 64):
`--warmup` untimed calls, then `--repeats` timed calls each; prints p50 and p99 in milliseconds
and writes JSON. `--padding removed,padded` exports each model twice, with the encoder on the
batch's real tokens only (`remove_padding`, the default export) and padded to the batch's longest
row, and reports the batch throughput of each; every case also reports its FLOPs on real tokens
only (`albert_tf.analysis.flops`), the floor any implementation pays.
"""

import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from bench import call_times, novels_vocab, sst2_dev_sentences  # noqa: E402

flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_list("kinds", ["pretrainer", "classifier"], "Models to export and time.")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (default: train an 8k one).")
flags.DEFINE_integer("max_seq_length", 128, "max_seq_length of the export.")
flags.DEFINE_integer("warmup", 3, "Untimed calls per case.")
flags.DEFINE_integer("repeats", 50, "Timed calls per case.")
flags.DEFINE_list("padding", ["removed"], "Exports to time: removed (remove_padding, the "
                  "default export), padded (--noremove_padding).")
flags.DEFINE_string("output", None, "JSON results file.")
FLAGS = flags.FLAGS

SENTENCE = "ALBERT shares a single transformer block across all of its layers, [MASK] memory."


def _time(fn, warmup, repeats):
    times = np.array(call_times(fn, warmup, repeats)) * 1000
    return {"p50_ms": float(np.percentile(times, 50)), "p99_ms": float(np.percentile(times, 99)),
            "mean_ms": float(times.mean()), "repeats": repeats}


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from albert_tf import AlbertConfig
    from albert_tf.models.classifier import LabelledHeadModel
    from albert_tf.models.kinds import build_model, model_class
    from albert_tf.tokenization import Tokenizer
    from albert_tf.export.saved_model import export_saved_model

    work = tempfile.mkdtemp(prefix="serving_latency-")
    spm = FLAGS.spm_model_file or novels_vocab(work)
    vocab_size = Tokenizer(spm).vocab_size
    import dataclasses

    config = dataclasses.replace(AlbertConfig.from_preset(FLAGS.preset), vocab_size=vocab_size)
    batch = sst2_dev_sentences(32)
    results = {"preset": FLAGS.preset, "vocab_size": vocab_size,
               "max_seq_length": FLAGS.max_seq_length, "cpu_count": os.cpu_count(),
               "tensorflow": tf.__version__, "cases": {}}
    from albert_tf.analysis.flops import encoder_flops, model_dims

    dims = model_dims(FLAGS.preset)  # the encoder's FLOPs do not depend on the vocabulary
    for kind in FLAGS.kinds:
        labelled = issubclass(model_class(kind), LabelledHeadModel)  # 2 labels; RACE: 4 choices
        model = build_model(kind, config, 2 if labelled else None)
        for padding in FLAGS.padding:
            path = export_saved_model(model, os.path.join(work, f"{kind}-{padding}"), spm,
                                      max_seq_length=FLAGS.max_seq_length,
                                      remove_padding=padding == "removed")
            fn = tf.saved_model.load(path).signatures["serving_default"]
            for name, text in (("1 sentence", [SENTENCE]), ("batch of 32", batch)):
                text = tf.constant(text)
                lengths = fn(text=text)["input_mask"].numpy().sum(1)
                r = _time(lambda: fn(text=text), FLAGS.warmup, FLAGS.repeats)
                r.update(tokens=int(lengths.sum()), longest=int(lengths.max()),
                         rows=len(lengths), padding=padding,
                         encoder_gflop_real_tokens=encoder_flops(dims, lengths) / 1e9,
                         encoder_gflop_padded=encoder_flops(
                             dims, [int(lengths.max())] * len(lengths)) / 1e9,
                         sentences_per_s=len(lengths) / (r["p50_ms"] / 1000))
                label = f"{kind}, {name}" + ("" if padding == "removed" else ", padded")
                results["cases"][label] = r
                print(f"{FLAGS.preset} {label:34s} p50 {r['p50_ms']:8.1f} ms  p99 "
                      f"{r['p99_ms']:8.1f} ms  {r['tokens']} tokens (longest {r['longest']})",
                      flush=True)
    if FLAGS.output:
        with open(FLAGS.output, "w") as f:
            json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
