"""The settings' definitions (`albert_tf.configs.definitions`) are the one place of each
setting's default, range, help, choices and section: the flags, the config files' sections, the
loop's defaults and its checks are made from them (issue 60). These tests walk the definitions,
the commands' source and the loop's dataclasses; none imports TensorFlow but the last two."""

from __future__ import annotations

import ast
import dataclasses
import math
import os

import pytest

from albert_tf.configs import definitions
from albert_tf.configs.definitions import PRETRAINING_DEFAULTS, RULES, SETTINGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The commands whose flags are an experiment (they write config.yaml and take it back).
EXPERIMENT_COMMANDS = ("run_pretraining.py", "run_classifier.py", "run_race.py",
                       "run_tagging.py", "run_squad_v1.py", "run_squad_v2.py",
                       os.path.join("commands", "squad_runner.py"))


def _sources():
    for folder, _, files in os.walk(os.path.join(ROOT, "albert_tf")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, os.path.join(ROOT, "albert_tf")), \
                        ast.parse(f.read())


def _calls(tree, attr):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr.startswith(attr)]


def test_every_setting_is_well_formed_and_its_default_passes_its_own_check():
    assert len(SETTINGS) == 95
    assert definitions.SECTIONS == ("task", "model", "trainer", "runtime")
    kinds = {"string": str, "integer": int, "float": float, "bool": bool, "enum": str,
             "list": list}
    for name, s in SETTINGS.items():
        assert s.name == name and s.section in definitions.SECTIONS and s.help.strip()
        assert s.default is None or isinstance(s.default, kinds[s.kind]), name
        assert s.problem(s.default) is None, name
        if s.kind in ("integer", "float"):
            assert s.rule in RULES, f"{name}: a number without a range"
    # The checks refuse what they should, with the flag's name.
    assert SETTINGS["learning_rate"].problem(math.nan) == \
        "--learning_rate must be a finite number > 0"
    assert SETTINGS["learning_rate"].problem(True) is not None
    assert SETTINGS["random_seed"].problem(-1) is None
    assert SETTINGS["random_seed"].problem(-2) == \
        "--random_seed must be -1 (a fresh seed) or a seed >= 0"
    assert SETTINGS["classifier_dropout_prob"].problem(1.0) == \
        "--classifier_dropout_prob must be at least 0 and below 1"
    assert SETTINGS["mixed_precision"].problem("float64") == \
        "--mixed_precision must be one of float32, bfloat16, float16"


def test_the_sections_are_the_typed_classes_and_nest_the_trainers_groups():
    typed = definitions.settings({"learning_rate": 1e-3, "train_step": 7, "task_name": "rte",
                                  "mixed_precision": "bfloat16", "not_a_setting": 1})
    assert typed.trainer.optimization.learning_rate == 1e-3
    assert typed.trainer.schedule.train_step == 7
    assert typed.task.task_name == "rte" and typed.runtime.mixed_precision == "bfloat16"
    assert typed.model.max_seq_length == 512  # a setting not given keeps its default
    assert SETTINGS["learning_rate"].section == "trainer"  # the file keeps sections flat
    assert definitions.section_of("poly_power") == "trainer"
    assert definitions.section_of("albert_hub_module_handle") == "model"
    assert definitions.section_of("quantize") == "task"  # a command's own switch
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.trainer.optimization.learning_rate = 1.0


def test_no_flag_of_a_setting_is_defined_but_from_its_definition():
    """No `flags.DEFINE_*` of a setting's name anywhere in albert_tf/, and none at all in the
    experiment commands: their every flag is a setting."""
    for path, tree in _sources():
        for call in _calls(tree, "DEFINE_"):
            name = call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) \
                else None
            assert name not in SETTINGS, f"{path} defines --{name} again"
            assert path not in EXPERIMENT_COMMANDS, f"{path} defines --{name} by hand"


def test_a_command_changes_a_default_only_to_another_value():
    """`define(..., name=value)`: a command's own default (the official script's) is never the
    definition's default written a second time."""
    seen = 0
    for path, tree in _sources():
        for call in _calls(tree, "define"):
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == "define"):
                continue
            for keyword in call.keywords:
                if keyword.arg in (None, "kinds", "notes"):
                    continue
                seen += 1
                value = ast.literal_eval(keyword.value) if isinstance(
                    keyword.value, ast.Constant) else object()
                assert value != SETTINGS[keyword.arg].default, \
                    f"{path}: {keyword.arg}={value!r} is its definition's default"
    assert seen >= 15
    for name, value in PRETRAINING_DEFAULTS.items():
        assert value != SETTINGS[name].default, name


def test_the_loops_defaults_are_the_official_pretraining_ones_from_the_definitions():
    """Every field of the loop's settings that is a setting takes its default through
    `official` (no literal), and the values are run_pretraining.py's."""
    from albert_tf.training import train_lib

    path = os.path.join(ROOT, "albert_tf", "training", "train_lib.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    literal = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)
                and n.name in ("TrainingConfig", "PretrainingConfig")):
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                name = "random_seed" if node.target.id == "seed" else node.target.id
                if name in SETTINGS and SETTINGS[name].default is not None:
                    if not (isinstance(node.value, ast.Call)
                            and node.value.func.id == "official"):
                        literal.append(name)
    assert literal == []
    defaults = {f.name: f.default for f in dataclasses.fields(train_lib.PretrainingConfig)}
    assert (defaults["train_batch_size"], defaults["learning_rate"], defaults["optimizer"],
            defaults["num_train_steps"], defaults["num_warmup_steps"],
            defaults["max_seq_length"], defaults["max_predictions_per_seq"],
            defaults["seed"]) == (4096, 0.00176, "lamb", 125000, 3125, 512, 20, 12345)


def test_the_loop_checks_a_setting_by_its_definitions_rule():
    from albert_tf import AlbertConfig
    from albert_tf.training.train_lib import TrainingConfig

    config = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=16,
                          num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    for changes, message in [
            ({"shuffle_window": 0}, "--shuffle_window must be a finite number > 0; got 0"),
            ({"input_shards": -1}, "--input_shards must be a finite number >= 0; got -1"),
            ({"seed": -5}, "--random_seed must be -1 (a fresh seed) or a seed >= 0; got -5"),
            ({"optimizer": "sgd"}, "--optimizer must be one of lamb, adamw; got 'sgd'"),
            ({"clip_norm": 0.0}, "clip_norm must be a finite number > 0; got 0.0"),
            ({"grad_accum_steps": 0}, "--grad_accum_steps must be a finite number > 0")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            TrainingConfig(albert_config=config, input_file="x", output_dir="y",
                           max_seq_length=16, **changes)
