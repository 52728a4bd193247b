"""Where the console scripts of an install made before the command layer moved to
`albert_tf.commands.cli` point: an editable install (`pip install -e .`) generated its scripts
then, and they import `albert_tf.cli`. Each name here is the same function; reinstalling points
the scripts at `albert_tf.commands.cli` (an entry shim, kept while such installs exist)."""

from albert_tf.commands import cli as _cli

for _script in _cli.COMMANDS:
    _name = _script.removeprefix("albert-").replace("-", "_")
    globals()[_name] = getattr(_cli, _name)
