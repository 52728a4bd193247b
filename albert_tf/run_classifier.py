r"""Fine-tuning on GLUE (cola, mnli, mismnli, mrpc, qnli, qqp, rte, sst-2, sts-b, wnli), or on
your own CSV, TSV or JSON Lines files (`--task_name custom`), through the one training loop,
under any tf.distribute strategy.

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
number of examples scored, of the best evaluated checkpoint, as the official runner reports its
`model.ckpt-best`; the evaluation just run as `last`), GLUE submission files for `--do_predict`
(`<TASK>.tsv`: index and prediction; `test_results.tsv`: class probabilities, as official), and
with `--export_dir` a SavedModel whose `serving_default` takes raw text (and whose
`official_serving_default` answers the official export's tf.Example requests). Rerun the same
command to resume.

Your own data: `--task_name custom` reads `--train_file`, `--dev_file` and `--test_file`
(`.csv`, `.tsv` or `.jsonl`, by extension; `albert_tf.tasks.tables`), the text from
`--text_a_column` (and `--text_b_column` for pairs), the label from `--label_column`:

    python -m albert_tf.run_classifier --task_name custom --train_file train.csv \
        --dev_file dev.csv --test_file test.csv --text_a_column text --label_column topic \
        --init_checkpoint albert_base --output_dir runs/topics --do_train --do_eval \
        --do_predict --train_step 2000 --warmup_step 200 --export_dir exports/topics

The labels are the training file's, sorted (integers in numeric order), kept as
OUTPUT_DIR/labels.json (so a later `--do_eval`, `--do_predict` or `--export_dir` run without
`--train_file` uses the same ids); `--num_labels 1` makes the label a number (regression); a
training file of scores (every label a number, some not integers) needs `--num_labels` (1, or
their count to keep them as classes). A later run in the same --output_dir takes the columns and
`--num_labels` the training run recorded (its config.yaml) where not given, and refuses others.
`eval_results.json` holds accuracy (two labels: also F1 of the second label and Matthews
correlation; regression: Pearson and Spearman); `--do_predict` writes `predictions.jsonl` (per
test row: its index, texts, the predicted label's name and each label's probability); the export
answers the label names (`classify`). A file that cannot be used is an error naming the file,
line and column.

As official, `--export_dir` alone (no --do_train, --do_eval, --do_predict) is an action: it
exports the run in `--output_dir` (its best evaluated checkpoint, else its latest; the official
runner exports `OUTPUT_DIR/model.ckpt-best`), and stops with an error when that directory holds
no fine-tuned checkpoint (`--init_checkpoint` is where fine-tuning starts, never exported).
What the run recorded is taken where not given (the official runner needs it all again): its
model config, vocabulary, casing, `--max_seq_length`, task and columns, so
`--output_dir runs/topics --export_dir exports/topics` is the whole command.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402

from absl import app  # noqa: E402

from albert_tf.tasks import glue  # noqa: E402
from albert_tf.commands import experiment, flags as albert_flags  # noqa: E402
from albert_tf.tasks.classification import ClassificationTask, write_split_features  # noqa: E402
from albert_tf.commands.runner import (LABELS_FILE, PRETRAINED, command,  # noqa: E402
                                       export_alone_takes_the_run, model_and_tokenizer, run_labels,
                                       run_task, training_config)
from albert_tf.export.run_exporter import task_exporter  # noqa: E402

COMMAND = "albert_tf.run_classifier"  # as its config.yaml names it
SUBMISSION_NAMES = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "qqp": "QQP",
                    "sts-b": "STS-B", "mnli": "MNLI-m", "mismnli": "MNLI-mm", "qnli": "QNLI",
                    "rte": "RTE", "wnli": "WNLI"}


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    albert_flags.define(albert_flags.MODEL, albert_flags.VOCAB, albert_flags.RUN, albert_flags.EVAL,
                        albert_flags.FINETUNING,
                        albert_flags.CLUSTER, albert_flags.PERFORMANCE, "task_name", "data_dir",
                        "train_step", "warmup_step", "train_file", "dev_file", "test_file",
                        notes={"task_name": "A GLUE task, or custom: your own files "
                                            "(--train_file, --dev_file, --test_file).",
                               "data_dir": "GLUE tasks (not custom).",
                               "train_file": "run_classifier --task_name custom: a .csv, .tsv "
                                             "or .jsonl file (its labels are the model's)."})
    albert_flags.define("text_a_column", "text_b_column", "label_column", "num_labels",
                        "cached_dir", "train_examples", "dropout_rate", "threshold_to_export")


def write_predictions(output_dir, task, examples, predictions, probabilities):
    """GLUE submission file `<TASK>.tsv` and the official `test_results.tsv`; your own data's
    `predictions.jsonl` (`write_custom_predictions`)."""
    if glue.is_custom(task.name):
        return write_custom_predictions(output_dir, task, examples, predictions, probabilities)
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


PREDICTIONS_FILE = "predictions.jsonl"


def write_custom_predictions(output_dir, task, examples, predictions, probabilities):
    """OUTPUT_DIR/predictions.jsonl: per test example (in the file's order) its `index`, texts
    (`text_a`, `text_b` for pairs), the `prediction` (the label's name; regression: the
    number) and, for classification, `probabilities` by label name."""
    path = os.path.join(output_dir, PREDICTIONS_FILE)
    assert len(predictions) == len(examples)
    with open(path, "w", encoding="utf-8") as f:
        for i, (example, value) in enumerate(zip(examples, predictions)):
            row = {"index": i, "text_a": example.text_a}
            if example.text_b is not None:
                row["text_b"] = example.text_b
            if task.is_regression:
                row["prediction"] = float(value)
            else:
                row["prediction"] = task.labels[int(value)]
                row["probabilities"] = {name: round(float(p), 6)
                                        for name, p in zip(task.labels, probabilities[i])}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


# The settings of a custom run that make its model what it is: a later run in the same
# --output_dir reads them as the training run recorded them.
RECORDED = ("text_a_column", "text_b_column", "label_column", "num_labels")


def custom_task(exp) -> glue.GlueTask:
    """`--task_name custom`: the task of your own files (`glue.custom_task`), its labels the
    training file's (`glue.label_set`), kept in OUTPUT_DIR/labels.json (`run_labels`): a run
    without --do_train reads them there. The columns and --num_labels are `task_settings`'s
    (those the training run in --output_dir recorded, where not given). A training file of
    scores (every label a number, some not integers) needs --num_labels: 1 (regression), or
    their count to train them as classes."""
    files = {"train": exp.train_file, "dev": exp.dev_file, "test": exp.test_file}
    for action, split in (("do_train", "train"), ("do_eval", "dev"), ("do_predict", "test")):
        if exp.get(action) and not files[split]:
            raise ValueError(f"--task_name custom --{action} needs --{split}_file (a .csv, "
                             ".tsv or .jsonl file).")
    settings = task_settings(exp)
    a, b, label = (settings[name] for name in RECORDED[:3])
    num_labels = settings["num_labels"]
    if num_labels == 1:
        return glue.custom_task(None, a, b, label, files)
    trained = None
    if exp.do_train:
        trained = glue.label_set(glue.read_table_examples(exp.train_file, a, b, label, "train"))
        scores = glue.non_integer_numbers(trained)
        if scores and not num_labels:
            shown = ", ".join(repr(s) for s in scores[:3]) + (", ..." if len(scores) > 3 else "")
            raise ValueError(f"--train_file {exp.train_file}: every label is a number, and "
                             f"{len(scores)} of the {len(trained)} distinct labels are not "
                             f"integers ({shown}): for a number to predict (regression) give "
                             f"--num_labels 1; to train them as {len(trained)} classes, give "
                             f"--num_labels {len(trained)}.")
    elif not os.path.exists(os.path.join(exp.output_dir, LABELS_FILE)):
        raise ValueError(f"No labels: {exp.output_dir} holds no {LABELS_FILE} (a "
                         "classification training run writes it; a regression run, "
                         f"--num_labels 1, writes none) and no {experiment.CONFIG_NAME} of a "
                         "training run: give --train_file with --do_train, --num_labels 1 for "
                         "regression, or the --output_dir of a training run.")
    labels = run_labels(exp.output_dir, trained, exp.train_file)
    if num_labels and num_labels != len(labels):
        raise ValueError(f"--num_labels {num_labels}, and the training file has "
                         f"{len(labels)} labels {labels}: drop --num_labels (the labels are "
                         "the training file's), or fix the file.")
    return glue.custom_task(labels, a, b, label, files)


def recorded_task(output_dir: str) -> tuple[dict, str]:
    """(the task settings, the path) of the custom training run recorded in `output_dir`
    (its config.yaml); ({}, path) where there is none (or it is not a custom run's)."""
    path = os.path.join(output_dir, experiment.CONFIG_NAME)
    if not os.path.exists(path):
        return {}, path
    recorded = experiment.read_config_file(path)
    task = recorded.get("task") or {}
    if recorded.get("command") != COMMAND or not glue.is_custom(str(task.get("task_name"))):
        return {}, path
    return task, path


def _shown(name, value) -> str:
    if value is None:
        return "none"
    if name == "num_labels":
        return {0: "0 (the training file's labels)", 1: "1 (regression)"}.get(value, str(value))
    return repr(value)


def task_settings(exp) -> dict:
    """The `RECORDED` settings of this run: each as given (command line or --config_file), else
    as the training run in --output_dir recorded it (its config.yaml: a pair-trained model is
    evaluated, predicted and exported on pairs, a regression run stays one), else the flag's
    default. One given otherwise than recorded is an error (the model reads what it was
    trained on); --num_labels N (> 1) agrees with a recorded 0 (labels.json checks the count)."""
    recorded, path = recorded_task(exp.output_dir)
    settings = {}
    for name in RECORDED:
        value = exp.get(name)
        if name not in recorded:
            settings[name] = value
            continue
        kept = recorded[name]
        given = exp.is_given(name) and not (name == "num_labels" and value == 0)
        if not given:
            settings[name] = kept
            continue
        agree = value == kept or (name == "num_labels" and kept == 0 and value > 1)
        if not agree:
            raise ValueError(f"--{name} {_shown(name, value)}, and the run in {exp.output_dir} "
                             f"was trained with --{name} {_shown(name, kept)} ({path}): a model "
                             f"is used as it was trained; drop --{name} (the recorded one is "
                             "used; rename a file's column to match), or give another "
                             "--output_dir.")
        settings[name] = value
    return settings


def run(exp):
    task = custom_task(exp) if glue.is_custom(exp.task_name) else glue.get_task(exp.task_name)
    config, tokenizer = model_and_tokenizer(exp)
    splits = [s for s, on in (("train", exp.do_train), ("dev", exp.do_eval),
                              ("test", exp.do_predict)) if on]
    data = write_split_features(task, tokenizer, exp.data_dir,
                                exp.cached_dir or exp.output_dir, exp.max_seq_length,
                                splits, exp.seed() or 0, exp.eval_batch_size,
                                exp.predict_batch_size, exp.num_train_files,
                                exp.train_examples)
    classification = ClassificationTask(task, config, exp.max_seq_length,
                                        dropout_rate=exp.dropout_rate)
    cfg = None
    if exp.do_train or exp.do_eval:
        any_file = next(iter(data.values()))[0]
        cfg = training_config(exp, config,
                              input_file=data["train"][0] if "train" in data else any_file,
                              eval_input_file=data["dev"][0] if "dev" in data else None,
                              max_eval_steps=10 ** 9)
    threshold = None if math.isnan(exp.threshold_to_export) else exp.threshold_to_export
    exporter = task_exporter(exp, "run_classifier", labels=list(task.labels or []) or None,
                                   text_pair=task.b is not None, threshold=threshold)
    model, _ = run_task(exp, classification, cfg, exporter, predict=exp.do_predict)
    if exp.do_predict and model is not None:
        path, _, examples = data["test"]
        predictions, probabilities = classification.predict(model, path,
                                                            exp.predict_batch_size)
        written = write_predictions(exp.output_dir, task, examples, predictions,
                                    probabilities)
        print(f"predictions of {len(examples):,} test examples: {written}")


def check(exp):
    """What the command line must give beyond the required flags (absl's UsageError)."""
    albert_flags.require_an_action(export=True)
    if not glue.is_custom(exp.task_name):
        try:
            glue.get_task(exp.task_name)  # an unknown name first: "--data_dir is required" misleads
        except ValueError as e:
            raise app.UsageError(str(e)) from None
    if not glue.is_custom(exp.task_name) and not exp.data_dir:
        raise app.UsageError(f"--data_dir is required for the GLUE task {exp.task_name} "
                             "(--task_name custom reads --train_file, --dev_file, --test_file).")


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(run, define_flags, required=("task_name", f"albert_config_file|{PRETRAINED}",
                                         f"spm_model_file|vocab_file|{PRETRAINED}",
                                         "output_dir"),
            check=check, before=lambda: export_alone_takes_the_run(
                COMMAND, ("task_name", "data_dir", "threshold_to_export") + RECORDED,
                for_action={"do_eval": ("dev_file",), "do_predict": ("test_file",)}))


if __name__ == "__main__":
    cli()
