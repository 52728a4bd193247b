"""The one path every training command runs (`run_pretraining`, `run_classifier`, `run_race`,
`run_squad_v1`/`v2`): parsed flags (`albert_tf.flags`) -> the model's config and tokenizer ->
`TrainingConfig.from_flags` -> the strategy -> `TrainingRun` -> `eval_results.json` -> the
model for prediction (the trained one, or the run's latest checkpoint) -> an exporter for
`--export_dir`. A runner keeps only what its task owns: its own flags, its data and its
prediction files.

This is the entry-point floor (ARCHITECTURE.md): it may call `export/` to write SavedModels;
the loop takes the exporter as a callable.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import tensorflow as tf
from absl import logging

from albert_tf.backbone import set_remove_padding
from albert_tf.checkpoints import CheckpointError
from albert_tf.config import AlbertConfig
from albert_tf.distribute import StrategyError, get_strategy
from albert_tf.cli import run_command
from albert_tf.flags import FLAGS, require, strategy_name
from albert_tf.tokenization import Tokenizer
from albert_tf.train_lib import CorruptInputError, NonFiniteLossError, TrainingRun
from export.saved_model import ExportError, export_saved_model

# What a command reports as "error: ..." and exit status 1 instead of a traceback: bad input
# (data, config, checkpoint, flags: all ValueErrors), a strategy that cannot start, a run that
# stopped on a non-finite loss or an unreadable input (a checkpoint was saved first).
RUN_ERRORS = (ValueError, FileNotFoundError, StrategyError, NonFiniteLossError,
              CorruptInputError)


def guarded(body, *args, **kwargs) -> int:
    """Runs `body`; a `RUN_ERRORS` error is printed as one line and gives exit status 1."""
    logging.set_verbosity(logging.WARNING)  # TF's checkpoint INFO lines drown the progress
    try:
        return body(*args, **kwargs) or 0
    except RUN_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def command(body, define_flags, required=(), check=None) -> None:
    """A training or analysis command: defines its flags, parses them, checks that `required`
    ones are set (and `check()`, which raises absl's UsageError), runs `body` `guarded`, exits
    with its status."""

    def main(argv):
        del argv
        require(*required)
        if check is not None:
            check()
        return guarded(body)

    run_command(main, define_flags)


def model_and_tokenizer() -> tuple[AlbertConfig, Tokenizer]:
    """--albert_config_file and --spm_model_file, checked against each other and against
    --max_seq_length."""
    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    tokenizer = Tokenizer(FLAGS.spm_model_file, FLAGS.do_lower_case)
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"--spm_model_file has {tokenizer.vocab_size} pieces but the "
                         f"model's vocab_size is {config.vocab_size}.")
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length {FLAGS.max_seq_length} exceeds the model's "
                         f"max_position_embeddings {config.max_position_embeddings}.")
    return config, tokenizer


def strategy() -> tf.distribute.Strategy:
    """The strategy of --distribution_strategy/--tpu (or the official --use_tpu/--tpu_name)."""
    timeout = FLAGS.tpu_connect_timeout if "tpu_connect_timeout" in FLAGS else 60.0
    return get_strategy(strategy_name(), tpu=FLAGS.tpu or FLAGS.tpu_name,
                        connect_timeout_s=timeout)


def make_exporter(export_dir, output_dir, spm_model_file, max_seq_length, labels=None,
                  text_pair=False, source_type="run_pretraining", options=None,
                  do_lower_case=True):
    """exporter(model, which) for `TrainingRun.run`: SavedModels through the one exporter
    (`export.saved_model`), final to `export_dir`, best to `export_dir + "_best"`. `labels` and
    `text_pair` are a classifier's (class names, sentence-pair `serving_default`); `options`
    a SQuAD or RACE model's decoding and packing settings (`export_saved_model`)."""

    def exporter(model, which):
        spm = spm_model_file or next(iter(sorted(glob.glob(os.path.join(output_dir,
                                                                       "*.model")))), None)
        if not spm:
            raise ExportError(f"No SentencePiece model in {output_dir} (the data had no "
                              "sidecar naming one); pass --spm_model_file.")
        target = export_dir.rstrip("/") + ("" if which == "final" else "_best")
        path = export_saved_model(model, target, spm, max_seq_length=max_seq_length,
                                  labels=labels, text_pair=text_pair, options=options,
                                  do_lower_case=do_lower_case,
                                  source={"type": source_type, "output_dir": output_dir,
                                          "which": which})
        print(f"exported the {which} model to {path}", flush=True)
        return path

    return exporter


def exporter_from_flags(source_type, **kwargs):
    """`make_exporter` for --export_dir (None without it) with the run's own settings."""
    if not FLAGS.export_dir:
        return None
    return make_exporter(FLAGS.export_dir, FLAGS.output_dir, FLAGS.spm_model_file,
                         FLAGS.max_seq_length, source_type=source_type,
                         do_lower_case=FLAGS.do_lower_case, **kwargs)


def write_json(path: str, value) -> None:
    """`value` as indented JSON at `path`, atomically."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
    os.replace(path + ".tmp", path)


def format_metrics(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in metrics.items())


def run_task(task, cfg, exporter=None) -> tuple[object, dict]:
    """Trains and/or evaluates `task` with `cfg` (a `TrainingConfig`; None: neither) under the
    flags' strategy; with evaluation, writes OUTPUT_DIR/eval_results.json (each metric, the
    task and the step) and prints the metrics. Returns (the trained model or None, the run's
    summary)."""
    if cfg is None:
        return None, {}
    run = TrainingRun(task, cfg, strategy())
    summary = run.run(exporter=exporter)
    if cfg.do_eval and "eval" in summary:
        write_json(os.path.join(cfg.output_dir, "eval_results.json"),
                   dict(summary["eval"], task=task.name,
                        global_step=int(summary.get("step") or 0)))
        print("eval: " + format_metrics(summary["eval"]))
    return run.model, summary


def model_for_prediction(task, model=None):
    """`model` (just trained), else the task's model from the latest checkpoint in
    --output_dir."""
    if model is not None:
        return model
    model = task.build_model()
    set_remove_padding(model, FLAGS.remove_padding)
    latest = tf.train.latest_checkpoint(FLAGS.output_dir)
    if not latest:
        raise CheckpointError(f"--do_predict without --do_train needs a fine-tuned checkpoint "
                              f"in {FLAGS.output_dir}.")
    tf.train.Checkpoint(model=model).read(latest).expect_partial()
    return model

