r"""`saved_model_cli` with tensorflow-text's ops registered, so it can show and run exports whose
graphs tokenize in-graph:

    python -m albert_tf.export.saved_model_cli show --dir exports/albert/1 --all
    python -m albert_tf.export.saved_model_cli run --dir exports/albert/1 --tag_set serve \
        --signature_def serving_default --input_exprs 'text=["The capital of France is [MASK]."]'
"""

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import sys

from albert_tf.commands.cli import help_exits_zero


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    import tensorflow_text  # noqa: F401 - registers SentencePiece and normalization ops
    from tensorflow.python.tools import saved_model_cli

    sys.argv[0] = "saved_model_cli"
    help_exits_zero()
    sys.exit(saved_model_cli.main())


if __name__ == "__main__":
    cli()
