"""Fine-tuning on GLUE (cola, mnli, mnli-mm, mrpc, qnli, qqp, rte, sst-2, sts-b, wnli) through
the one training loop, under any tf.distribute strategy.

Flag names are the official google-research/albert `run_classifier.py` ones (with
`--distribution_strategy`/`--tpu` added), so an official command line works with the module
name changed:

    python -m albert_tf.run_classifier --task_name=SST-2 --data_dir=glue/SST-2 \
        --albert_config_file=albert_base/albert_config.json \
        --spm_model_file=albert_base/30k-clean.model \
        --init_checkpoint=albert_base/model.ckpt-best --output_dir=runs/sst2 \
        --do_train --do_eval --do_predict --max_seq_length=128 --train_batch_size=32 \
        --learning_rate=1e-5 --train_step=20935 --warmup_step=1256 --export_dir=exports/sst2

`--init_checkpoint` takes any pretrained source the project reads: an official TF1 checkpoint
or TF-Hub module, a Hugging Face folder, our model directory or `.keras` file, or a pretraining
`--output_dir` (`DIR:best` for its best checkpoint); the backbone is loaded strictly, the
pretraining heads are dropped and reported. Writes `eval_results.json` (each metric and the
number of examples scored), GLUE submission files for `--do_predict`
(`<TASK>.tsv`: index and prediction; `test_results.tsv`: class probabilities, as official), and
with `--export_dir` a SavedModel whose `serving_default` takes raw text. Rerun the same command
to resume.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402
from albert_tf import features as F, glue
from albert_tf.config import AlbertConfig
from albert_tf.run_pretraining import make_exporter
from albert_tf.tokenization import Tokenizer

SUBMISSION_NAMES = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "qqp": "QQP",
                    "sts-b": "STS-B", "mnli": "MNLI-m", "mnli-mm": "MNLI-mm", "qnli": "QNLI",
                    "rte": "RTE", "wnli": "WNLI"}


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    # Official flags.
    flags.DEFINE_string("task_name", None, "GLUE task: cola, mnli, mnli-mm, mrpc, qnli, qqp, "
                        "rte, sst-2, sts-b, wnli.")
    flags.DEFINE_string("data_dir", None, "Directory of the task's original GLUE files.")
    flags.DEFINE_string("albert_config_file", None, "Model config JSON (official keys).")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model of the pretrained model.")
    flags.DEFINE_string("vocab_file", None, "Accepted for compatibility (--spm_model_file).")
    flags.DEFINE_string("output_dir", None, "Checkpoints, metrics and predictions go here.")
    flags.DEFINE_string("cached_dir", None, "Where the feature TFRecords go (default: "
                        "--output_dir).")
    flags.DEFINE_string("init_checkpoint", None, "Pretrained weights (see the module doc).")
    flags.DEFINE_string("albert_hub_module_handle", None, "Accepted for compatibility: pass "
                        "the module directory as --init_checkpoint.")
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the text (the released models: true).")
    flags.DEFINE_integer("max_seq_length", 512, "Packed sequence length.")
    flags.DEFINE_bool("do_train", False, "Fine-tune on the train split.")
    flags.DEFINE_bool("do_eval", False, "Evaluate on the dev split (each checkpoint).")
    flags.DEFINE_bool("do_predict", False, "Predict the test split (GLUE submission files).")
    flags.DEFINE_integer("train_examples", 0, "Fine-tune on the first N examples of the train "
                         "split only (0: all of them): a few-label setting or a learning curve.")
    flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
    flags.DEFINE_integer("eval_batch_size", 8, "Global evaluation batch size.")
    flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.")
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
    flags.DEFINE_integer("train_step", 1000, "Optimizer steps.")
    flags.DEFINE_integer("warmup_step", 0, "Linear warmup steps.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint (and eval) interval.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per host call.")
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer (official: adamw).")
    flags.DEFINE_bool("use_tpu", False, "Official alias: --distribution_strategy=tpu.")
    flags.DEFINE_string("tpu_name", None, "Official alias of --tpu.")
    flags.DEFINE_string("tpu_zone", None, "Accepted for compatibility.")
    flags.DEFINE_string("gcp_project", None, "Accepted for compatibility.")
    flags.DEFINE_string("master", None, "Accepted for compatibility.")
    flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for compatibility (from the TPU).")
    flags.DEFINE_string("export_dir", None, "When training completes, export SavedModels for "
                        "TF Serving: final to EXPORT_DIR/<version>, best (with --do_eval) to "
                        "EXPORT_DIR_best/<version>.")
    # Ours.
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
    flags.DEFINE_float("dropout_rate", 0.1, "Dropout on the pooled output (official 0.1).")
    flags.DEFINE_integer("num_train_files", 8, "Files the training features are written as (consecutive blocks of the seeded order), so that up to this many input pipelines (workers, TPU hosts; --input_shards) can read them.")
    flags.DEFINE_integer("input_shards", 0, "Streams the training records are dealt into "
                         "(0: one per input pipeline, i.e. worker). The data order depends on "
                         "it, not on the hardware: one device with --input_shards 2 trains on "
                         "the batches 2 workers do.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of the head, dropout and data order; "
                         "-1 draws a fresh one.")
    flags.DEFINE_bool("init_from_group0", False, "Official --init_from_group0 fallback.")


def write_features(task, tokenizer, data_dir, cache_dir, max_seq_length, splits, seed,
                   eval_batch_size, predict_batch_size, num_train_files=1, train_examples=0):
    """{split: (TFRecord paths, comma-separated; sidecar; examples)} for the requested splits
    (kept when up to date); the training split in `num_train_files` files, its first
    `train_examples` examples only when that is positive."""
    from albert_tf.classification import write_examples

    written = {}
    for split in splits:
        examples = glue.load_split(task, data_dir, split)
        if split == "train" and train_examples:
            if not 0 < train_examples <= len(examples):
                raise ValueError(f"--train_examples={train_examples}: the train split of "
                                 f"{data_dir} has {len(examples)} examples; give 1 to "
                                 f"{len(examples)}, or 0 for all.")
            examples = examples[:train_examples]
        path = os.path.join(cache_dir, f"{split}.tfrecord")
        meta = write_examples(
            examples, task, tokenizer, max_seq_length, path,
            shuffle_seed=seed if split == "train" else None,
            pad_to_multiple={"train": 1, "dev": eval_batch_size,
                             "test": predict_batch_size}[split],
            num_files=num_train_files if split == "train" else 1)
        written[split] = (",".join(meta["files"]), meta, examples)
        print(f"{split}: {meta['real_examples']:,} examples ({meta['padding_examples']} padding, "
              f"{meta['truncated_examples']} truncated to {max_seq_length}) -> {path}"
              + (f" ({len(meta['files'])} files)" if len(meta["files"]) > 1 else ""),
              flush=True)
    return written


def predict(model, task, path, batch_size, max_seq_length):
    """(label ids or scores, class probabilities or None) of the real examples of `path`."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.classification import IS_REAL_EXAMPLE, classifier_schema
    from albert_tf.input_pipeline import ordered_dataset

    schema = classifier_schema(max_seq_length, task.is_regression)

    @tf.function
    def logits_of(batch):
        return model({k: batch[k] for k in F.BACKBONE_INPUTS}, training=False)["logits"]

    outputs, real = [], []
    for batch in ordered_dataset([path], batch_size, schema):
        outputs.append(tf.cast(logits_of(batch), tf.float32).numpy())
        real.append(batch[IS_REAL_EXAMPLE].numpy()[:, 0] > 0)
    logits = np.concatenate(outputs)[np.concatenate(real)]
    if task.is_regression:
        return logits[:, 0], None
    probabilities = tf.nn.softmax(logits).numpy()
    return probabilities.argmax(-1), probabilities


def write_predictions(output_dir, task, examples, predictions, probabilities):
    """GLUE submission file `<TASK>.tsv` and the official `test_results.tsv`."""
    name = SUBMISSION_NAMES[task.name]
    path = os.path.join(output_dir, f"{name}.tsv")
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for i, value in enumerate(predictions):
            label = f"{float(value):.3f}" if task.is_regression else task.labels[int(value)]
            f.write(f"{i}\t{label}\n")
    if probabilities is not None:
        with open(os.path.join(output_dir, "test_results.tsv"), "w", encoding="utf-8") as f:
            for row in probabilities:
                f.write("\t".join(f"{p:.6f}" for p in row) + "\n")
    assert len(predictions) == len(examples)
    return path


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    for name in ("task_name", "data_dir", "albert_config_file", "spm_model_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required.")
    if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
        raise app.UsageError("At least one of --do_train, --do_eval, --do_predict.")
    import tensorflow as tf
    from absl import logging

    logging.set_verbosity(logging.WARNING)

    from albert_tf.checkpoints import CheckpointError
    from albert_tf.classification import ClassificationTask
    from albert_tf.distribute import StrategyError, get_strategy
    from albert_tf.input_pipeline import DataMismatchError
    from albert_tf.train_lib import (NonFiniteLossError, OutputDirMismatchError, TrainingConfig,
                                     TrainingRun)
    from albert_tf.backbone import set_remove_padding

    seed = None if FLAGS.random_seed == -1 else FLAGS.random_seed
    try:
        task = glue.get_task(FLAGS.task_name)
        config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
        tokenizer = Tokenizer(FLAGS.spm_model_file, FLAGS.do_lower_case)
        if tokenizer.vocab_size != config.vocab_size:
            raise ValueError(f"--spm_model_file has {tokenizer.vocab_size} pieces but the "
                             f"model's vocab_size is {config.vocab_size}.")
        cache_dir = FLAGS.cached_dir or FLAGS.output_dir
        splits = [s for s, on in (("train", FLAGS.do_train), ("dev", FLAGS.do_eval),
                                  ("test", FLAGS.do_predict)) if on]
        data = write_features(task, tokenizer, FLAGS.data_dir, cache_dir, FLAGS.max_seq_length,
                              splits, seed if seed is not None else 0, FLAGS.eval_batch_size,
                              FLAGS.predict_batch_size, FLAGS.num_train_files,
                              FLAGS.train_examples)
        strategy = get_strategy("tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy,
                                tpu=FLAGS.tpu or FLAGS.tpu_name)
        any_file = next(iter(data.values()))[0]
        cfg = TrainingConfig(
            albert_config=config, input_file=data["train"][0] if "train" in data else any_file,
            eval_input_file=data["dev"][0] if "dev" in data else None,
            output_dir=FLAGS.output_dir, init_checkpoint=FLAGS.init_checkpoint,
            init_from_group0=FLAGS.init_from_group0, max_seq_length=FLAGS.max_seq_length,
            train_batch_size=FLAGS.train_batch_size, eval_batch_size=FLAGS.eval_batch_size,
            optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
            num_train_steps=FLAGS.train_step, num_warmup_steps=FLAGS.warmup_step,
            save_checkpoints_steps=FLAGS.save_checkpoints_steps,
            keep_checkpoint_max=FLAGS.keep_checkpoint_max,
            iterations_per_loop=FLAGS.iterations_per_loop, do_train=FLAGS.do_train,
            do_eval=FLAGS.do_eval,
            max_eval_steps=10 ** 9, mixed_precision=FLAGS.mixed_precision,
            remove_padding=FLAGS.remove_padding, recompute=FLAGS.recompute,
            grad_accum_steps=FLAGS.grad_accum_steps, seed=seed,
            shuffle_window=10000, input_shards=FLAGS.input_shards) \
            if (FLAGS.do_train or FLAGS.do_eval) else None
        exporter = None
        if FLAGS.export_dir:
            exporter = make_exporter(FLAGS.export_dir, FLAGS.output_dir, FLAGS.spm_model_file,
                                     FLAGS.max_seq_length, labels=list(task.labels or []) or None,
                                     text_pair=task.b is not None,
                                     source_type="run_classifier")
        classification = ClassificationTask(task, config, FLAGS.max_seq_length,
                                            dropout_rate=FLAGS.dropout_rate)
        summary = {}
        model = None
        if cfg is not None:
            run = TrainingRun(classification, cfg, strategy)
            summary = run.run(exporter=exporter)
            model = run.model
        if FLAGS.do_eval and "eval" in summary:
            results = dict(summary["eval"], task=task.name,
                           global_step=int(summary.get("step") or 0))
            with open(os.path.join(FLAGS.output_dir, "eval_results.json"), "w") as f:
                json.dump(results, f, indent=2)
            print("eval: " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in summary["eval"].items()))
        if FLAGS.do_predict:
            if model is None:
                model = classification.build_model()
                set_remove_padding(model, FLAGS.remove_padding)
                latest = tf.train.latest_checkpoint(FLAGS.output_dir)
                if not latest:
                    raise CheckpointError(f"--do_predict without --do_train needs a fine-tuned "
                                          f"checkpoint in {FLAGS.output_dir}.")
                tf.train.Checkpoint(model=model).read(latest).expect_partial()
            path, _, examples = data["test"]
            predictions, probabilities = predict(model, task, path, FLAGS.predict_batch_size,
                                                 FLAGS.max_seq_length)
            written = write_predictions(FLAGS.output_dir, task, examples, predictions,
                                        probabilities)
            print(f"predictions of {len(examples):,} test examples: {written}")
    except (glue.GlueDataError, StrategyError, DataMismatchError, OutputDirMismatchError,
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
