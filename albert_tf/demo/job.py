"""A run directory of the main job: its settings, its state (the seconds and commands of every
step) and the running of a step's commands, each skipped when its last artefact exists."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

from albert_tf import paths
from albert_tf.demo.settings import PACKAGE_DIR


class StepFailed(RuntimeError):
    """A command of a step exited with an error (its output's tail and log in the message)."""


def shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies inside it (shorter commands to
    copy), else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def write_json(path: str, value) -> None:
    """The job's state and results: `value` as JSON (indent 1), whole, its folder made."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    paths.write_json(path, value, indent=1)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Run:
    """A run directory: its settings, state (seconds and commands of every step) and steps."""

    def __init__(self, run_dir: str, settings: dict, echo: bool = True):
        self.dir = os.path.abspath(run_dir)
        self.settings = settings
        self.echo = echo
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.state_file = os.path.join(self.dir, "state.json")
        self.state = {"settings": settings, "steps": {}}
        if os.path.exists(self.state_file):
            self.state = read_json(self.state_file)
        self.state["settings"] = settings
        self.save()

    def path(self, *parts) -> str:
        return os.path.join(self.dir, *parts)

    def save(self):
        write_json(self.state_file, self.state)

    def step(self, name: str, commands, index: int, total: int) -> dict:
        """Runs each of `commands` ([(args of `python -m`, its last artefact)]) whose artefact
        does not exist yet; records the step's seconds (summed over the invocations that ran
        part of it) and commands."""
        shown = [shlex.join(["python", "-m", *args]) for args, _ in commands]
        record = self.state["steps"].get(name, {})
        print(f"[{index}/{total}] {name}", flush=True)
        todo = [(args, text) for (args, done), text in zip(commands, shown)
                if not os.path.exists(done)]
        if not todo:
            print("  done before: skipped", flush=True)
            record.update(commands=shown, skipped=True)
            record.setdefault("seconds", 0.0)
        else:
            # Seconds of an earlier invocation that ran part of this step and was cut short.
            seconds = record.get("seconds", 0.0) if record.get("partial") else 0.0
            log = self.path("logs", f"{name}.log")
            for args, text in todo:
                print(f"  $ {text}", flush=True)
                t0 = time.time()
                self._run(args, text, log)
                seconds += time.time() - t0
                self.state["steps"][name] = {"seconds": seconds, "commands": shown,
                                             "skipped": False, "partial": True}
                self.save()
            record = {"seconds": seconds, "commands": shown, "skipped": False}
            print(f"  {name}: {seconds:.0f} s", flush=True)
        self.state["steps"][name] = record
        self.save()
        return record

    def _run(self, command, text, log):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        root = os.path.dirname(PACKAGE_DIR)  # this checkout's packages, whatever the cwd
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"$ {text}\n")
            f.flush()
            proc = subprocess.Popen([sys.executable, "-m", *command], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=env, text=True,
                                    errors="replace", bufsize=1)
            tail = []
            for line in proc.stdout:
                f.write(line)
                f.flush()
                tail = (tail + [line])[-30:]
                if self.echo:
                    print("    " + line, end="", flush=True)
            code = proc.wait()
        if code:
            raise StepFailed(f"failed (exit {code}): {text}\n" + "".join(tail)
                             + f"(whole output: {log})")

    def seconds(self, *names) -> float:
        return sum(self.state["steps"].get(n, {}).get("seconds", 0.0) for n in names)


def choose_run_dir(runs_dir: str, settings: dict, new: bool) -> str:
    """The newest run in `runs_dir` with the same settings (resume), else a new timestamped one."""
    if not new and os.path.isdir(runs_dir):
        for name in sorted(os.listdir(runs_dir), reverse=True):
            state = os.path.join(runs_dir, name, "state.json")
            try:
                if read_json(state).get("settings") == settings:
                    return os.path.join(runs_dir, name)
            except (OSError, ValueError):
                continue
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(runs_dir, stamp)
    suffix = 1
    while os.path.exists(path):
        suffix += 1
        path = os.path.join(runs_dir, f"{stamp}-{suffix}")
    return path
