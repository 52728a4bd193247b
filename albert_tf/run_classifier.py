r"""Fine-tuning on GLUE (cola, mnli, mismnli, mrpc, qnli, qqp, rte, sst-2, sts-b, wnli) through
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
with `--export_dir` a SavedModel whose `serving_default` takes raw text (and whose
`official_serving_default` answers the official export's tf.Example requests). Rerun the same
command to resume.

As official, `--export_dir` alone (no --do_train, --do_eval, --do_predict) is an action: it
exports the run in `--output_dir` (its best evaluated checkpoint, else its latest; the official
runner exports `OUTPUT_DIR/model.ckpt-best`), and stops with an error when that directory holds
no fine-tuned checkpoint (`--init_checkpoint` is where fine-tuning starts, never exported).
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import math
import os

from absl import flags  # noqa: E402

from albert_tf.tasks import glue  # noqa: E402
from albert_tf import flags as albert_flags  # noqa: E402
from albert_tf.tasks.classification import ClassificationTask, write_split_features  # noqa: E402
from albert_tf.runner import (command, task_exporter, model_and_tokenizer,  # noqa: E402
                              run_task, training_config)

SUBMISSION_NAMES = {"cola": "CoLA", "sst-2": "SST-2", "mrpc": "MRPC", "qqp": "QQP",
                    "sts-b": "STS-B", "mnli": "MNLI-m", "mismnli": "MNLI-mm", "qnli": "QNLI",
                    "rte": "RTE", "wnli": "WNLI"}


def define_flags():
    """Command-line flags (defined only when run as a program)."""
    albert_flags.define(albert_flags.MODEL, albert_flags.VOCAB, albert_flags.RUN, albert_flags.EVAL,
                        albert_flags.FINETUNING,
                        albert_flags.CLUSTER, albert_flags.PERFORMANCE, "task_name", "data_dir",
                        "train_step", "warmup_step")
    flags.DEFINE_string("cached_dir", None, "Where the feature TFRecords go (default: "
                        "--output_dir).")
    flags.DEFINE_integer("train_examples", 0, "Fine-tune on the first N examples of the train "
                         "split only (0: all of them): a few-label setting or a learning curve.")
    flags.DEFINE_float("dropout_rate", 0.1, "Dropout on the pooled output (official 0.1).")
    flags.DEFINE_float("threshold_to_export", float("nan"), "A decision threshold served with "
                       "the exported classifier's answers (its `threshold` output), as the "
                       "official flag; nan: none.")


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


def run(exp):
    task = glue.get_task(exp.task_name)
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


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(run, define_flags, required=("task_name", "data_dir", "albert_config_file",
                                         "spm_model_file|vocab_file", "output_dir"),
            check=lambda exp: albert_flags.require_an_action(export=True))


if __name__ == "__main__":
    cli()
