"""Pretraining data generation on Apache Beam: the local generator's examples, on many machines.

`python -m albert_tf.data.create_pretraining_data --runner=RUNNER ...` (or `generate_with_beam`)
runs the algorithm of `albert_tf.data.generator` as a Beam pipeline, so a corpus too large for one
machine is processed by Dataflow, Flink or Spark workers. Same inputs, flags and seed give
**byte-identical files and sidecars** to the local generator (`generate`), for any runner and number
of workers: not only the same multiset of examples, the same order within each file.

The stages, each the local generator's own function:

1. read: each input file on one worker (Beam's text reader cannot split on blank lines), split
   into documents (`albert_tf.data.text_io.documents_of`); the file's SHA-256 is taken on the way
   (the sidecar and the run hash record it). A document with a line that is not UTF-8 is dropped,
   counted and logged with the file, line and byte; the rest of the file is used.
2. tokenize: documents are reshuffled so one large file spreads over the workers; each document
   is tokenized (sentences that tokenize to nothing dropped, and documents left empty).
3. plan (one small element, the only side input besides two counts): documents get the local
   generator's global numbering (input-file order, then order in the file), are shuffled with the
   seed and cut into blocks of about `tokens_per_unit` tokens
   (`albert_tf.data.generator.document_blocks`). It holds four integers per document - key, block,
   rank in the block, sentence count (20 bytes: 120 MB for Wikipedia's 6 million documents) - and no
   token.
4. requests: each document plans its chunks for every pass
   (`albert_tf.data.generator.document_plan`: its own sentence lengths, its own seeded generator,
   the other documents' sentence counts from the plan). A chunk completed from a random other
   document becomes a request (other document, start sentence, tokens needed) keyed by that
   document.
5. join: requests are grouped with the document they read (CoGroupByKey on the document key),
   which answers each with the segment (at most `max_seq_length` tokens) keyed by the
   requesting unit. No worker ever holds more than one document here: the corpus is shuffled,
   never broadcast.
6. units: documents and their segments are grouped by (block, dupe pass), the local
   generator's unit of work, so the work spreads over as many workers as the local generator's;
   each unit's examples are built with `default_rng([seed, block, pass])`
   (`albert_tf.data.generator.unit_examples`). The shuffle carries each tokenized document
   `dupe_factor` times (4 bytes per token and pass: about half of what the examples themselves weigh
   in the next shuffle) and each random segment once per request.
7. write: examples are grouped by output shard, put in unit order, shuffled with the shard's
   seed and written as a TFRecord, then its JSON sidecar, each under a temporary name renamed
   into place (a retried bundle rewrites the same bytes).

Memory: a worker holds one unit (about `tokens_per_unit` tokens, its random segments) and its
examples, and the plan (20 bytes per document);
the writer of a shard holds that shard's examples, as the local reducer does: choose
`--num_output_shards` so one shard (total examples / shards x about 1.5 KB at sequence length
128) fits in a worker's memory.

Counters (Beam metrics, namespace `albert_tf.data`): files, files_without_documents, documents,
documents_not_utf8, documents_empty, sentences, tokens, units, examples, masked_positions,
sentence_order_label_1, random_document, short_target; printed at the end of a run. A
distribution, unit_corpus_bytes, records what each unit held of the corpus (its documents and
segments; the summary's `largest_unit_corpus_bytes`).

Unlike the local generator, a Beam run does not resume after it is stopped (a runner retries
failed bundles within a run); it refuses to start when an output file exists, except when every
output exists from an identical run ("already complete").
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import socket
import tempfile
import time
import uuid

import numpy as np

from albert_tf import features as F
from albert_tf.ownership import OutputLock
from albert_tf.paths import temporary_name
from albert_tf.tokenization import Tokenizer, file_sha256
from albert_tf.data.generator import (STATS, check_outputs_are_not_inputs, compute_run_hash,
                            document_blocks, document_plan, place_sentencepiece, reduce_order,
                            shard_metadata, unit_examples)
from albert_tf.data.pretraining import Vocabulary, random_segment
from albert_tf.data.text_io import InputError, documents_of
from albert_tf.data.token_cache import tokenize_document

NAMESPACE = "albert_tf.data"
COUNTERS = ("files", "files_without_documents", "documents", "documents_not_utf8",
            "documents_empty", "sentences", "tokens", "units", "examples", "masked_positions",
            "sentence_order_label_1", "random_document", "short_target")
_REPORTED_ERRORS_PER_FILE = 5

log = logging.getLogger("albert_tf.beam")


def _beam():
    quiet = not os.environ.get("ALBERT_TF_VERBOSE")
    if quiet:
        # Beam's import and planning messages (optional GCP clients missing, type hints); its
        # errors still show. This module's per-unit lines are logged under "albert_tf.beam".
        logging.getLogger("apache_beam").setLevel(logging.ERROR)
    root = logging.getLogger()
    level = root.level
    try:
        if quiet:
            root.setLevel(logging.ERROR)  # "apitools not found" goes to the root logger
        import apache_beam as beam
    except ImportError:
        raise ImportError(
            "Apache Beam is not installed: `pip install .[beam]` (or `pip install "
            "apache-beam==2.77.0 google-crc32c`) to run data generation on Beam; the local "
            "generator (without --runner) needs neither.") from None
    finally:
        root.setLevel(level)
    return beam


def _counter(name):
    from apache_beam.metrics import Metrics

    return Metrics.counter(NAMESPACE, name)


def _is_remote(path: str) -> bool:
    return "://" in path


# ---------------------------------------------------------------------------------------------
# 1. read
def _read_file(element):
    """(file index, path) -> ("document", ((file index, document index), lines)) for each good
    document, then ("input", (file index, {"path", "sha256"})). One collection of two kinds, not
    Beam's tagged outputs, which the Dask runner mixes into the main output (Beam 2.77)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    index, path = element
    digest = hashlib.sha256()

    def lines(f):
        for raw in f:
            digest.update(raw)
            yield raw

    errors = []
    count = 0
    try:
        opened = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except OSError as e:  # the launcher saw the file: this worker does not
        raise InputError(
            f"{path}: the worker on {socket.gethostname()} cannot read this input "
            f"({e.strerror or e}). Every worker must see the inputs at the path the launcher "
            "gave: a shared file system mounted at the same path, or gs://, s3://, hdfs://. "
            "No output was written.") from None
    with opened as f:
        for document in documents_of(lines(f), path, errors=errors):
            yield "document", ((index, count), document)
            count += 1
    _counter("files").inc()
    if errors:
        _counter("documents_not_utf8").inc(len(errors))
        for e in errors[:_REPORTED_ERRORS_PER_FILE]:
            log.warning("skipped a document: %s", e)
        if len(errors) > _REPORTED_ERRORS_PER_FILE:
            log.warning("%s: %d documents skipped in all (not UTF-8)", path, len(errors))
    if not count:
        _counter("files_without_documents").inc()
        log.warning("%s holds no usable document (no line of UTF-8 text)", path)
    yield "input", (index, {"path": path if _is_remote(path) else os.path.abspath(path),
                            "sha256": digest.hexdigest()})


def _of_kind(element, kind):
    if element[0] == kind:
        yield element[1]


# ---------------------------------------------------------------------------------------------
# 2. tokenize
class _WithTokenizer:
    """Mixin: a Tokenizer and Vocabulary built once per DoFn instance from the model's bytes
    (workers need not see the launcher's file system)."""

    def __init__(self, model_proto: bytes, do_lower_case: bool):
        self.model_proto, self.do_lower_case = model_proto, do_lower_case

    def setup(self):
        fd, path = tempfile.mkstemp(suffix=".model")
        with os.fdopen(fd, "wb") as f:
            f.write(self.model_proto)
        try:
            self.tokenizer = Tokenizer(path, self.do_lower_case)
            self.vocab = Vocabulary.from_tokenizer(self.tokenizer)
        finally:  # the model is loaded: the file can go
            os.remove(path)


def _tokenize_dofn():
    beam = _beam()

    class Tokenize(_WithTokenizer, beam.DoFn):
        def __init__(self, model_proto, do_lower_case):
            _WithTokenizer.__init__(self, model_proto, do_lower_case)
            beam.DoFn.__init__(self)

        def process(self, element):
            key, lines = element
            tokens, ends = tokenize_document(lines, self.tokenizer)
            if not tokens:
                _counter("documents_empty").inc()
                return
            _counter("documents").inc()
            _counter("sentences").inc(len(ends))
            _counter("tokens").inc(len(tokens))
            yield key, (np.asarray(tokens, np.int32), np.asarray([0] + ends, np.int64))

    return Tokenize


# ---------------------------------------------------------------------------------------------
# 3. plan
def make_plan(sizes, random_seed: int, tokens_per_unit: int) -> dict:
    """[(file index, document index, tokens, sentences)] of every document -> the global
    numbering (sorted keys), each document's block and rank within it and its sentence count:
    four integer arrays of one entry per document."""
    sizes = sorted(sizes)
    keys = np.asarray([(f << 32) | d for f, d, _, _ in sizes], np.int64)
    tokens = np.asarray([n for _, _, n, _ in sizes], np.int64)
    blocks = document_blocks(tokens, random_seed, tokens_per_unit)
    block_of = np.zeros(len(keys), np.int32)
    rank = np.zeros(len(keys), np.int32)
    for b, docs in enumerate(blocks):
        block_of[docs] = b
        rank[docs] = np.arange(len(docs))
    return {"keys": keys, "block_of": block_of, "rank": rank,
            "num_sentences": np.asarray([n for _, _, _, n in sizes], np.int32),
            "num_documents": len(keys), "num_blocks": len(blocks)}


def _global_id(element, plan):
    (f, d), document = element
    gid = int(np.searchsorted(plan["keys"], (f << 32) | d))
    return gid, document


# ---------------------------------------------------------------------------------------------
# 4. requests, 5. join, 6. units
class _PlanStore:
    """The `albert_tf.data.pretraining.Documents` interface over the documents at hand (in memory)
    and the plan's sentence counts of every other one: enough to plan chunks, never a foreign
    token."""

    def __init__(self, plan, local: dict):
        self._plan, self._local = plan, local

    def __len__(self):
        return self._plan["num_documents"]

    def num_sentences(self, doc):
        found = self._local.get(doc)
        return len(found[1]) - 1 if found is not None else int(self._plan["num_sentences"][doc])

    def sentence(self, doc, index):
        tokens, ends = self._local[doc]
        return tokens[ends[index]:ends[index + 1]]


def _document_requests(element, plan, job):
    """(global id, document) -> (other document, (request, unit)) for each chunk of each pass
    that takes segment B from another document."""
    gid, document = element
    store = _PlanStore(plan, {gid: document})
    block = int(plan["block_of"][gid])
    for dupe in range(job.dupe_factor):
        for request in {c.request for c in document_plan(job, store, dupe, gid) if c.other >= 0}:
            yield request[0], (request, (block, dupe))


def _answer_requests(element, max_num_tokens):
    """(document, {"document": [it], "request": [(request, unit)]}) -> (unit, ("segment",
    request, tokens)) for each request: the segment read from the document."""
    gid, joined = element
    documents = list(joined["document"])
    if len(documents) != 1:
        raise RuntimeError(f"document {gid}: {len(documents)} entries in the join")
    store = _PlanStore(None, {gid: documents[0]})
    for request, unit in set(joined["request"]):
        _, start, target_b = request
        if not (0 <= start < store.num_sentences(gid) and target_b <= max_num_tokens):
            raise RuntimeError(f"document {gid}: request {request} outside the document")
        yield unit, ("segment", request, np.asarray(random_segment(store, *request), np.int32))


def _unit_keys(element, plan, dupe_factor):
    """A document once for each (block, pass) unit that reads it."""
    gid, document = element
    block = int(plan["block_of"][gid])
    for dupe in range(dupe_factor):
        yield (block, dupe), ("document", gid, document)


def _units_dofn():
    beam = _beam()
    from apache_beam.metrics import Metrics

    class Units(_WithTokenizer, beam.DoFn):
        """((block, pass), [("document", global id, document) or ("segment", request, tokens)])
        -> (shard, ("example", (unit, index, record, stats)))."""

        def __init__(self, job, model_proto):
            _WithTokenizer.__init__(self, model_proto, job.do_lower_case)
            beam.DoFn.__init__(self)
            self.job = job

        def process(self, element, plan):
            (block, dupe), items = element
            local, segments = {}, {}
            for kind, key, value in items:
                (local if kind == "document" else segments)[key] = value
            doc_ids = sorted(local, key=lambda g: int(plan["rank"][g]))
            # what this worker holds of the corpus for the unit: its documents and segments
            held = (sum(t.nbytes + e.nbytes for t, e in local.values())
                    + sum(t.nbytes for t in segments.values()))
            Metrics.distribution(NAMESPACE, "unit_corpus_bytes").update(held)
            store = _PlanStore(plan, local)
            job = self.job
            records, stats, grouped = unit_examples(job, store, self.vocab, block, dupe, doc_ids,
                                                    segments)
            unit = block * job.dupe_factor + dupe
            for shard, indexes in enumerate(grouped):
                for k, i in enumerate(indexes.tolist()):
                    yield shard, ("example", (unit, k, records[i], stats[i]))
            for name, value in zip(STATS, stats.sum(0).tolist()):
                _counter(name).inc(int(value))
            _counter("units").inc()
            log.info("unit (block %d of %d, pass %d of %d): %d documents, %d examples",
                     block + 1, plan["num_blocks"], dupe + 1, job.dupe_factor, len(doc_ids),
                     len(records))

    return Units


# ---------------------------------------------------------------------------------------------
# 5. write
def _run_info(inputs, job, spm_sha256) -> dict:
    inputs = [meta for _, meta in sorted(inputs, key=lambda kv: kv[0])]
    return {"inputs": inputs,
            "run_hash": compute_run_hash(job, [i["sha256"] for i in inputs], spm_sha256)}


def _to_every_shard(value, kind, num_shards):
    """One small value (the total, the run's inputs) joined to every shard by key: no side input
    (a runner may recompute a side input's whole upstream for every bundle that reads it, as
    Beam's Dask runner does)."""
    for shard in range(num_shards):
        yield shard, (kind, value)


def _write_shard(element, job, vocab_size, spm_sha256):
    """(shard, [("example", value) ..., ("total", examples in all), ("run", run info)]) -> the
    shard's TFRecord, then its sidecar, each written under a temporary name and renamed into
    place; yields the path. Beam's file systems (local, gs://, s3://, hdfs://) and its TFRecord
    framing, which is TensorFlow's byte for byte."""
    import json

    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.io.tfrecordio import _TFRecordUtil

    shard, grouped = element
    values, total_examples, run = [], 0, None
    for kind, value in grouped:
        if kind == "example":
            values.append(value)
        elif kind == "total":
            total_examples = value
        else:
            run = value
    if not total_examples:  # nothing written; the launcher reports "no examples"
        return []
    values.sort(key=lambda v: (v[0], v[1]))
    records = [v[2] for v in values]
    stats = (np.sum([v[3] for v in values], 0) if values
             else np.zeros(len(STATS), np.int64))
    counts = dict(zip(STATS, (int(x) for x in stats)))
    path = job.output_files[shard]
    meta = shard_metadata(job, shard, counts, total_examples, vocab_size, spm_sha256,
                          run["inputs"], run["run_hash"])
    suffix = uuid.uuid4().hex
    tmp, tmp_sidecar = temporary_name(path, suffix), temporary_name(F.sidecar_path(path), suffix)
    raw = CompressionTypes.UNCOMPRESSED
    with FileSystems.create(tmp, compression_type=raw) as f:
        for i in reduce_order(job, shard, len(records)).tolist():
            _TFRecordUtil.write_record(f, records[i])
    with FileSystems.create(tmp_sidecar, compression_type=raw) as f:
        f.write(json.dumps(meta, indent=2).encode("utf-8"))
    FileSystems.rename([tmp], [path])
    FileSystems.rename([tmp_sidecar], [F.sidecar_path(path)])  # last: the shard is complete
    return [path]


# ---------------------------------------------------------------------------------------------
def build_pipeline(pipeline, job, model_proto: bytes, vocab_size: int, spm_sha256: str):
    """Adds the generation of `job` to `pipeline`; returns the PCollection of written paths."""
    beam = _beam()
    from apache_beam import pvalue

    files = (pipeline
             | "Files" >> beam.Create(list(enumerate(job.input_files)))
             | "SpreadFiles" >> beam.Reshuffle())
    read = files | "Read" >> beam.FlatMap(_read_file)
    tokenized = (read
                 | "Documents" >> beam.FlatMap(_of_kind, "document")
                 | "SpreadDocuments" >> beam.Reshuffle()
                 | "Tokenize" >> beam.ParDo(_tokenize_dofn()(model_proto, job.do_lower_case)))
    plan = (tokenized
            | "Sizes" >> beam.Map(lambda kv: (kv[0][0], kv[0][1], int(kv[1][1][-1]),
                                              len(kv[1][1]) - 1))
            | "AllSizes" >> beam.CombineGlobally(
                beam.combiners.ToListCombineFn()).without_defaults()
            | "Plan" >> beam.Map(make_plan, job.random_seed, job.tokens_per_unit))
    plan_side = pvalue.AsSingleton(plan)
    numbered = tokenized | "Number" >> beam.Map(_global_id, plan_side)
    requests = numbered | "Requests" >> beam.FlatMap(_document_requests, plan_side, job)
    segments = ({"document": numbered, "request": requests}
                | "JoinRequests" >> beam.CoGroupByKey()
                | "Segments" >> beam.FlatMap(_answer_requests, job.params.max_num_tokens))
    documents = numbered | "ByUnit" >> beam.FlatMap(_unit_keys, plan_side, job.dupe_factor)
    examples = ((documents, segments)
                | "WithSegments" >> beam.Flatten()
                | "Units" >> beam.GroupByKey()
                | "Examples" >> beam.ParDo(_units_dofn()(job, model_proto), plan_side))
    # The total and the run's inputs reach every shard through the shard key (every shard
    # gets both, so an empty shard is written too); without defaults, which are side inputs.
    shards = len(job.output_files)
    total = (examples
             | "Total" >> beam.CombineGlobally(beam.combiners.CountCombineFn()).without_defaults()
             | "TotalToShards" >> beam.FlatMap(_to_every_shard, "total", shards))
    run = (read
           | "Inputs" >> beam.FlatMap(_of_kind, "input")
           | "AllInputs" >> beam.CombineGlobally(
               beam.combiners.ToListCombineFn()).without_defaults()
           | "RunHash" >> beam.Map(_run_info, job, spm_sha256)
           | "RunToShards" >> beam.FlatMap(_to_every_shard, "run", shards))
    return ((examples, total, run)
            | "WithTotalAndRun" >> beam.Flatten()
            | "ByShard" >> beam.GroupByKey()
            | "Write" >> beam.FlatMap(_write_shard, job, vocab_size, spm_sha256))


def _existing_outputs(job, spm_sha256) -> bool:
    """True when every output exists from an identical run; raises `InputError` when some output
    exists otherwise (nothing is changed)."""
    import json

    from apache_beam.io.filesystems import FileSystems

    existing = [p for p in job.output_files
                if FileSystems.exists(p) or FileSystems.exists(F.sidecar_path(p))]
    if not existing:
        return False
    if len(existing) == len(job.output_files) and not any(map(_is_remote, job.input_files)):
        expected = compute_run_hash(job, [file_sha256(p) for p in job.input_files], spm_sha256)
        hashes = set()
        for p in job.output_files:
            try:
                with FileSystems.open(F.sidecar_path(p)) as f:
                    hashes.add(json.loads(f.read().decode("utf-8")).get("run_hash"))
            except (OSError, ValueError):
                hashes.add(None)
        if hashes == {expected} and all(map(FileSystems.exists, job.output_files)):
            return True
    raise InputError(
        f"{existing[0]} (or its .json sidecar) already exists. A Beam run writes every output "
        "anew: remove the existing outputs or choose another --output_file; nothing was "
        "changed.")


def pipeline_options(pipeline_args=()):
    """(`PipelineOptions` from Beam's own flags, a runner object or None). `--runner=FnApiRunner`
    (also the default) runs locally in this process or, with
    `--direct_running_mode=multi_processing --direct_num_workers=N`, in N worker processes,
    never trying the Prism runner binary that recent DirectRunners try first. `--runner=dask`
    is Beam's Dask runner with our fixes (`albert_tf.data.dask_runner`), on the scheduler that
    `--dask_client_address` names."""
    _beam()
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(pipeline_args))
    standard = options.view_as(StandardOptions)
    runner = standard.runner
    if runner in ("dask", "DaskRunner"):
        from albert_tf.data.dask_runner import AlbertDaskRunner

        standard.runner = None
        return options, AlbertDaskRunner()
    if runner is None or runner in ("FnApiRunner", "local"):
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        standard.runner = None
        return options, FnApiRunner()
    return options, None


def generate_with_beam(job, pipeline_args=()) -> dict:
    """Runs the generation of `job` on the Beam runner named in `pipeline_args` (Beam flags:
    `--runner`, `--project`, `--temp_location`, ...); waits for it and returns a summary like
    `albert_tf.data.generator.generate`'s, with the Beam counters."""
    if not job.spm_model_file:
        raise ValueError("--runner (Apache Beam) takes a SentencePiece model "
                         "(--spm_model_file); generate from a WordPiece --vocab_file without "
                         "--runner (the local generator, --num_workers processes).")
    beam = _beam()
    started = time.time()
    tokenizer = Tokenizer(job.spm_model_file, job.do_lower_case)  # validates the special ids
    job = dataclasses.replace(  # workers may run elsewhere: no path relative to this directory
        job, spm_model_file=os.path.abspath(job.spm_model_file),
        input_files=tuple(p if _is_remote(p) else os.path.abspath(p) for p in job.input_files),
        output_files=tuple(p if _is_remote(p) else os.path.abspath(p)
                           for p in job.output_files))
    check_outputs_are_not_inputs(job)
    with OutputLock(job.output_files[0], "--output_file", is_dir=False):
        return _generate_with_beam(beam, job, tokenizer, pipeline_args, started)


def _place_sentencepiece(job, spm_sha256: str) -> None:
    """`albert_tf.data.generator.place_sentencepiece` through Beam's file systems (gs://,
    s3://, ...)."""
    from apache_beam.io.filesystems import FileSystems

    out_dir = job.output_files[0].rsplit("/", 1)[0]
    target = f"{out_dir}/{os.path.basename(job.spm_model_file)}"
    if FileSystems.exists(target):
        with FileSystems.open(target) as f:
            if hashlib.sha256(f.read()).hexdigest() == spm_sha256:
                return
        raise InputError(
            f"{target} exists and is not --spm_model_file {job.spm_model_file}: the dataset's "
            "directory keeps the SentencePiece model its sidecars name, under its file name. "
            "Write the data to another directory, or rename one of the two models.")
    FileSystems.copy([job.spm_model_file], [target])


def _summary_from_sidecars(job, started) -> dict:
    """The summary of a run whose runner returns no Beam counters: the counts its shards'
    sidecars record (the same as the counters' example counts)."""
    import json

    from apache_beam.io.filesystems import FileSystems

    metas = []
    for path in job.output_files:
        if not FileSystems.exists(F.sidecar_path(path)):
            continue
        with FileSystems.open(F.sidecar_path(path)) as f:
            metas.append(json.loads(f.read().decode("utf-8")))
    if not metas:
        raise InputError(
            "The inputs produced no examples; no file was written (this runner returns no "
            "counters of why: rerun with --runner FnApiRunner to see how many documents were "
            "not UTF-8 or empty). Inputs must be UTF-8 text, one sentence per line, a blank "
            "line between documents.")
    if len(metas) != len(job.output_files):
        raise RuntimeError(f"the runner finished but wrote {len(metas)} of "
                           f"{len(job.output_files)} shards")
    counts = {k: sum(m["counts"][k] for m in metas) for k in STATS}
    return {"already_complete": False, "outputs": list(job.output_files),
            "total_examples": metas[0]["total_examples"], "counts": counts,
            "seconds": round(time.time() - started, 2)}


def _generate_with_beam(beam, job, tokenizer, pipeline_args, started) -> dict:
    from apache_beam.metrics.metric import MetricsFilter

    if _existing_outputs(job, tokenizer.sha256):
        return {"already_complete": True, "outputs": list(job.output_files)}
    for path in job.output_files:
        if not _is_remote(path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if _is_remote(job.output_files[0]):
        _place_sentencepiece(job, tokenizer.sha256)
    else:
        place_sentencepiece(job, tokenizer.sha256)
    pipeline_args = list(pipeline_args)
    if (any(a in ("--runner=dask", "--runner=DaskRunner") for a in pipeline_args)
            and not any(a.startswith(("--dask_npartitions", "--dask_partition_size"))
                        for a in pipeline_args)):
        # one input file per partition: the runner's default puts up to 128 in one, and every
        # later stage keeps the partitions of the files' (a file is one task's work)
        pipeline_args.append(f"--dask_npartitions={len(job.input_files)}")
    options, runner = pipeline_options(pipeline_args)
    pipeline = beam.Pipeline(runner=runner, options=options)
    build_pipeline(pipeline, job, tokenizer.model_proto, tokenizer.vocab_size, tokenizer.sha256)
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)  # the Dask runner's, which it leaves open
        if client is not None:
            client.close()
    try:
        metrics = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    except NotImplementedError:  # the Dask runner (Beam 2.77) collects no metrics
        return _summary_from_sidecars(job, started)
    counters = dict.fromkeys(COUNTERS, 0)
    for c in metrics["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
    held = [d.committed or d.attempted for d in metrics["distributions"]
            if d.key.metric.name == "unit_corpus_bytes"]
    largest_unit = max((int(d.max) for d in held if d is not None and d.count), default=0)
    if not counters["examples"]:
        raise InputError(
            f"The inputs produced no examples ({counters['documents']} usable documents, "
            f"{counters['documents_not_utf8']} not UTF-8, {counters['documents_empty']} empty); "
            "no file was written. Inputs must be UTF-8 text, one sentence per line, a blank line "
            "between documents.")

    return {"already_complete": False, "outputs": list(job.output_files),
            "total_examples": counters["examples"],
            "counts": {k: counters[k] for k in STATS}, "counters": counters,
            "largest_unit_corpus_bytes": largest_unit,
            "seconds": round(time.time() - started, 2)}
