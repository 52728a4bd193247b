"""Scaling on paper: data generation on Beam workers, pretraining on TPU pod slices and serving
replicas, projected from the figures the other benchmarks measured on this machine.

    python -m bench.data_generation --seq_lengths 128,512
    python -m bench.beam_memory
    python -m bench.compare --peer_python .venv-peers/bin/python
    python -m bench.serving_load
    python -m bench.projection                     # reads their JSON, writes docs/scaling.md

Every projection prints the measured figure it starts from and the assumptions it adds (the
`--` flags below, each stated in the output). Nothing here is measured at scale: this machine
reaches no TPU, no cluster; the page says how far each line is from a measurement.
"""

import json
import math
import os
import sys
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("bench_results")
flags.DEFINE_string("results", RESULTS, "Where the benchmarks wrote their JSON.")
flags.DEFINE_float("corpus_words", 3.3e9, "Pretraining corpus words (BookCorpus 0.8B + English "
                   "Wikipedia 2.5B, the BERT/ALBERT corpus of 16 GB).")
flags.DEFINE_integer("dupe_factor", 40, "Passes of data generation (official default).")
flags.DEFINE_integer("max_seq_length", 512, "Pretraining sequence length (official recipe).")
flags.DEFINE_integer("predictions", 20, "max_predictions_per_seq (official ALBERT).")
flags.DEFINE_integer("batch_size", 4096, "Global batch (official ALBERT).")
flags.DEFINE_integer("steps", 125_000, "Training steps (official ALBERT).")
flags.DEFINE_string("preset", "albert-base", "Model.")
flags.DEFINE_list("model_flops_utilization", ["0.4"], "Assumed fractions of a TPU's bf16 peak "
                  "besides the one measured here for the training step on this CPU.")
flags.DEFINE_list("serving_targets", ["100", "1000", "10000"], "Sentences per second to serve.")
flags.DEFINE_string("output", os.path.join("docs", "scaling.md"), "Markdown written here.")
FLAGS = flags.FLAGS

# Public bf16 peaks per chip (Google Cloud TPU documentation): v3 123 TFLOP/s (2 cores, 32 GB
# HBM), v4 275 TFLOP/s (32 GB HBM).
TPU_CHIPS = {"v3-8": ("v3", 4), "v3-32": ("v3", 16), "v3-128": ("v3", 64),
             "v3-512": ("v3", 256), "v4-8": ("v4", 4), "v4-32": ("v4", 16),
             "v4-128": ("v4", 64), "v4-512": ("v4", 256)}
TPU_PEAK_TFLOPS = {"v3": 123.0, "v4": 275.0}


def _load(name):
    path = os.path.join(FLAGS.results, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _data_generation(lines):
    gen, beam = _load("data_generation.json"), _load(os.path.join("beam_memory",
                                                                   "beam_memory.json"))
    lines += ["## Data generation", ""]
    if not gen:
        lines += ["(no `bench.data_generation` results: run it first)", ""]
        return
    ours = [r for r in gen.get("summary", gen["rows"]) if r.get("program", "ours") == "ours"
            and r["workers"] == 1 and r.get("multiple", 1) == 1]
    rate = {r["seq_length"]: r.get("examples_per_s_mean", r.get("examples_per_s")) for r in ours}
    seq = FLAGS.max_seq_length if FLAGS.max_seq_length in rate else max(rate)
    examples_512 = [r for r in ours if r["seq_length"] == seq][0]
    per_pass_per_token = examples_512["examples"] / gen["dupe_factor"] / gen["corpus_tokens"]
    pieces_per_word = gen["corpus_tokens"] / gen["corpus_words"]
    tokens = FLAGS.corpus_words * pieces_per_word
    examples = tokens * per_pass_per_token * FLAGS.dupe_factor
    core_hours = examples / rate[seq] / 3600
    lines += [f"Measured (one worker process, local generator, bundled novels): {rate[seq]:,.0f} "
              f"examples/s at seq {seq}; {per_pass_per_token * 1e3:.2f} examples per 1,000 "
              f"pieces per pass; {pieces_per_word:.2f} pieces per word (8k vocabulary; a 30k "
              "one cuts words into fewer pieces, so this overstates the work)."]
    fnapi = [r for r in (beam or {}).get("rows", ())
             if r.get("runner", "FnApiRunner") == "FnApiRunner"]
    if fnapi:
        big = max(fnapi, key=lambda r: r["multiple"])
        beam_rate = big["examples"] / big["seconds"] / beam["workers"]
        lines += [f"Beam (FnApiRunner, {beam['workers']} workers, {big['multiple']}x the bundled "
                  f"corpus, seq 128): {beam_rate:,.0f} examples/s per worker, everything "
                  f"included (the local generator at seq 128: "
                  f"{rate.get(128, float('nan')):,.0f} per worker: the local runner's "
                  f"shuffles cost the rest); largest worker {big['worker_peak_mb']} MB on the "
                  "local runner, which hands a worker its whole share of a stage (docs/data.md: "
                  "what a Flink or Spark worker holds is one unit, or one shard when writing, and "
                  "the plan, 20 bytes per document); the largest unit held "
                  + (f"{big['largest_unit_corpus_kb']:,.0f} KB" if big.get("largest_unit_corpus_kb")
                     else "(not reported)")
                  + f" of the corpus against {big['corpus_as_side_input_mb']:.1f} MB for the "
                  "corpus as a side input."]
    dask = [r for r in (beam or {}).get("rows", ()) if r.get("runner") == "dask"]
    if dask:
        big = max(dask, key=lambda r: r["multiple"])
        lines += [f"Beam on Dask (a local cluster of {beam['workers']} worker processes, "
                  f"{big['multiple']}x the bundled corpus, seq 128): "
                  f"{big['examples_per_s_per_worker']:,.0f} examples/s per worker, the whole "
                  f"process (the cluster's start and stop included); largest worker "
                  f"{big['worker_peak_mb']} MB. The corpus is read and tokenized once more for "
                  "every task that reads the plan side input (docs/data.md \"On Dask\")."]
    lines += ["", f"Assumed: {FLAGS.corpus_words / 1e9:.1f}B words, dupe_factor "
              f"{FLAGS.dupe_factor}, seq {seq}, throughput per worker core as measured and "
              "linear in workers (units are independent; the shuffles are the runner's).", "",
              "| | value |", "|---|---|",
              f"| pieces | {tokens / 1e9:.2f}B |",
              f"| examples ({FLAGS.dupe_factor} passes) | {examples / 1e6:,.0f}M |",
              f"| TFRecord bytes (about 1.5 KB/example at 128, x4 at 512) | "
              f"{examples * 1.5e3 * seq / 128 / 1e12:.1f} TB |",
              f"| core-hours | {core_hours:,.0f} |"]
    for workers in (16, 64, 256):
        lines.append(f"| wall-clock on {workers} workers of 4 cores | "
                     f"{core_hours / (workers * 4):,.1f} h |")
    lines.append("")


def _pretraining(lines):
    from albert_tf.analysis.flops import forward_flops, model_dims

    compare = _load(os.path.join("compare", "compare.json"))
    dims = model_dims(FLAGS.preset)
    step = 3 * forward_flops(dims, FLAGS.batch_size, FLAGS.max_seq_length, FLAGS.predictions)
    total = step * FLAGS.steps
    lines += ["## Pretraining", "",
              f"{FLAGS.preset}, the official recipe: batch {FLAGS.batch_size}, seq "
              f"{FLAGS.max_seq_length}, {FLAGS.steps:,} steps: {step / 1e15:.1f} PFLOP per step "
              f"(analytic, `albert_tf.analysis.flops`; backward = 2 x forward), "
              f"{total / 1e18:,.0f} EFLOP in all."]
    utilizations = [float(u) for u in FLAGS.model_flops_utilization]
    cpu = None
    if compare:
        ours = [r for r in compare["rows"] if r.get("implementation") == "albert_tf"
                and r.get("case") == "train" and r.get("padding") == "removed"
                and "fraction_of_peak" in r]
        for r in sorted(ours, key=lambda r: r["dtype"]):
            lines.append(f"Measured here: our training step, {r['dtype']}, batch "
                         f"{compare['batch_size']} x seq {compare['seq_length']}: "
                         f"{r['gflops']:.0f} GFLOP/s = {r['fraction_of_peak']:.0%} of this CPU's "
                         "matmul peak.")
            if r["dtype"] == "bfloat16":
                utilizations = sorted(set(utilizations + [round(r["fraction_of_peak"], 2)]))
            cpu = r if cpu is None or r["gflops"] > cpu["gflops"] else cpu
    if cpu:
        years = total / (cpu["gflops"] * 1e9) / 3600 / 24 / 365
        lines.append(f"On this 2-core machine at that rate the recipe would take {years:,.0f} "
                     "years.")
    lines += ["", "Assumed: bf16 peak per chip 123 TFLOP/s (v3), 275 (v4); the fraction of it "
              "reached (model FLOP utilization) as listed - the fraction our step reaches here on "
              "a CPU is an optimistic bound, 40% a common one for BERT-base-sized models on TPUs; "
              "data parallel, the batch split evenly over the cores.", "",
              "| slice | chips | per-core batch | " + " | ".join(
                  f"hours at {u:.0%}" for u in utilizations) + " |",
              "|---|---|---|" + "---|" * len(utilizations)]
    for name, (gen, chips) in TPU_CHIPS.items():
        cores = chips * (2 if gen == "v3" else 1)
        per_core = FLAGS.batch_size / cores
        hours = [total / (chips * TPU_PEAK_TFLOPS[gen] * 1e12 * u) / 3600 for u in utilizations]
        lines.append(f"| {name} | {chips} | {per_core:g} | "
                     + " | ".join(f"{h:,.1f}" for h in hours) + " |")
    lines.append("")


def _serving(lines):
    load = _load(os.path.join("serving_load", "serving_load.json"))
    lines += ["## Serving", ""]
    if not load:
        lines += ["(no `bench.serving_load` results: run it first)", ""]
        return
    one = load["requests"].get("1")
    from albert_tf.export.saved_model import BATCHING

    def fields(p):  # (max, timeout, threads) of a point's batching
        config = p.get("config")
        if config:
            return (config["max_batch_size"], config["batch_timeout_micros"],
                    config["num_batch_threads"])
        parts = p["batching"].split(":")
        return tuple(int(x) for x in parts[:3]) if len(parts) == 3 else None

    exported = (BATCHING["max_batch_size"], BATCHING["batch_timeout_micros"],
                BATCHING["num_batch_threads"])
    shipped = [p for p in one["points"] if fields(p) == exported] or one["points"]
    best = max(shipped, key=lambda p: p["sentences_per_s"])
    alone = [p for p in one["points"] if p["batching"] == "none" and p["clients"] == 1][0]
    lines += [f"Measured: one replica = this 2-core machine, {load['preset']} classifier, "
              f"one-sentence requests, with the exported batching_parameters "
              f"(max_batch_size:batch_timeout_micros:num_batch_threads "
              f"{':'.join(map(str, fields(best)))}): {best['sentences_per_s']:.1f} "
              f"sentences/s at {best['clients']} clients (p50 {best['p50_ms']:.0f} ms, p99 "
              f"{best['p99_ms']:.0f} ms); one client without batching {alone['sentences_per_s']:.1f}"
              f"/s at p50 {alone['p50_ms']:.0f} ms.", "",
              "Assumed: replicas independent behind a load balancer (linear), each loaded as "
              "measured; a replica of more cores scales by cores until its batch no longer "
              "fills them.", "", "| sentences/s | 2-core replicas | cores |", "|---|---|---|"]
    for target in map(float, FLAGS.serving_targets):
        replicas = math.ceil(target / best["sentences_per_s"])
        lines.append(f"| {target:,.0f} | {replicas:,} | {2 * replicas:,} |")
    lines.append("")


def main(argv):
    del argv
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = info.split("model name", 1)[1].split(":", 1)[1].split("\n", 1)[0].strip()
        cpu += f", {os.cpu_count()} cores" + (", avx512_bf16" if "avx512_bf16" in info else "")
    except (OSError, IndexError):
        pass
    lines = ["# Scaling on paper", "",
             f"Generated by `python -m bench.projection` ({time.strftime('%Y-%m-%d')}, {cpu}) "
             f"from the JSON the benchmarks wrote to `{FLAGS.results}/`: `bench.data_generation "
             "--seq_lengths 128,512`, `bench.beam_memory`, `bench.compare`, "
             "`bench.serving_load`. Measured figures are this machine's; each projection "
             "multiplies them by the assumptions stated beside it. Nothing here ran at scale: "
             "this machine reaches no TPU and no cluster.", ""]
    _data_generation(lines)
    _pretraining(lines)
    _serving(lines)
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
    with open(FLAGS.output, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
