"""The README's two commands and CI stay in step; the architecture's rules hold."""

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def test_readme_has_two_commands_and_ci_runs_the_test_one_verbatim():
    blocks = re.findall(r"```bash\n(.*?)```", _read("README.md"), re.S)
    assert len(blocks) == 2
    main_command, test_command = (b.strip() for b in blocks)
    assert main_command.endswith(".venv/bin/python -m albert_tf.demo")
    assert test_command.endswith("python -m pytest tests")
    ci_lines = [line.strip() for line in _read(".ci", "run").splitlines()]
    assert test_command in ci_lines


# ---------------------------------------------------------------------------------------------
# The architecture's rules (docs/architecture.md, BUILD.md), read from the code itself.
PACKAGES = ("albert_tf",)


def _modules(packages=PACKAGES):
    """{dotted name: (path, AST)} of the modules of `packages`."""
    modules = {}
    for package in packages:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    dotted = dotted.removesuffix(".__init__")
                    modules[dotted] = (path, ast.parse(_read(path)))
    return modules


def _own_imports(node, modules):
    """Our modules an import node names."""
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{a.name}" for a in node.names]
        return {n if n in modules else node.module for n in names} & set(modules)
    if isinstance(node, ast.Import):
        return {a.name for a in node.names} & set(modules)
    return set()


def test_the_import_graph_has_no_circle_and_few_imports_inside_functions():
    modules = _modules()
    graph, inside = {}, []
    for name, (path, tree) in modules.items():
        graph[name] = set()
        for node in ast.walk(tree):
            graph[name] |= _own_imports(node, modules) - {name}
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [(name, function.name) for node in ast.walk(function)
                           if _own_imports(node, modules)]
    state = {}

    def visit(name, stack):
        state[name] = "open"
        for target in graph[name]:
            assert state.get(target) != "open", "import circle: " + " -> ".join(
                stack + [name, target])
            if target not in state:
                visit(target, stack + [name])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [])
    assert len(graph) > 80
    assert len(inside) <= 10, inside  # 7 today (docs/architecture.md)


def test_the_library_and_the_command_layer_import_neither_serving_nor_data_generation():
    """`albert_tf.export` (serving) and `albert_tf.data` (data generation) build on the library
    and on the command layer, never the other way round (docs/architecture.md): only the entry
    points (`albert_tf.run_*`), the Keras API (`albert_tf.api`) and the two packages themselves
    import them; the entry points hand the exporter down to the runner."""
    modules = _modules()
    above = ("albert_tf.export", "albert_tf.data", "albert_tf.api", "albert_tf.demo",
             "albert_tf.run_")
    reached = {}
    for name, (_, tree) in modules.items():
        if name.startswith(above):
            continue
        for node in ast.walk(tree):
            for target in _own_imports(node, modules):
                if target.startswith(("albert_tf.export", "albert_tf.data")):
                    reached.setdefault(name, set()).add(target)
    assert reached == {}
    assert "albert_tf.export.run_exporter" in modules and "albert_tf.commands.runner" in modules


def test_at_most_twelve_modules_directly_in_the_package_and_no_importlib_below_it():
    """Issue 60: the folders show the layers; directly in albert_tf/ stay at most 12 modules
    besides the run_* entry points and __init__/__main__. importlib only where a name is loaded
    on first use (the package's lazy exports) and in the console scripts' dispatcher."""
    flat = sorted(f for f in os.listdir(os.path.join(ROOT, "albert_tf"))
                  if f.endswith(".py") and not f.startswith(("run_", "__")))
    assert len(flat) <= 12, flat
    users = sorted(name for name, (path, tree) in _modules().items()
                   if any(isinstance(n, (ast.Import, ast.ImportFrom)) and "importlib" in (
                       [a.name for a in n.names] if isinstance(n, ast.Import)
                       else [n.module or ""]) for n in ast.walk(tree)))
    assert users == ["albert_tf", "albert_tf.commands.cli"]


def test_no_function_longer_than_80_lines_and_no_class_longer_than_250():
    """In the packages, the benches and the tools (issue 60: a longer one holds two jobs)."""
    trees = [(name, tree) for name, (_, tree) in _modules(PACKAGES + ("bench", "tools")).items()]
    long = [(name, f.name, f.end_lineno - f.lineno + 1) for name, tree in trees
            for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.end_lineno - f.lineno + 1 > 80]
    large = [(name, c.name, c.end_lineno - c.lineno + 1) for name, tree in trees
             for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
             and c.end_lineno - c.lineno + 1 > 250]
    assert long == [] and large == []
    assert len(trees) > 120


def test_each_flag_is_defined_in_one_file():
    """A setting's flag is made from its definition (albert_tf/configs/definitions.py, SPECS);
    a command's own switches are in its module; no name twice. A command with its own set of flags (the client's `flag_values`,
    apart from absl's global FLAGS) is its own namespace."""
    from albert_tf.commands import flags as albert_flags

    defined = {}
    for name, (path, tree) in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr.startswith("DEFINE_") and node.args and \
                    isinstance(node.args[0], ast.Constant) and \
                    not any(k.arg in (None, "flag_values") for k in node.keywords):
                defined.setdefault(node.args[0].value, set()).add(name)
    for flag in albert_flags.SPECS:
        defined.setdefault(flag, set()).add("albert_tf.commands.flags")
    twice = {flag: sorted(where) for flag, where in defined.items() if len(where) > 1}
    assert twice == {}
    assert len(albert_flags.SPECS) >= 50 and len(defined) >= 70


# Modules that load without TensorFlow (seconds per process): the data workers, the console
# scripts' dispatcher (it filters TensorFlow's start-up lines before the command imports it),
# `albert_tf.params` (counts without building), the client, and the registry and weight names
# (a package's __init__ that imported every head made them load TensorFlow).
LIGHT = ("albert_tf", "albert_tf.config", "albert_tf.tokenization", "albert_tf.features",
         "albert_tf.records", "albert_tf.paths", "albert_tf.packing", "albert_tf.ownership",
         "albert_tf.quiet", "albert_tf.training.progress", "albert_tf.models",
         "albert_tf.models.registry", "albert_tf.models.weight_names", "albert_tf.commands.cli",
         "albert_tf.commands.flags", "albert_tf.commands.experiment", "albert_tf.cli",
         "albert_tf.configs", "albert_tf.configs.yaml_file", "albert_tf.configs.definitions",
         "albert_tf.params", "albert_tf.tasks.glue", "albert_tf.data.generator",
         "albert_tf.data.prepare_corpus", "albert_tf.data.train_vocab", "albert_tf.export.client")


def test_light_modules_load_without_tensorflow():
    code = ("import importlib, sys\n"
            f"for name in {LIGHT!r}:\n"
            "    importlib.import_module(name)\n"
            "    assert 'tensorflow' not in sys.modules, name\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_earlier_module_paths_of_the_commands_still_run_from_a_checkout():
    """`python -m data.X` / `python -m export.X` (the commands' paths before they moved into
    albert_tf) run `albert_tf.data.X` / `albert_tf.export.X` from a checkout; the shims are
    not installed (tests/test_cli.py) and hold nothing else."""
    shims = {}
    for package in ("data", "export"):
        for name in sorted(os.listdir(os.path.join(ROOT, package))):
            if name.endswith(".py") and name != "__init__.py":
                shims[f"{package}.{name[:-3]}"] = _read(package, name)
    moved = {name for name in shims
             if os.path.exists(os.path.join(ROOT, "albert_tf", *name.split(".")) + ".py")}
    assert len(shims) == 10 and moved == set(shims)
    for name, text in shims.items():
        assert f'runpy.run_module("albert_tf.{name}", run_name="__main__", alter_sys=True)' \
            in text, name
    for module, first_line in (("data.train_vocab", "Train an ALBERT SentencePiece vocabulary"),
                               ("export.client", "A client for ALBERT models served by")):
        proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stdout.lstrip().startswith(first_line), \
            proc.stdout[:300] + proc.stderr[-1000:]
