"""The training loop: distribution equivalence, exact resume, XLA, failure modes (convergence:
test_convergence.py)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.training.distribute import StrategyError, get_strategy
from albert_tf.input_pipeline import DataMismatchError
from albert_tf.training.optimization import AlbertOptimizer
from albert_tf.training.trainer import has_dropout_state
from albert_tf.training.train_lib import (CorruptInputError, NonFiniteLossError,
                                          OutputDirMismatchError, PretrainingConfig, PretrainingRun,
                                          TrainingConfig)
from conftest import PRETRAINING_MODEL, ROOT, free_port, pretraining_config

WORKER = os.path.join(ROOT, "tests", "train_worker.py")
TINY = PRETRAINING_MODEL


def _pattern(generated_data):
    return generated_data["files"][0].replace("00000-of", "*-of")


def _worker(args, env=None, **kwargs):
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.Popen([sys.executable, WORKER, *args], env=full_env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def _weights(path):
    data = np.load(path)
    return {k: data[k] for k in data.files if not k.startswith("__")}, int(data["__replicas__"])


def _max_diff(a, b):
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


# The loop settings of this file's pretraining runs (a test changes some).
RUN = dict(albert_config=AlbertConfig(**TINY), train_batch_size=8, num_train_steps=4,
           num_warmup_steps=1, learning_rate=1e-2, save_checkpoints_steps=4,
           iterations_per_loop=2, seed=11, shuffle_window=64)


def _config(tmp_path, files, **changes):
    return pretraining_config(files, tmp_path / "run", **dict(RUN, **changes))


# ---------------------------------------------------------------------------------------------
def _assert_exits(outputs, expected=lambda name: 0):
    """Every worker exited with `expected(name)`; otherwise every failed worker's output."""
    failed = {name: out for name, (code, out) in outputs.items() if code != expected(name)}
    assert not failed, "\n\n".join(f"{name}: {out[-3000:]}" for name, out in failed.items())


def _run_workers(runs, tmp_path, timeout=600):
    """Starts every run (name -> worker arguments) at once; returns {name: output}."""
    procs = {name: _worker(args + ["--weights", str(tmp_path / f"{name}.npz")])
             for name, args in runs.items()}
    outputs = {}
    for name, proc in procs.items():
        try:
            outputs[name], _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
            pytest.fail(f"worker {name} did not finish in {timeout} s")
        outputs[name] = (proc.returncode, outputs[name])
    return outputs


@pytest.mark.slow
def test_mirrored_two_devices_equals_one_device_and_accumulation(generated_data, tmp_path):
    """Same global batch: MirroredStrategy over 2 logical CPUs, one device, and one device with
    2 gradient-accumulation micro-batches end with the same weights (clipping active); a
    mirrored run SIGKILLed after its step-2 checkpoint and rerun ends with exactly the
    uninterrupted mirrored run's weights (the input seeks to the step; no iterator state)."""
    data = ["--files", _pattern(generated_data)]
    mirrored = ["--strategy", "mirrored", "--logical_cpus", "2"] + data
    runs = {"one": ["--strategy", "one_device", "--output_dir", str(tmp_path / "one")] + data,
            "mirrored": mirrored + ["--output_dir", str(tmp_path / "mirrored"), "--export_dir",
                                    str(tmp_path / "exports" / "mirrored")],
            "accum": ["--strategy", "one_device", "--grad_accum_steps", "2", "--output_dir",
                      str(tmp_path / "accum")] + data,
            "killed": mirrored + ["--output_dir", str(tmp_path / "killed"), "--save_every", "2",
                                  "--kill_at_step", "2"]}
    for name, (code, out) in _run_workers(runs, tmp_path).items():
        assert code == (-signal.SIGKILL if name == "killed" else 0), out[-3000:]
    assert os.path.exists(tmp_path / "killed" / "ckpt-2.index")
    assert not os.path.exists(tmp_path / "killed" / "ckpt-4.index")
    code, out = _run_workers({"resumed": mirrored + ["--output_dir", str(tmp_path / "killed"),
                                                     "--save_every", "2"]}, tmp_path)["resumed"]
    assert code == 0, out[-3000:]
    one, r1 = _weights(tmp_path / "one.npz")
    mirrored, r2 = _weights(tmp_path / "mirrored.npz")
    accum, _ = _weights(tmp_path / "accum.npz")
    resumed, _ = _weights(tmp_path / "resumed.npz")
    assert (r1, r2) == (1, 2)
    diffs = {"mirrored": _max_diff(one, mirrored), "accum": _max_diff(one, accum)}
    print(f"\nmax |w - w_one_device| after 4 steps: {diffs}; killed at step 2 and resumed vs "
          f"uninterrupted (mirrored): {_max_diff(mirrored, resumed)}")
    assert max(diffs.values()) <= 1e-5
    assert _max_diff(mirrored, resumed) == 0.0
    initial = np.load(tmp_path / "one.npz")  # the runs moved the weights (not a no-op)
    assert initial["__losses__"][0] > initial["__losses__"][-1]
    _check_export_of_mirrored_run(tmp_path / "exports" / "mirrored" / "1", mirrored)


def _check_export_of_mirrored_run(path, weights):
    """run_pretraining --export_dir under MirroredStrategy wrote a plain host SavedModel whose
    outputs are the trained (mirrored) weights' outputs."""
    import tensorflow_text  # noqa: F401 - SentencePiece ops of the SavedModel

    from albert_tf.models.pretrainer import AlbertPretrainer
    from conftest import random_batch

    loaded = tf.saved_model.load(str(path))
    model = AlbertPretrainer(AlbertConfig(**TINY))
    for v in model.weights:
        v.assign(weights[v.path.replace("/", "|")])
    batch = random_batch(model.config, batch=3, seq=13, seed=5)
    tokens = {k: tf.constant(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    got = loaded.signatures["serve_tokens"](**tokens)
    expected = model({**tokens, "masked_lm_positions": tf.zeros([3, 1], tf.int32)})
    np.testing.assert_allclose(got["pooled_output"].numpy(), expected["pooled_output"].numpy(),
                               atol=1e-5, rtol=0)
    real = batch["input_mask"].astype(bool)  # the export computes real tokens only
    np.testing.assert_allclose(got["sequence_output"].numpy()[real],
                               expected["sequence_output"].numpy()[real], atol=1e-5, rtol=0)
    assert not os.path.exists(os.path.dirname(str(path)) + "_best")  # no --do_eval, no best


def _multi_worker(tmp_path, name, output_dir, extra=(), workers=2):
    """Worker arguments of a MultiWorkerMirrored run of `workers` processes: {name-i: args}."""
    ports = [free_port()]
    while len(ports) < workers:
        port = free_port()
        if port not in ports:
            ports.append(port)
    runs = {}
    for index in range(workers):
        tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                     "task": {"type": "worker", "index": index}}
        runs[f"{name}{index}"] = ["--strategy", "multi_worker_mirrored", "--output_dir",
                                  str(output_dir), "--tf_config", json.dumps(tf_config), *extra]
    return runs


def _wait_for(path, procs, timeout=300):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline or any(p.poll() is not None for p in procs.values()):
            for p in procs.values():
                p.kill()
            pytest.fail(f"{path} did not appear: " + "; ".join(
                f"{n}: {p.communicate()[0][-1500:]}" for n, p in procs.items()))
        time.sleep(0.05)


def _ended(proc, timeout=600):
    """(status, output) of a worker once it exits."""
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def _stopped_pair(procs, survivor, signalled, results=None):
    """{worker: (status, output)} of a pair one of whose workers was stopped at `signalled`
    (a time; `results`: the workers already ended), and how many seconds after it `survivor`
    exited. The other worker, frozen, is killed then."""
    results = dict(results or {})
    results[survivor] = _ended(procs[survivor])
    waited = time.time() - signalled
    print(f"\n{survivor} exited {waited:.1f} s after its peer stopped")
    for name, proc in procs.items():
        if name not in results:
            proc.kill()
            results[name] = _ended(proc)
    return results, waited


@pytest.fixture(scope="module")
def worker_pairs(generated_data, tmp_path_factory):
    """Pairs of worker processes under MultiWorkerMirroredStrategy, each reading its own input
    shard (12 steps, a checkpoint every 2), run once for the two tests below (13 processes):
    "k", whose chief SIGKILLs itself after its step-2 checkpoint; "f", whose worker 1 is frozen
    (SIGSTOP) once checkpoint 2 exists; "t", whose worker 1 gets SIGTERM (a preemption notice)
    then; and at once: "single" (one device, 2 input shards), "u" (an uninterrupted pair), and
    "rk" and "rt", the "k" and "t" pairs rerun with the same command."""
    tmp_path = tmp_path_factory.mktemp("pairs")
    data = ["--files", _pattern(generated_data), "--steps", "12", "--save_every", "2",
            "--batch", "12"]
    result = {"dir": tmp_path, "stops": {}, "args": {}}

    def start(name):
        runs = _multi_worker(tmp_path, name, tmp_path / name, data)
        if name == "k":
            runs["k0"] += ["--kill_at_step", "2"]
        result["args"].update(runs)
        return {n: _worker(args + ["--weights", str(tmp_path / f"{n}.npz")])
                for n, args in runs.items()}

    procs = start("k")  # the chief dies: SIGKILL, nothing cleaned up
    chief = _ended(procs["k0"])
    result["stops"]["k"] = _stopped_pair(procs, "k1", time.time(), {"k0": chief})
    # what the loss left, before the rerun writes on
    result["k_checkpoints"] = sorted(n for n in os.listdir(tmp_path / "k") if
                                     n.endswith(".index"))
    result["k_ckpt_2_variables"] = len(tf.train.load_checkpoint(
        str(tmp_path / "k" / "ckpt-2")).get_variable_to_shape_map())
    # A worker that stops answering without its connections closing (a host that froze or
    # dropped off the network; SIGSTOP here): the coordination service's heartbeats find it.
    procs = start("f")
    _wait_for(tmp_path / "f" / "ckpt-2.index", procs)
    procs["f1"].send_signal(signal.SIGSTOP)
    result["stops"]["f"] = _stopped_pair(procs, "f0", time.time())
    procs = start("t")
    _wait_for(tmp_path / "t" / "ckpt-2.index", procs)
    procs["t1"].send_signal(signal.SIGTERM)
    result["stops"]["t"] = ({name: _ended(proc) for name, proc in procs.items()}, None)
    runs = {"single": ["--strategy", "one_device", "--input_shards", "2", "--output_dir",
                       str(tmp_path / "single"), *data]}
    runs.update(_multi_worker(tmp_path, "u", tmp_path / "u", data))
    runs.update(_multi_worker(tmp_path, "rk", tmp_path / "k", data))
    runs.update(_multi_worker(tmp_path, "rt", tmp_path / "t", data))
    result["reruns"] = _run_workers(runs, tmp_path, timeout=900)
    return result


def _error_line(output):
    error = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, output[-3000:]
    return error[0]


@pytest.mark.slow
def test_a_lost_worker_stops_the_pair_and_a_preempted_one_saves_it(worker_pairs):
    """The chief SIGKILLed after its step-2 checkpoint: the other worker exits with status 1
    within 60 s (no hang in a collective) and one error line naming worker 0 (with its
    address) and the intact checkpoint it resumes from. Worker 1 frozen (SIGSTOP: no
    connection closes, the heartbeats stop): the chief exits the same way. SIGTERM to worker 1
    (a preemption notice): the pair saves a checkpoint and both exit with 42."""
    path = worker_pairs["dir"]
    (k, waited) = worker_pairs["stops"]["k"]
    assert k["k0"][0] == -signal.SIGKILL, k["k0"][1][-3000:]
    assert k["k1"][0] == 1 and waited < 60, k["k1"][1][-3000:]
    error = _error_line(k["k1"][1])
    args = worker_pairs["args"]["k0"]
    address = json.loads(args[args.index("--tf_config") + 1])["cluster"]["worker"][0]
    assert error.startswith("error: A worker of the cluster stopped answering during steps "
                            "3-4: worker 0 (" + address + ")"), error
    assert f"{path / 'k' / '.worker-1' / 'ckpt-2'}, is intact" in error, error
    assert worker_pairs["k_checkpoints"] == ["ckpt-2.index"]  # the chief's: none after step 2
    assert worker_pairs["k_ckpt_2_variables"] > 50  # and intact

    (f, waited) = worker_pairs["stops"]["f"]
    assert f["f0"][0] == 1 and waited < 60, f["f0"][1][-3000:]
    assert _error_line(f["f0"][1]).startswith(
        "error: A worker of the cluster stopped answering during steps "), f["f0"][1][-3000:]

    (t, _) = worker_pairs["stops"]["t"]
    for name, (code, out) in t.items():
        assert code == 42, out[-3000:]
        assert "Preemption notice (SIGTERM to a worker): the cluster saved" in out, out[-3000:]


@pytest.mark.slow
def test_multi_worker_pair_equals_one_device_and_resumes_exactly(worker_pairs):
    """The uninterrupted pair's final weights (both workers') equal a single-device run of the
    same global batches (2 input shards on one device) within 1e-5; the killed and the
    preempted pairs, rerun with the same command, resume from their checkpoints (the killed one
    at step 2: its first logged step is 4) and end exactly (0.0) where the uninterrupted pair
    does; each worker writes its own checkpoints."""
    path, outputs = worker_pairs["dir"], worker_pairs["reruns"]
    _assert_exits(outputs)
    for name, (_, out) in outputs.items():
        if name.startswith("rt"):
            assert "start=resumed" in out, out[-2000:]
        if name.startswith("rk"):
            assert "start=resumed first_logged_step=4 " in out, out[-2000:]
    u0, replicas = _weights(path / "u0.npz")
    single, single_replicas = _weights(path / "single.npz")
    assert (replicas, single_replicas) == (2, 1)
    diffs = {name: _max_diff(u0, _weights(path / f"{name}.npz")[0])
             for name in ("u1", "rk0", "rk1", "rt0", "rt1")}
    print(f"2 workers vs one device (same global batches), max |dw| after 12 steps: "
          f"{_max_diff(u0, single):.2e}; max |w - w_u0|: {diffs}")
    assert _max_diff(u0, single) <= 1e-5
    assert max(diffs.values()) == 0.0, diffs
    assert os.path.exists(path / "u" / "ckpt-12.index")          # the chief's
    assert os.path.exists(path / "u" / ".worker-1" / "ckpt-12.index")  # worker 1's


def test_lost_peer_names_the_worker_its_address_or_the_abort():
    """What the one-line error says of the lost worker, from each form of a collective's
    error: the task (with its TF_CONFIG address), an address alone, the abort another worker
    saw (a cluster of three or more: the worker that did not lose a neighbour), else the
    message's first line."""
    from albert_tf.training.controller import lost_peer

    spec = tf.train.ClusterSpec({"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]})
    assert lost_peer("UNAVAILABLE: Socket closed\nAdditional GRPC error information from "
                     "remote target /job:worker/replica:0/task:1 while calling "
                     "/tensorflow.WorkerService/RecvBuf", spec) == "worker 1 (10.0.0.2:2222)"
    assert lost_peer("from remote target /job:worker/replica:0/task:1 ...") == "worker 1"
    assert lost_peer("failed to connect to all addresses; last error: UNKNOWN: "
                     "ipv4:127.0.0.1:31856: Failed to connect") == "127.0.0.1:31856"
    assert lost_peer("Graph execution error:\n\nCollective ops is aborted by: Socket closed"
                     "\n") == "the step was aborted by another worker (Socket closed)"
    assert lost_peer("Graph execution error:\n\n  Deadline Exceeded\nmore") == (
        "Deadline Exceeded")
    assert lost_peer("") == "unknown"


def _cli(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-m", "albert_tf.run_pretraining", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def _checkpoint_arrays(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if "iterator" not in name and "save_counter" not in name
            and not name.startswith("_CHECKPOINTABLE")}


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(generated_data, tmp_path):
    config = tmp_path / "albert_config.json"
    AlbertConfig(**TINY).to_json_file(config)
    common = ["--albert_config_file", str(config), "--input_file", _pattern(generated_data),
              "--do_train", "--train_batch_size", "8", "--max_seq_length", "64",
              "--max_predictions_per_seq", "10", "--num_train_steps", "60",
              "--num_warmup_steps", "5", "--learning_rate", "5e-3",
              "--save_checkpoints_steps", "10", "--iterations_per_loop", "5",
              "--random_seed", "4", "--deterministic"]
    clean = _cli(common + ["--output_dir", str(tmp_path / "clean")])
    # One run directory stopped twice: SIGKILL once checkpoint 20 exists, then the rerun (which
    # resumes from it) SIGTERMed once it wrote a checkpoint, then a last rerun to the end.
    run = common + ["--output_dir", str(tmp_path / "stopped")]
    outputs, codes, wait_for = [], [], 20
    for sig in (signal.SIGKILL, signal.SIGTERM):
        proc = _cli(run, start_new_session=True)
        deadline = time.time() + 300
        while (time.time() < deadline
               and not os.path.exists(tmp_path / "stopped" / f"ckpt-{wait_for}.index")):
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        outputs.append(proc.communicate(timeout=300))
        codes.append(proc.returncode)
        assert not os.path.exists(tmp_path / "stopped" / "ckpt-60.index")
        # the SIGTERM waits for a checkpoint the rerun writes (past its start-up)
        wait_for = 10 + max(int(n[5:-6]) for n in os.listdir(tmp_path / "stopped")
                            if n.startswith("ckpt-") and n.endswith(".index"))
        assert wait_for < 60 or sig == signal.SIGTERM, "the SIGKILL came too late"
    # SIGTERM: a clean stop with a checkpoint at the next loop boundary, status 128 + 15.
    assert codes == [-signal.SIGKILL, 128 + signal.SIGTERM], outputs[-1][1][-3000:]
    assert "SIGTERM: checkpoint saved at step" in outputs[1][0]
    resumed = _cli(run)
    outputs.append(resumed.communicate(timeout=600))
    assert resumed.returncode == 0, outputs[-1][1][-3000:]
    assert [out.count("Resumed from") for out, _ in outputs] == [0, 1, 1]
    out, err = clean.communicate(timeout=600)
    assert clean.returncode == 0, err[-3000:]
    a = _checkpoint_arrays(str(tmp_path / "clean" / "ckpt-60"))
    b = _checkpoint_arrays(str(tmp_path / "stopped" / "ckpt-60"))
    assert a.keys() == b.keys() and len(a) > 50
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.slow
def test_eval_metrics_best_checkpoint_and_tensorboard(generated_data, tmp_path):
    cfg = _config(tmp_path, _pattern(generated_data), num_train_steps=6, save_checkpoints_steps=2,
                  do_eval=True, max_eval_steps=3, eval_batch_size=16)
    run = PretrainingRun(cfg)
    summary = run.run()
    results = {step: json.load(open(tmp_path / "run" / f"eval_results_step_{step}.json"))
               for step in (2, 4, 6)}
    for step, metrics in results.items():
        assert metrics["global_step"] == step and metrics["eval_steps"] == 3
        assert metrics["examples"] == 48 and 0 <= metrics["masked_lm_accuracy"] <= 1
    best = json.load(open(tmp_path / "run" / "best" / "best_eval.json"))
    assert best["masked_lm_accuracy"] == max(m["masked_lm_accuracy"] for m in results.values())
    assert summary["eval"]["masked_lm_accuracy"] == results[6]["masked_lm_accuracy"]
    # The best checkpoint holds the model of that step: restoring it reproduces its metrics.
    tf.train.Checkpoint(model=run.model).read(
        str(tmp_path / "run" / "best" / "ckpt-best")).assert_existing_objects_matched()
    again = run.evaluate()
    assert again["masked_lm_accuracy"] == pytest.approx(best["masked_lm_accuracy"], abs=1e-6)
    tags = set()
    for event_file in tf.io.gfile.glob(str(tmp_path / "run" / "train" / "events*")):
        for event in tf.compat.v1.train.summary_iterator(event_file):
            tags.update(v.tag for v in event.summary.value)
    assert {"loss", "masked_lm_loss", "masked_lm_accuracy", "sentence_order_loss",
            "sentence_order_accuracy", "learning_rate", "grad_norm",
            "examples_per_second"} <= tags


@pytest.mark.slow
def test_bfloat16_training(generated_data, tmp_path):
    losses_by_policy = {}
    for policy in ("float32", "bfloat16"):
        run = PretrainingRun(_config(tmp_path / policy, _pattern(generated_data),
                                     mixed_precision=policy, num_train_steps=2,
                                     iterations_per_loop=1, save_checkpoints_steps=2))
        losses_by_policy[policy] = [h["loss"] for h in run.run()["history"]]
        dense = run.model.backbone.encoder.attention_layers[0].query
        assert dense.compute_dtype == ("bfloat16" if policy == "bfloat16" else "float32")
        assert all(v.dtype == "float32" for v in run.model.weights)
    assert keras.mixed_precision.global_policy().name == "float32"  # no global side effect
    np.testing.assert_allclose(losses_by_policy["bfloat16"], losses_by_policy["float32"],
                               atol=0.05)
    assert losses_by_policy["bfloat16"] != losses_by_policy["float32"]


def test_float16_training_tracks_float32(generated_data, tmp_path):
    """--mixed_precision float16: float16 compute, float32 weights, the loss scaled by 2^15 and
    the gradients unscaled before clipping and LAMB; four steps track float32's losses (and
    differ from them: the compute really is float16), no step skipped."""
    losses = {}
    for policy in ("float32", "float16"):
        run = PretrainingRun(_config(tmp_path / policy, _pattern(generated_data),
                                     mixed_precision=policy, iterations_per_loop=1))
        history = run.run()["history"]
        losses[policy] = [h["loss"] for h in history]
        dense = run.model.backbone.encoder.attention_layers[0].query
        assert dense.compute_dtype == policy
        assert all(v.dtype == "float32" for v in run.model.weights)
    assert [h["loss_scale"] for h in history] == [2.0 ** 15] * 4
    assert [h["skipped_steps"] for h in history] == [0] * 4
    assert keras.mixed_precision.global_policy().name == "float32"  # no global side effect
    # Measured: at most 6.1e-5 apart over the four steps.
    np.testing.assert_allclose(losses["float16"], losses["float32"], atol=1e-3)
    assert losses["float16"] != losses["float32"]


def _with_nan_batch(generated_data, path, batch: int, batch_size: int = 8, count: int = 80):
    """The first `count` records of shard 0, batch `batch` (1-based, unshuffled) carrying a
    NaN masked_lm_weight."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(generated_data["files"][0]).take(count)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i, record in enumerate(records):
            example = tf.train.Example.FromString(record)
            if (batch - 1) * batch_size <= i < batch * batch_size:
                example.features.feature["masked_lm_weights"].float_list.value[0] = float("nan")
            writer.write(example.SerializeToString())
    return str(path)


@pytest.mark.slow
def test_float16_overflow_skips_one_step_halves_the_scale_and_resumes(generated_data,
                                                                      tmp_path):
    """A non-finite step in float16 (batch 3 carries a NaN) is an overflow of the loss scale:
    that step alone is skipped (weights and LAMB slots after step 3 equal those after step 2),
    the scale halves to 2^14, the skip is counted and the run goes on (the non-finite stop does
    not fire). A rerun resumes from step 4 with the halved scale and the count."""
    data = _with_nan_batch(generated_data, tmp_path / "nan.tfrecord", batch=3)
    cfg = _config(tmp_path, data, mixed_precision="float16", num_train_steps=6,
                  iterations_per_loop=1, save_checkpoints_steps=1, shuffle_window=1,
                  keep_checkpoint_max=10)
    history = PretrainingRun(cfg).run()["history"]
    assert [h["skipped_steps"] for h in history] == [0, 0, 1, 1, 1, 1]
    assert [h["loss_scale"] for h in history] == [2.0 ** 15] * 2 + [2.0 ** 14] * 4
    run_dir = tmp_path / "run"
    step = {n: _checkpoint_arrays(str(run_dir / f"ckpt-{n}")) for n in (2, 3, 4, 6)}
    same = [k for k in step[2] if k.startswith(("model/", "optimizer/_variables"))]
    assert len(same) > 50
    for k in same:  # the skipped step changed no weight and no LAMB slot
        np.testing.assert_array_equal(step[3][k], step[2][k], err_msg=k)
    assert any(not np.array_equal(step[3][k], step[4][k]) for k in same)  # step 4 trains
    assert int(step[3]["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 3
    assert float(step[4]["loss_scale/scale/.ATTRIBUTES/VARIABLE_VALUE"]) == 2.0 ** 14
    assert int(step[4]["loss_scale/skipped_steps/.ATTRIBUTES/VARIABLE_VALUE"]) == 1
    assert float(step[4]["optimizer/update_gate/.ATTRIBUTES/VARIABLE_VALUE"]) == 1.0
    # Resume from step 4 (the later checkpoints removed): the scale and the count come back
    # and steps 5-6 give the uninterrupted run's weights.
    for path in run_dir.glob("ckpt-[56].*"):
        path.unlink()
    tf.compat.v1.train.update_checkpoint_state(str(run_dir), str(run_dir / "ckpt-4"))
    resumed = PretrainingRun(cfg).run()["history"]
    assert [(h["step"], h["loss_scale"], h["skipped_steps"]) for h in resumed] == [
        (5, 2.0 ** 14, 1), (6, 2.0 ** 14, 1)]
    again = _checkpoint_arrays(str(run_dir / "ckpt-6"))
    for k, value in step[6].items():
        np.testing.assert_allclose(again[k], value, atol=1e-6, err_msg=k)


@pytest.mark.slow
def test_xla_step_matches_uncompiled(generated_data, tmp_path):
    """The TPU proxy: the whole step (forward, loss, gradients, LAMB update) compiles with XLA
    on CPU with static shapes, and gives the same losses and weights within float32 rounding.
    The uncompiled run computes on real tokens only (remove_padding, the default), which XLA
    turns off; a third run without it gives the same again, and a fourth that recomputes each
    layer's activations in the backward pass (`recompute`)."""
    results = {}
    for name, jit, remove_padding, recompute in (
            ("real", False, True, False), ("xla", True, True, False),
            ("padded", False, False, False), ("recompute", False, True, True)):
        keras.utils.set_random_seed(5)
        run = PretrainingRun(_config(tmp_path / name, _pattern(generated_data),
                                     jit_compile=jit, num_train_steps=3, iterations_per_loop=1,
                                     save_checkpoints_steps=3, remove_padding=remove_padding,
                                     recompute=recompute))
        assert run.model.backbone.encoder.remove_padding is (name in ("real", "recompute"))
        assert run.model.backbone.encoder.recompute is recompute
        summary = run.run()
        results[name] = ([h["loss"] for h in summary["history"]],
                         [v.numpy() for v in run.model.weights])
    for other in ("xla", "padded", "recompute"):
        np.testing.assert_allclose(results[other][0], results["real"][0], rtol=1e-5)
        for a, b in zip(results[other][1], results["real"][1]):
            np.testing.assert_allclose(a, b, atol=2e-5)


@pytest.mark.slow
def test_non_finite_loss_stops_with_the_step_and_a_good_checkpoint(generated_data, tmp_path):
    """Batch 4 of the input carries a NaN weight: the run stops naming step 4 and saves the
    model after step 3, whose weights equal a clean 3-step run."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(generated_data["files"][0]).take(80)]
    clean_file, bad = tmp_path / "clean.tfrecord", tmp_path / "bad.tfrecord"
    with tf.io.TFRecordWriter(str(bad)) as writer, \
            tf.io.TFRecordWriter(str(clean_file)) as clean_writer:
        for i, record in enumerate(records):
            clean_writer.write(record)
            example = tf.train.Example.FromString(record)
            if 24 <= i < 32:  # batch 4 with batch size 8 and no shuffling
                example.features.feature["masked_lm_weights"].float_list.value[0] = float("nan")
            writer.write(example.SerializeToString())
    cfg = _config(tmp_path, str(bad), num_train_steps=8, iterations_per_loop=8,
                  save_checkpoints_steps=8, shuffle_window=1)
    with pytest.raises(NonFiniteLossError, match=r"at step 4 .* The model after step 3 is saved "
                                                 r"at .*ckpt-3"):
        PretrainingRun(cfg).run()
    saved = _checkpoint_arrays(str(tmp_path / "run" / "ckpt-3"))
    assert int(saved["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 3
    assert float(saved["optimizer/update_gate/.ATTRIBUTES/VARIABLE_VALUE"]) == 1.0
    assert all(np.isfinite(v).all() for v in saved.values() if v.dtype.kind == "f")
    # The saved state (weights, slots, step) is that of the same run on clean data at step 3.
    PretrainingRun(_config(tmp_path / "clean", str(clean_file), num_train_steps=8,
                           iterations_per_loop=3, save_checkpoints_steps=3,
                           shuffle_window=1)).run()
    reference = _checkpoint_arrays(str(tmp_path / "clean" / "run" / "ckpt-3"))
    assert reference.keys() == saved.keys() and len(saved) > 50
    for name, value in reference.items():
        np.testing.assert_allclose(saved[name], value, atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_refuses_mismatched_data_and_output_dir(generated_data, tmp_path):
    with pytest.raises(DataMismatchError, match=r"max_seq_length=64, max_predictions_per_seq=10; "
                                                r"the model expects max_seq_length=32"):
        PretrainingRun(_config(tmp_path, _pattern(generated_data), max_seq_length=32))
    PretrainingRun(_config(tmp_path, _pattern(generated_data), num_train_steps=2,
                           save_checkpoints_steps=2)).run()
    # Resuming with input that would read other batches is refused, naming what changed.
    with pytest.raises(DataMismatchError, match=r"holds a run whose training input differs from "
                                                r"this command's \(seed 11 -> 12\)"):
        PretrainingRun(_config(tmp_path, _pattern(generated_data), seed=12,
                               num_train_steps=2, save_checkpoints_steps=2))
    with pytest.raises(DataMismatchError, match=r"\(files \(name, records\) no longer there: "
                                                r"\[\('wiki-00001-of-00003.tfrecord'"):
        PretrainingRun(_config(tmp_path, generated_data["files"][0] + ","
                               + generated_data["files"][2], num_train_steps=2,
                               save_checkpoints_steps=2))
    other = dict(TINY, intermediate_size=44)
    with pytest.raises(OutputDirMismatchError, match=r"holds checkpoints of another model "
                                                     r"configuration .*'intermediate_size': "
                                                     r"\(40, 44\)"):
        PretrainingRun(_config(tmp_path, _pattern(generated_data),
                               albert_config=AlbertConfig(**other)))
    with pytest.raises(ValueError, match=r"--train_batch_size=10 must be a multiple of "
                                         r"--grad_accum_steps=4"):
        _config(tmp_path, _pattern(generated_data), train_batch_size=10, grad_accum_steps=4)


def test_chief_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """albert_config.json and the input plan are read by the other workers while the chief
    starts (a restarted pair once read an empty config): an unchanged file is not rewritten,
    a changed one replaces the old in one rename, and a write that fails keeps the old one."""
    from albert_tf.training.train_lib import write_text_atomically

    path = str(tmp_path / "albert_config.json")
    write_text_atomically(path, '{"a": 1}')
    before = os.stat(path)
    write_text_atomically(path, '{"a": 1}')
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    write_text_atomically(path, '{"a": 2}')
    assert open(path).read() == '{"a": 2}' and os.listdir(tmp_path) == ["albert_config.json"]

    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)  # the data does not reach the disk
    with pytest.raises(OSError, match="disk full"):
        write_text_atomically(path, '{"a": 3}')
    assert open(path).read() == '{"a": 2}' and os.listdir(tmp_path) == ["albert_config.json"]


def test_strategy_factory_fails_fast():
    start = time.time()
    with pytest.raises(StrategyError, match=r"--distribution_strategy=tpu found no TPU"):
        get_strategy("tpu", tpu=None, connect_timeout_s=10)
    with pytest.raises(StrategyError, match=r"Cannot reach the TPU worker at 127.0.0.1:\d+"):
        get_strategy("tpu", tpu=f"grpc://127.0.0.1:{free_port()}", connect_timeout_s=5)
    assert time.time() - start < 30
    with pytest.raises(ValueError, match="Unknown --distribution_strategy 'gpu'"):
        get_strategy("gpu")
    assert get_strategy("default").num_replicas_in_sync == 1


@pytest.mark.parametrize("tf_config,message", [
    ("{not json", "TF_CONFIG is not valid JSON"),
    ('{"cluster": {"worker": ["a:1"]}}', 'must hold "cluster" and "task"'),
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}',
     r"task index 2 is not an index of its 2 worker address\(es\) \(0 to 1\)"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}',
     "task index -1"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}',
     "task index '0'"),
    ('{"cluster": {"worker": ["a:1"], "ps": ["p:3"]}, "task": {"type": "worker", "index": 0}}',
     "cluster has 'ps' tasks; multi_worker_mirrored runs chief and worker tasks only"),
    ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}',
     r"lists a:1 twice \(worker\[0\] and worker\[1\]\)"),
    ('{"cluster": {"chief": ["a:1"], "worker": ["a:1"]}, "task": {"type": "chief"}}',
     r"lists a:1 twice \(chief\[0\] and worker\[0\]\)"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}',
     r"task type 'evaluator' is not one of the cluster's \(worker\)"),
    ('{"cluster": {"worker": "a:1,b:2"}, "task": {"type": "worker", "index": 0}}',
     r"cluster\['worker'\] must be a list of \"host:port\" strings"),
    ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}',
     "must be a list of"),
])
def test_malformed_tf_config_is_named_before_any_strategy(monkeypatch, tf_config, message):
    """Bad cluster input for multi_worker_mirrored: a StrategyError naming what is wrong,
    raised before a strategy (or anything else) is built."""
    from albert_tf.training.distribute import tf_config_worker

    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(StrategyError, match=message):
        get_strategy("multi_worker_mirrored")
    with pytest.raises(StrategyError, match=message):
        tf_config_worker()


@pytest.mark.slow
def test_tpu_address_that_never_answers_is_bounded(generated_data, tmp_path):
    """Something listens but never speaks gRPC: a plain connect would hang forever."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    config = tmp_path / "c.json"
    AlbertConfig(**TINY).to_json_file(config)
    start = time.time()
    proc = _cli(["--albert_config_file", str(config), "--input_file", _pattern(generated_data),
                 "--output_dir", str(tmp_path / "o"), "--do_train", "--use_tpu", "--tpu_name",
                 f"grpc://127.0.0.1:{server.getsockname()[1]}", "--tpu_connect_timeout", "5"])
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        server.close()
    assert proc.returncode == 1
    assert "error: --distribution_strategy=tpu" in err and "did not finish within 5 s" in err
    assert time.time() - start < 100


OFFICIAL_RUN_PRETRAINING_FLAGS = (  # google-research/albert run_pretraining.py, with defaults
    ("albert_config_file", None), ("input_file", None), ("output_dir", None),
    ("init_checkpoint", None), ("max_seq_length", 512), ("max_predictions_per_seq", 20),
    ("do_train", True), ("do_eval", False), ("train_batch_size", 4096), ("eval_batch_size", 64),
    ("optimizer", "lamb"), ("learning_rate", 0.00176), ("poly_power", 1.0),
    ("num_train_steps", 125000), ("num_warmup_steps", 3125), ("start_warmup_step", 0),
    ("save_checkpoints_steps", 5000), ("keep_checkpoint_max", 5),
    ("iterations_per_loop", 1000), ("max_eval_steps", 100), ("use_tpu", False),
    ("init_from_group0", False), ("tpu_name", None), ("tpu_zone", None), ("gcp_project", None),
    ("master", None), ("num_tpu_cores", 8), ("masked_lm_budget", 0))


def test_every_official_flag_with_its_official_default(generated_data, tmp_path):
    from absl import flags

    from albert_tf import run_pretraining

    run_pretraining.define_flags()
    parsed = flags.FlagValues()
    for name, flag in flags.FLAGS._flags().items():
        if name in dict(OFFICIAL_RUN_PRETRAINING_FLAGS) or name == "random_seed":
            parsed[name] = flag
    parsed(["run_pretraining"])
    for name, default in OFFICIAL_RUN_PRETRAINING_FLAGS:
        assert getattr(parsed, name) == default, name
    assert parsed.random_seed == 12345  # the official data script's seed: reproducible
    with pytest.raises(ValueError, match=r"--masked_lm_budget=0.2: online masking .* is not "
                                         r"supported; generate masked examples offline"):
        _config(tmp_path, _pattern(generated_data), masked_lm_budget=0.2)


@pytest.mark.slow
def test_the_same_command_gives_the_same_model_by_default(generated_data, tmp_path):
    """No seed given: two runs end with identical weights (fixed default seed); a run with
    seed=None (fresh draw) differs, so the default is what makes them equal."""
    weights = []
    for name, seed in (("a", 12345), ("b", "default"), ("fresh", None)):
        values = dict(albert_config=AlbertConfig(**TINY), input_file=_pattern(generated_data),
                      output_dir=str(tmp_path / name), max_seq_length=64,
                      max_predictions_per_seq=10, train_batch_size=8, num_train_steps=3,
                      num_warmup_steps=1, learning_rate=1e-2, save_checkpoints_steps=3,
                      iterations_per_loop=3, shuffle_window=64, verbose=False)
        if seed != "default":
            values["seed"] = seed
        keras.utils.set_random_seed(len(name))  # global state differs between the runs
        run = PretrainingRun(PretrainingConfig(**values))
        run.run()
        weights.append([v.numpy() for v in run.model.weights])
    for a, b in zip(weights[0], weights[1]):
        np.testing.assert_array_equal(a, b)
    assert max(float(np.abs(a - c).max()) for a, c in zip(weights[0], weights[2])) > 1e-3


@pytest.mark.slow
def test_non_finite_checkpoint_holds_the_input_position_of_its_step(generated_data, tmp_path):
    """The checkpoint saved at a non-finite step resumes with the batch of that step: model,
    optimizer and the input position (a function of the step) agree (nothing skipped)."""
    records = [r.numpy() for r in tf.data.TFRecordDataset(generated_data["files"][0]).take(80)]
    bad = tmp_path / "bad.tfrecord"
    with tf.io.TFRecordWriter(str(bad)) as writer:
        for i, record in enumerate(records):
            example = tf.train.Example.FromString(record)
            if 40 <= i < 48:  # batch 6 (batch size 8, no shuffling)
                example.features.feature["masked_lm_weights"].float_list.value[0] = float("nan")
            writer.write(example.SerializeToString())
    cfg = _config(tmp_path, str(bad), num_train_steps=10, iterations_per_loop=10,
                  save_checkpoints_steps=10, shuffle_window=1)
    with pytest.raises(NonFiniteLossError, match=r"at step 6 .*after step 5 is saved .*ckpt-5"):
        PretrainingRun(cfg).run()
    saved = _checkpoint_arrays(str(tmp_path / "run" / "ckpt-5"))
    assert int(saved["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"]) == 5
    resumed = PretrainingRun(cfg)
    assert resumed._restore_or_initialize() == "resumed"
    batch = next(resumed.controller.train_iterator)  # the next batch is the one of step 6
    assert np.isnan(batch["masked_lm_weights"].numpy()[0, 0])
    expected = tf.train.Example.FromString(records[40]).features.feature["input_ids"]
    np.testing.assert_array_equal(batch["input_ids"].numpy()[0], expected.int64_list.value)


@pytest.mark.slow
def test_resume_with_dropout_draws_the_masks_of_the_uninterrupted_run(generated_data, tmp_path):
    """Dropout's random state (each dropout layer's seed generator) is in the checkpoint: a run
    resumed from its step-2 checkpoint draws the dropout masks the uninterrupted run drew, so
    after 4 steps its weights equal that run's exactly (they did not: the masks of steps 3-4
    were drawn again from the start); the masks do change the weights."""
    dropout = AlbertConfig(**dict(TINY, hidden_dropout_prob=0.2,
                                  attention_probs_dropout_prob=0.2))
    weights = {}
    for name, config in (("dropout", dropout), ("no_dropout", AlbertConfig(**TINY))):
        cfg = _config(tmp_path / name, _pattern(generated_data), albert_config=config,
                      save_checkpoints_steps=2)
        run = PretrainingRun(cfg)
        run.run()
        weights[name] = [v.numpy() for v in run.model.trainable_weights]
    # the dropout run stopped after step 2: its later checkpoint gone, the state file naming 2
    run_dir = tmp_path / "dropout" / "run"
    for path in run_dir.glob("ckpt-4.*"):
        path.unlink()
    tf.compat.v1.train.update_checkpoint_state(str(run_dir), str(run_dir / "ckpt-2"))
    cfg = _config(tmp_path / "dropout", _pattern(generated_data), albert_config=dropout,
                  save_checkpoints_steps=2)
    resumed = PretrainingRun(cfg)
    assert resumed.run()["start"] == "resumed"
    for a, b in zip(weights["dropout"], [v.numpy() for v in resumed.model.trainable_weights]):
        np.testing.assert_array_equal(a, b)
    assert max(float(np.abs(a - b).max())
               for a, b in zip(weights["dropout"], weights["no_dropout"])) > 1e-4
    assert has_dropout_state(str(run_dir / "ckpt-2"))
    # A checkpoint of an earlier version (no dropout state): resumed with a note.
    for path in run_dir.glob("ckpt-*"):
        path.unlink()
    legacy = tf.train.CheckpointManager(resumed.trainer.checkpoint_without_dropout_state,
                                        str(run_dir), max_to_keep=None).save(checkpoint_number=4)
    assert not has_dropout_state(legacy)
    logged = []
    again = PretrainingRun(cfg)
    again._log = logged.append
    assert again._restore_or_initialize() == "resumed" and again.trainer.step == 4
    assert logged[0].startswith(f"Note: {run_dir / 'ckpt-4'} was written by an earlier version "
                                "without dropout's random state")


@pytest.mark.slow
def test_corrupt_input_mid_run_names_the_file_and_saves_a_consistent_step(generated_data,
                                                                          tmp_path):
    """A generated shard (60 records, its sidecar says) truncated inside record 41 after the run
    planned its input (a copy interrupted mid-write): training stops with an error naming the
    file and the step whose checkpoint it saved; that checkpoint is consistent: resumed with the
    file restored, the next batch is the one that step's position reads. (TensorFlow's reader
    can return a truncated tail as end-of-file; the planned record count turns that into the
    same error instead of a silent shift of every later batch.)"""
    source = generated_data["files"][0]
    records = [r.numpy() for r in tf.data.TFRecordDataset(source).take(60)]
    full = tmp_path / "shard.tfrecord"
    with tf.io.TFRecordWriter(str(full)) as writer:
        for record in records:
            writer.write(record)
    data = full.read_bytes()
    cut = sum(len(r) + 16 for r in records[:40]) + 100  # 16 bytes of framing per record
    corrupt = tmp_path / "in" / "shard.tfrecord"
    corrupt.parent.mkdir()
    corrupt.write_bytes(data[:cut])
    sidecar = json.load(open(source + ".json"))
    sidecar.update(file=corrupt.name, num_examples=60)
    json.dump(sidecar, open(str(corrupt) + ".json", "w"))
    cfg = _config(tmp_path, str(corrupt), num_train_steps=12, iterations_per_loop=12,
                  save_checkpoints_steps=12, shuffle_window=1)
    with pytest.raises(CorruptInputError) as info:
        PretrainingRun(cfg).run()
    message = str(info.value)
    assert "Training input is corrupt: " + str(corrupt) + ": " in message
    assert "truncated record" in message and "rerun the same command to resume" in message
    assert "{{" not in message and "[Op:" not in message
    import re

    step = int(re.search(r"The model after step (\d+) is saved at \S*ckpt-\1 ", message)[1])
    # The user restores the file and reruns: training resumes at that step, reading on from
    # exactly the record that step had reached (no batch skipped or repeated).
    corrupt.write_bytes(data)
    resumed = PretrainingRun(cfg)
    assert resumed._restore_or_initialize() == "resumed"
    assert int(resumed.optimizer.iterations.numpy()) == step
    batch = next(resumed.controller.train_iterator)
    expected = tf.train.Example.FromString(records[(8 * step) % 60]).features.feature["input_ids"]
    np.testing.assert_array_equal(batch["input_ids"].numpy()[0], expected.int64_list.value)


@pytest.mark.slow
def test_evaluation_takes_the_prediction_count_of_its_own_records(generated_data, tmp_path,
                                                                  sample_vocab,
                                                                  prepared_corpus):
    """A run trained on records of 10 predictions evaluates held-out records made with 4 (a
    model trained at 40% masking scored on 15%): the metrics equal the model's own predictions
    on those records, counted here by hand; another sequence length, and evaluation files of
    different prediction counts together, are refused."""
    from albert_tf import features as F
    from albert_tf.input_pipeline import ordered_dataset
    from albert_tf.data.generator import generate, make_job

    job = make_job(prepared_corpus["wiki"], str(tmp_path / "heldout"), sample_vocab,
                   num_output_shards=1, max_seq_length=64, max_predictions_per_seq=4,
                   dupe_factor=1, random_seed=5, tokens_per_unit=40_000)
    generate(job, num_workers=1, progress=False)
    heldout = job.output_files[0]
    cfg = _config(tmp_path, _pattern(generated_data), eval_input_file=heldout, do_eval=True,
                  eval_batch_size=16, max_eval_steps=5)
    run = PretrainingRun(cfg)
    metrics = run.run()["eval"]
    correct = weight = 0.0
    batches = ordered_dataset([heldout], 16, F.pretraining_schema(64, 4), num_batches=5)
    for batch in batches:
        assert batch[F.MASKED_LM_POSITIONS].shape == (16, 4)
        logits = run.model({k: batch[k] for k in F.PRETRAINER_INPUTS}, training=False)["mlm_logits"]
        predicted = np.argmax(np.reshape(logits.numpy(), (16, 4, -1)), -1)
        w = batch[F.MASKED_LM_WEIGHTS].numpy()
        correct += float(((predicted == batch[F.MASKED_LM_IDS].numpy()) * w).sum())
        weight += float(w.sum())
    assert metrics["examples"] == 80 and weight > 200
    assert metrics["masked_lm_accuracy"] == pytest.approx(correct / (weight + 1e-5), abs=1e-6)
    # Another sequence length is still refused (the trained model evaluated alone), and so is a
    # mix of prediction counts.
    with pytest.raises(DataMismatchError, match="max_seq_length=64"):
        PretrainingRun(_config(tmp_path / "short", _pattern(generated_data), max_seq_length=32,
                               eval_input_file=heldout, do_eval=True, do_train=False,
                               init_checkpoint=cfg.output_dir)).run()
    with pytest.raises(DataMismatchError, match="different max_predictions_per_seq"):
        run.task.eval_schema([heldout, generated_data["files"][0]])


def test_training_config_from_settings_reads_the_typed_settings_and_the_official_aliases():
    """`TrainingConfig.from_settings` of a command's typed settings
    (`albert_tf.configs.definitions.settings`): each field from its section, the fine-tuning
    runners' official aliases (--train_step, --warmup_step, --num_keep_checkpoint) carried to
    the loop's names, random_seed -1 as a fresh seed, computed overrides winning, a setting the
    command lacks at its definition's default."""
    from albert_tf.configs import definitions

    values = {"train_step": 9, "warmup_step": 2, "num_keep_checkpoint": 3, "random_seed": -1,
              "iterations_per_loop": 10, "learning_rate": 0.25, "output_dir": "out",
              "mixed_precision": "bfloat16", "do_train": True, "task_name": "sst-2"}
    settings = definitions.settings(values)
    assert settings.trainer.schedule.num_train_steps == 9 and settings.task.task_name == "sst-2"
    cfg = TrainingConfig.from_settings(settings, AlbertConfig(**TINY), input_file="a.tfrecord",
                                       iterations_per_loop=4, max_seq_length=64)
    assert (cfg.num_train_steps, cfg.num_warmup_steps, cfg.keep_checkpoint_max) == (9, 2, 3)
    assert cfg.seed is None and cfg.learning_rate == 0.25 and cfg.output_dir == "out"
    assert cfg.iterations_per_loop == 4 and cfg.input_file == "a.tfrecord"
    assert cfg.mixed_precision == "bfloat16"
    assert cfg.train_batch_size == 32 and cfg.optimizer == "adamw"  # the definitions' defaults
    values["random_seed"] = 5
    assert TrainingConfig.from_settings(definitions.settings(values), AlbertConfig(**TINY),
                                        input_file="a", max_seq_length=64).seed == 5


def test_performance_switches_reach_the_model_through_its_constructor(generated_data, tmp_path):
    """--remove_padding, --recompute and --use_einsum are constructor arguments of the model the
    loop builds (`albert_tf.models.backbone.Performance`), never set on it afterwards; XLA keeps the
    padded computation, and so does a head that reads the padding (SQuAD's span head)."""
    from albert_tf.models.backbone import Performance
    from albert_tf.models.task_models import AlbertSpanModel

    files = _pattern(generated_data)

    def switches(run):
        encoder = run.model.backbone.encoder
        return (encoder.remove_padding, encoder.recompute,
                {layer.use_einsum for layer in encoder.attention_layers})

    run = PretrainingRun(_config(tmp_path, files, recompute=True, use_einsum=True))
    assert switches(run) == (True, True, {True})
    del run
    run = PretrainingRun(_config(tmp_path, files, remove_padding=False))
    assert switches(run) == (False, False, {False})
    del run
    run = PretrainingRun(_config(tmp_path, files, jit_compile=True))
    assert switches(run)[0] is False
    del run
    span = AlbertSpanModel(AlbertConfig(**TINY), performance=Performance(remove_padding=True,
                                                                          recompute=True))
    assert (span.backbone.encoder.remove_padding, span.backbone.encoder.recompute) == (False,
                                                                                      True)


@pytest.mark.parametrize("settings", [
    pytest.param({}, id="float32"),
    pytest.param({"mixed_precision": "float16"}, id="float16", marks=pytest.mark.slow),
    pytest.param({"jit_compile": True}, id="xla", marks=pytest.mark.slow)])
def test_one_replica_computes_each_lamb_update_once(generated_data, tmp_path, monkeypatch,
                                                    settings):
    """One replica: the finiteness gate's new values (m, v and w of every weight) are the ones
    the update applies, computed once per step, not twice; losses and weights are exactly
    those of a run that computes them again in the update (the multi-replica path). Also with
    float16's loss scale between the gate and the update, and with the step compiled by
    XLA."""
    calls, results = {}, {}
    original = AlbertOptimizer._new_values

    def counted(self, gradient, variable, learning_rate):
        calls[name] = calls.get(name, 0) + 1
        return original(self, gradient, variable, learning_rate)

    monkeypatch.setattr(AlbertOptimizer, "_new_values", counted)
    for name in ("once", "twice"):
        if name == "twice":
            monkeypatch.setattr(AlbertOptimizer, "_take_computed", lambda self, g, v: None)
        run = PretrainingRun(_config(tmp_path / name, _pattern(generated_data),
                                     num_train_steps=3, iterations_per_loop=1,
                                     save_checkpoints_steps=3, **settings))
        history = run.run()["history"]
        results[name] = ([h["loss"] for h in history], [v.numpy() for v in run.model.weights])
        variables = len(run.model.trainable_variables)
    assert calls == {"once": variables, "twice": 2 * variables}  # one trace of the step
    assert results["once"][0] == results["twice"][0]
    assert len(set(results["once"][0])) == 3  # three steps, each applied
    for a, b in zip(results["once"][1], results["twice"][1]):
        np.testing.assert_array_equal(a, b)
