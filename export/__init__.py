"""SavedModel (TF Serving) export, serving configuration, the serving client and the C++ loader."""

from albert_tf import quiet as _quiet

_quiet.install_for_module_commands()  # `python -m export.…`: TF's start-up lines filtered
