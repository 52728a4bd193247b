"""The one training loop, for every task (`albert_tf.tasks`: pretraining, fine-tuning), under any
`tf.distribute` strategy (injected).

One step, per replica: forward and backward over `grad_accum_steps` micro-batches, losses
normalised by the task's *global* totals (pretraining: the all-reduced masked-LM weight count
and the global batch size), so the per-replica losses sum to exactly the single-device loss;
gradients summed over micro-batches and replicas; global norm; clipping at `clip_norm`; a
finiteness gate; the optimizer update. `iterations_per_loop` steps run inside one `tf.function`
call (TPU's `iterations_per_loop`).

Input: each input pipeline (worker or TPU host) reads its own shards of a deterministic stream
(`albert_tf.input_pipeline.InputPlan`, saved as `train_input.json`) whose position is a function
of the step. Checkpoints (`tf.train.CheckpointManager`, every `save_checkpoints_steps`, keeping
`keep_checkpoint_max`) hold the model and the optimizer (slots and step); a killed run restarted
with the same arguments seeks the input to the restored step and continues exactly. With
multi-worker or TPU strategies a `PreemptionCheckpointHandler` saves on preemption; otherwise
SIGTERM or Ctrl-C saves a checkpoint at the next loop boundary and stops (the command then exits
with 128 + the signal's number, so `train && export` does not go on). A non-finite loss or gradient
stops the run: the step is not applied, a checkpoint of the last good step is saved, and the
error names the step; so does an unreadable input file, named. With `do_eval`, each checkpoint
is evaluated; the one with the best value of the task's `best_metric` (pretraining:
`masked_lm_accuracy`) is kept under `best/` (the official `-best`), and each evaluation writes a
JSON metrics file. TensorBoard summaries go to `output_dir/{train,eval}`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import signal
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from albert_tf.backbone import set_recompute, set_remove_padding, set_use_einsum
from albert_tf.checkpoints import model_kind
from albert_tf.checkpoints.conversion import SETTINGS_FILE  # what else a result depends on
from albert_tf.config import AlbertConfig
from albert_tf.distribute import worker_layout
from albert_tf.loss_scale import DynamicLossScale
from albert_tf.input_pipeline import (DataMismatchError, InputPlan, find_unreadable_files,
                                     list_files, ordered_dataset, record_counts, stream_dataset)
from albert_tf.optimization import create_optimizer
from albert_tf.ownership import OutputLock
from albert_tf.records import read_sidecar, temporary_name
from albert_tf.tasks import PretrainingTask, Task
from albert_tf.tokenization import Tokenizer

SUM = tf.distribute.ReduceOp.SUM
# --mixed_precision: the Keras dtype policy of each (float16 adds the loss scale).
PRECISIONS = {"float32": None, "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
INPUT_PLAN_FILE = "train_input.json"  # the run's InputPlan, written when it starts


class NonFiniteLossError(RuntimeError):
    """Training produced a non-finite loss or gradient."""


class OutputDirMismatchError(ValueError):
    """`output_dir` holds a run of another model configuration."""


class CorruptInputError(RuntimeError):
    """A training input file cannot be read; a consistent checkpoint was saved first."""


def _is_input_error(error) -> bool:
    """Errors of reading the training input: a damaged record (DataLossError), a corrupt but
    complete record (parsing), a file with another record count than planned."""
    if isinstance(error, tf.errors.DataLossError):
        return True
    message = error.message
    if isinstance(error, tf.errors.FailedPreconditionError):
        return "expected to contain" in message
    return "parse" in message.lower() and ("Example" in message or "Feature" in message)


@dataclasses.dataclass
class TrainingConfig:
    """Settings of the loop, for any task (official `run_pretraining.py` / `run_classifier.py`
    flag names; the defaults are pretraining's)."""

    albert_config: AlbertConfig
    input_file: str
    output_dir: str
    eval_input_file: str | None = None
    init_checkpoint: str | None = None
    init_from_group0: bool = False
    max_seq_length: int = 512
    train_batch_size: int = 4096
    eval_batch_size: int = 64
    optimizer: str = "lamb"
    learning_rate: float = 0.00176
    poly_power: float = 1.0
    start_warmup_step: int = 0
    num_train_steps: int = 125000
    num_warmup_steps: int = 3125
    save_checkpoints_steps: int = 5000
    keep_checkpoint_max: int = 5
    iterations_per_loop: int = 1000
    do_train: bool = True
    do_eval: bool = False
    max_eval_steps: int = 100
    mixed_precision: str = "float32"
    grad_accum_steps: int = 1
    jit_compile: bool = False
    # The encoder's per-token matmuls on each batch's real tokens only (`AlbertEncoder`'s
    # remove_padding): fine-tuning batches padded to max_seq_length cost their tokens. Applies
    # where shapes may vary: not under TPUStrategy and not with jit_compile.
    remove_padding: bool = True
    # Keep only each encoder layer's input for the backward pass and recompute the rest there
    # (`AlbertEncoder`'s recompute): less peak memory for about one more forward pass (figures
    # in docs/benchmarks.md, "Training memory"). Same outputs and gradients.
    recompute: bool = False
    # Attention as tf.einsum (the official flag) instead of batched matmuls: same values.
    use_einsum: bool = False
    clip_norm: float = 1.0
    weight_decay_rate: float = 0.01
    # Model initialization and input shuffling. Fixed by default (the official data script's
    # 12345), so the same command gives the same model; None draws a fresh seed.
    seed: int | None = 12345
    # The training stream (`albert_tf.input_pipeline.InputPlan`): records are permuted within
    # consecutive windows of this many; the files are dealt into `input_shards` streams (0: one
    # per input pipeline, i.e. worker or TPU host). The data order depends on these, never on
    # the hardware.
    shuffle_window: int = 10000
    input_shards: int = 0
    verbose: bool = True

    # Official flag names that differ from the field's (fine-tuning runners).
    FLAG_ALIASES = {"train_step": "num_train_steps", "warmup_step": "num_warmup_steps",
                    "num_keep_checkpoint": "keep_checkpoint_max"}

    @classmethod
    def from_settings(cls, settings, albert_config, **overrides):
        """The settings from a command's experiment config (`albert_tf.experiment`,
        `ExperimentConfig.flat()`: {flag name: value}): every field whose flag (or its
        official alias) the command has, `random_seed` -1 as a fresh seed; `overrides`
        (computed values: input files, steps from epochs) win."""
        given = dict(settings)
        values = {cls.FLAG_ALIASES.get(name, name): value for name, value in given.items()}
        if "random_seed" in given:
            values["seed"] = None if given["random_seed"] == -1 else given["random_seed"]
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in values.items() if k in fields and k != "albert_config"}
        return cls(albert_config=albert_config, **dict(kwargs, **overrides))

    def problems(self) -> list[str]:
        """What is wrong with these settings (each with the flag to fix)."""
        problems = []
        for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
                     "save_checkpoints_steps", "keep_checkpoint_max", "iterations_per_loop",
                     "max_eval_steps", "grad_accum_steps", "shuffle_window"):
            if getattr(self, name) < 1:
                problems.append(f"--{name} must be at least 1; got {getattr(self, name)}")
        if self.train_batch_size % self.grad_accum_steps:
            problems.append(f"--train_batch_size={self.train_batch_size} must be a multiple of "
                            f"--grad_accum_steps={self.grad_accum_steps}")
        if self.mixed_precision not in PRECISIONS:
            problems.append(f"--mixed_precision must be one of {', '.join(PRECISIONS)}; got "
                            f"{self.mixed_precision!r}")
        length = self.albert_config.sequence_length_problem(self.max_seq_length)
        if length:
            problems.append(length)
        for name, low, inclusive in (("learning_rate", 0.0, False), ("poly_power", 0.0, True),
                                     ("weight_decay_rate", 0.0, True),
                                     ("clip_norm", 0.0, False)):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value)
                    and (value >= low if inclusive else value > low)):
                problems.append(f"--{name} must be a finite number {'>=' if inclusive else '>'} "
                                f"{low:g}; got {value!r}")
        for name in ("train_batch_size", "eval_batch_size"):
            if getattr(self, name) * self.max_seq_length >= 2 ** 31:
                problems.append(f"--{name}={getattr(self, name)} x --max_seq_length="
                                f"{self.max_seq_length} tokens exceed what one batch can index "
                                "(2^31); use a smaller batch (--grad_accum_steps splits a "
                                "large one)")
        for name in ("num_warmup_steps", "start_warmup_step"):
            if getattr(self, name) < 0:
                problems.append(f"--{name} must be 0 or more; got {getattr(self, name)}")
        if self.input_shards < 0:
            problems.append(f"--input_shards must be 0 (one per input pipeline) or more; got "
                            f"{self.input_shards}")
        if not (self.do_train or self.do_eval):
            problems.append("At least one of --do_train and --do_eval must be set.")
        return problems

    def __post_init__(self):
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))


@dataclasses.dataclass
class PretrainingConfig(TrainingConfig):
    """Settings of a pretraining run (official `run_pretraining.py` flag names)."""

    max_predictions_per_seq: int = 20
    masked_lm_budget: float = 0.0  # official flag; only offline masking (0) is supported

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.masked_lm_budget:
            problems.append(
                f"--masked_lm_budget={self.masked_lm_budget}: online masking (masking n-grams "
                "while training, from token_boundary) is not supported; generate masked "
                "examples offline with python -m data.create_pretraining_data and leave "
                "--masked_lm_budget at 0 (the official default)")
        return problems


def _log(cfg, message):
    if cfg.verbose:
        print(message, flush=True)


def _write_text_atomically(path: str, text: str) -> None:
    """Writes `text` to `path` so that a reader (another worker, a rerun after a crash) sees the
    old file or the new one, never a truncated one; an unchanged file is left untouched."""
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            if f.read() == text:
                return
    tmp = temporary_name(path, str(os.getpid()))
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)


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


def _format_duration(seconds):
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


class TrainingRun:
    """Builds the task's model, the optimizer, data and checkpoints inside `strategy.scope()` and
    runs training and/or evaluation. `run()` returns a summary dict.

    `cfg` holds the loop's settings (`TrainingConfig`); `task` supplies the model, schema, loss
    and metrics."""

    def __init__(self, task: Task, cfg: TrainingConfig,
                 strategy: tf.distribute.Strategy | None = None):
        self.task = task
        self.cfg = cfg
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self.is_chief = bool(getattr(self.strategy.extended, "should_checkpoint", True))
        self.num_workers, self.worker_index = worker_layout(self.strategy)
        # Input pipelines: one per worker, or per host of a TPU system.
        self.input_pipelines = (self.strategy.extended.num_hosts
                                if isinstance(self.strategy, tf.distribute.TPUStrategy)
                                else self.num_workers)
        self.local_replicas = self.replicas // self.num_workers
        if cfg.train_batch_size % (self.replicas * cfg.grad_accum_steps):
            raise ValueError(
                f"--train_batch_size={cfg.train_batch_size} must be a multiple of replicas "
                f"({self.replicas}) x --grad_accum_steps ({cfg.grad_accum_steps}).")
        if cfg.do_eval and cfg.eval_batch_size % self.replicas:
            raise ValueError(f"--eval_batch_size={cfg.eval_batch_size} must be a multiple of the "
                             f"{self.replicas} replicas.")
        # Multi-worker: saving is collective, so every worker saves; the chief to output_dir,
        # the others to output_dir/.worker-N. Each holds the lock of the directory it writes
        # (`albert_tf.ownership`): a second run into the same --output_dir is refused while
        # this one lives, and taken over once it is dead.
        self.write_dir = write_dir_of(cfg.output_dir, self.worker_index, self.is_chief)
        self._lock = OutputLock(self.write_dir, "--output_dir", is_dir=True,
                                fix="choose another --output_dir")
        self._lock.acquire()
        try:
            self._build(task, cfg)
        except BaseException:
            self._lock.release()
            raise

    def _build(self, task, cfg):
        self._check_host_memory()
        self._check_output_dir()
        if cfg.seed is not None:  # initialization (and, in the input pipeline, shuffling)
            keras.utils.set_random_seed(cfg.seed)
        with self.strategy.scope():
            self.model = task.build_model(dtype=PRECISIONS[cfg.mixed_precision])
            set_remove_padding(self.model, cfg.remove_padding and not cfg.jit_compile
                               and not isinstance(self.strategy, tf.distribute.TPUStrategy))
            set_recompute(self.model, cfg.recompute)
            set_use_einsum(self.model, cfg.use_einsum)
            self.optimizer = create_optimizer(
                cfg.optimizer, cfg.learning_rate, cfg.num_train_steps, cfg.num_warmup_steps,
                cfg.poly_power, cfg.start_warmup_step, cfg.weight_decay_rate)
            # Keras 3 under tf.distribute: slots must be built inside the scope.
            self.optimizer.build(self.model.trainable_variables)
            self.bad_step = tf.Variable(-1, dtype=tf.int64, trainable=False,
                                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            # float16: the loss scale (saved in the checkpoint; `albert_tf.loss_scale`).
            self.loss_scale = (DynamicLossScale() if cfg.mixed_precision == "float16"
                               else None)
            # Data seed: every worker must use the same. A variable created in the scope starts
            # with the chief's value on every worker.
            drawn = cfg.seed if cfg.seed is not None else int.from_bytes(os.urandom(4),
                                                                         "little") >> 1
            self._data_seed = int(tf.Variable(drawn, dtype=tf.int64, trainable=False).numpy())
        # Input: each input pipeline (worker or TPU host) reads its own shards of a
        # deterministic stream (`InputPlan`) and feeds its local replicas
        # (`distribute_datasets_from_function`). The position is a function of the step, so
        # checkpoints hold the model and optimizer only, and a restart seeks to the step
        # (`_position_input`).
        self.train_iterator = None
        saved = {} if self.loss_scale is None else {"loss_scale": self.loss_scale}
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, **saved)
        self.plan = None
        if cfg.do_train:  # checked now, so that bad input fails before anything runs
            has_checkpoint = bool(tf.train.latest_checkpoint(cfg.output_dir)
                                  or tf.train.latest_checkpoint(self.write_dir))
            self._check_settings(resumed=has_checkpoint)
            self.plan = self._input_plan(resumed=has_checkpoint)
        remove_unfinished_checkpoints(self.write_dir)
        if self.is_chief:
            remove_unfinished_checkpoints(os.path.join(cfg.output_dir, "best"))
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.write_dir, max_to_keep=cfg.keep_checkpoint_max,
            checkpoint_name="ckpt")
        self._train_loop = None
        self._eval_step = None
        self._stop_requested = False

    # -----------------------------------------------------------------------------------------
    def _check_host_memory(self):
        """Refuses a batch whose input alone cannot fit in this host's memory (a lower bound:
        each host's share of the batch, three int64 token features, four copies on the way
        from the file to the device), instead of a run that swaps for hours and then dies."""
        cfg = self.cfg
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return
        for name in ("train_batch_size", "eval_batch_size"):
            per_host = getattr(cfg, name) // max(self.input_pipelines, 1)
            needed = per_host * cfg.max_seq_length * 3 * 8 * 4
            if needed > memory:
                raise ValueError(
                    f"--{name}={getattr(cfg, name)} at --max_seq_length={cfg.max_seq_length} "
                    f"needs at least {needed / 2 ** 30:,.0f} GiB of host memory for its input "
                    f"alone ({per_host:,} examples on this host); it has "
                    f"{memory / 2 ** 30:,.0f} GiB. Use a smaller batch.")

    def _check_output_dir(self):
        cfg = self.cfg
        tf.io.gfile.makedirs(cfg.output_dir)
        path = os.path.join(cfg.output_dir, "albert_config.json")
        has_checkpoint = tf.train.latest_checkpoint(cfg.output_dir) is not None
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                existing = AlbertConfig.from_dict(json.load(f))
            if has_checkpoint and existing != cfg.albert_config:
                diff = {k: (v, getattr(cfg.albert_config, k))
                        for k, v in dataclasses.asdict(existing).items()
                        if v != getattr(cfg.albert_config, k)}
                raise OutputDirMismatchError(
                    f"--output_dir {cfg.output_dir} holds checkpoints of another model "
                    f"configuration (differences, theirs vs yours: {diff}); use a new "
                    "--output_dir or the matching --albert_config_file.")
        elif has_checkpoint:
            raise OutputDirMismatchError(
                f"--output_dir {cfg.output_dir} holds checkpoints but no albert_config.json; "
                "refusing to guess which model they belong to. Use a new --output_dir.")
        if self.is_chief:
            # Other workers read this file as the chief starts: written whole or not at all.
            _write_text_atomically(path, cfg.albert_config.to_json_string())
            self._copy_sentencepiece_model()

    def _copy_sentencepiece_model(self):
        """Puts the data's SentencePiece model (named in the TFRecord sidecars) beside the
        checkpoints, so the output directory is a complete model for export and fine-tuning.

        A path read from a data file is followed only inside the dataset's directory (where
        `data.create_pretraining_data` puts the model) and only to a file with the checksum
        the sidecar records: a sidecar naming `~/.ssh/id_rsa` must not copy the key into an
        output directory, which is often a shared bucket. Anything else is left for
        `--spm_model_file` of the export, with a note."""
        cfg = self.cfg
        try:
            files = list_files(cfg.input_file)
        except DataMismatchError:
            return  # reported with its full message when the dataset is built
        meta = read_sidecar(files[0])
        if not meta or not meta.get("spm_model_file"):
            return  # official tooling writes no sidecar; export then takes --spm_model_file
        source = dataset_file(files[0], str(meta["spm_model_file"]))
        if source is None:
            _log(cfg, f"Note: the sidecar of {files[0]} names the SentencePiece model "
                      f"{meta['spm_model_file']}, outside the dataset's directory; it is not "
                      "copied beside the checkpoints. Pass --spm_model_file to the export.")
            return
        if not tf.io.gfile.exists(source):
            return
        if meta.get("spm_model_sha256") != _sha256_of(source):
            _log(cfg, f"Note: {source} does not have the checksum the sidecar of {files[0]} "
                      "records (spm_model_sha256); it is not copied beside the checkpoints.")
            return
        if "://" not in source and os.stat(source).st_nlink > 1:
            _log(cfg, f"Note: {source} has other names (hard links): it may be a file from "
                      "outside the dataset, so it is not copied beside the checkpoints. Pass "
                      "--spm_model_file to the export.")
            return
        try:
            Tokenizer(source)  # a SentencePiece model with the official special pieces
        except Exception:  # noqa: BLE001 - any file that does not load is not copied
            _log(cfg, f"Note: {source} is not a SentencePiece model of ours; it is not copied "
                      "beside the checkpoints.")
            return
        target = os.path.join(cfg.output_dir, os.path.basename(source))
        if not tf.io.gfile.exists(target):
            tf.io.gfile.copy(source, target)

    def _restore_or_initialize(self):
        cfg = self.cfg
        # The chief's checkpoint (every worker holds the same model and optimizer, and the input
        # position follows from the step); a worker that cannot see it takes its own.
        latest = (tf.train.latest_checkpoint(cfg.output_dir)
                  or tf.train.latest_checkpoint(self.write_dir))
        how = "fresh"
        if latest:
            # expect_partial: checkpoints of earlier versions also hold an input iterator.
            self.checkpoint.restore(latest).expect_partial().assert_existing_objects_matched()
            self._check_finite_weights(
                f"The checkpoint {latest}", "Resume from an earlier checkpoint of the run (move "
                "the later ones and the `checkpoint` file away), or start a new --output_dir.")
            _log(cfg, f"Resumed from {latest} at step {int(self.optimizer.iterations.numpy())}.")
            how = "resumed"
        elif cfg.init_checkpoint:
            report = self.task.initialize(self.model, cfg.init_checkpoint,
                                          init_from_group0=cfg.init_from_group0)
            self._check_finite_weights(f"--init_checkpoint {cfg.init_checkpoint}",
                                       "Start from another checkpoint.")
            skipped = report.get("skipped", {})
            reasons = sorted(set(skipped.values()))
            _log(cfg, f"Initialized {len(report['assigned'])} weights from "
                      f"{cfg.init_checkpoint}" + (f"; not used: {len(skipped)} entries ("
                                                  f"{'; '.join(reasons)})" if skipped else "")
                 + ".")
            how = "initialized"
        if cfg.do_train:
            self._position_input()
        return how

    def weights_finite(self) -> bool:
        """Whether every weight of the model is finite (reduced where the weights live)."""
        if not hasattr(self, "_all_finite"):
            variables = self.model.weights

            @tf.function
            def all_finite():
                return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v))
                                               for v in variables]))

            self._all_finite = all_finite
        return bool(self._all_finite().numpy())

    def _check_finite_weights(self, what: str, fix: str) -> None:
        if not self.weights_finite():
            raise NonFiniteLossError(f"{what} holds non-finite weights (nan or inf); training "
                                     f"from it cannot give a model. {fix}")

    def settings(self) -> dict:
        """What this run's result depends on beyond its input (`InputPlan`) and its model
        configuration (albert_config.json): the task and its head, the optimizer and schedule,
        the steps, the precision and the initial weights. A resumed run must have the same
        (`train_settings.json`)."""
        cfg, task = self.cfg, self.task
        head = {name: getattr(task, name) for name in ("dropout_rate", "dropout_prob",
                                                       "start_n_top", "end_n_top",
                                                       "max_predictions_per_seq")
                if isinstance(getattr(task, name, None), (int, float))}
        init = cfg.init_checkpoint
        if init and "://" not in init:
            init = os.path.abspath(init)
        return {"task": task.name, "kind": model_kind(self.model),
                "num_labels": getattr(self.model, "num_labels", None), "head": head,
                "optimizer": cfg.optimizer, "learning_rate": cfg.learning_rate,
                "num_warmup_steps": cfg.num_warmup_steps, "poly_power": cfg.poly_power,
                "start_warmup_step": cfg.start_warmup_step,
                "num_train_steps": cfg.num_train_steps,
                "weight_decay_rate": cfg.weight_decay_rate, "clip_norm": cfg.clip_norm,
                "mixed_precision": cfg.mixed_precision, "init_checkpoint": init,
                "init_from_group0": cfg.init_from_group0}

    def _check_settings(self, resumed: bool) -> None:
        """Refuses to resume a run whose recorded settings (`settings`) differ from this
        command's, naming each difference: a rerun with another learning rate or optimizer
        would otherwise continue the first run and report its numbers. A fresh run records
        its settings."""
        cfg = self.cfg
        path = os.path.join(cfg.output_dir, SETTINGS_FILE)
        mine = self.settings()
        if resumed and tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                try:
                    saved = json.load(f)
                except ValueError:
                    saved = None
            if not isinstance(saved, dict):
                raise OutputDirMismatchError(
                    f"{path} is damaged (not a JSON object); this run cannot tell whether it "
                    "may resume the checkpoints beside it. Use a new --output_dir (with "
                    "--init_checkpoint for the weights).")
            differences = [f"{k}: {saved.get(k)!r} there, {v!r} now" for k, v in mine.items()
                           if saved.get(k) != v]
            if differences:
                raise OutputDirMismatchError(
                    f"--output_dir {cfg.output_dir} holds a run with other settings ("
                    f"{'; '.join(differences)}); resuming it would continue that run, not "
                    "train this one. Rerun with the original flags to resume (or with "
                    "--nodo_train to only evaluate it), or use a new --output_dir "
                    f"(--init_checkpoint {cfg.output_dir} starts from its weights).")
            return
        if resumed:
            _log(cfg, f"Note: {cfg.output_dir} has no {SETTINGS_FILE} (a run of an earlier "
                      "version); its settings are recorded now, unchecked.")
        if self.is_chief:
            _write_text_atomically(path, json.dumps(mine, indent=1))

    def _input_plan(self, resumed: bool) -> InputPlan:
        """This run's `InputPlan`; a resumed run's must equal the one saved when it started
        (`train_input.json`), or the batches after the checkpoint would not be the ones the
        uninterrupted run reads."""
        cfg = self.cfg
        path = os.path.join(cfg.output_dir, INPUT_PLAN_FILE)
        saved = None
        if resumed and tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                saved = InputPlan.from_dict(json.load(f))
        seed = saved.seed if saved is not None and cfg.seed is None else self._data_seed
        files = list_files(cfg.input_file)
        sidecars = self.task.check_files(files)
        plan = InputPlan.create(files, cfg.train_batch_size,
                                cfg.input_shards or (saved.num_shards if saved else
                                                     self.input_pipelines),
                                seed, cfg.shuffle_window, sidecars=sidecars)
        if saved is not None:
            differences = saved.differences(plan)
            if differences:
                raise DataMismatchError(
                    f"--output_dir {cfg.output_dir} holds a run whose training input differs "
                    f"from this command's ({'; '.join(differences)}), so resuming would not "
                    "read the batches the run would have read. Rerun with the original input "
                    "and flags, or start a new --output_dir (--init_checkpoint can take the "
                    "weights).")
        elif resumed:
            _log(cfg, f"Note: {cfg.output_dir} has no {INPUT_PLAN_FILE} (a run of an earlier "
                      "version); the input continues from the step in this version's order.")
        if self.is_chief and saved is None:
            _write_text_atomically(path, json.dumps(plan.to_dict(), indent=1))
        return plan

    def _position_input(self):
        """The training iterator at the optimizer's step."""
        self._input_step = int(self.optimizer.iterations.numpy())
        self.train_iterator = self._train_iterator(self._input_step)

    def _train_iterator(self, step: int):
        plan = self.plan
        options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
        dataset = self.strategy.distribute_datasets_from_function(
            lambda context: stream_dataset(plan, step, self.task.schema(), context), options)
        return iter(dataset)

    # -----------------------------------------------------------------------------------------
    def _split(self, features):
        k = self.cfg.grad_accum_steps
        if k == 1:
            return [features]
        parts = {name: tf.split(t, k, axis=0) for name, t in features.items()}
        return [{name: parts[name][i] for name in features} for i in range(k)]

    def _compute(self, features, normalizers):
        """Forward/backward of one micro-batch; loss normalised by the step's global totals."""
        inputs = {name: features[name] for name in self.task.model_inputs}
        with tf.GradientTape() as tape:
            outputs = self.model(inputs, training=True)
            terms = self.task.loss_terms(outputs, features)
            loss = self.task.loss(terms, normalizers)
            scaled = loss if self.loss_scale is None else self.loss_scale.scale_loss(loss)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        # Embedding gradients come as IndexedSlices; dense tensors sum and all-reduce simply.
        # A weight off the loss path (the pooler under a span head) gets a zero gradient.
        grads = [tf.zeros_like(v) if g is None else
                 tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g, v in zip(grads, self.model.trainable_variables)]
        return grads, terms, loss

    def _replica_step(self, features):
        cfg = self.cfg
        ctx = tf.distribute.get_replica_context()
        normalizers = self.task.normalizers(features, cfg.train_batch_size)
        compute = self._compute_fn
        grads, terms, loss = None, None, 0.0
        for micro in self._split(features):
            deps = [] if grads is None else [g for g in grads if g is not None]
            with tf.control_dependencies(deps):  # one micro-batch at a time
                g, t, step_loss = compute(micro, normalizers)
            if grads is None:
                grads, terms = list(g), dict(t)
            else:
                grads = [a + b for a, b in zip(grads, g)]
                terms = {name: terms[name] + t[name] for name in terms}
            loss += step_loss
        grads = ctx.all_reduce(SUM, grads)
        total_loss = ctx.all_reduce(SUM, loss)
        if self.loss_scale is not None:  # unscaled before clipping: the float32 gradients
            grads = self.loss_scale.unscale(grads)
        grad_norm = tf.linalg.global_norm(grads)
        grads, _ = tf.clip_by_global_norm(grads, cfg.clip_norm, use_norm=grad_norm)
        # The gate covers the updated weights too (a learning rate of nan or inf, an update
        # that overflows): a step is applied only when everything it writes is finite.
        finite = (tf.math.is_finite(grad_norm) & tf.math.is_finite(total_loss)
                  & self.optimizer.updates_finite(grads, self.model.trainable_variables))
        # float16: an overflow of the loss scale skips this step only (`albert_tf.loss_scale`);
        # any other non-finite step closes the gate and stops the run, as in float32.
        skip = (tf.constant(False) if self.loss_scale is None
                else self.loss_scale.overflowed(finite))
        gate = self.optimizer.update_gate
        was_open = gate > 0.5
        stop = ~finite & ~skip
        self.bad_step.assign(tf.where(was_open & stop, self.optimizer.iterations,
                                      self.bad_step))
        gate.assign(tf.where(stop, tf.zeros_like(gate), gate))
        if self.loss_scale is None:
            self.optimizer.apply(grads, self.model.trainable_variables)
        else:
            kept = tf.identity(gate.value)
            gate.assign(tf.where(skip, tf.zeros_like(kept), kept))  # this step only
            self.optimizer.apply(grads, self.model.trainable_variables)
            gate.assign(kept)
            self.loss_scale.update(finite)
        return terms, total_loss, grad_norm

    def _eval_dataset(self):
        """The evaluation pass: the evaluation records in order, each worker taking every
        `num_workers`-th record (so one evaluation file serves any number of workers), batches
        of its share, and every worker the same number of batches (global records //
        `eval_batch_size`: the single-device pass; fine-tuning files are padded to whole
        batches)."""
        cfg = self.cfg
        context = None
        if self.num_workers > 1:
            context = tf.distribute.InputContext(
                num_input_pipelines=self.num_workers, input_pipeline_id=self.worker_index,
                num_replicas_in_sync=self.num_workers)  # -> this worker's share of the batch
        files = list_files(cfg.eval_input_file or cfg.input_file)
        if getattr(self, "_eval_files", None) != files:
            self._eval_schema, sidecars = self.task.eval_schema(files)
            self._eval_files = files
            self._eval_batches = sum(record_counts(files, sidecars)) // cfg.eval_batch_size
        return ordered_dataset(files, cfg.eval_batch_size, self._eval_schema, context,
                               shard_records=True, num_batches=self._eval_batches)

    def _distribute(self, batch):
        """A worker's evaluation batch -> per-replica values: local replica i takes the i-th
        slice."""
        if self.replicas == 1:
            return batch
        k = self.local_replicas
        parts = {name: tf.split(t, k, axis=0) for name, t in batch.items()}
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: {name: parts[name][ctx.replica_id_in_sync_group % k]
                         for name in parts})

    def _build_train_loop(self):
        cfg = self.cfg
        single_device = self.replicas == 1 and not isinstance(self.strategy,
                                                              tf.distribute.TPUStrategy)
        jit = cfg.jit_compile and not isinstance(self.strategy, tf.distribute.TPUStrategy)
        # XLA: on one device the whole step compiles (the TPU proxy); across replicas the
        # forward/backward compiles and the all-reduce and update run outside it.
        self._compute_fn = (tf.function(self._compute, jit_compile=True)
                            if jit and not single_device else self._compute)
        replica_step = (tf.function(self._replica_step, jit_compile=True) if jit and single_device
                        else self._replica_step)

        @tf.function
        def train_loop(iterator, num_steps):
            sums = {name: tf.constant(0.0) for name in self.task.term_names}
            last_loss, last_norm = tf.constant(0.0), tf.constant(0.0)
            for _ in tf.range(num_steps):
                batch = next(iterator)
                terms, loss, norm = self.strategy.run(replica_step, args=(batch,))
                sums = {name: sums[name] + self.strategy.reduce(SUM, terms[name], axis=None)
                        for name in self.task.term_names}
                last_loss = self.strategy.experimental_local_results(loss)[0]
                last_norm = self.strategy.experimental_local_results(norm)[0]
            return sums, last_loss, last_norm

        return train_loop

    # -----------------------------------------------------------------------------------------

    def evaluate(self) -> dict:
        """The task's metrics over at most `max_eval_steps` batches."""
        task = self.task
        if self._eval_step is None:
            def replica_eval(features):
                inputs = {name: features[name] for name in task.model_inputs}
                outputs = self.model(inputs, training=False)
                return task.loss_terms(outputs, features), task.eval_outputs(outputs, features)

            @tf.function
            def eval_step(batch):
                terms, per_example = self.strategy.run(replica_eval,
                                                       args=(self._distribute(batch),))
                sums = {k: self.strategy.reduce(SUM, v, axis=None) for k, v in terms.items()}
                gathered = {k: self.strategy.gather(v, axis=0) for k, v in per_example.items()}
                return sums, gathered

            self._eval_step = eval_step
        sums = {name: 0.0 for name in task.term_names}
        collected = {}
        steps = 0
        for batch in self._eval_dataset():
            if steps >= self.cfg.max_eval_steps:
                break
            batch_sums, per_example = self._eval_step(batch)
            for name, value in batch_sums.items():
                sums[name] += float(value)
            for name, value in per_example.items():
                collected.setdefault(name, []).append(value.numpy())
            steps += 1
        collected = {name: np.concatenate(parts) for name, parts in collected.items()}
        metrics = task.metrics(sums, collected)
        metrics.update(eval_steps=steps, examples=int(sums[task.examples_term]))
        return metrics

    def _write_eval(self, step, metrics, writer):
        cfg = self.cfg
        metrics = dict(metrics, global_step=step)
        if not self.is_chief:
            return
        with writer.as_default(step=step):
            for name in self.task.metric_names:
                tf.summary.scalar(name, metrics[name])
        best_path = os.path.join(cfg.output_dir, "best", "best_eval.json")
        best = None
        if tf.io.gfile.exists(best_path):
            with tf.io.gfile.GFile(best_path) as f:
                best = json.load(f)
        key = self.task.best_metric
        if best is None or metrics[key] > best[key]:
            tf.io.gfile.makedirs(os.path.dirname(best_path))
            tf.train.Checkpoint(model=self.model).write(
                os.path.join(cfg.output_dir, "best", "ckpt-best"))
            with tf.io.gfile.GFile(best_path, "w") as f:
                json.dump(metrics, f, indent=2)
        # Written last, whole or not at all: a job that checks for this file to know that the
        # evaluation (and the best checkpoint it may replace) is complete can trust it.
        _write_text_atomically(os.path.join(cfg.output_dir, f"eval_results_step_{step}.json"),
                               json.dumps(metrics, indent=2))
        _log(cfg, f"eval at step {step}: " + ", ".join(
            f"{k} {metrics[k]:.4f}" for k in self.task.metric_names))

    # -----------------------------------------------------------------------------------------
    def _install_stop_signals(self) -> dict:
        """SIGTERM and SIGINT (Ctrl-C) ask the loop to save a checkpoint at the end of the
        current loop of steps and stop (a second Ctrl-C stops at once, without saving: the last
        checkpoint stays intact). Returns the handlers replaced. Under multi-worker and TPU
        strategies the preemption handler owns SIGTERM."""
        replaced = {}
        cluster = isinstance(self.strategy, (tf.distribute.MultiWorkerMirroredStrategy,
                                             tf.distribute.TPUStrategy))
        signals = (signal.SIGINT,) if cluster else (signal.SIGTERM, signal.SIGINT)

        def handler(signum, frame):
            self._stop_requested = signal.Signals(signum).name
            # A second one takes the system's default action at once, even inside a running
            # loop of steps (a Python handler would only run after it): the process ends
            # without saving, and the last checkpoint stays intact.
            signal.signal(signum, signal.SIG_DFL)
            if signum == signal.SIGINT:
                print("\nCtrl-C: the run saves a checkpoint at the end of this loop of steps "
                      "and stops (Ctrl-C again stops now, without saving).", file=sys.stderr,
                      flush=True)

        for signum in signals:
            try:
                replaced[signum] = signal.signal(signum, handler)
            except ValueError:  # not the main thread
                break
        return replaced

    def _preemption_handler(self):
        if isinstance(self.strategy, (tf.distribute.MultiWorkerMirroredStrategy,
                                      tf.distribute.TPUStrategy)):
            resolver = getattr(self.strategy, "cluster_resolver", None)
            if resolver is not None:
                return tf.distribute.experimental.PreemptionCheckpointHandler(
                    resolver, self.manager)
        return None

    def train(self) -> dict:
        cfg = self.cfg
        if self._train_loop is None:
            self._train_loop = self._build_train_loop()
        if self.is_chief:
            train_writer = tf.summary.create_file_writer(os.path.join(cfg.output_dir, "train"))
            eval_writer = tf.summary.create_file_writer(os.path.join(cfg.output_dir, "eval"))
        else:
            train_writer = eval_writer = tf.summary.create_noop_writer()
        history = []
        # The preemption handler restores its manager's latest checkpoint when created; the
        # input is positioned after it, at whatever step that leaves.
        preemption = self._preemption_handler()
        step = int(self.optimizer.iterations.numpy())
        if self.train_iterator is None or self._input_step != step:
            self._position_input()
        if (cfg.do_eval and 0 < step < cfg.num_train_steps
                and step % cfg.save_checkpoints_steps == 0 and not tf.io.gfile.exists(
                    os.path.join(cfg.output_dir, f"eval_results_step_{step}.json"))):
            # Resumed from a checkpoint whose evaluation the stopped run did not finish.
            self._write_eval(step, self.evaluate(), eval_writer)
        start_step, start_time = step, time.time()
        previous_handlers = self._install_stop_signals()
        status = "completed"
        try:
            while step < cfg.num_train_steps:
                next_save = (step // cfg.save_checkpoints_steps + 1) * cfg.save_checkpoints_steps
                n = min(cfg.iterations_per_loop, next_save - step, cfg.num_train_steps - step)
                t0 = time.time()
                sums, loss, norm = self._run_loop(preemption, step, n)
                step += n
                record = self._record(step, n, sums, loss, norm, time.time() - t0, train_writer)
                history.append(record)
                eta = (time.time() - start_time) / (step - start_step) * (cfg.num_train_steps
                                                                          - step)
                _log(cfg, f"step {step}/{cfg.num_train_steps} | loss {loss:.4f} | "
                          f"{self.task.progress(record)} | lr {record['learning_rate']:.3e} | "
                          f"gnorm {norm:.3f} | {record['examples_per_second']:,.1f} "
                          f"examples/s | ETA {_format_duration(eta)}")
                if step % cfg.save_checkpoints_steps == 0 or step == cfg.num_train_steps:
                    path = self._save(step)
                    _log(cfg, f"saved {path}")
                    if cfg.do_eval:
                        self._last_eval = (step, self.evaluate())
                        self._write_eval(step, self._last_eval[1], eval_writer)
                        eval_writer.flush()
                if self._stop_requested:
                    if step % cfg.save_checkpoints_steps:
                        self._save(step)
                    status = f"stopped ({self._stop_requested})"
                    _log(cfg, f"{self._stop_requested}: checkpoint saved at step {step}; rerun "
                              "to resume.")
                    break
        finally:
            for signum, previous in previous_handlers.items():
                signal.signal(signum, previous)
            train_writer.flush()
            eval_writer.flush()
        return {"status": status, "step": step, "history": history}

    def _run_loop(self, preemption, step: int, n: int):
        """(summed terms, loss, gradient norm) of `n` steps from `step` in one call; a bad
        input file or a non-finite step stops the run (a consistent checkpoint saved)."""
        args = (self.train_iterator, tf.constant(n, tf.int32))
        try:
            if preemption is not None:
                sums, loss, norm = preemption.run(self._train_loop, *args)
            else:
                sums, loss, norm = self._train_loop(*args)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError,
                tf.errors.FailedPreconditionError) as e:
            if not _is_input_error(e):
                raise
            self._stop_on_bad_input(e)
        if float(self.optimizer.update_gate.numpy()) < 0.5:
            self._stop_non_finite(step, n)
        return {k: float(v) for k, v in sums.items()}, float(loss), float(norm)

    def _record(self, step, n, sums, loss, norm, elapsed, writer) -> dict:
        """The history record of the loop that ended at `step` (also to TensorBoard)."""
        lr = float(self.optimizer.learning_rate.numpy()
                   if hasattr(self.optimizer.learning_rate, "numpy")
                   else self.optimizer.learning_rate)
        record = dict(step=step, loss=loss, grad_norm=norm, learning_rate=lr,
                      examples_per_second=n * self.cfg.train_batch_size / max(elapsed, 1e-9),
                      **self.task.metrics(sums))
        if self.loss_scale is not None:
            record.update(loss_scale=float(self.loss_scale.scale.numpy()),
                          skipped_steps=int(self.loss_scale.skipped_steps.numpy()))
        with writer.as_default(step=step):
            for name, value in record.items():
                if name != "step":
                    tf.summary.scalar(name, value)
        return record

    def _save(self, step: int) -> str:
        """A checkpoint at `step`; never one of non-finite weights (the update gate keeps them
        out; this is the last guard before a model is saved as a good one)."""
        if not self.weights_finite():
            raise NonFiniteLossError(
                f"The weights after step {step} are not finite; they are not saved. The last "
                f"checkpoint, {self.manager.latest_checkpoint}, is intact.")
        return self.manager.save(checkpoint_number=step)

    def _save_consistent(self, good_step: int) -> str:
        """A checkpoint of the model after `good_step` steps, after a failure inside a loop of
        steps. The model is at that step (a failed read applies nothing; after a non-finite step
        the update gate stays closed), so only the step counter and the gate are set back; the
        input position follows from the step."""
        self.optimizer.iterations.assign(good_step)
        self.optimizer.update_gate.assign(1.0)
        latest = self.manager.latest_checkpoint
        if latest is not None and latest.endswith(f"-{good_step}"):
            return latest  # saved at that step already, and nothing has changed since
        return self.manager.save(checkpoint_number=good_step)

    def _stop_on_bad_input(self, error):
        good = int(self.optimizer.iterations.numpy())  # steps that completed
        unreadable = find_unreadable_files(list(self.plan.files), list(self.plan.records))
        path = self._save_consistent(good)
        what = ("; ".join(f"{f}: {m}" for f, m in unreadable) if unreadable
                else f"a record could not be read ({error.message.splitlines()[0]})")
        raise CorruptInputError(
            f"Training input is corrupt: {what}. The model after step {good} is saved at "
            f"{path} (model, optimizer and input position agree). Regenerate the file under the "
            "same name (python -m data.create_pretraining_data) or restore it, then rerun the "
            "same command to resume.")

    def _stop_non_finite(self, step, n):
        bad = int(self.bad_step.numpy())
        # The bad step and those after it in the same loop were not applied (the update gate
        # closed): the model is the one after `bad` steps.
        path = self._save_consistent(bad)
        raise NonFiniteLossError(
            f"Non-finite loss, gradient or updated weights at step {bad + 1} (updates are "
            f"1-based); that step was not applied. The model after step {bad} is saved at "
            f"{path}. Check the data, or train with a lower --learning_rate into a new "
            f"--output_dir (--init_checkpoint {self.cfg.output_dir} starts from that model).")

    def best_model(self):
        """The model of `best/ckpt-best` as a plain (host, float32) model, or None."""
        prefix = os.path.join(self.cfg.output_dir, "best", "ckpt-best")
        if not tf.io.gfile.exists(prefix + ".index"):
            return None
        with tf.device("/cpu:0"):
            model = self.task.build_model()
        tf.train.Checkpoint(model=model).read(prefix).assert_existing_objects_matched()
        return model

    def run(self, exporter=None) -> dict:
        """Restores or initializes, trains and/or evaluates. `exporter(model, which)` is called
        on the chief when training completes, with `which` "final" (the trained model) and,
        when evaluation kept one, "best"; it returns where it wrote (the loop itself writes no
        SavedModel: `albert_tf` does not import `export/`)."""
        self._lock.acquire()  # held since __init__; taken again if run() is called twice
        try:
            return self._run(exporter)
        finally:
            self._lock.release()

    def _run(self, exporter) -> dict:
        cfg = self.cfg
        how = self._restore_or_initialize()
        summary = {"start": how}
        if cfg.do_train:
            summary.update(self.train())
            if exporter is not None and self.is_chief and summary["status"] == "completed":
                summary["exports"] = {"final": exporter(self.model, "final")}
                best = self.best_model()
                if best is not None:
                    summary["exports"]["best"] = exporter(best, "best")
        if cfg.do_eval:
            step = int(self.optimizer.iterations.numpy())
            last = getattr(self, "_last_eval", None)
            # The evaluation training just ran at this step, or a new one.
            metrics = last[1] if last is not None and last[0] == step else self.evaluate()
            summary["eval"] = metrics
            if not cfg.do_train:
                self._write_eval(step, metrics, tf.summary.create_file_writer(
                    os.path.join(cfg.output_dir, "eval")))
        return summary


class PretrainingRun(TrainingRun):
    """ALBERT pretraining: the loop with `PretrainingTask` on `cfg`'s data."""

    def __init__(self, cfg: PretrainingConfig, strategy: tf.distribute.Strategy | None = None):
        super().__init__(PretrainingTask(cfg.albert_config, cfg.max_seq_length,
                                         cfg.max_predictions_per_seq), cfg, strategy)
