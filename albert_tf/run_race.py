r"""Fine-tuning on RACE (multiple-choice reading comprehension) through the one training loop.

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
questions, and the counts, of the best evaluated checkpoint as official; the last evaluation
as `last`); `--do_predict` writes `predictions.json` ({question id: letter}) for
the test split and `test_results.json` when it has answers. `--init_checkpoint` takes any
pretrained source (see `albert_tf.run_classifier`). With `--export_dir`, the fine-tuned model
is exported for TF Serving (`albert_tf.export.serving_tasks.MultipleChoiceServingModule`: raw
article, question and options in, the chosen option out). Rerun the same command to resume.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import os

from absl import app  # noqa: E402

from albert_tf.commands import flags as albert_flags
from albert_tf.tasks import race  # noqa: E402
from albert_tf.commands.runner import (PRETRAINED, command,  # noqa: E402
                                       model_and_tokenizer, run_task, training_config)
from albert_tf.export.run_exporter import task_exporter  # noqa: E402
from albert_tf.paths import write_json  # noqa: E402


def define_flags():
    albert_flags.define(albert_flags.MODEL, albert_flags.VOCAB, albert_flags.RUN, albert_flags.EVAL,
                        albert_flags.FINETUNING,
                        albert_flags.CLUSTER, albert_flags.PERFORMANCE, "data_dir", "task_name",
                        "train_file", "predict_file", "dropout_prob", "max_qa_length",
                        "train_step", "warmup_step", task_name="race", do_train=True,
                        do_eval=True, learning_rate=1e-5, train_step=12000, warmup_step=1000,
                        save_checkpoints_steps=100)
    albert_flags.define("eval_file", "num_keep_checkpoint", "high_only", "middle_only")


def write_split_features(exp, tokenizer, levels):
    """{split: (comma-separated TFRecord paths, questions)} of the requested splits."""
    data = {}
    for split, on, path, batch in (
            ("train", exp.do_train, exp.train_file, 1),
            ("dev", exp.do_eval, exp.eval_file, exp.eval_batch_size),
            ("test", exp.do_predict, exp.predict_file, exp.predict_batch_size)):
        if not on:
            continue
        examples = race.read_split(exp.data_dir, split, levels)
        path = path or os.path.join(exp.output_dir, f"{split}.tfrecord")
        meta = race.write_examples(examples, tokenizer, exp.max_seq_length,
                                   exp.max_qa_length, path,
                                   shuffle_seed=(exp.seed() or 0)
                                   if split == "train" else None,
                                   pad_to_multiple=batch,
                                   num_files=exp.num_train_files if split == "train" else 1)
        data[split] = (",".join(meta["files"]), examples)
        print(f"{split}: {len(examples):,} questions ({meta['levels']['middle']:,} middle, "
              f"{meta['levels']['high']:,} high; {meta['padding_examples']} padding; "
              f"{meta['truncated_examples']} articles cut) -> {path}", flush=True)
    return data


def write_predictions(exp, examples, predictions):
    """predictions.json ({question id: letter}); test_results.json where the split has
    answers."""
    out = exp.output_dir
    write_json(os.path.join(out, "predictions.json"),
               {e.guid: race.LABELS[int(p)] for e, p in zip(examples, predictions)})
    if all(e.label is not None for e in examples):
        results = race.race_accuracy(predictions, [e.label for e in examples],
                                     [race.LEVELS.index(e.level) for e in examples])
        results["examples"] = len(examples)
        write_json(os.path.join(out, "test_results.json"), results)
        print(f"test: accuracy {results['accuracy']:.4f} over {len(examples):,} questions")


def run(exp):
    levels = ("high",) if exp.high_only else ("middle",) if exp.middle_only else race.LEVELS
    config, tokenizer = model_and_tokenizer(exp)
    os.makedirs(exp.output_dir, exist_ok=True)
    data = write_split_features(exp, tokenizer, levels)
    task = race.RaceTask(config, exp.max_seq_length, exp.dropout_prob)
    cfg = None
    if exp.do_train or exp.do_eval:
        any_file = next(iter(data.values()))[0]
        cfg = training_config(exp,
            config, input_file=data["train"][0] if "train" in data else any_file,
            eval_input_file=data["dev"][0] if "dev" in data else None, max_eval_steps=10 ** 9)
    exporter = task_exporter(exp, "run_race", options={"max_qa_length": exp.max_qa_length})
    model, _ = run_task(exp, task, cfg, exporter, predict=exp.do_predict)
    if exp.do_predict and model is not None:
        path, examples = data["test"]
        predictions, _ = task.predict(model, path, exp.predict_batch_size)
        write_predictions(exp, examples, predictions)


def check_flags(exp):
    if exp.task_name.lower() != "race":
        raise app.UsageError(f"--task_name {exp.task_name}: this runner runs race.")
    albert_flags.require_an_action()
    if exp.high_only and exp.middle_only:
        raise app.UsageError("--high_only and --middle_only exclude each other.")


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(run, define_flags, required=("data_dir", f"albert_config_file|{PRETRAINED}",
                                         f"spm_model_file|vocab_file|{PRETRAINED}",
                                         "output_dir"),
            check=check_flags)


if __name__ == "__main__":
    cli()
