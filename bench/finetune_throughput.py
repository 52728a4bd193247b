"""Fine-tuning step throughput of `run_classifier` on SST-2, with and without `remove_padding`.

    python -m bench.finetune_throughput --preset albert-base --max_seq_length 128 \
        --train_batch_size 16 --train_step 8

SST-2 training sentences are short (the bundled train set: 18.0 pieces on average with [CLS] and
[SEP], median 14, longest 87, against a max_seq_length of 128), so the padded step spends most
of its matmuls on padding. Runs the real command
(`python -m albert_tf.run_classifier --do_train`, a randomly initialized model of the preset
with an 8k SentencePiece vocabulary trained here on the bundled novels) once per setting of
`--remove_padding` and reports the median examples/s of its progress lines after the first
(tracing) one, and the real/padded token counts of the train file's first batches.
"""

import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT  # noqa: E402

flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_integer("max_seq_length", 128, "max_seq_length of the features.")
flags.DEFINE_integer("train_batch_size", 16, "Batch size.")
flags.DEFINE_integer("train_step", 8, "Steps per run (progress every 2).")
flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16"], "Compute dtype.")
flags.DEFINE_string("output", None, "JSON results file.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    from albert_tf import AlbertConfig
    from albert_tf.data.train_vocab import train_vocab

    work = tempfile.mkdtemp(prefix="finetune_throughput-")
    spm = train_vocab(sorted(glob.glob(os.path.join(
        ROOT, "albert_tf", "sample_data", "pretrain_text", "gutenberg", "*-0.txt"))),
        os.path.join(work, "v8k"), vocab_size=8000, num_threads=2)["model_file"]
    config = AlbertConfig.from_preset(FLAGS.preset).replace(vocab_size=8000)
    config_file = os.path.join(work, "albert_config.json")
    config.to_json_file(config_file)
    results = {"preset": FLAGS.preset, "max_seq_length": FLAGS.max_seq_length,
               "train_batch_size": FLAGS.train_batch_size, "cpu_count": os.cpu_count(),
               "mixed_precision": FLAGS.mixed_precision, "runs": {}}
    for remove_padding in (False, True):
        name = "remove_padding" if remove_padding else "padded"
        cmd = [sys.executable, "-m", "albert_tf.run_classifier", "--task_name", "sst-2",
               "--data_dir", os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2"),
               "--albert_config_file", config_file, "--spm_model_file", spm,
               "--output_dir", os.path.join(work, name), "--cached_dir",
               os.path.join(work, "features"), "--do_train",
               "--max_seq_length", str(FLAGS.max_seq_length),
               "--train_batch_size", str(FLAGS.train_batch_size),
               "--train_step", str(FLAGS.train_step), "--warmup_step", "1",
               "--iterations_per_loop", "2", "--save_checkpoints_steps",
               str(FLAGS.train_step), "--mixed_precision", FLAGS.mixed_precision,
               f"--{'' if remove_padding else 'no'}remove_padding"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
        rates = [float(m.replace(",", "")) for m in
                 re.findall(r"\| ([\d,.]+) examples/s", proc.stdout + proc.stderr)]
        if len(rates) < 2:
            raise SystemExit(f"{name}: no progress lines\n{proc.stdout[-2000:]}")
        rate = statistics.median(rates[1:])
        results["runs"][name] = {"examples_per_s": rate, "s_per_step":
                                 FLAGS.train_batch_size / rate, "progress": rates}
        print(f"{name:15s} {rate:8.2f} examples/s  ({FLAGS.train_batch_size / rate:.2f} s/step)",
              flush=True)
    runs = results["runs"]
    results["speedup"] = runs["remove_padding"]["examples_per_s"] / runs["padded"][
        "examples_per_s"]
    print(f"remove_padding speedup: {results['speedup']:.2f}x")
    if FLAGS.output:
        with open(FLAGS.output, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
