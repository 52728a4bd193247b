"""Pretraining-data generation speed: examples/s on the bundled Gutenberg novels.

    python -m bench.data_generation                      # seq 128 and 512, 1 and 2 workers
    python -m bench.data_generation --seq_lengths 128 --workers 1,2,4 --dupe_factor 4

Prepares the corpus and trains an 8,000-piece vocabulary once (as the project's
measurement of the official script did: five novels, 8k vocabulary), then times
`data.generator.generate` end to end (tokenization, example creation, TFRecord writing) for each
(sequence length, workers). For reference, the official
single-process script ran at about 190 examples/s (seq 128) and 74 examples/s (seq 512)
where it was measured (docs/benchmarks.md has this machine's figures).
"""

import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("corpus", os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text", "gutenberg",
                                           "*-0.txt"), "Raw text files (glob).")
flags.DEFINE_list("seq_lengths", ["128", "512"], "Sequence lengths.")
flags.DEFINE_list("workers", ["1", "2"], "Worker counts.")
flags.DEFINE_integer("dupe_factor", 4, "Passes over the corpus.")
flags.DEFINE_string("output", os.path.join("bench_results", "data_generation.json"),
                    "Results (JSON).")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Predictions per sequence (seq 128); "
                     "seq 512 uses 76 as the official recipe.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from data.generator import generate, make_job
    from data.prepare_corpus import prepare_corpus
    from data.train_vocab import train_vocab

    import json

    import tensorflow  # noqa: F401 - imported once up front, so no timed run pays for it

    rows = []

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "books.txt")
        counts = prepare_corpus(FLAGS.corpus, corpus)
        vocab = train_vocab(corpus, os.path.join(tmp, "v8k"), vocab_size=8000)["model_file"]
        from albert_tf.tokenization import Tokenizer
        from data.token_cache import tokenize_file

        tokens = tokenize_file(corpus, Tokenizer(vocab), os.path.join(tmp, "count"))["tokens"]
        with open(corpus, encoding="utf-8") as f:
            words = sum(len(line.split()) for line in f)
        print(f"corpus: {counts['documents']} documents, {counts['sentences']:,} sentences, "
              f"{words:,} words, {tokens:,} pieces; "
              f"dupe_factor={FLAGS.dupe_factor}; cpus={os.cpu_count()}", flush=True)
        for seq in map(int, FLAGS.seq_lengths):
            preds = FLAGS.max_predictions_per_seq if seq <= 128 else 76
            for workers in map(int, FLAGS.workers):
                out = os.path.join(tmp, f"s{seq}-w{workers}", "train")
                job = make_job(corpus, out, vocab, num_output_shards=2, max_seq_length=seq,
                               max_predictions_per_seq=preds, dupe_factor=FLAGS.dupe_factor)
                start = time.perf_counter()
                summary = generate(job, num_workers=workers, progress=False)
                elapsed = time.perf_counter() - start
                n = summary["total_examples"]
                print(f"seq {seq:4d}  workers {workers}: {n:7,} examples in {elapsed:6.1f} s = "
                      f"{n / elapsed:8,.0f} examples/s", flush=True)
                rows.append({"seq_length": seq, "workers": workers, "examples": n,
                             "seconds": elapsed, "examples_per_s": n / elapsed})
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
    with open(FLAGS.output, "w") as f:
        json.dump({"dupe_factor": FLAGS.dupe_factor, "cpus": os.cpu_count(),
                   "corpus_words": words, "corpus_tokens": tokens, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    sys.exit(app.run(main))
