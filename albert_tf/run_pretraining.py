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

import glob
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402
from albert_tf.config import AlbertConfig


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    # Official flags.
    flags.DEFINE_string("albert_config_file", None, "Model config JSON (official keys).")
    flags.DEFINE_string("input_file", None, "Training TFRecords: comma-separated globs.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, summaries and metrics go here.")
    flags.DEFINE_string("init_checkpoint", None,
                        "Initial weights: official TF1 checkpoint or albert_tf directory.")
    flags.DEFINE_integer("max_seq_length", 512, "Sequence length of the TFRecords.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence.")
    flags.DEFINE_bool("do_train", True, "Train (official default: true; --nodo_train with "
                      "--do_eval only evaluates).")
    flags.DEFINE_bool("do_eval", False, "Evaluate (each checkpoint when training).")
    flags.DEFINE_integer("train_batch_size", 4096, "Global batch size per optimizer step.")
    flags.DEFINE_integer("eval_batch_size", 64, "Global evaluation batch size.")
    flags.DEFINE_enum("optimizer", "lamb", ["lamb", "adamw"], "Optimizer.")
    flags.DEFINE_float("learning_rate", 0.00176, "Peak learning rate.")
    flags.DEFINE_float("poly_power", 1.0, "Power of the polynomial decay.")
    flags.DEFINE_integer("num_train_steps", 125000, "Optimizer steps.")
    flags.DEFINE_integer("num_warmup_steps", 3125, "Linear warmup steps.")
    flags.DEFINE_integer("start_warmup_step", 0, "Step at which warmup starts.")
    flags.DEFINE_integer("save_checkpoints_steps", 5000, "Checkpoint (and eval) interval.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
    flags.DEFINE_integer("iterations_per_loop", 1000,
                         "Steps per host call (one tf.function call runs this many).")
    flags.DEFINE_integer("max_eval_steps", 100, "Evaluation batches.")
    flags.DEFINE_bool("init_from_group0", False,
                      "Initialize every layer group from group 0 of --init_checkpoint.")
    flags.DEFINE_bool("use_tpu", False, "Official alias: --distribution_strategy=tpu.")
    flags.DEFINE_string("tpu_name", None, "Official alias of --tpu.")
    flags.DEFINE_string("tpu_zone", None, "Accepted for compatibility (the TPU name resolves it).")
    flags.DEFINE_string("gcp_project", None, "Accepted for compatibility.")
    flags.DEFINE_string("master", None, "Accepted for compatibility (use --tpu).")
    flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility (from the TPU).")
    flags.DEFINE_float("masked_lm_budget", 0,
                       "Official online-masking ratio; only 0 (offline masking, the official "
                       "default) is supported, any other value is refused.")
    # Ours.
    flags.DEFINE_enum("distribution_strategy", "default",
                      ["tpu", "multi_worker_mirrored", "mirrored", "one_device", "default"],
                      "tf.distribute strategy.")
    flags.DEFINE_string("tpu", None, "TPU name, grpc://host:port, or 'local'.")
    flags.DEFINE_float("tpu_connect_timeout", 60.0, "Seconds allowed for each TPU connect step.")
    flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16"], "Compute dtype.")
    flags.DEFINE_bool("remove_padding", True,
                      "Run the encoder's matmuls on each batch's real tokens only (not on "
                      "padding); ignored under TPUStrategy and with XLA (--jit_compile).")
    flags.DEFINE_bool("recompute", False,
                      "Recompute each encoder layer's activations in the backward pass instead "
                      "of keeping them: less training memory for about one more forward pass "
                      "(same results).")
    flags.DEFINE_integer("grad_accum_steps", 1,
                         "Split each batch into this many sequential micro-batches.")
    flags.DEFINE_bool("jit_compile", False, "Compile the step with XLA.")
    flags.DEFINE_string("eval_input_file", None, "Evaluation TFRecords (default: --input_file).")
    flags.DEFINE_integer("random_seed", 12345,
                         "Seed of initialization and input shuffling; the same command gives "
                         "the same model. --random_seed=-1 draws a fresh seed.")
    flags.DEFINE_string("export_dir", None,
                        "When training completes, export SavedModels for TF Serving: the final "
                        "model to EXPORT_DIR/<version>, the best (with --do_eval) to "
                        "EXPORT_DIR_best/<version>.")
    flags.DEFINE_string("spm_model_file", None,
                        "SentencePiece model for --export_dir (default: the data's, copied "
                        "into --output_dir).")
    flags.DEFINE_integer("export_max_seq_length", None,
                         "max_seq_length of the exported text signatures (default: "
                         "--max_seq_length).")
    flags.DEFINE_integer("shuffle_window", 10000,
                         "Training records are permuted within consecutive windows of this many "
                         "(a seeded, checkpoint-free shuffle; see albert_tf.input_pipeline).")
    flags.DEFINE_integer("input_shards", 0,
                         "Independent input streams the files are dealt into (0: one per input "
                         "pipeline, i.e. worker or TPU host). The data order depends on it, not "
                         "on the hardware: a run resumed on any number of hosts that divides it "
                         "reads the same batches.")
    flags.DEFINE_bool("deterministic", False,
                      "Deterministic ops (exact resume on CPU; slower on accelerators).")


def make_exporter(export_dir, output_dir, spm_model_file, max_seq_length, labels=None,
                  text_pair=False, source_type="run_pretraining", options=None,
                  do_lower_case=True):
    """exporter(model, which) for `TrainingRun.run`: SavedModels through the one exporter
    (`export.saved_model`), final to `export_dir`, best to `export_dir + "_best"`. `labels` and
    `text_pair` are a classifier's (class names, sentence-pair `serving_default`); `options`
    a SQuAD or RACE model's decoding and packing settings (`export_saved_model`)."""
    from export.saved_model import ExportError, export_saved_model

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


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    for name in ("albert_config_file", "input_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required.")
    import tensorflow as tf
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # TF's checkpoint INFO lines drown the progress

    from albert_tf.distribute import StrategyError, get_strategy
    from albert_tf.input_pipeline import DataMismatchError
    from albert_tf.train_lib import (CorruptInputError, NonFiniteLossError,
                                     OutputDirMismatchError, PretrainingConfig, PretrainingRun)

    if FLAGS.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy_name = "tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy
    try:
        strategy = get_strategy(strategy_name, tpu=FLAGS.tpu or FLAGS.tpu_name,
                                connect_timeout_s=FLAGS.tpu_connect_timeout)
        cfg = PretrainingConfig(
            albert_config=AlbertConfig.from_json_file(FLAGS.albert_config_file),
            input_file=FLAGS.input_file, output_dir=FLAGS.output_dir,
            eval_input_file=FLAGS.eval_input_file, init_checkpoint=FLAGS.init_checkpoint,
            init_from_group0=FLAGS.init_from_group0, max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
            optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
            poly_power=FLAGS.poly_power, start_warmup_step=FLAGS.start_warmup_step,
            num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
            save_checkpoints_steps=FLAGS.save_checkpoints_steps,
            keep_checkpoint_max=FLAGS.keep_checkpoint_max,
            iterations_per_loop=FLAGS.iterations_per_loop, do_train=FLAGS.do_train,
            do_eval=FLAGS.do_eval, max_eval_steps=FLAGS.max_eval_steps,
            mixed_precision=FLAGS.mixed_precision,
            remove_padding=FLAGS.remove_padding, recompute=FLAGS.recompute,
            grad_accum_steps=FLAGS.grad_accum_steps,
            jit_compile=FLAGS.jit_compile,
            seed=None if FLAGS.random_seed == -1 else FLAGS.random_seed,
            shuffle_window=FLAGS.shuffle_window, input_shards=FLAGS.input_shards,
            masked_lm_budget=FLAGS.masked_lm_budget)
        exporter = None
        if FLAGS.export_dir:
            exporter = make_exporter(FLAGS.export_dir, FLAGS.output_dir, FLAGS.spm_model_file,
                                     FLAGS.export_max_seq_length or FLAGS.max_seq_length)
        run = PretrainingRun(cfg, strategy)  # copies the data's SentencePiece model
        if exporter is not None and not (FLAGS.spm_model_file or glob.glob(
                os.path.join(FLAGS.output_dir, "*.model"))):
            raise ValueError(f"--export_dir needs a SentencePiece model: the data's sidecars "
                             f"name none and {FLAGS.output_dir} holds none; pass "
                             "--spm_model_file.")
        summary = run.run(exporter=exporter)
    except (StrategyError, DataMismatchError, OutputDirMismatchError, NonFiniteLossError,
            CorruptInputError, ValueError, FileNotFoundError) as e:  # ExportError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 1
    if "eval" in summary:
        print("eval: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in summary["eval"].items()))
    print(f"done: {summary.get('status', 'evaluated')} at step {summary.get('step')}")
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    define_flags()
    sys.exit(app.run(main))


if __name__ == "__main__":
    cli()
