"""How the training step scales with sequence length and model size, and the paper's
relative training speed (Table 3's "Speedup") reproduced as ratios on this machine.

    python -m bench.scale                   # ~15 min on 2 cores
    python -m bench.scale --sizes albert-base,bert-large --seq_lengths 128

Every point is one `bench.compare` training measurement (the loop's own step - forward,
backward, clipping, LAMB - on batches of real records from the bundled novels; float32,
remove_padding; its own child process; median of `--repeats` after `--warmup`). The analytic FLOP ratio (`albert_tf.analysis.flops`) is printed beside each
measured ratio as the prediction. The paper measured at batch 4096, seq 512 on TPUs; here the
batch is `--batch_size` (default 2) so that albert-xxlarge fits the time, and bert-xlarge
(1.27B parameters: about 20 GB of weights, gradients and LAMB slots) is left out by default;
the paper's figures, given against BERT-xlarge, are shown against BERT-large (divided by its
3.8x), the reference of the paper's later versions.
"""

import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, write_results  # noqa: E402

flags.DEFINE_list("seq_lengths", ["128", "256", "512"], "Sequence lengths (albert-base).")
flags.DEFINE_list("sizes", ["albert-base", "albert-large", "albert-xlarge", "albert-xxlarge",
                            "bert-base", "bert-large"], "Presets (seq 128).")
flags.DEFINE_integer("batch_size", 2, "Batch size of every point.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence (official: 20).")
flags.DEFINE_integer("warmup", 1, "Untimed steps per point.")
flags.DEFINE_integer("repeats", 3, "Timed steps per point (median).")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "scale"), "Results.")
FLAGS = flags.FLAGS

# Table 3 of arXiv 1909.11942v1 (speedup against BERT-xlarge, 1.0), and against BERT-large.
PAPER_VS_BERT_XLARGE = {"bert-base": 17.7, "bert-large": 3.8, "bert-xlarge": 1.0,
                        "albert-base": 21.1, "albert-large": 6.5, "albert-xlarge": 2.4,
                        "albert-xxlarge": 1.2}


def _step(preset, seq):
    out = os.path.join(FLAGS.output_dir, "points")
    cmd = [sys.executable, "-m", "bench.compare", "--cases", "train", "--implementations",
           "albert_tf", "--dtypes", "float32", "--padding", "removed", "--rounds", "1",
           "--preset", preset, "--batch_size",
           str(FLAGS.batch_size), "--seq_length", str(seq), "--predictions",
           str(FLAGS.predictions), "--warmup", str(FLAGS.warmup), "--repeats",
           str(FLAGS.repeats), "--output_dir", out]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{preset} seq {seq} failed:\n{proc.stderr[-3000:]}")
    with open(os.path.join(out, "compare.json")) as f:
        row = json.load(f)["rows"][0]
    if "error" in row:
        raise SystemExit(f"{preset} seq {seq} failed:\n{row['error']}")
    return row


def main(argv):
    del argv
    from albert_tf.analysis.flops import forward_flops, model_dims

    os.makedirs(FLAGS.output_dir, exist_ok=True)
    B, P = FLAGS.batch_size, FLAGS.predictions
    results = {"batch_size": B, "predictions": P, "cpu_count": os.cpu_count(),
               "seq": [], "sizes": []}
    lines = [f"Training step, float32, batch {B}, {P} masked positions, {os.cpu_count()} CPUs", "",
             "| albert-base seq | s/step | x seq 128 | FLOP ratio | peak RSS MB |",
             "|---|---|---|---|---|"]
    dims = model_dims("albert-base")
    first = None
    for seq in [int(s) for s in FLAGS.seq_lengths]:
        row = _step("albert-base", seq)
        flops = 3 * forward_flops(dims, B, seq, P)
        first = first or (row["median_s"], flops)
        results["seq"].append({"seq_length": seq, "median_s": row["median_s"],
                               "gflop": flops / 1e9, "peak_rss_mb": row["peak_rss_mb"]})
        lines.append(f"| {seq} | {row['median_s']:.3f} | {row['median_s'] / first[0]:.2f} | "
                     f"{flops / first[1]:.2f} | {row['peak_rss_mb']:.0f} |")
        print(lines[-1], flush=True)
    lines += ["", "| model (seq 128) | s/step | speed vs bert-large | FLOP ratio | paper "
              "(vs BERT-large) | peak RSS MB |", "|---|---|---|---|---|---|"]
    points = {}
    for preset in FLAGS.sizes:
        row = _step(preset, 128)
        points[preset] = (row, 3 * forward_flops(model_dims(preset), B, 128, P))
        print(f"{preset}: {row['median_s']:.3f} s/step", flush=True)
    ref = points.get("bert-large")
    for preset, (row, flops) in points.items():
        speed = ref[0]["median_s"] / row["median_s"] if ref else None
        paper = PAPER_VS_BERT_XLARGE[preset] / PAPER_VS_BERT_XLARGE["bert-large"]
        results["sizes"].append({"preset": preset, "median_s": row["median_s"],
                                 "gflop": flops / 1e9, "speed_vs_bert_large": speed,
                                 "flop_ratio_vs_bert_large": ref[1] / flops if ref else None,
                                 "paper_vs_bert_large": paper,
                                 "peak_rss_mb": row["peak_rss_mb"]})
        lines.append(f"| {preset} | {row['median_s']:.3f} | "
                     f"{f'{speed:.2f}x' if speed else '-'} | "
                     f"{f'{ref[1] / flops:.2f}x' if ref else '-'} | {paper:.2f}x | "
                     f"{row['peak_rss_mb']:.0f} |")
    table = "\n".join(lines) + "\n"
    write_results(FLAGS.output_dir, "scale", results, table)
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
