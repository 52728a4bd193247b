"""Where the suite's time goes, and a budget that catches its growth.

Each test's time (setup + call + teardown, as pytest measures it) is split by what the process
was doing, measured by wrapping the calls themselves (not guessed from names):
  subprocess  a child process was alive (`python -m ...` started by the test or a fixture);
  training    inside the training loop (`Controller.train`) or `keras.Model.fit`;
  export      inside `tf.saved_model.save` or a TFLite conversion;
  load        inside `tf.saved_model.load`;
  other       the rest (model building, tracing, data, assertions).
A category nested in another is counted once, by the innermost (an export at the end of a
training run counts as export).

`pytest tests --time-shares=FILE` (or ALBERT_TF_TIME_SHARES=FILE) writes one JSON record per
test (tools/suite_times.py turns it into docs/development.md's table). With
ALBERT_TF_TIME_BUDGET=SECONDS set (.ci/run sets it), a run of the whole suite that takes
longer fails at its end, naming the budget and the slowest tests; a run of part of the suite
(-m, -k, a file) is not held to it.

tests/file_times.json (written by tools/suite_times.py --file_times from a whole-suite run)
orders the files for the workers, longest first, and puts every test measured at
SLOW_SECONDS or more in the slow tier.
"""

import json
import os
import subprocess
import time

import pytest

BUDGET_ENV = "ALBERT_TF_TIME_BUDGET"
SHARES_ENV = "ALBERT_TF_TIME_SHARES"  # the --time-shares file, for a command left unchanged
# A test measured at this many seconds or more (setup, call and teardown) is in the slow tier
# even when not marked `slow` by hand.
SLOW_SECONDS = 2.0
# ... and so is a test that uses a module or session fixture measured at this many seconds or
# more (its cost lands on whichever test of the tier uses it first).
FIXTURE_SECONDS = 10.0
# Each test file's and each test's measured seconds (tools/suite_times.py --file_times writes
# it): the files are handed to the two workers longest first (`--no-loadscope-reorder` in
# pyproject.toml), so no worker starts a long file while the other is left with nothing.
FILE_TIMES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_times.json")
CATEGORIES = ("subprocess", "training", "export", "load")

_totals = dict.fromkeys(CATEGORIES, 0.0)
_stack = []  # (category, time it was entered or resumed)
_children = []  # [start, end or None] per child process started during the current test
_test_start = [0.0]
_clock = time.perf_counter  # the plugin's clock (tests/test_timing.py replaces it)
_records = {}  # nodeid: its phases' seconds and shares, as the reports reach this process
_fixtures = {}  # "where::name" of a fixture set up during the current test: its seconds
_cpu_start = [None]  # os.times() as the current test started


def _enter(category):
    now = _clock()
    if _stack:
        outer, since = _stack[-1]
        _totals[outer] += now - since
    _stack.append((category, now))


def _leave():
    now = _clock()
    category, since = _stack.pop()
    _totals[category] += now - since
    if _stack:
        _stack[-1] = (_stack[-1][0], now)


def _timed(category, function):
    def wrapper(*args, **kwargs):
        _enter(category)
        try:
            return function(*args, **kwargs)
        finally:
            _leave()
    wrapper.__wrapped__ = function
    return wrapper


def _patch(owner, name, category):
    function = getattr(owner, name)
    if not getattr(function, "_albert_timed", False):
        wrapped = _timed(category, function)
        wrapped._albert_timed = True
        setattr(owner, name, wrapped)


def _install():
    import keras
    import tensorflow as tf

    from albert_tf.training.controller import Controller

    _patch(Controller, "train", "training")
    _patch(keras.Model, "fit", "training")
    _patch(tf.saved_model, "save", "export")
    _patch(tf.lite.TFLiteConverter, "convert", "export")
    _patch(tf.saved_model, "load", "load")

    popen_init = subprocess.Popen.__init__
    exit_status = subprocess.Popen._handle_exitstatus

    def init(self, *args, **kwargs):
        started = _clock()
        popen_init(self, *args, **kwargs)  # a start that fails is not a child
        self._albert_span = [started, None]
        _children.append(self._albert_span)

    def handle(self, *args, **kwargs):
        span = getattr(self, "_albert_span", None)
        if span is not None and span[1] is None:
            span[1] = _clock()
        return exit_status(self, *args, **kwargs)

    if not getattr(popen_init, "_albert_timed", False):
        init._albert_timed = True
        init.__wrapped__ = popen_init
        subprocess.Popen.__init__ = init
        subprocess.Popen._handle_exitstatus = handle


def _children_time(children, start, end) -> float:
    """The time at least one child process ([start, end or None while alive]) was alive within
    [start, end] (overlaps counted once)."""
    spans = sorted((max(a, start), min(b if b is not None else end, end)) for a, b in children)
    total, reach = 0.0, start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def pytest_addoption(parser):
    parser.addoption("--time-shares", metavar="FILE", default=None,
                     help="write each test's time and its subprocess/training/export/load "
                          "shares as JSON (tests/timing_plugin.py)")


def pytest_configure(config):
    _install()
    config._albert_start = time.monotonic()
    config._albert_over_budget = None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks added here
def pytest_collection_modifyitems(session, config, items):
    """Files longest first by their measured time (a file not measured yet first: it may be
    long), the tests inside a file in their order; a test measured at SLOW_SECONDS or more
    (with its fixtures) is marked slow, so the fast tier stays fast as tests change."""
    try:
        with open(FILE_TIMES) as f:
            measured = json.load(f)
        files, tests = measured["files"], measured["tests"]
        fixtures = measured.get("fixtures", {})
    except (OSError, ValueError, KeyError):
        return
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.nodeid.split("::")[0], i)
        if (tests.get(item.nodeid, 0.0) >= SLOW_SECONDS
                or any(fixtures.get(key, 0.0) >= FIXTURE_SECONDS for key in _fixture_keys(item))):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: (-files.get(item.nodeid.split("::")[0], float("inf")),
                                 first[item.nodeid.split("::")[0]]))


def _fixture_keys(item):
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(info, "names_closure", ()):
        definitions = info.name2fixturedefs.get(name)
        if definitions:
            yield _fixture_key(definitions[-1])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    for category in CATEGORIES:
        _totals[category] = 0.0
    _children.clear()
    _fixtures.clear()
    _stack.clear()
    _test_start[0] = _clock()
    _cpu_start[0] = (os.times(), time.time())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = _clock()
    yield
    if fixturedef.scope != "function":  # a function fixture's time is its test's own
        _fixtures[_fixture_key(fixturedef)] = _clock() - start


def _cpu_since(times, started) -> dict:
    """The CPU seconds the test's process (`cpu`) and the child processes it waited for
    (`children_cpu`) used since `times` (os.times()), and its start (`started`, epoch seconds,
    to order a worker's tests). CPU time, unlike wall time, does not grow when the other worker
    keeps the cores busy."""
    now = os.times()
    return {"cpu": (now.user - times.user) + (now.system - times.system),
            "children_cpu": ((now.children_user - times.children_user)
                             + (now.children_system - times.children_system)),
            "started": started}


def _fixture_key(fixturedef) -> str:
    return f"{fixturedef.baseid or 'tests'}::{fixturedef.argname}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown":
        shares = dict(_totals)
        shares["fixtures"] = dict(_fixtures)
        shares["subprocess"] = _children_time(_children, _test_start[0], _clock())
        if _cpu_start[0] is not None:
            shares.update(_cpu_since(*_cpu_start[0]))
        item.user_properties.append(("time_shares", shares))
    yield


def pytest_runtest_logreport(report):
    record = _records.setdefault(report.nodeid, {
        "nodeid": report.nodeid, "setup": 0.0, "call": 0.0, "teardown": 0.0,
        "slow": "slow" in report.keywords, "outcome": "passed",
        "worker": _worker(report)})
    record[report.when] = report.duration
    if report.failed:
        record["outcome"] = "failed"
    elif report.skipped and record["outcome"] == "passed":
        record["outcome"] = "skipped"
    for name, value in report.user_properties:
        if name == "time_shares":
            record.update(value)


def _worker(report):
    """The xdist worker that ran the test ("gw0", "gw1"), or None in one process."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return getattr(gateway, "id", None)


def _only_testpaths(config) -> bool:
    option = config.option
    if option.markexpr or option.keyword or getattr(option, "lf", False):
        return False
    root = str(config.rootpath)
    given = {os.path.normpath(os.path.join(str(config.invocation_params.dir), a))
             for a in config.args}
    return given <= {os.path.normpath(os.path.join(root, p)) for p in
                     config.getini("testpaths") or ["."]}


def _machine() -> dict:
    """The CPU's name, its cores, and the flags that change TensorFlow's speed here."""
    info = {"cpu": "unknown", "cores": os.cpu_count(), "flags": []}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and info["cpu"] == "unknown":
            info["cpu"] = value.strip()
        elif key.strip() == "flags" and not info["flags"]:
            have = set(value.split())
            info["flags"] = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                             if f in have]
    return info


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller writes and checks
    records = sorted(_records.values(),
                     key=lambda r: -(r["setup"] + r["call"] + r["teardown"]))
    for r in records:
        r["total"] = r["setup"] + r["call"] + r["teardown"]
    path = config.getoption("--time-shares") or os.environ.get(SHARES_ENV)
    if path:
        with open(path, "w") as f:
            json.dump({"wall_seconds": time.monotonic() - config._albert_start,
                       "workers": getattr(config.option, "numprocesses", None),
                       "dist": getattr(config.option, "dist", None),
                       "whole_suite": _only_testpaths(config), "machine": _machine(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "tests": records}, f, indent=1)
    budget = os.environ.get(BUDGET_ENV)
    if not budget or not records or not _only_testpaths(config):
        return
    message = over_budget(time.monotonic() - config._albert_start, float(budget), records)
    if message:
        config._albert_over_budget = message
        if session.exitstatus == pytest.ExitCode.OK:  # a failure's own status is kept
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The budget's verdict last, after the counts (so the log does not end in green)."""
    message = getattr(config, "_albert_over_budget", None)
    if message:
        terminalreporter.write_sep("=", "time budget exceeded", red=True)
        terminalreporter.write_line(message)


def over_budget(elapsed: float, budget: float, records) -> str | None:
    """The failure message when the whole suite's `elapsed` seconds pass `budget`, naming the
    ten slowest of `records` (longest first); None within it."""
    if elapsed <= budget:
        return None
    slowest = "\n".join(f"  {r['total']:7.1f} s  {r['nodeid']}" for r in records[:10])
    return (f"the whole suite took {elapsed:.0f} s, over its budget of {budget:.0f} s "
            f"({BUDGET_ENV}, set in .ci/run): win the time back (docs/development.md, 'Adding "
            f"a test without adding minutes'). The slowest tests:\n{slowest}")
