"""A training run's output directory: what is in it, who may write it, and the checks that keep
a rerun from mixing two runs.

`RunDirectory` owns OUTPUT_DIR for the loop (`albert_tf.training.train_lib.TrainingRun`): its lock
(`albert_tf.ownership`), the model configuration (`albert_config.json`) a checkpoint belongs to,
the data's SentencePiece model copied beside the checkpoints, the recorded settings
(`train_settings.json`) and input plan (`train_input.json`) a resumed run must match, the
evaluation files (`eval_results_step_N.json`), the best checkpoint (`best/`, kept by
`albert_tf.training.actions.KeepBest`) and the TensorBoard writers. Multi-worker: the chief writes
OUTPUT_DIR, worker N `OUTPUT_DIR/.worker-N` (saving is collective).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re

import tensorflow as tf

from albert_tf.checkpoints.common import CheckpointError, check_intact
from albert_tf.checkpoints.runs import (BEST_DIR, BEST_EVAL_FILE, SETTINGS_FILE, best_eval,
                                       best_prefix, checkpoints_on_disk, cut_short_saves,
                                       latest_prefix, resume_candidates)
from albert_tf.config import AlbertConfig
from albert_tf.configs.definitions import ALIASES
from albert_tf.input_pipeline import DataMismatchError, InputPlan, list_files
from albert_tf.ownership import OutputLock
from albert_tf.paths import atomic_write
from albert_tf.records import read_sidecar
from albert_tf.tokenization import Tokenizer

INPUT_PLAN_FILE = "train_input.json"  # the run's InputPlan, written when it starts


class OutputDirMismatchError(ValueError):
    """--output_dir holds another run (another model, settings or input)."""


def write_text_atomically(path: str, text: str) -> None:
    """Writes `text` to `path` so that a reader (another worker, a rerun after a crash) sees the
    old file or the new one, never a truncated one; an unchanged file is left untouched
    (tf.io.gfile: OUTPUT_DIR may be a bucket)."""
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            if f.read() == text:
                return
    with atomic_write(path) as f:
        f.write(text)


def write_dir_of(output_dir: str, worker_index: int, is_chief: bool) -> str:
    """Where a worker of a run writes: the chief `output_dir`, worker N `output_dir/.worker-N`
    (saving is collective under MultiWorkerMirroredStrategy: every worker saves)."""
    return output_dir if is_chief else os.path.join(output_dir, f".worker-{worker_index}")


def remove_unfinished_checkpoints(directory: str) -> None:
    """Removes `ckpt-N_temp` directories that a killed save left (TensorFlow writes a sharded
    checkpoint there and renames its files into place); called by the directory's lock
    holder, when no save of another process can be running."""
    if not tf.io.gfile.isdir(directory):
        return
    for name in tf.io.gfile.listdir(directory):
        name = name.rstrip("/")
        if re.fullmatch(r"ckpt-(\d+|best)_temp(_[0-9a-f]+)?", name):
            tf.io.gfile.rmtree(os.path.join(directory, name))


def remove_cut_short_saves(directory: str, log=print) -> None:
    """Removes each ckpt-N whose `.index` is cut short and that no state file records
    (`cut_short_saves`: TensorFlow writes the merged index in place, then records the
    checkpoint), said in a note. A recorded checkpoint, or one whose index opens, is never
    removed: a damaged one is passed over or refused by `RunDirectory.resume_checkpoint`."""
    for prefix in cut_short_saves(directory):
        for name in tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*"):
            tf.io.gfile.remove(name)
        log(f"Note: {prefix}.index is cut short and no `checkpoint` state file records it: a "
            "save the stopped run did not finish, removed (the run saves that step again).")


def dataset_file(record_file: str, name: str) -> str | None:
    """The file `name` (from the sidecar of `record_file`) resolved against the dataset's
    directory, or None when it lies outside it (an absolute path elsewhere, `..`, a symbolic
    link out): paths read from data files are not followed out of their dataset."""
    directory = os.path.dirname(record_file)
    remote = "://" in record_file
    path = name if (remote and "://" in name) or (not remote and os.path.isabs(name)) \
        else f"{directory}/{name}" if remote else os.path.join(directory, name)
    if remote:
        inside = path.startswith(directory.rstrip("/") + "/") and "/../" not in path \
            and "/" not in path[len(directory.rstrip("/")) + 1:]
        return path if inside else None
    real_dir = os.path.realpath(directory)
    return path if os.path.dirname(os.path.realpath(path)) == real_dir else None


def _sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _refuse_other_settings(output_dir: str, saved: dict, mine: dict) -> None:
    """OutputDirMismatchError naming each of `mine` that the run at `output_dir` recorded
    (`saved`) otherwise."""
    official = {name: alias for alias, name in ALIASES.items()}
    differences = [f"{k}" + (f" (run_classifier, run_race, run_tagging: --{official[k]})"
                             if k in official else "") + f": {saved.get(k)!r} there, {v!r} now"
                   for k, v in mine.items() if saved.get(k) != v]
    if differences:
        raise OutputDirMismatchError(
            f"--output_dir {output_dir} holds a run with other settings ("
            f"{'; '.join(differences)}); resuming it would continue that run, not "
            "train this one. Rerun with the original flags to resume (or with "
            "--nodo_train to only evaluate it), or use a new --output_dir "
            f"(--init_checkpoint {output_dir} starts from its weights).")


def refuse_a_changed_run(output_dir: str, mine: dict) -> None:
    """Before a command writes anything into `output_dir` (its features): when the directory
    holds a run to resume (a checkpoint and its `train_settings.json`), the settings of
    `mine` it records must be these, or the command stops here with the message
    `RunDirectory.check_settings` gives later (a refused rerun with another learning rate
    must not first rewrite the run's features). Anything else is left to that check."""
    path = os.path.join(output_dir, SETTINGS_FILE)
    if not tf.io.gfile.exists(path) or latest_prefix(output_dir) is None:
        return
    try:
        saved = _read_json(path)
    except ValueError:
        return
    if isinstance(saved, dict):
        _refuse_other_settings(output_dir, saved, mine)


def _read_json(path: str):
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


class RunDirectory:
    """OUTPUT_DIR of one run as this process sees it (`is_chief`, `worker_index`); `log`
    prints the notes a user should see."""

    def __init__(self, output_dir: str, worker_index: int = 0, is_chief: bool = True,
                 log=print):
        self.output_dir = output_dir
        self.is_chief = is_chief
        self.log = log
        self.write_dir = write_dir_of(output_dir, worker_index, is_chief)
        self.lock = OutputLock(self.write_dir, "--output_dir", is_dir=True,
                               fix="choose another --output_dir")
        self._writers = {}

    def path(self, *names) -> str:
        return os.path.join(self.output_dir, *names)

    def latest_checkpoint(self) -> str | None:
        """The chief's latest checkpoint (every worker holds the same model), else this
        worker's own; where the state file (`checkpoint`) is gone, the newest ckpt-N on disk
        (`latest_prefix`)."""
        return latest_prefix(self.output_dir) or latest_prefix(self.write_dir)

    def resume_checkpoint(self) -> str | None:
        """The checkpoint a resumed run restores: the newest intact one (every tensor read back,
        `check_intact`) of those its state file lists and those on disk, None for a fresh run.
        A damaged later one (a disk that filled, a copy cut short) or one removed by hand is
        passed over with a one-line note naming it and the checkpoint resumed instead; a
        damaged one stays until the run saves that step again. A state file removed by hand
        is said too (the run resumes from the newest ckpt-N on disk; it started afresh beside
        them before), and so is one whose checkpoints are all gone (a fresh start). None
        intact is a CheckpointError naming the damaged files."""
        latest = self.latest_checkpoint()
        if latest is None:
            state = tf.train.get_checkpoint_state(self.write_dir)
            if state is not None and state.all_model_checkpoint_paths:
                names = ", ".join(map(os.path.basename, state.all_model_checkpoint_paths))
                self.log(f"Note: {self.write_dir}'s `checkpoint` state file lists {names}, "
                         "none of which is on disk: the run starts from step 0.")
            return None
        directory = os.path.dirname(latest)
        state = tf.train.get_checkpoint_state(directory)
        if state is None:
            self.log(f"Note: {directory} has no `checkpoint` state file (removed?); the run "
                     "resumes from the newest intact ckpt-N on disk.")
        damaged, gone = [], []
        for prefix in resume_candidates(directory, state):
            if not tf.io.gfile.exists(prefix + ".index"):
                gone.append(prefix)  # listed in the state file, removed by hand since
                continue
            try:
                check_intact(prefix)
            except CheckpointError as e:
                damaged.append(str(e).split(": the checkpoint")[0])
                continue
            if damaged or gone:
                what = "; ".join(damaged + [f"{p} is gone (its .index is missing)"
                                            for p in gone])
                self.log(f"Note: {what}; resuming from {prefix}, the newest intact "
                         "checkpoint.")
            return prefix
        raise CheckpointError(
            f"--output_dir {self.output_dir} has no intact checkpoint to resume: "
            + "; ".join(damaged + [f"{p} is gone" for p in gone])
            + ". Restore a copy of the run, or start a new --output_dir "
            "(--init_checkpoint can take the weights of another run).")

    def recover_state_file(self) -> None:
        """Where this process's checkpoint directory holds ckpt-N files but its `checkpoint`
        state file is gone (a run stopped between writing its first checkpoint and recording
        it, a file removed by hand, a partial copy), a state file listing them is written (the
        newest the latest; the text TensorFlow's CheckpointManager reads), so the run resumes
        from it and `keep_checkpoint_max` prunes them again; said in a note. Before the
        checkpoint manager is made."""
        on_disk = checkpoints_on_disk(self.write_dir)
        if not on_disk or tf.train.get_checkpoint_state(self.write_dir) is not None:
            return
        names = [os.path.basename(p) for p in on_disk]  # relative: read back joined with it
        # With their times (the index files'), so the manager's keep_checkpoint_max prunes
        # them: it keeps a checkpoint recorded without a time for good.
        times = [tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9 for p in reversed(on_disk)]
        write_text_atomically(os.path.join(self.write_dir, "checkpoint"), "".join(
            [f'model_checkpoint_path: "{names[0]}"\n']
            + [f'all_model_checkpoint_paths: "{name}"\n' for name in reversed(names)]
            + [f"all_model_checkpoint_timestamps: {t:.6f}\n" for t in times]))
        self.log(f"Note: {self.write_dir} had no `checkpoint` state file (a run stopped before "
                 f"it recorded its checkpoint, or the file was removed); it is written again "
                 f"for the checkpoints on disk: {', '.join(reversed(names))} (the latest).")

    def remove_unfinished(self, cut_short: bool = True) -> None:
        """What a killed save leaves, removed by the directory's lock holder before anything
        reads the run: the `ckpt-N_temp` directories and, with `cut_short`, the saves cut
        short (`remove_cut_short_saves`)."""
        remove_unfinished_checkpoints(self.write_dir)
        if self.is_chief:
            remove_unfinished_checkpoints(self.path(BEST_DIR))
        if cut_short:
            remove_cut_short_saves(self.write_dir, self.log)

    def check_model(self, albert_config: AlbertConfig, input_file: str) -> None:
        """Refuses checkpoints of another model configuration (or of an unknown one); the
        chief records this run's `albert_config.json` and copies the data's SentencePiece
        model beside it."""
        tf.io.gfile.makedirs(self.output_dir)
        path = self.path("albert_config.json")
        has_checkpoint = latest_prefix(self.output_dir) is not None
        if tf.io.gfile.exists(path):
            existing = AlbertConfig.from_dict(_read_json(path))
            if has_checkpoint and existing != albert_config:
                diff = {k: (v, getattr(albert_config, k))
                        for k, v in dataclasses.asdict(existing).items()
                        if v != getattr(albert_config, k)}
                raise OutputDirMismatchError(
                    f"--output_dir {self.output_dir} holds checkpoints of another model "
                    f"configuration (differences, theirs vs yours: {diff}); use a new "
                    "--output_dir or the matching --albert_config_file.")
        elif has_checkpoint:
            raise OutputDirMismatchError(
                f"--output_dir {self.output_dir} holds checkpoints but no albert_config.json; "
                "refusing to guess which model they belong to. Use a new --output_dir.")
        if self.is_chief:
            # Other workers read this file as the chief starts: written whole or not at all.
            write_text_atomically(path, albert_config.to_json_string())
            self.copy_sentencepiece_model(input_file)

    def copy_sentencepiece_model(self, input_file: str) -> None:
        """Puts the data's SentencePiece model (named in the TFRecord sidecars) beside the
        checkpoints, so the output directory is a complete model for export and fine-tuning.

        A path read from a data file is followed only inside the dataset's directory (where
        `albert_tf.data.create_pretraining_data` puts the model) and only to a file with the
        checksum the sidecar records: a sidecar naming `~/.ssh/id_rsa` must not copy the key into an
        output directory, which is often a shared bucket. Anything else is left for
        `--spm_model_file` of the export, with a note."""
        try:
            files = list_files(input_file)
        except DataMismatchError:
            return  # reported with its full message when the dataset is built
        meta = read_sidecar(files[0])
        if not meta or not meta.get("spm_model_file"):
            return  # official tooling writes no sidecar; export then takes --spm_model_file
        source = dataset_file(files[0], str(meta["spm_model_file"]))
        if source is None:
            self.log(f"Note: the sidecar of {files[0]} names the SentencePiece model "
                     f"{meta['spm_model_file']}, outside the dataset's directory; it is not "
                     "copied beside the checkpoints. Pass --spm_model_file to the export.")
            return
        if not tf.io.gfile.exists(source):
            return
        if meta.get("spm_model_sha256") != _sha256_of(source):
            self.log(f"Note: {source} does not have the checksum the sidecar of {files[0]} "
                     "records (spm_model_sha256); it is not copied beside the checkpoints.")
            return
        if "://" not in source and os.stat(source).st_nlink > 1:
            self.log(f"Note: {source} has other names (hard links): it may be a file from "
                     "outside the dataset, so it is not copied beside the checkpoints. Pass "
                     "--spm_model_file to the export.")
            return
        try:
            Tokenizer(source)  # a SentencePiece model with the official special pieces
        except Exception:  # noqa: BLE001 - any file that does not load is not copied
            self.log(f"Note: {source} is not a SentencePiece model of ours; it is not copied "
                     "beside the checkpoints.")
            return
        target = self.path(os.path.basename(source))
        if not tf.io.gfile.exists(target):
            tf.io.gfile.copy(source, target)

    def check_settings(self, mine: dict, resumed: bool) -> None:
        """Refuses to resume a run whose recorded settings (`train_settings.json`) differ from
        `mine`, naming each difference: a rerun with another learning rate or optimizer would
        otherwise continue the first run and report its numbers. A fresh run records them."""
        path = self.path(SETTINGS_FILE)
        if resumed and tf.io.gfile.exists(path):
            try:
                saved = _read_json(path)
            except ValueError:
                saved = None
            if not isinstance(saved, dict):
                raise OutputDirMismatchError(
                    f"{path} is damaged (not a JSON object); this run cannot tell whether it "
                    "may resume the checkpoints beside it. Use a new --output_dir (with "
                    "--init_checkpoint for the weights).")
            _refuse_other_settings(self.output_dir, saved, mine)
            return
        if resumed:
            self.log(f"Note: {self.output_dir} has no {SETTINGS_FILE} (a run of an earlier "
                     "version); its settings are recorded now, unchecked.")
        if self.is_chief:
            write_text_atomically(path, json.dumps(mine, indent=1))

    def saved_input_plan(self, resumed: bool) -> InputPlan | None:
        """The `InputPlan` the run recorded when it started (`train_input.json`), for a
        resumed run; None for a fresh one (or a run of an earlier version, with a note)."""
        path = self.path(INPUT_PLAN_FILE)
        if resumed and tf.io.gfile.exists(path):
            return InputPlan.from_dict(_read_json(path))
        if resumed:
            self.log(f"Note: {self.output_dir} has no {INPUT_PLAN_FILE} (a run of an earlier "
                     "version); the input continues from the step in this version's order.")
        return None

    def check_input_plan(self, plan: InputPlan, saved: InputPlan | None) -> None:
        """A resumed run's plan must equal the one it started with, or the batches after the
        checkpoint would not be the ones the uninterrupted run reads; a fresh plan is
        recorded."""
        if saved is not None:
            differences = saved.differences(plan)
            if differences:
                raise DataMismatchError(
                    f"--output_dir {self.output_dir} holds a run whose training input differs "
                    f"from this command's ({'; '.join(differences)}), so resuming would not "
                    "read the batches the run would have read. Rerun with the original input "
                    "and flags, or start a new --output_dir (--init_checkpoint can take the "
                    "weights).")
        elif self.is_chief:
            write_text_atomically(self.path(INPUT_PLAN_FILE),
                                  json.dumps(plan.to_dict(), indent=1))

    def eval_file(self, step: int) -> str:
        return self.path(f"eval_results_step_{step}.json")

    def has_eval(self, step: int) -> bool:
        return tf.io.gfile.exists(self.eval_file(step))

    def write_eval(self, step: int, metrics: dict) -> None:
        """The evaluation at `step`, written last, whole or not at all: a job that checks for
        this file to know that the evaluation (and the best checkpoint it may replace) is
        complete can trust it."""
        write_text_atomically(self.eval_file(step), json.dumps(metrics, indent=2))

    def best_prefix(self) -> str:
        return best_prefix(self.output_dir)

    def best_metrics(self) -> dict | None:
        return best_eval(self.output_dir)

    def write_best(self, model, metrics: dict) -> None:
        tf.io.gfile.makedirs(self.path(BEST_DIR))
        tf.train.Checkpoint(model=model).write(self.best_prefix())
        with atomic_write(self.path(BEST_DIR, BEST_EVAL_FILE)) as f:  # after the checkpoint
            json.dump(metrics, f, indent=2)

    def writer(self, kind: str):
        """The TensorBoard writer of OUTPUT_DIR/`kind` ("train", "eval"), made when first
        asked for; a no-op writer on the other workers."""
        if kind not in self._writers:
            self._writers[kind] = (tf.summary.create_file_writer(self.path(kind))
                                   if self.is_chief else tf.summary.create_noop_writer())
        return self._writers[kind]
