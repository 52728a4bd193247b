"""Pretraining-data pipeline: corpus preparation, vocabulary training, TFRecord generation."""

from albert_tf import quiet as _quiet  # noqa: E402

_quiet.install_for_module_commands()  # `python -m data.…`: TF's start-up lines filtered
