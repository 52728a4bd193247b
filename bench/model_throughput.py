"""Model throughput: examples/s of the ALBERT pretrainer, forward or forward+backward.

    python -m bench.model_throughput --preset albert-base --seq_length 128 --batch_size 16 \
        --mode forward_backward --mixed_precision=float32,mixed_bfloat16

Measures the model alone (no input pipeline, no optimizer update): a compiled `tf.function` over
random int32 features of static shape, warmed up, then timed over `--steps` calls. Prints one
line per dtype policy.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from albert_tf import AlbertConfig, AlbertPretrainer  # noqa: E402
from albert_tf.losses import pretraining_loss  # noqa: E402

flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("batch_size", 16, "Batch size.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
flags.DEFINE_enum("mode", "forward_backward", ["forward", "forward_backward"], "What to time.")
flags.DEFINE_list("mixed_precision", ["float32", "mixed_bfloat16"], "Dtype policies to time.")
flags.DEFINE_bool("jit_compile", False, "Compile with XLA.")
flags.DEFINE_integer("warmup_steps", 3, "Untimed calls.")
flags.DEFINE_integer("steps", 10, "Timed calls.")
FLAGS = flags.FLAGS


def make_batch(cfg, batch, seq, predictions, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "input_ids": tf.constant(rng.integers(5, cfg.vocab_size, (batch, seq)), tf.int32),
        "input_mask": tf.ones((batch, seq), tf.int32),
        "segment_ids": tf.constant(np.repeat([[0] * (seq // 2) + [1] * (seq - seq // 2)],
                                             batch, 0), tf.int32),
        "masked_lm_positions": tf.constant(
            np.sort(rng.integers(1, seq, (batch, predictions)), -1), tf.int32),
        "masked_lm_ids": tf.constant(rng.integers(5, cfg.vocab_size, (batch, predictions)),
                                     tf.int32),
        "masked_lm_weights": tf.ones((batch, predictions), tf.float32),
        "next_sentence_labels": tf.constant(rng.integers(0, 2, (batch, 1)), tf.int32),
    }


def time_policy(policy: str) -> float:
    keras.mixed_precision.set_global_policy(policy)
    cfg = AlbertConfig.from_preset(FLAGS.preset)
    model = AlbertPretrainer(cfg)
    batch = make_batch(cfg, FLAGS.batch_size, FLAGS.seq_length, FLAGS.max_predictions_per_seq)
    inputs = {k: batch[k] for k in model.input}

    @tf.function(jit_compile=FLAGS.jit_compile)
    def forward():
        return pretraining_loss(model(inputs, training=True), batch)

    @tf.function(jit_compile=FLAGS.jit_compile)
    def forward_backward():
        with tf.GradientTape() as tape:
            loss = pretraining_loss(model(inputs, training=True), batch)
        grads = tape.gradient(loss, model.trainable_variables)
        return loss, tf.linalg.global_norm(grads)

    step = forward if FLAGS.mode == "forward" else forward_backward
    for _ in range(FLAGS.warmup_steps):
        tf.nest.map_structure(lambda t: t.numpy(), step())
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
        tf.nest.map_structure(lambda t: t.numpy(), step())
    elapsed = time.perf_counter() - start
    keras.backend.clear_session()
    return FLAGS.steps * FLAGS.batch_size / elapsed


def main(argv):
    del argv
    print(f"preset={FLAGS.preset} seq={FLAGS.seq_length} batch={FLAGS.batch_size} "
          f"mode={FLAGS.mode} jit={FLAGS.jit_compile} steps={FLAGS.steps} "
          f"cpus={os.cpu_count()}", flush=True)
    for policy in FLAGS.mixed_precision:
        rate = time_policy(policy)
        print(f"{policy:>15}: {rate:8.2f} examples/s", flush=True)


if __name__ == "__main__":
    sys.exit(app.run(main))
