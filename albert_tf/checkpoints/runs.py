"""A training run's `--output_dir` as its readers see it: what makes a directory a run, which
checkpoint a path names, the model kind the run recorded, its best checkpoint and its
evaluation, the casing its config.yaml records.

The writer of these files is `albert_tf.training.run_directory.RunDirectory` (it takes the
names from here); the readers are conversion (`--init_checkpoint`, `convert`), export, the
Python API and the commands' prediction. One place names the layout:

    OUTPUT_DIR/albert_config.json      the model's configuration
    OUTPUT_DIR/train_settings.json     what else the result depends on, with the model kind
    OUTPUT_DIR/config.yaml             the command's effective config
    OUTPUT_DIR/ckpt-N.*                the checkpoints
    OUTPUT_DIR/best/ckpt-best.*        the best evaluated checkpoint (official model.ckpt-best)
    OUTPUT_DIR/best/best_eval.json     its evaluation, written after it
"""

from __future__ import annotations

import glob
import json
import os
import re

import tensorflow as tf

from albert_tf.checkpoints.common import MODEL_KINDS, CheckpointError
from albert_tf.checkpoints.ours import CONFIG_FILE
from albert_tf.configs.yaml_file import CONFIG_NAME, SECTIONS, read_config_file
from albert_tf.models.kinds import registered

# A training run's settings beyond its input and model config (`TrainingRun.settings`): the
# loop writes it; readers of a run directory learn the model kind from it.
SETTINGS_FILE = "train_settings.json"
BEST_DIR = "best"
BEST_CHECKPOINT = "ckpt-best"
BEST_EVAL_FILE = "best_eval.json"


def best_prefix(output_dir: str) -> str:
    """The prefix of a run's best evaluated checkpoint (there or not)."""
    return os.path.join(output_dir, BEST_DIR, BEST_CHECKPOINT)


def has_best(output_dir: str) -> bool:
    return tf.io.gfile.exists(best_prefix(output_dir) + ".index")


def best_eval(output_dir: str) -> dict | None:
    """The evaluation of the run's best checkpoint (with its `global_step`), or None."""
    path = os.path.join(output_dir, BEST_DIR, BEST_EVAL_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def is_training_output_dir(path: str) -> bool:
    """A training loop's `--output_dir`: `albert_config.json` and `ckpt-N` (or `best/ckpt-best`)
    checkpoints (an official release directory has `model.ckpt-*` instead)."""
    return os.path.exists(os.path.join(path, CONFIG_FILE)) and bool(
        glob.glob(os.path.join(path, "ckpt-*.index")) or has_best(path))


def split_run_checkpoint(path: str) -> tuple[str, str] | None:
    """(run directory, checkpoint) for a path naming one checkpoint of a training run
    (`RUN/ckpt-N`, `RUN/best/ckpt-best`), so it is read as the run's model, not as an official
    TF1 checkpoint; None otherwise."""
    path = path.removesuffix(".index")
    directory, name = os.path.split(path.rstrip("/"))
    if name == BEST_CHECKPOINT and os.path.basename(directory) == BEST_DIR:
        directory = os.path.dirname(directory)
    elif not re.fullmatch(r"ckpt-\d+", name):
        return None
    if is_training_output_dir(directory) and tf.io.gfile.exists(path + ".index"):
        return directory, path
    return None


def training_run(path: str) -> tuple[str, str] | None:
    """(run directory, checkpoint) when `path` is a training loop's --output_dir (the run's
    model, `delivered_checkpoint`: a fine-tuning run's best evaluated checkpoint, else its
    latest; a pretraining run's latest; `DIR:best` its best) or one checkpoint of one
    (`RUN/ckpt-N`, `RUN/best/ckpt-best`); else None."""
    if path.endswith(":best") and is_training_output_dir(path[: -len(":best")]):
        return path[: -len(":best")], "best"
    if os.path.isdir(path) and is_training_output_dir(path):
        return path, delivered_checkpoint(path)
    return split_run_checkpoint(path)


def checkpoints_on_disk(directory: str) -> list[str]:
    """The prefixes of the loop's checkpoints in `directory` (ckpt-N with an .index), newest
    (largest N) first, whatever the state file (`checkpoint`) lists."""
    found = []
    for index in tf.io.gfile.glob(os.path.join(directory, "ckpt-*.index")):
        match = re.fullmatch(r"ckpt-(\d+)\.index", os.path.basename(index))
        if match:
            found.append((int(match.group(1)), index[: -len(".index")]))
    return [prefix for _, prefix in sorted(found, reverse=True)]


def latest_prefix(directory: str) -> str | None:
    """The run's latest checkpoint: the one its state file (`checkpoint`) names, or where that
    file or that checkpoint is gone (removed by hand, a partial copy), the newest ckpt-N on
    disk; None without one. (tf.train.latest_checkpoint logs an error for a named checkpoint
    that is gone.)"""
    state = tf.train.get_checkpoint_state(directory)
    if state is not None and state.model_checkpoint_path \
            and tf.io.gfile.exists(state.model_checkpoint_path + ".index"):
        return state.model_checkpoint_path
    return next(iter(checkpoints_on_disk(directory)), None)


def _key(path: str) -> str:
    return path if "://" in path else os.path.normpath(path)


def recorded_checkpoints(state=None) -> list[str]:
    """The checkpoints a state file (`state`, `tf.train.get_checkpoint_state`) records as saved:
    the latest, then the older ones it keeps, newest first. TensorFlow's CheckpointManager
    records a checkpoint once it is written whole, so a ckpt-N on disk that it does not record
    was cut short, or not yet recorded (or the state file was removed by hand)."""
    listed = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)] \
        if state else []
    return list(dict.fromkeys(_key(p) for p in listed))


def cut_short_saves(directory: str) -> list[str]:
    """The ckpt-N in `directory` that a save killed while writing left: its `.index` does not
    open and the state file (`checkpoint`) does not record it (`recorded_checkpoints`).
    TensorFlow renames the data files into place, writes the merged `.index` there, then
    records the checkpoint; a recorded checkpoint, or one whose index opens, was written whole
    and is not one of these."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None and tf.io.gfile.exists(os.path.join(directory, "checkpoint")):
        return []  # a state file that does not read: nothing is known to be unrecorded
    recorded = recorded_checkpoints(state)
    found = []
    for prefix in checkpoints_on_disk(directory):
        if _key(prefix) in recorded:
            continue
        try:
            tf.train.load_checkpoint(prefix)
        except Exception as e:  # noqa: BLE001 - TF raises several types for a bad index
            if _CUT_SHORT_INDEX.search(str(e)):  # not a read that failed (a network, a right)
                found.append(prefix)
    return found


# What TensorFlow says of an index file cut short (measured: truncated to 0-90%).
_CUT_SHORT_INDEX = re.compile(r"sstable|truncated|Data loss", re.IGNORECASE)


def resume_candidates(directory: str, state=None) -> list[str]:
    """The checkpoints a run may resume from, in the order to try them: those its state file
    records (`recorded_checkpoints`), then the ckpt-N on disk it does not list, newest first.
    Some may be gone."""
    candidates = recorded_checkpoints(state)
    return candidates + [p for p in checkpoints_on_disk(directory) if _key(p) not in candidates]


def checkpoint_prefix(output_dir: str, checkpoint: str = "latest") -> str:
    """The checkpoint prefix of a run that `checkpoint` names: "latest", "best" or a prefix;
    CheckpointError where there is none."""
    if checkpoint == "best":
        prefix = best_prefix(output_dir)
        if not has_best(output_dir):
            raise CheckpointError(f"{output_dir} has no best checkpoint ({prefix}); it is "
                                  "written when pretraining runs with --do_eval.")
    elif checkpoint == "latest":
        prefix = latest_prefix(output_dir)
        if not prefix:
            raise CheckpointError(f"{output_dir} has {CONFIG_FILE} but no checkpoint yet.")
    else:
        prefix = checkpoint
        if not tf.io.gfile.exists(prefix + ".index"):
            raise CheckpointError(f"No checkpoint {prefix} (expected {prefix}.index); "
                                  "--checkpoint takes latest, best or a checkpoint prefix.")
    return prefix


def delivered_checkpoint(output_dir: str) -> str:
    """"best" or "latest": the checkpoint that is a run's model where none is named. A
    fine-tuning run's best evaluated checkpoint where its evaluation kept one (the model its
    runner predicts with and exports, `--do_predict`, `--export_dir`), else its latest; a
    pretraining run's latest (its final encoder, as `--init_checkpoint` reads it; "best" names
    the other), its best where only that one is left."""
    if not has_best(output_dir):
        return "latest"
    pretraining = registered().get(run_model_kind(output_dir)[0]) is registered()["pretrainer"]
    return "latest" if pretraining and latest_prefix(output_dir) else "best"


def run_model_kind(output_dir: str) -> tuple[str, int | None]:
    """(model kind, num_labels) of the model a training `--output_dir` trains, from the
    settings the run recorded; a run of an earlier version (none recorded) is pretraining's."""
    path = os.path.join(output_dir, SETTINGS_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            settings = json.load(f)
        if isinstance(settings, dict) and settings.get("kind") in MODEL_KINDS:
            return settings["kind"], settings.get("num_labels")
    return "pretrainer", None


def recorded_run_setting(directory: str, name: str, kind: type):
    """The value of the flag `name` a run's config.yaml records (read as `--config_file` reads
    it: YAML 1.2, bounded) where it is a `kind`, else None."""
    file = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(file):
        return None
    recorded = read_config_file(file)
    for section in SECTIONS:
        values = recorded.get(section) if isinstance(recorded, dict) else None
        value = values.get(name) if isinstance(values, dict) else None
        if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
            return value
    return None


def recorded_run_casing(directory: str) -> bool | None:
    """The `--do_lower_case` a run's config.yaml records, else None."""
    return recorded_run_setting(directory, "do_lower_case", bool)
