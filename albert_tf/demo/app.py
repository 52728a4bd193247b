"""The main job as an application of the library: its steps as data (a name and the commands
that make its artefacts, or a computation), run in order by `albert_tf.demo.job.Run`, which
skips what is done; the flags; the summary it prints. See the package docstring for the steps.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable

from absl import flags

from albert_tf.commands.cli import run_command
from albert_tf.demo import commands as C
from albert_tf.demo.job import Run, StepFailed, choose_run_dir, read_json, shown_path
from albert_tf.demo.report import write_report
from albert_tf.demo.results import collect_results, timings
from albert_tf.demo.settings import SAMPLE_DIR, requested_settings, serve_runtime
from albert_tf.demo.sizing import size_pretraining


@dataclasses.dataclass
class Job:
    """What the steps share: the run, its settings and paths; the pretraining step count once
    the `size` step has chosen it."""

    run: Run
    paths: dict
    config: str
    pretrain_dir: str
    steps: int | None = None
    results: dict | None = None

    @property
    def s(self) -> dict:
        return self.run.settings


@dataclasses.dataclass(frozen=True)
class Step:
    """A step of the job: `commands(job)` ([(python -m args, last artefact)], each skipped when
    its artefact exists), or `compute(job, index, total)` for a step that is not a command."""

    name: str
    commands: Callable[[Job], list] | None = None
    compute: Callable[[Job, int, int], None] | None = None


def _data(job: Job) -> list:
    s, seq = job.s, job.s["max_seq_length"]
    return [C.train_records_command(job.paths, job.paths["train_records"], seq,
                                    s["masked_lm_prob"],
                                    C.predictions_for(s["masked_lm_prob"], seq),
                                    s["dupe_factor"]),
            *C.heldout_commands(job.paths, seq, s["heldout_masked_lm_prob"])]


def _size(job: Job, index: int, total: int) -> None:
    job.steps = size_pretraining(job.run, job.s, job.config, job.paths, index, total)["steps"]


def _pretrain(job: Job) -> list:
    return [(C.pretrain_args(job.s, job.config, job.paths, job.pretrain_dir, job.steps),
             os.path.join(job.pretrain_dir, f"eval_results_step_{job.steps}.json"))]


def _report(job: Job, index: int, total: int) -> None:
    print(f"[{index}/{total}] report", flush=True)
    t0 = time.time()
    results = collect_results(job.run, job.paths, job.pretrain_dir, job.steps)
    write_report(job.run, results)
    job.run.state["steps"]["report"] = {"seconds": time.time() - t0, "commands": [],
                                        "skipped": False}
    job.run.save()
    results["steps"] = job.run.state["steps"]
    results["timings"] = timings(job.run)
    write_report(job.run, results)  # again, with the report step's own time
    job.results = results


STEPS = (
    Step("corpus", lambda j: C.corpus_commands(j.paths, j.s["books"], j.s["heldout_every"])),
    Step("vocab", lambda j: C.vocab_commands(j.paths)),
    Step("data", _data),
    Step("finetune_random", lambda j: C.finetune_commands(j.run.dir, j.s, j.config, j.paths,
                                                          "random", j.pretrain_dir)),
    Step("size", compute=_size),
    Step("pretrain", _pretrain),
    Step("finetune_pretrained", lambda j: C.finetune_commands(j.run.dir, j.s, j.config,
                                                              j.paths, "pretrained",
                                                              j.pretrain_dir)),
    Step("export", lambda j: C.export_commands(j.run.dir, j.paths, j.pretrain_dir,
                                               j.s["max_seq_length"])),
    Step("serve", lambda j: C.serve_commands(j.run.dir, serve_runtime(j.s))),
    Step("fill_mask", lambda j: C.fill_mask_commands(j.run.dir, j.paths, j.pretrain_dir)),
    Step("analysis", lambda j: C.transitions_commands(j.run.dir, j.s, j.paths,
                                                      j.pretrain_dir)),
    Step("report", compute=_report),
)


def run_demo(run: Run) -> dict:
    """Runs (or resumes) every step of `run`; returns the results the report shows."""
    job = Job(run, C.corpus_paths(run.dir, run.settings["vocab_size"]),
              os.path.join(shown_path(SAMPLE_DIR), run.settings["albert_config"]),
              shown_path(run.path("pretrain")))
    for index, step in enumerate(STEPS, 1):
        if step.compute is not None:
            step.compute(job, index, len(STEPS))
        else:
            run.step(step.name, step.commands(job), index, len(STEPS))
    return job.results


def define_flags():
    flags.DEFINE_string("runs_dir", "runs", "Runs go to RUNS_DIR/<timestamp>/.")
    flags.DEFINE_string("run_dir", None, "Use (or resume) exactly this run directory.")
    flags.DEFINE_bool("new", False, "Start a new run instead of resuming the newest one.")
    flags.DEFINE_bool("smoke", False, "Tiny sizes: every step in a few minutes (CI).")
    flags.DEFINE_float("budget_minutes", None,
                       "The job's own time (install excluded): the pretraining steps are chosen "
                       "to fit it after timing this machine. Default 15 (--smoke: 3). More time "
                       "or an accelerator: a larger run from the same command.")
    flags.DEFINE_integer("pretrain_steps", None, "Pretraining steps, instead of fitting them to "
                         "the budget.")
    flags.DEFINE_integer("finetune_steps", None, "Fine-tuning steps of each run (default: "
                         "finetune_epochs over the labelled examples).")
    flags.DEFINE_bool("quiet", False, "Do not echo the commands' output (it is always logged).")


def print_summary(results: dict, run: Run, t0: float) -> None:
    mlm, sop, gain = results["mlm"], results["sop"], results["pretraining_gain"]
    print(f"\nheld-out masked-LM accuracy {mlm['heldout_accuracy']:.3f} ({mlm['ratio']:.1f}x "
          f"the most frequent piece, {mlm['unigram_baseline']:.3f}); sentence order "
          f"{sop['heldout_accuracy']:.3f} on {sop['examples']:,} pairs (constant "
          f"{sop['constant_baseline']:.3f})")
    print(f"SST-2 dev accuracy, {gain['labels']:,} labels: pretrained "
          f"{gain['pretrained_mean']:.3f} +- {gain['pretrained_std']:.3f}, random init "
          f"{gain['random_init_mean']:.3f} +- {gain['random_init_std']:.3f}, majority "
          f"{gain['majority_baseline']:.3f}")
    print(f"report: {shown_path(run.path('report.md'))} (and report.html, results.json); the "
          f"job's own time {results['timings']['total_s'] / 60:.1f} minutes; this invocation "
          f"took {time.time() - t0:.0f} s")


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    settings = requested_settings(FLAGS.smoke, FLAGS.pretrain_steps, FLAGS.finetune_steps,
                                  FLAGS.budget_minutes)
    run_dir = FLAGS.run_dir or choose_run_dir(FLAGS.runs_dir, settings, FLAGS.new)
    if FLAGS.run_dir and os.path.exists(os.path.join(run_dir, "state.json")):
        previous = read_json(os.path.join(run_dir, "state.json")).get("settings")
        if previous != settings:
            print(f"error: {run_dir} was run with other settings ({previous}); use another "
                  "--run_dir or the same flags.", file=sys.stderr)
            return 2
    run = Run(run_dir, settings, echo=not FLAGS.quiet)
    print(f"albert_tf main job ({'smoke' if FLAGS.smoke else 'full'}, budget "
          f"{settings['budget_minutes']:g} minutes): {shown_path(run.dir)}", flush=True)
    t0 = time.time()
    try:
        results = run_demo(run)
    except StepFailed as e:
        print(f"error: {e}", file=sys.stderr)
        print("Fix the cause and run the same command again: finished steps are kept.",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again to resume.", file=sys.stderr)
        return 130
    print_summary(results, run, t0)
    return 0


def cli():
    """The command (`python -m albert_tf.demo` and the console script albert-demo)."""
    run_command(main, define_flags)
