"""What `run_squad_v1` and `run_squad_v2` share: the official flags, features, training through
the one loop, evaluation and prediction as the official runners do them, the official files;
with `--export_dir`, a SavedModel that answers raw-text questions the way `--do_predict` does
(`albert_tf.export.serving_tasks.SpanServingModule` / `SquadV2ServingModule`, with this run's
stride, lengths and threshold).

As the official runners: with `--do_train --do_predict` and a --predict_file that has answers,
every saved checkpoint is evaluated on it and the best by `f1` is kept (`best/ckpt-best`, the
official `model.ckpt-best`); predictions.json and eval_results.json come from that checkpoint.
Feature files (--train_feature_file, --predict_feature_file; default OUTPUT_DIR/train.tfrecord,
predict.tfrecord) made from the same inputs and flags are reused; a named one made from others
is an error.

SQuAD v2.0 builds the official ALBERT model by default (`--v2_head answer_class`:
`albert_tf.models.task_models.AlbertSquadV2`, start over the context, the end conditioned on the
start, a beam of `--start_n_top` x `--end_n_top`, an answer-class head with `--dropout_prob`, loss
(start + end) / 2 + 0.5 x answer class, `predict_answers_v2`); its null odds are the smallest
`cls_logits` over a question's windows. `--v2_head null_score` builds BERT's span head instead (the
[CLS] position's start + end logits, the minimum over a question's windows, minus the best span's
score); its answer-class flags are errors, never ignored. Either way eval_results.json holds what
the official `run_squad_v2.py` reports (`squad_eval.official_v2`): the v2.0 evaluator's threshold
search over the null odds, then `exact`, `f1` and HasAns/NoAns of the answers at its best F1
threshold (`null_score_diff_threshold`), scored again; beside them ours, `threshold_search` (the
first pass's `best_exact`/`best_f1`) and `global_step`, the best checkpoint's. predictions.json
holds those answers, or those at --null_score_diff_threshold when the flag is given (their scores
under `at_null_score_diff_threshold`) or when the file has no answers. `null_odds.json` is the
official evaluator's `--na-prob-file`.

The flags are `albert_tf.commands.flags`' groups with SQuAD's defaults; the run is
`albert_tf.commands.runner`'s.
"""

from __future__ import annotations

import functools
import os

import tensorflow as tf
from absl import app

from albert_tf.commands import flags as albert_flags
from albert_tf.training.distribute import tf_config_worker
from albert_tf.tasks.squad import evaluation as squad_eval
from albert_tf.commands.runner import (PRETRAINED, command, model_and_tokenizer,
                                       model_for_prediction, run_task, training_config)
from albert_tf.paths import write_json
from albert_tf.features import sidecar_path
from albert_tf.records import read_cached, shard_paths
from albert_tf.tasks.squad import (SquadTask, SquadV2Task, build_features, features_digest,
                                   predict_answers, predict_answers_v2, write_features)
from albert_tf.tasks.squad.task import V2_BEAM_OUTPUTS


def define_flags(version: int):
    albert_flags.define(albert_flags.MODEL, albert_flags.VOCAB, albert_flags.RUN,
                        albert_flags.FINETUNING, albert_flags.CLUSTER, albert_flags.PERFORMANCE,
                        albert_flags.SQUAD_DECODING, "train_file", "predict_file",
                        max_seq_length=384, notes={"export_dir": (
                            "SQuAD exports one model to EXPORT_DIR: the one that wrote "
                            "predictions.json (the best evaluated checkpoint, else the latest), "
                            "at the null threshold predictions.json was written at.")})
    albert_flags.define("train_feature_file", "predict_feature_file", "predict_feature_left_file",
                        "num_train_epochs", "warmup_proportion")
    if version == 2:
        albert_flags.define("null_score_diff_threshold", "dropout_prob", "v2_head", "start_n_top",
                            "end_n_top", notes={
                                "dropout_prob": "The answer-class head's dropout (official); "
                                                "an error with --v2_head null_score."})


def _digest(exp, path, tokenizer, is_training, pad_to_multiple=1):
    return features_digest(path, tokenizer, exp.max_seq_length, exp.doc_stride,
                           exp.max_query_length, is_training,
                           (exp.seed() or 0) if is_training else None, pad_to_multiple)


def _features(exp, path, tokenizer, is_training):
    return build_features(path, tokenizer, exp.max_seq_length, exp.doc_stride,
                          exp.max_query_length, is_training,
                          (exp.seed() or 0) if is_training else None)


def train_steps(exp, num_questions: int) -> int:
    """Optimizer steps of --num_train_epochs, counted in questions (examples) as the official
    runners count them (`int(len(train_examples) / train_batch_size * num_train_epochs)`), not
    in the windows a long context is cut into; at least 1."""
    return max(1, int(num_questions / exp.train_batch_size * exp.num_train_epochs))


def _written_names(path: str, num_files: int) -> list[str]:
    """The files a feature file `path` is or would be written as that exist: `path`, its
    shards (`shard_paths`, of any count) and their sidecars."""
    root, ext = os.path.splitext(path)
    digits = "[0-9]" * 5
    names = {path, *shard_paths(path, num_files),
             *tf.io.gfile.glob(f"{root}-{digits}-of-{digits}{ext}")}
    names |= {sidecar_path(name) for name in names}
    return sorted(name for name in names if tf.io.gfile.exists(name))


def _feature_file(exp, flag: str, default_name: str, digest: str, num_files: int = 1):
    """(path, sidecar or None) of a feature file, as the official runners treat
    --train_feature_file / --predict_feature_file: a file there made from the same inputs and
    flags (its sidecar's digest) is reused (sidecar returned); none: it is written (None). A
    file named by the flag that was made from other inputs or flags (or not by us), or a file
    at one of the shard or sidecar names it would be written as, is an error: never read as if
    it matched, never overwritten."""
    path = exp.get(flag) or os.path.join(exp.output_dir, default_name)
    cached = read_cached(path, digest, num_files)
    existing = _written_names(path, num_files) if cached is None and exp.get(flag) else []
    if existing:
        raise ValueError(
            f"--{flag}={path}: {existing[0]} exists and was not made from this run's inputs "
            "and flags (the SQuAD file, the vocabulary, --max_seq_length, --doc_stride, "
            "--max_query_length, the seed): remove it to have the features written again, or "
            "name another file.")
    return path, cached


def train(exp, task, tokenizer, config, version, threshold, evaluation=None):
    """Features of --train_file (reused when the feature file was made from the same inputs),
    then the run; with `evaluation` (predict_path, predict features) every saved checkpoint is
    evaluated on them and the best by F1 kept, as the official runners do. Returns (model, which,
    step) of the model that predicts (the best checkpoint's; `runner.model_for_prediction`)."""
    digest = _digest(exp, exp.train_file, tokenizer, True)
    path, cached = _feature_file(exp, "train_feature_file", "train.tfrecord", digest,
                                 exp.num_train_files)
    if cached is None:
        dataset, train_features, _ = _features(exp, exp.train_file, tokenizer, True)
        cached = write_features(train_features, path, exp.max_seq_length,
                                exp.num_train_files, digest=digest,
                                questions=len(squad_eval.questions(dataset)))
    else:
        print(f"train: reusing {path} (made from the same inputs and flags)", flush=True)
    steps = train_steps(exp, cached["questions"])
    print(f"train: {cached['questions']:,} questions in {cached['real_examples']:,} features "
          f"(windows); {steps:,} steps", flush=True)
    eval_settings = {"do_eval": False}
    if evaluation is not None:
        eval_path, batches = evaluation
        eval_settings = {"do_eval": True, "eval_input_file": eval_path,
                         "eval_batch_size": exp.predict_batch_size, "max_eval_steps": batches}
    cfg = training_config(exp, config, input_file=",".join(cached["files"]), num_train_steps=steps,
                          num_warmup_steps=int(steps * exp.warmup_proportion), **eval_settings)
    model, summary = run_task(exp, task, cfg, None,
                              predict=exp.do_predict or bool(exp.export_dir))
    return (model, *summary.get("predicted_by", (None, None)))


def export(exp, task, model, version, threshold, which, step, task_exporter):
    """--export_dir: `model` (the one that predicted: `which`, `step`) as a SavedModel
    answering raw questions with this run's stride, lengths and the null threshold
    predictions.json was written at, so the export answers as predictions.json does
    (`task_exporter`: `albert_tf.export.run_exporter.task_exporter`, from the entry point)."""
    options = {"doc_stride": exp.doc_stride, "max_query_length": exp.max_query_length,
               "max_answer_length": exp.max_answer_length,
               "null_score_diff_threshold": threshold}
    if not isinstance(task, SquadV2Task):
        options["n_best_size"] = exp.n_best_size
    task_exporter(exp, f"run_squad_v{version}", options=options)(model, which, step)


def prediction_features(exp, task, tokenizer):
    """(dataset, features, contexts, path, labelled) of --predict_file: the features written to
    --predict_feature_file (default OUTPUT_DIR/predict.tfrecord), padded to whole batches of
    --predict_batch_size, or reused when made from the same inputs and flags;
    --predict_feature_left_file, when given, gets the host-side features as JSON (the official
    runner pickles them there; JSON cannot run code when read)."""
    dataset, features, contexts = _features(exp, exp.predict_file, tokenizer, False)
    batch = exp.predict_batch_size
    digest = _digest(exp, exp.predict_file, tokenizer, False, batch)
    path, cached = _feature_file(exp, "predict_feature_file", "predict.tfrecord", digest)
    if cached is None:
        write_features(features, path, exp.max_seq_length, digest=digest,
                       pad_to_multiple=batch)
    if exp.predict_feature_left_file:
        write_json(exp.predict_feature_left_file, features)
    qs = squad_eval.questions(dataset)
    labelled = all(q["answers"] for q in qs) if task.version == 1 else \
        any(q["answers"] for q in qs)
    return dataset, features, contexts, path, labelled


def predict(exp, task, model, prepared, version, threshold, best_step=None):
    """predictions.json (null_odds.json for v2) of --predict_file with `model` (the best
    checkpoint's where the run evaluated); eval_results.json with the official runner's
    scores where the file has answers (v2: `squad_eval.official_v2`), with `best_step`, the
    step of the best evaluated checkpoint that `model` is. Returns the null threshold
    predictions.json was written at (v1: None)."""
    out = exp.output_dir
    dataset, features, contexts, path, labelled = prepared
    if isinstance(task, SquadV2Task):
        outputs = task.predict_outputs(model, path, exp.predict_batch_size,
                                       V2_BEAM_OUTPUTS, drop_remainder=False)
        texts, null_odds = predict_answers_v2(features, outputs, contexts,
                                              exp.max_answer_length, None)
    else:
        logits = task.predict_outputs(model, path, exp.predict_batch_size,
                                      ("start_logits", "end_logits"), drop_remainder=False)
        texts, null_odds = predict_answers(features, logits["start_logits"],
                                           logits["end_logits"], contexts,
                                           exp.n_best_size, exp.max_answer_length)
    questions = squad_eval.questions(dataset)
    results = {}
    if version == 1:
        answers = texts
        if labelled:
            results = squad_eval.evaluate_v1(dataset, answers)
    elif labelled:
        results, answers = squad_eval.official_v2(dataset, texts, null_odds)
        if exp.is_given("null_score_diff_threshold"):  # ours: the answers at a given threshold
            answers = squad_eval.answers_at(texts, null_odds, threshold)
            at = squad_eval.evaluate_v2(dataset, answers, null_odds, 1.0)
            results["at_null_score_diff_threshold"] = {
                "threshold": threshold, "exact": at["exact"], "f1": at["f1"]}
    else:
        answers = squad_eval.answers_at(texts, null_odds, threshold)
    write_json(os.path.join(out, "predictions.json"), answers)
    if version == 2:
        write_json(os.path.join(out, "null_odds.json"), null_odds)
    if labelled:
        if best_step is not None:
            results["global_step"] = best_step
        _report(exp, results, len(questions), len(features), version)
    if version == 2 and labelled and not exp.is_given("null_score_diff_threshold"):
        return results["null_score_diff_threshold"]
    return threshold


def _report(exp, results, questions, features, version):
    """eval_results.json and the headline line."""
    results = dict(results, questions=questions, features=features)
    write_json(os.path.join(exp.output_dir, "eval_results.json"), results)
    where = f" (best checkpoint: step {results['global_step']})" if "global_step" in results \
        else ""
    if version == 1:
        print(f"eval: exact_match {results['exact_match']:.2f}, f1 {results['f1']:.2f} over "
              f"{questions:,} questions{where}")
    else:
        print(f"eval: exact {results['exact']:.2f}, f1 {results['f1']:.2f} at "
              f"null_score_diff_threshold {results['null_score_diff_threshold']:.3f} (the "
              f"official run_squad_v2 figures) over {questions:,} questions{where}")


def build_task(exp, config, version, threshold):
    if version == 2 and exp.v2_head == "answer_class":
        return SquadV2Task(config, exp.max_seq_length, exp.max_answer_length, threshold,
                           exp.start_n_top, exp.end_n_top, exp.dropout_prob)
    return SquadTask(config, exp.max_seq_length, exp.n_best_size,
                     exp.max_answer_length, version=version, null_threshold=threshold)


def run(exp, version: int, task_exporter):
    threshold = exp.null_score_diff_threshold if version == 2 else None
    config, tokenizer = model_and_tokenizer(exp)
    if tokenizer.kind != "sentencepiece":
        raise ValueError(WORDPIECE_REFUSED.format(tokenizer.vocabulary_file))
    if exp.max_seq_length <= exp.max_query_length + 3:
        raise ValueError(f"--max_seq_length ({exp.max_seq_length}) must exceed "
                         f"--max_query_length ({exp.max_query_length}) + 3.")
    os.makedirs(exp.output_dir, exist_ok=True)
    task = build_task(exp, config, version, threshold)
    prepared = prediction_features(exp, task, tokenizer) if exp.do_predict else None
    if exp.do_train:
        evaluation = None
        if prepared is not None and prepared[4]:  # labelled: every checkpoint evaluated
            task.evaluation = prepared[:3]
            evaluation = (prepared[3], -(-len(prepared[1]) // exp.predict_batch_size))
        model, which, step = train(exp, task, tokenizer, config, version, threshold, evaluation)
    elif exp.do_predict or exp.export_dir:
        model, which, step = model_for_prediction(exp, task)
    else:
        model = which = step = None
    if exp.do_predict and model is not None:
        threshold = predict(exp, task, model, prepared, version, threshold,
                            step if which == "best" else None)
    if exp.export_dir and model is not None and tf_config_worker()[1]:  # the chief exports
        export(exp, task, model, version, threshold, which, step, task_exporter)


# The official v2 flags of the answer-class head: refused with the null-score head, never
# ignored.
ANSWER_CLASS_FLAGS = ("start_n_top", "end_n_top", "dropout_prob")


def check_flags(exp, version: int):
    # --export_dir alone exports a fine-tuned run, as the official run_squad_v1.py does (its
    # run_squad_v2.py has no --export_dir).
    albert_flags.require_an_action(export=version == 1)
    answer_class = "v2_head" in exp and exp.v2_head == "answer_class"
    given = [name for name in ANSWER_CLASS_FLAGS if name in exp and exp.is_given(name)]
    if given and not answer_class:
        raise app.UsageError(
            f"--{given[0]} sets the official v2 answer-class model (beam search over "
            "--start_n_top x --end_n_top, its --dropout_prob), and --v2_head null_score builds "
            "BERT's null-score head instead. Drop --v2_head null_score for the official "
            "model, or drop the flag.")

    if exp.do_train and not exp.train_file or exp.do_predict and not exp.predict_file:
        raise app.UsageError("--do_train needs --train_file; --do_predict needs --predict_file.")


WORDPIECE_REFUSED = ("SQuAD takes a SentencePiece model (--spm_model_file), as the official "
                     "SQuAD code does; {} is a WordPiece vocabulary, whose pieces this reader "
                     "cannot align to the context's characters.")


def _refuse_a_wordpiece_vocabulary() -> None:
    """--vocab_file without --spm_model_file (a WordPiece vocabulary): refused by name before
    the required flags are asked for."""
    albert_flags.refuse_alone("vocab_file", ("spm_model_file", "init_checkpoint",
                                             "albert_hub_module_handle"), WORDPIECE_REFUSED)


def cli(version: int, task_exporter):
    """`run_squad_v1` (version 1) and `run_squad_v2` (version 2); `task_exporter` makes the
    exporter of --export_dir (the entry points give `albert_tf.export.run_exporter`'s: the
    command layer does not import the serving package)."""
    command(functools.partial(run, version=version, task_exporter=task_exporter),
            functools.partial(define_flags, version),
            required=(f"albert_config_file|{PRETRAINED}", f"spm_model_file|{PRETRAINED}",
                      "output_dir"),
            check=functools.partial(check_flags, version=version),
            before=_refuse_a_wordpiece_vocabulary, name=f"albert_tf.run_squad_v{version}")
