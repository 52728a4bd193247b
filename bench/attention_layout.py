"""The attention core (scores, softmax, context) in two layouts, forward and forward+backward.

    python -m bench.attention_layout      # the shapes below, median of 30 calls after 2 warm-up

`einsum`: the two einsums "bqnd,bknd->bnqk" and "bnqk,bknd->bqnd" on [batch, seq, heads, d]
tensors (what AlbertAttention used before). `matmul`: Q and V transposed to [b, n, s, d] and K
straight to [b, n, d, s], then plain batched matmuls and one transpose of the context back
(AlbertAttention now). TF lowers an einsum to transposes + BatchMatMulV2 too, but picks
transposes that are slower at these shapes. Prints ms per call and the largest difference of
the two outputs (0 when the same kernels run).
"""

from __future__ import annotations

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
SHAPES = [(8, 128, 12, 64),   # albert-base, batch 8, seq 128
          (32, 64, 12, 64),   # albert-base, a serving batch of 32 short sentences
          (1, 20, 12, 64),    # one sentence
          (64, 64, 4, 16)]    # the test suite's tiny models (H=64, 4 heads)


def define_flags():
    flags.DEFINE_integer("calls", 30, "timed calls per measurement (after 2 warm-up calls)")


def _einsum(tf, q, k, v):
    probs = tf.nn.softmax(tf.einsum("bqnd,bknd->bnqk", q, k))
    return tf.einsum("bnqk,bknd->bqnd", probs, v)


def _matmul(tf, q, k, v):
    scores = tf.matmul(tf.transpose(q, [0, 2, 1, 3]), tf.transpose(k, [0, 2, 3, 1]))
    probs = tf.nn.softmax(scores)
    return tf.transpose(tf.matmul(probs, tf.transpose(v, [0, 2, 1, 3])), [0, 2, 1, 3])


def _time(fn, calls):
    """Median ms of `calls` calls after 2 warm-up calls (bench.compare's timer)."""
    from bench.compare import _median_time

    return 1000 * _median_time(fn, warmup=2, repeats=calls)["median_s"]


def main(argv):
    del argv
    import tensorflow as tf

    print("shape [b, s, n, d] | einsum fwd / fwd+bwd ms | matmul fwd / fwd+bwd ms | "
          "speedup fwd / fwd+bwd | max |diff|")
    for b, s, n, d in SHAPES:
        q, k, v = (tf.random.stateless_normal([b, s, n, d], seed=[i, 7]) for i in range(3))
        row, outputs = [], []
        for core in (_einsum, _matmul):
            forward = tf.function(lambda core=core: core(tf, q, k, v))

            @tf.function
            def step(core=core):
                with tf.GradientTape() as tape:
                    tape.watch([q, k, v])
                    y = core(tf, q, k, v)
                return tape.gradient(y, [q, k, v], output_gradients=tf.ones_like(y))

            row.append((_time(forward, FLAGS.calls), _time(step, FLAGS.calls)))
            outputs.append(forward().numpy())
        (ef, eb), (mf, mb) = row
        print(f"{[b, s, n, d]} | {ef:.2f} / {eb:.2f} | {mf:.2f} / {mb:.2f} | "
              f"{ef / mf:.2f}x / {eb / mb:.2f}x | {np.abs(outputs[0] - outputs[1]).max():.1e}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
