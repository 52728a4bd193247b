"""docs/development.md's table of where the test suite's time goes, from measured runs.

    .venv/bin/python -m pytest tests --time-shares=/tmp/after.json      # the whole suite
    .venv/bin/python -m pytest tests -m "not slow" --time-shares=/tmp/fast.json
    python tools/suite_times.py /tmp/after.json --fast /tmp/fast.json --before /tmp/before.json \
        --doc docs/development.md

Each FILE is what tests/timing_plugin.py writes: every test's setup, call and teardown seconds
and the part spent with a child process alive, in the training loop, exporting or loading a
SavedModel. The doc's section between the `suite_times` markers is replaced; nothing else is
touched. A test over 60 s must be named in LONG_TESTS with what only it proves, or the tool
stops (so a new long test is seen and justified, or made shorter).
"""

import argparse
import json
import re
import sys

START, END = "<!-- suite_times:start -->", "<!-- suite_times:end -->"
CATEGORIES = ("subprocess", "training", "export", "load")
LONG = 60.0
# Tests allowed over 60 s, each with what no shorter test proves.
LONG_TESTS = {
    "tests/test_demo.py::"
    "test_killed_mid_pretraining_and_mid_finetuning_resumes_to_the_same_results":
        "the main job killed twice by a signal and resumed, as a process (from the smoke "
        "run's records)",
    "tests/test_demo.py::test_smoke_run_pretraining_figures":
        "its setup is the main job (README command 1) run once as a user runs it; "
        "the file's other tests read the same run",
    "tests/test_convergence.py::test_convergence_on_the_bundled_corpus":
        "800 steps: the shortest run whose MLM drop and SOP margin hold over four seeds",
    "tests/test_train.py::test_mirrored_two_devices_equals_one_device_and_accumulation":
        "the mirrored strategy on two devices against one device and accumulation",
    "tests/test_race.py::test_a_tiny_model_learns_a_race_slice_with_the_level_breakdown":
        "a RACE run that learns, from the command line",
    "tests/test_squad.py::test_run_squad_v1_command_line":
        "the official SQuAD v1 command line trains, predicts and scores",
    "tests/test_export.py::test_jit_compile_export_answers_one_sentence_as_the_shipped_export":
        "an XLA-compiled export against the shipped one",
    "tests/test_export.py::test_warmup_requests_parse_and_replay":
        "the warmup file replayed by the C++ loader as TF Serving replays it",
    "tests/test_train.py::test_sigkill_then_resume_equals_uninterrupted":
        "a run killed by SIGKILL, resumed, stopped by SIGTERM and resumed again equals the "
        "uninterrupted run, as a process",
    "tests/test_experiment.py::test_a_runs_written_config_repeats_it_exactly":
        "a run repeated from its own config.yaml is bit-identical",
    "tests/test_layers.py::test_shared_weights_cast_once_equal_the_casts_on_every_call"
    "[mixed_bfloat16]": "18 traced training steps: every sharing mode, each padding and "
                        "recompute path of the attention and FFN modes, cast once against "
                        "cast per call, bit for bit",
    "tests/test_layers.py::test_shared_weights_cast_once_equal_the_casts_on_every_call"
    "[mixed_float16]": "the same in float16 (18 traces: the padding and recompute paths of "
                       "the two 'all' configurations)",
    "tests/test_squad.py::test_run_squad_v2_with_the_official_answer_class_head":
        "the official v2 model trained, predicted, scored and exported from the command line",
    "tests/test_export.py::test_loaded_from_cpp_the_way_tf_serving_does":
        "every export loaded and answered by the C++ loader, as TF Serving loads it",
    "tests/test_tflite.py::test_quantized_files_agree_with_the_saved_model_on_sst2_dev":
        "a fine-tuned classifier in every quantization against its SavedModel on SST-2 dev",
    "tests/test_bad_input.py::test_a_quantized_model_is_refused_by_name_and_nothing_is_written":
        "NOT a proof: 0.5 s alone; Keras' quantize() runs 27 full garbage collections, each "
        "scanning every object its worker kept alive (fixed by freezing them, tests/conftest.py)",
    "tests/test_cli.py::test_console_scripts_from_outside_the_repository":
        "each installed console script started from outside the repository",
}


# Tests of the "before" run no longer in the suite: where their assertions live now.
MOVED = {
    "tests/test_train.py::test_a_lost_worker_stops_the_cluster_and_the_rerun_resumes":
        "merged with `test_multi_worker_mirrored_two_processes` into the `worker_pairs` fixture "
        "of 2-worker pairs, read by "
        "`test_a_lost_worker_stops_the_pair_and_a_preempted_one_saves_it` (the loss, the freeze "
        "and the preemption) and `test_multi_worker_pair_equals_one_device_and_resumes_exactly` "
        "(the reruns equal to the uninterrupted pair); clusters of three are not run (the "
        "message of a worker that only saw the abort: "
        "`test_lost_peer_names_the_worker_its_address_or_the_abort`)",
    "tests/test_train.py::test_multi_worker_mirrored_two_processes":
        "`test_multi_worker_pair_equals_one_device_and_resumes_exactly` (the pair equals one "
        "device; its chief SIGKILLed and the pair rerun: the fixture's \"k\" pair)",
}


def load(path):
    with open(path) as f:
        run = json.load(f)
    for r in run["tests"]:
        r["total"] = r["setup"] + r["call"] + r["teardown"]
        # without the module and session fixtures it happened to build first (their cost is
        # the fixture's, and another test pays it in another order)
        r["own"] = max(0.0, r["total"] - sum(r.get("fixtures", {}).values()))
        # a child alive while this process trained or exported is counted once, there
        inside = sum(r.get(c, 0.0) for c in CATEGORIES if c != "subprocess")
        r["subprocess"] = min(r.get("subprocess", 0.0), max(0.0, r["total"] - inside))
    return run


def share(record) -> tuple[str, float]:
    """The largest measured part of a test's time, and its fraction."""
    parts = {c: record.get(c, 0.0) for c in CATEGORIES}
    parts["other"] = max(0.0, record["total"] - sum(parts.values()))
    name = max(parts, key=parts.get)
    return name, parts[name] / record["total"] if record["total"] else 0.0


def short(nodeid: str) -> str:
    return nodeid.replace("tests/", "", 1)


def fixture_times(run) -> dict:
    """Each module or session fixture's longest measured setup, in seconds."""
    times = {}
    for r in run["tests"]:
        for key, seconds in r.get("fixtures", {}).items():
            times[key] = round(max(times.get(key, 0.0), seconds), 2)
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


def summary(run) -> dict:
    tests = run["tests"]
    total = sum(r["total"] for r in tests)
    parts = {c: sum(min(r.get(c, 0.0), r["total"]) for r in tests) for c in CATEGORIES}
    parts["other"] = max(0.0, total - sum(parts.values()))
    outcomes = {}
    for r in tests:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    fast = [r for r in tests if not r["slow"]]
    cpu = {"own": sum(r.get("cpu", 0.0) for r in tests),
           "children": sum(r.get("children_cpu", 0.0) for r in tests)}
    return {"total": total, "parts": parts, "outcomes": outcomes, "count": len(tests), "cpu": cpu,
            "fast_count": len(fast), "fast_total": sum(r["total"] for r in fast),
            "over_long": [r for r in tests if r["own"] > LONG]}


def describe(run) -> str:
    m = run.get("machine", {})
    flags = "/".join(m.get("flags", [])) or "no flags read"
    return (f"{m.get('cores', '?')}-core {m.get('cpu', 'unknown')} ({flags}), "
            f"{run.get('date', '?')}, {run.get('workers')} xdist workers")


def section(after, fast=None, before=None) -> str:
    s = summary(after)
    lines = [START, ""]
    outcome = ", ".join(f"{n} {k}" for k, n in sorted(s["outcomes"].items()))
    lines.append(f"Measured by `tools/suite_times.py` from `pytest tests --time-shares=FILE` "
                 f"(tests/timing_plugin.py) on a {describe(after)}.")
    lines.append("")
    lines.append(f"- **Whole suite**: {s['count']} tests ({outcome}) in "
                 f"**{after['wall_seconds']:,.0f} s** of pytest time; the tests' own times sum "
                 f"to {s['total']:,.0f} s over the workers.")
    busy = {}
    for r in after["tests"]:
        if r.get("worker"):
            busy[r["worker"]] = busy.get(r["worker"], 0.0) + r["total"]
    if busy:
        lines.append("- **Workers**: " + ", ".join(f"{w} busy {t:,.0f} s" for w, t in
                                                   sorted(busy.items())) + " (files handed "
                     "out longest first, tests/file_times.json).")
    if s["cpu"]["own"]:
        cores = after.get("machine", {}).get("cores") or 2
        used = s["cpu"]["own"] + s["cpu"]["children"]
        lines.append(f"- **CPU**: the tests used {used:,.0f} CPU seconds ({s['cpu']['own']:,.0f} "
                     f"in the test processes, {s['cpu']['children']:,.0f} in the child processes "
                     f"they started), so on {cores} cores the suite cannot end before "
                     f"{used / cores:,.0f} s. A test's CPU seconds, unlike its wall time, do not "
                     "grow when the other worker keeps the cores busy.")
    if before is not None:
        b = summary(before)
        lines.append(f"- **Before** ({describe(before)}): {b['count']} tests in "
                     f"{before['wall_seconds']:,.0f} s of pytest time, the tests' times summing "
                     f"to {b['total']:,.0f} s.")
    if fast is not None:
        f = summary(fast)
        lines.append(f"- **Fast tier** (`-m \"not slow\"`): {f['count']} tests in "
                     f"**{fast['wall_seconds']:,.0f} s** of pytest time.")
    else:
        lines.append(f"- **Fast tier** (`-m \"not slow\"`): {s['fast_count']} tests whose times "
                     f"sum to {s['fast_total']:,.0f} s in the whole run.")
    files = {r["nodeid"].split("::")[0] for r in after["tests"]}
    with_fast = {r["nodeid"].split("::")[0] for r in after["tests"] if not r["slow"]}
    alone = ", ".join(f"`{short(f)}`" for f in sorted(files - with_fast)) or "none"
    lines.append(f"- Test files with no test in the fast tier: {alone}.")
    parts = ", ".join(f"{name} {seconds:,.0f} s ({seconds / s['total']:.0%})"
                      for name, seconds in s["parts"].items())
    lines.append(f"- **Where the time goes** (the tests' times summed): {parts}. Subprocess: a "
                 "child process alive (a command started as a process); training: "
                 "`Controller.train` or `keras.Model.fit` in the test's process; export: "
                 "`tf.saved_model.save` or a TFLite conversion; load: `tf.saved_model.load`.")
    if before is not None:
        b = summary(before)
        parts = ", ".join(f"{name} {seconds:,.0f} s ({seconds / b['total']:.0%})"
                          for name, seconds in b["parts"].items())
        lines.append(f"- Before: {parts}.")
    lines += slowest_tables(after, before)
    lines += ["", f"Tests over {LONG:.0f} s, each for what no shorter test proves:", ""]
    for r in s["over_long"]:
        lines.append(f"- `{short(r['nodeid'])}` ({r['own']:.0f} s without shared fixtures): "
                     f"{LONG_TESTS[r['nodeid']]}")
    lines += ["", END]
    return "\n".join(lines)


def slowest_tables(after, before=None) -> list[str]:
    """The tables of the slowest 30 tests (beside their times before), the slowest 30 before
    (beside their times now), and the tests that are gone."""
    lines = ["", "The slowest 30 tests (seconds with their setup and teardown: a module "
             "fixture's cost lands on the first test that uses it):", ""]
    was = {r["nodeid"]: r["total"] for r in before["tests"]} if before is not None else {}
    head = ("| # | test | tier | seconds | CPU seconds | largest part |"
            + (" before |" if was else ""))
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for i, r in enumerate(after["tests"][:30], 1):
        name, frac = share(r)
        cpu = (f"{r['cpu'] + r.get('children_cpu', 0.0):.1f}" if "cpu" in r else "?")
        row = (f"| {i} | `{short(r['nodeid'])}` | {'slow' if r['slow'] else 'fast'} | "
               f"{r['total']:.1f} | {cpu} | {name} {frac:.0%} |")
        if was:
            row += f" {was[r['nodeid']]:.1f} |" if r["nodeid"] in was else " new |"
        lines.append(row)
    if before is not None:
        lines += ["", "The slowest 30 before:", "",
                  "| # | test | tier | seconds | largest part | after |",
                  "|---|---|---|---|---|---|"]
        now = {r["nodeid"]: r["total"] for r in after["tests"]}
        for i, r in enumerate(before["tests"][:30], 1):
            name, frac = share(r)
            after_s = f"{now[r['nodeid']]:.1f}" if r["nodeid"] in now else "gone (below)"
            lines.append(f"| {i} | `{short(r['nodeid'])}` | {'slow' if r['slow'] else 'fast'} | "
                         f"{r['total']:.1f} | {name} {frac:.0%} | {after_s} |")
        gone = [r["nodeid"] for r in before["tests"] if r["nodeid"] not in now]
        if gone:
            lines += ["", "Tests of the before run no longer in the suite, and where their "
                          "assertions are:", ""]
            lines += [f"- `{short(n)}`: {MOVED.get(n, 'not said (add it to MOVED)')}"
                      for n in gone]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("after", help="the whole suite's --time-shares file")
    parser.add_argument("--fast", help="the fast tier's --time-shares file")
    parser.add_argument("--before", help="an earlier whole-suite file, for the before column")
    parser.add_argument("--file_times", help="also write each file's seconds (the workers' "
                                             "order: tests/file_times.json)")
    parser.add_argument("--doc", help="the Markdown file whose suite_times section to replace "
                                      "(printed when not given)")
    args = parser.parse_args(argv)
    after = load(args.after)
    unjustified = [r for r in summary(after)["over_long"] if r["nodeid"] not in LONG_TESTS]
    if unjustified:
        names = "\n".join(f"  {r['own']:.0f} s  {r['nodeid']}" for r in unjustified)
        sys.exit(f"error: tests over {LONG:.0f} s not in LONG_TESTS (tools/suite_times.py): "
                 f"make them shorter, or name what only they prove there:\n{names}")
    if args.file_times:
        if not after.get("whole_suite"):
            sys.exit(f"error: {args.after} is not a run of the whole suite (-m, -k or a file "
                     "was given): the tiers need every test measured")
        files = {}
        for r in after["tests"]:
            name = r["nodeid"].split("::")[0]
            files[name] = round(files.get(name, 0.0) + r["total"], 1)
        with open(args.file_times, "w") as f:
            json.dump({"measured": describe(after), "files": dict(
                sorted(files.items(), key=lambda kv: -kv[1])),
                "tests": {r["nodeid"]: round(r["own"], 2) for r in after["tests"]},
                "fixtures": fixture_times(after)}, f, indent=0)
            f.write("\n")
    text = section(after, load(args.fast) if args.fast else None,
                   load(args.before) if args.before else None)
    if not args.doc:
        print(text)
        return
    with open(args.doc) as f:
        doc = f.read()
    if START not in doc or END not in doc:
        sys.exit(f"error: {args.doc} has no {START} ... {END} section to replace")
    doc = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: text, doc, flags=re.S)
    with open(args.doc, "w") as f:
        f.write(doc)
    print(f"wrote the suite's times into {args.doc}")


if __name__ == "__main__":
    main()
