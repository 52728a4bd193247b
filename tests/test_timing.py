"""The suite's own timing (tests/timing_plugin.py) and its table (tools/suite_times.py): the
subprocess share counts overlapping children once, the budget fails only past it and names the
slowest tests, measured files go out longest first and measured long tests or costly fixtures
leave the fast tier, and the doc's table holds the measured numbers."""

import json
import os
import sys
import types

import pytest
import tensorflow as tf

import timing_plugin as plugin
from conftest import GRAPPLER, OPTIMIZER_OPTIONS, ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
import suite_times  # noqa: E402


def test_children_alive_time_counts_overlaps_once_and_clips_to_the_test():
    # [0, 4] and [2, 6] overlap (6 s together); [8, None] still alive at the end (10): 2 s;
    # a child started before the test (at -5) counts from the test's start only
    assert plugin._children_time([(0, 4), (2, 6), (8, None)], 0, 10) == 8
    assert plugin._children_time([(-5, 3)], 0, 10) == 3
    assert plugin._children_time([(1, 2), (1.5, 1.8), (3, 4)], 0, 10) == pytest.approx(2.0)
    assert plugin._children_time([], 0, 10) == 0


def test_nested_categories_count_once_by_the_innermost(monkeypatch):
    clock = iter([0.0, 2.0, 5.0, 6.0])  # train from 0 to 6, an export inside it from 2 to 5
    monkeypatch.setattr(plugin, "_clock", lambda: next(clock))
    monkeypatch.setattr(plugin, "_stack", [])
    for category in plugin.CATEGORIES:
        monkeypatch.setitem(plugin._totals, category, 0.0)
    plugin._enter("training")
    plugin._enter("export")
    plugin._leave()
    plugin._leave()
    assert plugin._totals["training"] == 3.0 and plugin._totals["export"] == 3.0


def _records(*pairs):
    return [{"nodeid": n, "total": t} for n, t in pairs]


def test_the_budget_fails_only_past_it_and_names_the_slowest():
    records = _records(*((f"tests/test_{i}.py::t", 100.0 - i) for i in range(12)))
    assert plugin.over_budget(1200.0, 1200.0, records) is None
    message = plugin.over_budget(1300.4, 1200.0, records)
    assert message.startswith("the whole suite took 1300 s, over its budget of 1200 s")
    assert "tests/test_9.py::t" in message and "tests/test_10.py::t" not in message  # 10 named
    assert "  100.0 s  tests/test_0.py::t" in message


def _config(args, markexpr="", keyword="", root="/r", cwd="/r"):
    return types.SimpleNamespace(
        option=types.SimpleNamespace(markexpr=markexpr, keyword=keyword, lf=False),
        rootpath=root, invocation_params=types.SimpleNamespace(dir=cwd), args=args,
        getini=lambda name: ["tests"])


def test_only_the_whole_suite_is_held_to_the_budget():
    assert plugin._only_testpaths(_config(["tests"]))
    assert plugin._only_testpaths(_config(["."], cwd="/r/tests"))
    assert not plugin._only_testpaths(_config(["tests/test_a.py"]))
    assert not plugin._only_testpaths(_config(["tests"], markexpr="not slow"))
    assert not plugin._only_testpaths(_config(["tests"], keyword="hf"))


class _Item:
    def __init__(self, nodeid, fixtures=()):
        self.nodeid, self.marks = nodeid, []
        self._fixtureinfo = types.SimpleNamespace(
            names_closure=list(fixtures),
            name2fixturedefs={f: [types.SimpleNamespace(baseid="tests", argname=f)]
                              for f in fixtures})

    def add_marker(self, mark):
        self.marks.append(mark.name)


def test_files_go_out_longest_first_and_measured_cost_leaves_the_fast_tier(tmp_path,
                                                                          monkeypatch):
    times = {"files": {"tests/test_a.py": 5.0, "tests/test_b.py": 90.0},
             "tests": {"tests/test_a.py::quick": 0.3, "tests/test_a.py::long": 2.5,
                       "tests/test_b.py::one": 0.1},
             "fixtures": {"tests::exported": 40.0, "tests::sample_vocab": 7.0}}
    (tmp_path / "times.json").write_text(json.dumps(times))
    monkeypatch.setattr(plugin, "FILE_TIMES", str(tmp_path / "times.json"))
    items = [_Item("tests/test_a.py::quick", ["sample_vocab"]), _Item("tests/test_a.py::long"),
             _Item("tests/test_new.py::x"), _Item("tests/test_b.py::one", ["exported"]),
             _Item("tests/test_a.py::later")]
    plugin.pytest_collection_modifyitems(None, None, items)
    # the unmeasured file first (it may be long), then 90 s, then 5 s; order kept inside a file
    assert [i.nodeid for i in items] == [
        "tests/test_new.py::x", "tests/test_b.py::one", "tests/test_a.py::quick",
        "tests/test_a.py::long", "tests/test_a.py::later"]
    slow = {i.nodeid for i in items if "slow" in i.marks}
    # 2.5 s >= SLOW_SECONDS; a 40 s fixture >= FIXTURE_SECONDS; a 7 s fixture is not
    assert slow == {"tests/test_a.py::long", "tests/test_b.py::one"}


def _run(tests, wall, machine="AMD EPYC", whole_suite=True):
    return {"wall_seconds": wall, "workers": 2, "date": "2026-11-28 14:00 UTC",
            "whole_suite": whole_suite,
            "machine": {"cpu": machine, "cores": 2, "flags": ["avx2"]}, "tests": [
                dict({"setup": 0.0, "teardown": 0.0, "slow": False, "outcome": "passed",
                      "subprocess": 0.0, "training": 0.0, "export": 0.0, "load": 0.0,
                      "worker": "gw0"}, **t) for t in tests]}


def test_the_table_holds_the_measured_numbers(tmp_path):
    after = _run([{"nodeid": "tests/test_a.py::x", "call": 30.0, "training": 24.0, "slow": True,
                   "cpu": 28.0, "children_cpu": 0.0},
                  {"nodeid": "tests/test_b.py::y", "setup": 4.0, "call": 6.0, "subprocess": 9.0,
                   "worker": "gw1", "fixtures": {"tests::sample_vocab": 3.5}, "cpu": 1.5,
                   "children_cpu": 12.5},
                  {"nodeid": "tests/test_b.py::z", "call": 0.5, "outcome": "skipped"}], 25.0)
    before = _run([{"nodeid": "tests/test_a.py::x", "call": 50.0, "slow": True}], 60.0)
    for run, name in ((after, "after"), (before, "before")):
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Dev\nkept\n{suite_times.START}\nold\n{suite_times.END}\nkept too\n")
    suite_times.main([str(tmp_path / "after.json"), "--before", str(tmp_path / "before.json"),
                      "--doc", str(doc), "--file_times", str(tmp_path / "times.json")])
    text = doc.read_text()
    assert text.startswith("# Dev\nkept\n") and text.endswith("kept too\n") and "old" not in text
    assert "3 tests (2 passed, 1 skipped) in **25 s**" in text
    assert "training 24 s (59%), export 0 s (0%), load 0 s (0%)" in text  # of 40.5 s
    assert "subprocess 9 s (22%)" in text and "gw0 busy 30 s, gw1 busy 10 s" in text
    assert "| 1 | `test_a.py::x` | slow | 30.0 | 28.0 | training 80% | 50.0 |" in text
    assert "| 2 | `test_b.py::y` | fast | 10.0 | 14.0 | subprocess 90% | new |" in text
    # 42 CPU seconds (29.5 in the test processes, 12.5 in their children) over 2 cores
    assert ("used 42 CPU seconds (30 in the test processes, 12 in the child processes they "
            "started), so on 2 cores the suite cannot end before 21 s") in text
    times = json.loads((tmp_path / "times.json").read_text())
    assert times["files"] == {"tests/test_a.py": 30.0, "tests/test_b.py": 10.5}
    # a test's own time leaves out the shared fixture it happened to build first
    assert times["tests"]["tests/test_b.py::y"] == 6.5
    assert times["fixtures"] == {"tests::sample_vocab": 3.5}
    (tmp_path / "part.json").write_text(json.dumps(dict(after, whole_suite=False)))
    with pytest.raises(SystemExit, match="not a run of the whole suite"):
        suite_times.main([str(tmp_path / "part.json"), "--file_times", str(tmp_path / "t2.json")])
    assert not (tmp_path / "t2.json").exists()


def test_a_child_alive_while_the_process_trains_is_counted_once(tmp_path):
    run = _run([{"nodeid": "tests/test_a.py::x", "call": 10.0, "training": 8.0,
                 "subprocess": 9.0}], 10.0)
    (tmp_path / "run.json").write_text(json.dumps(run))
    (record,) = suite_times.load(str(tmp_path / "run.json"))["tests"]
    assert record["subprocess"] == 2.0 and record["training"] == 8.0  # 10 s in all, not 17


def test_a_long_test_must_say_what_only_it_proves(tmp_path, capsys):
    run = _run([{"nodeid": "tests/test_a.py::sweep", "call": 61.0}], 61.0)
    (tmp_path / "run.json").write_text(json.dumps(run))
    with pytest.raises(SystemExit) as raised:
        suite_times.main([str(tmp_path / "run.json")])
    assert "61 s  tests/test_a.py::sweep" in str(raised.value)
    # the same test with 30 s of a shared fixture it built first is 31 s of its own
    run["tests"][0]["fixtures"] = {"tests::exported": 30.0}
    (tmp_path / "run.json").write_text(json.dumps(run))
    suite_times.main([str(tmp_path / "run.json")])
    assert "`test_a.py::sweep` | fast | 61.0 |" in capsys.readouterr().out
    assert "LONG_TESTS" in str(raised.value)


def _grappler_on() -> bool:
    return not tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)


def test_grappler_is_off_in_the_test_process_unless_asked_for():
    assert _grappler_on() is GRAPPLER


@pytest.mark.grappler
def test_a_test_marked_grappler_runs_with_it_and_the_next_without():
    assert _grappler_on()


def test_the_option_is_restored_after_a_grappler_test():
    # runs after the marked test in this file's order (one worker runs a whole file)
    assert _grappler_on() is GRAPPLER


def test_a_rewrite_a_test_turns_off_is_on_again_in_the_next():
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": True})
    # TensorFlow's setter only adds keys: "restoring" leaves the option set in the context
    assert "arithmetic_optimization" in tf.config.optimizer.get_experimental_options()


def test_the_next_test_has_the_suites_options_exactly():
    options = tf.config.optimizer.get_experimental_options()
    assert "arithmetic_optimization" not in options
    assert options.get("disable_meta_optimizer", False) is OPTIMIZER_OPTIONS.get(
        "disable_meta_optimizer", False)


def test_a_tests_cpu_seconds_count_its_process_and_the_children_it_waited_for():
    import subprocess
    import time

    before = os.times()
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:  # 0.3 s of this process's CPU
        pass
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time() + 0.4\n"
                    "while time.process_time() < t: pass"], check=True)
    cpu = plugin._cpu_since(before, 123.0)
    assert cpu["started"] == 123.0
    # os.times() counts in clock ticks (10 ms here)
    assert 0.28 <= cpu["cpu"] < 1.5  # the child's 0.4 s is not this process's
    assert 0.38 <= cpu["children_cpu"] < 2.0
