"""Speed and peak memory of data generation at 1x and 8x the bundled corpus, per runner: Beam's
FnApiRunner, Beam on a Dask cluster and the local generator; the runner process and each worker
process, sampled from /proc while the run goes.

    python -m bench.beam_memory                              # FnApiRunner, 1x and 8x, 2 workers
    python -m bench.beam_memory --runners FnApiRunner,dask,local --multiples 1,8
    python -m bench.beam_memory --code_dir ../old            # another checkout's code

The corpus is the bundled pretraining text (five Gutenberg novels and the WikiText-2 test split
prepared as the main job prepares them) copied k times into k input files (distinct documents to
the pipeline), an 8,000-piece vocabulary, sequence 128, `--dupe_factor` passes. FnApiRunner runs
in multi-processing mode (the local runner: it keeps every shuffle in the runner process, as
Dataflow's shuffle service keeps them off the workers; the workers run the bundles); dask starts
a local cluster of `--workers` processes (`albert_tf.data.dask_runner.dask_cluster`) in the measured
process; local is `albert_tf.data.generator.generate` with `--workers` processes. What scales with
the corpus on a cluster is the workers' memory: a side input of all documents sits in each worker, a
keyed join's documents pass through one at a time.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, write_results  # noqa: E402

SAMPLE = os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text")
flags.DEFINE_list("multiples", ["1", "8"], "Corpus sizes, in copies of the bundled corpus.")
flags.DEFINE_integer("workers", 2, "Worker processes (--direct_num_workers, --dask_workers, "
                     "--num_workers).")
flags.DEFINE_list("runners", ["FnApiRunner"], "FnApiRunner, dask and/or local.")
flags.DEFINE_integer("dupe_factor", 2, "Passes over the corpus.")
flags.DEFINE_integer("tokens_per_unit", 200_000, "Tokens per unit of work.")
flags.DEFINE_integer("shards_per_copy", 4, "Output shards per copy of the corpus: shards grow with "
                     "the corpus, as a user sizes them, so one shard's writer holds the same.")
flags.DEFINE_string("code_dir", ROOT,
                    "Checkout whose albert_tf.data.beam_pipeline runs (compare versions).")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "beam_memory"), "Results.")
FLAGS = flags.FLAGS

_CHILD = """
import json, os, sys
# the data package of the checkout measured (--code_dir): albert_tf/data, or data/ in a checkout
# from before it moved (an installed albert_tf would otherwise answer for an older checkout)
PACKAGE = "albert_tf.data" if os.path.exists(os.path.join("albert_tf", "data", "generator.py")) \
    else "data"
sys.path.insert(0, os.getcwd())
generator = __import__(PACKAGE + ".generator", fromlist=["generate"])
generate, make_job = generator.generate, generator.make_job
runner, inputs, out, vocab, dupe, unit, workers, shards = sys.argv[1:]
job = make_job(inputs, out, vocab, num_output_shards=int(shards), max_seq_length=128,
               max_predictions_per_seq=20, dupe_factor=int(dupe), tokens_per_unit=int(unit))
if runner == "local":
    summary = generate(job, num_workers=int(workers), progress=False)
elif runner == "dask":
    generate_with_beam = __import__(PACKAGE + ".beam_pipeline", fromlist=["x"]).generate_with_beam
    dask_cluster = __import__(PACKAGE + ".dask_runner", fromlist=["x"]).dask_cluster
    with dask_cluster(None, int(workers)) as address:
        summary = generate_with_beam(job, ["--runner=dask", f"--dask_client_address={address}"])
else:
    generate_with_beam = __import__(PACKAGE + ".beam_pipeline", fromlist=["x"]).generate_with_beam
    summary = generate_with_beam(job, ["--runner=FnApiRunner",
                                       "--direct_running_mode=multi_processing",
                                       f"--direct_num_workers={workers}"])
print("SUMMARY " + json.dumps({k: summary.get(k) for k in (
    "total_examples", "counts", "seconds", "largest_unit_corpus_bytes")}))
"""


def _rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid):
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        kids = []
        try:
            for task in os.listdir(f"/proc/{p}/task"):  # children of every thread
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        out += kids
        stack += kids
    return out


def _run(args, cwd):
    """Runs the child; samples every 0.1 s the RSS of the runner and of each descendant.
    Returns (stdout, runner peak MB, largest worker peak MB, peak of the sum MB)."""
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=cwd))
    peaks = {"runner": 0.0, "worker": 0.0, "total": 0.0}

    def sample():
        while proc.poll() is None:
            runner = _rss_mb(proc.pid)
            workers = [_rss_mb(p) for p in _descendants(proc.pid)]
            peaks["runner"] = max(peaks["runner"], runner)
            peaks["worker"] = max([peaks["worker"]] + workers)
            peaks["total"] = max(peaks["total"], runner + sum(workers))
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    started = time.time()
    thread.start()
    stdout, stderr = proc.communicate()
    peaks["process_seconds"] = time.time() - started
    thread.join()
    if proc.returncode:
        raise SystemExit(f"generation failed:\n{stderr[-3000:]}")
    return stdout, peaks


def main(argv):
    del argv
    from albert_tf.data.prepare_corpus import prepare_corpus
    from albert_tf.data.token_cache import tokenize_file
    from albert_tf.data.train_vocab import train_vocab
    from albert_tf.tokenization import Tokenizer

    code_dir = os.path.abspath(FLAGS.code_dir)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        books, wiki = os.path.join(tmp, "books.txt"), os.path.join(tmp, "wiki.txt")
        prepare_corpus(os.path.join(SAMPLE, "gutenberg", "*-0.txt"), books)
        prepare_corpus(os.path.join(SAMPLE, "wikitext-2-raw", "wiki.test.raw"), wiki,
                       paragraphs="lines", document_marker_regex=r"^ = [^=].* = $",
                       drop_line_regex=r"^ (= )+.*( =)+ $")
        vocab = train_vocab([books, wiki], os.path.join(tmp, "v8k"), vocab_size=8000,
                            num_threads=2)["model_file"]
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "wb") as f:
            for path in (books, wiki):
                with open(path, "rb") as g:
                    f.write(g.read().rstrip(b"\n") + b"\n\n")
        once = tokenize_file(corpus, Tokenizer(vocab), os.path.join(tmp, "count"))
        for k, runner in ((k, r) for k in map(int, FLAGS.multiples) for r in FLAGS.runners):
            inputs = os.path.join(tmp, f"x{k}")
            if not os.path.isdir(inputs):
                os.makedirs(inputs)
                for i in range(k):
                    shutil.copy(corpus, os.path.join(inputs, f"part{i:02d}.txt"))
            out = os.path.join(tmp, f"out{k}-{runner}", "train")
            stdout, peaks = _run(
                [sys.executable, "-c", _CHILD, runner, os.path.join(inputs, "*.txt"), out, vocab,
                 str(FLAGS.dupe_factor), str(FLAGS.tokens_per_unit), str(FLAGS.workers),
                 str(FLAGS.shards_per_copy * k)],
                code_dir)
            summary = json.loads(stdout.split("SUMMARY ", 1)[1])
            examples = summary["total_examples"]
            row = {"runner": runner, "multiple": k, "shards": FLAGS.shards_per_copy * k,
                   "documents": k * once["documents"],
                   "tokens": k * once["tokens"], "examples": examples,
                   "seconds": summary["seconds"],
                   "process_seconds": round(peaks["process_seconds"], 2),
                   # whole process (start-up, a Dask cluster's start and stop included)
                   "examples_per_s": round(examples / peaks["process_seconds"], 1),
                   "examples_per_s_per_worker": round(
                       examples / peaks["process_seconds"] / FLAGS.workers, 1),
                   "runner_peak_mb": round(peaks["runner"]),
                   "worker_peak_mb": round(peaks["worker"]),
                   "total_peak_mb": round(peaks["total"]),
                   # what this pipeline held of the corpus for its largest unit (a Beam metric;
                   # None where the runner or the code does not report it), and what a side input
                   # of the corpus (tokens, sentence offsets) weighs: every Flink / Spark worker
                   # would hold it
                   "largest_unit_corpus_kb": (summary["largest_unit_corpus_bytes"] / 1024
                                              if summary.get("largest_unit_corpus_bytes")
                                              else None),
                   "corpus_as_side_input_mb": k * (4 * once["tokens"] + 8 * (
                       once["sentences"] + once["documents"])) / 2**20}
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = _table(rows, code_dir)
    write_results(FLAGS.output_dir, "beam_memory", {"workers": FLAGS.workers,
                                                    "runners": FLAGS.runners,
                                                    "dupe_factor": FLAGS.dupe_factor,
                                                    "code_dir": code_dir, "rows": rows}, table)
    return 0


def _table(rows, code_dir: str) -> str:
    """The Markdown table of the measured `rows`."""
    lines = [f"Data generation ({FLAGS.workers} worker processes, seq 128, dupe_factor "
             f"{FLAGS.dupe_factor}, {FLAGS.tokens_per_unit:,} tokens per unit; code: {code_dir})",
             "",
             "| runner | corpus | documents | tokens | shards | examples | process s | "
             "examples/s | per worker | runner peak MB | largest worker peak MB | "
             "all processes MB | largest unit's corpus KB | corpus as a side input MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['runner']} | {r['multiple']}x | {r['documents']:,} | "
                     f"{r['tokens']:,} | {r['shards']} | {r['examples']:,} | "
                     f"{r['process_seconds']:.0f} | {r['examples_per_s']:,.0f} | "
                     f"{r['examples_per_s_per_worker']:,.0f} | {r['runner_peak_mb']} | "
                     f"{r['worker_peak_mb']} | {r['total_peak_mb']} | "
                     + (f"{r['largest_unit_corpus_kb']:,.0f}" if r["largest_unit_corpus_kb"]
                        else "-")
                     + f" | {r['corpus_as_side_input_mb']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(app.run(main))
