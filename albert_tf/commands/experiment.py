"""The experiment config: what a command runs with, as data. The one adapter between absl's
command line and the library.

A command's flags (the official names, `albert_tf.commands.flags`) are the typed settings of
`albert_tf.configs.definitions`, in four sections:

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
command line (`albert_tf.configs.yaml_file`), within stated limits of size and alias
expansion; a flag given on the command line
beside it wins. A training run writes its effective config to OUTPUT_DIR/config.yaml, and
`--config_file OUTPUT_DIR/config.yaml` (with another --output_dir) repeats the run: the same
weights (tests/test_experiment.py).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import os
import random
import sys

import yaml
from absl import flags

from albert_tf.commands.flags import range_problem
from albert_tf.configs import definitions
from albert_tf.configs.definitions import section_of
from albert_tf.configs.yaml_file import (CONFIG_NAME, SECTIONS, ConfigFileError, Plain,
                                         read_config_file, read_config_texts)
from albert_tf.paths import atomic_write

FLAGS = flags.FLAGS

# Flags that are not part of an experiment: absl's own and the config file itself.
_NOT_SETTINGS = frozenset({"config_file", "flagfile", "undefok", "help", "helpfull",
                           "helpshort", "helpxml", "only_check_args", "op_conversion_fallback_to_"
                           "while_loop", "pdb", "pdb_post_mortem", "run_with_pdb",
                           "run_with_profiling", "profile_file", "use_cprofile_for_profiling"})


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


def define_config_file_flag(flag_values=FLAGS) -> None:
    """--config_file, defined for every command by the command layer (`albert_tf.commands.cli`)."""
    if "config_file" not in flag_values:
        flags.DEFINE_string(
            "config_file", None,
            "A YAML or JSON experiment config (sections task, model, trainer, runtime of flag "
            "values; a training run's OUTPUT_DIR/config.yaml repeats that run). Flags given beside "
            "it win.", flag_values=flag_values)


def settings_of(flag_values=FLAGS) -> list[str]:
    """The flags that make up this command's experiment: every flag our modules define (the
    command's own and the shared ones), not absl's."""
    names = []
    for module, module_flags in flag_values.flags_by_module_dict().items():
        if module.startswith("absl.") or module.startswith("tensorflow"):
            continue
        names += [f.name for f in module_flags if f.name not in _NOT_SETTINGS]
    return sorted(set(names))


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
    if isinstance(value, Plain):
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


def apply_config_file(path: str, command: str | None = None, flag_values=FLAGS) -> list[str]:
    """Sets the flags named in the config file at `path` (`read_config_file`), except those
    given on the command line (they win); returns the names it set. Every key must be a flag of
    this command in its section; a value is parsed as on the command line (its type and range
    checked); null only for a flag whose default is none. A written config's `given` list
    says which of its values were given explicitly (as on the command line: some commands
    treat a value given differently from the default); in a file without one every value
    counts as given. A file written by another command (`command:` key) is refused."""
    data = read_config_texts(path)
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
    on_command_line = {name for name in known if flag_values[name].present}
    partner = {a: b for pair in ALIAS_PAIRS for a, b in (pair[:2], pair[1::-1])}
    updates = {}
    for section in SECTIONS:
        values = data.get(section) or {}
        if not isinstance(values, dict):
            raise ConfigFileError(f"--config_file {path}: section {section} must be a mapping "
                                  f"of flag names to values.")
        for name, value in values.items():
            if name not in known and isinstance(value, dict):
                inner = next(iter(value), "learning_rate")
                raise ConfigFileError(
                    f"--config_file {path}: {section}.{name} is a mapping; a section holds its "
                    f"settings flat (the groups of the typed settings, such as "
                    f"trainer.optimization, are no level of the file): write {inner} directly "
                    f"under {section}.")
            if name not in known:
                near = difflib.get_close_matches(str(name), sorted(known), n=1)
                raise ConfigFileError(
                    f"--config_file {path}: {section}.{name} is not a flag of this command"
                    + (f" (did you mean {near[0]}?)" if near else "") + ".")
            if section_of(name) != section:
                raise ConfigFileError(f"--config_file {path}: {name} belongs in the "
                                      f"{section_of(name)} section, not {section}.")
            updates[name] = value
    strangers = sorted(set(given or ()) - known)
    if strangers:
        raise ConfigFileError(f"--config_file {path}: given names {', '.join(strangers)}, not "
                              "flags of this command; given lists the flags the file's values "
                              "were given for.")
    applied = []
    for name, value in updates.items():
        flag = flag_values[name]
        where = f"--config_file {path}: {section_of(name)}.{name}"
        if name in on_command_line:  # the command line wins; the file's value must still be one
            _check_overridden(flag, value, where)
            continue
        if partner.get(name) in on_command_line:
            continue  # the command line gives the other half of an official alias pair
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


def _check_overridden(flag, value, where: str) -> None:
    """A value of the file that the command line overrides is checked as if it were used (its
    type, choices and range): a file that would fail alone fails beside the flag too."""
    problem = None
    if value is None:
        problem = None if flag.default is None else "null is not a value of this flag"
    else:
        try:
            problem = range_problem(flag.name, flag.parser.parse(_file_value(flag, value)))
        except (flags.Error, ValueError) as e:
            problem = str(e)
    if problem:
        raise ConfigFileError(f"{where}: {problem} (the command line's --{flag.name} wins, and "
                              "the file's value is none of this flag's)")


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A command's settings, typed: `settings` (`albert_tf.configs.definitions.ExperimentSettings`,
    the four sections of `SECTIONS` with the trainer's optimization and schedule groups) holds
    this command's values, and `names` says which settings the command has as flags (a setting
    it lacks keeps its definition's default there); `own`, the command's switches that are no
    setting of an experiment (fill_mask's --text, ...). Read a value typed
    (`cfg.settings.trainer.optimization.learning_rate`) or by its name (`cfg.learning_rate`,
    looked up through its definition's section and group; `"x" in cfg`: whether the command has
    it). `given` names the values set explicitly (command line or config file), the rest are
    the command's defaults. Frozen: `replaced(name=value)` is a new config.

    Build one with `of` (from {name: value}) or `from_flags`."""

    command: str
    settings: definitions.ExperimentSettings
    names: frozenset
    own: dict
    given: frozenset = frozenset()

    @classmethod
    def of(cls, command: str, values: dict, given=frozenset()) -> "ExperimentConfig":
        """The config of {name: value}: the settings' names typed, each under its own name
        (`definitions.settings`), the rest the command's own."""
        clash = sorted(set(values) & _ATTRIBUTES)
        if clash:
            raise ValueError(f"{command}: a flag named {', '.join(clash)} would hide the "
                             "config's own attribute of that name; rename the flag")
        names = frozenset(n for n in values if n in definitions.SETTINGS)
        return cls(command, definitions.settings({n: values[n] for n in names},
                                                 carry_aliases=False), names,
                   {n: v for n, v in values.items() if n not in names},
                   frozenset(given))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in object.__getattribute__(self, "names"):
            return definitions.value_of(object.__getattribute__(self, "settings"), name)
        own = object.__getattribute__(self, "own")
        if name in own:
            return own[name]
        raise AttributeError(f"{self.command} has no setting {name!r}")

    def __contains__(self, name) -> bool:
        return name in self.names or name in self.own

    def get(self, name, default=None):
        return getattr(self, name) if name in self else default

    def is_given(self, name) -> bool:
        return name in self.given

    def seed(self) -> int | None:
        """The run's seed (`random_seed`; None where the command has none)."""
        return self.get("random_seed")

    def run_settings(self) -> definitions.ExperimentSettings:
        """The typed settings the library receives (`TrainingConfig.from_settings`): `settings`
        with the fine-tuning runners' official names (`train_step`, `warmup_step`,
        `num_keep_checkpoint`) carried to the loop's (`definitions.settings`). A command that
        has both names of one setting (run_race: `--num_keep_checkpoint`, official, and
        `--keep_checkpoint_max`) takes the one given; both given must agree (ValueError)."""
        values = {name: getattr(self, name) for name in self.names}
        for alias, name in definitions.ALIASES.items():
            if alias not in self.names or name not in self.names:
                continue
            if self.is_given(alias) and self.is_given(name) and values[alias] != values[name]:
                raise ValueError(f"--{alias} {values[alias]} and --{name} {values[name]} are one "
                                 f"setting (--{alias} is its official name): give one of them.")
            if self.is_given(name) and not self.is_given(alias):
                values[alias] = values[name]
        return definitions.settings(values)

    def values(self) -> dict:
        """Every value of this command by name (its settings and its own switches)."""
        return {**{name: getattr(self, name) for name in self.names}, **self.own}

    def replaced(self, **changes) -> "ExperimentConfig":
        """This config with the values of `changes` (names the command has) replaced."""
        unknown = sorted(set(changes) - set(self.names) - set(self.own))
        if unknown:
            raise AttributeError(f"{self.command} has no setting {', '.join(unknown)}")
        return ExperimentConfig.of(self.command, {**self.values(), **changes}, self.given)

    def as_dict(self) -> dict:
        """The config as written: each value in its section, paths made absolute
        (`_absolute`), so that it can be run from any directory; `given`, the settings given
        explicitly."""
        values = self.values()
        return {"command": self.command,
                **{section: {name: _absolute(name, values[name]) for name in sorted(values)
                             if section_of(name) == section}
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


# What a flag may not be named: the config's own attributes, which a lookup by name never reaches.
_ATTRIBUTES = frozenset(name for name in dir(ExperimentConfig) if not name.startswith("_")) \
    | frozenset(f.name for f in dataclasses.fields(ExperimentConfig))
if _ATTRIBUTES & set(definitions.SETTINGS):
    raise ValueError(f"settings named as the config's attributes: "
                     f"{sorted(_ATTRIBUTES & set(definitions.SETTINGS))}")


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


# Official aliases and the flags they stand for: (alias, flag, the flag's value it means; None:
# the alias's own value).
ALIAS_PAIRS = (("use_tpu", "distribution_strategy", "tpu"), ("tpu_name", "tpu", None))


def refuse_contradicting_aliases(flag_values=FLAGS) -> None:
    """absl's UsageError for an official alias given on the command line beside a flag that
    says otherwise (--use_tpu with --distribution_strategy=mirrored, --tpu_name a with --tpu b):
    one of them would be dropped without a word. Called on the command line alone, before
    `apply_config_file` (which leaves the file's half of a pair the command line gives)."""
    from absl import app

    names = settings_of(flag_values)
    for alias, meaning, means in ALIAS_PAIRS:
        if alias not in names or meaning not in names or not flag_values[alias].value \
                or not flag_values[meaning].present:
            continue
        said = means if means is not None else flag_values[alias].value
        if flag_values[meaning].value not in (None, said):
            raise app.UsageError(
                f"--{alias} (official: --{meaning}={said}) and --{meaning}="
                f"{flag_values[meaning].value} say different things; give one of them.")


def from_flags(command: str, flag_values=FLAGS) -> ExperimentConfig:
    """The command's config from its parsed flags (after `apply_config_file`)."""
    names = settings_of(flag_values)
    values = _resolved({name: flag_values[name].value for name in names}, command)
    values = {name: list(value) if isinstance(value, list) else value
              for name, value in values.items()}
    given = {name for name in names if flag_values[name].present}
    for alias, meaning in (("use_tpu", "distribution_strategy"), ("tpu_name", "tpu")):
        if alias in given:
            given = (given - {alias}) | {meaning}
    return ExperimentConfig.of(command, values, given)
