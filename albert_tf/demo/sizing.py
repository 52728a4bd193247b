"""Fitting the pretraining to the budget: a short probe times this machine's steps, and the
step count that fits what is left of `--budget_minutes` is kept in RUN_DIR/size/sizing.json so
that a rerun resumes the same schedule."""

from __future__ import annotations

import os
import shutil

from albert_tf.analysis import curves
from albert_tf.demo.commands import pretrain_args
from albert_tf.demo.job import Run, read_json, shown_path, write_json
from albert_tf.demo.settings import TAIL_COMMANDS, serve_runtime


def choose_steps(s: dict, probe: dict, elapsed_s: float, finetune_s: float,
                 heldout_examples: int, compile_s: float) -> dict:
    """The pretraining step count that fits the rest of the budget.

    `probe`: {"examples_per_second" (steady state), "seconds" (the probe command's wall time),
    "steps"}. What is left after the steps already done (`elapsed_s`) pays for: the pretraining
    command (its start-up, as the probe's, and its evaluations: a held-out pass costs about a
    third of training on as many examples), the pretrained fine-tuning arm (as long as the
    random-init arm, `finetune_s`, which ran already), the remaining commands (each about one
    start-up, plus `compile_s` to build the C++ loader), and a 3% margin."""
    budget_s = s["budget_minutes"] * 60.0
    rate = probe["examples_per_second"]
    step_s = s["pretrain_batch_size"] / rate
    startup_s = max(0.0, probe["seconds"] - probe["steps"] * step_s)
    eval_s = heldout_examples / (3.0 * rate)
    reserve_s = (finetune_s + (TAIL_COMMANDS + 1) * startup_s + compile_s
                 + s["evaluations"] * eval_s + 0.03 * budget_s)
    train_s = budget_s - elapsed_s - reserve_s
    steps = int(train_s / step_s) // s["evaluations"] * s["evaluations"]
    chosen = min(max(steps, s["min_pretrain_steps"]), s["max_pretrain_steps"])
    return {"budget_s": budget_s, "examples_per_second": rate, "step_s": step_s,
            "startup_s": startup_s, "eval_s": eval_s, "elapsed_s": elapsed_s,
            "finetune_s": finetune_s, "compile_s": compile_s, "reserve_s": reserve_s,
            "train_s": train_s, "fitted_steps": steps, "steps": chosen,
            "note": ("" if chosen == steps else
                     f"the budget fits {steps} steps; clamped to [{s['min_pretrain_steps']}, "
                     f"{s['max_pretrain_steps']}]")}


def size_pretraining(run: Run, s: dict, config: str, paths: dict, index: int, total: int) -> dict:
    """Step `size`: times a short pretraining run and fits the step count to the budget; the
    choice is kept in RUN_DIR/size/sizing.json (and the state) so a rerun resumes it."""
    sizing_file = run.path("size", "sizing.json")
    if s.get("pretrain_steps"):  # given, not fitted
        print(f"[{index}/{total}] size\n  --pretrain_steps {s['pretrain_steps']}: not fitted",
              flush=True)
        sizing = {"steps": s["pretrain_steps"], "fitted": False}
        run.state["steps"]["size"] = {"seconds": 0.0, "commands": [], "skipped": False}
    elif os.path.exists(sizing_file):
        sizing = read_json(sizing_file)
        print(f"[{index}/{total}] size\n  done before: skipped ({sizing['steps']} steps)",
              flush=True)
        run.state["steps"].setdefault("size", {"seconds": 0.0, "commands": []})["skipped"] = True
    else:
        probe_dir = run.path("size", "probe")
        shutil.rmtree(probe_dir, ignore_errors=True)  # a probe cut short times nothing
        steps = s["probe_steps"]
        args = pretrain_args(s, config, paths, shown_path(probe_dir), steps, evaluate=False)
        args[args.index("--iterations_per_loop") + 1] = str(steps // 3)
        record = run.step("size", [(args, os.path.join(probe_dir, f"ckpt-{steps}.index"))],
                          index, total)
        rates = [v for _, v in curves.read_scalars(os.path.join(probe_dir, "train"))
                 ["examples_per_second"]][1:]  # the first loop traces the step
        probe = {"steps": steps, "seconds": record["seconds"],
                 "examples_per_second": sum(rates) / len(rates)}
        heldout = read_json(paths["heldout_records"] + ".json")["counts"]["examples"]
        runtime = serve_runtime(s)
        loader = run.path("serve", "serving_loader")
        compile_s = 25.0 if runtime == "cpp" and not os.path.exists(loader) else 0.0
        sizing = dict(choose_steps(s, probe, run.seconds(*run.state["steps"]),
                                   run.seconds("finetune_random"), heldout, compile_s),
                      probe=probe, fitted=True)
        write_json(sizing_file, sizing)
        shutil.rmtree(probe_dir, ignore_errors=True)
        print(f"  {probe['examples_per_second']:.0f} examples/s: {sizing['steps']} pretraining "
              f"steps fit the budget of {s['budget_minutes']:g} minutes"
              + (f" ({sizing['note']})" if sizing["note"] else ""), flush=True)
    run.state["sizing"] = sizing
    run.save()
    return sizing
