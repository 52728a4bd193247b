"""Pretraining-data generation speed, whole process, beside Google's script on the same work.

    python -m bench.data_generation                       # seq 128, dupe 10, 1 and 2 workers,
                                                          # the novels x1 and x8, 3 rounds
    python -m bench.data_generation --seq_lengths 128,512 --multiples 1 --rounds 1 --official=false
    python -m bench.data_generation --doc docs/benchmarks.md   # and rewrite its generated section

Prepares the bundled novels (`albert_tf.data.prepare_corpus`) and trains an 8,000-piece
SentencePiece model on them once, then times whole processes, as a user runs them, from start to
exit (start-up, tokenization, examples, TFRecord writing):

- ours: `python -m albert_tf.data.create_pretraining_data ... --num_workers W`;
- Google's: `python -m albert.create_pretraining_data` from `../shared/official_albert`
  (unmodified; skipped where that directory is missing), with the same input file,
  SentencePiece model and flags (`--do_lower_case --max_seq_length --max_predictions_per_seq
  --dupe_factor`, its defaults for the rest, which are ours).

The corpus "xK" is K copies of the prepared novels in K files. Rounds alternate the programs
(official, ours with each worker count, per corpus size), so a slow minute of the machine
touches all of them. Examples/s is examples written over the process's wall time; the two
programs write different numbers of examples from the same text (their draws differ), so each
is divided by its own count. Results: `--output` (JSON, read by `bench.projection`); with
`--doc`, the section between `<!-- bench.data_generation: begin -->` and its end marker in that
file is rewritten from them.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, machine, replace_section  # noqa: E402

OFFICIAL_DIR = os.path.join(ROOT, "..", "shared", "official_albert")
flags.DEFINE_string("corpus", os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text",
                                           "gutenberg", "*-0.txt"), "Raw text files (glob).")
flags.DEFINE_list("seq_lengths", ["128"], "Sequence lengths.")
flags.DEFINE_list("workers", ["1", "2"], "Worker counts (ours).")
flags.DEFINE_list("multiples", ["1", "8"], "Corpus sizes, in copies of the prepared novels.")
flags.DEFINE_integer("dupe_factor", 10, "Passes over the corpus.")
flags.DEFINE_integer("rounds", 3, "Rounds; each runs every program once per setting.")
flags.DEFINE_boolean("official", True, "Time Google's script too (at x1 only: at x8 it would "
                     "take about 10 minutes a round), where ../shared/official_albert exists.")
flags.DEFINE_string("output", os.path.join("bench_results", "data_generation.json"),
                    "Results (JSON).")
flags.DEFINE_string("doc", None, "A Markdown file whose generated section to rewrite.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Predictions per sequence (seq 128); "
                     "seq 512 uses 76 as the official recipe.")
FLAGS = flags.FLAGS


def _predictions(seq: int) -> int:
    return FLAGS.max_predictions_per_seq if seq <= 128 else 76


def _flags(corpus, output, model, seq):
    return [f"--input_file={corpus}", f"--output_file={output}", f"--spm_model_file={model}",
            "--do_lower_case", f"--max_seq_length={seq}",
            f"--max_predictions_per_seq={_predictions(seq)}", f"--dupe_factor={FLAGS.dupe_factor}"]


def _timed(args, env, cwd) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(args)}\n{proc.stderr[-3000:]}")
    return elapsed


def run_ours(corpus, output, model, seq, workers, tmp) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    seconds = _timed([sys.executable, "-m", "albert_tf.data.create_pretraining_data",
                      *_flags(corpus, output, model, seq), f"--num_workers={workers}",
                      "--noprogress"], env, tmp)
    with open(output + ".json", encoding="utf-8") as f:
        return seconds, json.load(f)["num_examples"]


def run_official(corpus, output, model, seq, tmp) -> tuple[float, int]:
    from albert_tf.input_pipeline import count_records

    official = os.path.abspath(OFFICIAL_DIR)
    env = dict(os.environ, PYTHONPATH=f"{official}:{official}/shims")
    seconds = _timed([sys.executable, "-m", "albert.create_pretraining_data",
                      *_flags(corpus, output, model, seq),
                      f"--vocab_file={model[:-len('.model')]}.vocab"], env, tmp)
    return seconds, count_records(output)


def summarize(rows) -> list[dict]:
    """Per (program, workers, corpus multiple, seq): examples and the rounds' examples/s."""
    groups = {}
    for r in rows:
        key = (r["program"], r["workers"], r["multiple"], r["seq_length"])
        groups.setdefault(key, []).append(r)
    out = []
    for (program, workers, multiple, seq), rs in sorted(groups.items(),
                                                        key=lambda kv: (kv[0][3], kv[0][2],
                                                                        kv[0][0] != "official",
                                                                        kv[0][1])):
        rates = [r["examples"] / r["seconds"] for r in rs]
        out.append({"program": program, "workers": workers, "multiple": multiple,
                    "seq_length": seq, "examples": rs[0]["examples"], "rounds": len(rs),
                    "seconds_mean": statistics.mean(r["seconds"] for r in rs),
                    "examples_per_s_mean": statistics.mean(rates),
                    "examples_per_s_min": min(rates), "examples_per_s_max": max(rates)})
    return out


def markdown(results) -> str:
    summary = results["summary"]
    lines = [f"Whole processes (start to exit), the bundled novels prepared (x1: "
             f"{results['corpus_documents']} documents, {results['corpus_tokens']:,} pieces of an "
             f"8k SentencePiece model; xK: K copies in K files), dupe_factor "
             f"{results['dupe_factor']}, {results['rounds']} rounds alternating the programs; "
             f"{results['machine']}; {results['when']}. Generated by `python -m "
             f"bench.data_generation` from `{results['output']}`.", "",
             "| seq | corpus | program | workers | examples | seconds (mean) | examples/s: mean "
             "(min-max) | x official | x one worker |", "|---|---|---|---|---|---|---|---|---|"]
    for row in summary:
        official = next((o for o in summary if o["program"] == "official"
                         and o["seq_length"] == row["seq_length"]
                         and o["multiple"] == row["multiple"]), None)
        single = next((o for o in summary if o["program"] == row["program"] == "ours"
                       and o["workers"] == 1 and o["seq_length"] == row["seq_length"]
                       and o["multiple"] == row["multiple"]), None)
        rate = row["examples_per_s_mean"]
        lines.append(
            f"| {row['seq_length']} | x{row['multiple']} | "
            f"{'Google' if row['program'] == 'official' else 'ours'} | {row['workers']} | "
            f"{row['examples']:,} | {row['seconds_mean']:.1f} | {rate:,.0f} "
            f"({row['examples_per_s_min']:,.0f}-{row['examples_per_s_max']:,.0f}) | "
            + (f"{rate / official['examples_per_s_mean']:.1f}x" if official else "-") + " | "
            + (f"{rate / single['examples_per_s_mean']:.2f}x" if single else "-") + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    from albert_tf.tokenization import Tokenizer
    from albert_tf.data.prepare_corpus import prepare_corpus
    from albert_tf.data.token_cache import tokenize_file
    from albert_tf.data.train_vocab import train_vocab

    official = FLAGS.official and os.path.isdir(OFFICIAL_DIR)
    if FLAGS.official and not official:
        print(f"{OFFICIAL_DIR} is missing: Google's script is not timed.", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        books = os.path.join(tmp, "books.txt")
        counts = prepare_corpus(FLAGS.corpus, books)
        model = train_vocab(books, os.path.join(tmp, "v8k"), vocab_size=8000)["model_file"]
        tokens = tokenize_file(books, Tokenizer(model), os.path.join(tmp, "count"))["tokens"]
        with open(books, encoding="utf-8") as f:
            words = sum(len(line.split()) for line in f)
        corpora = {}
        for k in map(int, FLAGS.multiples):
            directory = os.path.join(tmp, f"x{k}")
            os.makedirs(directory)
            for i in range(k):
                shutil.copy(books, os.path.join(directory, f"part{i:02d}.txt"))
            corpora[k] = os.path.join(directory, "*.txt") if k > 1 else books
        print(f"corpus: {counts['documents']} documents, {words:,} words, {tokens:,} pieces; "
              f"dupe_factor={FLAGS.dupe_factor}; {machine()}", flush=True)
        for rnd in range(FLAGS.rounds):
            for seq in map(int, FLAGS.seq_lengths):
                for k, corpus in corpora.items():
                    runs = ([("official", 1)] if official and k == 1 else []) + [
                        ("ours", int(w)) for w in FLAGS.workers]
                    for program, workers in runs:
                        out = os.path.join(tmp, "out", f"{program}-{workers}-{k}-{seq}",
                                           "train.tfrecord")
                        os.makedirs(os.path.dirname(out))
                        seconds, n = (run_official(books, out, model, seq, tmp)
                                      if program == "official"
                                      else run_ours(corpus, out, model, seq, workers, tmp))
                        shutil.rmtree(os.path.join(tmp, "out"))
                        rows.append({"round": rnd, "program": program, "workers": workers,
                                     "multiple": k, "seq_length": seq, "examples": n,
                                     "seconds": seconds, "examples_per_s": n / seconds})
                        print(f"round {rnd}  seq {seq}  x{k}  {program:8s} {workers} worker(s): "
                              f"{n:8,} examples in {seconds:6.1f} s = {n / seconds:8,.0f} "
                              "examples/s", flush=True)
    results = {"dupe_factor": FLAGS.dupe_factor, "rounds": FLAGS.rounds, "machine": machine(),
               "cpus": os.cpu_count(), "corpus_documents": counts["documents"],
               "corpus_words": words, "corpus_tokens": tokens, "output": FLAGS.output,
               "when": time.strftime("%Y-%m-%d %H:%M"), "rows": rows, "summary": summarize(rows)}
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
    with open(FLAGS.output, "w") as f:
        json.dump(results, f, indent=2)
    table = markdown(results)
    print(table)
    if FLAGS.doc:
        replace_section(FLAGS.doc, "bench.data_generation", table)


if __name__ == "__main__":
    sys.exit(app.run(main))
