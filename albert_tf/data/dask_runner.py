"""Beam's Dask runner with the two fixes our pipeline needs, and the cluster it runs on.

`python -m albert_tf.data.create_pretraining_data ... --runner dask` runs
`albert_tf.data.beam_pipeline` on a Dask cluster: an existing scheduler (`--dask_address
tcp://HOST:PORT`) or a local cluster of `--dask_workers N` processes started for the run and stopped
after it (`dask_cluster`).

Beam 2.77's `DaskRunner` translates each ParDo into a `map_partitions` call whose output
receivers are built once, in the launcher, and pickled into every task. Two faults follow,
both seen on this pipeline with a scheduler and 2 worker processes:

- the receivers' list of outputs is never emptied, so a bundle that runs again in a worker
  process that already ran it (a side input is computed inside the tasks that read it, once per
  task) returns the earlier outputs too: the documents' plan came out with every document three
  times, and the run failed;
- every tag writes into that one list, so tagged outputs (`with_outputs`) are mixed into the
  main output (`albert_tf.data.beam_pipeline` uses one collection of two kinds instead).

`AlbertDaskRunner` translates ParDo with `run_bundle`, which builds the invoker and receivers for
each bundle and collects the outputs after `finish_bundle`. Everything else is Beam's.

What Dask does not give (docs/data.md, "On Dask"): Beam metrics (the summary is read from the sidecars),
retries of a failed task with the work kept (a worker that dies loses its results; Dask reruns
them elsewhere), autoscaling (Dask's adaptive clusters are the user's), and splitting one input
file (a file is one task's work, as on every runner).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

import apache_beam as beam
from apache_beam import DoFn
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, _OutputHandler
from apache_beam.runners.dask import transform_evaluator
from apache_beam.runners.dask.dask_runner import DaskRunner
from apache_beam.runners.dask.transform_evaluator import OneReceiver, get_windowed_value
from distributed import Client, LocalCluster

CONNECTION_TIMEOUT_S = 15


def run_bundle(items, fn, label, window_fn, side_inputs, args, kwargs):
    """One bundle (a Dask partition) through `fn`: fresh receivers, outputs after finish_bundle."""
    receivers = OneReceiver()
    handler = _OutputHandler(
        window_fn=window_fn, main_receivers=receivers[None], tagged_receivers=receivers,
        per_element_output_counter=None, output_batch_converter=None,
        process_yields_batches=False, process_batch_yields_elements=False)
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn), handler, context=DoFnContext(label, state=None),
        side_inputs=side_inputs, input_args=args, input_kwargs=kwargs,
        user_state_context=None, bundle_finalizer_param=DoFn.BundleFinalizerParam())
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(item)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return [v.value for v in receivers.values]


class _ParDo(transform_evaluator.ParDo):
    def apply(self, input_bag, side_inputs=None):
        transform = self.transform
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(self.applied.main_inputs.values()))
        window_fn = getattr(main_input, "windowing", None)
        window_fn = window_fn.windowfn if window_fn is not None else None
        return input_bag.map(get_windowed_value, window_fn).map_partitions(
            run_bundle, transform.fn, transform.label, window_fn, side_inputs, list(args),
            kwargs)


class AlbertDaskRunner(DaskRunner):
    """Beam's `DaskRunner` with ParDo translated by `run_bundle`."""

    def run_pipeline(self, pipeline, options):
        translations = transform_evaluator.TRANSLATIONS
        original = translations[beam.ParDo]
        translations[beam.ParDo] = _ParDo  # only while this pipeline is translated
        try:
            return super().run_pipeline(pipeline, options)
        finally:
            translations[beam.ParDo] = original


def check_scheduler(address: str, timeout: float = CONNECTION_TIMEOUT_S) -> None:
    """Raises `ConnectionError` naming `address` when no Dask scheduler answers there within
    `timeout` seconds: nothing listening, another kind of service (whose handshake would
    otherwise wait forever), or an address that is not `tcp://HOST:PORT`."""
    outcome = {}

    def connect():
        try:
            with Client(address, timeout=timeout):
                outcome["ok"] = True
        except Exception as e:  # noqa: BLE001 - reported below
            outcome["error"] = e

    # a daemon thread: a service that accepts the connection but never speaks Dask's protocol
    # would keep the handshake, and the process, waiting forever
    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout + 5)
    if not outcome.get("ok"):
        error = outcome.get("error")
        reason = (f"{error}" if error is not None and str(error)
                  else type(error).__name__ if error is not None else "no answer")
        raise ConnectionError(
            f"--dask_address {address}: no Dask scheduler answered within {timeout:g} s "
            f"({reason}). Give the scheduler's address as tcp://HOST:PORT (`dask scheduler` "
            "prints it; then `dask worker ADDRESS` on each machine), check the host and port, "
            "or use --dask_workers N for a local cluster; nothing was written.")


@contextlib.contextmanager
def dask_cluster(address: str | None, workers: int | None):
    """The scheduler address to run on: `address`, checked, or a local cluster of `workers`
    processes (one thread each, on 127.0.0.1) that is closed when the block ends."""
    if not os.environ.get("ALBERT_TF_VERBOSE"):  # the scheduler's and workers' INFO lines
        logging.getLogger("distributed").setLevel(logging.WARNING)
    if address:
        check_scheduler(address)
        yield address
        return
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=":0") as cluster:
        yield cluster.scheduler_address
