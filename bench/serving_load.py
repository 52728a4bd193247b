"""Serving under concurrent load, as TF Serving runs an export: p50/p99 latency and throughput at
1, 4 and 16 clients, one-sentence and 32-sentence requests, without and with batching.

    python -m bench.serving_load                      # albert-base classifier, ~12 min on 2 cores
    python -m bench.serving_load --seconds 5 --clients 1,4
    python -m bench.serving_load --requests 1 --exports default,jit --batching none,shipped \
        --rounds 3                                    # the one-sentence levers, alternated

An albert-base classifier (8k SentencePiece vocabulary trained on the bundled novels,
`max_seq_length` 128, remove_padding as exported by default) is exported and loaded by the C++
loader (`albert_tf/export/serving_loader.cc`: `LoadSavedModel` "serve" into one session,
`Session::Run` of `serving_default` concurrently from N client threads, as the server's request
threads do). Each client sends its request again as soon as its answer comes, for `--seconds`
after `--warmup` untimed runs. Requests: one SST-2 dev sentence, and the first 32 SST-2 dev
sentences (1,056 pieces, the longest 64). Batching configurations (`--batching`): `none`,
`shipped` (`albert_tf.export.saved_model.BATCHING`, what every export's batching_parameters.txt
holds) and each `max_batch_size:timeout_micros:threads[:allowed sizes separated by /]`, replayed by
the loader's batcher as TF Serving's batching session handles a batching_parameters file.

The floor: FLOPs of the request's real tokens (`albert_tf.analysis.flops.encoder_flops`) over
the machine's float32 matmul peak (best of 10 at the model's shapes, `bench.compare --cases
matmul`): no implementation answers faster on this CPU, and throughput cannot exceed peak /
FLOPs per sentence. Beside it, what the request's matmuls alone take on this machine: the
model's per-layer matmuls at the request's tokens (the embedding projection, then L times
[tokens, H] x [H, H] four times, [H, I] and [I, H]; float32, median of 30 calls of one graph,
run by TensorFlow's executor (oneDNN kernels) and compiled by XLA, the faster counting) - the
time no graph around them can go under with these kernels.

What else bounds it: "weights read", the same chain at one row (measured once): reading the
weights L times at the rate TensorFlow's own one-row products read them, the time no float32
answer of these kernels goes under whatever its FLOPs; and "int8 matmuls alone", the chain at
the request's rows with int8 weights and each row quantized per call as Keras's int8 `Dense`
does (`ops.matmul` of int8 by int8 to int32, XLA-compiled: TensorFlow's executor has no fast
int8 kernel).

`--exports`: `default` (the export as shipped), `jit` (`--jit_compile`: a one-row request
runs the backbone XLA-compiled at a fixed padded length; loaded with XLA on, as TF Serving's
`--xla_cpu_compilation_enabled=true`) and `int8` (a lever measured, not an export option: the
`jit` export of the same weights with every `Dense` quantized by Keras's `quantize("int8")`
after the export's host copy; its other batches run the int8 products in TensorFlow's
executor). `jit` and `int8` are measured on one-sentence requests only (other batches run the
same graph as `default`). With `int8`, `--agreement` SST-2 dev sentences go one at a time
through `default`'s and `int8`'s `serving_default` (Python) for the share of equal labels and
the largest probability difference, and one 32-sentence request through each is timed (Python's
`tf.saved_model.load`, not the C++ loader). With `--rounds` each point is measured that many
times, the exports alternating within each round; p50/p99 are over all rounds' latencies and
`p50_rounds` keeps each round's p50. Writes `OUTPUT_DIR/serving_load.{json,md}`.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from bench import (ROOT, call_times, machine, novels_vocab,  # noqa: E402
                   sst2_dev_sentences, write_results)

flags.DEFINE_string("preset", "albert-base", "Model preset.")
flags.DEFINE_integer("max_seq_length", 128, "max_seq_length of the export.")
flags.DEFINE_list("clients", ["1", "4", "16"], "Concurrent clients.")
flags.DEFINE_list("requests", ["1", "32"], "Sentences per request.")
flags.DEFINE_list("batching", ["none", "shipped", "32:2000:1", "32:0:1", "32:5000:1:8/16/32",
                                "128:5000:1"],
                  "none; shipped (albert_tf.export.saved_model.BATCHING, what "
                  "batching_parameters.txt holds); or "
                  "max_batch_size:batch_timeout_micros:num_batch_threads"
                  "[:allowed_batch_sizes separated by /].")
flags.DEFINE_list("exports", ["default"], "default (the shipped export), jit (exported "
                  "with --jit_compile, served with XLA on) and/or int8 (jit with the Dense "
                  "layers quantized by Keras; a measured lever); jit and int8 one-sentence "
                  "requests only.")
flags.DEFINE_integer("agreement", 872, "SST-2 dev sentences int8 is compared with default on.")
flags.DEFINE_integer("rounds", 1, "Measurements of each point, the exports alternating.")
flags.DEFINE_bool("append", False, "Add the points to OUTPUT_DIR/serving_load.json (same preset "
                  "and sequence length; a point measured again is replaced).")
flags.DEFINE_float("seconds", 10.0, "Timed seconds per point.")
flags.DEFINE_integer("warmup", 3, "Untimed runs per point.")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "serving_load"), "Results.")
flags.DEFINE_string("doc", None, "A Markdown file whose generated section (--section) to rewrite "
                    "with the table.")
flags.DEFINE_string("section", "bench.serving_load", "The section's name in --doc (between "
                    "<!-- NAME: begin --> and <!-- NAME: end -->).")
FLAGS = flags.FLAGS


def _peak_gflops(work) -> dict:
    out = os.path.join(work, "peak")
    subprocess.run([sys.executable, "-m", "bench.compare", "--cases", "matmul", "--dtypes",
                    "float32", "--rounds", "1", "--peak_runs", "10", "--preset", FLAGS.preset,
                    "--output_dir", out], cwd=ROOT, check=True, capture_output=True, text=True)
    with open(os.path.join(out, "compare.json")) as f:
        row = json.load(f)["rows"][0]
    return {"gflops": row["gflops"], "shapes": row["shapes"]}


def _matmul_chain_ms(dims, tokens: int, int8: bool = False) -> dict:
    """{"graph": ms, "xla": ms}: the median of the encoder's matmuls alone at `tokens` rows, run
    by the executor and compiled by XLA (module docstring); `int8`: {"xla": ms} of the chain with
    int8 weights and rows quantized per call, as Keras's int8 `Dense` computes."""
    import keras
    import tensorflow as tf

    E, H, I, L = dims["E"], dims["H"], dims["I"], dims["L"]
    rng = tf.random.Generator.from_seed(0)
    x = rng.normal((tokens, E))
    w = {name: rng.normal(shape) * 0.02 for name, shape in (
        ("embedding", (E, H)), ("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("o", (H, H)),
        ("up", (H, I)), ("down", (I, H)))}
    quantized = {name: keras.quantizers.abs_max_quantize(kernel, axis=0)
                 for name, kernel in w.items()} if int8 else {}

    def matmul(h, name):
        if not int8:
            return tf.matmul(h, w[name])
        kernel, kernel_scale = quantized[name]
        rows, row_scale = keras.quantizers.abs_max_quantize(h, axis=-1)
        return tf.cast(keras.ops.matmul(rows, kernel), tf.float32) / (row_scale * kernel_scale)

    def chain(x):
        h = matmul(x, "embedding")
        for _ in range(L):
            h = h + sum(matmul(h, name) for name in ("q", "k", "v", "o"))
            h = h + matmul(matmul(h, "up"), "down")
        return h[0, 0]

    times = {}
    for name, jit in (("xla", True),) if int8 else (("graph", False), ("xla", True)):
        fn = tf.function(chain, jit_compile=jit)
        times[name] = float(np.median(call_times(lambda: fn(x).numpy(), 5, 30)) * 1000)
    return times


def _weights_bytes(dims) -> int:
    """float32 bytes of the weights the encoder's matmuls read for one request (the embedding
    projection once, the shared layer's L times)."""
    E, H, I, L = dims["E"], dims["H"], dims["I"], dims["L"]
    return 4 * (E * H + L * (4 * H * H + 2 * H * I))


def _export(work, jit_compile=False, int8=False):
    """(version directory, SentencePiece model) of a randomly initialized classifier (the same
    weights for every export: the seed is fixed); `int8`: its Dense layers quantized by Keras
    after the export's host copy (a lever measured here; `export_saved_model` has no such
    option)."""
    import contextlib
    import dataclasses
    from unittest import mock

    from albert_tf import AlbertClassifier, AlbertConfig
    from albert_tf.tokenization import Tokenizer
    from albert_tf.export import saved_model
    from albert_tf.export.saved_model import export_saved_model

    import keras

    def quantized_copy(model, host_copy=saved_model.host_copy):
        copy = host_copy(model)
        copy.quantize("int8", filters=lambda layer: isinstance(layer, keras.layers.Dense))
        return copy

    spm = os.path.join(work, "bench8k.model")
    spm = spm if os.path.exists(spm) else novels_vocab(work)
    config = dataclasses.replace(AlbertConfig.from_preset(FLAGS.preset),
                                 vocab_size=Tokenizer(spm).vocab_size)
    keras.utils.set_random_seed(0)
    model = AlbertClassifier(config, num_labels=2)
    name = "classifier" + ("-jit" if jit_compile else "") + ("-int8" if int8 else "")
    with (mock.patch.object(saved_model, "host_copy", quantized_copy) if int8
          else contextlib.nullcontext()):
        return export_saved_model(model, os.path.join(work, name), spm,
                                  max_seq_length=FLAGS.max_seq_length,
                                  jit_compile=jit_compile), spm


def _int8_agreement(default, int8) -> dict:
    """`int8`'s answers against `default`'s on SST-2 dev sentences one at a time, and one
    32-sentence request's time through each."""
    import tensorflow as tf

    functions = {name: tf.saved_model.load(path).signatures["serving_default"]
                 for name, path in (("default", default), ("int8", int8))}
    sentences = sst2_dev_sentences(FLAGS.agreement)
    probabilities = {name: np.concatenate([fn(text=tf.constant([s.encode()]))["probabilities"]
                                           .numpy() for s in sentences])
                     for name, fn in functions.items()}
    batch = tf.constant([s.encode() for s in sst2_dev_sentences(32)])
    batch_s = {name: float(np.median(call_times(lambda: fn(text=batch)["probabilities"].numpy(),
                                                1, 3)))
               for name, fn in functions.items()}
    labels = {name: p.argmax(1) for name, p in probabilities.items()}
    return {"sentences": len(sentences),
            "label_agreement": float(np.mean(labels["default"] == labels["int8"])),
            "max_probability_difference": float(np.abs(probabilities["default"]
                                                       - probabilities["int8"]).max()),
            "default_probability_margin_median": float(np.median(
                np.abs(probabilities["default"][:, 1] - probabilities["default"][:, 0]))),
            "batch_of_32_s": batch_s}


def _batching(spec: str):
    """`max:timeout:threads[:a/b/c]` or "shipped" -> the batching_parameters fields, or None for
    "none"."""
    if spec == "none":
        return None
    if spec == "shipped":
        from albert_tf.export.saved_model import BATCHING

        return dict(BATCHING)
    parts = spec.split(":")
    config = {"max_batch_size": int(parts[0]), "batch_timeout_micros": int(parts[1]),
              "num_batch_threads": int(parts[2])}
    if len(parts) > 3:
        config["allowed_batch_sizes"] = [int(x) for x in parts[3].split("/")]
    return config


def _load_round(binary, info, saved_model, text, clients, batching, xla, work):
    from albert_tf.export.cc_loader import run_load

    return run_load(binary, saved_model, info["op_libraries"], {"text": text}, clients,
                    FLAGS.seconds, FLAGS.warmup, _batching(batching), xla=xla,
                    workdir=tempfile.mkdtemp(prefix="load-", dir=work))


def _point(export, clients, batching, rounds) -> dict:
    """One point from its rounds' `run_load` results."""
    ms = np.concatenate([r["latencies_ms"] for r in rounds])
    requests = sum(r["requests"] for r in rounds)
    elapsed = sum(r["elapsed_s"] for r in rounds)
    point = {"export": export, "clients": clients, "batching": batching, "requests": requests,
             "rounds": len(rounds), "p50_ms": float(np.percentile(ms, 50)),
             "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()),
             "p50_rounds": [float(np.percentile(r["latencies_ms"], 50)) for r in rounds],
             "requests_per_s": requests / elapsed,
             "sentences_per_s": requests * rounds[0]["rows_per_request"] / elapsed}
    if rounds[0].get("batches"):
        point["mean_batch_rows"] = (sum(r["batched_rows"] for r in rounds)
                                    / sum(r["batches"] for r in rounds))
        point["padded_rows"] = sum(r["padded_rows"] for r in rounds)
    return point


def main(argv):
    del argv
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from albert_tf.analysis.flops import encoder_flops, model_dims
    from albert_tf.export.cc_loader import compile_loader, tensorflow_info

    os.makedirs(FLAGS.output_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="serving_load-")
    peak = _peak_gflops(work)
    exports = {"default": _export(work)[0]}
    if "jit" in FLAGS.exports:
        exports["jit"] = _export(work, jit_compile=True)[0]
    if "int8" in FLAGS.exports:
        exports["int8"] = _export(work, jit_compile=True, int8=True)[0]
    saved_model = exports["default"]
    info = tensorflow_info()
    binary = compile_loader(info, os.path.join(work, "serving_loader"))
    fn = tf.saved_model.load(saved_model).signatures["serving_default"]
    dims = model_dims(FLAGS.preset)
    results = {"preset": FLAGS.preset, "max_seq_length": FLAGS.max_seq_length,
               "cpu_count": os.cpu_count(), "machine": machine(), "peak_gflops": peak["gflops"],
               "peak_shapes": peak["shapes"],
               "seconds": FLAGS.seconds, "rounds": FLAGS.rounds, "requests": {}}
    if "int8" in exports:
        results["int8_agreement"] = _int8_agreement(exports["default"], exports["int8"])
    sentences = sst2_dev_sentences(max(map(int, FLAGS.requests)))
    one_row, weights_bytes = _matmul_chain_ms(dims, 1), _weights_bytes(dims)  # every request's
    weights_read = {"bytes": weights_bytes, "ms": one_row,
                    "gb_per_s": weights_bytes / min(one_row.values()) / 1e6}
    for n in map(int, FLAGS.requests):
        text = np.array([s.encode() for s in sentences[:n]], dtype=object)
        lengths = fn(text=tf.constant(text))["input_mask"].numpy().sum(1)
        gflop = encoder_flops(dims, lengths) / 1e9
        entry = {"sentences": n, "tokens": int(lengths.sum()), "longest": int(lengths.max()),
                 "encoder_gflop": gflop, "floor_ms": gflop / peak["gflops"] * 1000,
                 "ceiling_sentences_per_s": n / (gflop / peak["gflops"]),
                 "matmuls_alone": _matmul_chain_ms(dims, int(lengths.sum())), "points": []}
        entry["matmuls_alone_ms"] = min(entry["matmuls_alone"].values())
        entry["weights_read"] = weights_read
        entry["weights_read_ms"] = min(weights_read["ms"].values())
        if "int8" in exports:
            entry["int8_matmuls_alone_ms"] = _matmul_chain_ms(dims, int(lengths.sum()),
                                                              int8=True)["xla"]
        results["requests"][str(n)] = entry
        for batching in FLAGS.batching:
            config = _batching(batching)
            if config and n >= config["max_batch_size"]:
                continue  # a request as large as the batch: batching has nothing to merge
            for clients in map(int, FLAGS.clients):
                names = [e for e in FLAGS.exports if e in exports and (e == "default" or n == 1)]
                rounds = {name: [] for name in names}
                for _ in range(FLAGS.rounds):
                    for name in names:
                        rounds[name].append(_load_round(binary, info, exports[name], text,
                                                        clients, batching, name != "default",
                                                        work))
                for name in names:
                    point = _point(name, clients, batching, rounds[name])
                    if config:
                        point["config"] = config
                    entry["points"].append(point)
                    print(f"{n:2d} sentences  {name:7s} clients {clients:2d}  batching "
                          f"{batching:16s} p50 {point['p50_ms']:8.1f} ms  p99 "
                          f"{point['p99_ms']:8.1f} ms  {point['sentences_per_s']:7.1f} "
                          "sentences/s" + (f"  mean batch {point['mean_batch_rows']:.1f}"
                                           if "mean_batch_rows" in point else ""), flush=True)
    path = os.path.join(FLAGS.output_dir, "serving_load.json")
    if FLAGS.append and os.path.exists(path):
        results = _appended(path, results)
    shutil.rmtree(work, ignore_errors=True)  # the exports and the loads' request files
    write_results(FLAGS.output_dir, "serving_load", results, markdown(results), FLAGS.doc,
                  FLAGS.section)
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
        def key(p):
            return p.get("export", "default"), p["clients"], p["batching"]

        new_keys = {key(p) for p in entry["points"]}
        old.update({k: v for k, v in entry.items() if k != "points"})
        old["points"] = [p for p in old["points"] if key(p) not in new_keys] + entry["points"]
    if "int8_agreement" in results:
        earlier["int8_agreement"] = results["int8_agreement"]
    return earlier


def markdown(results) -> str:
    lines = [f"{results['preset']} classifier, `serving_default` on raw text, C++ loader (one "
             f"session, N client threads), {results['seconds']:.0f} s per point, "
             f"{results.get('machine', str(results['cpu_count']) + ' CPUs')}"
             + (f", {results['rounds']} rounds" if results.get("rounds", 1) > 1 else "")
             + f"; float32 peak {results['peak_gflops']:.0f} GFLOP/s "
             "(best at the model's matmul shapes"
             + ("; M x K x N: GFLOP/s " + ", ".join(
                 f"{k} {v:.0f}" for k, v in results["peak_shapes"].items())
                if "peak_shapes" in results else "") + ").", "",
             "| request | export | clients | batching (max:timeout us:threads[:allowed]) | "
             "p50 ms (rounds) | p99 ms | sentences/s | mean batch | p50 / floor | "
             "throughput / ceiling |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n, entry in results["requests"].items():
        label = (f"{n} sentence{'s' if int(n) > 1 else ''} ({entry['tokens']} tokens; floor "
                 f"{entry['floor_ms']:.1f} ms" + (
                     f"; matmuls alone {entry['matmuls_alone_ms']:.1f} ms"
                     if "matmuls_alone_ms" in entry else "") + (
                     f"; weights read {entry['weights_read_ms']:.1f} ms "
                     f"({entry['weights_read']['bytes'] / 1e6:.0f} MB at "
                     f"{entry['weights_read']['gb_per_s']:.1f} GB/s)"
                     if "weights_read_ms" in entry else "") + (
                     f"; int8 matmuls alone {entry['int8_matmuls_alone_ms']:.1f} ms"
                     if "int8_matmuls_alone_ms" in entry else "") + ")")
        for p in entry["points"]:
            spread = p.get("p50_rounds", [])
            spread = (f" ({min(spread):.1f}-{max(spread):.1f})" if len(spread) > 1 else "")
            lines.append(
                f"| {label} | {p.get('export', 'default')} | {p['clients']} | {p['batching']} | "
                f"{p['p50_ms']:.1f}{spread} | "
                f"{p['p99_ms']:.1f} | {p['sentences_per_s']:.1f} | "
                + (f"{p['mean_batch_rows']:.1f}" if "mean_batch_rows" in p else "") + " | "
                f"{p['p50_ms'] / entry['floor_ms']:.1f}x | "
                f"{p['sentences_per_s'] / entry['ceiling_sentences_per_s']:.0%} |")
    agreement = results.get("int8_agreement")
    if agreement:
        lines += ["", f"int8 against default, {agreement['sentences']} SST-2 dev sentences one "
                  f"at a time: the same label on {agreement['label_agreement']:.1%}, "
                  "probabilities within "
                  f"{agreement['max_probability_difference']:.4f} (default's median margin "
                  f"between the classes {agreement['default_probability_margin_median']:.4f}); "
                  "one 32-sentence request: default "
                  f"{agreement['batch_of_32_s']['default']:.2f} s, int8 "
                  f"{agreement['batch_of_32_s']['int8']:.2f} s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(app.run(main))
