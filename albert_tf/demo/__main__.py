"""`python -m albert_tf.demo`: the main job (the package's docstring is its --help)."""

from albert_tf.quiet import entry_point

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import albert_tf.demo  # noqa: E402
from albert_tf.demo.app import cli  # noqa: E402

__doc__ = albert_tf.demo.__doc__  # absl's --help prints the main module's docstring

cli()
