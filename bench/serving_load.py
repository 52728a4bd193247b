"""Serving under concurrent load, as TF Serving runs an export: p50/p99 latency and throughput at
1, 4 and 16 clients, one-sentence and 32-sentence requests, without and with batching.

    python -m bench.serving_load                      # albert-base classifier, ~12 min on 2 cores
    python -m bench.serving_load --seconds 5 --clients 1,4

An albert-base classifier (8k SentencePiece vocabulary trained on the bundled novels,
`max_seq_length` 128, remove_padding as exported by default) is exported and loaded by the C++
loader (`export/serving_loader.cc`: `LoadSavedModel` "serve" into one session,
`Session::Run` of `serving_default` concurrently from N client threads, as the server's request
threads do). Each client sends its request again as soon as its answer comes, for `--seconds`
after `--warmup` untimed runs. Requests: one SST-2 dev sentence, and the first 32 SST-2 dev
sentences (1,056 pieces, the longest 64). Batching configurations (`--batching`): `none`,
`shipped` (`export.saved_model.BATCHING`, what every export's batching_parameters.txt holds) and
each `max_batch_size:timeout_micros:threads[:allowed sizes separated by /]`, replayed by the
loader's batcher as TF Serving's batching session handles a batching_parameters file.

The floor: FLOPs of the request's real tokens (`albert_tf.analysis.flops.encoder_flops`) over
the machine's float32 matmul peak (best of 10 at the model's shapes, `bench.compare --cases
matmul`): no implementation answers faster on this CPU, and throughput cannot exceed peak /
FLOPs per sentence. Writes `OUTPUT_DIR/serving_load.{json,md}`.
"""

import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from bench import ROOT, novels_vocab, sst2_dev_sentences, write_results  # noqa: E402

flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_integer("max_seq_length", 128, "max_seq_length of the export.")
flags.DEFINE_list("clients", ["1", "4", "16"], "Concurrent clients.")
flags.DEFINE_list("requests", ["1", "32"], "Sentences per request.")
flags.DEFINE_list("batching", ["none", "shipped", "32:2000:1", "32:0:1", "32:5000:1:8/16/32",
                                "128:5000:1"],
                  "none; shipped (export.saved_model.BATCHING, what batching_parameters.txt "
                  "holds); or max_batch_size:batch_timeout_micros:num_batch_threads"
                  "[:allowed_batch_sizes separated by /].")
flags.DEFINE_bool("append", False, "Add the points to OUTPUT_DIR/serving_load.json (same preset "
                  "and sequence length; a point measured again is replaced).")
flags.DEFINE_float("seconds", 10.0, "Timed seconds per point.")
flags.DEFINE_integer("warmup", 3, "Untimed runs per point.")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "serving_load"), "Results.")
FLAGS = flags.FLAGS


def _peak_gflops(work) -> dict:
    out = os.path.join(work, "peak")
    subprocess.run([sys.executable, "-m", "bench.compare", "--cases", "matmul", "--dtypes",
                    "float32", "--rounds", "1", "--peak_runs", "10", "--preset", FLAGS.preset,
                    "--output_dir", out], cwd=ROOT, check=True, capture_output=True, text=True)
    with open(os.path.join(out, "compare.json")) as f:
        row = json.load(f)["rows"][0]
    return {"gflops": row["gflops"], "shapes": row["shapes"]}


def _export(work):
    """(version directory, SentencePiece model) of a randomly initialized classifier."""
    import dataclasses

    from albert_tf import AlbertClassifier, AlbertConfig
    from albert_tf.tokenization import Tokenizer
    from export.saved_model import export_saved_model

    spm = novels_vocab(work)
    config = dataclasses.replace(AlbertConfig.from_preset(FLAGS.preset),
                                 vocab_size=Tokenizer(spm).vocab_size)
    model = AlbertClassifier(config, num_labels=2)
    return export_saved_model(model, os.path.join(work, "classifier"), spm,
                              max_seq_length=FLAGS.max_seq_length), spm


def _batching(spec: str):
    """`max:timeout:threads[:a/b/c]` or "shipped" -> the batching_parameters fields, or None for
    "none"."""
    if spec == "none":
        return None
    if spec == "shipped":
        from export.saved_model import BATCHING

        return dict(BATCHING)
    parts = spec.split(":")
    config = {"max_batch_size": int(parts[0]), "batch_timeout_micros": int(parts[1]),
              "num_batch_threads": int(parts[2])}
    if len(parts) > 3:
        config["allowed_batch_sizes"] = [int(x) for x in parts[3].split("/")]
    return config


def _load_point(binary, info, saved_model, text, clients, batching):
    from export.cc_loader import run_load

    r = run_load(binary, saved_model, info["op_libraries"], {"text": text}, clients,
                 FLAGS.seconds, FLAGS.warmup, _batching(batching))
    ms = r["latencies_ms"]
    point = {"clients": clients, "batching": batching, "requests": r["requests"],
             "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
             "mean_ms": float(ms.mean()), "requests_per_s": r["requests"] / r["elapsed_s"],
             "sentences_per_s": r["requests"] * r["rows_per_request"] / r["elapsed_s"]}
    if r.get("batches"):
        point["mean_batch_rows"] = r["batched_rows"] / r["batches"]
        point["padded_rows"] = r["padded_rows"]
    return point


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from albert_tf.analysis.flops import encoder_flops, model_dims
    from export.cc_loader import compile_loader, tensorflow_info

    os.makedirs(FLAGS.output_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="serving_load-")
    peak = _peak_gflops(work)
    saved_model, _ = _export(work)
    info = tensorflow_info()
    binary = compile_loader(info, os.path.join(work, "serving_loader"))
    fn = tf.saved_model.load(saved_model).signatures["serving_default"]
    dims = model_dims(FLAGS.preset)
    results = {"preset": FLAGS.preset, "max_seq_length": FLAGS.max_seq_length,
               "cpu_count": os.cpu_count(), "peak_gflops": peak["gflops"],
               "seconds": FLAGS.seconds, "requests": {}}
    sentences = sst2_dev_sentences(max(map(int, FLAGS.requests)))
    for n in map(int, FLAGS.requests):
        text = np.array([s.encode() for s in sentences[:n]], dtype=object)
        lengths = fn(text=tf.constant(text))["input_mask"].numpy().sum(1)
        gflop = encoder_flops(dims, lengths) / 1e9
        entry = {"sentences": n, "tokens": int(lengths.sum()), "longest": int(lengths.max()),
                 "encoder_gflop": gflop, "floor_ms": gflop / peak["gflops"] * 1000,
                 "ceiling_sentences_per_s": n / (gflop / peak["gflops"]), "points": []}
        results["requests"][str(n)] = entry
        for batching in FLAGS.batching:
            config = _batching(batching)
            if config and n >= config["max_batch_size"]:
                continue  # a request as large as the batch: batching has nothing to merge
            for clients in map(int, FLAGS.clients):
                point = _load_point(binary, info, saved_model, text, clients, batching)
                if config:
                    point["config"] = config
                entry["points"].append(point)
                print(f"{n:2d} sentences  clients {clients:2d}  batching {batching:16s} "
                      f"p50 {point['p50_ms']:8.1f} ms  p99 {point['p99_ms']:8.1f} ms  "
                      f"{point['sentences_per_s']:7.1f} sentences/s"
                      + (f"  mean batch {point['mean_batch_rows']:.1f}"
                         if "mean_batch_rows" in point else ""), flush=True)
    path = os.path.join(FLAGS.output_dir, "serving_load.json")
    if FLAGS.append and os.path.exists(path):
        results = _appended(path, results)
    write_results(FLAGS.output_dir, "serving_load", results, markdown(results))
    return 0


def _appended(path, results):
    """The earlier results at `path` with these points added (replacing the same points)."""
    with open(path) as f:
        earlier = json.load(f)
    if (earlier["preset"], earlier["max_seq_length"]) != (results["preset"],
                                                          results["max_seq_length"]):
        raise SystemExit(f"{path} holds {earlier['preset']} at {earlier['max_seq_length']}; "
                         "--append adds only to the same preset and length")
    for n, entry in results["requests"].items():
        old = earlier["requests"].setdefault(n, dict(entry, points=[]))
        new_keys = {(p["clients"], p["batching"]) for p in entry["points"]}
        old["points"] = [p for p in old["points"]
                         if (p["clients"], p["batching"]) not in new_keys] + entry["points"]
    return earlier


def markdown(results) -> str:
    lines = [f"{results['preset']} classifier, `serving_default` on raw text, C++ loader (one "
             f"session, N client threads), {results['seconds']:.0f} s per point, "
             f"{results['cpu_count']} CPUs; float32 peak {results['peak_gflops']:.0f} GFLOP/s "
             "(best at the model's matmul shapes).", "",
             "| request | clients | batching (max:timeout us:threads[:allowed]) | p50 ms | "
             "p99 ms | sentences/s | mean batch | p50 / floor | throughput / ceiling |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n, entry in results["requests"].items():
        label = (f"{n} sentence{'s' if int(n) > 1 else ''} ({entry['tokens']} tokens; floor "
                 f"{entry['floor_ms']:.1f} ms)")
        for p in entry["points"]:
            lines.append(
                f"| {label} | {p['clients']} | {p['batching']} | {p['p50_ms']:.1f} | "
                f"{p['p99_ms']:.1f} | {p['sentences_per_s']:.1f} | "
                f"{p.get('mean_batch_rows', float('nan')):.1f} | "
                f"{p['p50_ms'] / entry['floor_ms']:.1f}x | "
                f"{p['sentences_per_s'] / entry['ceiling_sentences_per_s']:.0%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(app.run(main))
