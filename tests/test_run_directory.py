"""The loop's parts on their own: `RunDirectory` (what a run records in OUTPUT_DIR and what a
resumed run must match), the actions (`EvaluateAndKeepBest`, `export_models`) and the
`Controller` (when it runs steps, saves, evaluates, stops, resumes), each with a fake trainer
and task: the numbers each writes, keeps and refuses."""

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.checkpoints.common import CheckpointError
from albert_tf.checkpoints.runs import checkpoint_prefix
from albert_tf.commands.runner import evaluation_line, evaluation_results
from albert_tf.training.actions import EvaluateAndKeepBest, export_models
from albert_tf.training.run_directory import OutputDirMismatchError, RunDirectory

SETTINGS = {"kind": "classifier", "num_labels": 3, "learning_rate": 2e-5, "optimizer": "adamw"}
NO_DATA = "/nonexistent/train-*.tfrecord"  # no sidecar: no SentencePiece model to copy
CONFIG = AlbertConfig(vocab_size=97, embedding_size=10, hidden_size=24, num_attention_heads=4,
                      intermediate_size=37, num_hidden_layers=2)


def _checkpoint(directory, step):
    """A checkpoint at `step` in `directory` (what makes a run resumable)."""
    tf.train.Checkpoint(v=tf.Variable(float(step))).write(os.path.join(directory, f"ckpt-{step}"))
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "ckpt-{step}"\n')


def test_settings_are_recorded_then_a_resumed_run_must_match_them(tmp_path):
    notes = []
    run = RunDirectory(str(tmp_path), log=notes.append)
    run.check_settings(SETTINGS, resumed=False)
    assert json.load(open(tmp_path / "train_settings.json")) == SETTINGS and notes == []
    run.check_settings(dict(SETTINGS), resumed=True)  # the same settings resume
    with pytest.raises(OutputDirMismatchError) as e:
        run.check_settings(dict(SETTINGS, learning_rate=1e-4), resumed=True)
    assert "learning_rate: 2e-05 there, 0.0001 now" in str(e.value)
    assert "optimizer" not in str(e.value).split("(", 1)[1].split(")")[0]  # only what differs
    assert json.load(open(tmp_path / "train_settings.json")) == SETTINGS  # kept as it was
    (tmp_path / "train_settings.json").write_text("[1, 2")
    with pytest.raises(OutputDirMismatchError, match="train_settings.json is damaged"):
        run.check_settings(SETTINGS, resumed=True)
    os.remove(tmp_path / "train_settings.json")
    run.check_settings(SETTINGS, resumed=True)  # an earlier version's run: recorded, said
    assert len(notes) == 1 and "has no train_settings.json" in notes[0]
    assert json.load(open(tmp_path / "train_settings.json")) == SETTINGS


def test_a_worker_records_nothing_and_checkpoints_of_another_model_are_refused(tmp_path):
    worker = RunDirectory(str(tmp_path), worker_index=1, is_chief=False)
    worker.check_settings(SETTINGS, resumed=False)
    worker.check_model(CONFIG, NO_DATA)
    assert not (tmp_path / "train_settings.json").exists()
    assert not (tmp_path / "albert_config.json").exists()
    chief = RunDirectory(str(tmp_path))
    chief.check_model(CONFIG, NO_DATA)
    assert AlbertConfig.from_json_file(str(tmp_path / "albert_config.json")) == CONFIG
    other = CONFIG.replace(hidden_size=32, intermediate_size=64)
    chief.check_model(other, NO_DATA)  # no checkpoint yet: the new config is recorded
    assert AlbertConfig.from_json_file(str(tmp_path / "albert_config.json")) == other
    _checkpoint(str(tmp_path), 7)
    with pytest.raises(OutputDirMismatchError) as e:
        chief.check_model(CONFIG, NO_DATA)
    assert "'hidden_size': (32, 24)" in str(e.value)
    assert "'intermediate_size': (64, 37)" in str(e.value)
    os.remove(tmp_path / "albert_config.json")
    with pytest.raises(OutputDirMismatchError, match="holds checkpoints but no "
                                                     "albert_config.json"):
        chief.check_model(CONFIG, NO_DATA)
    assert chief.latest_checkpoint() == str(tmp_path / "ckpt-7")
    assert chief.resume_checkpoint() == str(tmp_path / "ckpt-7")


class _Trainer:
    """What the actions ask of a trainer: `evaluate()` (the next of `results`), the task's
    metric names and best metric, and the model the best checkpoint holds."""

    def __init__(self, results):
        self.results = list(results)
        self.calls = 0
        self.task = SimpleNamespace(metric_names=("accuracy", "loss"), best_metric="accuracy")
        self.model = tf.Module()
        self.model.weight = tf.Variable(0.0)

    def evaluate(self):
        self.calls += 1
        return self.results.pop(0)


def test_evaluation_keeps_the_best_checkpoint_and_writes_each_step_last(tmp_path):
    run = RunDirectory(str(tmp_path))
    trainer = _Trainer([{"accuracy": 0.5, "loss": 0.9}, {"accuracy": 0.75, "loss": 0.6},
                        {"accuracy": 0.625, "loss": 0.5}])
    lines = []
    evaluate = EvaluateAndKeepBest(trainer, run, log=lines.append)
    for step, weight in ((10, 1.0), (20, 2.0), (30, 3.0)):
        trainer.model.weight.assign(weight)  # the model as it is at that step
        evaluate(step)
    assert [json.load(open(run.eval_file(s)))["accuracy"] for s in (10, 20, 30)] == [
        0.5, 0.75, 0.625]
    assert json.load(open(run.eval_file(30))) == {"accuracy": 0.625, "loss": 0.5,
                                                  "global_step": 30}
    assert run.best_metrics() == {"accuracy": 0.75, "loss": 0.6, "global_step": 20}
    restored = tf.Module()
    restored.weight = tf.Variable(0.0)
    tf.train.Checkpoint(model=restored).read(run.best_prefix()).assert_consumed()
    assert float(restored.weight.numpy()) == 2.0  # the model of step 20, not the last
    assert lines == ["eval at step 10: accuracy 0.5000, loss 0.9000",
                     "eval at step 20: accuracy 0.7500, loss 0.6000",
                     "eval at step 30: accuracy 0.6250, loss 0.5000"]
    # a resumed run does not evaluate a step evaluated before; the last evaluation is reused
    evaluate(30, resumed=True)
    assert trainer.calls == 3
    assert evaluate.metrics_at(30) == {"accuracy": 0.625, "loss": 0.5}
    trainer.results.append({"accuracy": 0.25, "loss": 2.0})
    assert evaluate.metrics_at(40) == {"accuracy": 0.25, "loss": 2.0} and trainer.calls == 4
    # the TensorBoard scalars of each evaluation
    events = [e for f in tf.io.gfile.glob(str(tmp_path / "eval" / "events.*"))
              for e in tf.compat.v1.train.summary_iterator(f)]
    accuracy = sorted((e.step, float(tf.make_ndarray(v.tensor))) for e in events
                      for v in e.summary.value if v.tag == "accuracy")
    np.testing.assert_allclose([a for _, a in accuracy], [0.5, 0.75, 0.625])
    assert [s for s, _ in accuracy] == [10, 20, 30]


def test_eval_results_are_the_best_checkpoints_with_the_last_beside_them(tmp_path, capsys):
    """eval_results.json holds the best evaluated checkpoint's metrics and step, as the official
    runners report `model.ckpt-best` (it held the last evaluation's: 0.625 at step 30 where the
    model that predicts and exports scored 0.75 at step 20); the last is under `last`."""
    run = RunDirectory(str(tmp_path))
    trainer = _Trainer([{"accuracy": 0.5, "loss": 0.9}, {"accuracy": 0.75, "loss": 0.6},
                        {"accuracy": 0.625, "loss": 0.5}])
    evaluate = EvaluateAndKeepBest(trainer, run, log=lambda line: None)
    for step in (10, 20, 30):
        evaluate(step)
    task = SimpleNamespace(name="mrpc", best_metric="accuracy")
    results = evaluation_results(str(tmp_path), task, {"eval": evaluate.metrics_at(30),
                                                       "step": 30})
    assert results == {"accuracy": 0.75, "loss": 0.6, "global_step": 20, "task": "mrpc",
                       "last": {"accuracy": 0.625, "loss": 0.5, "global_step": 30}}
    assert evaluation_line(task, results) == (
        "eval: accuracy 0.7500, loss 0.6000 (step 20, the best evaluated checkpoint; the last, "
        "step 30: accuracy 0.6250)")
    # the best is the last: one step named; no best kept (a worker's view): the last
    results = evaluation_results(str(tmp_path), task, {"eval": {"accuracy": 0.75, "loss": 0.6},
                                                       "step": 20})
    assert evaluation_line(task, results) == "eval: accuracy 0.7500, loss 0.6000 (step 20)"
    results = evaluation_results(str(tmp_path / "other"), task,
                                 {"eval": {"accuracy": 0.5}, "step": 10})
    assert results == {"accuracy": 0.5, "global_step": 10, "task": "mrpc",
                       "last": {"accuracy": 0.5, "global_step": 10}}
    # an evaluation alone (perhaps of another --dev_file): the evaluation asked for
    results = evaluation_results(str(tmp_path), task, {"eval": {"accuracy": 0.55}, "step": 30},
                                 trained=False)
    assert results == {"accuracy": 0.55, "global_step": 30, "task": "mrpc",
                       "last": {"accuracy": 0.55, "global_step": 30}}
    # a best/best_eval.json without its step (edited by hand): the last, not a KeyError
    with open(tmp_path / "best" / "best_eval.json", "w") as f:
        json.dump({"accuracy": 0.9}, f)
    assert evaluation_results(str(tmp_path), task, {"eval": {"accuracy": 0.5}, "step": 40})[
        "global_step"] == 40


def test_a_worker_evaluates_but_writes_nothing(tmp_path):
    worker = RunDirectory(str(tmp_path), worker_index=1, is_chief=False)
    trainer = _Trainer([{"accuracy": 0.5, "loss": 0.9}])
    EvaluateAndKeepBest(trainer, worker, log=None)(10)
    assert trainer.calls == 1  # the evaluation is collective: every worker runs it
    assert not os.path.exists(worker.eval_file(10)) and worker.best_metrics() is None


def test_export_models_asks_the_exporter_for_each_model():
    calls = []

    def exporter(model, which, step):
        calls.append((model, which, step))
        return f"/exports/{which}/{step}"

    assert export_models(exporter, [("m1", "final", 100), ("m2", "best", 60)]) == {
        "final": "/exports/final/100", "best": "/exports/best/60"}
    assert calls == [("m1", "final", 100), ("m2", "best", 60)]


# ---------------------------------------------------------------------------------------------
# The Controller with a fake trainer: when it runs steps, saves, evaluates, stops and resumes.
class _LoopTrainer:
    """A trainer with only the Controller's interface (`Trainer`'s): its `train` of `n` steps
    adds `n` to its step and returns the loss of the last step (its number, as a float); `bad`
    is the step whose update is not finite (None: none)."""

    in_cluster, cluster_resolver = False, None  # one device: no preemption handler

    def __init__(self, step=0, bad=None):
        self.step, self.bad, self.failed = step, bad, None
        self.loops, self.set_backs = [], []

    def iterator_at(self, plan, step):
        return iter(())

    def train(self, iterator, n):
        self.loops.append(n)
        if self.bad is not None and self.step < self.bad <= self.step + n:
            self.failed = self.bad - 1  # steps before it were applied
        self.step += n
        return {"loss": float(self.step), "grad_norm": 0.25, "learning_rate": 0.5,
                "accuracy": 4.0 / 8}

    def progress(self, figures):
        return f"acc {figures['accuracy']:.3f}"

    def failed_step(self):
        return self.failed

    def weights_finite(self):
        return True

    def largest_weight(self):
        return 3.0, "w"

    def set_back(self, good_step):
        self.set_backs.append(good_step)
        self.step = good_step


class _Manager:
    def __init__(self):
        self.saved, self.latest_checkpoint = [], None

    def save(self, checkpoint_number):
        self.saved.append(checkpoint_number)
        self.latest_checkpoint = f"ckpt-{checkpoint_number}"
        return self.latest_checkpoint


def _controller(trainer, **cfg):
    from albert_tf.training.controller import Controller

    cfg = SimpleNamespace(**dict(dict(num_train_steps=10, save_checkpoints_steps=4,
                                      iterations_per_loop=3, train_batch_size=8,
                                      mixed_precision="float32", init_checkpoint=None,
                                      output_dir="/run"), **cfg))
    evaluated, lines = [], []
    manager = _Manager()
    controller = Controller(trainer, cfg, manager, plan=None, log=lines.append,
                            on_checkpoint=lambda step, resumed=False: evaluated.append(
                                (step, resumed)), verbose=False)
    controller.position_input()
    return controller, manager, evaluated, lines


def test_controller_runs_loops_to_each_checkpoint_saves_evaluates_and_resumes():
    trainer = _LoopTrainer()
    controller, manager, evaluated, lines = _controller(trainer)
    result = controller.train(tf.summary.create_noop_writer())
    # loops end at each checkpoint (every 4 steps) and at the last step (10)
    assert trainer.loops == [3, 1, 3, 1, 2] and manager.saved == [4, 8, 10]
    assert evaluated == [(4, False), (8, False), (10, False)]
    assert lines == ["saved ckpt-4", "saved ckpt-8", "saved ckpt-10"]
    assert result["status"] == "completed" and result["step"] == 10
    history = result["history"]
    assert [r["step"] for r in history] == [3, 4, 7, 8, 10]
    assert [r["loss"] for r in history] == [3.0, 4.0, 7.0, 8.0, 10.0]
    assert {r["accuracy"] for r in history} == {0.5} and {r["learning_rate"] for r in history} \
        == {0.5}
    assert controller.figures(history[-1]).startswith("loss 10.0000 | acc 0.500 | lr 5.000e-01 "
                                                      "| gnorm 0.250 | ")
    # resumed at a checkpoint: the evaluation the stopped run missed, then the rest
    trainer = _LoopTrainer(step=8)
    controller, manager, evaluated, _ = _controller(trainer)
    assert controller.train(tf.summary.create_noop_writer())["step"] == 10
    assert trainer.loops == [2] and manager.saved == [10]
    assert evaluated == [(8, True), (10, False)]


def test_controller_stops_on_a_non_finite_step_with_the_model_before_it_saved():
    from albert_tf.training.controller import NonFiniteLossError

    trainer = _LoopTrainer(bad=6)
    controller, manager, evaluated, _ = _controller(trainer)
    with pytest.raises(NonFiniteLossError) as e:
        controller.train(tf.summary.create_noop_writer())
    # steps 1-5 applied; step 6 (in the loop of steps 5-7) was not: the model after step 5
    assert trainer.loops == [3, 1, 3] and trainer.set_backs == [5]
    assert manager.saved == [4, 5] and evaluated == [(4, False)]
    assert str(e.value).startswith("Non-finite loss, gradient or updated weights at step 6 "
                                   "(updates are 1-based); that step was not applied. The "
                                   "model after step 5 is saved at ckpt-5.")


def test_a_run_whose_state_file_or_checkpoints_were_removed_resumes_from_what_is_left(tmp_path):
    """The `checkpoint` state file removed by hand: the run resumes from the newest ckpt-N on
    disk, said (it started afresh, silently, beside them); the state file's latest removed:
    the newest one left, said; none left: a fresh start, said."""
    notes = []
    run = RunDirectory(str(tmp_path), log=notes.append)
    for step in (4, 12, 8):
        _checkpoint(str(tmp_path), step)  # the state file names the last written, 8
    os.remove(tmp_path / "checkpoint")
    assert run.latest_checkpoint() == str(tmp_path / "ckpt-12")
    assert run.resume_checkpoint() == str(tmp_path / "ckpt-12")
    assert notes == [f"Note: {tmp_path} has no `checkpoint` state file (removed?); the run "
                     "resumes from the newest intact ckpt-N on disk."]
    assert checkpoint_prefix(str(tmp_path)) == str(tmp_path / "ckpt-12")  # export, convert
    notes.clear()
    run.recover_state_file()  # what a run does before its checkpoint manager: they are kept
    assert notes == [f"Note: {tmp_path} had no `checkpoint` state file (a run stopped before "
                     "it recorded its checkpoint, or the file was removed); it is written again "
                     "for the checkpoints on disk: ckpt-4, ckpt-8, ckpt-12 (the latest)."]
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == str(tmp_path / "ckpt-12")
    assert list(state.all_model_checkpoint_paths) == [str(tmp_path / f"ckpt-{n}")
                                                      for n in (4, 8, 12)]
    # with their times, so keep_checkpoint_max prunes them (kept for good without)
    times = list(state.all_model_checkpoint_timestamps)
    assert times == [pytest.approx(os.path.getmtime(tmp_path / f"ckpt-{n}.index"), abs=1.0)
                     for n in (4, 8, 12)]
    notes.clear()
    assert run.resume_checkpoint() == str(tmp_path / "ckpt-12") and notes == []
    with open(tmp_path / "checkpoint", "w") as f:
        f.write('model_checkpoint_path: "ckpt-12"\nall_model_checkpoint_paths: "ckpt-4"\n'
                'all_model_checkpoint_paths: "ckpt-12"\n')
    for step in (12, 8):  # moved away by hand; the state file still names 12
        for name in os.listdir(tmp_path):
            if name.startswith(f"ckpt-{step}."):
                os.remove(tmp_path / name)
    assert run.latest_checkpoint() == str(tmp_path / "ckpt-4")
    assert run.resume_checkpoint() == str(tmp_path / "ckpt-4")
    assert notes == [f"Note: {tmp_path / 'ckpt-12'} is gone (its .index is missing); "
                     f"resuming from {tmp_path / 'ckpt-4'}, the newest intact checkpoint."]
    for name in os.listdir(tmp_path):
        if name.startswith("ckpt-4."):
            os.remove(tmp_path / name)
    notes.clear()
    assert run.latest_checkpoint() is None and run.resume_checkpoint() is None
    assert notes == [f"Note: {tmp_path}'s `checkpoint` state file lists ckpt-4, ckpt-12, none "
                     "of which is on disk: the run starts from step 0."]


def _cut_short(prefix):
    """The index of `prefix` as a save killed while writing it leaves it: TensorFlow writes the
    merged .index in place after the data file, then the state file."""
    os.truncate(prefix + ".index", os.path.getsize(prefix + ".index") // 2)


def _cut_short_note(prefix):
    return (f"Note: {prefix}.index is cut short and no `checkpoint` state file records it: a "
            "save the stopped run did not finish, removed (the run saves that step again).")


def test_a_first_save_cut_short_is_removed_and_the_run_starts_from_step_0(tmp_path):
    """Killed while writing its first checkpoint, a run's directory holds a ckpt-N whose .index
    is cut short and no state file: the rerun removes it, says so, and starts from step 0 (it
    refused: "no intact checkpoint to resume ... Restore a copy of the run", a clean-clone CI
    failure); nothing else in the directory is touched."""
    notes = []
    run = RunDirectory(str(tmp_path), log=notes.append)
    prefix = str(tmp_path / "ckpt-30")
    tf.train.Checkpoint(v=tf.Variable(30.0)).write(prefix)  # no state file: not recorded
    (tmp_path / "train_settings.json").write_text("{}")
    _cut_short(prefix)
    run.remove_unfinished(cut_short=False)  # a worker of several: kept (refused by name)
    assert notes == [] and os.path.exists(prefix + ".index")
    (tmp_path / "checkpoint").write_text("not a state file {")  # unreadable: nothing known
    run.remove_unfinished()
    assert notes == [] and os.path.exists(prefix + ".index")
    os.remove(tmp_path / "checkpoint")
    run.remove_unfinished()
    assert notes == [_cut_short_note(prefix)]
    assert sorted(os.listdir(tmp_path)) == ["train_settings.json"]
    notes.clear()
    run.recover_state_file()
    assert run.latest_checkpoint() is None and run.resume_checkpoint() is None and notes == []


def test_a_later_save_cut_short_is_removed_and_the_run_resumes_from_the_one_before(tmp_path):
    """ckpt-4 whole and recorded, ckpt-8 cut short (not recorded yet): ckpt-8 is removed and the
    run resumes from ckpt-4; the same with the state file gone (it was rebuilt listing ckpt-8
    as the latest). A data file cut short with a whole index is no killed save (the index is
    written last): kept, and passed over by the resume as before."""
    for state_file in (True, False):
        directory = tmp_path / str(state_file)
        directory.mkdir()
        notes = []
        run = RunDirectory(str(directory), log=notes.append)
        for step in (4, 8):
            _checkpoint(str(directory), step)
        with open(directory / "checkpoint", "w") as f:
            f.write('model_checkpoint_path: "ckpt-4"\n')
        if not state_file:
            os.remove(directory / "checkpoint")
        _cut_short(str(directory / "ckpt-8"))
        run.remove_unfinished()
        assert notes == [_cut_short_note(directory / "ckpt-8")]
        assert not any(name.startswith("ckpt-8") for name in os.listdir(directory))
        notes.clear()
        run.recover_state_file()
        assert run.resume_checkpoint() == str(directory / "ckpt-4")
    notes.clear()
    _checkpoint(str(directory), 12)
    os.remove(directory / "checkpoint")
    data = str(directory / "ckpt-12.data-00000-of-00001")
    os.truncate(data, os.path.getsize(data) // 2)
    run.remove_unfinished()
    assert notes == [] and os.path.exists(data)
    run.recover_state_file()
    notes.clear()
    assert run.resume_checkpoint() == str(directory / "ckpt-4")
    assert len(notes) == 1 and notes[0].startswith(f"Note: {data} is damaged (truncated")


def test_a_recorded_checkpoint_damaged_with_none_intact_is_kept_and_refused(tmp_path):
    """A checkpoint the state file records as saved, its index damaged since, and nothing
    intact: kept, and the run refuses (starting from step 0 would silently drop a run's
    finished steps)."""
    notes = []
    run = RunDirectory(str(tmp_path), log=notes.append)
    _checkpoint(str(tmp_path), 12)
    _cut_short(str(tmp_path / "ckpt-12"))
    run.remove_unfinished()
    assert notes == [] and os.path.exists(tmp_path / "ckpt-12.index")
    with pytest.raises(CheckpointError) as raised:
        run.resume_checkpoint()
    assert str(raised.value) == (
        f"--output_dir {tmp_path} has no intact checkpoint to resume: {tmp_path / 'ckpt-12'}"
        ".index is damaged (truncated or corrupt). Restore a copy of the run, or start a new "
        "--output_dir (--init_checkpoint can take the weights of another run).")


def test_a_rebuilt_state_file_lets_keep_checkpoint_max_prune_the_checkpoints_it_lists(tmp_path):
    """The state file written again for ckpt-4, 8 and 12: a manager keeping 2 removes ckpt-4
    and ckpt-8 at its next save (without their times it kept them, unlisted, for good)."""
    for step in (4, 8, 12):
        _checkpoint(str(tmp_path), step)
    os.remove(tmp_path / "checkpoint")
    RunDirectory(str(tmp_path), log=lambda line: None).recover_state_file()
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(0.0)), str(tmp_path),
                                         max_to_keep=2, checkpoint_name="ckpt")
    manager.save(checkpoint_number=16)
    assert sorted(n for n in os.listdir(tmp_path) if n.endswith(".index")) == [
        "ckpt-12.index", "ckpt-16.index"]


def test_a_resume_follows_the_state_files_order_and_a_relative_directory(tmp_path,
                                                                          monkeypatch):
    """The state file names the latest checkpoint even where its number is not the largest
    (a save named by the count of saves, ckpt-3, after ckpt-2000): it is resumed, without a
    note; the state file's paths are not joined with a relative --output_dir twice."""
    monkeypatch.chdir(tmp_path)
    notes = []
    run = RunDirectory("run", log=notes.append)
    os.makedirs("run")
    for step in (1000, 2000, 3):
        _checkpoint("run", step)
    with open(os.path.join("run", "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-1000"\n'
                'all_model_checkpoint_paths: "ckpt-2000"\nall_model_checkpoint_paths: "ckpt-3"\n')
    assert run.latest_checkpoint() == os.path.join("run", "ckpt-3")
    assert run.resume_checkpoint() == os.path.join("run", "ckpt-3") and notes == []
    for name in os.listdir("run"):
        if name.startswith("ckpt-3."):
            os.remove(os.path.join("run", name))
    assert run.resume_checkpoint() == os.path.join("run", "ckpt-2000")
    assert notes == [f"Note: {os.path.join('run', 'ckpt-3')} is gone (its .index is missing); "
                     f"resuming from {os.path.join('run', 'ckpt-2000')}, the newest intact "
                     "checkpoint."]
