"""Training-step throughput of the real loop (albert_tf.train_lib): examples/s per policy.

    python -m bench.train_throughput --preset albert-base --seq_length 128 --batch_size 16 \
        --steps 8 --mixed_precision float32,bfloat16 [--jit_compile]

Generates pretraining TFRecords from the bundled novels (8k vocabulary; the model's vocabulary
is set to match, which changes the MLM decoder cost by under 1% against 30k), then runs
`--warmup_steps` untimed steps (tracing, compilation) and `--steps` timed steps of the full
step: input pipeline, forward, backward, all-reduce, clipping, LAMB update.
"""

import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT  # noqa: E402

flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("batch_size", 16, "Global batch size.")
flags.DEFINE_integer("warmup_steps", 2, "Untimed steps.")
flags.DEFINE_integer("steps", 8, "Timed steps.")
flags.DEFINE_list("mixed_precision", ["float32", "bfloat16"], "Policies to time.")
flags.DEFINE_bool("jit_compile", False, "XLA.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.train_lib import PretrainingConfig, PretrainingRun
    from data.generator import generate, make_job
    from data.prepare_corpus import prepare_corpus
    from data.train_vocab import train_vocab

    preds = 20 if FLAGS.seq_length <= 128 else 76
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "books.txt")
        prepare_corpus(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text", "gutenberg", "*-0.txt"),
                       corpus)
        vocab = train_vocab(corpus, os.path.join(tmp, "v8k"), vocab_size=8000)["model_file"]
        job = make_job(corpus, os.path.join(tmp, "data", "train"), vocab, num_output_shards=2,
                       max_seq_length=FLAGS.seq_length, max_predictions_per_seq=preds,
                       dupe_factor=1)
        generate(job, num_workers=2, progress=False)
        config = AlbertConfig.from_preset(FLAGS.preset).replace(vocab_size=8000)
        print(f"preset={FLAGS.preset} (vocab 8000) seq={FLAGS.seq_length} "
              f"batch={FLAGS.batch_size} jit={FLAGS.jit_compile} cpus={os.cpu_count()}",
              flush=True)
        for policy in FLAGS.mixed_precision:
            total = FLAGS.warmup_steps + FLAGS.steps
            cfg = PretrainingConfig(
                albert_config=config, input_file=os.path.join(tmp, "data", "train-*"),
                output_dir=os.path.join(tmp, f"run-{policy}"), max_seq_length=FLAGS.seq_length,
                max_predictions_per_seq=preds, train_batch_size=FLAGS.batch_size,
                num_train_steps=total, num_warmup_steps=1, learning_rate=1e-4,
                save_checkpoints_steps=total, iterations_per_loop=FLAGS.warmup_steps,
                mixed_precision=policy, jit_compile=FLAGS.jit_compile, seed=1, verbose=False)
            run = PretrainingRun(cfg)
            run.controller.position_input()  # the training iterator at step 0
            iterator = run.controller.train_iterator
            loop = run.trainer.build_train_loop()
            loop(iterator, tf.constant(FLAGS.warmup_steps))  # trace + warm up
            start = time.perf_counter()
            sums, loss, _ = loop(iterator, tf.constant(FLAGS.steps))
            float(loss)
            elapsed = time.perf_counter() - start
            print(f"{policy:>9}: {FLAGS.steps * FLAGS.batch_size / elapsed:8.2f} examples/s "
                  f"({elapsed / FLAGS.steps:.2f} s/step, loss {float(loss):.3f})", flush=True)
            tf.keras.backend.clear_session()


if __name__ == "__main__":
    sys.exit(app.run(main))
