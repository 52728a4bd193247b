"""The README runs as written. Every shell command of README.md (its bash blocks, split at `&&`,
and the commands written inline in its prose and its Commands table) and every Python block is
read from the README itself, then run here at tiny sizes where it can run in a test, or parsed
with the command's own flags (absl: the flags its `cli()` defines, parsed without running
`main`; a command with its own set of flags: its `parse(argv)`), so a renamed or missing flag
fails; the flag fragments
of the prose (`--target tf1`) parse with a command that defines them. A command this file
cannot classify fails the test by name. Also README command 2 in a clone: the tests that need
../shared skip there, and fail when CI requires it."""

import contextlib
import importlib
import importlib.util
import io
import os
import re
import shlex
import sys
import tomllib
import types

import numpy as np
import pytest
import tensorflow as tf
from absl import app, flags

import conftest
from albert_tf.commands import runner
from albert_tf.commands.cli import COMMANDS
from conftest import ROOT, flags_alone
from albert_tf.export import client
from test_text_classifier import _readme_example as classifier_example
from test_text_tagger import _readme_example as tagger_example

with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as _f:
    README = _f.read()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README, re.S)
PROSE = re.sub(r"```.*?```", "", README, flags=re.S)
# Inline code of the prose, line breaks inside a span joined as the Markdown renders them.
SPANS = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", PROSE)]
COMMAND_START = re.compile(r"^((\S*python[\d.]*|\S*pip|docker|tensorflow_model_server|curl|apt"
                           r"|apt-get|sudo|bash)\s|albert-[\w-]+(\s|$))")  # albert-*: scripts


def shell_commands() -> list[str]:
    """Every shell command of the README, in order: each `&&` part of a bash block, each inline
    span that starts as a command does (`python -m` alone names the form, not a command)."""
    commands = []
    for language, body in BLOCKS:
        if language in ("bash", "sh", "shell", "console"):
            body = body.replace("\\\n", " ")
            commands += [part.strip() for line in body.splitlines()
                         for part in line.split("&&") if part.strip()
                         and not part.strip().startswith("#")]
    commands += [span for span in SPANS if COMMAND_START.match(span) and span != "python -m"]
    return commands


def flag_fragments() -> list[str]:
    """The prose's inline flags with their values (`--target tf1`, `--budget_minutes 60`)."""
    return [span for span in SPANS if span.startswith("--")]


def _words(command: str) -> list[str]:
    """The command's arguments as a shell passes them; `$(nproc)` is 2, `$NAME` a placeholder."""
    command = command.replace("$(nproc)", "2")
    command = re.sub(r"\$(\w+)", lambda m: m.group(1).lower(), command)
    return shlex.split(command)


# ---------------------------------------------------------------------------------------------
# A command's absl flags, defined as when it runs alone, parsed without running its main.
class _Parsed(Exception):
    def __init__(self, main, flags_parser):
        super().__init__("app.run")
        self.main, self.flags_parser = main, flags_parser


@contextlib.contextmanager
def _alone():
    """For the block, the global FLAGS holds absl's own flags only, so a command's `cli()`
    defines its flags as in a process of its own; `absl.app.run` stops with `_Parsed` (the
    command's main and flags parser) instead of running; `albert_tf.commands.runner.command` records
    the flags a training command requires (yields them). Afterwards every definition and value
    is as before."""
    needed = []

    def run(main, argv=None, flags_parser=None):
        raise _Parsed(main, flags_parser)

    def command(body, define_flags, required=(), **kwargs):
        needed.extend(required)
        return real_command(body, define_flags, required=required, **kwargs)

    real_command = runner.command
    with flags_alone(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(app, "run", run)
        for module in list(sys.modules.values()):
            if getattr(module, "command", None) is real_command:
                patch.setattr(module, "command", command)
        yield needed


def parse_absl(module_name: str, args: list[str], run=False, complete=None):
    """`python -m module_name args...` parsed by the command's own flags (the flag parser its
    `cli()` hands absl, e.g. create_pretraining_data's, which leaves Beam's flags); fails on a
    flag it does not define, a value it refuses, an argument that is not a flag, or (`complete`;
    default: when `args` are given) a flag its `runner.command` requires missing. `run`: then
    run its main here and return its output; else the names of its flags."""
    argv = [module_name, *args]
    spec = importlib.util.find_spec(module_name)
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    # A module that defines flags at its import runs as a copy, inside `_alone`: importing it
    # here would leave its flags (and their defaults) in this process's FLAGS.
    at_import = re.search(r"^(albert_flags\.define|flags\.DEFINE_\w+)\(", source, re.M)
    module = None if at_import else importlib.import_module(module_name)
    with _alone() as required:
        if module is None:
            copied = {"__name__": module_name, "__package__": spec.parent, "__file__": spec.origin}
            exec(compile(source, spec.origin, "exec"), copied)  # noqa: S102 - as its import
            module = types.SimpleNamespace(**copied)
        if not hasattr(module, "cli"):
            pytest.fail(f"README command not classified by tests/test_readme.py: {module_name} "
                        "has no cli() (add how to run or parse it)")
        with pytest.raises(_Parsed) as parsed:
            module.cli()
        parser = parsed.value.flags_parser
        complete = bool(args) if complete is None else complete
        try:
            rest = parser(argv) if parser else flags.FLAGS(argv)
        except flags.IllegalFlagValueError as e:
            # absl's required flags (mark_flag_as_required): only a complete command has them.
            if complete or not all(re.fullmatch(r"flag --\w+=None: Flag --\w+ must have a "
                                                r"value other than None\.", line)
                                   for line in str(e).splitlines()):
                pytest.fail(f"README: {' '.join(argv)}: {e}")
            rest = [module_name]  # parsed (unknown flags and values fail before validation)
        except (flags.Error, SystemExit) as e:
            pytest.fail(f"README: {' '.join(argv)}: {e}")
        runner_flag = "runner" in flags.FLAGS and flags.FLAGS.runner
        assert rest == [module_name] or runner_flag, f"README: {argv}: not flags: {rest[1:]}"
        for name in required if complete else ():
            assert any(getattr(flags.FLAGS, n) for n in name.split("|")), (
                f"README: {' '.join(argv)} lacks --{name.replace('|', ' or --')}, which "
                f"{module_name} requires")
        defined = set(flags.FLAGS)
        if not run:
            return defined
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = parsed.value.main(argv)
        assert not status, out.getvalue()
        return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Each kind of command: how it is checked.
def _pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def check_pip(words):
    """`pip install [-q] -r FILE... -e . | .[extra]`: the files exist, the extras are declared."""
    extras = _pyproject()["project"].get("optional-dependencies", {})
    assert words[1] == "install", words
    i = 2
    while i < len(words):
        word = words[i]
        if word in ("-r", "--requirement"):
            i += 1
            assert os.path.isfile(os.path.join(ROOT, words[i])), f"README: no {words[i]}"
        elif word.startswith("."):
            extra = re.fullmatch(r"\.(?:\[(\w+)\])?", word)
            assert extra and (extra.group(1) is None or extra.group(1) in extras), word
        else:
            assert word in ("-q", "-e", "--quiet", "--editable"), f"README: pip {word}?"
        i += 1
    return "files and extras exist"


def check_pytest(args, config):
    """`python -m pytest PATH... [-m EXPR]`: the paths exist, the markers are registered."""
    markers = {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}
    i = 0
    while i < len(args):
        if args[i] == "-m":
            i += 1
            words = set(re.findall(r"\w+", args[i])) - {"not", "and", "or"}
            assert words <= markers, f"README: unregistered marker(s) {words - markers}"
        elif args[i] in ("-n", "-k"):
            i += 1
        elif not args[i].startswith("-"):
            assert os.path.exists(os.path.join(ROOT, args[i])), f"README: no {args[i]}"
        i += 1
    return "paths and markers exist"


def check_docker(words):
    """TF Serving's container: the image is the TF Serving release the exports are checked
    against (albert_tf/export/serving_ops_tf<version>.json), the mounted folder is the
    MODEL_NAME's."""
    image = words[-1]
    version = re.fullmatch(r"tensorflow/serving:(\d+\.\d+)\.\d+", image)
    assert version, f"README: docker image {image}"
    assert os.path.exists(os.path.join(ROOT, "albert_tf", "export",
                                       f"serving_ops_tf{version.group(1)}.json"))
    mount = words[words.index("-v") + 1]
    name = words[words.index("-e") + 1].removeprefix("MODEL_NAME=")
    assert mount.endswith(f"/{name}:/models/{name}"), mount
    return "image version and mount checked"


# TF Serving's model_server flags (its main.cc) that a README command may use; TF's flag parser
# takes --name=value only. The binary is not installable here.
TF_SERVING_FLAGS = {"port", "rest_api_port", "model_name", "model_base_path",
                    "model_config_file", "enable_batching", "batching_parameters_file",
                    "xla_cpu_compilation_enabled"}


def check_model_server(words):
    for word in words[1:]:
        name = re.fullmatch(r"--(\w+)=\S+", word)
        assert name and name.group(1) in TF_SERVING_FLAGS, f"README: tensorflow_model_server {word}"
    return "TF Serving flags"


# Commands run here (cheap, no TensorFlow) with what their output must hold.
RUN_HERE = {"albert_tf.params": ["11,683,584", "109,081,344"]}  # ALBERT-base 12M, BERT-base 108M


def check(command, config):
    """What checked the README's `command` (a sentence), or a failure naming it."""
    words = _words(command)
    if words[0] in COMMANDS:  # a console script: its module's command
        words = ["python", "-m", COMMANDS[words[0]], *words[1:]]
    program = os.path.basename(words[0])
    if re.fullmatch(r"python[\d.]*", program) and words[1:3] == ["-m", "venv"]:
        return "the standard library's venv"
    if program == "pip":
        return check_pip(words)
    if program == "bash":
        assert os.path.isfile(os.path.join(ROOT, words[1])), f"README: no {words[1]}"
        return "a script of the repository (tests/test_repo.py: CI runs README command 2)"
    if program == "docker":
        return check_docker(words)
    if program == "tensorflow_model_server":
        return check_model_server(words)
    if re.fullmatch(r"python[\d.]*", program) and words[1] == "-m" and len(words) > 2:
        module, args = words[2], words[3:]
        if module == "pytest":
            return check_pytest(args, config)
        spec = importlib.util.find_spec(module)
        assert spec is not None, f"README: no module {module}"
        with open(spec.origin, encoding="utf-8") as f:
            source = f.read()
        assert "import argparse" not in source, f"{module}: every command takes absl flags"
        if module in OWN_FLAGS:
            if not args:
                return "named; its flags exist"
            try:
                importlib.import_module(module).parse(args)
            except ValueError as e:
                pytest.fail(f"README: {command}: refused by {module}'s flags: {e}")
            return "its own absl flags"
        if module in RUN_HERE:
            out = parse_absl(module, args, run=True)
            for text in RUN_HERE[module]:
                assert text in out, (module, text)
            return "run"
        if module in NOT_ABSL:
            assert not args, f"README: {command}: {NOT_ABSL[module]}"
            return NOT_ABSL[module]
        parse_absl(module, args)
        return "absl flags"
    pytest.fail(f"README command not classified by tests/test_readme.py: {command!r} (add how "
                "to run or parse it)")


# Commands whose absl flags are their own set (`parse(argv)`), not the global FLAGS.
OWN_FLAGS = ("albert_tf.export.client", "albert_tf.export.cc_loader")
# Commands without absl flags, named alone in the README.
NOT_ABSL = {"albert_tf.export.saved_model_cli": "TensorFlow's saved_model_cli, its own arguments",
            "albert_tf.export.ops_check": "no arguments"}


def test_every_shell_command_of_the_readme_runs_or_parses(pytestconfig):
    kinds = {language for language, _ in BLOCKS}
    assert kinds <= {"bash", "python"}, f"README code block(s) {kinds} not classified here"
    commands = shell_commands()
    # The README's two commands, the Commands table and the steps of a real run at least.
    assert len(commands) >= 30 and any("albert_tf.export.client classify" in c for c in commands)
    checked = {command: check(command, pytestconfig) for command in commands}
    assert {"run", "its own absl flags"} <= set(checked.values())


def test_every_flag_the_prose_names_parses_with_a_readme_command():
    """A flag fragment parses with at least one command the README runs (`--target tf1` with
    convert); `--help` is every command's."""
    modules = sorted({w[2] for w in map(_words, shell_commands())
                      if len(w) > 2 and w[1] == "-m" and w[2] not in ("pytest", "venv")})
    absl_modules = [m for m in modules if m not in NOT_ABSL and m not in OWN_FLAGS]
    defined = {m: parse_absl(m, []) for m in absl_modules}
    fragments = [f for f in flag_fragments() if f != "--help"]
    assert len(fragments) >= 15
    for fragment in fragments:
        words = _words(fragment)
        names = {w[2:].split("=")[0] for w in words if w.startswith("--")}
        if any(_own_flags_accept(m, words) for m in OWN_FLAGS if m in modules):
            continue
        names |= {n[2:] for n in names if n.startswith("no")}
        candidates = [m for m in absl_modules if names & defined[m]]
        assert candidates, f"README: {fragment}: no command of the README defines it"
        if len(words) == 1:
            continue  # a flag named alone: defined is what it can say
        errors = []
        for module in candidates:
            try:
                parse_absl(module, words, complete=False)
                break
            except (AssertionError, pytest.fail.Exception) as e:
                errors.append(str(e).splitlines()[0])
        else:
            pytest.fail(f"README: {fragment}: " + "; ".join(errors))


def _own_flags_accept(module: str, words) -> bool:
    """`words` parse as flags of a command with its own set of absl flags (`define_flags`)."""
    from absl import flags

    own = flags.FlagValues()
    importlib.import_module(module).define_flags(own)
    try:
        own(["prog", *words])
    except flags.Error:
        return False
    return True


def test_the_commands_table_names_each_console_script_of_its_command():
    rows = [line for line in PROSE.splitlines() if line.startswith("| `python -m ")]
    assert len(rows) >= 20
    scripts = _pyproject()["project"]["scripts"]
    for row in rows:
        module, script = re.match(r"\| `python -m ([\w.]+)` [^|]*\| (\S+) ", row).groups()
        if script == "-":
            assert module not in COMMANDS.values(), f"README: {module} has a console script"
            continue
        script = script.strip("`")
        assert COMMANDS.get(script) == module and script in scripts, (script, module)


@pytest.mark.slow
def test_python_blocks_run_here_or_in_the_examples_tests():
    """Each ```python block runs: the classifier and tagger examples in
    tests/test_text_classifier.py and tests/test_text_tagger.py (fitted on the bundled SST-2 and
    EWT), the backbone one here, as written (albert-base, random weights): its two pad tokens
    change nothing, the sequence output of the 5 real tokens equals the model's on them alone."""
    python = [body for language, body in BLOCKS if language == "python"]
    others = [b for b in python if b.strip() not in (classifier_example().strip(),
                                                     tagger_example().strip())]
    assert len(python) == 3 and len(others) == 1, "a new Python block: run it here"
    scope = {}
    exec(others[0], scope)  # noqa: S102 - the README's code, as a reader runs it
    out, model, ids = scope["out"], scope["model"], scope["ids"]
    assert out["sequence_output"].shape == (1, 7, 768) and out["pooled_output"].shape == (1, 768)
    assert len(out["hidden_states"]) == 13  # the embeddings and each of the 12 layers
    alone = model({"input_ids": ids[:, :5], "input_mask": tf.ones_like(ids[:, :5]),
                   "segment_ids": tf.zeros_like(ids[:, :5])})
    np.testing.assert_allclose(out["sequence_output"][:, :5], alone["sequence_output"],
                               atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"], alone["pooled_output"], atol=1e-5)
    assert float(np.abs(out["sequence_output"][0, 0] - out["sequence_output"][0, 1]).max()) > 1e-2


def test_python_blocks_import_albert_tf_before_tensorflow():
    """The Python API filters TensorFlow's start-up lines only when albert_tf imports TensorFlow
    first: in each ```python block that imports both, the albert_tf import comes first."""
    for language, body in BLOCKS:
        if language != "python":
            continue
        lines = [line.strip() for line in body.splitlines()]
        ours = [i for i, line in enumerate(lines) if re.match(r"(from|import) albert_tf\b", line)]
        theirs = [i for i, line in enumerate(lines)
                  if re.match(r"(import tensorflow\b|from tensorflow\b)", line)]
        if ours and theirs:
            assert ours[0] < theirs[0], f"import tensorflow before albert_tf in:\n{body}"


def test_the_serving_step_without_a_command_names_the_commands(capsys):
    """The README's serving step once gave no command (`exit 2: the following arguments are
    required: command`): the client now names them and an example, as one line (status 1, as
    every command's usage error)."""
    assert client.main(["--server", "localhost:8501", "--model", "sst2", "--text",
                        "a gripping film"]) == 1
    assert ("error: name a command first, one of predict, fill_mask, classify, regress, "
            "signatures; e.g. python -m albert_tf.export.client classify"
            ) in capsys.readouterr().err
    assert client.main(["clasify", "--model", "sst2"]) == 1
    assert "error: unknown command 'clasify': one of predict," in capsys.readouterr().err
    assert client.main(["classify", "--text", "a"]) == 1
    assert "error: --model is required" in capsys.readouterr().err
    assert client.main(["classify", "--model", "m", "--text", "a", "--max_seq_length", "2"]) == 1
    assert "--max_seq_length must be at least 3" in capsys.readouterr().err  # as its help says
    assert client.main(["classify", "--model", "m", "--text", "a", "--spm_model_file",
                        "/no/such.model", "--max_seq_length", "8"]) == 1
    assert "error: SentencePiece model not found: /no/such.model." in capsys.readouterr().err
    assert client.main(["-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A client for ALBERT models") and "\n  --timeout: Seconds" in out


# ---------------------------------------------------------------------------------------------
# README command 2 in a clone: ../shared absent.
class _Item:
    def __init__(self, *parts):
        self.marker = pytest.mark.needs_shared(*parts).mark

    def iter_markers(self, name):
        return [self.marker] if name == "needs_shared" else []


def test_tests_needing_shared_skip_in_a_clone_and_fail_under_ci(tmp_path, monkeypatch):
    (tmp_path / "data" / "glue").mkdir(parents=True)
    monkeypatch.setattr(conftest, "SHARED_DIR", str(tmp_path))
    monkeypatch.delenv(conftest.REQUIRE_SHARED, raising=False)
    conftest.pytest_runtest_setup(_Item("data/glue"))  # present: runs
    with pytest.raises(pytest.skip.Exception, match=r"needs \.\./shared/data/squad \(the SQuAD "
                                                    r"v1\.1 and v2\.0 dev sets\)"):
        conftest.pytest_runtest_setup(_Item("data/glue", "data/squad"))
    monkeypatch.setenv(conftest.REQUIRE_SHARED, "1")
    with pytest.raises(pytest.fail.Exception, match=r"official_albert .* missing .* "
                                                    r"ALBERT_TF_REQUIRE_SHARED=1"):
        conftest.pytest_runtest_setup(_Item("official_albert"))
    with pytest.raises(pytest.fail.Exception, match=r"needs_shared names \['data/glu'\]"):
        conftest.pytest_runtest_setup(_Item("data/glu"))
    # CI requires it before it runs README command 2.
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert ci.index(f"export {conftest.REQUIRE_SHARED}=1") < ci.index("-m pytest tests")
    assert "[ ! -d ../shared ]" in ci
