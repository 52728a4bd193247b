"""The one training loop, for every task (`albert_tf.tasks`: pretraining, fine-tuning), under any
`tf.distribute` strategy (injected), in four parts:

- `albert_tf.training.trainer.Trainer`: the replicated step (micro-batches, all-reduce, clipping,
  the finiteness gate, float16's loss scale, the optimizer) and the evaluation pass;
- `albert_tf.training.controller.Controller`: when to train, log and save; progress; SIGTERM, Ctrl-C
  and preemption; stopping on a non-finite step or an unreadable input with a consistent
  checkpoint;
- `albert_tf.training.run_directory.RunDirectory`: OUTPUT_DIR (its lock, `albert_config.json`, the
  copied SentencePiece model, `train_settings.json`, `train_input.json`, evaluation files,
  `best/`);
- `albert_tf.training.actions`: evaluation with the best checkpoint kept, and the one export path.

`TrainingRun` puts them together for a task and a `TrainingConfig`: it checks the directory and
the settings, builds the trainer, restores (or initializes from `init_checkpoint`), plans the
input (`albert_tf.input_pipeline.InputPlan`: each input pipeline, i.e. worker or TPU host, reads
its own shards of a deterministic stream whose position is a function of the step, so a
restarted run continues exactly), trains and evaluates.
"""

from __future__ import annotations

import dataclasses
import numbers
import os

import tensorflow as tf

from albert_tf.training import actions
from albert_tf.training import progress
from albert_tf.checkpoints import CheckpointError, model_kind
from albert_tf.config import AlbertConfig
from albert_tf.configs.definitions import (PRETRAINING_DEFAULTS, RULES, SETTINGS,
                                           ExperimentSettings)
from albert_tf.training.controller import (Controller, CorruptInputError, NonFiniteLossError,
                                           WorkerLostError)
from albert_tf.training.distribute import worker_layout
from albert_tf.input_pipeline import InputPlan, list_files
from albert_tf.training.run_directory import (INPUT_PLAN_FILE, OutputDirMismatchError, RunDirectory,
                                              write_dir_of, write_text_atomically)
from albert_tf.tasks import PretrainingTask, Task
from albert_tf.training.trainer import (PRECISIONS, Trainer, build_model_and_optimizer,
                                        has_dropout_state)

__all__ = ["TrainingConfig", "PretrainingConfig", "TrainingRun", "PretrainingRun",
           "NonFiniteLossError", "CorruptInputError", "WorkerLostError", "OutputDirMismatchError",
           "PRECISIONS",
           "INPUT_PLAN_FILE", "write_dir_of", "write_text_atomically"]


def official(name: str):
    """The official run_pretraining.py default of a setting (`albert_tf.configs.definitions`)."""
    return PRETRAINING_DEFAULTS.get(name, SETTINGS[name].default)


@dataclasses.dataclass
class TrainingConfig:
    """Settings of the loop, for any task (official `run_pretraining.py` / `run_classifier.py`
    flag names; the defaults are the official run_pretraining.py ones: `official`, from the
    settings' definitions)."""

    albert_config: AlbertConfig
    input_file: str
    output_dir: str
    eval_input_file: str | None = None
    init_checkpoint: str | None = None
    init_from_group0: bool = official("init_from_group0")
    max_seq_length: int = official("max_seq_length")
    train_batch_size: int = official("train_batch_size")
    eval_batch_size: int = official("eval_batch_size")
    optimizer: str = official("optimizer")
    learning_rate: float = official("learning_rate")
    poly_power: float = official("poly_power")
    start_warmup_step: int = official("start_warmup_step")
    num_train_steps: int = official("num_train_steps")
    num_warmup_steps: int = official("num_warmup_steps")
    save_checkpoints_steps: int = official("save_checkpoints_steps")
    keep_checkpoint_max: int = official("keep_checkpoint_max")
    iterations_per_loop: int = official("iterations_per_loop")
    do_train: bool = official("do_train")
    do_eval: bool = official("do_eval")
    max_eval_steps: int = official("max_eval_steps")
    mixed_precision: str = official("mixed_precision")
    grad_accum_steps: int = official("grad_accum_steps")
    jit_compile: bool = official("jit_compile")
    # The encoder's per-token matmuls on each batch's real tokens only (`AlbertEncoder`'s
    # remove_padding): fine-tuning batches padded to max_seq_length cost their tokens. Applies
    # where shapes may vary: not under TPUStrategy and not with jit_compile.
    remove_padding: bool = official("remove_padding")
    # Keep only each encoder layer's input for the backward pass and recompute the rest there
    # (`AlbertEncoder`'s recompute): less peak memory for about one more forward pass (figures
    # in docs/benchmarks.md, "Training memory"). Same outputs and gradients.
    recompute: bool = official("recompute")
    # Attention as tf.einsum (the official flag) instead of batched matmuls: same values.
    use_einsum: bool = official("use_einsum")
    clip_norm: float = 1.0
    weight_decay_rate: float = 0.01
    # Model initialization and input shuffling. Fixed by default (the official data script's
    # 12345), so the same command gives the same model; None draws a fresh seed.
    seed: int | None = official("random_seed")
    # The training stream (`albert_tf.input_pipeline.InputPlan`): records are permuted within
    # consecutive windows of this many; the files are dealt into `input_shards` streams (0: one
    # per input pipeline, i.e. worker or TPU host). The data order depends on these, never on
    # the hardware.
    shuffle_window: int = official("shuffle_window")
    input_shards: int = official("input_shards")
    verbose: bool = True

    @classmethod
    def from_settings(cls, settings: ExperimentSettings, albert_config, **overrides):
        """The loop's settings from a command's typed settings (`albert_tf.configs.definitions`,
        `ExperimentConfig.run_settings()`), `random_seed` -1 as a fresh seed; `overrides`
        (computed values: input files, steps from epochs) win. A setting `settings` was built
        without has its definition's default, the fine-tuning runners' (run_pretraining's
        flags carry the official pretraining ones): build the config directly,
        `PretrainingConfig(...)`, for this class's own defaults."""
        if not isinstance(settings, ExperimentSettings):
            raise TypeError(f"{cls.__name__}.from_settings takes the typed settings "
                            "(albert_tf.configs.definitions.settings({name: value}) or "
                            f"ExperimentConfig.run_settings()); got a {type(settings).__name__}")
        return cls(albert_config=albert_config, **cls.field_values(settings, **overrides))

    @classmethod
    def field_values(cls, settings: ExperimentSettings, **overrides) -> dict:
        """{field: value} that `from_settings` builds the config of (unchecked)."""
        task, model, runtime = settings.task, settings.model, settings.runtime
        trainer = settings.trainer
        optimization, schedule = trainer.optimization, trainer.schedule
        values = dict(
            input_file=task.input_file, eval_input_file=task.eval_input_file,
            output_dir=trainer.output_dir, init_checkpoint=model.init_checkpoint,
            init_from_group0=model.init_from_group0, max_seq_length=model.max_seq_length,
            seed=None if model.random_seed == -1 else model.random_seed,
            optimizer=optimization.optimizer, learning_rate=optimization.learning_rate,
            poly_power=optimization.poly_power, num_train_steps=schedule.num_train_steps,
            num_warmup_steps=schedule.num_warmup_steps,
            start_warmup_step=schedule.start_warmup_step,
            train_batch_size=trainer.train_batch_size, eval_batch_size=trainer.eval_batch_size,
            save_checkpoints_steps=trainer.save_checkpoints_steps,
            keep_checkpoint_max=trainer.keep_checkpoint_max,
            iterations_per_loop=trainer.iterations_per_loop, do_train=trainer.do_train,
            do_eval=trainer.do_eval, max_eval_steps=trainer.max_eval_steps,
            shuffle_window=trainer.shuffle_window, input_shards=trainer.input_shards,
            mixed_precision=runtime.mixed_precision, grad_accum_steps=runtime.grad_accum_steps,
            jit_compile=runtime.jit_compile, remove_padding=runtime.remove_padding,
            recompute=runtime.recompute, use_einsum=runtime.use_einsum)
        if issubclass(cls, PretrainingConfig):
            values.update(max_predictions_per_seq=task.max_predictions_per_seq,
                          masked_lm_budget=trainer.masked_lm_budget)
        return dict(values, **overrides)

    def problems(self) -> list[str]:
        """What is wrong with these settings (each with the flag to fix): a setting's value by
        its definition's rule (as its flag is checked; None only where a setting may be
        unset), then what only the whole says."""
        problems = []
        for field in dataclasses.fields(self):
            name = "random_seed" if field.name == "seed" else field.name
            value = getattr(self, field.name)
            if name not in SETTINGS:
                continue
            # None: a fresh seed, or no file; elsewhere a value is needed.
            if value is None and SETTINGS[name].default is not None and name != "random_seed":
                problems.append(f"--{name} needs a value; got None")
            elif problem := SETTINGS[name].problem(value):
                problems.append(f"{problem}; got {value!r}")
        for name, rule in (("weight_decay_rate", "non_negative"), ("clip_norm", "positive")):
            test, wanted = RULES[rule]
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, numbers.Real) and test(value)):
                problems.append(f"{name} must be {wanted}; got {value!r}")
        if problems:  # what the whole says needs each value right first
            return problems
        if self.train_batch_size % self.grad_accum_steps:
            problems.append(f"--train_batch_size={self.train_batch_size} must be a multiple of "
                            f"--grad_accum_steps={self.grad_accum_steps}")
        length = self.albert_config.sequence_length_problem(self.max_seq_length)
        if length:
            problems.append(length)
        for name in ("train_batch_size", "eval_batch_size"):
            if getattr(self, name) * self.max_seq_length >= 2 ** 31:
                problems.append(f"--{name}={getattr(self, name)} x --max_seq_length="
                                f"{self.max_seq_length} tokens exceed what one batch can index "
                                "(2^31); use a smaller batch (--grad_accum_steps splits a "
                                "large one)")
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

    max_predictions_per_seq: int = official("max_predictions_per_seq")
    masked_lm_budget: float = official("masked_lm_budget")  # only offline masking (0)

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.masked_lm_budget:
            problems.append(
                f"--masked_lm_budget={self.masked_lm_budget}: online masking (masking n-grams "
                "while training, from token_boundary) is not supported; generate masked "
                "examples offline with python -m albert_tf.data.create_pretraining_data and leave "
                "--masked_lm_budget at 0 (the official default)")
        return problems


def warmup_note(cfg: TrainingConfig) -> str | None:
    """A note for a warmup that does not end before the last training step: accepted, as
    official, and said, since the learning rate then never reaches its peak."""
    if cfg.num_warmup_steps and cfg.start_warmup_step + cfg.num_warmup_steps >= \
            cfg.num_train_steps:
        return (f"note: the warmup ({cfg.num_warmup_steps} steps from step "
                f"{cfg.start_warmup_step}) does not end before the last of the "
                f"{cfg.num_train_steps} training steps: the learning rate never reaches its "
                f"peak {cfg.learning_rate:g} (--learning_rate).")
    return None


def _logger(verbose: bool):
    def log(message):
        if verbose:
            progress.echo(message)  # above a progress bar, if one is on screen
    return log


FLAG_SETTINGS = ("optimizer", "learning_rate", "poly_power", "start_warmup_step",
                 "weight_decay_rate", "clip_norm", "mixed_precision", "init_checkpoint",
                 "init_from_group0")


def flag_settings(values: dict) -> dict:
    """The part of `TrainingRun.settings` that the command line gives as it is (not the
    steps, which some commands compute from epochs), from {TrainingConfig field: value}
    (`TrainingConfig.field_values`; a field missing takes its default): what
    `refuse_a_changed_run` checks before a command writes its features."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
    settings = {name: values.get(name, defaults[name]) for name in FLAG_SETTINGS}
    init = settings["init_checkpoint"]
    if init and "://" not in init:
        settings["init_checkpoint"] = os.path.abspath(init)
    return settings


class TrainingRun:
    """Builds the task's model, the optimizer, data and checkpoints inside `strategy.scope()` and
    runs training and/or evaluation. `run()` returns a summary dict.

    `cfg` holds the loop's settings (`TrainingConfig`); `task` supplies the model, schema, loss
    and metrics."""

    def __init__(self, task: Task, cfg: TrainingConfig,
                 strategy: tf.distribute.Strategy | None = None):
        self.task, self.cfg = task, cfg
        self.strategy = strategy or tf.distribute.get_strategy()
        self.replicas = self.strategy.num_replicas_in_sync
        self.is_chief = bool(getattr(self.strategy.extended, "should_checkpoint", True))
        self.num_workers, self.worker_index = worker_layout(self.strategy)
        # Input pipelines: one per worker, or per host of a TPU system.
        self.input_pipelines = (self.strategy.extended.num_hosts
                                if isinstance(self.strategy, tf.distribute.TPUStrategy)
                                else self.num_workers)
        if cfg.train_batch_size % (self.replicas * cfg.grad_accum_steps):
            raise ValueError(
                f"--train_batch_size={cfg.train_batch_size} must be a multiple of replicas "
                f"({self.replicas}) x --grad_accum_steps ({cfg.grad_accum_steps}).")
        if cfg.do_eval and cfg.eval_batch_size % self.replicas:
            raise ValueError(f"--eval_batch_size={cfg.eval_batch_size} must be a multiple of the "
                             f"{self.replicas} replicas.")
        # Each process holds the lock of the directory it writes (`albert_tf.ownership`): a
        # second run into the same --output_dir is refused while this one lives, and taken
        # over once it is dead.
        # A plain function (no reference back to the run): a run dropped without run() is
        # collected at once, and its lock released with it.
        self._log = _logger(cfg.verbose)
        self.directory = RunDirectory(cfg.output_dir, self.worker_index, self.is_chief,
                                      log=self._log)
        self.write_dir = self.directory.write_dir
        self._lock = self.directory.lock
        self._lock.acquire()
        try:
            self._build()
        except BaseException:
            self._lock.release()
            raise

    def _build(self):
        cfg = self.cfg
        self._check_host_memory()
        # A killed save's leftovers go first: a save cut short is no checkpoint to match (one
        # worker's view only; with several, a cut-short save is refused by name instead).
        self.directory.remove_unfinished(cut_short=self.num_workers == 1)
        self._refuse_an_evaluation_of_nothing()
        self.directory.check_model(cfg.albert_config, cfg.input_file)
        model, optimizer = build_model_and_optimizer(self.task, cfg, self.strategy, cfg.seed)
        self.trainer = Trainer(self.task, cfg, self.strategy, model, optimizer, cfg.seed,
                               self.num_workers, self.worker_index)
        self.plan = None
        if cfg.do_train:  # checked now, so that bad input fails before anything runs
            resumed = self.directory.latest_checkpoint() is not None
            self.directory.check_settings(self.settings(), resumed)
            self.plan = self._input_plan(resumed)
        self.directory.recover_state_file()
        self.manager = tf.train.CheckpointManager(
            self.trainer.checkpoint, self.write_dir, max_to_keep=cfg.keep_checkpoint_max,
            checkpoint_name="ckpt")
        self.evaluation = (actions.EvaluateAndKeepBest(self.trainer, self.directory,
                                                       self._log)
                           if cfg.do_eval else None)
        self.controller = Controller(self.trainer, cfg, self.manager, self.plan, self._log,
                                     on_checkpoint=self.evaluation, verbose=cfg.verbose)

    # The trainer's objects, as the run's (tests, benches and the runners read them).
    model = property(lambda self: self.trainer.model)
    optimizer = property(lambda self: self.trainer.optimizer)
    loss_scale = property(lambda self: self.trainer.loss_scale)
    bad_step = property(lambda self: self.trainer.bad_step)
    checkpoint = property(lambda self: self.trainer.checkpoint)

    def weights_finite(self) -> bool:
        return self.trainer.weights_finite()

    def evaluate(self) -> dict:
        return self.trainer.evaluate()

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
        return dict({"task": task.name, "kind": model_kind(self.model),
                     "num_labels": getattr(self.model, "num_labels", None), "head": head,
                     "num_warmup_steps": cfg.num_warmup_steps,
                     "num_train_steps": cfg.num_train_steps},
                    **flag_settings({name: getattr(cfg, name) for name in FLAG_SETTINGS}))

    def _input_plan(self, resumed: bool) -> InputPlan:
        """This run's `InputPlan`; a resumed run's must equal the one saved when it started
        (`train_input.json`)."""
        cfg = self.cfg
        saved = self.directory.saved_input_plan(resumed)
        seed = saved.seed if saved is not None and cfg.seed is None else self.trainer.data_seed
        files = list_files(cfg.input_file)
        sidecars = self.task.check_files(files)
        plan = InputPlan.create(files, cfg.train_batch_size,
                                cfg.input_shards or (saved.num_shards if saved else
                                                     self.input_pipelines),
                                seed, cfg.shuffle_window, sidecars=sidecars)
        self.directory.check_input_plan(plan, saved)
        return plan

    def _restore_or_initialize(self) -> str:
        """"resumed" from the run's latest checkpoint, "initialized" from
        `cfg.init_checkpoint`, or "fresh"; the input positioned at the step."""
        cfg = self.cfg
        latest = self.directory.resume_checkpoint()  # the newest intact one
        how = "fresh"
        if latest:
            # expect_partial: checkpoints of earlier versions also hold an input iterator.
            checkpoint = self.checkpoint
            if self.trainer.dropout_state.seeds and not has_dropout_state(latest):
                checkpoint = self.trainer.checkpoint_without_dropout_state
                self._log(f"Note: {latest} was written by an earlier version without dropout's "
                          "random state: the resumed run draws other dropout masks than an "
                          "uninterrupted one would.")
            checkpoint.restore(latest).expect_partial().assert_existing_objects_matched()
            self._check_finite_weights(
                f"The checkpoint {latest}", "Resume from an earlier checkpoint of the run (move "
                "the later ones and the `checkpoint` file away), or start a new --output_dir.")
            self._log(f"Resumed from {latest} at step {self.trainer.step}.")
            how = "resumed"
        elif cfg.init_checkpoint:
            report = self.task.initialize(self.model, cfg.init_checkpoint,
                                          init_from_group0=cfg.init_from_group0)
            self._check_finite_weights(f"--init_checkpoint {cfg.init_checkpoint}",
                                       "Start from another checkpoint.")
            skipped = report.get("skipped", {})
            reasons = sorted(set(skipped.values()))
            self._log(f"Initialized {len(report['assigned'])} weights from "
                      f"{cfg.init_checkpoint}" + (f"; not used: {len(skipped)} entries ("
                                                  f"{'; '.join(reasons)})" if skipped else "")
                      + ".")
            how = "initialized"
        if cfg.do_train:
            self.controller.position_input()
        return how

    def _check_finite_weights(self, what: str, fix: str) -> None:
        if not self.weights_finite():
            raise NonFiniteLossError(f"{what} holds non-finite weights (nan or inf); training "
                                     f"from it cannot give a model. {fix}")

    # -----------------------------------------------------------------------------------------
    def train(self) -> dict:
        """Trains to `num_train_steps` (`Controller.train`)."""
        eval_writer = self.directory.writer("eval")  # TensorBoard: OUTPUT_DIR/{train,eval}
        try:
            return self.controller.train(self.directory.writer("train"))
        finally:
            eval_writer.flush()

    def best_model(self):
        """The model of `best/ckpt-best` as a plain (host, float32) model, or None."""
        return actions.best_model(self.task, self.directory)

    def trained_models(self) -> list:
        """(model, which, step) of what a completed pretraining run exports: the final model
        and, when evaluation kept one, the best."""
        models = [(self.model, "final", self.trainer.step)]
        best = self.best_model()
        if best is not None:
            models.append((best, "best", int(self.directory.best_metrics()["global_step"])))
        return models

    def run(self, exporter=None) -> dict:
        """Restores or initializes, trains and/or evaluates. With `exporter`
        (`albert_tf.export.run_exporter.make_exporter`), a completed training run's
        `trained_models` go through `actions.export_models` on the chief."""
        self._lock.acquire()  # held since __init__; taken again if run() is called twice
        try:
            return self._run(exporter)
        finally:
            self._lock.release()

    def _refuse_an_evaluation_of_nothing(self) -> None:
        """--do_eval without --do_train evaluates a checkpoint of --output_dir (or, for a task
        whose --init_checkpoint is the whole model, pretraining, that one): refused, before
        anything is written, where there is none (a resume then finds none either:
        `resume_checkpoint` starts afresh only without a latest checkpoint); it evaluated a
        model of random weights (or a random head) and kept it as the run's best."""
        cfg = self.cfg
        if cfg.do_train or (cfg.init_checkpoint and self.task.init_checkpoint_is_the_model):
            return
        if self.directory.latest_checkpoint() is None:
            raise CheckpointError(
                f"--do_eval without --do_train evaluates a checkpoint of --output_dir "
                f"{cfg.output_dir}, and it holds none: train first (--do_train), or point "
                "--output_dir at a training run"
                + (" (--init_checkpoint is where fine-tuning starts: its head is new)"
                   if cfg.init_checkpoint else "") + ".")

    def _run(self, exporter) -> dict:
        cfg = self.cfg
        summary = {"start": self._restore_or_initialize()}
        if cfg.do_train:
            if note := warmup_note(cfg):
                self._log(note)
            summary.update(self.train())
            if exporter is not None and self.is_chief and summary["status"] == "completed":
                summary["exports"] = actions.export_models(exporter, self.trained_models())
        if cfg.do_eval:
            step = self.trainer.step
            metrics = self.evaluation.metrics_at(step)
            summary["eval"] = metrics
            summary.setdefault("step", int(step))  # an evaluation alone: the step evaluated
            if not cfg.do_train:  # a best kept only where there is none: the data may differ
                self.evaluation.write(step, metrics, keep_best=summary["start"] == "resumed"
                                      and self.directory.best_metrics() is None)
                self.evaluation.writer.flush()
        return summary


class PretrainingRun(TrainingRun):
    """ALBERT pretraining: the loop with `PretrainingTask` on `cfg`'s data."""

    def __init__(self, cfg: PretrainingConfig, strategy: tf.distribute.Strategy | None = None):
        super().__init__(PretrainingTask(cfg.albert_config, cfg.max_seq_length,
                                         cfg.max_predictions_per_seq), cfg, strategy)
