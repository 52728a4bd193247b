"""The README's two commands and CI stay in step."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def test_readme_has_two_commands_and_ci_runs_the_test_one_verbatim():
    blocks = re.findall(r"```bash\n(.*?)```", _read("README.md"), re.S)
    assert len(blocks) == 2
    main_command, test_command = (b.strip() for b in blocks)
    assert main_command.endswith(".venv/bin/python -m albert_tf.demo")
    assert test_command.endswith("python -m pytest tests")
    ci_lines = [line.strip() for line in _read(".ci", "run").splitlines()]
    assert test_command in ci_lines
