"""The experiment config (`albert_tf.commands.experiment`): --config_file read as the command line
would read it, the effective config each training run writes, and that config repeating the run."""

import copy
import json
import math
import os
import pickle
import re

import numpy as np
import pytest
import yaml
from absl import flags

from albert_tf.commands import experiment
from albert_tf.checkpoints.conversion import recorded_casing
from albert_tf.commands.experiment import ConfigFileError
from conftest import GENERATION_KW, PRETRAINING_MODEL, ROOT, run_command


def _flag_values(argv=()):
    values = flags.FlagValues()
    flags.DEFINE_float("learning_rate", 5e-5, "", flag_values=values)
    flags.DEFINE_integer("train_batch_size", 32, "", flag_values=values)
    flags.DEFINE_integer("random_seed", 12345, "", flag_values=values)
    flags.DEFINE_integer("num_train_steps", 10, "", flag_values=values)
    flags.DEFINE_string("input_file", None, "", flag_values=values)
    flags.DEFINE_bool("do_train", False, "", flag_values=values)
    flags.DEFINE_string("task_name", None, "", flag_values=values)
    flags.DEFINE_list("labels", None, "", flag_values=values)
    flags.DEFINE_float("threshold_to_export", float("nan"), "", flag_values=values)
    flags.DEFINE_enum("distribution_strategy", "default", ["default", "tpu", "mirrored"], "",
                      flag_values=values)
    flags.DEFINE_bool("use_tpu", False, "", flag_values=values)
    flags.DEFINE_string("tpu_name", None, "", flag_values=values)
    flags.DEFINE_string("tpu", None, "", flag_values=values)
    flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16"], "",
                      flag_values=values)
    flags.register_validator("train_batch_size", lambda v: v > 0, "must be > 0",
                             flag_values=values)
    experiment.define_config_file_flag(values)
    values(["prog", *argv])
    return values


def _write(path, data):
    path.write_text(yaml.safe_dump(data) if str(path).endswith(".yaml") else json.dumps(data))
    return str(path)


def test_a_config_file_sets_the_flags_and_the_command_line_wins(tmp_path):
    values = _flag_values(["--train_batch_size=8"])
    path = _write(tmp_path / "c.yaml", {
        "command": "prog", "task": {"task_name": "sst-2", "labels": ["neg", "pos"]},
        "trainer": {"learning_rate": 1e-3, "train_batch_size": 64, "do_train": True},
        "runtime": {"mixed_precision": "bfloat16"}})
    applied = experiment.apply_config_file(path, "prog", values)
    assert sorted(applied) == ["do_train", "labels", "learning_rate", "mixed_precision",
                               "task_name"]
    assert values.learning_rate == 1e-3 and values.train_batch_size == 8  # command line wins
    assert values.do_train is True and values.labels == ["neg", "pos"]
    cfg = experiment.from_flags("prog", values)
    # typed: each value in its section and group, as the definitions place it
    assert cfg.settings.trainer.optimization.learning_rate == 1e-3
    assert cfg.settings.task.task_name == "sst-2" and cfg.settings.trainer.train_batch_size == 8
    assert cfg.settings.runtime.mixed_precision == "bfloat16"
    assert cfg.settings.model.random_seed == 12345
    assert cfg.learning_rate == 1e-3 and "labels" in cfg and "nothing" not in cfg
    assert cfg.is_given("learning_rate") and cfg.is_given("train_batch_size")
    assert not cfg.is_given("random_seed")
    # JSON reads the same
    json_values = _flag_values()
    experiment.apply_config_file(_write(tmp_path / "c.json", {"trainer": {"learning_rate": 0.5}}),
                                 "prog", json_values)
    assert json_values.learning_rate == 0.5


def test_the_config_is_the_typed_settings_each_value_under_its_own_name():
    """`ExperimentConfig` holds the typed settings (`definitions.ExperimentSettings`) and the
    command's own switches; a value under an official alias stays under its own name in the
    config (written as given), and the loop's view (`run_settings`) carries it to the loop's
    name; a name the command lacks is none of its values; `replaced` gives a new config."""
    exp = experiment.ExperimentConfig.of(
        "albert_tf.run_race", {"train_step": 7, "keep_checkpoint_max": 3,
                               "num_keep_checkpoint": 2, "learning_rate": 0.01, "version": 4},
        given={"train_step", "keep_checkpoint_max"})
    assert exp.settings.trainer.schedule.train_step == 7 and exp.train_step == 7
    assert exp.settings.trainer.keep_checkpoint_max == 3 and exp.keep_checkpoint_max == 3
    assert exp.settings.trainer.optimization.learning_rate == 0.01 and exp.version == 4
    assert "num_train_steps" not in exp and "version" in exp
    with pytest.raises(AttributeError, match="no setting 'num_train_steps'"):
        exp.num_train_steps
    loop = exp.run_settings()
    assert (loop.trainer.schedule.num_train_steps, loop.trainer.schedule.num_warmup_steps,
            loop.trainer.keep_checkpoint_max) == (7, 0, 3)  # the name given
    assert exp.as_dict()["trainer"] == {"keep_checkpoint_max": 3, "learning_rate": 0.01,
                                        "num_keep_checkpoint": 2, "train_step": 7}
    assert exp.as_dict()["task"] == {"version": 4}
    other = exp.replaced(learning_rate=0.5)
    assert other.learning_rate == 0.5 and exp.learning_rate == 0.01
    assert other.given == exp.given and other.as_dict()["task"] == {"version": 4}
    with pytest.raises(AttributeError, match="no setting nothing"):
        exp.replaced(nothing=1)
    with pytest.raises(ValueError, match="a flag named values"):
        experiment.ExperimentConfig.of("prog", {"values": 1})
    # a plain value: it pickles and copies (the values compared by repr: the settings' nan
    # threshold is unequal to itself; the sets by equality: their repr's order may differ)
    for again in (pickle.loads(pickle.dumps(exp)), copy.deepcopy(exp)):
        assert (again.command, again.names, again.given) == (exp.command, exp.names, exp.given)
        assert repr(sorted(again.values().items())) == repr(sorted(exp.values().items()))
        assert repr(again.settings) == repr(exp.settings)


def test_a_command_with_both_names_of_a_setting_takes_the_one_given():
    """run_race has --num_keep_checkpoint (official) and --keep_checkpoint_max (the loop's name):
    the loop keeps what was given (the official name alone, the other alone: it was ignored
    for the official name's default), both given must agree, and config.yaml records both."""
    def race(**given):
        values = {"keep_checkpoint_max": 5, "num_keep_checkpoint": 5, **given}
        return experiment.ExperimentConfig.of("albert_tf.run_race", values, given=set(given))

    def kept(exp):
        return exp.run_settings().trainer.keep_checkpoint_max

    assert kept(race()) == 5
    assert kept(race(keep_checkpoint_max=3)) == 3
    assert kept(race(num_keep_checkpoint=2)) == 2
    assert kept(race(keep_checkpoint_max=2, num_keep_checkpoint=2)) == 2
    with pytest.raises(ValueError, match="--num_keep_checkpoint 2 and --keep_checkpoint_max 3 "
                                         "are one setting"):
        race(keep_checkpoint_max=3, num_keep_checkpoint=2).run_settings()
    assert race(keep_checkpoint_max=3).as_dict()["trainer"] == {"keep_checkpoint_max": 3,
                                                               "num_keep_checkpoint": 5}


def test_the_written_config_reads_back_to_the_same_values(tmp_path):
    values = _flag_values(["--learning_rate=0.00176", "--labels=a,b", "--use_tpu",
                           "--tpu_name=my-tpu"])
    cfg = experiment.from_flags("prog", values)
    # aliases resolved: what ran, under the names the library reads
    assert cfg.distribution_strategy == "tpu" and cfg.tpu == "my-tpu"
    assert cfg.use_tpu is False and cfg.tpu_name is None
    assert cfg.is_given("distribution_strategy") and cfg.is_given("tpu")
    assert math.isnan(cfg.threshold_to_export)
    path = cfg.write(str(tmp_path))
    assert path == str(tmp_path / "config.yaml")
    again = _flag_values()
    experiment.apply_config_file(path, "prog", again)
    assert experiment.from_flags("prog", again).as_dict().keys() == cfg.as_dict().keys()
    for name, value in cfg.values().items():
        got = getattr(experiment.from_flags("prog", again), name)
        assert (math.isnan(got) and math.isnan(value)) if isinstance(value, float) and \
            math.isnan(value) else got == value, name
    assert experiment.from_flags("prog", again).given == cfg.given  # restored, not guessed
    # the same config again: the file is kept as it is; another config: the old one is kept
    assert cfg.write(str(tmp_path)) == path and not (tmp_path / "config.previous-1.yaml").exists()
    # the same settings under an earlier version's header (its module was albert_tf.experiment):
    # rewritten in place, not kept as another run's
    text = open(path).read()
    old = text.replace("albert_tf.commands.experiment", "albert_tf.experiment", 1)
    assert old != text
    open(path, "w").write(old)
    assert cfg.write(str(tmp_path)) == path and open(path).read() == text
    assert not (tmp_path / "config.previous-1.yaml").exists()
    other = experiment.from_flags("prog", _flag_values(["--learning_rate=0.1"]))
    other.write(str(tmp_path))
    assert yaml.safe_load((tmp_path / "config.previous-1.yaml").read_text())["trainer"][
        "learning_rate"] == 0.00176
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["trainer"][
        "learning_rate"] == 0.1


def test_given_is_restored_exactly_and_paths_are_written_absolute(tmp_path, monkeypatch):
    """A flag given at its default value stays given on the rerun (some commands treat a given
    value differently: SQuAD v2's --null_score_diff_threshold), a default stays a default; a
    relative path is written absolute, so the config runs from any directory."""
    values = _flag_values(["--train_batch_size=32", "--task_name=data/x.tsv"])
    cfg = experiment.from_flags("prog", values)
    monkeypatch.chdir(tmp_path)
    written = yaml.safe_load(open(cfg.write(str(tmp_path))))
    assert written["given"] == ["task_name", "train_batch_size"]
    again = _flag_values()
    experiment.apply_config_file(str(tmp_path / "config.yaml"), "prog", again)
    rerun = experiment.from_flags("prog", again)
    assert rerun.is_given("train_batch_size") and not rerun.is_given("learning_rate")
    assert not rerun.is_given("threshold_to_export")  # nan: not given, as first
    # task_name is not a path setting: as typed; a path setting is made absolute
    assert written["task"]["task_name"] == "data/x.tsv"
    assert experiment._absolute("input_file", "a/*.tfrecord,gs://b/c,/d") == \
        f"{tmp_path}/a/*.tfrecord,gs://b/c,/d"
    assert experiment._absolute("init_checkpoint", "runs/x:best") == f"{tmp_path}/runs/x:best"


def test_an_official_alias_beside_a_flag_that_says_otherwise_is_refused():
    """--use_tpu beside --distribution_strategy=mirrored ran on a TPU without a word (a walk);
    beside --distribution_strategy=tpu, or alone, it is what it says."""
    from absl import app

    for argv, message in [
            (["--use_tpu", "--distribution_strategy=mirrored"],
             "--use_tpu (official: --distribution_strategy=tpu) and "
             "--distribution_strategy=mirrored say different things; give one of them."),
            (["--tpu_name=a", "--tpu=b"], "--tpu_name (official: --tpu=a) and --tpu=b say "
                                          "different things; give one of them.")]:
        with pytest.raises(app.UsageError) as raised:
            experiment.refuse_contradicting_aliases(_flag_values(argv))
        assert str(raised.value) == message
    for argv in (["--use_tpu", "--distribution_strategy=tpu"], ["--use_tpu"],
                 ["--tpu_name=a", "--tpu=a"], ["--distribution_strategy=mirrored"]):
        values = _flag_values(argv)
        experiment.refuse_contradicting_aliases(values)
        cfg = experiment.from_flags("prog", values)
        assert cfg.distribution_strategy == ("mirrored" if "mirrored" in argv[0] else
                                             "tpu" if "--use_tpu" in argv else "default")


def test_the_command_line_gives_an_alias_pair_whole_beside_a_config_file(tmp_path):
    """A run's written config says distribution_strategy: mirrored; rerun with --use_tpu, the
    command line's half wins the pair and the file's other half is left (a review: the file's
    value counted as given and the rerun was refused); the other way round alike."""
    for data, argv, strategy, tpu in [
            ({"runtime": {"distribution_strategy": "mirrored"}}, ["--use_tpu"], "tpu", None),
            ({"runtime": {"use_tpu": True, "tpu_name": "a"}},
             ["--distribution_strategy=mirrored", "--tpu=b"], "mirrored", "b"),
            ({"runtime": {"tpu_name": "a"}}, [], "default", "a")]:
        values = _flag_values(argv)
        experiment.refuse_contradicting_aliases(values)
        experiment.apply_config_file(_write(tmp_path / "run.yaml", data), "prog", values)
        cfg = experiment.from_flags("prog", values)
        assert (cfg.distribution_strategy, cfg.tpu) == (strategy, tpu)


def test_a_fresh_seed_is_drawn_once_and_recorded():
    cfg = experiment.from_flags("prog", _flag_values(["--random_seed=-1"]))
    assert 0 <= cfg.random_seed < 2 ** 31 and cfg.seed() == cfg.random_seed
    seeds = {experiment.from_flags("prog", _flag_values(["--random_seed=-1"])).random_seed
             for _ in range(5)}
    assert len(seeds) > 1  # drawn, not fixed


def test_a_fresh_seed_is_reused_by_the_same_command_in_its_directory(tmp_path):
    """`--random_seed -1` rerun into the run's directory (to resume) takes the seed the run
    recorded, not a new one: a new seed would give another input order."""
    values = _flag_values(["--random_seed=-1"])
    flags.DEFINE_string("output_dir", None, "", flag_values=values)
    values["output_dir"].parse(str(tmp_path))
    first = experiment.from_flags("prog", values)
    first.write(str(tmp_path))
    assert experiment.from_flags("prog", values).random_seed == first.random_seed
    assert experiment.from_flags("other", values).random_seed != first.random_seed


@pytest.mark.parametrize("data, message", [
    ({"trainer": {"learning_rat": 1.0}},
     r"trainer.learning_rat is not a flag of this command \(did you mean learning_rate\?\)"),
    ({"task": {"learning_rate": 1.0}}, r"learning_rate belongs in the trainer section, not task"),
    ({"optimizer": {"learning_rate": 1.0}}, r"unknown section\(s\) optimizer; the sections are "
                                            r"task, model, trainer, runtime"),
    ({"trainer": {"train_batch_size": "eight"}}, r"trainer.train_batch_size: .*eight"),
    ({"trainer": {"train_batch_size": 0}}, r"trainer.train_batch_size: .*must be > 0"),
    ({"runtime": {"mixed_precision": "float8"}}, r"runtime.mixed_precision: .*float8"),
    ({"command": "albert_tf.run_classifier"}, r"was written by albert_tf.run_classifier, and "
                                              r"this command is prog: run it with python -m "
                                              r"albert_tf.run_classifier"),
    (["a", "list"], r"must hold a mapping of the sections task, model, trainer, runtime"),
    ({"trainer": ["learning_rate"]}, r"section trainer must be a mapping"),
    ({1: "x"}, r"1 is not a name; keys are section and flag names"),
    ({"trainer": {"train_batch_size": None}}, r"trainer.train_batch_size: null is not a value "
                                              r"of this flag \(its default is 32\)"),
    ({"trainer": {"do_train": "yes"}}, r"trainer.do_train: .*'yes'.* \(a boolean flag takes "
                                       r"true or false, as on the command line\)"),
    ({"given": "learning_rate"}, r"given must be a list of flag names"),
    ({"given": ["learning_rate", "bogus_flag"]}, r"given names bogus_flag, not flags of this "
                                                 r"command"),
    ({"trainer": {"optimization": {"learning_rate": 1.0}}},
     r"trainer.optimization is a mapping; a section holds its settings flat .* write "
     r"learning_rate directly under trainer"),
])
def test_bad_config_files_are_named_with_the_key(tmp_path, data, message):
    values = _flag_values()
    path = _write(tmp_path / "bad.yaml", data)
    with pytest.raises(ConfigFileError, match=message) as raised:
        experiment.apply_config_file(path, "prog", values)
    assert str(raised.value).startswith(f"--config_file {path}")


def test_a_file_value_the_command_line_overrides_is_checked_all_the_same(tmp_path):
    """`train_step: 4e1` in a file passed beside --train_step 4 and failed alone (a walk)."""
    for data, message in [({"trainer": {"train_batch_size": "eight"}}, "eight"),
                          ({"trainer": {"train_batch_size": 0}}, "must be a finite number > 0"),
                          ({"runtime": {"mixed_precision": "float8"}}, "should be one of"),
                          ({"trainer": {"train_batch_size": None}}, "null is not a value")]:
        name = next(iter(next(iter(data.values()))))
        values = _flag_values([f"--{name}=" + ("64" if name == "train_batch_size"
                                                else "bfloat16")])
        path = _write(tmp_path / "over.yaml", data)
        with pytest.raises(ConfigFileError, match=re.escape(message) + r".*\(the command line's "
                           f"--{name} wins, and the file's value is none of this flag's\\)"):
            experiment.apply_config_file(path, "prog", values)
    values = _flag_values(["--train_batch_size=64"])
    path = _write(tmp_path / "fine.yaml", {"trainer": {"train_batch_size": 8}})
    assert experiment.apply_config_file(path, "prog", values) == []
    assert values.train_batch_size == 64


def test_null_is_a_value_only_where_the_default_is_none(tmp_path):
    values = _flag_values(["--task_name=sst-2"])
    experiment.apply_config_file(_write(tmp_path / "c.yaml", {"task": {"task_name": None}}),
                                 "prog", values)
    assert values.task_name == "sst-2"  # the command line wins over the file's null
    values = _flag_values()
    values["task_name"].parse("x")
    values["task_name"].present = 0
    experiment.apply_config_file(_write(tmp_path / "d.yaml", {"task": {"task_name": None}}),
                                 "prog", values)
    assert values.task_name is None


def test_unreadable_and_malformed_config_files(tmp_path):
    with pytest.raises(ConfigFileError, match=r"--config_file .*missing.yaml: cannot read it"):
        experiment.apply_config_file(str(tmp_path / "missing.yaml"), "prog", _flag_values())
    (tmp_path / "broken.yaml").write_text("trainer: {learning_rate: [1\n")
    with pytest.raises(ConfigFileError, match=r"broken.yaml is not valid YAML"):
        experiment.apply_config_file(str(tmp_path / "broken.yaml"), "prog", _flag_values())
    (tmp_path / "broken.json").write_text("{'trainer': 1}")
    with pytest.raises(ConfigFileError, match=r"broken.json is not valid JSON"):
        experiment.apply_config_file(str(tmp_path / "broken.json"), "prog", _flag_values())
    (tmp_path / "twice.yaml").write_text("trainer:\n  learning_rate: 0.5\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigFileError, match=r"twice.yaml: learning_rate is given twice "
                                              r"\(line 3\); give each key once"):
        experiment.apply_config_file(str(tmp_path / "twice.yaml"), "prog", _flag_values())
    (tmp_path / "twice.json").write_text('{"trainer": {"learning_rate": 0.5, '
                                         '"learning_rate": 0.1}}')
    with pytest.raises(ConfigFileError, match=r"learning_rate is given twice"):
        experiment.apply_config_file(str(tmp_path / "twice.json"), "prog", _flag_values())
    (tmp_path / "latin1.yaml").write_bytes(b"trainer:\n  learning_rate: 0.01\xff\n")
    with pytest.raises(ConfigFileError, match=r"latin1.yaml is not UTF-8 text"):
        experiment.apply_config_file(str(tmp_path / "latin1.yaml"), "prog", _flag_values())


# What the same text means on the command line and in a config file (YAML 1.2 core: yes/no/on/
# off are strings, 010 is ten; PyYAML's YAML 1.1 read them as booleans and octal eight).
@pytest.mark.parametrize("key, text, expected", [
    ("task.labels", "[yes, no]", ["yes", "no"]),
    ("task.labels", "[on, off, 010, 1e3, True]", ["on", "off", "010", "1e3", "True"]),
    ("task.task_name", "yes", "yes"),
    ("task.task_name", "off", "off"),
    ("task.task_name", "010", "010"),
    ("task.task_name", "0x1F", "0x1F"),
    ("task.task_name", "1_000", "1_000"),
    ("task.task_name", "2001-12-14", "2001-12-14"),
    ("task.task_name", "True", "True"),
    ("trainer.num_train_steps", "010", 10),
    ("trainer.num_train_steps", "0o10", 8),
    ("trainer.num_train_steps", "0x10", 16),
    ("trainer.num_train_steps", "+12", 12),
    ("trainer.num_train_steps", "1_000", 1000),
    ("trainer.learning_rate", "010", 10.0),
    ("trainer.learning_rate", "1e-3", 0.001),
    ("trainer.do_train", "true", True),
    ("trainer.do_train", "True", True),
    ("trainer.do_train", "1", True),
    ("trainer.do_train", "FALSE", False),
])
def test_a_value_in_a_config_file_means_what_the_same_text_means_on_the_command_line(
        tmp_path, key, text, expected):
    section, name = key.split(".")
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}:\n  {name}: {text}\n")
    from_file = _flag_values()
    experiment.apply_config_file(str(path), "prog", from_file)
    command_line = _flag_values([f"--{name}={text.strip('[]').replace(', ', ',')}"])
    assert getattr(from_file, name) == getattr(command_line, name) == expected
    assert type(getattr(from_file, name)) is type(expected)


@pytest.mark.parametrize("text", ["yes", "no", "on", "off", "y"])
def test_yes_no_on_off_for_a_boolean_flag_are_refused_in_a_file_as_on_the_command_line(
        tmp_path, text):
    with pytest.raises(flags.IllegalFlagValueError, match="Non-boolean argument"):
        _flag_values([f"--do_train={text}"])
    path = tmp_path / "c.yaml"
    path.write_text(f"trainer:\n  do_train: {text}\n")
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", _flag_values())
    assert str(raised.value) == (
        f"--config_file {path}: trainer.do_train: flag --do_train={text}: ('Non-boolean "
        f"argument to boolean flag', '{text}') (a boolean flag takes true or false, as on the "
        "command line)")


def test_yaml_spellings_of_numbers_are_read_as_yaml_1_2(tmp_path):
    """The values read_config_file gives its other readers (run_classifier's recorded task):
    YAML 1.2 core, and a run's own config.yaml (.nan, .inf, null, booleans) reads back."""
    path = tmp_path / "c.yaml"
    path.write_text("task:\n  num_labels: 010\n  a: 0o17\n  b: yes\n  c: ~\n  d: .inf\n"
                    "  e: -.Inf\n  f: TRUE\n  g: 1_000\n  h: '010'\n  i: 1.5e3\n")
    assert experiment.read_config_file(str(path)) == {"task": {
        "num_labels": 10, "a": 15, "b": "yes", "c": None, "d": float("inf"),
        "e": float("-inf"), "f": True, "g": "1_000", "h": "010", "i": 1500.0}}
    values = _flag_values()
    path.write_text("trainer:\n  learning_rate: .nan\n  num_train_steps: !!int '010'\n")
    experiment.apply_config_file(str(path), "prog", values)
    assert math.isnan(values.learning_rate) and values.num_train_steps == 10


def _nested_aliases(levels):
    """The billion-laughs value of issue 58: task.input_file a list whose each level is ten
    aliases of the one before (10 ** levels items once expanded)."""
    lists = ["&a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"&a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, levels + 1)]
    return "task:\n  input_file: [\n    " + ",\n    ".join(lists) + "]\n"


def test_nested_aliases_are_refused_at_the_node_limit(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(_nested_aliases(7))
    assert len(path.read_bytes()) < 1000
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", _flag_values())
    assert str(raised.value) == (
        f"--config_file {path} expands (its aliases repeated) to more than 100000 nodes, the "
        "limit; write the values out.")
    with pytest.raises(ConfigFileError, match="more than 100000 nodes"):
        experiment.read_config_file(str(path))
    # a long text repeated by aliases counts its characters
    path.write_text("long: &t " + "x" * 200_000 + "\ntask:\n  labels: [" +
                    ", ".join(["*t"] * 60) + "]\n")
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", _flag_values())
    assert str(raised.value) == (
        f"--config_file {path} expands (its aliases repeated) to more than 10000000 "
        "characters, the limit; write the values out.")
    # aliases within the limits are read (and expanded) as YAML means them
    path.write_text("labels: &l [neg, pos]\ntask:\n  labels: *l\n")
    with pytest.raises(ConfigFileError, match="unknown section\\(s\\) labels"):
        experiment.apply_config_file(str(path), "prog", _flag_values())
    path.write_text("task:\n  task_name: &n sst-2\n  input_file: *n\n")
    values = _flag_values()
    experiment.apply_config_file(str(path), "prog", values)
    assert values.input_file == values.task_name == "sst-2"


def test_a_runs_recorded_casing_is_read_as_config_files_are(tmp_path):
    """convert and the exports read a run's casing from its config.yaml with the same YAML 1.2
    bounded reader as --config_file: false is False, a YAML 1.1 `yes` is no casing at all (as
    --config_file refuses it), and nested aliases are refused, not expanded."""
    path = tmp_path / experiment.CONFIG_NAME
    for text, casing in (("false", False), ("true", True), ("yes", None), ("'false'", None)):
        path.write_text(f"command: albert_tf.run_classifier\nmodel:\n  do_lower_case: {text}\n")
        assert recorded_casing(str(tmp_path)) is casing, text
    path.write_text(_nested_aliases(7))
    with pytest.raises(ConfigFileError, match="more than 100000 nodes"):
        recorded_casing(str(tmp_path))


def test_a_config_file_over_the_size_limit_or_holding_itself_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\ntrainer:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", _flag_values())
    assert str(raised.value) == (f"--config_file {path} is larger than 1048576 bytes, the "
                                 "limit for a config file; give the flags' values, not data.")
    path.write_text("task:\n  labels: [" + ", ".join(["a"] * 150_000) + "]\n")
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", _flag_values())
    assert str(raised.value) == (f"--config_file {path} holds more than 100000 nodes, the "
                                 "limit; write the values out.")
    path = tmp_path / "self.yaml"
    path.write_text("task:\n  labels: &l [a, *l]\n")
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", _flag_values())
    assert str(raised.value) == (f"--config_file {path} holds an alias inside its own anchor "
                                 "(line 2), a value without end; write the values out.")
    for name, text in (("deep.yaml", "[" * 50_000 + "]" * 50_000),
                       ("deep.json", "[" * 50_000 + "]" * 50_000)):
        path = tmp_path / name
        path.write_text(text)
        kind = "JSON" if name.endswith(".json") else "YAML"
        with pytest.raises(ConfigFileError) as raised:
            experiment.apply_config_file(str(path), "prog", _flag_values())
        assert str(raised.value) == (f"--config_file {path} is not a config: its {kind} is "
                                     "nested too deeply.")


@pytest.mark.parametrize("text, message", [
    ("base: &b {learning_rate: 0.1}\ntrainer:\n  <<: *b\n",
     "the merge key << (line 3) is YAML 1.1, not read here; write the keys out."),
    ("task:\n  task_name: !!binary aGVsbG8=\n",
     "is not valid YAML: could not determine a constructor for the tag "
     "'tag:yaml.org,2002:binary'"),
    ("task:\n  labels: [[a, b], c]\n",
     "task.labels: a list of --labels holds a list, a mapping or null; its items are single "
     "values"),
    ("task:\n  labels: [a, null]\n",
     "task.labels: a list of --labels holds a list, a mapping or null; its items are single "
     "values"),
    # hostile pass: the list became a directory named "runs/a,runs/b", left behind
    ("trainer:\n  output_dir: [runs/a, runs/b]\n",
     "trainer.output_dir: --output_dir names one path, and the file gives a list of 2; give "
     "one value"),
])
def test_yaml_1_1_forms_and_nested_lists_are_refused(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    values = _flag_values()
    flags.DEFINE_string("output_dir", None, "", flag_values=values)
    with pytest.raises(ConfigFileError) as raised:
        experiment.apply_config_file(str(path), "prog", values)
    assert message in str(raised.value) and str(raised.value).startswith(
        f"--config_file {path}")


def _pretrain(args, cwd, **process):
    return run_command("albert_tf.run_pretraining", *args, cwd=cwd, **process)


def _weights(directory):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(directory)))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.endswith("VARIABLE_VALUE")}  # weights, optimizer slots and step


@pytest.mark.slow
def test_a_runs_written_config_repeats_it_exactly(generated_data, tmp_path):
    """`run_pretraining` writes OUTPUT_DIR/config.yaml; `--config_file` of it with another
    --output_dir trains the same weights (bit for bit), and a flag beside it wins."""
    from albert_tf.config import AlbertConfig

    config_file = tmp_path / "albert_config.json"
    AlbertConfig(**PRETRAINING_MODEL).to_json_file(config_file)
    data = tmp_path / "data"
    os.symlink(os.path.dirname(generated_data["files"][0]), data)
    first = tmp_path / "first"
    # relative paths, run from tmp_path: the written config holds them absolute
    args = ["--albert_config_file", "albert_config.json", "--input_file", "data/*.tfrecord",
            "--output_dir", "first", "--max_seq_length", str(GENERATION_KW["max_seq_length"]),
            "--max_predictions_per_seq", str(GENERATION_KW["max_predictions_per_seq"]),
            "--train_batch_size", "8", "--num_train_steps", "3", "--num_warmup_steps", "1",
            "--learning_rate", "0.01", "--save_checkpoints_steps", "3",
            "--iterations_per_loop", "3", "--shuffle_window", "64", "--random_seed", "-1"]
    # both runs are processes of their own, as a user's are: run in a test worker, whose earlier
    # tests changed TensorFlow's process state, the first run's optimizer slots differed from a
    # fresh process's by 3e-6 (relative; clean-clone CI of 72f3c9c)
    proc = _pretrain(args, str(tmp_path), process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = yaml.safe_load((first / "config.yaml").read_text())
    assert written["command"] == "albert_tf.run_pretraining"
    assert written["trainer"]["num_train_steps"] == 3
    assert written["trainer"]["learning_rate"] == 0.01
    assert written["model"]["albert_config_file"] == str(config_file)
    assert written["task"]["input_file"] == str(data / "*.tfrecord")
    assert written["runtime"]["mixed_precision"] == "float32"
    assert "learning_rate" in written["given"] and "poly_power" not in written["given"]
    seed = written["model"]["random_seed"]
    assert seed != -1 and 0 <= seed < 2 ** 31  # the drawn seed, recorded

    again = tmp_path / "again"  # run from another directory, as a process of its own (another
    # string hash seed, nothing shared with the first run's process)
    proc = _pretrain(["--config_file", str(first / "config.yaml"), "--output_dir", str(again)],
                     ROOT, process=True, env={"PYTHONHASHSEED": "12345"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = _weights(first), _weights(again)
    assert a.keys() == b.keys() and len(a) > 10
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    repeated = yaml.safe_load((again / "config.yaml").read_text())
    assert repeated["model"]["random_seed"] == seed
    assert dict(repeated, trainer=dict(repeated["trainer"], output_dir=None)) == \
        dict(written, trainer=dict(written["trainer"], output_dir=None))

    # A flag beside the file wins; a bad file is a usage error naming the key, nothing written.
    other = tmp_path / "other"
    proc = _pretrain(["--config_file", str(first / "config.yaml"), "--output_dir", str(other),
                      "--learning_rate", "0.02"], str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert yaml.safe_load((other / "config.yaml").read_text())["trainer"]["learning_rate"] == 0.02
    assert any(np.abs(a[n] - w).max() > 0 for n, w in _weights(other).items())
    bad = tmp_path / "bad.yaml"
    bad.write_text((first / "config.yaml").read_text().replace("num_train_steps",
                                                               "num_train_step"))
    proc = _pretrain(["--config_file", str(bad), "--output_dir", str(tmp_path / "never")],
                     str(tmp_path))
    assert proc.returncode == 1
    assert "trainer.num_train_step is not a flag of this command (did you mean " \
           "num_train_steps?)" in proc.stderr
    assert not (tmp_path / "never").exists()

    # A command that fails leaves the run's config as it was; the same -1 command rerun into
    # the run's directory takes its recorded seed and resumes (the input order is the same).
    before = (first / "config.yaml").read_text()
    proc = _pretrain(["--config_file", str(first / "config.yaml"), "--output_dir", str(first),
                      "--albert_config_file", "nope.json"], str(tmp_path))
    assert proc.returncode == 1 and "nope.json" in proc.stderr
    assert (first / "config.yaml").read_text() == before
    assert not (first / "config.previous-1.yaml").exists()
    proc = _pretrain(args + ["--num_train_steps", "4", "--save_checkpoints_steps", "4"],
                     str(tmp_path))
    assert proc.returncode == 1 and "holds a run with other settings" in proc.stderr
    proc = _pretrain(args, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Resumed from" in proc.stdout
    assert yaml.safe_load((first / "config.yaml").read_text())["model"]["random_seed"] == seed
