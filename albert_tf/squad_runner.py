"""What `run_squad_v1` and `run_squad_v2` share: the official flags, features, training through
the one loop, prediction, the official files and the official evaluation; with `--export_dir`,
a SavedModel that answers raw-text questions the way `--do_predict` does
(`export.serving.SpanServingModule`, with this run's stride, lengths and threshold).

SQuAD v2.0 uses the span head with a null score (the [CLS] position's start + end logits, the
minimum over a question's windows, as in BERT's `run_squad.py`): a question is answered "" when
its null score exceeds its best span's score by more than `--null_score_diff_threshold`.
`null_odds.json` holds that difference for every question (the official evaluator's
`--na-prob-file`), and `eval_results.json` holds the official v2.0 scores: `exact`, `f1` and
the HasAns/NoAns breakdown of `predictions.json` as written, and `best_exact`/`best_f1` with
their thresholds from the official search over the null odds (`best_f1_thresh`: pass it as
`--null_score_diff_threshold` and predictions.json scores `best_f1`). (The official script run
with `--na-prob-file` also applies its `--na-prob-thresh`, 1.0 by default, on top of the
predictions; ours scores the predictions as written.) The
official ALBERT v2 script's answer-class head (a `cls_logits` classifier with beam search over
start and end, `--start_n_top`/`--end_n_top`) is not built: those flags are accepted and unused.
"""

from __future__ import annotations

import json
import math
import os
import sys

from absl import app, flags
from albert_tf import squad_eval
from albert_tf.config import AlbertConfig
from albert_tf.tokenization import Tokenizer


def define_flags(version: int):
    flags.DEFINE_string("train_file", None, "SQuAD JSON (or zip) to train on.")
    flags.DEFINE_string("predict_file", None, "SQuAD JSON (or zip) to predict and evaluate.")
    flags.DEFINE_string("albert_config_file", None, "Model config JSON (official keys).")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model of the pretrained model.")
    flags.DEFINE_string("vocab_file", None, "Accepted for compatibility.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, features and predictions go here.")
    flags.DEFINE_string("train_feature_file", None, "Training features TFRecord (default: "
                        "OUTPUT_DIR/train.tfrecord).")
    flags.DEFINE_string("predict_feature_file", None, "Prediction features TFRecord (default: "
                        "OUTPUT_DIR/predict.tfrecord).")
    flags.DEFINE_string("predict_feature_left_file", None, "Accepted for compatibility.")
    flags.DEFINE_string("init_checkpoint", None, "Pretrained weights (any source).")
    flags.DEFINE_string("albert_hub_module_handle", None, "Accepted for compatibility: pass "
                        "the module directory as --init_checkpoint.")
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
    flags.DEFINE_integer("num_train_files", 8, "Files the training features are written as (consecutive blocks of the seeded order), so that up to this many input pipelines (workers, TPU hosts; --input_shards) can read them.")
    flags.DEFINE_integer("input_shards", 0, "Streams the training records are dealt into (0: "
                         "one per input pipeline, i.e. worker).")
    flags.DEFINE_string("export_dir", None, "When training completes, export a SavedModel for "
                        "TF Serving (BASE/NAME) whose serving_default takes a question and a "
                        "context as raw text and answers with a span of the context.")
    flags.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
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
    flags.DEFINE_integer("random_seed", 12345, "Seed; -1 draws a fresh one.")
    flags.DEFINE_bool("init_from_group0", False, "Official --init_from_group0 fallback.")
    if version == 2:
        flags.DEFINE_float("null_score_diff_threshold", 0.0, "Answer \"\" when the null score "
                           "minus the best span's score exceeds this (BERT's flag; "
                           "eval_results.json gives the best one as best_f1_thresh).")
        flags.DEFINE_integer("start_n_top", 5, "Accepted for compatibility (answer-class "
                             "head, not built).")
        flags.DEFINE_integer("end_n_top", 5, "Accepted for compatibility.")
        flags.DEFINE_float("dropout_prob", 0.1, "Accepted for compatibility.")


def build_features(path, tokenizer, cfg_flags, is_training, seed=None):
    """(dataset, features, {question id: AlignedContext}) of a SQuAD file; training features in
    a seeded order."""
    import numpy as np

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


def predict_logits(model, task, path, batch_size, max_seq_length):
    """(start logits, end logits) [features, seq] of every feature in `path`, in file order."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.input_pipeline import ordered_dataset
    from albert_tf.squad import squad_schema

    @tf.function
    def logits_of(batch):
        out = model({k: batch[k] for k in task.model_inputs}, training=False)
        return out["start_logits"], out["end_logits"]

    starts, ends = [], []
    for batch in ordered_dataset([path], batch_size, squad_schema(max_seq_length),
                                 drop_remainder=False):
        s, e = logits_of(batch)
        starts.append(s.numpy())
        ends.append(e.numpy())
    return np.concatenate(starts), np.concatenate(ends)


def _write_json(path, value):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
    os.replace(path + ".tmp", path)


def main(version: int):
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
    import tensorflow as tf

    from albert_tf.checkpoints import CheckpointError
    from albert_tf.distribute import StrategyError, get_strategy
    from albert_tf.input_pipeline import DataMismatchError
    from albert_tf.squad import SquadTask, predict_answers, write_features
    from albert_tf.train_lib import (NonFiniteLossError, OutputDirMismatchError, TrainingConfig,
                                     TrainingRun)
    from albert_tf.backbone import set_remove_padding

    seed = None if FLAGS.random_seed == -1 else FLAGS.random_seed
    threshold = FLAGS.null_score_diff_threshold if version == 2 else None
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
        if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
            raise ValueError(f"--max_seq_length ({FLAGS.max_seq_length}) must exceed "
                             f"--max_query_length ({FLAGS.max_query_length}) + 3.")
        os.makedirs(out, exist_ok=True)
        task = SquadTask(config, FLAGS.max_seq_length, FLAGS.n_best_size,
                         FLAGS.max_answer_length, version=version, null_threshold=threshold)
        model = None
        if FLAGS.do_train:
            _, train_features, _ = build_features(FLAGS.train_file, tokenizer, FLAGS, True,
                                                  seed or 0)
            train_path = FLAGS.train_feature_file or os.path.join(out, "train.tfrecord")
            train_path = ",".join(write_features(train_features, train_path,
                                                 FLAGS.max_seq_length,
                                                 FLAGS.num_train_files)["files"])
            steps = max(1, math.ceil(len(train_features) * FLAGS.num_train_epochs
                                     / FLAGS.train_batch_size))
            print(f"train: {len(train_features):,} features; {steps:,} steps", flush=True)
            cfg = TrainingConfig(
                albert_config=config, input_file=train_path, output_dir=out,
                init_checkpoint=FLAGS.init_checkpoint, init_from_group0=FLAGS.init_from_group0,
                max_seq_length=FLAGS.max_seq_length, train_batch_size=FLAGS.train_batch_size,
                optimizer=FLAGS.optimizer, learning_rate=FLAGS.learning_rate,
                num_train_steps=steps, num_warmup_steps=int(steps * FLAGS.warmup_proportion),
                save_checkpoints_steps=FLAGS.save_checkpoints_steps,
                keep_checkpoint_max=FLAGS.keep_checkpoint_max,
                iterations_per_loop=FLAGS.iterations_per_loop,
                mixed_precision=FLAGS.mixed_precision,
                remove_padding=FLAGS.remove_padding, recompute=FLAGS.recompute,
                grad_accum_steps=FLAGS.grad_accum_steps,
                seed=seed, input_shards=FLAGS.input_shards)
            strategy = get_strategy("tpu" if FLAGS.use_tpu else FLAGS.distribution_strategy,
                                    tpu=FLAGS.tpu or FLAGS.tpu_name)
            exporter = None
            if FLAGS.export_dir:
                from albert_tf.run_pretraining import make_exporter

                exporter = make_exporter(
                    FLAGS.export_dir, out, FLAGS.spm_model_file, FLAGS.max_seq_length,
                    source_type=f"run_squad_v{version}", do_lower_case=FLAGS.do_lower_case,
                    options={"doc_stride": FLAGS.doc_stride,
                             "max_query_length": FLAGS.max_query_length,
                             "n_best_size": FLAGS.n_best_size,
                             "max_answer_length": FLAGS.max_answer_length,
                             "null_score_diff_threshold": threshold})
            run = TrainingRun(task, cfg, strategy)
            run.run(exporter=exporter)
            model = run.model
        if FLAGS.do_predict:
            if model is None:
                model = task.build_model()
                set_remove_padding(model, FLAGS.remove_padding)
                latest = tf.train.latest_checkpoint(out)
                if not latest:
                    raise CheckpointError(f"--do_predict without --do_train needs a fine-tuned "
                                          f"checkpoint in {out}.")
                tf.train.Checkpoint(model=model).read(latest).expect_partial()
            dataset, features, contexts = build_features(FLAGS.predict_file, tokenizer, FLAGS,
                                                         False)
            path = FLAGS.predict_feature_file or os.path.join(out, "predict.tfrecord")
            write_features(features, path, FLAGS.max_seq_length)
            start_logits, end_logits = predict_logits(model, task, path,
                                                      FLAGS.predict_batch_size,
                                                      FLAGS.max_seq_length)
            answers, null_odds = predict_answers(features, start_logits, end_logits, contexts,
                                                 FLAGS.n_best_size, FLAGS.max_answer_length,
                                                 null_threshold=threshold)
            _write_json(os.path.join(out, "predictions.json"), answers)
            if version == 2:
                _write_json(os.path.join(out, "null_odds.json"), null_odds)
            questions = squad_eval.questions(dataset)
            labelled = all(q["answers"] for q in questions) if version == 1 else \
                any(q["answers"] for q in questions)
            if labelled:
                scores = (squad_eval.evaluate_v1(dataset, answers) if version == 1 else
                          squad_eval.evaluate_v2(dataset, answers, null_odds, float("inf")))
                results = dict(scores, questions=len(questions), features=len(features))
                _write_json(os.path.join(out, "eval_results.json"), results)
                if version == 1:
                    print(f"eval: exact_match {results['exact_match']:.2f}, f1 "
                          f"{results['f1']:.2f} over {len(questions):,} questions")
                else:
                    print(f"eval: exact {results['exact']:.2f}, f1 {results['f1']:.2f} "
                          f"(threshold {threshold}); best_f1 {results['best_f1']:.2f} at "
                          f"threshold {results['best_f1_thresh']:.3f}; over "
                          f"{len(questions):,} questions")
    except (StrategyError, DataMismatchError, NonFiniteLossError, CheckpointError,
            OutputDirMismatchError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
