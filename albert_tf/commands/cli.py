"""Console scripts (`[project.scripts]` in pyproject.toml): each one filters TensorFlow's start-up
lines (`albert_tf.quiet`) before the command's module imports TensorFlow, then runs the same
`cli()` as `python -m <module>`."""

import functools
import importlib
import os
import socket
import sys
import urllib.error

from albert_tf.commands import experiment
from albert_tf import quiet
from albert_tf.commands.flags import check_numbers

# console script -> module whose cli() it runs
COMMANDS = {
    "albert-demo": "albert_tf.demo",
    "albert-params": "albert_tf.params",
    "albert-transitions": "albert_tf.analysis.transitions",
    "albert-fill-mask": "albert_tf.analysis.fill_mask",
    "albert-prepare-corpus": "albert_tf.data.prepare_corpus",
    "albert-train-vocab": "albert_tf.data.train_vocab",
    "albert-create-pretraining-data": "albert_tf.data.create_pretraining_data",
    "albert-pretrain": "albert_tf.run_pretraining",
    "albert-classifier": "albert_tf.run_classifier",
    "albert-squad-v1": "albert_tf.run_squad_v1",
    "albert-squad-v2": "albert_tf.run_squad_v2",
    "albert-race": "albert_tf.run_race",
    "albert-convert": "albert_tf.convert",
    "albert-export": "albert_tf.export.export_saved_model",
    "albert-export-tflite": "albert_tf.export.export_tflite",
    "albert-client": "albert_tf.export.client",
    "albert-serving-loader": "albert_tf.export.cc_loader",
    "albert-saved-model-cli": "albert_tf.export.saved_model_cli",
    "albert-ops-check": "albert_tf.export.ops_check",
}


# absl's help flags; `-h`, which absl does not define, is taken as --help.
HELP_FLAGS = ("--help", "-?", "--helpshort", "--helpfull", "--helpxml")


def run_command(main, define_flags=None, flags_parser=None) -> None:
    """What every command's `cli()` does: define its flags, parse them (absl; `flags_parser`
    replaces the parser, e.g. to pass unknown flags on to Beam), run `main`, exit with its
    status. `--help` (or `-h`) prints the help and exits 0; a usage error (a required flag
    missing) is one line and the hint to --help, status 1, not the whole help."""
    from absl import app

    if define_flags is not None:
        define_flags()
    experiment.define_config_file_flag()
    check_numbers()
    _own_flags_in_help(sys.argv[0])
    help_exits_zero()
    main = functools.partial(_with_config_file, main)
    if flags_parser:  # the command takes the arguments absl leaves (e.g. Beam's flags)
        sys.exit(app.run(functools.partial(_guarded, main),
                         flags_parser=functools.partial(_parse_or_exit, flags_parser)))
    sys.exit(app.run(functools.partial(_guarded, functools.partial(_no_arguments, main))))


def help_exits_zero() -> None:
    """Asking an absl program for help (`--help`, `-h`, `--helpfull`, ...) succeeds: absl exits
    1 after printing the help through its hook `_exit_before_main`, which exits 0 here once the
    help was printed (a flag parsing error before it keeps its status 1). `-h`, which absl does
    not define, is taken as --help where it is not the value of the flag before it."""
    from absl import app, flags

    args = sys.argv[1:]
    for i, arg in enumerate(args):
        if arg == "-h" and not (i and _takes_a_value(args[i - 1], flags.FLAGS)):
            args[i] = "--help"
    sys.argv[1:] = args
    shown = []
    usage = getattr(app.usage, "absl_usage", app.usage)  # absl's own (a command run again in
    # one process wraps it once)

    def usage_then_exit_zero(*args, **kwargs):
        if kwargs.get("writeto_stdout"):  # the help flags' call (a usage error's is not)
            shown.append(True)
        return usage(*args, **kwargs)

    usage_then_exit_zero.absl_usage = usage
    app.usage = usage_then_exit_zero
    app._exit_before_main = lambda status: sys.exit(0 if shown else status)


def _takes_a_value(arg: str, flag_values) -> bool:
    """Whether `arg` is a flag whose value is the next argument (`--name` of a flag that is not
    boolean, without `=value`)."""
    if not arg.startswith("-") or "=" in arg:
        return False
    name = arg.lstrip("-")
    return name in flag_values and not flag_values[name].boolean


def _with_config_file(main, argv):
    """`main(argv)` after --config_file's values are set on the flags the command line left
    (`albert_tf.commands.experiment.apply_config_file`); a file that cannot be used is one error
    line naming the file and the key, exit status 1."""
    from absl import flags

    experiment.refuse_contradicting_aliases()  # the command line's own, before the file's
    path = flags.FLAGS.config_file
    if path:
        try:
            experiment.apply_config_file(path, command=experiment.command_name(main))
        except experiment.ConfigFileError as e:
            print(f"error: {e}", file=sys.stderr)  # one line, not the flags' whole help
            return 1
    return main(argv)


def _parse_or_exit(flags_parser, argv):
    """A command's own flags parser, its flag errors (a value out of range) reported as absl
    reports them for the default parser, one line and status 1, not a traceback."""
    from absl import flags

    try:
        return flags_parser(argv)
    except flags.Error as e:
        print(f"FATAL Flags parsing error: {e}\nPass --helpshort or --helpfull to see help on "
              "flags.", file=sys.stderr)
        sys.exit(1)


def _guarded(main, argv):
    """`main(argv)`; a usage error (absl's UsageError: a required flag missing, an argument
    that is not a flag) is one line and the hint to --help (absl would print the whole help
    above it); an operating-system error (a read-only or full disk, a path blocked by a file,
    a permission) is printed as one line naming the path, exit status 1, not a traceback
    (`ALBERT_TF_VERBOSE=1` shows the traceback)."""
    from absl import app, flags, logging

    if os.environ.get("ALBERT_TF_VERBOSE", "") in ("", "0") and not (
            "verbosity" in flags.FLAGS and flags.FLAGS["verbosity"].present):
        # TF's INFO lines (checkpoints, an export's assets and signatures) drown the progress;
        # absl's own --verbosity (-v), given, is kept
        logging.set_verbosity(logging.WARNING)
    try:
        return main(argv)
    except app.UsageError as e:
        print(f"error: {e}\nRun `{_program()} --help` for the flags.", file=sys.stderr)
        return e.exitcode
    except KeyboardInterrupt:
        if os.environ.get("ALBERT_TF_VERBOSE"):
            raise
        print("\ninterrupted (Ctrl-C); what was written whole is kept: rerun to resume.",
              file=sys.stderr)
        return 130
    except (urllib.error.URLError, socket.gaierror, ConnectionRefusedError,
            ConnectionResetError, ConnectionAbortedError) as e:  # OSErrors, not of a file: a
        # name lookup or a connection (a closed pipe of our own output is not one)
        if os.environ.get("ALBERT_TF_VERBOSE"):
            raise
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        print(f"error: a network request failed: {reason}. Check the addresses given to this "
              "command (--tpu, --tpu_name, --master, gs:// paths) and this machine's network.",
              file=sys.stderr)
        return 1
    except OSError as e:
        if os.environ.get("ALBERT_TF_VERBOSE"):
            raise
        what = e.strerror or str(e)
        if e.filename:
            print(f"error: cannot use {e.filename}: {what}. Check the path and its "
                  "permissions, or choose another.", file=sys.stderr)
        else:
            print(f"error: {what} (while writing this command's outputs). Free space or fix "
                  "the permissions of the output location, or choose another.", file=sys.stderr)
        return 1
    except Exception as e:
        # TensorFlow's file errors (tf.io.gfile on a read-only or missing path) are not
        # OSErrors; they carry the path in their message.
        if os.environ.get("ALBERT_TF_VERBOSE") or type(e).__name__ not in _TF_FILE_ERRORS:
            raise
        message = getattr(e, "message", str(e)).splitlines()[0]
        print(f"error: {message}. Check the path and its permissions, or choose another.",
              file=sys.stderr)
        return 1


def _program() -> str:
    """How the user started this command: `python -m MODULE`, else the script's name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return f"python -m {spec.name.removesuffix('.__main__')}"
    scripts = {module: script for script, module in COMMANDS.items()}
    return scripts.get(sys.argv[0], os.path.basename(sys.argv[0]))  # `_runner` renames argv[0]


# tf.errors raised by file operations (matched by name: TensorFlow is not imported here).
_TF_FILE_ERRORS = ("PermissionDeniedError", "NotFoundError", "AlreadyExistsError",
                   "ResourceExhaustedError", "FailedPreconditionError")


def _no_arguments(main, argv):
    """`main(argv)` of a command that takes flags only: an argument that is not a flag is
    refused, never dropped. An unquoted glob is the usual cause: the shell expands
    `--input_file dir/train-*.tfrecord` into the first file and more arguments."""
    from absl import app

    extra = argv[1:]
    if extra:
        shown = " ".join(extra[:4]) + (f" ... ({len(extra)} in all)" if len(extra) > 4 else "")
        raise app.UsageError(
            f"Unexpected argument(s) {shown}: this command takes flags only. A value goes with "
            "its flag (--flag=value); quote a glob (--input_file 'dir/train-*.tfrecord'), "
            "which the shell otherwise expands into several arguments, or list files "
            "comma-separated.")
    return main(argv)


def _own_flags_in_help(main_module: str) -> None:
    """absl's --help lists the key flags of the main module; flags a command defines through a
    module of ours (`albert_tf.commands.flags.define` attributes them to its caller, e.g. the shared
    SQuAD runner) become the main module's key flags too."""
    from absl import flags

    for module, module_flags in list(flags.FLAGS.flags_by_module_dict().items()):
        if module != main_module and module.split(".")[0] == "albert_tf":
            for flag in module_flags:
                flags.FLAGS.register_key_flag_for_module(main_module, flag)


def _runner(module):
    def run():
        quiet.skip_exit_collection()
        quiet.install()
        mod = importlib.import_module(module)
        # absl's --help lists the flags of the module named by sys.argv[0] and prints the
        # __main__ docstring: here the script is __main__, the flags live in `module`.
        sys.argv[0] = module
        sys.modules["__main__"].__doc__ = mod.__doc__
        return mod.cli()
    run.__doc__ = f"python -m {module}"
    return run


for _script, _module in COMMANDS.items():
    globals()[_script.removeprefix("albert-").replace("-", "_")] = _runner(_module)
