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

import dataclasses
import glob
import os

import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from albert_tf.commands import flags as albert_flags  # noqa: E402
from albert_tf.config import AlbertConfig  # noqa: E402
from albert_tf.commands.runner import (command, format_metrics,  # noqa: E402
                                       raise_if_stopped, record_config, strategy)
from albert_tf.export.run_exporter import make_exporter  # noqa: E402
from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun  # noqa: E402


# The official run_pretraining.py defaults are PretrainingConfig's (one default per value).
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PretrainingConfig)
             if f.default is not dataclasses.MISSING}


def define_flags():
    """Command-line flags (defined only when run as a program): the official ones with their
    official defaults (`PretrainingConfig`'s), and ours."""
    d = _DEFAULTS
    albert_flags.define(albert_flags.MODEL, albert_flags.RUN, albert_flags.EVAL,
                        albert_flags.CLUSTER, albert_flags.PERFORMANCE, "input_file",
                        "max_predictions_per_seq", "spm_model_file", "vocab_file",
                        "jit_compile", notes={"jit_compile": "The training step.",
                               "export_dir": "After training: the final model to EXPORT_DIR, "
                                             "the best evaluated one (with --do_eval) to "
                                             "EXPORT_DIR_best."},
                        **{name: d[name] for name in (
                            "do_train", "train_batch_size", "eval_batch_size", "optimizer",
                            "learning_rate", "save_checkpoints_steps", "max_seq_length",
                            "max_predictions_per_seq", "keep_checkpoint_max",
                            "iterations_per_loop", "input_shards", "do_eval",
                            "mixed_precision", "remove_padding", "recompute", "use_einsum",
                            "grad_accum_steps", "init_from_group0", "jit_compile")},
                        random_seed=d["seed"])
    flags.DEFINE_float("poly_power", d["poly_power"], "Power of the polynomial decay.")
    flags.DEFINE_integer("num_train_steps", d["num_train_steps"], "Optimizer steps.")
    flags.DEFINE_integer("num_warmup_steps", d["num_warmup_steps"], "Linear warmup steps.")
    flags.DEFINE_integer("start_warmup_step", d["start_warmup_step"],
                         "Step at which warmup starts.")
    flags.DEFINE_integer("max_eval_steps", d["max_eval_steps"], "Evaluation batches.")
    flags.DEFINE_float("masked_lm_budget", d["masked_lm_budget"],
                       "Official online-masking ratio; only 0 (offline masking, the official "
                       "default) is supported, any other value is refused.")
    flags.DEFINE_float("tpu_connect_timeout", 60.0, "Seconds allowed for each TPU connect step.")
    flags.DEFINE_string("eval_input_file", None, "Evaluation TFRecords (default: --input_file).")
    flags.DEFINE_integer("export_max_seq_length", None,
                         "max_seq_length of the exported text signatures (default: "
                         "--max_seq_length).")
    flags.DEFINE_integer("shuffle_window", d["shuffle_window"],
                         "Training records are permuted within consecutive windows of this many "
                         "(a seeded, checkpoint-free shuffle; see albert_tf.input_pipeline).")
    flags.DEFINE_bool("deterministic", False,
                      "Deterministic ops (exact resume on CPU; slower on accelerators).")


def run(exp):
    if exp.deterministic:
        tf.config.experimental.enable_op_determinism()
    the_strategy = strategy(exp)
    cfg = PretrainingConfig.from_settings(
        exp.flat(), AlbertConfig.from_json_file(exp.albert_config_file))
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
