"""ALBERT pretraining (masked LM + sentence order) under any tf.distribute strategy.

Flag names are the official google-research/albert `run_pretraining.py` ones, so an official
command line works with the module name changed; `--use_tpu --tpu_name=NAME` maps to
`--distribution_strategy=tpu --tpu=NAME`.

    python -m albert_tf.run_pretraining --albert_config_file=albert_config.json \
        --input_file='data/train-*.tfrecord' --output_dir=runs/base --do_train \
        --train_batch_size=4096 --max_seq_length=512 --max_predictions_per_seq=20 \
        --optimizer=lamb --learning_rate=0.00176 --num_train_steps=125000 \
        --num_warmup_steps=3125 --save_checkpoints_steps=5000 \
        --distribution_strategy=tpu --tpu=my-tpu --mixed_precision=bfloat16

Rerun the same command to resume from the latest checkpoint in --output_dir.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import glob
import os

import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from albert_tf import flags as albert_flags  # noqa: E402
from albert_tf.config import AlbertConfig  # noqa: E402
from albert_tf.flags import FLAGS  # noqa: E402
from albert_tf.runner import (command, format_metrics, make_exporter,  # noqa: E402
                              raise_if_stopped, strategy)
from albert_tf.train_lib import PretrainingConfig, PretrainingRun  # noqa: E402


def define_flags():
    """Command-line flags (defined only when run as a program): the official ones with their
    official defaults, and ours."""
    albert_flags.define(albert_flags.MODEL, albert_flags.RUN, albert_flags.EVAL,
                        albert_flags.CLUSTER, albert_flags.PERFORMANCE, "input_file",
                        "max_predictions_per_seq", "spm_model_file", "vocab_file",
                        do_train=True,
                        train_batch_size=4096, eval_batch_size=64, optimizer="lamb",
                        learning_rate=0.00176, save_checkpoints_steps=5000)
    flags.DEFINE_float("poly_power", 1.0, "Power of the polynomial decay.")
    flags.DEFINE_integer("num_train_steps", 125000, "Optimizer steps.")
    flags.DEFINE_integer("num_warmup_steps", 3125, "Linear warmup steps.")
    flags.DEFINE_integer("start_warmup_step", 0, "Step at which warmup starts.")
    flags.DEFINE_integer("max_eval_steps", 100, "Evaluation batches.")
    flags.DEFINE_float("masked_lm_budget", 0,
                       "Official online-masking ratio; only 0 (offline masking, the official "
                       "default) is supported, any other value is refused.")
    flags.DEFINE_float("tpu_connect_timeout", 60.0, "Seconds allowed for each TPU connect step.")
    flags.DEFINE_bool("jit_compile", False, "Compile the step with XLA.")
    flags.DEFINE_string("eval_input_file", None, "Evaluation TFRecords (default: --input_file).")
    flags.DEFINE_integer("export_max_seq_length", None,
                         "max_seq_length of the exported text signatures (default: "
                         "--max_seq_length).")
    flags.DEFINE_integer("shuffle_window", 10000,
                         "Training records are permuted within consecutive windows of this many "
                         "(a seeded, checkpoint-free shuffle; see albert_tf.input_pipeline).")
    flags.DEFINE_bool("deterministic", False,
                      "Deterministic ops (exact resume on CPU; slower on accelerators).")


def run():
    if FLAGS.deterministic:
        tf.config.experimental.enable_op_determinism()
    the_strategy = strategy()
    cfg = PretrainingConfig.from_flags(
        FLAGS, AlbertConfig.from_json_file(FLAGS.albert_config_file))
    exporter = None
    if FLAGS.export_dir:
        exporter = make_exporter(FLAGS.export_dir, FLAGS.output_dir, FLAGS.spm_model_file,
                                 FLAGS.export_max_seq_length or FLAGS.max_seq_length,
                                 vocab_file=FLAGS.vocab_file)
    run = PretrainingRun(cfg, the_strategy)  # copies the data's SentencePiece model
    if exporter is not None and not (FLAGS.spm_model_file or FLAGS.vocab_file or glob.glob(
            os.path.join(FLAGS.output_dir, "*.model"))):
        raise ValueError(f"--export_dir needs a SentencePiece model: the data's sidecars "
                         f"name none and {FLAGS.output_dir} holds none; pass "
                         "--spm_model_file (or --vocab_file, a WordPiece vocabulary).")
    summary = run.run(exporter=exporter)
    if "eval" in summary:
        print("eval: " + format_metrics(summary["eval"]))
    raise_if_stopped(summary)
    step = summary.get("step", int(run.optimizer.iterations.numpy()))
    print(f"done: {summary.get('status', 'evaluated')} at step {step}")


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(run, define_flags, required=("albert_config_file", "input_file", "output_dir"))


if __name__ == "__main__":
    cli()
