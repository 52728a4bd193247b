"""One factory from a name to a `tf.distribute.Strategy`.

TPU rules: static shapes, `drop_remainder` and int32 features are the input pipeline's
(`albert_tf.input_pipeline`); several steps per host call (`iterations_per_loop`) and bfloat16
are the training loop's (`albert_tf.training.train_lib`).

    strategy = get_strategy("tpu", tpu="grpc://10.0.0.2:8470")
    strategy = get_strategy("multi_worker_mirrored")   # reads TF_CONFIG

Names: tpu, multi_worker_mirrored, mirrored, one_device, default. Anything else raises.
Connecting to a TPU address where nothing listens hangs forever in TensorFlow; here every step
of the TPU connection is bounded by `connect_timeout_s` and fails with a message that says what
to check.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from urllib.parse import urlparse

import tensorflow as tf

from albert_tf.configs.definitions import SETTINGS

STRATEGIES = SETTINGS["distribution_strategy"].choices


class StrategyError(RuntimeError):
    """A strategy could not be created; the message names the flag or environment to fix."""


def _bounded(fn, timeout_s: float, what: str):
    """Runs `fn` in a daemon thread; raises StrategyError if it does not finish in time (a hung
    TensorFlow connect cannot be cancelled, but the process can still report and exit)."""
    result, error = [], []

    def target():
        try:
            result.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            error.append(e)

    thread = threading.Thread(target=target, daemon=True, name=what)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise StrategyError(f"{what} did not finish within {timeout_s:.0f} s.")
    if error:
        raise error[0]
    return result[0] if result else None


def _probe(address: str, timeout_s: float) -> None:
    """TCP connect to host:port (or grpc://host:port) within `timeout_s`."""
    parsed = urlparse(address if "://" in address else "grpc://" + address)
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise StrategyError(f"TPU address {address!r} is not host:port or grpc://host:port.")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise StrategyError(
            f"Cannot reach the TPU worker at {host}:{port} within {timeout_s:.0f} s ({e}). "
            "Check --tpu (TPU name, grpc://host:port, or 'local' on a TPU VM), that the TPU is "
            "running, and that this machine is in its network.") from None


def tpu_strategy(tpu: str | None, connect_timeout_s: float = 60.0, zone: str | None = None,
                 project: str | None = None) -> tf.distribute.Strategy:
    """Resolves (`TPUClusterResolver(tpu, zone, project)`), connects to and initializes a TPU
    system, each step bounded in time."""
    try:
        resolver = _bounded(lambda: tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=zone, project=project), connect_timeout_s, "Resolving the TPU")
    except (ValueError, StrategyError, RuntimeError) as e:
        raise StrategyError(
            f"--distribution_strategy=tpu found no TPU (--tpu={tpu!r}): {e} Pass --tpu with a "
            "TPU name, grpc://host:port, or 'local' on a TPU VM.") from None
    if tpu != "local":
        for address in resolver.cluster_spec().as_dict().get("worker", []) or [resolver.master()]:
            _probe(address, connect_timeout_s)
    try:
        _bounded(lambda: tf.config.experimental_connect_to_cluster(resolver), connect_timeout_s,
                 "Connecting to the TPU cluster")
        _bounded(lambda: tf.tpu.experimental.initialize_tpu_system(resolver), connect_timeout_s,
                 "Initializing the TPU system")
    except (StrategyError, tf.errors.OpError, ValueError, RuntimeError) as e:
        raise StrategyError(f"--distribution_strategy=tpu (--tpu={tpu!r}): {e}") from None
    return tf.distribute.TPUStrategy(resolver)


_TF_CONFIG_EXAMPLE = ('e.g. {"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": '
                      '{"type": "worker", "index": 0}}')
# MultiWorkerMirroredStrategy's task types; "ps" and "evaluator" jobs are not run by it.
_TASK_TYPES = ("chief", "worker")


def _check_tf_config() -> None:
    """TF_CONFIG, when set, describes a cluster this program runs as one of: JSON with
    "cluster" (task type -> list of "host:port") and "task" (type and index); only chief and
    worker tasks; the task's index inside its list; no address listed twice. Each problem is a
    StrategyError naming it."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise StrategyError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(config, dict) or "cluster" not in config or "task" not in config:
        raise StrategyError(f'TF_CONFIG must hold "cluster" and "task", {_TF_CONFIG_EXAMPLE}')
    cluster, task = config["cluster"], config["task"]
    if not isinstance(cluster, dict) or not cluster:
        raise StrategyError(f"TF_CONFIG's cluster must map task types to address lists, "
                            f"{_TF_CONFIG_EXAMPLE}")
    seen = {}
    for kind, addresses in cluster.items():
        if kind not in _TASK_TYPES:
            raise StrategyError(f"TF_CONFIG's cluster has {kind!r} tasks; "
                                f"multi_worker_mirrored runs {' and '.join(_TASK_TYPES)} "
                                "tasks only (no parameter servers or evaluators).")
        if not isinstance(addresses, list) or not all(
                isinstance(a, str) and re.fullmatch(r"[^\s:]+:\d+", a) for a in addresses):
            raise StrategyError(f"TF_CONFIG's cluster[{kind!r}] must be a list of "
                                f'"host:port" strings. Received: {addresses!r}')
        for i, address in enumerate(addresses):
            if address in seen:
                raise StrategyError(f"TF_CONFIG lists {address} twice ({seen[address]} and "
                                    f"{kind}[{i}]): each task needs its own host:port.")
            seen[address] = f"{kind}[{i}]"
    kind = task.get("type") if isinstance(task, dict) else None
    if kind not in cluster:
        raise StrategyError(f"TF_CONFIG's task type {kind!r} is not one of the cluster's "
                            f"({', '.join(cluster)}).")
    index, members = task.get("index", 0), cluster[task["type"]]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(members):
        raise StrategyError(f"TF_CONFIG's task index {index!r} is not an index of its "
                            f"{len(members)} {task['type']} address(es) (0 to "
                            f"{len(members) - 1}).")


def get_strategy(name: str, tpu: str | None = None, connect_timeout_s: float = 60.0,
                 collective_timeout_s: float | None = None, zone: str | None = None,
                 project: str | None = None) -> tf.distribute.Strategy:
    """The strategy for `--distribution_strategy`.

    Args:
        name: one of `STRATEGIES`.
        tpu: TPU name, grpc://host:port, or "local" (tpu only).
        connect_timeout_s: bound on each step of the TPU connection.
        collective_timeout_s: bound on collective ops of multi_worker_mirrored (None: none).
        zone, project: the Cloud TPU's GCE zone and GCP project (tpu only; None: from the
            VM's metadata), the official --tpu_zone and --gcp_project.
    """
    if name == "tpu":
        return tpu_strategy(tpu, connect_timeout_s, zone=zone, project=project)
    if name == "multi_worker_mirrored":
        _check_tf_config()
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout_s)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    if name == "default":
        return tf.distribute.get_strategy()
    raise ValueError(f"Unknown --distribution_strategy {name!r}; choose one of {STRATEGIES}.")


def tf_config_worker() -> tuple[int, bool]:
    """(this worker's index, whether it is the chief) of a multi_worker_mirrored run, from
    TF_CONFIG before any strategy is built, numbered as `worker_layout` numbers them; (0, True)
    without TF_CONFIG or in a cluster of one."""
    _check_tf_config()
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 0, True
    config = json.loads(raw)
    cluster, task = config.get("cluster") or {}, config.get("task") or {}
    chiefs = len(cluster.get("chief", []))
    if chiefs + len(cluster.get("worker", [])) <= 1 or task.get("type") == "chief":
        return 0, True
    index = chiefs + task.get("index", 0)  # an integer in range (`_check_tf_config`)
    return index, index == 0


def worker_layout(strategy: tf.distribute.Strategy) -> tuple[int, int]:
    """(number of workers, this worker's index): input is sharded per worker. A chief, when the
    cluster has one, is worker 0."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return 1, 0
    spec = resolver.cluster_spec().as_dict()
    chiefs = len(spec.get("chief", []))
    workers = chiefs + len(spec.get("worker", []))
    if workers <= 1:
        return 1, 0
    if resolver.task_type == "chief":
        return workers, 0
    return workers, chiefs + int(resolver.task_id)
