"""The one path every training command runs (`run_pretraining`, `run_classifier`, `run_race`,
`run_squad_v1`/`v2`, `run_tagging`): the experiment config (`albert_tf.commands.experiment`, built
once from the flags or --config_file; written to OUTPUT_DIR/config.yaml) -> the model's config and
tokenizer -> `TrainingConfig.from_settings` -> the strategy -> `TrainingRun` -> `eval_results.json`
-> the model for prediction (the trained one, or the run's latest checkpoint) -> an exporter for
`--export_dir`. A runner keeps only what its task owns: its own flags, its data and its prediction
files. Nothing here reads absl's FLAGS: every function takes the `ExperimentConfig`.

The serving package is not imported here: an entry point builds the exporter
(`albert_tf.export.run_exporter`) and hands it down; the loop takes it as a callable.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import sys

import tensorflow as tf
from absl import logging

from albert_tf.paths import atomic_copy, write_json
from albert_tf.models.backbone import Performance
from albert_tf.checkpoints import CheckpointError, CheckpointMismatchError
from albert_tf.checkpoints.common import reading_checkpoint
from albert_tf.checkpoints.conversion import (carried_tokenizer, checkpoint_config, recorded_casing)
from albert_tf.checkpoints import runs
from albert_tf.config import AlbertConfig
from albert_tf.training.distribute import StrategyError, get_strategy, tf_config_worker
from albert_tf.commands import experiment
from albert_tf.training.actions import export_models
from albert_tf.commands.cli import run_command
from albert_tf.commands.experiment import ExperimentConfig
from albert_tf.commands.flags import require
from albert_tf.ownership import OutputLock
from albert_tf.tokenization import Tokenizer, make_tokenizer
from albert_tf.training.run_directory import refuse_a_changed_run
from albert_tf.training.train_lib import (CorruptInputError, NonFiniteLossError, TrainingConfig,
                                          TrainingRun, WorkerLostError, flag_settings, write_dir_of)

# What a command reports as "error: ..." and exit status 1 instead of a traceback: bad input
# (data, config, checkpoint, flags: all ValueErrors), a strategy that cannot start, a run that
# stopped on a non-finite loss or an unreadable input (a checkpoint was saved first), a worker of
# the cluster lost (the last checkpoint is intact).
RUN_ERRORS = (ValueError, FileNotFoundError, StrategyError, NonFiniteLossError,
              CorruptInputError, WorkerLostError)


class RunStopped(Exception):
    """Training stopped on SIGTERM or Ctrl-C after saving a checkpoint: the command exits with
    128 + the signal's number (as a shell reports a killed program), so that a following
    step (`train && export`) does not take the unfinished model for a finished one."""

    def __init__(self, summary: dict):
        status = summary.get("status", "")
        name = status[len("stopped ("):-1] if status.startswith("stopped (") else "SIGTERM"
        self.exit_code = 128 + int(getattr(signal, name, signal.SIGTERM))
        super().__init__(f"stopped by {name} at step {summary.get('step')} (checkpoint saved); "
                         "rerun the same command to resume.")


def raise_if_stopped(summary: dict) -> None:
    if str(summary.get("status", "")).startswith("stopped"):
        raise RunStopped(summary)


def guarded(body, *args, **kwargs) -> int:
    """Runs `body`; a `RUN_ERRORS` error is printed as one line and gives exit status 1; a run
    stopped by a signal gives 128 + its number."""
    logging.set_verbosity(logging.WARNING)  # TF's checkpoint INFO lines drown the progress
    try:
        return body(*args, **kwargs) or 0
    except RunStopped as e:
        print(f"{e}", file=sys.stderr)
        return e.exit_code
    except RUN_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def command(body, define_flags, required=(), check=None, name=None, before=None) -> None:
    """A training or analysis command: defines its flags, parses them (with --config_file),
    runs `before()` (which may fill flags not given), checks that `required` ones are set,
    builds the `ExperimentConfig` once, checks it with `check(config)` (which raises absl's
    UsageError) and runs `body(config)` `guarded`; exits with its status. `name`: the
    command's module (default: `body`'s), which its written config names."""

    def main(argv):
        del argv
        if before is not None:
            before()
        require(*required)
        exp = experiment.from_flags(main.__module__)
        if check is not None:
            check(exp)
        return guarded(_checked, body, exp)

    main.__module__ = name or experiment.command_name(body)
    run_command(main, define_flags)


def export_alone_takes_the_run(command_name: str, names=("task_name",),
                               for_action: dict | None = None) -> None:
    """Without --do_train, `--export_dir`, `--do_eval` or `--do_predict` use the finished run in
    --output_dir, so what the run recorded is taken where not given, and said in one line: its
    model config (its albert_config.json), its vocabulary (its copy of the SentencePiece model,
    `carried_tokenizer`, or of the WordPiece --vocab_file), its --max_seq_length and `names` of
    its config.yaml, as `albert_tf.export.export_saved_model --model_dir` takes them (the official
    runner needs them given again; the casing is `carried_run_casing`'s, as for every rerun);
    `for_action` {action flag: names}, names taken for that action only (run_classifier's
    `--do_eval`: its recorded `--dev_file`). Nothing happens for another command's run, a
    directory without one, or a record that cannot be read (the flags' own checks then say what
    is missing)."""
    from absl import flags as absl_flags

    values = absl_flags.FLAGS
    actions = [n for n in ("export_dir", "do_eval", "do_predict")
               if n in values and values[n].value]
    if not values.output_dir or values.do_train or not actions:
        return
    path = os.path.join(values.output_dir, experiment.CONFIG_NAME)
    config_json = os.path.join(values.output_dir, "albert_config.json")
    if not (tf.io.gfile.exists(path) and tf.io.gfile.exists(config_json)):
        return
    try:
        recorded = experiment.read_config_file(path)
    except (ValueError, OSError):
        return
    if recorded.get("command") != command_name:
        return
    settings = {k: v for section in experiment.SECTIONS for k, v in
                (recorded.get(section) or {}).items()}
    names = tuple(names) + tuple(n for action, action_names in (for_action or {}).items()
                                 if action in actions for n in action_names)
    taken = {"max_seq_length": settings.get("max_seq_length"),
             **{n: settings.get(n) for n in names}}

    def given(*flag_names):
        return any(n in values and values[n].present for n in flag_names)

    if not given("albert_config_file", "init_checkpoint", "albert_hub_module_handle"):
        taken["albert_config_file"] = config_json
    if not given("spm_model_file", "vocab_file"):
        try:
            carried = carried_tokenizer(values.output_dir)
        except (ValueError, OSError):
            carried = {"spm_model_file": None}
        vocab = settings.get("vocab_file")
        copy = vocab and os.path.join(values.output_dir, os.path.basename(str(vocab)))
        if carried["spm_model_file"]:
            taken["spm_model_file"] = carried["spm_model_file"]
        elif copy and tf.io.gfile.exists(copy):  # a WordPiece run's copy of its vocabulary
            taken["vocab_file"] = copy
    filled = []
    for name, value in taken.items():
        if value is None or name not in values or values[name].present:
            continue
        default = values[name].value
        if value == default or (isinstance(value, float) and isinstance(default, float)
                                and math.isnan(value) and math.isnan(default)):
            continue
        setattr(values, name, value)
        filled.append(f"--{name} {value}")
    if filled:
        verb = "Exporting" if actions == ["export_dir"] else "Using"
        print(f"{verb} the run in {values.output_dir} as it recorded ({path}): "
              + ", ".join(filled) + ".", flush=True)


def _checked(body, exp: ExperimentConfig):
    """`body()` after the checks that need no data (the pretrained source and the cluster
    flags, so a command that cannot run as asked stops before it writes anything), holding
    the lock of the directory this process writes (`albert_tf.ownership`: the run's
    --output_dir, or a multi-worker run's worker directory in it) for the whole command:
    features, checkpoints, evaluations and predictions alike."""
    if "init_checkpoint" in exp:
        exp = carried_vocabulary(exp, pretrained_source(exp))
    exp = carried_run_casing(exp)
    name = check_cluster_flags(exp) if "distribution_strategy" in exp else None
    if not exp.get("output_dir"):
        return body(exp)
    index, chief = tf_config_worker() if name == "multi_worker_mirrored" else (0, True)
    lock = OutputLock(write_dir_of(exp.output_dir, index, chief), "--output_dir", is_dir=True)
    with lock, _discarded_if_init_fails(exp, lock):
        if exp.get("do_train") and "learning_rate" in exp:
            # A rerun into a run with other settings is refused before it writes features.
            refuse_a_changed_run(exp.output_dir, flag_settings(TrainingConfig.field_values(
                exp.run_settings(), init_checkpoint=pretrained_source(exp))))
        if name == "multi_worker_mirrored":
            # Collective ops must be configured before TensorFlow runs any op, and writing the
            # features does (the packing and windows are TF ops): build the strategy first.
            strategy(exp)
        return body(exp)


@contextlib.contextmanager
def _discarded_if_init_fails(exp: ExperimentConfig, lock: OutputLock):
    """A run whose --init_checkpoint (or hub module) cannot be read (damaged, another model,
    non-finite weights) fails after the run directory's features and records are written:
    where this command created the directory and no checkpoint was saved in it, what it
    wrote is removed (`OutputLock.discard_new_output`), so no skeleton run is left. A
    directory that existed before is left as it is."""
    try:
        yield
    except (CheckpointError, CheckpointMismatchError, NonFiniteLossError):
        if (exp.get("init_checkpoint") or exp.get("albert_hub_module_handle")) \
                and runs.latest_prefix(lock.target) is None:
            lock.discard_new_output()
        raise


# The pretrained source, which carries the config and the vocabulary that
# --albert_config_file and --spm_model_file otherwise give (a fine-tuning command's `required`).
PRETRAINED = "init_checkpoint|albert_hub_module_handle"


def carried_vocabulary(exp: ExperimentConfig, pretrained: str | None) -> ExperimentConfig:
    """What the pretrained source's tokenizer carries (`carried_tokenizer`) becomes the run's
    where the command line did not say: without --spm_model_file and --vocab_file, its
    SentencePiece model (a `.keras` model's, the `.model` of a run, of our directory, beside a
    TF1 checkpoint, a Hugging Face folder's spiece.model) becomes --spm_model_file; without
    --do_lower_case given, the casing it records (a cased model stays cased), so config.yaml,
    the run's copy and the export say them; a --do_lower_case given against the recorded
    casing is used, with a warning naming both. Returns the config with what it carries."""
    if not pretrained:
        return exp
    need_vocabulary = "spm_model_file" in exp and not exp.spm_model_file \
        and not exp.get("vocab_file")
    if not need_vocabulary and "do_lower_case" not in exp:
        return exp
    carried = carried_tokenizer(pretrained, check=need_vocabulary)
    if need_vocabulary:
        if not carried["spm_model_file"]:
            raise ValueError(f"--init_checkpoint {pretrained} carries no SentencePiece model; "
                             "pass --spm_model_file (or --vocab_file for a WordPiece "
                             "vocabulary).")
        exp = exp.replaced(spm_model_file=carried["spm_model_file"])
    recorded = carried["do_lower_case"]
    if "do_lower_case" not in exp or recorded is None or recorded == exp.do_lower_case:
        return exp
    if exp.is_given("do_lower_case"):
        logging.warning("--do_lower_case=%s differs from the casing %s records "
                        "(do_lower_case=%s): the run lowercases as the flag says.",
                        exp.do_lower_case, pretrained, recorded)
        return exp
    return exp.replaced(do_lower_case=recorded)


def carried_run_casing(exp: ExperimentConfig) -> ExperimentConfig:
    """A command rerun on a run's --output_dir (to resume, evaluate, predict or export it)
    tokenizes as the run did: without --do_lower_case given, the casing the run's config.yaml
    records (a cased run stays cased, with a note); given against it, the flag is used with a
    warning naming both. Read before the command writes anything; returns the config with the
    casing it takes."""
    output_dir = exp.get("output_dir")
    if "do_lower_case" not in exp or not output_dir or not os.path.isdir(output_dir):
        return exp
    recorded = recorded_casing(output_dir)
    if recorded is None or recorded == exp.do_lower_case:
        return exp
    if exp.is_given("do_lower_case"):
        print(f"Warning: --do_lower_case={exp.do_lower_case} differs from the casing the run "
              f"in {output_dir} records (do_lower_case={recorded} in its "
              f"{experiment.CONFIG_NAME}): the command lowercases as the flag says.",
              file=sys.stderr, flush=True)
        return exp
    print(f"Note: --do_lower_case={recorded}, as the run in {output_dir} records (its "
          f"{experiment.CONFIG_NAME}).", file=sys.stderr, flush=True)
    return exp.replaced(do_lower_case=recorded)


def model_and_tokenizer(exp: ExperimentConfig) -> tuple[AlbertConfig, Tokenizer]:
    """--albert_config_file (without it, the config the --init_checkpoint source carries:
    `checkpoint_config`) and the tokenizer of the official flags (`make_tokenizer`:
    --spm_model_file, with the official --vocab_file checked against it where one is given; or
    --vocab_file alone, a WordPiece vocabulary), checked against each other and against
    --max_seq_length."""
    pretrained = pretrained_source(exp) if "init_checkpoint" in exp else None
    if pretrained and not exp.albert_config_file:
        config = checkpoint_config(pretrained)
    else:
        config = AlbertConfig.from_json_file(exp.albert_config_file)
    tokenizer = make_tokenizer(exp.spm_model_file, exp.get("vocab_file"), exp.do_lower_case)
    if tokenizer.vocab_size != config.vocab_size:
        flag = "--spm_model_file" if exp.spm_model_file else "--vocab_file"
        raise ValueError(f"{flag} has {tokenizer.vocab_size} pieces but the "
                         f"model's vocab_size is {config.vocab_size}.")
    problem = config.sequence_length_problem(exp.max_seq_length)
    if problem:
        raise ValueError(problem + ".")
    return config, tokenizer


def pretrained_source(exp: ExperimentConfig) -> str | None:
    """Where the model's pretrained weights come from: --init_checkpoint, or the official
    --albert_hub_module_handle naming a TF-Hub module (TF1 format) in a local directory. A URL
    is refused (nothing is downloaded at run time): a run never trains from random weights
    when pretrained ones were asked for."""
    handle = exp.get("albert_hub_module_handle")
    if not handle:
        return exp.init_checkpoint
    if exp.init_checkpoint:
        raise ValueError(f"--albert_hub_module_handle {handle} and --init_checkpoint "
                         f"{exp.init_checkpoint} both name the pretrained weights; give one.")
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", handle) and not handle.startswith("gs://"):
        raise ValueError(
            f"--albert_hub_module_handle {handle} is a URL, and this command downloads nothing. "
            f"Download the module (e.g. {handle.rstrip('/')}?tf-hub-format=compressed), unpack "
            "the .tar.gz into a directory and pass that directory as "
            "--albert_hub_module_handle, or pass the official checkpoint (model.ckpt-best) "
            "as --init_checkpoint.")
    variables = os.path.join(handle, "variables", "variables.index")
    if not tf.io.gfile.exists(variables):
        raise ValueError(f"--albert_hub_module_handle {handle} is not a TF-Hub module "
                         f"directory: {variables} does not exist (an unpacked module holds "
                         "saved_model.pb or tfhub_module.pb, variables/ and assets/).")
    return handle


def training_config(exp: ExperimentConfig, albert_config, **overrides) -> TrainingConfig:
    """`TrainingConfig.from_settings` of the experiment, with the pretrained weights of
    `pretrained_source`."""
    return TrainingConfig.from_settings(exp.run_settings(), albert_config,
                                        **dict({"init_checkpoint": pretrained_source(exp)},
                                               **overrides))


TPU_ONLY_FLAGS = ("tpu", "tpu_name", "tpu_zone", "gcp_project", "master", "num_tpu_cores")


def check_cluster_flags(exp: ExperimentConfig) -> str:
    """The strategy's name; raises ValueError for a TPU flag given to a run not on a TPU (it
    would be ignored)."""
    name = exp.distribution_strategy
    if name != "tpu":
        given = [f for f in TPU_ONLY_FLAGS if exp.is_given(f) and exp.get(f) is not None]
        if given:
            raise ValueError(f"--{given[0]} is for a TPU run and this run is not one "
                             f"(--distribution_strategy={name}): add --use_tpu (or "
                             "--distribution_strategy=tpu), or drop it.")
    return name


_STRATEGIES = {}  # the process's strategy, built once


def strategy(exp: ExperimentConfig) -> tf.distribute.Strategy:
    """The strategy of --distribution_strategy/--tpu, or the official --use_tpu with
    --tpu_name (or --master), --tpu_zone and --gcp_project for the TPU resolver; TPU flags of
    a run that is not on a TPU are an error, not ignored. Built once per process (a
    multi-worker strategy can be configured only once, before any op runs)."""
    name = check_cluster_flags(exp)
    if name not in _STRATEGIES:
        _STRATEGIES[name] = _build_strategy(name, exp)
    return _STRATEGIES[name]


def _build_strategy(name: str, exp: ExperimentConfig) -> tf.distribute.Strategy:
    if name != "tpu":
        return get_strategy(name)
    result = get_strategy(name, tpu=exp.tpu or exp.master,
                          connect_timeout_s=exp.get("tpu_connect_timeout", 60.0),
                          zone=exp.tpu_zone, project=exp.gcp_project)
    if exp.is_given("num_tpu_cores") and result.num_replicas_in_sync != exp.num_tpu_cores:
        raise ValueError(f"--num_tpu_cores={exp.num_tpu_cores} but the TPU has "
                         f"{result.num_replicas_in_sync} cores: drop the flag or name another "
                         "TPU.")
    return result


LABELS_FILE = "labels.json"


def run_labels(output_dir: str, labels, train_file: str | None, kind: str = "labels") -> list:
    """The class names of a fine-tuning run whose labels come from its training file (run_tagging's
    tags, run_classifier's own data): `labels` (the training file's, in id order) written to
    OUTPUT_DIR/labels.json, or, with `labels` None (no training file this time), the list a
    training run wrote there, so a later --do_eval, --do_predict or --export_dir uses the same
    ids. A training file of other labels than the run's is an error (its ids would differ)."""
    path = os.path.join(output_dir, LABELS_FILE)
    kept = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
    if labels is None:
        if kept is None:
            raise ValueError(f"No {kind}: give --train_file, or an --output_dir where a "
                             f"training run wrote {LABELS_FILE}.")
        return kept
    labels = list(labels)
    if kept is not None and kept != labels:
        raise ValueError(f"--train_file {train_file} has the {kind} {labels}, but {path} (an "
                         f"earlier run in --output_dir) has {kept}; use another --output_dir.")
    os.makedirs(output_dir, exist_ok=True)
    write_json(path, labels)
    return labels


def format_metrics(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                     for k, v in metrics.items())


def run_task(exp: ExperimentConfig, task, cfg, exporter=None,
             predict=False) -> tuple[object, dict]:
    """Trains and/or evaluates `task` with `cfg` (a `TrainingConfig`; None: neither) under the
    flags' strategy; with evaluation, writes OUTPUT_DIR/eval_results.json (each metric, the
    task and the step) and prints the metrics. Then, for `predict` or an `exporter`, the model
    of `model_for_prediction` (the best evaluated checkpoint where evaluation kept one), which
    the exporter writes (on the chief) and which is returned with the run's summary; the
    model is None without `predict` or an exporter, or when training stopped early. The
    summary's `predicted_by` is (which, step) of that model."""
    run, summary = None, {}
    if cfg is not None:
        run = TrainingRun(task, cfg, strategy(exp))
        if cfg.do_train and run.is_chief:
            record_config(exp, cfg.output_dir)
            keep_vocabulary(exp, cfg.output_dir)
        summary = run.run()
        raise_if_stopped(summary)
        if cfg.do_eval and "eval" in summary and run.is_chief:
            results = evaluation_results(cfg.output_dir, task, summary, trained=cfg.do_train)
            write_json(os.path.join(cfg.output_dir, "eval_results.json"), results)
            print(evaluation_line(task, results))
    if not (predict or exporter) or (cfg is not None and cfg.do_train
                                     and summary.get("status") != "completed"):
        return None, summary
    model, which, step = model_for_prediction(exp, task, run)
    summary["predicted_by"] = (which, step)
    if exporter is not None and (run is None or run.is_chief):
        summary["exports"] = export_models(exporter, [(model, which, step)])
    return model, summary


def evaluation_results(output_dir: str, task, summary: dict, trained: bool = True) -> dict:
    """eval_results.json. Of a training run: the evaluation of the run's model, as the official
    runners report it (their `model.ckpt-best`, `best_trial.txt`): the best evaluated
    checkpoint's metrics and its `global_step` (the model `--do_predict` and `--export_dir`
    use), the task, and the evaluation just run as `last` (its metrics and step). Of an
    evaluation alone (`trained` False: perhaps on another --dev_file), or without a readable
    best: the evaluation just run, `last` the same."""
    last = dict(summary["eval"], global_step=int(summary.get("step") or 0))
    best = runs.best_eval(output_dir) if trained else None
    if not (isinstance(best, dict) and isinstance(best.get("global_step"), int)
            and task.best_metric in best):
        best = last
    return dict(best, task=task.name, last=last)


def evaluation_line(task, results: dict) -> str:
    """The printed headline of `evaluation_results`: the best's metrics and step, and the last
    evaluation's key metric where it is another step."""
    metrics = {k: v for k, v in results.items() if k not in ("task", "last", "global_step")}
    step, last = results["global_step"], results["last"]
    line = f"eval: {format_metrics(metrics)} (step {step}"
    if last["global_step"] == step:
        return line + ")"
    key = task.best_metric
    return (line + f", the best evaluated checkpoint; the last, step {last['global_step']}: "
            f"{key} {last[key]:.4f})")


def record_config(exp: ExperimentConfig, output_dir: str) -> None:
    """The effective config to OUTPUT_DIR/config.yaml (`ExperimentConfig.write`), by a training
    run's chief once the run is built: every check has passed, so a command that fails never
    replaces the config of the run in its directory."""
    exp.write(output_dir)


def keep_vocabulary(exp: ExperimentConfig, output_dir: str) -> None:
    """--spm_model_file (or, without one, the WordPiece --vocab_file) copied beside a
    fine-tuning run's checkpoints (unless one of that name is there), so the run directory is a
    complete model: `albert_tf.export.export_saved_model --model_dir RUN` finds it."""
    spm = exp.get("spm_model_file") or exp.get("vocab_file")
    if not spm:
        return
    target = os.path.join(output_dir, os.path.basename(spm))
    if not tf.io.gfile.exists(target):
        atomic_copy(spm, target)


def read_task_checkpoint(exp: ExperimentConfig, task, prefix: str):
    """`task`'s model from the checkpoint `prefix`, every weight of the model read from it: a
    checkpoint of another model (a pretraining run's, without the task's head) is an error,
    never a model with a random head."""
    model = task.build_model(performance=Performance(remove_padding=exp.remove_padding,
                                                     use_einsum=exp.use_einsum))
    with reading_checkpoint(prefix):  # a damaged file is named
        status = tf.train.Checkpoint(model=model).read(prefix).expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        paths = re.findall(r"path=([^,\s]+)", str(e)) or [str(e)[:200]]
        raise CheckpointError(
            f"{prefix} does not hold a {task.name} model: it has no value for "
            f"{', '.join(paths[:4])}{' ...' if len(paths) > 4 else ''}. Is --output_dir a "
            "pretraining run? Fine-tune first (--do_train, with --init_checkpoint for the "
            "pretrained weights), or point --output_dir at a fine-tuning run.") from None
    return model


def model_for_prediction(exp: ExperimentConfig, task,
                         run=None) -> tuple[object, str, int | None]:
    """(model, which, step) that predictions and exports use, as the official runners'
    `model.ckpt-best`: the best evaluated checkpoint of --output_dir where evaluation kept one
    ("best"), else the model `run` trained ("final"), else the latest checkpoint of
    --output_dir ("latest"); checkpoints are read strictly (`read_task_checkpoint`). Prints
    which model and step."""
    out = exp.output_dir
    best = runs.best_prefix(out)
    if runs.has_best(out):
        info = runs.best_eval(out)
        model, which, step = read_task_checkpoint(exp, task, best), "best", int(info["global_step"])
        what = f"the best evaluated checkpoint ({task.best_metric} " \
               f"{info[task.best_metric]:.4f} at step {step}, {best})"
    elif run is not None and run.cfg.do_train:
        model, which = run.model, "final"
        step = int(run.optimizer.iterations.numpy())
        what = f"the trained model (step {step}; no evaluation kept a best checkpoint)"
    else:
        latest = runs.latest_prefix(out)
        if not latest:
            asked = [f"--{name}" for name in ("do_predict", "export_dir") if exp.get(name)]
            pretrained = exp.get("init_checkpoint")
            raise CheckpointError(
                f"{' and '.join(asked) or 'Prediction'} without --do_train needs a fine-tuned "
                f"checkpoint in --output_dir {out}, and it holds none: fine-tune first "
                "(--do_train), or point --output_dir at a fine-tuning run"
                + (" (--init_checkpoint is where fine-tuning starts, not a fine-tuned model)"
                   if pretrained else "") + ".")
        model, which = read_task_checkpoint(exp, task, latest), "latest"
        step = int(latest.rsplit("-", 1)[-1]) if latest.rsplit("-", 1)[-1].isdigit() else None
        what = f"the latest checkpoint ({latest})"
    doing = " and ".join(part for part, asked in (("predicting", exp.get("do_predict")),
                                                  ("exporting", exp.get("export_dir"))) if asked)
    print(f"{doing or 'predicting'} with {what}", flush=True)
    return model, which, step
