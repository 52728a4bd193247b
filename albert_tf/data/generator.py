"""Parallel, resumable, reproducible generation of ALBERT pretraining TFRecords.

Three phases, each over units whose results do not depend on how many workers run them, so the
output is byte-identical for any `num_workers`:

1. tokenize: each input file -> memory-mapped token cache (`albert_tf.data.token_cache`), in
   parallel over files and, with several workers, over pieces of a file cut at document boundaries
   (`tokenize_parts`).
2. map: documents are shuffled once (seeded), cut into blocks of about `tokens_per_unit` tokens;
   each (block, dupe pass) is a unit with its own generator `default_rng([seed, block, pass])`
   (truncation, masking, the unit's shuffle); each document's chunking in a pass draws from
   `default_rng([seed, STRUCTURE_STREAM, pass, document])` (`document_plan`).
   A unit builds its examples, shuffles them, deals them round-robin to the output shards and
   spills them, grouped by shard, to the work directory.
3. reduce: each output shard gathers its examples from every unit (in unit order), shuffles
   them with `default_rng([seed, REDUCE_STREAM, shard])` and writes the TFRecord and its JSON
   sidecar (`albert_tf.features.sidecar_path`).

Memory: a worker holds one unit's examples; the reducer one shard's. Every file is written under
a temporary name and renamed, so a killed run never leaves a truncated file under a final name;
rerun with the same arguments, it skips the finished tokenizations, units and shards (the work
directory `.albert_pretraining_<hash>` beside the outputs is removed at the end).

Difference from the official script: it shuffles all examples of the corpus together before
dealing them to files; here examples are shuffled within a unit, dealt to shards, and shuffled
again within each shard, which keeps memory bounded by one shard.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import time

import numpy as np

from albert_tf.paths import atomic_copy, atomic_write
from albert_tf import features as F
from albert_tf.ownership import OutputLock, same_file
from albert_tf.training.progress import Progress
from albert_tf.records import encode_examples, remove_temporaries, write_file
from albert_tf.tokenization import Tokenizer, file_sha256, make_tokenizer
from albert_tf.data.pretraining import (GenerationParams, Vocabulary, instances_features,
                                        instances_of_plan,
                              plan_document)
from albert_tf.data.text_io import InputError, document_parts, expand_input_patterns
from albert_tf.data.token_cache import (TokenStore, is_tokenized, no_documents_error, tokenize_file,
                              tokenized_counts)

REDUCE_STREAM = 0x5EED  # separates the reducers' random streams from the units'
STRUCTURE_STREAM = 0xC4E7  # each document's chunking, per pass (`document_plan`)
FORMAT_VERSION = 3  # 2: per-document chunking streams (Beam keyed join); 3: one target per document
STATS = ("examples", "masked_positions", "sentence_order_label_1", "random_document",
          "short_target")


@dataclasses.dataclass(frozen=True)
class GenerationJob:
    """Everything that determines the output files."""

    input_files: tuple
    output_files: tuple
    spm_model_file: str | None  # None or "": the WordPiece `vocab_file` is the vocabulary
    do_lower_case: bool = True
    params: GenerationParams = GenerationParams()
    dupe_factor: int = 40
    random_seed: int = 12345
    tokens_per_unit: int = 1_000_000
    vocab_file: str | None = None  # a WordPiece vocabulary (without spm_model_file)

    def __post_init__(self):
        if not (self.spm_model_file or self.vocab_file):
            raise ValueError("Either --spm_model_file (SentencePiece) or --vocab_file alone "
                             "(WordPiece) is required.")
        if self.dupe_factor < 1:
            raise ValueError(f"--dupe_factor must be at least 1; got {self.dupe_factor}")
        if not self.output_files:
            raise ValueError("--output_file names no file")
        if len(set(self.output_files)) != len(self.output_files):
            raise ValueError(f"--output_file lists a file twice: {list(self.output_files)}")
        if self.tokens_per_unit < 1:
            raise ValueError(f"tokens_per_unit must be positive; got {self.tokens_per_unit}")
        if self.random_seed < 0:
            raise ValueError(f"--random_seed must be >= 0 for data generation; got "
                             f"{self.random_seed}")


    @property
    def tokenizer_files(self) -> tuple:
        """(spm_model_file, vocab_file) for `make_tokenizer`: the SentencePiece model, or the
        WordPiece vocabulary when there is none."""
        return (self.spm_model_file, None) if self.spm_model_file else (None, self.vocab_file)

    @property
    def vocabulary_file(self) -> str:
        """The file that defines the vocabulary (copied beside the outputs)."""
        return self.spm_model_file or self.vocab_file

    @property
    def vocabulary_flag(self) -> str:
        return "--spm_model_file" if self.spm_model_file else "--vocab_file"


def output_file_names(output_file: str, num_output_shards: int) -> list[str]:
    """Comma-separated names, or `PREFIX-00000-of-0000N.tfrecord` when `num_output_shards` > 1."""
    names = [n.strip() for n in output_file.split(",") if n.strip()]
    if num_output_shards < 1:
        raise ValueError(f"--num_output_shards must be at least 1; got {num_output_shards}")
    if num_output_shards > 1:
        if len(names) != 1:
            raise ValueError("--num_output_shards needs a single --output_file prefix, got "
                             f"{len(names)} names")
        return [f"{names[0]}-{i:05d}-of-{num_output_shards:05d}.tfrecord"
                for i in range(num_output_shards)]
    return names


# ---------------------------------------------------------------------------------------------
# Worker state (one per process) and the three kinds of tasks.
_WORKER = {}


def _init_worker(spm_model_file, vocab_file, do_lower_case):
    _WORKER["tokenizer"] = make_tokenizer(spm_model_file, vocab_file, do_lower_case)
    _WORKER["vocab"] = Vocabulary.from_tokenizer(_WORKER["tokenizer"])


def _worker_store(cache_prefixes) -> TokenStore:
    """This worker's document store over `cache_prefixes` (opened once)."""
    if _WORKER.get("store_prefixes") != cache_prefixes:
        _WORKER["store"], _WORKER["store_prefixes"] = TokenStore(cache_prefixes), cache_prefixes
    return _WORKER["store"]


def _tokenize_task(path, cache_prefix, part=None):
    return tokenize_file(path, _WORKER["tokenizer"], cache_prefix, part)


def document_plan(job: GenerationJob, store, dupe: int, doc: int):
    """The chunks of document `doc` in pass `dupe` (`albert_tf.data.pretraining.plan_document`),
    drawn from the document's own generator `default_rng([seed, STRUCTURE_STREAM, pass, doc])`: they
    depend on this document and the other documents' sentence counts only, not on the order in which
    units run nor on other documents' tokens."""
    rng = np.random.default_rng([job.random_seed, STRUCTURE_STREAM, dupe, doc])
    return plan_document(store, doc, job.params, rng)


def unit_examples(job: GenerationJob, store, vocab, block: int, dupe: int, doc_ids,
                  segments=None):
    """The examples of one (block, dupe pass) unit, shuffled and dealt round-robin to the output
    shards: (serialized records, int64 [n, len(STATS)] stats, per-shard index arrays into the
    records). Truncation, masking and the shuffle draw from `default_rng([seed, block, pass])`.
    Segments of other documents are read from `store`, or from `segments` ({request: tokens},
    the Beam pipeline's join). The local map phase and `albert_tf.data.beam_pipeline` both call
    it."""
    rng = np.random.default_rng([job.random_seed, block, dupe])
    params = job.params
    instances = []
    for doc in doc_ids:
        chunks = document_plan(job, store, dupe, int(doc))
        instances.extend(instances_of_plan(store, int(doc), chunks, params, vocab, rng,
                                           segments))
    records = encode_examples(instances_features(instances, params))
    stats = [(1, len(inst.masked_lm_positions), inst.next_sentence_label,
              int(inst.random_document), int(inst.short_target)) for inst in instances]
    num_shards = len(job.output_files)
    offset = (block * job.dupe_factor + dupe) % num_shards
    order = rng.permutation(len(records))
    shard_of = (np.arange(len(records)) + offset) % num_shards  # round-robin after the shuffle
    grouped = [order[shard_of == s] for s in range(num_shards)]
    stats = np.asarray(stats, np.int64).reshape(-1, len(STATS))
    return records, stats, grouped


def _unit_task(job: GenerationJob, unit_dir, block, dupe, doc_ids, cache_prefixes):
    """Builds the examples of one (block, pass) unit and spills them grouped by shard."""
    records, stats, grouped = unit_examples(job, _worker_store(cache_prefixes),
                                            _WORKER["vocab"], block, dupe, doc_ids)
    num_shards = len(job.output_files)
    lengths = np.array([len(records[i]) for g in grouped for i in g], np.int64)
    counts = np.array([len(g) for g in grouped], np.int64)
    shard_stats = np.zeros((num_shards, len(STATS)), np.int64)
    for s, g in enumerate(grouped):
        shard_stats[s] = stats[g].sum(0)
    name = os.path.join(unit_dir, f"unit-{block:06d}-{dupe:04d}")
    with atomic_write(name + ".bin", "wb") as f:
        for g in grouped:
            for i in g:
                f.write(records[i])
    with atomic_write(name + ".idx", "wb") as f:  # written last: marks the unit finished
        np.savez(f, counts=counts, lengths=lengths, stats=shard_stats)
    return len(records)


def _read_unit_shard(name, shard):
    with np.load(name + ".idx") as idx:
        counts, lengths, stats = idx["counts"], idx["lengths"], idx["stats"][shard]
    first = int(counts[:shard].sum())
    these = lengths[first:first + counts[shard]]
    start = int(lengths[:first].sum())
    with open(name + ".bin", "rb") as f:
        f.seek(start)
        blob = f.read(int(these.sum()))
    ends = np.cumsum(these)
    return [blob[e - n:e] for e, n in zip(ends.tolist(), these.tolist())], stats


# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _digit_comma_form(spm_model_file: str | None, spm_hash: str) -> str | None:
    """The digit-comma re-split form the ids of this SentencePiece vocabulary depend on, None
    where they depend on none (no piece ends in digit + comma, or a WordPiece vocabulary)."""
    if not spm_model_file:
        return None
    tokenizer = Tokenizer(spm_model_file)
    return tokenizer.digit_comma if tokenizer.resplit_table is not None else None


def compute_run_hash(job: GenerationJob, input_hashes, spm_hash) -> str:
    """The identity of a run: what determines its output bytes (recorded in each sidecar).
    With a vocabulary holding digit-comma pieces, the re-split form too: the data of the
    version that re-split them in the Hugging Face form only (no form recorded) is another
    run's, never resumed into or reused as this one's."""
    description = {
        "format_version": FORMAT_VERSION, "inputs": input_hashes, "spm": spm_hash,
        "outputs": [os.path.basename(o) for o in job.output_files],
        "do_lower_case": job.do_lower_case, "params": dataclasses.asdict(job.params),
        "dupe_factor": job.dupe_factor, "random_seed": job.random_seed,
        "tokens_per_unit": job.tokens_per_unit,
    }
    form = _digit_comma_form(job.spm_model_file, spm_hash)
    if form is not None:
        description["digit_comma"] = form
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


def document_blocks(document_tokens: np.ndarray, random_seed: int, tokens_per_unit: int):
    """Documents (numbered globally) in the seeded shuffled order, cut into blocks of about
    `tokens_per_unit` tokens: a list of lists of document numbers."""
    order = np.random.default_rng([random_seed]).permutation(len(document_tokens))
    sizes = np.asarray(document_tokens)[order]
    blocks, current, tokens = [], [], 0
    for doc, size in zip(order.tolist(), sizes.tolist()):
        current.append(doc)
        tokens += size
        if tokens >= tokens_per_unit:
            blocks.append(current)
            current, tokens = [], 0
    if current:
        blocks.append(current)
    return blocks


def _executor(num_workers, initargs):
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=num_workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker, initargs=initargs)


def _amount(result) -> int:
    """Examples made by a unit task, or tokens made by a tokenize task."""
    return result["tokens"] if isinstance(result, dict) else int(result)


def _run_tasks(tasks, pool, progress: Progress):
    """Runs `(fn, args)` tasks on the worker `pool`, or in this process when it is None
    (`_init_worker` called first); returns their results in task order."""
    results = [None] * len(tasks)
    if pool is None:
        for i, (fn, args) in enumerate(tasks):
            results[i] = fn(*args)
            progress.update(1, _amount(results[i]))
        return results
    futures = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(tasks)}
    try:
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            progress.update(1, _amount(results[i]))
    except BaseException as error:
        # Nothing may still write into the work directory when the caller removes it: the
        # tasks not started are cancelled and the running ones waited for. Tasks start in
        # order, so the first failed task in task order (the first bad file, or the first bad
        # piece of one) is known then, and its error is raised, as one worker would.
        for f in futures:
            f.cancel()
        concurrent.futures.wait(futures)
        failed = [(futures[f], f.exception()) for f in futures
                  if not f.cancelled() and f.exception() is not None]
        if failed and isinstance(error, Exception):
            raise min(failed, key=lambda pair: pair[0])[1] from None
        raise
    return results


def _check_existing_outputs(job, run_hash, work_dir):
    """Returns the shards already finished by this run; refuses to touch files of another."""
    finished = set()
    writing = os.path.join(work_dir, "writing")
    for shard, path in enumerate(job.output_files):
        sidecar = F.sidecar_path(path)
        if os.path.exists(sidecar):
            try:
                with open(sidecar, encoding="utf-8") as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                meta = {}
            if meta.get("run_hash") == run_hash and os.path.exists(path):
                finished.add(shard)
                continue
            raise InputError(
                f"{path} already exists from a different run (other inputs or flags). Remove it "
                "and its .json sidecar, or choose another --output_file; nothing was changed.")
        if os.path.exists(path) and not os.path.exists(os.path.join(writing, str(shard))):
            raise InputError(f"{path} already exists and was not written by this run. Remove "
                             "it or choose another --output_file; nothing was changed.")
    return finished


@dataclasses.dataclass(frozen=True)
class _Run:
    """One generation run: its job, identity and work directory."""

    job: GenerationJob
    run_hash: str
    work_dir: str
    inputs: list  # [{"path", "sha256"}]
    num_workers: int
    progress: bool
    pool: concurrent.futures.Executor | None = None  # None: the tasks run in this process

    @property
    def worker_args(self):
        return (*self.job.tokenizer_files, self.job.do_lower_case)

    def path(self, *parts):
        return os.path.join(self.work_dir, *parts)


MIN_PART_BYTES = 256 << 10  # the smallest piece of a file tokenized by one task


def tokenize_parts(input_files, num_workers: int) -> list[list[tuple]]:
    """Per input file, the byte ranges tokenized as separate tasks (`albert_tf.data.text_io.
    document_parts`): one range per file with one worker; with several, files cut at document
    boundaries into pieces of about a (2 x num_workers)-th of the corpus (at least
    `MIN_PART_BYTES`), so one large file does not leave the other workers idle. The token
    caches of a file's parts, read in order, are the file's: the outputs do not depend on it."""
    if num_workers == 1:
        return [[(0, None)] for _ in input_files]
    sizes = [os.path.getsize(path) for path in input_files]
    piece = max(MIN_PART_BYTES, -(-sum(sizes) // (2 * num_workers)))
    return [document_parts(path, -(-size // piece)) if size > piece else [(0, None)]
            for path, size in zip(input_files, sizes)]


def _tokenize_phase(run: _Run, created_work_dir: bool) -> list[str]:
    """1. Each input file (or piece of one, `tokenize_parts`) -> a token cache (skipping
    finished ones); returns the cache prefixes in document order. Bad input removes a work
    directory this run created (nothing left behind)."""
    job = run.job
    prefixes, todo, of_file = [], [], []
    for i, (path, parts) in enumerate(zip(job.input_files,
                                          tokenize_parts(job.input_files, run.num_workers))):
        for part in parts:
            whole = part == (0, None)
            # A piece's cache is named by its byte range: a rerun that cuts the file otherwise
            # (another --num_workers) never takes it for another piece.
            prefix = run.path("tokens", f"{i:05d}" if whole
                              else f"{i:05d}-bytes-{part[0]}-{part[1] or 'end'}")
            prefixes.append(prefix)
            of_file.append(i)
            if not is_tokenized(prefix):
                todo.append((_tokenize_task, (path, prefix, None if whole else part)))
    bar = Progress("tokenize", len(todo), items="tokens", enabled=run.progress)
    try:
        _run_tasks(todo, run.pool, bar)
        documents = np.zeros(len(job.input_files), np.int64)
        for prefix, i in zip(prefixes, of_file):
            documents[i] += tokenized_counts(prefix)["documents"]
        empty = np.flatnonzero(documents == 0)
        if len(empty):
            raise no_documents_error(job.input_files[int(empty[0])])
    except InputError:
        if created_work_dir:
            shutil.rmtree(run.work_dir, ignore_errors=True)
        raise
    bar.close()
    return prefixes


def _map_phase(run: _Run, prefixes) -> list[str]:
    """2. Units of (block, dupe pass) -> examples spilled per shard (skipping finished units);
    returns the unit names in unit order."""
    job = run.job
    blocks = document_blocks(TokenStore(prefixes).document_tokens(), job.random_seed,
                             job.tokens_per_unit)
    units = [(b, d) for b in range(len(blocks)) for d in range(job.dupe_factor)]
    unit_names = [run.path("units", f"unit-{b:06d}-{d:04d}") for b, d in units]
    todo = [(_unit_task, (job, run.path("units"), b, d, blocks[b], tuple(prefixes)))
            for (b, d), name in zip(units, unit_names) if not os.path.exists(name + ".idx")]
    bar = Progress("examples", len(todo), items="examples", enabled=run.progress)
    _run_tasks(todo, run.pool, bar)
    bar.close()
    return unit_names


def _shard_totals(unit_names, num_shards) -> np.ndarray:
    """[shard, stat] counts summed over the units' indexes."""
    totals = np.zeros((num_shards, len(STATS)), np.int64)
    for name in unit_names:
        with np.load(name + ".idx") as idx:
            totals += idx["stats"][:num_shards]
    return totals


def reduce_order(job: GenerationJob, shard: int, num_records: int) -> np.ndarray:
    """The order in which a shard's records (gathered in unit order) are written."""
    return np.random.default_rng([job.random_seed, REDUCE_STREAM, shard]).permutation(
        num_records)


def shard_metadata(job: GenerationJob, shard: int, counts: dict, total_examples: int,
                   vocab_size: int, spm_sha256: str, inputs: list, run_hash: str) -> dict:
    """The JSON sidecar of output shard `shard` (`albert_tf.features.sidecar_path`)."""
    path = job.output_files[shard]
    generation = dict(dataclasses.asdict(job.params), dupe_factor=job.dupe_factor,
                      do_lower_case=job.do_lower_case, random_seed=job.random_seed,
                      tokens_per_unit=job.tokens_per_unit)
    return {
        "format": F.SIDECAR_FORMAT, "format_version": F.SIDECAR_VERSION,
        "file": os.path.basename(path), "shard_index": shard,
        "num_shards": len(job.output_files),
        "num_examples": counts["examples"], "total_examples": total_examples,
        "max_seq_length": job.params.max_seq_length,
        "max_predictions_per_seq": job.params.max_predictions_per_seq,
        "vocab_size": vocab_size,
        ("spm_model_sha256" if job.spm_model_file else "vocab_file_sha256"): spm_sha256,
        # Beside the shards (`place_sentencepiece`), named relative to the sidecar: training
        # follows no path out of the dataset's directory.
        **({"spm_model_file": os.path.basename(job.spm_model_file)} if job.spm_model_file
           else {"vocab_file": os.path.basename(job.vocab_file)}),
        "counts": counts, "generation": generation, "input_files": inputs,
        "run_hash": run_hash,
    }


def _write_shard(run: _Run, shard: int, unit_names, counts: dict, total_examples: int,
                 tokenizer: Tokenizer):
    """3. (one shard) Gathers the shard's examples from every unit in unit order, shuffles them
    (seeded per shard), writes the TFRecord and then its sidecar (`albert_tf.records.write_file`:
    each under a temporary name renamed into place, the sidecar last: it marks the shard
    finished)."""
    job = run.job
    path = job.output_files[shard]
    records = []
    for name in unit_names:
        records.extend(_read_unit_shard(name, shard)[0])
    open(run.path("writing", str(shard)), "w").close()
    meta = shard_metadata(job, shard, counts, total_examples, tokenizer.vocab_size,
                          tokenizer.sha256, run.inputs, run.run_hash)
    write_file([records[i] for i in reduce_order(job, shard, len(records)).tolist()], path,
               meta)


def _reduce_phase(run: _Run, unit_names, finished, tokenizer) -> np.ndarray:
    """3. Writes every unfinished shard, one at a time; returns the [shard, stat] totals."""
    num_shards = len(run.job.output_files)
    totals = _shard_totals(unit_names, num_shards)
    total_examples = int(totals[:, 0].sum())
    if total_examples == 0:
        raise InputError("The inputs produced no examples.")
    empty = int((totals[:, 0] == 0).sum())
    if empty:
        shutil.rmtree(run.work_dir, ignore_errors=True)  # these outputs will not be written
        raise InputError(
            f"--num_output_shards {num_shards} is too many for the {total_examples:,} examples "
            f"the inputs make: {empty:,} files would be empty (and training refuses empty "
            f"files). Use fewer shards (at most {total_examples:,}); nothing was written.")
    place_sentencepiece(run.job, tokenizer.sha256)  # the vocabulary the sidecars name
    bar = Progress("write", num_shards - len(finished), items="examples", enabled=run.progress)
    for shard in range(num_shards):
        if shard not in finished:
            counts = dict(zip(STATS, totals[shard].tolist()))
            _write_shard(run, shard, unit_names, counts, total_examples, tokenizer)
            bar.update(1, counts["examples"])
    bar.close()
    return totals


def check_outputs_are_not_inputs(job: GenerationJob) -> None:
    """Refuses an output file that is also an input (or the SentencePiece model)."""
    for out in job.output_files:
        for source in tuple(job.input_files) + (job.vocabulary_file,):
            if "://" not in out and same_file(out, source):
                raise InputError(f"--output_file {out} is also an input ({source}); write the "
                                 "TFRecords to another file.")


def place_sentencepiece(job: GenerationJob, spm_sha256: str) -> str:
    """Copies the vocabulary file (the SentencePiece model, or the WordPiece vocabulary) beside
    the outputs (unless it is there), so the dataset holds its vocabulary and its sidecars name
    it relative to themselves; returns the path. A different file of that name already there is
    an error (sidecars of other data may name it)."""
    out_dir = os.path.dirname(os.path.abspath(job.output_files[0]))
    source = job.vocabulary_file
    target = os.path.join(out_dir, os.path.basename(source))
    if same_file(target, source):
        return target
    if os.path.exists(target):
        if file_sha256(target) == spm_sha256:
            return target
        raise InputError(
            f"{target} exists and is not {job.vocabulary_flag} {source}: the dataset's "
            "directory keeps the vocabulary its sidecars name, under its file name. "
            "Write the data to another directory, or rename one of the two files.")
    atomic_copy(source, target)
    return target


def _remove_stale_work(job: GenerationJob, out_dir: str, run_hash: str) -> None:
    """Work directories of earlier runs into the same outputs with other inputs or flags: that
    run can no longer finish (this one writes its outputs), so its work is removed."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if not name.startswith(".albert_pretraining_") or name.endswith(run_hash[:16]):
            continue
        try:
            with open(os.path.join(path, "job.json"), encoding="utf-8") as f:
                outputs = json.load(f).get("outputs")
        except (OSError, ValueError, AttributeError):
            continue
        if outputs == [os.path.abspath(o) for o in job.output_files]:
            shutil.rmtree(path, ignore_errors=True)


def generate(job: GenerationJob, num_workers: int = 1, progress: bool = True) -> dict:
    """Runs (or resumes) the generation; returns a summary with per-shard counts. The outputs
    are locked while they are written (`albert_tf.ownership`: a second run into the same
    `--output_file` is refused while this one lives)."""
    if num_workers < 1:
        raise ValueError(f"--num_workers must be at least 1; got {num_workers}")
    check_outputs_are_not_inputs(job)
    # Validates the special ids, and a --vocab_file beside a SentencePiece model.
    tokenizer = make_tokenizer(job.spm_model_file, job.vocab_file, job.do_lower_case)
    Vocabulary.from_tokenizer(tokenizer)  # refuses a vocabulary without [MASK] before any work
    with OutputLock(job.output_files[0], "--output_file", is_dir=False):
        return _generate(job, tokenizer, num_workers, progress)


def _generate(job: GenerationJob, tokenizer: Tokenizer, num_workers: int,
              progress: bool) -> dict:
    started = time.time()
    inputs = [{"path": os.path.abspath(p), "sha256": file_sha256(p)} for p in job.input_files]
    run_hash = compute_run_hash(job, [i["sha256"] for i in inputs], tokenizer.sha256)
    out_dir = os.path.dirname(os.path.abspath(job.output_files[0]))
    run = _Run(job, run_hash, os.path.join(out_dir, f".albert_pretraining_{run_hash[:16]}"),
               inputs, num_workers, progress)
    for path in job.output_files:  # what killed runs left (this process holds the lock)
        if os.path.isdir(os.path.dirname(os.path.abspath(path))):
            remove_temporaries(path)
            remove_temporaries(F.sidecar_path(path))
    finished = _check_existing_outputs(job, run_hash, run.work_dir)
    if len(finished) == len(job.output_files):
        return {"run_hash": run_hash, "already_complete": True,
                "outputs": list(job.output_files)}
    for path in job.output_files:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _remove_stale_work(job, out_dir, run_hash)
    created_work_dir = not os.path.exists(run.work_dir)
    for d in ("tokens", "units", "writing"):
        os.makedirs(run.path(d), exist_ok=True)
    with open(run.path("job.json"), "w", encoding="utf-8") as f:
        json.dump({"outputs": [os.path.abspath(o) for o in job.output_files]}, f)

    # One pool of workers for both parallel phases (each worker starts once).
    pool = _executor(num_workers, run.worker_args) if num_workers > 1 else None
    if pool is None:
        _init_worker(*run.worker_args)
    with pool or contextlib.nullcontext():
        run = dataclasses.replace(run, pool=pool)
        prefixes = _tokenize_phase(run, created_work_dir)
        unit_names = _map_phase(run, prefixes)
    totals = _reduce_phase(run, unit_names, finished, tokenizer)
    shutil.rmtree(run.work_dir, ignore_errors=True)
    return {"run_hash": run_hash, "already_complete": False, "outputs": list(job.output_files),
            "total_examples": int(totals[:, 0].sum()), "units": len(unit_names),
            "counts": dict(zip(STATS, totals.sum(0).tolist())),
            "seconds": round(time.time() - started, 2)}


def make_job(input_file, output_file, spm_model_file, num_output_shards=1, **kwargs):
    """A `GenerationJob` from official-style arguments (globs, comma lists, shard count)."""
    param_names = {f.name for f in dataclasses.fields(GenerationParams)}
    params = GenerationParams(**{k: kwargs.pop(k) for k in list(kwargs) if k in param_names})
    return GenerationJob(input_files=tuple(expand_input_patterns(input_file)),
                         output_files=tuple(output_file_names(output_file, num_output_shards)),
                         spm_model_file=spm_model_file, params=params, **kwargs)
