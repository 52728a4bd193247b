"""Fine-tuning on SQuAD v1.1 through the one training loop.

Flag names are the official google-research/albert `run_squad_v1.py` ones (with
`--distribution_strategy`/`--tpu` added):

    python -m albert_tf.run_squad_v1 --train_file=train-v1.1.json \
        --predict_file=dev-v1.1.json --albert_config_file=albert_base/albert_config.json \
        --spm_model_file=albert_base/30k-clean.model \
        --init_checkpoint=albert_base/model.ckpt-best --output_dir=runs/squad \
        --do_train --do_predict --max_seq_length=384 --doc_stride=128 --train_batch_size=48 \
        --learning_rate=5e-5 --num_train_epochs=2.0 --warmup_proportion=0.1

`--train_file` / `--predict_file` take SQuAD JSON files or zips holding one. `--do_predict`
writes `predictions.json` ({question id: answer}, the official format) and
`eval_results.json` (the official v1.1 evaluator's exact match and F1, and the number of
questions) when the predict file has answers. `--init_checkpoint` takes any pretrained source
(see `albert_tf.run_classifier`). Rerun the same command to resume.
"""

import json
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from absl import app, flags  # noqa: E402


def define_flags():
    flags.DEFINE_string("train_file", None, "SQuAD JSON (or zip) to train on.")
    flags.DEFINE_string("predict_file", None, "SQuAD JSON (or zip) to predict and evaluate.")
    flags.DEFINE_string("albert_config_file", None, "Model config JSON (official keys).")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model of the pretrained model.")
    flags.DEFINE_string("vocab_file", None, "Accepted for compatibility.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, features and predictions go here.")
    flags.DEFINE_string("init_checkpoint", None, "Pretrained weights (any source).")
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the text.")
    flags.DEFINE_integer("max_seq_length", 384, "Packed sequence length.")
    flags.DEFINE_integer("doc_stride", 128, "Stride between context windows (pieces).")
    flags.DEFINE_integer("max_query_length", 64, "Question pieces kept.")
    flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
    flags.DEFINE_bool("do_predict", False, "Predict (and evaluate) --predict_file.")
    flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
    flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.")
    flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training features.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps spent warming up.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint interval.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per host call.")
    flags.DEFINE_integer("n_best_size", 20, "Candidates per window in decoding.")
    flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.")
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
    flags.DEFINE_bool("use_tpu", False, "Official alias: --distribution_strategy=tpu.")
    flags.DEFINE_string("tpu_name", None, "Official alias of --tpu.")
    flags.DEFINE_enum("distribution_strategy", "default",
                      ["tpu", "multi_worker_mirrored", "mirrored", "one_device", "default"],
                      "tf.distribute strategy.")
    flags.DEFINE_string("tpu", None, "TPU name, grpc://host:port, or 'local'.")
    flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16"], "Compute dtype.")
    flags.DEFINE_integer("random_seed", 12345, "Seed; -1 draws a fresh one.")


def build_features(path, tokenizer, cfg_flags, is_training, seed=None):
    """(dataset, features, {question id: AlignedContext}) of a SQuAD file."""
    import numpy as np

    from albert_tf import squad_eval
    from albert_tf.squad import align_context, question_features

    dataset = squad_eval.load_dataset(path)
    contexts, aligned, features = {}, {}, []
    for q in squad_eval.questions(dataset):
        if q["context"] not in aligned:
            aligned[q["context"]] = align_context(q["context"], tokenizer)
        contexts[q["id"]] = aligned[q["context"]]
        features += question_features(q, contexts[q["id"]], tokenizer,
                                      cfg_flags.max_seq_length, cfg_flags.doc_stride,
                                      cfg_flags.max_query_length, 1000000 + len(features),
                                      is_training)
    if is_training and seed is not None:
        order = np.random.default_rng([seed, 0x5A0AD]).permutation(len(features))
        features = [features[i] for i in order]
    return dataset, features, contexts


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    for name in ("albert_config_file", "spm_model_file", "output_dir"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required.")
    if not (FLAGS.do_train or FLAGS.do_predict):
        raise app.UsageError("At least one of --do_train and --do_predict.")
    if FLAGS.do_train and not FLAGS.train_file or FLAGS.do_predict and not FLAGS.predict_file:
        raise app.UsageError("--do_train needs --train_file; --do_predict needs --predict_file.")
    from absl import logging

    logging.set_verbosity(logging.WARNING)
    import numpy as np
    import tensorflow as tf

    from albert_tf import squad_eval
    from albert_tf.checkpoints import CheckpointError
    from albert_tf.config import AlbertConfig
    from albert_tf.distribute import StrategyError, get_strategy
    from albert_tf.input_pipeline import DataMismatchError, ordered_dataset
    from albert_tf.squad import SquadTask, predict_answers, squad_schema, write_features
    from albert_tf.tokenization import Tokenizer
    from albert_tf.train_lib import NonFiniteLossError, TrainingConfig, TrainingRun

    seed = None if FLAGS.random_seed == -1 else FLAGS.random_seed
    try:
        config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
        tokenizer = Tokenizer(FLAGS.spm_model_file, FLAGS.do_lower_case)
        os.makedirs(FLAGS.output_dir, exist_ok=True)
        task = SquadTask(config, FLAGS.max_seq_length, FLAGS.n_best_size,
                         FLAGS.max_answer_length)
        model = None
        if FLAGS.do_train:
            _, train_features, _ = build_features(FLAGS.train_file, tokenizer, FLAGS, True,
                                                  seed or 0)
            train_path = os.path.join(FLAGS.output_dir, "train.tfrecord")
            write_features(train_features, train_path, FLAGS.max_seq_length)
            steps = max(1, math.ceil(len(train_features) * FLAGS.num_train_epochs
                                     / FLAGS.train_batch_size))
            print(f"train: {len(train_features):,} features; {steps:,} steps", flush=True)
            cfg = TrainingConfig(
                albert_config=config, input_file=train_path, output_dir=FLAGS.output_dir,
                init_checkpoint=FLAGS.init_checkpoint, max_seq_length=FLAGS.max_seq_length,
                train_batch_size=FLAGS.train_batch_size, optimizer=FLAGS.optimizer,
                learning_rate=FLAGS.learning_rate, num_train_steps=steps,
                num_warmup_steps=int(steps * FLAGS.warmup_proportion),
                save_checkpoints_steps=FLAGS.save_checkpoints_steps,
                keep_checkpoint_max=FLAGS.keep_checkpoint_max,
                iterations_per_loop=FLAGS.iterations_per_loop,
                mixed_precision=FLAGS.mixed_precision, seed=seed)
            strategy = get_strategy("tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy,
                                    tpu=FLAGS.tpu or FLAGS.tpu_name)
            run = TrainingRun(task, cfg, strategy)
            run.run()
            model = run.model
        if FLAGS.do_predict:
            if model is None:
                model = task.build_model()
                latest = tf.train.latest_checkpoint(FLAGS.output_dir)
                if not latest:
                    raise CheckpointError(f"--do_predict without --do_train needs a fine-tuned "
                                          f"checkpoint in {FLAGS.output_dir}.")
                tf.train.Checkpoint(model=model).read(latest).expect_partial()
            dataset, features, contexts = build_features(FLAGS.predict_file, tokenizer, FLAGS,
                                                         False)
            path = os.path.join(FLAGS.output_dir, "predict.tfrecord")
            write_features(features, path, FLAGS.max_seq_length)

            @tf.function
            def logits_of(batch):
                out = model({k: batch[k] for k in task.model_inputs}, training=False)
                return out["start_logits"], out["end_logits"]

            starts, ends = [], []
            for batch in ordered_dataset([path], FLAGS.predict_batch_size,
                                         squad_schema(FLAGS.max_seq_length),
                                         drop_remainder=False):
                s, e = logits_of(batch)
                starts.append(s.numpy())
                ends.append(e.numpy())
            answers, _ = predict_answers(features, np.concatenate(starts), np.concatenate(ends),
                                         contexts, FLAGS.n_best_size, FLAGS.max_answer_length)
            with open(os.path.join(FLAGS.output_dir, "predictions.json"), "w",
                      encoding="utf-8") as f:
                json.dump(answers, f, indent=2, ensure_ascii=False)
            questions = squad_eval.questions(dataset)
            if all(q["answers"] for q in questions):
                results = dict(squad_eval.evaluate_v1(dataset, answers),
                               questions=len(questions), features=len(features))
                with open(os.path.join(FLAGS.output_dir, "eval_results.json"), "w") as f:
                    json.dump(results, f, indent=2)
                print(f"eval: exact_match {results['exact_match']:.2f}, f1 "
                      f"{results['f1']:.2f} over {len(questions):,} questions")
    except (StrategyError, DataMismatchError, NonFiniteLossError, CheckpointError, ValueError,
            FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    define_flags()
    sys.exit(app.run(main))
