"""The settings' definitions (`albert_tf.configs.definitions`) are the one place of each
setting's default, range, help, choices and section: the flags, the config files' sections, the
loop's defaults and its checks are made from them (issue 60). These tests walk the definitions,
the commands' source and the loop's dataclasses; none imports TensorFlow but the last two."""

from __future__ import annotations

import ast
import dataclasses
import math
import os
import re

import numpy as np
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
        "--random_seed must be -1 (a fresh seed) or a seed from 0 to 2^32 - 1"
    assert SETTINGS["random_seed"].problem(2 ** 32) is not None
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
    # --train_step alone: the fine-tuning names' defaults (no warmup), not run_pretraining's
    assert typed.trainer.schedule.num_warmup_steps == 0
    assert typed.trainer.keep_checkpoint_max == 5
    assert definitions.settings({}).trainer.schedule.num_warmup_steps == 3125
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


def _constants(tree) -> dict:
    """A module's top-level names bound to a literal (`DEFAULT_SEQ_LENGTH = 128`)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


def _value(node, constants, where):
    """The literal `node` stands for (a constant, a module constant); an expression this test
    cannot read fails it, so that a default cannot hide behind one."""
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        pytest.fail(f"{where}: a default this test cannot read ({ast.unparse(node)}); write "
                    "a literal or a module constant")


def test_a_command_changes_a_default_only_to_another_value():
    """`define(..., name=value)`: a command's own default (the official script's) is never the
    definition's default written a second time (a literal, a module constant or an expression
    alike: one it cannot read fails the test)."""
    seen = 0
    for path, tree in _sources():
        constants = _constants(tree)
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(
                call.func, "id", None)
            if name != "define" or path == os.path.join("commands", "flags.py"):
                continue
            for keyword in call.keywords:
                if keyword.arg in (None, "kinds", "notes", "flag_values"):
                    continue
                seen += 1
                value = _value(keyword.value, constants, f"{path}: {keyword.arg}")
                assert keyword.arg in SETTINGS, f"{path}: {keyword.arg} is no setting"
                assert value != SETTINGS[keyword.arg].default or (
                    value is None and SETTINGS[keyword.arg].default is None), \
                    f"{path}: {keyword.arg}={value!r} is its definition's default"
    assert seen >= 15
    for name, value in PRETRAINING_DEFAULTS.items():
        assert value != SETTINGS[name].default, name


# A library function's own keyword default that differs from its setting's, on purpose.
DIFFERENT_ON_PURPOSE = {
    ("training/optimization.py", "num_warmup_steps"): "a schedule warms up only when asked",
    ("training/trainer.py", "tpu"): "not the setting: whether the strategy is a TPU's",
    ("tasks/classification.py", "num_train_files"): "one file unless a command asks for more",
    ("export/serving_tasks.py", "max_seq_length"): "SQuAD's serving modules: run_squad's 384",
    ("api/text_classifier.py", "optimizer"): "compile(optimizer='auto'): AdamW, or a Keras one",
    ("layers/transformer.py", "remove_padding"): "a layer keeps the padded computation unless "
                                                  "the loop passes the flag",
    ("models/backbone.py", "remove_padding"): "likewise, the model's Performance switches",
    ("data/pretraining.py", "max_seq_length"): "create_pretraining_data's official 128",
    ("checkpoints/conversion.py", "checkpoint"): "a reader of one named checkpoint (its caller "
                                                 "picks the run's model: delivered_checkpoint)",
    ("checkpoints/runs.py", "checkpoint"): "likewise",
}


def test_a_library_functions_default_of_a_setting_is_the_definitions():
    """A parameter (or dataclass field) named as a setting, with a literal default, has the
    setting's default, or a difference listed with its reason (`DIFFERENT_ON_PURPOSE`): the
    Python API and the commands do not drift apart."""
    found, checked = set(), 0
    for path, tree in _sources():
        if path == os.path.join("configs", "definitions.py"):
            continue
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                positional = args.posonlyargs + args.args
                defaults = [None] * (len(positional) - len(args.defaults)) + args.defaults
                pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs,
                                                                   args.kw_defaults))
                pairs = [(arg.arg, value) for arg, value in pairs]
            elif isinstance(node, ast.ClassDef):
                pairs = [(s.target.id, s.value) for s in node.body
                         if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
            for name, value in pairs:
                if name not in SETTINGS or not isinstance(value, ast.Constant) \
                        or value.value is None:
                    continue
                checked += 1
                key = (path.replace(os.sep, "/"), name)
                if value.value != SETTINGS[name].default:
                    assert key in DIFFERENT_ON_PURPOSE, \
                        f"{path}:{node.lineno}: {name}={value.value!r}, the setting's is " \
                        f"{SETTINGS[name].default!r}"
                    found.add(key)
    assert checked >= 100 and found == set(DIFFERENT_ON_PURPOSE)


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
            ({"seed": -5}, "--random_seed must be -1 (a fresh seed) or a seed from 0 to 2^32 - 1; "
                           "got -5"),
            ({"optimizer": "sgd"}, "--optimizer must be one of lamb, adamw; got 'sgd'"),
            ({"clip_norm": 0.0}, "clip_norm must be a finite number > 0; got 0.0"),
            ({"grad_accum_steps": 0}, "--grad_accum_steps must be a finite number > 0"),
            ({"learning_rate": None}, "--learning_rate needs a value; got None"),
            ({"mixed_precision": None}, "--mixed_precision needs a value; got None"),
            ({"grad_accum_steps": None}, "--grad_accum_steps needs a value; got None"),
            ({"num_train_steps": 0.5}, "--num_train_steps must be an integer; got 0.5"),
            ({"shuffle_window": True}, "--shuffle_window must be an integer; got True")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            TrainingConfig(albert_config=config, input_file="x", output_dir="y",
                           max_seq_length=16, **changes)
    # numpy's numbers are numbers (a sweep's values), None a fresh seed
    cfg = TrainingConfig(albert_config=config, input_file="x", output_dir="y",
                         max_seq_length=np.int64(16), train_batch_size=np.int64(32),
                         num_train_steps=np.int32(10), learning_rate=np.float32(1e-3),
                         seed=None)
    assert cfg.train_batch_size == 32 and cfg.seed is None
    with pytest.raises(TypeError, match=r"takes the typed settings \(albert_tf.configs"):
        TrainingConfig.from_settings({"learning_rate": 1e-3}, config)


def test_a_definition_that_contradicts_itself_is_refused():
    for kind, default, options in [
            ("integer", 1.5, {}), ("integer", True, {}), ("enum", "c", {"choices": ("a", "b")}),
            ("enum", "a", {"choices": "ab"}), ("string", "x", {"rule": "positive"}),
            ("string", None, {"choices": ("a",)}), ("float", 1.0, {"rule": "no_such_rule"}),
            ("number", 1, {})]:
        with pytest.raises(ValueError, match="contradicts itself"):
            definitions.setting(kind, default, "help", **options)
    assert definitions.setting("enum", "a", "help", choices=("a", "b")).default == "a"


def test_a_warmup_that_outlasts_training_is_said():
    """Accepted, as official, and said (a walk found --train_step 4 --warmup_step 100 ending
    at 2e-6 of a peak 5e-5, and run_pretraining --num_train_steps 2 warming up throughout)."""
    from albert_tf import AlbertConfig
    from albert_tf.training.train_lib import TrainingConfig, warmup_note

    config = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=16,
                          num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)

    def note(**changes):
        return warmup_note(TrainingConfig(albert_config=config, input_file="x", output_dir="y",
                                          max_seq_length=16, **changes))

    assert note(num_train_steps=4, num_warmup_steps=100, learning_rate=5e-5) == (
        "note: the warmup (100 steps from step 0) does not end before the last of the 4 "
        "training steps: the learning rate never reaches its peak 5e-05 (--learning_rate).")
    assert note(num_train_steps=2) is not None  # run_pretraining's 3125 warmup steps
    assert note(num_train_steps=101, num_warmup_steps=100) is None
    assert note(num_train_steps=100, num_warmup_steps=0) is None
    assert note(num_train_steps=150, num_warmup_steps=100, start_warmup_step=50) is not None

