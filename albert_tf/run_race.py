"""Fine-tuning on RACE (multiple-choice reading comprehension) through the one training loop.

Flag names are the official google-research/albert `run_race.py` ones (with
`--distribution_strategy`/`--tpu` added):

    python -m albert_tf.run_race --data_dir=race_data \
        --albert_config_file=albert_base/albert_config.json \
        --spm_model_file=albert_base/30k-clean.model \
        --init_checkpoint=albert_base/model.ckpt-best --output_dir=runs/race \
        --do_train --do_eval --max_seq_length=512 --max_qa_length=128 \
        --train_batch_size=32 --learning_rate=1e-5 --train_step=12000 --warmup_step=1000

`--data_dir` holds the RACE release (`RACE/{train,dev,test}/{middle,high}/*.txt`);
`--high_only`/`--middle_only` restrict every split to one level. `--train_file`,
`--eval_file`, `--predict_file` are where the feature TFRecords go (default: in
`--output_dir`). Writes `eval_results.json` (accuracy overall, on middle and on high school
questions, and the counts); `--do_predict` writes `predictions.json` ({question id: letter}) for
the test split and `test_results.json` when it has answers. `--init_checkpoint` takes any
pretrained source (see `albert_tf.run_classifier`). With `--export_dir`, the fine-tuned model
is exported for TF Serving (`export.serving.MultipleChoiceServingModule`: raw article, question
and options in, the chosen option out). Rerun the same command to resume.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402
from albert_tf import features as F
from albert_tf.config import AlbertConfig
from albert_tf.tokenization import Tokenizer


def define_flags():
    flags.DEFINE_string("data_dir", None, "Directory of the RACE release.")
    flags.DEFINE_string("albert_config_file", None, "Model config JSON (official keys).")
    flags.DEFINE_string("task_name", "race", "Only race.")
    flags.DEFINE_string("vocab_file", None, "Accepted for compatibility.")
    flags.DEFINE_string("train_file", None, "Training features TFRecord (written if absent).")
    flags.DEFINE_string("eval_file", None, "Dev features TFRecord (written if absent).")
    flags.DEFINE_string("predict_file", None, "Test features TFRecord (written if absent).")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model of the pretrained model.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, metrics and predictions go here.")
    flags.DEFINE_string("init_checkpoint", None, "Pretrained weights (any source).")
    flags.DEFINE_string("albert_hub_module_handle", None, "Accepted for compatibility: pass "
                        "the module directory as --init_checkpoint.")
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the text.")
    flags.DEFINE_float("dropout_prob", 0.1, "Dropout on the pooled output.")
    flags.DEFINE_integer("max_seq_length", 512, "Packed sequence length.")
    flags.DEFINE_integer("max_qa_length", 128, "Pieces of question + option kept (the last).")
    flags.DEFINE_integer("num_train_files", 8, "Files the training features are written as (consecutive blocks of the seeded order), so that up to this many input pipelines (workers, TPU hosts; --input_shards) can read them.")
    flags.DEFINE_integer("input_shards", 0, "Streams the training records are dealt into (0: "
                         "one per input pipeline, i.e. worker).")
    flags.DEFINE_string("export_dir", None, "When training completes, export SavedModels for "
                        "TF Serving (BASE/NAME; the best one to BASE/NAME_best with "
                        "--do_eval) whose serving_default takes article, question and options "
                        "as raw text.")
    flags.DEFINE_integer("num_keep_checkpoint", 5, "Checkpoints kept.")
    flags.DEFINE_bool("high_only", False, "Only high-school passages.")
    flags.DEFINE_bool("middle_only", False, "Only middle-school passages.")
    flags.DEFINE_bool("do_train", True, "Fine-tune on the train split.")
    flags.DEFINE_bool("do_eval", True, "Evaluate on the dev split (each checkpoint).")
    flags.DEFINE_bool("do_predict", False, "Predict the test split.")
    flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
    flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
    flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.")
    flags.DEFINE_float("learning_rate", 1e-5, "Peak learning rate.")
    flags.DEFINE_integer("train_step", 12000, "Optimizer steps.")
    flags.DEFINE_integer("warmup_step", 1000, "Linear warmup steps.")
    flags.DEFINE_integer("save_checkpoints_steps", 100, "Checkpoint (and eval) interval.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per host call.")
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer (official: adamw).")
    flags.DEFINE_bool("use_tpu", False, "Official alias: --distribution_strategy=tpu.")
    flags.DEFINE_string("tpu_name", None, "Official alias of --tpu.")
    flags.DEFINE_string("tpu_zone", None, "Accepted for compatibility.")
    flags.DEFINE_string("gcp_project", None, "Accepted for compatibility.")
    flags.DEFINE_string("master", None, "Accepted for compatibility.")
    flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility (from the TPU).")
    flags.DEFINE_enum("distribution_strategy", "default",
                      ["tpu", "multi_worker_mirrored", "mirrored", "one_device", "default"],
                      "tf.distribute strategy.")
    flags.DEFINE_string("tpu", None, "TPU name, grpc://host:port, or 'local'.")
    flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16"], "Compute dtype.")
    flags.DEFINE_bool("remove_padding", True,
                      "Run the encoder's matmuls on each batch's real tokens only (not on "
                      "padding); ignored under TPUStrategy and with XLA (--jit_compile).")
    flags.DEFINE_bool("recompute", False,
                      "Recompute each encoder layer's activations in the backward pass instead "
                      "of keeping them: less training memory for about one more forward pass "
                      "(same results).")
    flags.DEFINE_integer("grad_accum_steps", 1, "Micro-batches per step.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of the head, dropout and data order; "
                         "-1 draws a fresh one.")
    flags.DEFINE_bool("init_from_group0", False, "Official --init_from_group0 fallback.")


def predict(model, path, batch_size, max_seq_length):
    """(predicted option, probabilities [n, 4]) of the real examples of `path`."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.input_pipeline import ordered_dataset
    from albert_tf.race import IS_REAL_EXAMPLE, race_schema

    @tf.function
    def logits_of(batch):
        return model({k: batch[k] for k in F.BACKBONE_INPUTS}, training=False)["logits"]

    logits, real = [], []
    for batch in ordered_dataset([path], batch_size, race_schema(max_seq_length)):
        logits.append(tf.cast(logits_of(batch), tf.float32).numpy())
        real.append(batch[IS_REAL_EXAMPLE].numpy()[:, 0] > 0)
    logits = np.concatenate(logits)[np.concatenate(real)]
    probabilities = tf.nn.softmax(logits).numpy()
    return probabilities.argmax(-1), probabilities


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    for name in ("data_dir", "albert_config_file", "spm_model_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required.")
    if FLAGS.task_name.lower() != "race":
        raise app.UsageError(f"--task_name {FLAGS.task_name}: this runner runs race.")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise app.UsageError("At least one of --do_train, --do_eval, --do_predict.")
    if FLAGS.high_only and FLAGS.middle_only:
        raise app.UsageError("--high_only and --middle_only exclude each other.")
    import tensorflow as tf
    from absl import logging

    logging.set_verbosity(logging.WARNING)

    from albert_tf import race
    from albert_tf.checkpoints import CheckpointError
    from albert_tf.distribute import StrategyError, get_strategy
    from albert_tf.input_pipeline import DataMismatchError
    from albert_tf.train_lib import (NonFiniteLossError, OutputDirMismatchError, TrainingConfig,
                                     TrainingRun)
    from albert_tf.backbone import set_remove_padding

    seed = None if FLAGS.random_seed == -1 else FLAGS.random_seed
    levels = ("high",) if FLAGS.high_only else ("middle",) if FLAGS.middle_only else race.LEVELS
    out = FLAGS.output_dir
    try:
        config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
        tokenizer = Tokenizer(FLAGS.spm_model_file, FLAGS.do_lower_case)
        if tokenizer.vocab_size != config.vocab_size:
            raise ValueError(f"--spm_model_file has {tokenizer.vocab_size} pieces but the "
                             f"model's vocab_size is {config.vocab_size}.")
        if FLAGS.max_seq_length > config.max_position_embeddings:
            raise ValueError(f"--max_seq_length {FLAGS.max_seq_length} exceeds the model's "
                             f"max_position_embeddings {config.max_position_embeddings}.")
        os.makedirs(out, exist_ok=True)
        data = {}
        for split, on, path, batch in (
                ("train", FLAGS.do_train, FLAGS.train_file, 1),
                ("dev", FLAGS.do_eval, FLAGS.eval_file, FLAGS.eval_batch_size),
                ("test", FLAGS.do_predict, FLAGS.predict_file, FLAGS.predict_batch_size)):
            if not on:
                continue
            examples = race.read_split(FLAGS.data_dir, split, levels)
            path = path or os.path.join(out, f"{split}.tfrecord")
            meta = race.write_examples(examples, tokenizer, FLAGS.max_seq_length,
                                       FLAGS.max_qa_length, path,
                                       shuffle_seed=(seed or 0) if split == "train" else None,
                                       pad_to_multiple=batch,
                                       num_files=FLAGS.num_train_files if split == "train"
                                       else 1)
            data[split] = (",".join(meta["files"]), examples)
            print(f"{split}: {len(examples):,} questions ({meta['levels']['middle']:,} middle, "
                  f"{meta['levels']['high']:,} high; {meta['padding_examples']} padding; "
                  f"{meta['truncated_examples']} articles cut) -> {path}", flush=True)
        task = race.RaceTask(config, FLAGS.max_seq_length, FLAGS.dropout_prob)
        model, summary = None, {}
        if FLAGS.do_train or FLAGS.do_eval:
            any_file = next(iter(data.values()))[0]
            cfg = TrainingConfig(
                albert_config=config, input_file=data["train"][0] if "train" in data
                else any_file, eval_input_file=data["dev"][0] if "dev" in data else None,
                output_dir=out, init_checkpoint=FLAGS.init_checkpoint,
                init_from_group0=FLAGS.init_from_group0, max_seq_length=FLAGS.max_seq_length,
                train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
                optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
                num_train_steps=FLAGS.train_step, num_warmup_steps=FLAGS.warmup_step,
                save_checkpoints_steps=FLAGS.save_checkpoints_steps,
                keep_checkpoint_max=FLAGS.num_keep_checkpoint,
                iterations_per_loop=FLAGS.iterations_per_loop, do_train=FLAGS.do_train,
                do_eval=FLAGS.do_eval, max_eval_steps=10 ** 9,
                mixed_precision=FLAGS.mixed_precision,
                remove_padding=FLAGS.remove_padding, recompute=FLAGS.recompute,
                grad_accum_steps=FLAGS.grad_accum_steps,
                seed=seed, shuffle_window=10000, input_shards=FLAGS.input_shards)
            strategy = get_strategy("tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy,
                                    tpu=FLAGS.tpu or FLAGS.tpu_name)
            exporter = None
            if FLAGS.export_dir and FLAGS.do_train:
                from albert_tf.run_pretraining import make_exporter

                exporter = make_exporter(FLAGS.export_dir, out, FLAGS.spm_model_file,
                                         FLAGS.max_seq_length, source_type="run_race",
                                         options={"max_qa_length": FLAGS.max_qa_length},
                                         do_lower_case=FLAGS.do_lower_case)
            run = TrainingRun(task, cfg, strategy)
            summary = run.run(exporter=exporter)
            model = run.model
        if FLAGS.do_eval and "eval" in summary:
            results = dict(summary["eval"], task="race",
                           global_step=int(summary.get("step") or 0))
            with open(os.path.join(out, "eval_results.json"), "w") as f:
                json.dump(results, f, indent=2)
            print("eval: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in summary["eval"].items()))
        if FLAGS.do_predict:
            if model is None:
                model = task.build_model()
                set_remove_padding(model, FLAGS.remove_padding)
                latest = tf.train.latest_checkpoint(out)
                if not latest:
                    raise CheckpointError(f"--do_predict without --do_train needs a fine-tuned "
                                          f"checkpoint in {out}.")
                tf.train.Checkpoint(model=model).read(latest).expect_partial()
            path, examples = data["test"]
            predictions, _ = predict(model, path, FLAGS.predict_batch_size,
                                     FLAGS.max_seq_length)
            with open(os.path.join(out, "predictions.json"), "w") as f:
                json.dump({e.guid: race.LABELS[int(p)] for e, p in zip(examples, predictions)},
                          f, indent=2)
            if all(e.label is not None for e in examples):
                results = race.race_accuracy(
                    predictions, [e.label for e in examples],
                    [race.LEVELS.index(e.level) for e in examples])
                results["examples"] = len(examples)
                with open(os.path.join(out, "test_results.json"), "w") as f:
                    json.dump(results, f, indent=2)
                print(f"test: accuracy {results['accuracy']:.4f} over {len(examples):,} "
                      "questions")
    except (race.RaceDataError, StrategyError, DataMismatchError, OutputDirMismatchError,
            NonFiniteLossError, CheckpointError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    define_flags()
    sys.exit(app.run(main))


if __name__ == "__main__":
    cli()
