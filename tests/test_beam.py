"""Data generation on Apache Beam: the local generator's files, byte for byte; bad input counted."""

import dataclasses
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

beam = pytest.importorskip("apache_beam")

from albert_tf import features as F  # noqa: E402
from conftest import GENERATION_KW, ROOT  # noqa: E402
from albert_tf.data.beam_pipeline import COUNTERS, generate_with_beam  # noqa: E402
from albert_tf.data.generator import generate, make_job  # noqa: E402
from albert_tf.data.text_io import InputError  # noqa: E402
from albert_tf.data.token_cache import tokenize_file  # noqa: E402

TWO_PROCESSES = ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
                 "--direct_num_workers=2"]


def _read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def beam_run(generated_data, tmp_path_factory):
    """The job of `generated_data` (WikiText, 3 shards, 2 passes, 7 blocks) on Beam, in two
    worker processes."""
    out = tmp_path_factory.mktemp("beam")
    local_job = generated_data["job"]
    job = dataclasses.replace(local_job, output_files=tuple(
        str(out / os.path.basename(p)) for p in local_job.output_files))
    summary = generate_with_beam(job, TWO_PROCESSES)
    return {"job": job, "summary": summary}


@pytest.mark.slow
def test_files_and_sidecars_equal_the_local_generator(beam_run, generated_data):
    local, ours = generated_data["files"], beam_run["job"].output_files
    assert len(ours) == 3
    for a, b in zip(local, ours):
        assert _read(a) == _read(b)  # same examples in the same order
        meta_local, meta_beam = (json.load(open(F.sidecar_path(p))) for p in (a, b))
        assert meta_beam == meta_local  # counts, inputs with their SHA-256, run hash
    # Only the outputs and the vocabulary their sidecars name are left in the directory: no
    # temporary file, no lock.
    names = sorted(os.listdir(os.path.dirname(ours[0])))
    assert names == sorted([os.path.basename(p) for p in ours]
                           + [os.path.basename(F.sidecar_path(p)) for p in ours]
                           + [meta_beam["spm_model_file"]])


def test_counters_equal_the_local_counts(beam_run, generated_data, sample_vocab, tmp_path):
    from albert_tf.tokenization import Tokenizer

    summary, local = beam_run["summary"], generated_data["summary"]
    assert summary["counts"] == local["counts"]
    assert summary["total_examples"] == local["total_examples"] > 3000
    tokenized = tokenize_file(generated_data["job"].input_files[0],
                              Tokenizer(sample_vocab), str(tmp_path / "wiki"))
    counters = summary["counters"]
    assert set(counters) == set(COUNTERS)
    assert (counters["documents"], counters["sentences"], counters["tokens"]) == (
        tokenized["documents"], tokenized["sentences"], tokenized["tokens"])
    assert counters["files"] == 1 and counters["units"] == local["units"] == 16
    # chunks completed from another document: read through the keyed join, not a side input
    assert summary["counts"]["random_document"] > 50
    # what a worker held of the corpus for one unit: its block (about tokens_per_unit tokens, 4
    # bytes each, with the sentence offsets) and its segments, far below the corpus
    largest = summary["largest_unit_corpus_bytes"]
    corpus_bytes = 4 * tokenized["tokens"] + 8 * (tokenized["sentences"] + tokenized["documents"])
    assert 4 * 40_000 <= largest < corpus_bytes / 2, (largest, corpus_bytes)
    assert counters["documents_not_utf8"] == counters["documents_empty"] == 0


def test_rerun_is_complete_and_another_run_is_refused(beam_run, prepared_corpus):
    job = beam_run["job"]
    before = [_read(p) for p in job.output_files]
    again = generate_with_beam(job, ["--runner=FnApiRunner"])
    assert again["already_complete"] is True
    other = dataclasses.replace(job, random_seed=job.random_seed + 1)
    with pytest.raises(InputError, match="already exists.*nothing was changed"):
        generate_with_beam(other, ["--runner=FnApiRunner"])
    assert [_read(p) for p in job.output_files] == before


def _side_inputs(job, sample_vocab):
    """[(transform, side input kind, producing transform)] of the pipeline built for `job`."""
    from apache_beam.pipeline import PipelineVisitor

    from albert_tf.tokenization import Tokenizer
    from albert_tf.data.beam_pipeline import build_pipeline

    class Visitor(PipelineVisitor):
        def __init__(self):
            self.found = []

        def visit_transform(self, node):
            for side in node.side_inputs:
                self.found.append((node.full_label, type(side).__name__,
                                   side.pvalue.producer.full_label))

    tokenizer = Tokenizer(sample_vocab)
    pipeline = beam.Pipeline()
    build_pipeline(pipeline, job, tokenizer.model_proto, tokenizer.vocab_size, tokenizer.sha256)
    visitor = Visitor()
    pipeline.visit(visitor)
    return visitor.found


def test_no_side_input_is_built_from_the_corpus(beam_run, sample_vocab):
    """Scale: documents reach other units through a keyed join (CoGroupByKey), never as a side
    input every worker would hold. The one side input is the plan (integers per document, no
    token); the example count and the run's input hashes reach the writers through the shard key,
    and the global combiners have no defaults (each a side input): a runner that computes a side
    input inside every task that reads it (Beam's Dask runner) would redo their whole upstream."""
    from albert_tf.data.beam_pipeline import make_plan

    found = _side_inputs(beam_run["job"], sample_vocab)
    ours = {(label, kind, producer.split("/")[0]) for label, kind, producer in found
            if not label.startswith(producer.split("/")[0] + "/")}
    assert ours == {("Number", "AsSingleton", "Plan"), ("Requests", "AsSingleton", "Plan"),
                    ("ByUnit", "AsSingleton", "Plan"), ("Examples", "AsSingleton", "Plan")}
    assert len(found) == len(ours) == 4
    # The plan: four integers per document (key, block, rank, sentences), nothing that grows
    # with the tokens.
    sizes = [(0, d, 100 + d, 3 + d % 5) for d in range(1000)] + [(1, 0, 50_000, 900)]
    plan = make_plan(sizes, 17, 40_000)
    arrays = {k: v for k, v in plan.items() if isinstance(v, np.ndarray)}
    assert set(arrays) == {"keys", "block_of", "rank", "num_sentences"}
    assert all(len(v) == 1001 and v.dtype.kind == "i" for v in arrays.values())
    assert sum(v.nbytes for v in arrays.values()) == 1001 * 20
    assert set(plan) - set(arrays) == {"num_documents", "num_blocks"}


@pytest.mark.slow
def test_random_next_sentence_segments_through_the_join(generated_data, tmp_path):
    """BERT's next-sentence negatives (half the chunks take B from another document): the
    pipeline, in one process and in three, writes the local generator's files."""
    from albert_tf.data.pretraining import GenerationParams

    base = generated_data["job"]
    params = GenerationParams(max_seq_length=64, max_predictions_per_seq=10,
                              random_next_sentence=True)
    jobs = {name: dataclasses.replace(base, params=params, dupe_factor=1, output_files=tuple(
        str(tmp_path / name / os.path.basename(p)) for p in base.output_files))
        for name in ("local", "one", "three")}
    local = generate(jobs["local"], num_workers=1, progress=False)
    assert local["counts"]["random_document"] > 0.4 * local["total_examples"] > 400
    generate_with_beam(jobs["one"], ["--runner=FnApiRunner"])
    generate_with_beam(jobs["three"], ["--runner=FnApiRunner",
                                       "--direct_running_mode=multi_processing",
                                       "--direct_num_workers=3"])
    for name in ("one", "three"):
        assert [_read(p) for p in jobs[name].output_files] == [
            _read(p) for p in jobs["local"].output_files]


def _documents(path, count, skip=0):
    """`count` documents of an official-format file, after `skip`."""
    from albert_tf.data.text_io import read_documents

    docs = list(read_documents(path))[skip:skip + count]
    assert len(docs) == count
    return docs


def _write(path, documents, raw=None):
    with open(path, "wb") as f:
        f.write(raw if raw is not None else
                "\n\n".join("\n".join(d) for d in documents).encode("utf-8") + b"\n")


@pytest.mark.slow
def test_bad_input_is_counted_and_the_rest_written(prepared_corpus, sample_vocab, tmp_path):
    """From the command line: a file with two documents that are not UTF-8 (one of them its
    last), an empty file and a document whose only line tokenizes to nothing, among good files.
    The output equals the local generator's on the same files with the bad documents removed."""
    wiki = prepared_corpus["wiki"]
    good_a, good_b = _documents(wiki, 4), _documents(wiki, 5, skip=10)
    mixed = _documents(wiki, 4, skip=20)
    corrupt = [line.encode("utf-8") for line in ["\n".join(d) for d in mixed]]
    corrupt[1] = corrupt[1].replace(b" ", b" \xff\xfe ", 1)
    corrupt[3] = b"caf\xe9 au lait\n" + corrupt[3]
    inputs = tmp_path / "in"
    inputs.mkdir()
    _write(inputs / "a.txt", good_a)
    _write(inputs / "b_mixed.txt", None, raw=b"\n\n".join(corrupt) + b"\n")
    _write(inputs / "c_empty.txt", None, raw=b"\n\n  \n")
    _write(inputs / "d.txt", good_b + [["\u200b"]])  # the last document tokenizes to nothing
    clean = tmp_path / "clean"
    clean.mkdir()
    _write(clean / "a.txt", good_a)
    _write(clean / "b_mixed.txt", [d for i, d in enumerate(mixed) if i not in (1, 3)])
    _write(clean / "d.txt", good_b)

    kw = dict(GENERATION_KW, tokens_per_unit=3_000)
    local = make_job(",".join(str(clean / n) for n in ("a.txt", "b_mixed.txt", "d.txt")),
                     str(tmp_path / "local" / "out"), sample_vocab, num_output_shards=2, **kw)
    local_summary = generate(local, num_workers=1, progress=False)

    out = tmp_path / "beam" / "out"
    flags = [f"--{k}={v}" for k, v in kw.items()]
    result = subprocess.run(
        [sys.executable, "-m", "albert_tf.data.create_pretraining_data",
         f"--input_file={inputs}/*.txt", f"--output_file={out}", "--num_output_shards=2",
         f"--spm_model_file={sample_vocab}", "--runner=FnApiRunner", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ours = [f"{out}-0000{i}-of-00002.tfrecord" for i in range(2)]
    assert [_read(p) for p in ours] == [_read(p) for p in local.output_files]
    total = local_summary["total_examples"]
    assert f"wrote {total:,} examples to 2 file(s)" in result.stdout
    for name, value in [("files", 4), ("files_without_documents", 1),
                        ("documents_not_utf8", 2), ("documents_empty", 1),
                        ("documents", 4 + 2 + 5), ("units", local_summary["units"]),
                        ("examples", total)]:
        assert f"{name} {value:,}" in result.stdout, (name, result.stdout)
    # The reports name the file, the line and the byte.
    assert "b_mixed.txt: line" in result.stderr and "byte 0xff" in result.stderr
    assert "byte 0xe9" in result.stderr and "c_empty.txt holds no usable document" in result.stderr


def test_without_runner_beam_flags_are_refused(tmp_path, sample_vocab):
    result = subprocess.run(
        [sys.executable, "-m", "albert_tf.data.create_pretraining_data", "--input_file=x.txt",
         f"--output_file={tmp_path}/o", f"--spm_model_file={sample_vocab}",
         "--direct_num_workers=2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "accepted only with --runner" in result.stderr


# ---------------------------------------------------------------------------------------------
# Apache Beam on a Dask cluster (`--runner dask`, albert_tf/data/dask_runner.py).
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_dask(workers, hidden=None):
    """A Dask scheduler and `workers` worker processes (one thread each) on 127.0.0.1, started
    as a user starts them (`dask scheduler`, `dask worker`); with `hidden`, each worker runs in
    its own mount namespace where that directory is an empty tmpfs (a worker that does not
    see the launcher's files). Returns (address, client, processes)."""
    distributed = pytest.importorskip("distributed")
    address = f"tcp://127.0.0.1:{_free_port()}"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
              "--nworkers", "1", "--no-dashboard", "--host", "127.0.0.1"]
    if hidden:
        worker = ["unshare", "--mount", "sh", "-c",
                  f'mount -t tmpfs tmpfs "{hidden}" && exec "$@"', "worker", *worker]
    processes = [scheduler] + [subprocess.Popen(
        worker, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(workers)]
    try:
        client = distributed.Client(address, timeout=60)
        client.wait_for_workers(workers, timeout=120)
    except Exception:
        _stop(None, processes)
        raise
    return address, client, processes


def _stop(client, processes):
    if client is not None:
        client.close()
    for p in processes:
        p.terminate()
    for p in processes:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture
def dask_scheduler():
    """A Dask scheduler and 2 worker processes on 127.0.0.1 (`_start_dask`)."""
    address, client, processes = _start_dask(2)
    try:
        yield {"address": address, "client": client}
    finally:
        _stop(client, processes)


def _split_corpus(path, directory, parts):
    """The documents of `path` in `parts` files (document boundaries kept)."""
    with open(path, encoding="utf-8") as f:
        documents = f.read().strip("\n").split("\n\n")
    os.makedirs(directory)
    size = -(-len(documents) // parts)
    for i in range(parts):
        with open(os.path.join(directory, f"part{i}.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(documents[i * size:(i + 1) * size]) + "\n")
    return os.path.join(directory, "*.txt")


def _generation_flags(inputs, output, vocab):
    kw = GENERATION_KW
    return [f"--input_file={inputs}", f"--output_file={output}", f"--spm_model_file={vocab}",
            "--num_output_shards=3", f"--max_seq_length={kw['max_seq_length']}",
            f"--max_predictions_per_seq={kw['max_predictions_per_seq']}",
            f"--dupe_factor={kw['dupe_factor']}", f"--random_seed={kw['random_seed']}",
            f"--tokens_per_unit={kw['tokens_per_unit']}"]


@pytest.mark.slow
def test_dask_cluster_writes_the_local_generators_files(dask_scheduler, prepared_corpus,
                                                        sample_vocab, tmp_path):
    """`--runner dask --dask_address` on a scheduler with 2 worker processes: the files and
    sidecars of the local generator, byte for byte, the work spread over both workers."""
    inputs = _split_corpus(prepared_corpus["wiki"], str(tmp_path / "corpus"), 4)
    local = make_job(inputs, str(tmp_path / "local" / "wiki"), sample_vocab,
                     num_output_shards=3, **GENERATION_KW)
    expected = generate(local, num_workers=2, progress=False)
    client = dask_scheduler["client"]
    before = client.run(lambda dask_worker: dask_worker.state.executed_count)
    result = subprocess.run(
        [sys.executable, "-m", "albert_tf.data.create_pretraining_data",
         *_generation_flags(inputs, tmp_path / "dask" / "wiki", sample_vocab),
         "--runner", "dask", "--dask_address", dask_scheduler["address"]],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote {expected['total_examples']:,} examples to 3 file(s)" in result.stdout
    for path in local.output_files:
        ours = str(tmp_path / "dask" / os.path.basename(path))
        assert _read(ours) == _read(path)
        assert json.load(open(F.sidecar_path(ours))) == json.load(open(F.sidecar_path(path)))
    after = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert len(after) == 2 and all(after[w] - before[w] >= 4 for w in after), (before, after)
    # the run closed its client; the cluster is the user's and still serves
    assert client.submit(sum, [1, 2]).result(timeout=60) == 3


@pytest.mark.slow
def test_a_dask_worker_that_cannot_read_the_inputs_is_named(prepared_corpus, sample_vocab,
                                                            tmp_path):
    """A worker that does not see the input files (its own mount namespace, the corpus
    directory an empty tmpfs there): one error line naming the file and the fix, exit status 1,
    no output written."""
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode:
        pytest.skip("unshare --mount is not permitted here")
    inputs = _split_corpus(prepared_corpus["wiki"], str(tmp_path / "corpus"), 2)
    address, client, processes = _start_dask(1, hidden=str(tmp_path / "corpus"))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "albert_tf.data.create_pretraining_data",
             *_generation_flags(inputs, tmp_path / "out" / "wiki", sample_vocab),
             "--runner", "dask", "--dask_address", address],
            cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        _stop(client, processes)
    assert result.returncode == 1, result.stderr[-3000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, result.stderr[-3000:]
    assert f"{tmp_path / 'corpus'}/part" in error[0] and "cannot read this input" in error[0]
    assert "Every worker must see the inputs at the path the launcher gave" in error[0]
    assert not [n for n in os.listdir(tmp_path / "out") if "tfrecord" in n]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["nothing listens", "not a Dask scheduler", "http"])
def test_unreachable_dask_scheduler_is_named_and_nothing_is_written(kind, sample_vocab, tmp_path,
                                                                    prepared_corpus):
    """A port where nothing listens, a service that accepts the connection and never answers
    (before the check's deadline, its handshake waited forever), an http:// address: one error
    naming --dask_address, exit status 1, nothing written."""
    pytest.importorskip("distributed")
    silent = None
    if kind == "not a Dask scheduler":
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # the kernel completes the handshake; nobody ever answers
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    else:
        address = f"{'http' if kind == 'http' else 'tcp'}://127.0.0.1:{_free_port()}"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "albert_tf.data.create_pretraining_data",
             *_generation_flags(prepared_corpus["wiki"], tmp_path / "out" / "wiki",
                                sample_vocab),
             "--runner", "dask", "--dask_address", address],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        if silent is not None:
            silent.close()
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"error: --dask_address {address}: no Dask scheduler answered within 15 s" in (
        result.stderr)
    assert "nothing was written" in result.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("flags, message", [
    (["--dask_workers=2"], "--dask_address and --dask_workers go with --runner dask"),
    (["--runner=dask", "--dask_workers=2", "--dask_address=tcp://127.0.0.1:1"],
     "give one of them"),
    (["--runner=dask", "--dask_workers=0"], "--dask_workers must be a finite number > 0"),
])
def test_dask_flags_are_checked(flags, message, sample_vocab, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "albert_tf.data.create_pretraining_data", "--input_file=x.txt",
         f"--output_file={tmp_path}/o", f"--spm_model_file={sample_vocab}", *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert message in result.stderr
