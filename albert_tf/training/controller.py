"""When to train, evaluate, log and save: the loop around `albert_tf.training.trainer.Trainer`.

Checkpoints (`tf.train.CheckpointManager`, every `save_checkpoints_steps`, keeping
`keep_checkpoint_max`) hold the model and the optimizer (slots and step); the input position is
a function of the step, so a killed run restarted with the same arguments seeks the input to the
restored step and continues exactly. With multi-worker or TPU strategies a
`PreemptionCheckpointHandler` saves on preemption; otherwise SIGTERM or Ctrl-C saves a
checkpoint at the next loop boundary and stops (the command then exits with 128 + the signal's
number, so `train && export` does not go on). A non-finite loss or gradient stops the run: the
step is not applied, a checkpoint of the last good step is saved, and the error names the step;
so does an unreadable input file, named. After each checkpoint the actions run (evaluation and
the best checkpoint: `albert_tf.training.actions`).
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time

import tensorflow as tf

from albert_tf.input_pipeline import find_unreadable_files
from albert_tf.training.progress import Progress
from albert_tf.training.stop_signals import StopSignals


class NonFiniteLossError(RuntimeError):
    """Training produced a non-finite loss or gradient."""


class CorruptInputError(RuntimeError):
    """A training input file cannot be read (truncated, corrupt or of another schema)."""


# The largest float16 value; a float16 run whose weights reach FLOAT16_WEIGHT_LIMIT of it is
# not advised to restart from them (a product of two such weights already overflows).
FLOAT16_MAX = 65504.0
FLOAT16_WEIGHT_LIMIT = 256.0


def non_finite_advice(cfg, bad: int, path: str, largest: float, name: str) -> str:
    """The message of a run stopped at the non-finite step `bad + 1`, the model after step
    `bad` saved at `path`, its largest |weight| `largest` (in weight `name`). A float16 run
    whose weights have grown beyond float16's comfort (FLOAT16_WEIGHT_LIMIT) is told to restart
    from its starting weights or in another precision, not from that model, which would
    overflow again."""
    head = (f"Non-finite loss, gradient or updated weights at step {bad + 1} (updates are "
            f"1-based); that step was not applied. The model after step {bad} is saved at "
            f"{path}.")
    if cfg.mixed_precision == "float16" and largest >= FLOAT16_WEIGHT_LIMIT:
        start = (f"--init_checkpoint {cfg.init_checkpoint}" if cfg.init_checkpoint
                 else "random weights (no --init_checkpoint)")
        return (f"{head} Its weights have grown to max |w| = {largest:,.0f} ({name}), near "
                f"float16's largest value ({FLOAT16_MAX:,.0f}): a run from that model overflows "
                f"again. Train with a lower --learning_rate into a new --output_dir from the "
                f"run's starting weights ({start}), or use --mixed_precision=bfloat16 or "
                f"float32 (there --init_checkpoint {cfg.output_dir} can start from that model).")
    return (f"{head} Check the data, or train with a lower --learning_rate into a new "
            f"--output_dir (--init_checkpoint {cfg.output_dir} starts from that model).")


PREEMPTED_EXIT = 42
# A training record's figures of the loop itself (`Controller.record`); the rest are the task's.
LOOP_FIGURES = ("step", "loss", "grad_norm", "learning_rate", "examples_per_second",
                "loss_scale", "skipped_steps")


class WorkerLostError(RuntimeError):
    """A worker of a multi-worker cluster stopped answering during a step."""


# What a collective op raises when a peer is gone: its connection refused or reset (a process
# died), the collective timeout or the coordination service's heartbeat timeout (a host that
# vanished), or the abort the first of those propagates to the other workers.
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                tf.errors.CancelledError, tf.errors.AbortedError)


def lost_peer(message: str, cluster_spec=None) -> str:
    """'worker 2 (127.0.0.1:47425)', the task a collective's error names with its address in
    `cluster_spec` (TF_CONFIG's), or what else can be told of the peer from the message."""
    task = re.search(r"/job:(\w+)/replica:\d+/task:(\d+)", message)
    address = re.search(r"ipv4:([\d.]+:\d+)", message)
    address = address.group(1) if address else None
    if task:
        job, index = task.group(1), int(task.group(2))
        try:
            address = cluster_spec.task_address(job, index)
        except (AttributeError, ValueError, KeyError):
            pass
        return f"{job} {index}" + (f" ({address})" if address else "")
    if address:
        return address
    aborted = re.search(r"Collective ops is aborted by: (.+)", message)
    if aborted:  # another worker aborted the step on seeing the loss
        return f"the step was aborted by another worker ({aborted.group(1).strip()})"
    lines = [line.strip() for line in message.splitlines()
             if line.strip() and not line.startswith("Graph execution error")]
    return lines[0] if lines else "unknown"


def is_input_error(error) -> bool:
    """Whether a TensorFlow error raised inside the training loop comes from reading or
    parsing the input files (not from the model or the step)."""
    message = getattr(error, "message", str(error))
    if isinstance(error, tf.errors.DataLossError):
        return True
    if isinstance(error, tf.errors.FailedPreconditionError):
        return "expected to contain" in message
    return "parse" in message.lower() and ("Example" in message or "Feature" in message)


def _quiet_peer_watcher() -> None:
    """TensorFlow's preemption handler runs a `PeerTerminationWatcher` thread that dies with a
    traceback when the coordination service goes away, which is what happens when a worker is
    lost: the controller reports that itself, in one line (`WorkerLostError`), and the thread's
    traceback, printed meanwhile, only buried it (once, cut into that line in a CI run). Such a
    thread's TensorFlow error is dropped; every other thread's exception is printed as before.
    Idempotent."""
    previous = threading.excepthook
    if getattr(previous, "quiet_peer_watcher", False):
        return

    def hook(args):
        if (args.thread is not None and args.thread.name.startswith("PeerTerminationWatcher")
                and isinstance(args.exc_value, tf.errors.OpError)):
            return
        previous(args)

    hook.quiet_peer_watcher = True
    threading.excepthook = hook


class Controller:
    """Runs `trainer`'s steps from the input `plan` to `cfg.num_train_steps`, saving with
    `manager`, evaluating through `on_checkpoint(step)` (None: no evaluation), logging with
    `log`, showing progress (`albert_tf.training.progress`) when `verbose`."""

    def __init__(self, trainer, cfg, manager, plan, log=print, on_checkpoint=None,
                 verbose=True):
        self.trainer, self.cfg, self.manager, self.plan = trainer, cfg, manager, plan
        self.log, self.verbose = log, verbose
        self.on_checkpoint = on_checkpoint
        self.train_iterator = None
        self.input_step = None

    # -----------------------------------------------------------------------------------------
    def position_input(self):
        """The training iterator at the optimizer's step."""
        self.input_step = self.trainer.step
        self.train_iterator = self.trainer.iterator_at(self.plan, self.input_step)

    def stop_signals(self) -> StopSignals:
        """SIGTERM and SIGINT (Ctrl-C) ask the loop to save a checkpoint at the end of the
        current loop of steps and stop; a second one ends the process at once, even inside a
        loop of steps, without saving (`albert_tf.training.stop_signals`). Under multi-worker and
        TPU strategies the preemption handler owns SIGTERM."""
        return StopSignals((signal.SIGINT,) if self.trainer.in_cluster
                           else (signal.SIGTERM, signal.SIGINT))

    def preemption_handler(self):
        if self.trainer.in_cluster:
            _quiet_peer_watcher()
            resolver = self.trainer.cluster_resolver
            if resolver is not None:
                return tf.distribute.experimental.PreemptionCheckpointHandler(
                    resolver, self.manager, termination_config=tf.distribute.experimental
                    .TerminationConfig(exit_fn=self._preempted))
        return None

    def _cluster_spec(self):
        resolver = self.trainer.cluster_resolver
        try:
            return resolver.cluster_spec() if resolver is not None else None
        except (ValueError, RuntimeError):
            return None

    def _preempted(self):
        """After the preemption handler's checkpoint of the whole cluster: say so, then exit
        with 42, TensorFlow's restart code (its cluster tools restart a job that exits so)."""
        print(f"Preemption notice (SIGTERM to a worker): the cluster saved "
              f"{self.manager.latest_checkpoint} and stops with exit status {PREEMPTED_EXIT}; "
              "restart every worker with the same command to resume.", file=sys.stderr,
              flush=True)
        sys.exit(PREEMPTED_EXIT)

    # -----------------------------------------------------------------------------------------
    def train(self, train_writer) -> dict:
        """Trains to `num_train_steps` (or a stop signal); returns {status, step, history}."""
        cfg = self.cfg
        history = []
        # The preemption handler restores its manager's latest checkpoint when created; the
        # input is positioned after it, at whatever step that leaves.
        preemption = self.preemption_handler()
        step = self.trainer.step
        if self.train_iterator is None or self.input_step != step:
            self.position_input()
        if self.on_checkpoint is not None and 0 < step < cfg.num_train_steps \
                and step % cfg.save_checkpoints_steps == 0:
            self.on_checkpoint(step, resumed=True)  # an evaluation the stopped run missed
        # A bar on a terminal; elsewhere (logs, pipes) one line per loop of steps, read by the
        # benches (`bench/finetune_throughput.py`: "| N examples/s").
        bar = Progress("train", cfg.num_train_steps, enabled=self.verbose, every=0, start=step,
                       file=sys.stdout, label="step", rate=False)
        status = "completed"
        try:
            with self.stop_signals() as stop:
                while step < cfg.num_train_steps:
                    every = cfg.save_checkpoints_steps
                    next_save = (step // every + 1) * every
                    n = min(cfg.iterations_per_loop, next_save - step,
                            cfg.num_train_steps - step)
                    t0 = time.time()
                    logs = self.run_steps(preemption, step, n)
                    step += n
                    record = self.record(step, n, logs, time.time() - t0, train_writer)
                    history.append(record)
                    bar.update(n, figures=self.figures(record))
                    if step % cfg.save_checkpoints_steps == 0 or step == cfg.num_train_steps:
                        self.log(f"saved {self.save(step)}")
                        if self.on_checkpoint is not None:
                            self.on_checkpoint(step)
                    if stop.requested:
                        if step % cfg.save_checkpoints_steps:
                            self.save(step)
                        status = f"stopped ({stop.requested})"
                        self.log(f"{stop.requested}: checkpoint saved at step {step}; rerun "
                                 "to resume.")
                        break
        finally:
            bar.close()
            train_writer.flush()
        return {"status": status, "step": step, "history": history}

    def figures(self, record: dict) -> str:
        """The progress figures of a loop of steps, each once: loss (the loop's last step),
        the task's training metrics (`Task.progress`), learning rate, gradient norm, under
        float16 the loss scale and the steps it skipped since the run began, and the loop's
        examples/s."""
        task = {name: value for name, value in record.items() if name not in LOOP_FIGURES}
        scale = (f"loss scale {record['loss_scale']:,.0f} (steps skipped in all: "
                 f"{record['skipped_steps']})" if "loss_scale" in record else "")
        return " | ".join(part for part in (
            f"loss {record['loss']:.4f}", self.trainer.progress(task),
            f"lr {record['learning_rate']:.3e}", f"gnorm {record['grad_norm']:.3f}", scale,
            f"{record['examples_per_second']:,.1f} examples/s") if part)

    def run_steps(self, preemption, step: int, n: int) -> dict:
        """The trainer's logs of `n` steps from `step` in one call (`Trainer.train`); a bad
        input file or a non-finite step stops the run (a consistent checkpoint saved)."""
        args = (self.train_iterator, n)
        try:
            if preemption is not None:
                logs = preemption.run(self.trainer.train, *args)
            else:
                logs = self.trainer.train(*args)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError,
                tf.errors.FailedPreconditionError) as e:
            if not is_input_error(e):
                raise
            self.stop_on_bad_input(e)
        except _PEER_ERRORS as e:
            if not self.trainer.in_cluster:
                raise
            self.stop_on_lost_worker(e, step, n)
        bad = self.trainer.failed_step()
        if bad is not None:
            self.stop_non_finite(bad)
        return logs

    def record(self, step, n, logs, elapsed, writer) -> dict:
        """The history record of the loop that ended at `step` (also to TensorBoard): the
        trainer's `logs` and the loop's examples/s."""
        record = dict(step=step, loss=logs["loss"], grad_norm=logs["grad_norm"],
                      learning_rate=logs["learning_rate"],
                      examples_per_second=n * self.cfg.train_batch_size / max(elapsed, 1e-9))
        record.update((k, v) for k, v in logs.items() if k not in record)
        with writer.as_default(step=step):
            for name, value in record.items():
                if name != "step":
                    tf.summary.scalar(name, value)
        return record

    # -----------------------------------------------------------------------------------------
    def save(self, step: int) -> str:
        """A checkpoint at `step`; never one of non-finite weights (the update gate keeps them
        out; this is the last guard before a model is saved as a good one)."""
        if not self.trainer.weights_finite():
            raise NonFiniteLossError(
                f"The weights after step {step} are not finite; they are not saved. The last "
                f"checkpoint, {self.manager.latest_checkpoint}, is intact.")
        return self.manager.save(checkpoint_number=step)

    def save_consistent(self, good_step: int) -> str:
        """A checkpoint of the model after `good_step` steps, after a failure inside a loop of
        steps; the input position follows from the step."""
        self.trainer.set_back(good_step)
        latest = self.manager.latest_checkpoint
        if latest is not None and latest.endswith(f"-{good_step}"):
            return latest  # saved at that step already, and nothing has changed since
        return self.manager.save(checkpoint_number=good_step)

    def stop_on_bad_input(self, error):
        good = self.trainer.step  # steps that completed
        unreadable = find_unreadable_files(list(self.plan.files), list(self.plan.records))
        path = self.save_consistent(good)
        what = ("; ".join(f"{f}: {m}" for f, m in unreadable) if unreadable
                else f"a record could not be read ({error.message.splitlines()[0]})")
        raise CorruptInputError(
            f"Training input is corrupt: {what}. The model after step {good} is saved at "
            f"{path} (model, optimizer and input position agree). Regenerate the file under the "
            "same name (python -m albert_tf.data.create_pretraining_data) or restore it, then "
            "rerun the same command to resume.")

    def stop_on_lost_worker(self, error, step: int, n: int):
        """A collective failed because a peer is gone: no checkpoint can be saved (saving is a
        collective too); the last one is intact and every worker resumes from it."""
        raise WorkerLostError(
            f"A worker of the cluster stopped answering during steps {step + 1}-{step + n}: "
            f"{lost_peer(getattr(error, 'message', str(error)), self._cluster_spec())} "
            f"({type(error).__name__}). "
            f"The last checkpoint, {self.manager.latest_checkpoint}, is intact; restart every "
            "worker with the same command and TF_CONFIG to resume from it (docs/training.md, "
            "\"When a worker dies\").")

    def stop_non_finite(self, bad: int):
        # The bad step and those after it in the same loop were not applied (the update gate
        # closed): the model is the one after `bad` steps.
        path = self.save_consistent(bad)
        largest, name = self.trainer.largest_weight()
        raise NonFiniteLossError(non_finite_advice(self.cfg, bad, path, largest, name))
