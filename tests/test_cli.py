"""Commands: TensorFlow's start-up noise filtered out of our commands' stderr (and nothing else),
console scripts installed by `pip install .` that work from any directory."""

import ast
import importlib
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import time

import pytest

from albert_tf import quiet
from albert_tf.commands.cli import COMMANDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795383420.924027   29050 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors from "
    "different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "I0000 00:00:1795383420.924473   29050 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "I0000 00:00:1795383422.165725   29050 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F AVX512_VNNI AVX512_BF16 FMA, in other "
    "operations, rebuild TensorFlow with the appropriate compiler flags.",
    "E0000 00:00:1795383430.695480   29056 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
]
KEPT = [
    "error: --max_seq_length=512 exceeds the model's max_position_embeddings=128",
    "E0000 00:00:1795383430.695480   29056 saved_model_loader.cc:52] Op type not registered",
    "W1122 10:00:00.000000   29056 port.cc",  # not a whole log line of the listed kind
    "Traceback (most recent call last):",
]


def test_help_examples_keep_their_line_continuations():
    """A command's help prints its module docstring: an example written over several lines
    with a trailing backslash in a plain string was joined into one line of runs of spaces
    (`--dev_file wnut17/dev.conll         --test_file ...` in run_tagging --help)."""
    collapsed = {}
    for module in sorted(set(COMMANDS.values())):
        path = os.path.join(ROOT, *module.split(".")) + ".py"
        if not os.path.exists(path):
            path = os.path.join(ROOT, *module.split("."), "__main__.py")
        with open(path, encoding="utf-8") as f:
            doc = ast.get_docstring(ast.parse(f.read()), clean=False) or ""
        collapsed.update({module: line for line in doc.splitlines()
                          if re.search(r"\S {4,}--", line)})
    assert collapsed == {}
    assert len(COMMANDS) == 19


def test_noise_patterns():
    assert all(quiet.is_noise(line) for line in NOISE)
    assert not any(quiet.is_noise(line) for line in KEPT)


def _script(body):
    return textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {ROOT!r})
        from albert_tf import quiet
        print("filter on:", quiet.install(), flush=True)
        {body}
    """)


def test_filter_drops_noise_keeps_the_rest_and_survives_a_crash():
    lines = [NOISE[0], KEPT[0], NOISE[2], KEPT[1], NOISE[4], KEPT[3]]
    body = "os.write(2, ({!r}).encode()); os.abort()".format("\n".join(lines) + "\nlast words")
    proc = subprocess.run([sys.executable, "-c", _script(body)], capture_output=True, text=True,
                          env=dict(os.environ, ALBERT_TF_VERBOSE="0"))
    assert proc.returncode == -6  # SIGABRT: the process died at once, its last words arrive
    assert proc.stdout == "filter on: True\n"
    assert proc.stderr.splitlines() == [KEPT[0], KEPT[1], KEPT[3], "last words"]
    verbose = subprocess.run([sys.executable, "-c", _script("print('x', file=sys.stderr)")],
                             capture_output=True, text=True,
                             env=dict(os.environ, ALBERT_TF_VERBOSE="1"))
    assert verbose.stdout == "filter on: False\n" and verbose.stderr == "x\n"


def test_module_commands_freeze_the_heap_last_at_exit(tmp_path):
    """An entry module run as the program (`entry_point("__main__")`, its first line) registers
    `gc.freeze` before anything else, so it runs after every other exit handler; an unflushed
    file is still written at exit; importing the packages or an entry module as a library
    registers nothing."""
    probe = textwrap.dedent("""
        import atexit, gc, sys
        out = sys.argv[2]
        # registered before the entry point: runs after its handlers (they run in reverse)
        atexit.register(lambda: open(out, "a").write(f"after: {gc.get_freeze_count() > 0}\\n"))
        import albert_tf, data, export  # noqa: F401
        from albert_tf.quiet import entry_point
        entry_point("__main__" if sys.argv[1] == "command" else "albert_tf.data.prepare_corpus")
        f = open(out + ".unflushed", "w")
        f.write("kept")  # never closed nor flushed: interpreter shutdown writes it
        atexit.register(lambda: open(out, "a").write(f"handler: {gc.get_freeze_count() > 0}\\n"))
    """)
    for how, frozen in (("command", "True"), ("library", "False")):
        out = tmp_path / f"{how}.txt"
        proc = subprocess.run([sys.executable, "-c", probe, how, str(out)], cwd=ROOT,
                              capture_output=True, text=True,
                              env=dict(os.environ, ALBERT_TF_VERBOSE="1"))
        assert proc.returncode == 0, proc.stderr
        assert out.read_text() == f"handler: False\nafter: {frozen}\n"
        assert (tmp_path / f"{how}.txt.unflushed").read_text() == "kept"


def test_filter_drops_only_the_start_up_messages():
    """Matched by message, not by the file that logs it: another line of the same files, at any
    severity, passes; the cuInit error is noise only where there is no GPU."""
    same_files = [
        "E0000 00:00:1795383420.924027   29050 port.cc:153] oneDNN failed to allocate memory",
        "W0000 00:00:1795383420.924473   29050 cudart_stub.cc:31] cudaGetDevice failed",
        "E0000 00:00:1795383422.165725   29050 cpu_feature_guard.cc:227] The TensorFlow library "
        "was compiled to use AVX instructions, but these aren't available on your machine.",
        "W0000 00:00:1795383430.695480   29056 gpu_device.cc:2342] Cannot dlopen some GPU "
        "libraries."]
    assert not any(quiet.is_noise(line, gpu_present=False) for line in same_files)
    cuinit = NOISE[-1]
    assert quiet.is_noise(cuinit, gpu_present=False)
    assert not quiet.is_noise(cuinit, gpu_present=True)


def test_filter_keeps_a_terminal_and_passes_partial_lines_at_once():
    """When stderr is a terminal the command still sees one (progress lines redraw in place),
    and a progress update without a newline arrives before the next one is written."""
    import pty
    import select

    script = _script("") + textwrap.dedent("""
        import time
        print("tty:", os.isatty(2), flush=True)
        os.write(2, b"\\rprogress 1/2")
        time.sleep(1.0)
        os.write(2, b"\\rprogress 2/2\\n")
    """)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=slave, text=True, env=dict(os.environ, ALBERT_TF_VERBOSE="0"))
    os.close(slave)
    seen, t0, first_at, second_at = b"", time.monotonic(), None, None
    while time.monotonic() - t0 < 30:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 1024)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
            if first_at is None and b"progress 1/2" in seen:
                first_at = time.monotonic()
            if b"2/2" in seen:
                second_at = time.monotonic()
                break
    stdout = proc.communicate(timeout=30)[0]
    os.close(master)
    assert stdout == "filter on: True\ntty: True\n"
    assert b"\rprogress 1/2" in seen and b"\rprogress 2/2" in seen
    # the first update arrived on its own, about the child's 1 s pause before the second (a
    # filter that waits for a newline delivers both together)
    assert first_at is not None and second_at is not None and second_at - first_at > 0.5


@pytest.mark.slow
def test_the_python_api_prints_no_tensorflow_noise_and_keeps_other_lines(tmp_path):
    """`from albert_tf import AlbertBackbone` printed TensorFlow's start-up lines (`failed call to
    cuInit` on a machine without a GPU), which the commands filter; the Python API now drops
    them too, keeps what else the import wrote, and leaves fd 2 the program's own."""
    script = ("import os, sys, warnings\n"
              "from albert_tf import AlbertBackbone\n"
              "import tensorflow as tf\n"
              "print(float(tf.reduce_sum(tf.ones(3))))\n"
              "os.write(2, b'mine after\\n')\n")
    env = dict(os.environ, ALBERT_TF_VERBOSE="0")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=str(tmp_path), env=env)
    assert proc.returncode == 0 and proc.stdout == "3.0\n", proc.stderr
    assert proc.stderr == "mine after\n"
    raw = subprocess.run([sys.executable, "-c", script.replace(
        "from albert_tf import AlbertBackbone\nimport tensorflow as tf\n",
        "import tensorflow as tf\ntf.config.list_physical_devices()\n"
        "from albert_tf import AlbertBackbone\n")], capture_output=True, text=True,
        cwd=str(tmp_path), env=env)  # TensorFlow imported first: nothing to filter any more
    assert raw.stdout == "3.0\n" and raw.stderr.endswith("mine after\n")
    assert any(quiet.is_noise(line) for line in raw.stderr.splitlines())


def test_the_python_api_keeps_what_tensorflow_prints_before_it_aborts(tmp_path):
    """A TensorFlow that dies while it is imported (a CPU without the instructions its wheel
    needs: a fatal line, then abort) through the Python API: its last words arrive (the import
    held fd 2 in a temporary file, written back only if Python survived), its start-up lines
    do not. A stand-in `tensorflow` package plays it, so no real TensorFlow is imported."""
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os\n"
        "os.write(2, b'I0000 00:00:1.5    7 cudart_stub.cc:31] Could not find cuda drivers on "
        "your machine, GPU will not be used.\\n')\n"
        "os.write(2, b'F0000 00:00:1.6    7 cpu_check.cc:9] The TensorFlow library was compiled "
        "to use AVX instructions, but these aren\\'t available on your machine.\\n')\n"
        "os.abort()\n")
    env = dict(os.environ, ALBERT_TF_VERBOSE="0",
               PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), ROOT]))
    proc = subprocess.run([sys.executable, "-c", "import sys\nprint('mine', file=sys.stderr)\n"
                           "from albert_tf import AlbertBackbone"],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert proc.returncode == -6  # SIGABRT
    assert proc.stderr.splitlines() == [
        "mine", "F0000 00:00:1.6    7 cpu_check.cc:9] The TensorFlow library was compiled to "
        "use AVX instructions, but these aren't available on your machine."]


@pytest.mark.slow
def test_module_commands_print_no_tensorflow_noise(tmp_path):
    # Imports TensorFlow and runs ops before it refuses the config: the unfiltered run prints
    # the CUDA-probing lines on this machine, ours does not, and the error still arrives.
    args = [sys.executable, "-m", "albert_tf.run_pretraining", "--albert_config_file",
            os.path.join(ROOT, "albert_tf", "sample_data", "albert_config_tiny.json"),
            "--input_file", str(tmp_path / "none-*.tfrecord"), "--output_dir",
            str(tmp_path / "out"), "--do_train"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=str(tmp_path),
                          env=dict(os.environ, ALBERT_TF_VERBOSE="0"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: --max_seq_length=512 exceeds the model's max_position_embeddings=128"]
    raw = subprocess.run(args, capture_output=True, text=True, cwd=str(tmp_path),
                         env=dict(os.environ, ALBERT_TF_VERBOSE="1"))
    assert raw.stderr.endswith(proc.stderr)
    assert any(quiet.is_noise(line) for line in raw.stderr.splitlines())  # what was filtered


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`pip install .` (no dependencies: this environment has them) into a prefix of its own."""
    prefix = tmp_path_factory.mktemp("prefix")
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--ignore-installed",
                           "--no-deps", "--no-index", "--no-build-isolation", "--quiet",
                           "--prefix", str(prefix), ROOT],
                          capture_output=True, text=True, cwd=str(build),
                          env=dict(os.environ, TMPDIR=str(build)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # --ignore-installed: this environment's own (editable) install is left as it was
    probe = subprocess.run([sys.executable, "-c", "import albert_tf; print(albert_tf.__file__)"],
                           capture_output=True, text=True, cwd=str(build))
    assert probe.stdout.strip() == os.path.join(ROOT, "albert_tf", "__init__.py"), probe.stderr
    site = sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)})
    return {"bin": os.path.join(str(prefix), "bin"), "site": site}


@pytest.mark.slow
def test_console_scripts_from_outside_the_repository(installed, tmp_path):
    from albert_tf.commands.cli import COMMANDS

    site = installed["site"]
    # every package the commands need was installed, with the bundled sample data
    for package in ("albert_tf", "albert_tf/data", "albert_tf/export"):
        assert os.path.exists(os.path.join(site, package, "__init__.py")), package
    # one top-level name: the checkout's data/ and export/ shims are not installed
    assert not any(os.path.exists(os.path.join(site, name)) for name in ("data", "export"))
    for name in ("albert_config_small.json", "glue/SST-2/train.tsv",
                 "pretrain_text/gutenberg/11-0.txt", "pretrain_text/wikitext-2-raw/wiki.test.raw"):
        assert os.path.exists(os.path.join(site, "albert_tf", "sample_data", name)), name
    assert os.path.exists(os.path.join(site, "albert_tf", "export", "serving_loader.cc"))
    assert sorted(os.listdir(installed["bin"])) == sorted(COMMANDS)
    env = dict(os.environ, PYTHONPATH=site, ALBERT_TF_VERBOSE="0")
    # the module each script runs is the installed copy, not this checkout
    probe = subprocess.run([sys.executable, "-c", "import albert_tf; print(albert_tf.__file__)"],
                           capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert probe.stdout.strip() == os.path.join(site, "albert_tf", "__init__.py")
    # every console script's --help, each with a flag (or text) of its own
    expected = {"albert-demo": "--smoke", "albert-params": "--plot_file",
                "albert-export": "--export_dir", "albert-transitions": "--model_dir",
                "albert-fill-mask": "--text", "albert-prepare-corpus": "--heldout_file",
                "albert-train-vocab": "--model_prefix",
                "albert-create-pretraining-data": "--masked_lm_prob",
                "albert-pretrain": "--num_train_steps", "albert-classifier": "--train_examples",
                "albert-squad-v1": "--doc_stride", "albert-squad-v2": "--null_score_diff_threshold",
                "albert-race": "--data_dir", "albert-convert": "--source",
                "albert-export-tflite": "--output", "albert-client": "--server",
                "albert-serving-loader": "--saved_model", "albert-saved-model-cli": "saved_model_cli",
                "albert-ops-check": "serving_ops_tf2.20.json"}
    assert sorted(expected) == sorted(COMMANDS)
    helps = {}
    for script, flag in expected.items():
        proc = subprocess.run([os.path.join(installed["bin"], script), "--help"],
                              capture_output=True, text=True, cwd=str(tmp_path), env=env)
        assert proc.returncode == 0, (script, proc.stderr[-2000:])  # absl's own exits 1
        assert flag in proc.stdout, (script, proc.stdout[-2000:], proc.stderr[-2000:])
        helps[script] = " ".join(proc.stdout.split())
        assert not any(quiet.is_noise(line) for line in proc.stderr.splitlines()), script
        # the description, as `python -m` prints it (seven scripts printed the flags only)
        module = importlib.import_module(COMMANDS[script])
        if module.__doc__:
            first = " ".join(module.__doc__.strip().split("\n\n")[0].split())
            assert first in helps[script], (script, first, helps[script][:300])
    # --export_dir's help says what each command writes (it said EXPORT_DIR_best everywhere)
    assert ("This command exports one model to EXPORT_DIR: the one it predicts with (the best "
            "evaluated checkpoint where --do_eval kept one, else the last).") in helps[
        "albert-classifier"]
    assert "EXPORT_DIR_best" not in helps["albert-classifier"] + helps["albert-race"]
    assert ("After training: the final model to EXPORT_DIR, the best evaluated one (with "
            "--do_eval) to EXPORT_DIR_best.") in helps["albert-pretrain"]
    # a flag error before --help keeps its status; -h is --help, except as a flag's value
    for args, status in ((["--heldout_every=abc", "--help"], 1), (["-h"], 0),
                         (["--input_file", "-h", "--output_file", "x"], 1)):
        proc = subprocess.run([os.path.join(installed["bin"], "albert-prepare-corpus"), *args],
                              capture_output=True, text=True, cwd=str(tmp_path), env=env)
        assert proc.returncode == status, (args, proc.stderr[-2000:])
        assert ("--heldout_file" in proc.stdout) == (args == ["-h"]), args
    # a missing flag: one line and the hint to --help (absl printed the whole help above it)
    proc = subprocess.run([os.path.join(installed["bin"], "albert-classifier"), "--do_train"],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["error: --task_name is required.",
                                        "Run `albert-classifier --help` for the flags."]
    proc = subprocess.run([os.path.join(installed["bin"], "albert-params"), "--tables", "4"],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert proc.returncode == 0 and "| all-shared E=128 " in proc.stdout
    assert "11,683,584" in proc.stdout


def test_a_failed_network_lookup_is_named_as_one_not_as_a_disk_error(capsys):
    """A TPU name that does not resolve raised urllib's URLError, an OSError, and the commands
    said "Free space or fix the permissions of the output location" (a new-user walk): it is
    said as a network request that failed, with the flags that name addresses."""
    import urllib.error

    from albert_tf.commands import cli

    def main(argv):
        raise urllib.error.URLError(OSError(-2, "Name or service not known"))

    assert cli._guarded(main, ["prog"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: a network request failed: [Errno -2] Name or service not "
                          "known. Check the addresses given to this command (--tpu, --tpu_name")
    assert "Free space" not in err

    def disk(argv):
        raise OSError(28, "No space left on device")

    assert cli._guarded(disk, ["prog"]) == 1
    assert "Free space or fix the permissions" in capsys.readouterr().err

    def lookup(argv):  # a resolver that raises the socket's error itself
        import socket
        raise socket.gaierror(-2, "Name or service not known")

    assert cli._guarded(lookup, ["prog"]) == 1
    assert capsys.readouterr().err.startswith("error: a network request failed: [Errno -2]")
