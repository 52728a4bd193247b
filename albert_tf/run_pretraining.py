r"""ALBERT pretraining (masked LM + sentence order) under any tf.distribute strategy.

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

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.config import AlbertConfig  # noqa: E402
from albert_tf.configs.definitions import PRETRAINING_DEFAULTS  # noqa: E402
from albert_tf.commands.runner import (command, format_metrics,  # noqa: E402
                                       raise_if_stopped, record_config, strategy)
from albert_tf.export.run_exporter import make_exporter  # noqa: E402
from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun  # noqa: E402


def define_flags():
    """Command-line flags (defined only when run as a program): the official ones with their
    official defaults (`PRETRAINING_DEFAULTS`, the loop's own), and ours."""
    albert_flags.define(albert_flags.MODEL, albert_flags.RUN, albert_flags.EVAL,
                        albert_flags.CLUSTER, albert_flags.PERFORMANCE, "input_file",
                        "max_predictions_per_seq", "spm_model_file", "vocab_file",
                        "jit_compile", "poly_power", "num_train_steps", "num_warmup_steps",
                        "start_warmup_step", "max_eval_steps", "masked_lm_budget",
                        "tpu_connect_timeout", "eval_input_file", "export_max_seq_length",
                        "shuffle_window", "deterministic",
                        notes={"jit_compile": "The training step.",
                               "export_dir": "After training: the final model to EXPORT_DIR, "
                                             "the best evaluated one (with --do_eval) to "
                                             "EXPORT_DIR_best."},
                        **PRETRAINING_DEFAULTS)


def run(exp):
    if exp.deterministic:
        tf.config.experimental.enable_op_determinism()
    the_strategy = strategy(exp)
    cfg = PretrainingConfig.from_settings(
        exp.run_settings(), AlbertConfig.from_json_file(exp.albert_config_file))
    exporter = None
    if exp.export_dir:
        exporter = make_exporter(exp.export_dir, exp.output_dir, exp.spm_model_file,
                                 exp.export_max_seq_length or exp.max_seq_length,
                                 vocab_file=exp.vocab_file)
    run = PretrainingRun(cfg, the_strategy)  # copies the data's SentencePiece model
    if exporter is not None and not (exp.spm_model_file or exp.vocab_file or glob.glob(
            os.path.join(exp.output_dir, "*.model"))):
        raise ValueError(f"--export_dir needs a SentencePiece model: the data's sidecars "
                         f"name none and {exp.output_dir} holds none; pass "
                         "--spm_model_file (or --vocab_file, a WordPiece vocabulary).")
    if cfg.do_train and run.is_chief:
        record_config(exp, cfg.output_dir)  # every check passed
    summary = run.run(exporter=exporter)
    if "eval" in summary:  # the last evaluation (the official eval_results.txt's), at its step
        print(f"eval: {format_metrics(summary['eval'])} (step {summary.get('step')}, the last "
              "evaluation)")
    raise_if_stopped(summary)
    step = summary.get("step", int(run.optimizer.iterations.numpy()))
    print(f"done: {summary.get('status', 'evaluated')} at step {step}")


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(run, define_flags, required=("albert_config_file", "input_file", "output_dir"))


if __name__ == "__main__":
    cli()
