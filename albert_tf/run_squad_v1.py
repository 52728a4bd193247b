r"""Fine-tuning on SQuAD v1.1 through the one training loop.

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
(see `albert_tf.run_classifier`). Rerun the same command to resume. The implementation is
shared with `run_squad_v2` (`albert_tf.commands.squad_runner`).
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

from albert_tf.commands import squad_runner  # noqa: E402
from albert_tf.export.run_exporter import task_exporter  # noqa: E402


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    squad_runner.cli(version=1, task_exporter=task_exporter)


if __name__ == "__main__":
    cli()
