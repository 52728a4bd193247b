"""The experiment config: what a command runs with, as data. The one adapter between absl's
command line and the library.

A command's flags (the official names, `albert_tf.commands.flags`) are sorted into four typed
sections:

- `task`: what is learned from what data (task name, input files, decoding settings);
- `model`: the architecture file, pretrained weights, vocabulary, sequence length, seed;
- `trainer`: optimizer, schedule, steps, batch sizes, checkpoints, what the run does;
- `runtime`: where and how it executes (strategy, TPU, cluster, precision, performance).

The config is built once per command, after parsing (`from_flags`), by this module alone: the
library takes an `ExperimentConfig` (or the objects built from it) and never reads absl's
FLAGS. Aliases are resolved here (`--use_tpu --tpu_name=NAME` is `distribution_strategy: tpu`,
`tpu: NAME`; `--random_seed -1` is the seed drawn for the run), so what is written is what ran.

`--config_file FILE` (YAML or JSON, the sections above; every command takes it) gives the flags'
values, read with the YAML 1.2 core schema so that a value means what the same text means on the
command line (`_StrictLoader`), within stated limits of size and alias expansion
(`MAX_CONFIG_BYTES`, `MAX_CONFIG_NODES`, `MAX_CONFIG_CHARS`); a flag given on the command line
beside it wins. A training run writes its effective config to OUTPUT_DIR/config.yaml, and
`--config_file OUTPUT_DIR/config.yaml` (with another --output_dir) repeats the run: the same
weights (tests/test_experiment.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import random
import re
import sys

import yaml
from absl import flags

from albert_tf.commands.flags import CLUSTER, EVAL, FINETUNING, MODEL, PERFORMANCE, RUN, VOCAB
from albert_tf.paths import atomic_write

FLAGS = flags.FLAGS
SECTIONS = ("task", "model", "trainer", "runtime")
CONFIG_NAME = "config.yaml"

# The section of every flag that is not the task's. Names from `albert_tf.commands.flags` groups,
# and the flags one command defines.
_SECTION_OF = {
    **{name: "trainer" for name in RUN + EVAL + FINETUNING + (
        "poly_power", "num_train_steps", "num_warmup_steps", "start_warmup_step",
        "max_eval_steps", "train_step", "warmup_step", "num_train_epochs", "warmup_proportion",
        "num_keep_checkpoint", "shuffle_window", "export_max_seq_length", "masked_lm_budget",
        "threshold_to_export")},
    **{name: "runtime" for name in CLUSTER + PERFORMANCE + (
        "jit_compile", "deterministic", "tpu_connect_timeout")},
    # last: albert_hub_module_handle is also in FINETUNING, and it is the model's source
    **{name: "model" for name in MODEL + VOCAB + (
        "albert_hub_module_handle", "dropout_prob", "dropout_rate", "v2_head")},
}
# Flags that are not part of an experiment: absl's own and the config file itself.
_NOT_SETTINGS = frozenset({"config_file", "flagfile", "undefok", "help", "helpfull",
                           "helpshort", "helpxml", "only_check_args", "op_conversion_fallback_to_"
                           "while_loop", "pdb", "pdb_post_mortem", "run_with_pdb",
                           "run_with_profiling", "profile_file", "use_cprofile_for_profiling"})


class ConfigFileError(ValueError):
    """A --config_file that cannot be used (unreadable, not YAML/JSON, an unknown key, a value
    of the wrong type); the message names the file and the key."""


def command_name(function) -> str:
    """The module of a command's `main` as `python -m` names it (also when it runs as
    __main__)."""
    while isinstance(function, functools.partial):
        function = function.func
    module = getattr(function, "__module__", None) or "__main__"
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    return module


def section_of(name: str) -> str:
    return _SECTION_OF.get(name, "task")


def define_config_file_flag(flag_values=FLAGS) -> None:
    """--config_file, defined for every command by the command layer (`albert_tf.commands.cli`)."""
    if "config_file" not in flag_values:
        flags.DEFINE_string(
            "config_file", None,
            "A YAML or JSON experiment config (sections task, model, trainer, runtime of flag "
            "values; a run's OUTPUT_DIR/config.yaml repeats that run). Flags given beside it "
            "win.", flag_values=flag_values)


def settings_of(flag_values=FLAGS) -> list[str]:
    """The flags that make up this command's experiment: every flag our modules define (the
    command's own and the shared ones), not absl's."""
    names = []
    for module, module_flags in flag_values.flags_by_module_dict().items():
        if module.startswith("absl.") or module.startswith("tensorflow"):
            continue
        names += [f.name for f in module_flags if f.name not in _NOT_SETTINGS]
    return sorted(set(names))


# What a --config_file may be: its size, and its size once YAML's aliases are expanded (every
# node an alias repeats counted again: ten anchors of ten aliases each are ten billion nodes
# from a few hundred bytes). A run's config.yaml is about 2 KB and 150 nodes.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 100_000
MAX_CONFIG_CHARS = 10_000_000


class _Plain(str):
    """A plain (unquoted) YAML number or boolean: its text, as typed, which is what the flag
    parses (the command line's meaning), and `value`, what YAML 1.2 reads it as."""

    def __new__(cls, text, value):
        plain = super().__new__(cls, text)
        plain.value = value
        return plain


def _yaml12_values(value):
    """The YAML 1.2 value of a config file's data (`_Plain` texts replaced by their values)."""
    if isinstance(value, _Plain):
        return value.value
    if isinstance(value, dict):
        return {_yaml12_values(k): _yaml12_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_yaml12_values(v) for v in value]
    return value


_YAML_FLOAT_WORDS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}


# Flags naming one path (besides every --*_dir): a YAML list for them is an error, not the
# comma-joined text (a directory named "a,b").
ONE_PATH_FLAGS = ("init_checkpoint", "albert_config_file", "spm_model_file", "vocab_file",
                  "albert_hub_module_handle")


def _file_value(flag, value):
    """`value` from a config file as the command-line text absl would parse, so a value in a
    file means exactly what it means on the command line: a plain YAML scalar is its text as
    typed (`010` is what `--flag 010` is; `yes` is the text yes); YAML's own `.inf` and `.nan`
    are inf and nan for a float flag; a list is its items joined by commas. JSON's numbers and
    booleans are written as Python writes them."""
    if isinstance(value, _Plain):
        if isinstance(value.value, float) and isinstance(flag.parser, flags.FloatParser):
            return _YAML_FLOAT_WORDS.get(value.lower(), str(value))
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        if (flag.name.endswith("_dir") or flag.name in ONE_PATH_FLAGS) \
                and not isinstance(flag.parser, flags.ListParser):
            raise ValueError(f"--{flag.name} names one path, and the file gives a list of "
                             f"{len(value)}; give one value")
        if any(isinstance(v, (list, tuple, dict)) or v is None for v in value):
            raise ValueError(f"a list of --{flag.name} holds a list, a mapping or null; its "
                             "items are single values")
        return ",".join(_file_value(flag, v) for v in value)
    if isinstance(value, (dict,)):
        raise ValueError(f"a mapping is not a value of --{flag.name}")
    if isinstance(value, float):
        return repr(value)
    return str(value)


class _DuplicateKeyError(ValueError):
    pass


class _LimitError(ValueError):
    pass


def _yaml12_int(text: str) -> int:
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _yaml12_float(text: str) -> float:
    word = text.lower()
    if word.endswith(".inf"):
        return float("-inf") if word.startswith("-") else float("inf")
    if word == ".nan":
        return float("nan")
    return float(text)


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (on libyaml where PyYAML has it: ten times faster, and it refuses
    nesting deeper than 1000) with the YAML 1.2 core schema (PyYAML reads YAML 1.1, where yes, no,
    on and off are booleans, 010 is octal 8 and 1_000 a number): null is ~, null or nothing;
    booleans are true and false (any case of the first letter, or all capitals); numbers are
    decimal (010 is ten), 0o octal and 0x hexadecimal integers, decimal floats, .inf and .nan;
    everything else is a string. No merge keys (<<), timestamps, sets or binary (YAML 1.1
    types). Numbers and booleans keep their text (`_Plain`), which is what the flags parse. A
    key given twice in one mapping is refused (PyYAML keeps the last silently). Composing stops
    at `MAX_CONFIG_NODES` nodes (before aliases, which `_check_expansion` counts)."""

    yaml_implicit_resolvers = {}
    yaml_constructors = {}
    _composed = 0

    def resolve(self, kind, value, implicit):
        self._composed += 1
        if self._composed > MAX_CONFIG_NODES:
            raise _LimitError(f"holds more than {MAX_CONFIG_NODES} nodes, the limit")
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
        mapping = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == "<<" \
                    and not key_node.style:  # plain: None (Python parser) or "" (libyaml)
                raise _DuplicateKeyError(f"the merge key << (line {line}) is YAML 1.1, not "
                                         "read here; write the keys out")
            key = _yaml12_values(self.construct_object(key_node, deep=deep))
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise _DuplicateKeyError(f"the key at line {line} is not a name")
            if key in mapping:
                raise _DuplicateKeyError(f"{key} is given twice (line {line})")
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_yaml_map(self, node):
        data = {}
        yield data
        data.update(self.construct_mapping(node))

    def _plain(self, node, value):
        return _Plain(self.construct_scalar(node), value)

    def construct_yaml12_null(self, node):
        self.construct_scalar(node)
        return None

    def construct_yaml12_bool(self, node):
        return self._plain(node, self.construct_scalar(node).lower() == "true")

    def construct_yaml12_int(self, node):
        return self._plain(node, _yaml12_int(self.construct_scalar(node)))

    def construct_yaml12_float(self, node):
        return self._plain(node, _yaml12_float(self.construct_scalar(node)))


for _tag, _pattern, _first in (
        ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
        ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
        ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
        ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                  r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", list("-+0123456789."))):
    _StrictLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}",
                                        re.compile(f"^(?:{_pattern})$"), _first)
for _tag, _constructor in (
        ("null", _StrictLoader.construct_yaml12_null),
        ("bool", _StrictLoader.construct_yaml12_bool),
        ("int", _StrictLoader.construct_yaml12_int),
        ("float", _StrictLoader.construct_yaml12_float),
        ("str", yaml.SafeLoader.construct_yaml_str),
        ("seq", yaml.SafeLoader.construct_yaml_seq),
        ("map", _StrictLoader.construct_yaml_map)):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _constructor)
_StrictLoader.add_constructor(None, yaml.SafeLoader.construct_undefined)


def _check_expansion(root) -> None:
    """Refuses a composed YAML document that is larger than the limits once its aliases are
    expanded (or that holds itself): counted over the graph of nodes, each node once, so the
    count costs the size of the file, not of the expansion."""
    if isinstance(root, yaml.ScalarNode):
        return
    nodes, chars = {}, {}
    stack, open_ = [(root, False)], set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in nodes:
            continue
        children = ([n for pair in node.value for n in pair]
                    if isinstance(node, yaml.MappingNode) else node.value)
        if children_done:
            open_.discard(key)
            count, length = 1, 0
            for child in children:
                if isinstance(child, yaml.ScalarNode):
                    count, length = count + 1, length + len(child.value)
                else:
                    count, length = count + nodes[id(child)], length + chars[id(child)]
            nodes[key], chars[key] = count, length
            if nodes[key] > MAX_CONFIG_NODES:
                raise _LimitError(f"expands (its aliases repeated) to more than "
                                  f"{MAX_CONFIG_NODES} nodes, the limit")
            if chars[key] > MAX_CONFIG_CHARS:
                raise _LimitError(f"expands (its aliases repeated) to more than "
                                  f"{MAX_CONFIG_CHARS} characters, the limit")
            continue
        if key in open_:
            raise _LimitError(f"holds an alias inside its own anchor (line "
                              f"{node.start_mark.line + 1}), a value without end")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children
                     if not isinstance(c, yaml.ScalarNode) and id(c) not in nodes)


def _load_yaml(text: str):
    """The data of a YAML config file's text (`_StrictLoader`), its expansion checked
    (`_check_expansion`) before anything is built from it."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_expansion(root)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: the problem and where."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if not problem:
        return str(error).splitlines()[0]
    return problem + (f" (line {mark.line + 1}, column {mark.column + 1})" if mark else "")


def _read_config_file(path: str, texts: bool) -> dict:
    """The sections of the YAML or JSON file at `path`; YAML numbers and booleans as their
    text (`_Plain`) if `texts`, else as their values."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigFileError(f"--config_file {path}: cannot read it ({e.strerror or e}).") \
            from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"--config_file {path} is larger than {MAX_CONFIG_BYTES} bytes, "
                              "the limit for a config file; give the flags' values, not data.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"--config_file {path} is not UTF-8 text (byte {e.start}).") \
            from None
    kind = "JSON" if path.endswith(".json") else "YAML"
    try:
        data = (json.loads(text, object_pairs_hook=_json_pairs) if kind == "JSON"
                else _load_yaml(text))
        if not texts:
            data = _yaml12_values(data)
    except _DuplicateKeyError as e:
        raise ConfigFileError(f"--config_file {path}: {e}; give each key once."
                              if "given twice" in str(e) else f"--config_file {path}: {e}.") \
            from None
    except _LimitError as e:
        raise ConfigFileError(f"--config_file {path} {e}; write the values out.") from None
    except (RecursionError, yaml.YAMLError) as e:
        if not isinstance(e, RecursionError) and "nesting depth" not in str(e):
            raise ConfigFileError(f"--config_file {path} is not valid {kind}: "
                                  f"{_yaml_problem(e)}") from None
        raise ConfigFileError(f"--config_file {path} is not a config: its {kind} is nested "
                              "too deeply.") from None
    except ValueError as e:
        raise ConfigFileError(f"--config_file {path} is not valid {kind}: "
                              f"{str(e).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"--config_file {path} must hold a mapping of the sections "
                              f"{', '.join(SECTIONS)}; it holds a {type(data).__name__}.")
    odd = [k for k in data if not isinstance(k, str)]
    odd += [f"{s}.{k}" for s, v in data.items() if isinstance(v, dict)
            for k in v if not isinstance(k, str)]
    if odd:
        raise ConfigFileError(f"--config_file {path}: {odd[0]!r} is not a name; keys are "
                              "section and flag names.")
    return data


def _json_pairs(pairs):
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise _DuplicateKeyError(f"{key} is given twice")
    return dict(pairs)


def read_config_file(path: str) -> dict:
    """The sections of the YAML or JSON file at `path` as {section: {flag: value}}, read with
    the YAML 1.2 core schema (`_StrictLoader`) and within `MAX_CONFIG_BYTES` and
    `MAX_CONFIG_NODES`/`MAX_CONFIG_CHARS` once expanded."""
    return _read_config_file(path, texts=False)


def apply_config_file(path: str, command: str | None = None, flag_values=FLAGS) -> list[str]:
    """Sets the flags named in the config file at `path` (`read_config_file`), except those
    given on the command line (they win); returns the names it set. Every key must be a flag of
    this command in its section; a value is parsed as on the command line (its type and range
    checked); null only for a flag whose default is none. A written config's `given` list
    says which of its values were given explicitly (as on the command line: some commands
    treat a value given differently from the default); in a file without one every value
    counts as given. A file written by another command (`command:` key) is refused."""
    data = _read_config_file(path, texts=True)
    written_by = data.pop("command", None)
    given = data.pop("given", None)
    if given is not None and not (isinstance(given, list)
                                  and all(isinstance(g, str) for g in given)):
        raise ConfigFileError(f"--config_file {path}: given must be a list of flag names.")
    if command and written_by and written_by != command:
        raise ConfigFileError(f"--config_file {path} was written by {written_by}, and this "
                              f"command is {command}: run it with python -m {written_by}.")
    data.pop("albert_config", None)  # informational: the architecture the run had
    unknown_sections = sorted(set(data) - set(SECTIONS))
    if unknown_sections:
        raise ConfigFileError(f"--config_file {path}: unknown section(s) "
                              f"{', '.join(unknown_sections)}; the sections are "
                              f"{', '.join(SECTIONS)}.")
    known = set(settings_of(flag_values))
    updates = {}
    for section in SECTIONS:
        values = data.get(section) or {}
        if not isinstance(values, dict):
            raise ConfigFileError(f"--config_file {path}: section {section} must be a mapping "
                                  f"of flag names to values.")
        for name, value in values.items():
            if name not in known:
                near = difflib.get_close_matches(str(name), sorted(known), n=1)
                raise ConfigFileError(
                    f"--config_file {path}: {section}.{name} is not a flag of this command"
                    + (f" (did you mean {near[0]}?)" if near else "") + ".")
            if section_of(name) != section:
                raise ConfigFileError(f"--config_file {path}: {name} belongs in the "
                                      f"{section_of(name)} section, not {section}.")
            updates[name] = value
    applied = []
    for name, value in updates.items():
        flag = flag_values[name]
        if flag.present:
            continue  # the command line wins
        where = f"--config_file {path}: {section_of(name)}.{name}"
        if value is None and flag.default is not None:
            raise ConfigFileError(f"{where}: null is not a value of this flag (its default is "
                                  f"{flag.default!r}); give a value or leave the key out.")
        try:
            if value is None:
                setattr(flag_values, name, None)
            else:
                flag.parse(_file_value(flag, value))
                flag_values.validate_all_flags()
        except (flags.Error, ValueError) as e:
            hint = (" (a boolean flag takes true or false, as on the command line)"
                    if isinstance(flag, flags.BooleanFlag) else "")
            raise ConfigFileError(f"{where}: {e}{hint}") from None
        flag.present = int(given is None or name in given)
        applied.append(name)
    return applied


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A command's settings in four sections (`SECTIONS`), each {flag name: value}; read them
    by section (`cfg.trainer["learning_rate"]`) or by name (`cfg.learning_rate`, `"x" in cfg`).
    `given` names the settings set explicitly (command line or config file), the rest are the
    command's defaults."""

    command: str
    task: dict
    model: dict
    trainer: dict
    runtime: dict
    given: frozenset = frozenset()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        for section in SECTIONS:
            values = object.__getattribute__(self, section)
            if name in values:
                return values[name]
        raise AttributeError(f"{self.command} has no setting {name!r}")

    def __contains__(self, name) -> bool:
        return any(name in getattr(self, section) for section in SECTIONS)

    def get(self, name, default=None):
        return getattr(self, name) if name in self else default

    def is_given(self, name) -> bool:
        return name in self.given

    def seed(self) -> int | None:
        """The run's seed (`random_seed`; None where the command has none)."""
        return self.get("random_seed")

    def flat(self) -> dict:
        """Every setting by name, whatever its section."""
        return {name: value for section in SECTIONS
                for name, value in getattr(self, section).items()}

    def as_dict(self) -> dict:
        """The config as written: paths made absolute (`_absolute`), so that it can be run
        from any directory; `given`, the settings given explicitly."""
        return {"command": self.command,
                **{section: {name: _absolute(name, value)
                             for name, value in sorted(getattr(self, section).items())}
                   for section in SECTIONS},
                "given": sorted(self.given)}

    def write(self, output_dir: str) -> str:
        """The config as OUTPUT_DIR/config.yaml (atomically); a different config already there
        (an earlier run in the same directory with other settings) is kept as
        config.previous-N.yaml; one that differs in its comment lines only (written by an
        earlier version) is rewritten in place. Returns the path."""
        path = os.path.join(output_dir, CONFIG_NAME)
        text = ("# The effective config of this run (albert_tf.commands.experiment). Repeat it "
                "with\n"
                f"#   python -m {self.command} --config_file {CONFIG_NAME} --output_dir NEW\n"
                + yaml.safe_dump(self.as_dict(), sort_keys=False, default_flow_style=False))
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old = f.read()
            if old == text:
                return path
            if _settings_lines(old) != _settings_lines(text):
                n = 1
                while os.path.exists(os.path.join(output_dir, f"config.previous-{n}.yaml")):
                    n += 1
                os.replace(path, os.path.join(output_dir, f"config.previous-{n}.yaml"))
        with atomic_write(path) as f:
            f.write(text)
        return path


# Settings that name files or directories (comma-separated for the input globs).
_PATH_SETTINGS = frozenset({
    "albert_config_file", "spm_model_file", "vocab_file", "init_checkpoint",
    "albert_hub_module_handle", "model_dir", "input_file", "eval_input_file", "output_dir",
    "export_dir", "data_dir", "cached_dir", "train_file", "dev_file", "test_file",
    "predict_file", "eval_file",
    "train_feature_file", "predict_feature_file", "predict_feature_left_file", "output_file"})


def _absolute(name: str, value):
    """A path setting's value made absolute (each of a comma-separated list; `gs://` and other
    URLs as they are; an init_checkpoint's `:best` suffix kept)."""
    if name not in _PATH_SETTINGS or not isinstance(value, str) or not value:
        return value
    return ",".join(p if "://" in p or not p else os.path.abspath(p)
                    for p in value.split(","))


def _recorded_seed(values: dict, command: str) -> int | None:
    """The seed a `--random_seed -1` run recorded in OUTPUT_DIR/config.yaml (the same command
    rerun to resume draws no new one)."""
    output_dir = values.get("output_dir")
    path = os.path.join(output_dir, CONFIG_NAME) if output_dir else None
    if not path or not os.path.exists(path):
        return None
    try:
        recorded = read_config_file(path)
        seed = recorded["model"]["random_seed"]
    except (ConfigFileError, KeyError, TypeError):
        return None
    return seed if recorded.get("command") == command and isinstance(seed, int) \
        and seed >= 0 else None


def _resolved(values: dict, command: str) -> dict:
    """Official aliases replaced by what they mean, so the config says what ran."""
    if values.get("use_tpu"):
        values["distribution_strategy"] = "tpu"
    if "use_tpu" in values:
        values["use_tpu"] = False
    if values.get("tpu_name") and not values.get("tpu"):
        values["tpu"] = values["tpu_name"]
    if "tpu_name" in values:
        values["tpu_name"] = None
    if values.get("random_seed") == -1:
        # A fresh seed, drawn once per run directory and recorded, so the run can be repeated
        # and the same command resumes it.
        recorded = _recorded_seed(values, command)
        values["random_seed"] = (recorded if recorded is not None
                                 else random.SystemRandom().randrange(2 ** 31))
    return values


def _settings_lines(text: str) -> list:
    """A config.yaml's lines without its comments (the header names the writing module)."""
    return [line for line in text.splitlines() if not line.startswith("#")]


def from_flags(command: str, flag_values=FLAGS) -> ExperimentConfig:
    """The command's config from its parsed flags (after `apply_config_file`)."""
    names = settings_of(flag_values)
    values = _resolved({name: flag_values[name].value for name in names}, command)
    sections = {section: {} for section in SECTIONS}
    for name, value in values.items():
        sections[section_of(name)][name] = list(value) if isinstance(value, list) else value
    given = {name for name in names if flag_values[name].present}
    for alias, meaning in (("use_tpu", "distribution_strategy"), ("tpu_name", "tpu")):
        if alias in given:
            given = (given - {alias}) | {meaning}
    return ExperimentConfig(command=command, given=frozenset(given), **sections)
