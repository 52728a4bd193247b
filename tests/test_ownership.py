"""One output, one writer (`albert_tf.ownership`): every writer (corpus, vocabulary, data
generation, training and fine-tuning, SavedModel and TFLite export) refuses an output that a
live process holds, takes over the lock of a dead one, never writes over an input or an
artefact others name by path, and leaves no lock behind."""

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from albert_tf import AlbertClassifier, AlbertConfig
from albert_tf.ownership import _HELD, OutputLock, OutputLockedError, lock_path
from conftest import GENERATION_KW, ROOT, export_config, run_cli

def lock_output(target, what, is_dir):
    """The lock of `target`, taken now."""
    return OutputLock(target, what, is_dir).acquire()


def is_held(target, is_dir):
    """Whether this process holds the lock of `target`."""
    path = lock_path(os.fspath(target), is_dir)
    return (path if "://" in path else os.path.abspath(path)) in _HELD


HOLDER = """
import os, sys, time
sys.path.insert(0, {root!r})
from albert_tf.ownership import OutputLock
lock = OutputLock(sys.argv[1], "test output", is_dir=sys.argv[2] == "dir").acquire()  # held while referenced
print("held", flush=True)
if sys.argv[3] == "die":
    os._exit(0)  # no release: the lock file stays, naming a pid that is gone
time.sleep(600)
"""


@contextlib.contextmanager
def held_elsewhere(target, is_dir):
    """`target` locked by another live process for the duration."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=ROOT), str(target),
                             "dir" if is_dir else "file", "live"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def die_holding(target, is_dir) -> int:
    """A process that takes `target`'s lock and dies without releasing it; its pid."""
    proc = subprocess.run([sys.executable, "-c", HOLDER.format(root=ROOT), str(target),
                           "dir" if is_dir else "file", "die"], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.strip() == "held"
    with open(lock_path(str(target), is_dir)) as f:
        return json.load(f)["pid"]


def _command(args, **kwargs):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=ROOT), **kwargs)


# ---------------------------------------------------------------------------------------------
def test_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path, capsys):
    target = tmp_path / "out" / "corpus.txt"
    with held_elsewhere(target, is_dir=False) as holder:
        with pytest.raises(OutputLockedError) as refused:
            lock_output(str(target), "--output_file", is_dir=False)
        message = str(refused.value)
        assert f"--output_file {target} is being written by" in message
        assert f"(pid {holder.pid} on " in message and "choose another --output_file" in message
    # The holder was killed: its lock is taken at once, nothing to clean by hand.
    with OutputLock(str(target), "--output_file", is_dir=False):
        assert is_held(str(target), is_dir=False)
    dead = die_holding(target, is_dir=False)
    lock = lock_output(str(target), "--output_file", is_dir=False)
    assert lock.taken_over["pid"] == dead
    assert "was locked by python -c" in capsys.readouterr().err
    lock.release()
    assert not os.path.exists(lock_path(str(target), is_dir=False))
    assert os.listdir(tmp_path / "out") == []  # no lock file left


def test_a_writer_refused_as_the_holder_starts_waits_for_its_name(tmp_path):
    """The holder takes the lock, then writes who it is: a writer refused in between found
    an empty record, or the record of a dead holder before it, and said "another process"
    (two conversions started together, CI). It waits for the live holder's record."""
    target = str(tmp_path / "corpus.txt")
    path = lock_path(target, is_dir=False)
    for before in ("", json.dumps({"host": socket.gethostname(), "pid": 2 ** 22 + 7,
                                   "command": "python -m dead"})):
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        os.pwrite(fd, before.encode(), 0)
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: refused like a process
        record = {"host": socket.gethostname(), "pid": os.getpid(), "command": "python -m live"}
        writer = threading.Timer(0.3, lambda: (os.ftruncate(fd, 0),
                                               os.pwrite(fd, json.dumps(record).encode(), 0)))
        writer.start()
        with pytest.raises(OutputLockedError, match="being written by python -m live "):
            lock_output(target, "--output_file", is_dir=False)
        writer.join()
        os.unlink(path)
        os.close(fd)


def test_lock_is_reentrant_in_a_process_and_removes_what_it_created(tmp_path):
    run_dir = tmp_path / "a" / "b" / "run"
    outer = lock_output(str(run_dir), "--output_dir", is_dir=True)
    inner = lock_output(str(run_dir), "--output_dir", is_dir=True)  # the same process: counted
    assert os.path.exists(run_dir / ".albert_tf.lock")
    inner.release()
    assert is_held(str(run_dir), is_dir=True)
    outer.release()
    assert not is_held(str(run_dir), is_dir=True)
    # The directories made to hold the lock were left empty, so they are gone again.
    assert not (tmp_path / "a").exists()


# ---------------------------------------------------------------------------------------------
# Every writer: refused while another process holds its output, nothing written.
def test_corpus_and_vocabulary_writers_refuse_a_live_holder(prepared_corpus, tmp_path):
    from albert_tf.data.prepare_corpus import prepare_corpus
    from albert_tf.data.train_vocab import train_vocab

    corpus = tmp_path / "corpus.txt"
    with held_elsewhere(corpus, is_dir=False):
        with pytest.raises(OutputLockedError, match="--output_file .*corpus.txt is being "
                                                    "written by"):
            prepare_corpus(prepared_corpus["wiki"], str(corpus), paragraphs="lines")
    assert not corpus.exists()
    prefix = tmp_path / "vocab" / "spm"
    with held_elsewhere(prefix, is_dir=False):
        with pytest.raises(OutputLockedError, match="--model_prefix .*spm is being written by"):
            train_vocab(prepared_corpus["wiki"], str(prefix), vocab_size=300, num_threads=1)
    assert not (tmp_path / "vocab" / "spm.model").exists()


def test_data_generation_refuses_a_live_holder(prepared_corpus, sample_vocab, tmp_path):
    from albert_tf.data.generator import generate, make_job

    job = make_job(prepared_corpus["wiki"], str(tmp_path / "data" / "train"), sample_vocab,
                   num_output_shards=2, **GENERATION_KW)
    with held_elsewhere(job.output_files[0], is_dir=False):
        with pytest.raises(OutputLockedError, match="--output_file .*train-00000-of-00002."
                                                    "tfrecord is being written by"):
            generate(job, progress=False)
        assert os.listdir(tmp_path / "data") == [".train-00000-of-00002.tfrecord.lock"]


@pytest.mark.slow
def test_training_and_export_refuse_a_live_holder(generated_data, sample_vocab, tmp_path):
    from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun
    from albert_tf.export.saved_model import export_saved_model
    from albert_tf.export.tflite import export_tflite

    run_dir = tmp_path / "run"
    cfg = PretrainingConfig(
        albert_config=AlbertConfig(vocab_size=8000, embedding_size=8, hidden_size=16,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=20, max_position_embeddings=64),
        input_file=generated_data["files"][0], output_dir=str(run_dir), max_seq_length=64,
        max_predictions_per_seq=10, train_batch_size=4, num_train_steps=1, verbose=False)
    with held_elsewhere(run_dir, is_dir=True):
        with pytest.raises(OutputLockedError, match="--output_dir .*run is being written by"):
            PretrainingRun(cfg)
        assert os.listdir(run_dir) == [".albert_tf.lock"]  # the holder's; nothing of ours
    model = AlbertClassifier(export_config(), num_labels=2)
    export_dir = tmp_path / "serving" / "sst2"
    with held_elsewhere(export_dir, is_dir=True):
        with pytest.raises(OutputLockedError, match="the export directory .*sst2 is being "
                                                    "written by"):
            export_saved_model(model, str(export_dir), sample_vocab, max_seq_length=32)
        assert os.listdir(export_dir) == [".albert_tf.lock"]
    output = tmp_path / "phone" / "sst2.tflite"
    with held_elsewhere(output, is_dir=False):
        with pytest.raises(OutputLockedError, match="--output .*sst2.tflite is being written"):
            export_tflite(model, str(output), sample_vocab, max_seq_length=32)
        assert os.listdir(tmp_path / "phone") == [".sst2.tflite.lock"]


def _tf1_source(directory, seed) -> str:
    """An official TF1 checkpoint (and albert_config.json) of a tiny pretrainer, weights of
    `seed`: a conversion's input."""
    from albert_tf import AlbertPretrainer
    from albert_tf.checkpoints import write_tf1_checkpoint

    model = AlbertPretrainer(AlbertConfig(**TINY_CONFIG))
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0, 0.02, w.shape).astype(np.float32))
    write_tf1_checkpoint(model, str(directory))
    model.config.to_json_file(str(directory / "albert_config.json"))
    return str(directory)


def test_convert_refuses_a_live_holder(tmp_path, capsys):
    """`albert_tf.convert` locks its --output (`.NAME.lock` beside it) before it reads: with
    another process holding it, the conversion is refused in one line naming the holder, and
    an earlier conversion there is left whole, --overwrite or not (issue 58 item 1)."""
    source = _tf1_source(tmp_path / "a", seed=1)
    out = tmp_path / "converted" / "base"
    assert run_cli("albert_tf.convert", "--input", source, "--output", str(out)) == 0
    assert sorted(os.listdir(tmp_path / "converted")) == ["base"]  # its lock released
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    capsys.readouterr()
    with held_elsewhere(out, is_dir=False) as holder:
        for extra in ([], ["--overwrite"]):
            assert run_cli("albert_tf.convert", "--input", source, "--output", str(out),
                           *extra) == 1
            err = capsys.readouterr().err
            assert err.startswith(f"error: --output {out} is being written by python -c ")
            assert f"(pid {holder.pid} on " in err and err.count("\n") == 1, err
            assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


@pytest.mark.slow
def test_two_conversions_into_one_output(tmp_path):
    """Two `python -m albert_tf.convert` of two different models into one --output, started
    together (each reported success and one model was gone, 4 tries of 6): one writes, the
    other is refused in one line (by the lock while the first runs, or by the finished
    output after it), and the output holds the writer's model, whole."""
    sources = {seed: _tf1_source(tmp_path / f"model{seed}", seed) for seed in (1, 2)}
    out = tmp_path / "converted"
    procs = {seed: subprocess.Popen([sys.executable, "-m", "albert_tf.convert", "--input",
                                     path, "--output", str(out)], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=dict(os.environ, PYTHONPATH=ROOT))
             for seed, path in sources.items()}
    results = {seed: (proc.wait(timeout=300), proc.stderr.read())
               for seed, proc in procs.items()}
    winners = [seed for seed, (code, _) in results.items() if code == 0]
    assert len(winners) == 1, results
    code, err = next(result for seed, result in results.items() if seed != winners[0])
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: "), err
    assert "is being written by python -m albert_tf.convert" in err \
        or "exists and is not empty" in err, err
    with open(out / "albert_tf.json") as f:
        assert json.load(f)["source"]["path"] == os.path.join(sources[winners[0]],
                                                              "model.ckpt")
    from albert_tf.checkpoints import load_pretrained
    from albert_tf.checkpoints.tf1 import TF1Checkpoint

    expected = TF1Checkpoint(sources[winners[0]])
    model = load_pretrained(str(out))
    for w in model.weights[:3]:
        assert any(np.array_equal(w.numpy(), expected.read(name)) for name in expected.names)


# ---------------------------------------------------------------------------------------------
# Real races: two commands started together into one output.
def _generation_args(corpus, vocab, output, masked_lm_prob):
    return ["albert_tf.data.create_pretraining_data", "--input_file", corpus, "--output_file",
            output,
            "--num_output_shards", "2", "--spm_model_file", vocab, "--max_seq_length", "64",
            "--max_predictions_per_seq", "10", "--dupe_factor", "2", "--random_seed", "17",
            "--tokens_per_unit", "40000", "--masked_lm_prob", str(masked_lm_prob),
            "--noprogress"]


@pytest.mark.slow
def test_two_data_generations_into_one_output(prepared_corpus, sample_vocab, tmp_path):
    """Two runs with different --masked_lm_prob into one --output_file, started together: one
    writes, the other is refused (by the lock while the first runs, or by the finished
    outputs' run identity after it), and the files on disk are wholly the writer's."""
    output = str(tmp_path / "data" / "train")
    procs = {p: subprocess.Popen([sys.executable, "-m", *_generation_args(
        prepared_corpus["wiki"], sample_vocab, output, p)], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=ROOT))
        for p in (0.15, 0.3)}
    results = {p: (proc.wait(timeout=300), proc.stderr.read()) for p, proc in procs.items()}
    winners = [p for p, (code, _) in results.items() if code == 0]
    assert len(winners) == 1, results
    loser = next(p for p in results if p not in winners)
    code, err = results[loser]
    assert code == 1 and "Traceback" not in err
    assert ("is being written by" in err) or ("already exists from a different run" in err), err
    for shard in range(2):
        with open(f"{output}-0000{shard}-of-00002.tfrecord.json") as f:
            assert json.load(f)["generation"]["masked_lm_prob"] == winners[0]
    assert sorted(os.listdir(tmp_path / "data")) == [
        "sample8k.model", "train-00000-of-00002.tfrecord", "train-00000-of-00002.tfrecord.json",
        "train-00001-of-00002.tfrecord", "train-00001-of-00002.tfrecord.json"]
    # Two identical runs: both succeed (one writes, the other finds the run complete or waits
    # its turn by being refused), and the bytes equal a run alone.
    alone = str(tmp_path / "alone" / "train")
    assert _command(_generation_args(prepared_corpus["wiki"], sample_vocab, alone,
                                     winners[0])).returncode == 0
    for shard in range(2):
        with open(f"{output}-0000{shard}-of-00002.tfrecord", "rb") as a, \
                open(f"{alone}-0000{shard}-of-00002.tfrecord", "rb") as b:
            assert a.read() == b.read()


TINY_CONFIG = dict(vocab_size=8000, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                   num_attention_heads=2, intermediate_size=20, max_position_embeddings=64,
                   type_vocab_size=2, hidden_act="gelu", hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, initializer_range=0.02,
                   num_hidden_groups=1, inner_group_num=1)


@pytest.mark.slow
def test_two_pretraining_runs_into_one_output_dir(generated_data, tmp_path):
    """The issue's run: two run_pretraining commands with learning rates 1e-3 and 3e-2 into
    one fresh --output_dir. The second is refused while the first runs; the directory holds
    the first run's checkpoints and settings, and its model is whole."""
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    run_dir = tmp_path / "run"

    def args(lr, steps):
        return ["albert_tf.run_pretraining", "--albert_config_file", str(config),
                "--input_file", generated_data["files"][0], "--output_dir", str(run_dir),
                "--max_seq_length", "64", "--max_predictions_per_seq", "10",
                "--train_batch_size", "8", "--num_train_steps", str(steps),
                "--num_warmup_steps", "0", "--save_checkpoints_steps", "20",
                "--iterations_per_loop", "10", "--learning_rate", str(lr)]

    first = subprocess.Popen([sys.executable, "-m", *args(1e-3, 200)], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=dict(os.environ, PYTHONPATH=ROOT))
    deadline = time.time() + 120
    while not (run_dir / ".albert_tf.lock").exists():
        assert first.poll() is None and time.time() < deadline, first.stdout.read()
        time.sleep(0.2)
    second = _command(args(3e-2, 200), timeout=300)
    first_out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, first_out[-3000:]
    assert second.returncode == 1 and "Traceback" not in second.stderr
    assert f"--output_dir {run_dir} is being written by" in second.stderr
    assert f"(pid {first.pid} on " in second.stderr
    with open(run_dir / "train_settings.json") as f:
        assert json.load(f)["learning_rate"] == 1e-3
    assert (run_dir / "ckpt-200.index").exists() and not (run_dir / ".albert_tf.lock").exists()
    # Rerun with the other learning rate: refused with the difference named, nothing resumed.
    third = _command(args(3e-2, 200), timeout=300)
    assert third.returncode == 1
    assert "holds a run with other settings (learning_rate: 0.001 there, 0.03 now)" \
        in third.stderr, third.stderr


# ---------------------------------------------------------------------------------------------
# Leftovers of killed writers: hidden, and cleared by the next holder.
def test_killed_writers_leave_nothing_a_glob_meets(generated_data, tmp_path):
    from albert_tf.paths import temporary_name
    from albert_tf.records import write_file
    from albert_tf.input_pipeline import list_files

    path = str(tmp_path / "train-00000.tfrecord")
    leftover = temporary_name(path, "123-dead")
    assert os.path.basename(leftover) == ".train-00000.tfrecord.tmp-123-dead"
    with open(leftover, "wb") as f:
        f.write(b"half a record")
    write_file([b"x"], path, {"num_examples": 1})
    assert list_files(str(tmp_path / "train*")) == [path]  # the glob misses the leftover


@pytest.mark.slow
def test_fine_tuning_refuses_a_live_holder_before_writing(sample_vocab, tmp_path):
    """run_classifier holds its --output_dir for the whole command: with another process
    holding it, not even the features are written."""
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    run_dir = tmp_path / "sst2"
    with held_elsewhere(run_dir, is_dir=True) as holder:
        proc = _command(["albert_tf.run_classifier", "--task_name", "sst-2", "--data_dir",
                         os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2"),
                         "--albert_config_file", str(config), "--spm_model_file", sample_vocab,
                         "--output_dir", str(run_dir), "--do_train", "--max_seq_length", "32",
                         "--train_step", "2"], timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert f"--output_dir {run_dir} is being written by" in proc.stderr
        assert f"(pid {holder.pid} on " in proc.stderr
        assert os.listdir(run_dir) == [".albert_tf.lock"]
