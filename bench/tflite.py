"""TensorFlow Lite files against the SavedModel they come from: size, one-sentence latency, and
(for a classifier) label agreement and accuracy on the SST-2 dev sentences.

    python -m bench.tflite --model_dir runs/<demo run>/exports/albert_demo_sst2
    python -m bench.tflite --preset albert-base --spm_model_file vocab.model

`--model_dir`: one of our SavedModel exports (a fine-tuned classifier gives agreement figures).
`--preset`: a randomly initialized classifier of that shape (vocabulary: `--spm_model_file`,
its size replacing the preset's), exported as a SavedModel here first. Each `--quantize` mode
is exported to a temporary directory, then every SST-2 dev sentence (or `--sentences` of them)
goes through the interpreter one at a time (`--threads`), after `--warmup` untimed calls.
Prints a Markdown table and writes JSON (`--output`).
"""

import csv
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SST2_DEV = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2", "dev.tsv")
flags.DEFINE_string("model_dir", None, "A SavedModel export of ours (BASE/NAME or .../N).")
flags.DEFINE_string("preset", None, "Or a preset, randomly initialized (a 2-class classifier).")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model for --preset.")
flags.DEFINE_integer("max_seq_length", 128, "max_seq_length for --preset.")
flags.DEFINE_list("quantize", ["none", "float16", "dynamic_int8"], "Modes to export and time.")
flags.DEFINE_integer("sentences", None, "SST-2 dev sentences to run (default: all 872).")
flags.DEFINE_integer("threads", None, "Interpreter threads (default: TFLite's).")
flags.DEFINE_integer("warmup", 5, "Untimed calls per file.")
flags.DEFINE_string("output", None, "JSON results file.")
FLAGS = flags.FLAGS


def _directory_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # the converter's INFO lines
    from albert_tf.export.saved_model import export_saved_model, exported_version, load_for_export
    from albert_tf.export.tflite import export_tflite, interpreter, run

    with open(SST2_DEV, encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    rows = rows[:FLAGS.sentences] if FLAGS.sentences else rows
    texts, gold = [r[0] for r in rows], np.array([int(r[1]) for r in rows])
    tmp = tempfile.mkdtemp(prefix="bench_tflite_")
    if FLAGS.preset:
        from albert_tf import AlbertClassifier, AlbertConfig
        from albert_tf.tokenization import Tokenizer

        if not FLAGS.spm_model_file:
            raise app.UsageError("--preset needs --spm_model_file.")
        vocab = Tokenizer(FLAGS.spm_model_file).vocab_size
        config = AlbertConfig.from_preset(FLAGS.preset).replace(vocab_size=vocab)
        model = AlbertClassifier(config, num_labels=2)
        version = export_saved_model(model, os.path.join(tmp, "saved", "model"),
                                     FLAGS.spm_model_file, max_seq_length=FLAGS.max_seq_length)
        source = FLAGS.preset
    elif FLAGS.model_dir:
        version = exported_version(FLAGS.model_dir)
        if not version:
            raise app.UsageError(f"{FLAGS.model_dir} is not one of our SavedModel exports.")
        source = version
    else:
        raise app.UsageError("Give --model_dir or --preset.")
    model, spm, record = load_for_export(version)
    saved = tf.saved_model.load(version).signatures["serving_default"]
    for text in texts[:FLAGS.warmup]:
        saved(text=tf.constant([text]))
    times = []
    reference = []
    for text in texts:
        start = time.perf_counter()
        reference.append(saved(text=tf.constant([text]))["probabilities"].numpy()[0])
        times.append(time.perf_counter() - start)
    reference = np.array(reference)
    results = {"source": source, "sentences": len(texts), "threads": FLAGS.threads,
               "config": model.config.to_dict(), "modes": {}}
    results["saved_model"] = {
        "size_bytes": _directory_size(version), "p50_ms": 1e3 * float(np.median(times)),
        "p99_ms": 1e3 * float(np.percentile(times, 99)),
        "accuracy": float((reference.argmax(1) == gold).mean())}
    for mode in FLAGS.quantize:
        path = os.path.join(tmp, f"model_{mode}.tflite")
        export_tflite(model, path, spm, quantize=mode, max_seq_length=record["max_seq_length"],
                      labels=record.get("labels"))
        runner = interpreter(path, num_threads=FLAGS.threads).get_signature_runner()
        for text in texts[:FLAGS.warmup]:
            run(runner, {"text": [text]})
        times, probabilities = [], []
        for text in texts:
            start = time.perf_counter()
            out = run(runner, {"text": [text]})
            times.append(time.perf_counter() - start)
            probabilities.append(out["probabilities"][0])
        probabilities = np.array(probabilities)
        results["modes"][mode] = {
            "size_bytes": os.path.getsize(path), "p50_ms": 1e3 * float(np.median(times)),
            "p99_ms": 1e3 * float(np.percentile(times, 99)),
            "label_agreement": float((probabilities.argmax(1) == reference.argmax(1)).mean()),
            "max_abs_probability_difference": float(np.abs(probabilities - reference).max()),
            "accuracy": float((probabilities.argmax(1) == gold).mean())}
    _print_table(results, source, len(texts))
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return 0


def _print_table(results: dict, source: str, count: int) -> None:
    """The Markdown table of the SavedModel and each TFLite mode."""
    sm = results["saved_model"]
    print(f"\n{source}: {count} SST-2 dev sentences, one per call")
    print("| file | size (MB) | p50 ms | p99 ms | label agreement | max abs dp | accuracy |")
    print("|---|---|---|---|---|---|---|")
    print(f"| SavedModel (TF, Python) | {sm['size_bytes'] / 1e6:.2f} | {sm['p50_ms']:.2f} | "
          f"{sm['p99_ms']:.2f} | - | - | {sm['accuracy']:.4f} |")
    for mode, r in results["modes"].items():
        print(f"| TFLite {mode} | {r['size_bytes'] / 1e6:.2f} | {r['p50_ms']:.2f} | "
              f"{r['p99_ms']:.2f} | {r['label_agreement']:.4f} | "
              f"{r['max_abs_probability_difference']:.2e} | {r['accuracy']:.4f} |")


if __name__ == "__main__":
    sys.exit(app.run(main))
