r"""Fine-tuning on SQuAD v2.0 through the one training loop.

Flag names are the official google-research/albert `run_squad_v2.py` ones, with BERT's
`--null_score_diff_threshold` and `--distribution_strategy`/`--tpu` added:

    python -m albert_tf.run_squad_v2 --train_file=train-v2.0.json \
        --predict_file=dev-v2.0.json --albert_config_file=albert_base/albert_config.json \
        --spm_model_file=albert_base/30k-clean.model \
        --init_checkpoint=albert_base/model.ckpt-best --output_dir=runs/squad2 \
        --do_train --do_predict --max_seq_length=384 --doc_stride=128 --train_batch_size=48 \
        --learning_rate=3e-5 --num_train_epochs=2.0 --warmup_proportion=0.1

The official ALBERT v2 model by default (the answer-class head with its beam;
`--v2_head null_score` builds BERT's null-score span head instead). With a --predict_file that
has answers, every saved checkpoint is evaluated and the best by F1 predicts, as the official
runner does. `--do_predict` writes `predictions.json` ("" for no answer), `null_odds.json` (the
official evaluator's `--na-prob-file`) and, when the predict file has answers,
`eval_results.json`: the official runner's `exact`, `f1` and HasAns/NoAns at the best null
threshold found on the file (`null_score_diff_threshold`), with our first-pass threshold
search beside them (`threshold_search`). See `albert_tf.commands.squad_runner`.
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

from albert_tf.commands import squad_runner  # noqa: E402
from albert_tf.export.run_exporter import task_exporter  # noqa: E402


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    squad_runner.cli(version=2, task_exporter=task_exporter)


if __name__ == "__main__":
    cli()
