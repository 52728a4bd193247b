"""Side by side, in one run: albert_tf against Hugging Face transformers (PyTorch) and keras-hub.

    python -m bench.compare                       # albert-base, batch 8, seq 128, fp32 + bf16
    python -m bench.compare --peer_python .venv-peers/bin/python --repeats 5

The peers are never dependencies of albert_tf: they live in their own environment
(`bench/requirements.txt`, docs/benchmarks.md "Side by side"); `--peer_python` names its
interpreter (default: this one, if it has them). Every measurement runs in a fresh child process
(`--child`), so each has the machine to itself and its peak RSS is its own (`wait4`). Cases, on the
same shapes and the same random inputs for every implementation:

- `matmul`: the machine's float32 / bfloat16 matmul peak through TensorFlow (square matmuls of
  1024, 2048, 4096; the best GFLOP/s).
- `forward`: the pretraining model's forward pass (no gradient).
- `train`: one training step. Ours runs the real loop (`albert_tf.train_lib`: input pipeline
  from TFRecords, forward, backward, clipping, LAMB), and again as `albert_tf_recompute` with
  `TrainingConfig.recompute` (each layer's activations recomputed in the backward pass: the
  memory lever); the TFRecords are generated first in a child of their own, so that no
  measurement's peak RSS includes data generation. Hugging Face's `AlbertForPreTraining`
  with AdamW (its MLM head scores every position, not only the masked ones); keras-hub's
  `AlbertMaskedLM` with Adam (MLM on the masked positions, no sentence-order head).
- `serving` (ours): the exported SavedModel's `serving_default` on raw text, one sentence and a
  batch of 32 (`bench.serving_latency`).

Each time is the median of `--repeats` after `--warmup` untimed calls. FLOPs are counted
analytically (the formula is printed) for the common task: encoder + MLM head on the masked
positions + pooler/SOP; the fraction of peak divides that by the time and by the matmul peak of
the same dtype. Writes `OUTPUT_DIR/compare.json`, `compare.md` and `compare.png`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("preset", "albert-base", "Model preset (albert_tf.config.PRESETS).")
flags.DEFINE_integer("batch_size", 8, "Batch size.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Precisions.")
flags.DEFINE_list("implementations", ["albert_tf", "albert_tf_recompute", "hf_torch",
                                       "keras_hub"],
                  "Who runs (albert_tf_recompute: training only, TrainingConfig.recompute).")
flags.DEFINE_list("cases", ["matmul", "forward", "train", "serving"], "What runs.")
flags.DEFINE_bool("jit_compile", False, "albert_tf: compile the forward pass and the training "
                  "step with XLA (PretrainingConfig.jit_compile).")
flags.DEFINE_bool("remove_padding", True, "albert_tf training: TrainingConfig.remove_padding.")
flags.DEFINE_integer("warmup", 2, "Untimed calls per measurement.")
flags.DEFINE_integer("repeats", 5, "Timed calls per measurement (the median is reported).")
flags.DEFINE_string("peer_python", None, "Interpreter of the peers' environment.")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "compare"), "Results.")
flags.DEFINE_integer("timeout", 1800, "Seconds allowed to one measurement.")
flags.DEFINE_string("child", None, "(internal) one measurement, as JSON.")
FLAGS = flags.FLAGS

from albert_tf.analysis.flops import FORMULA, forward_flops, model_dims  # noqa: E402


# ---------------------------------------------------------------------------------------------
# Children: one measurement each; print "RESULT <json>".
def _median_time(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"median_s": times[len(times) // 2], "min_s": times[0], "max_s": times[-1],
            "repeats": repeats}


def _inputs(spec):
    import numpy as np

    rng = np.random.default_rng(0)
    B, S, P, V = spec["B"], spec["S"], spec["P"], spec["dims"]["V"]
    positions = np.stack([np.sort(rng.choice(np.arange(1, S - 1), P, replace=False))
                          for _ in range(B)]).astype(np.int32)
    return {"input_ids": rng.integers(5, V, (B, S)).astype(np.int32),
            "input_mask": np.ones((B, S), np.int32),
            "segment_ids": np.repeat([[0] * (S // 2) + [1] * (S - S // 2)], B, 0).astype(np.int32),
            "masked_lm_positions": positions,
            "masked_lm_ids": rng.integers(5, V, (B, P)).astype(np.int32),
            "sop": rng.integers(0, 2, (B,)).astype(np.int32)}


def child_matmul(spec):
    import tensorflow as tf

    dtype = tf.bfloat16 if spec["dtype"] == "bfloat16" else tf.float32
    best = {}
    for n in (1024, 2048, 4096):
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)
        f = tf.function(lambda a, b: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
        t = _median_time(lambda: f(a, b).numpy(), spec["warmup"], spec["repeats"])
        gflops = 2 * n ** 3 / t["median_s"] / 1e9
        if gflops > best.get("gflops", 0):
            best = dict(t, gflops=gflops, n=n)
    # The model's own matmul shapes: [tokens, H] x [H, H] (Q/K/V/output), [H, I], [I, H], for
    # one 20-token sentence and for a batch of 8 x 128 tokens.
    d = spec["dims"]
    best["shapes"] = {}
    for m in (20, spec["B"] * spec["S"]):
        for k, n in ((d["H"], d["H"]), (d["H"], d["I"]), (d["I"], d["H"])):
            a = tf.cast(tf.random.normal((m, k)), dtype)
            b = tf.cast(tf.random.normal((k, n)), dtype)
            f = tf.function(lambda a, b: tf.matmul(a, b))
            t = _median_time(lambda: f(a, b).numpy(), spec["warmup"] + 3,
                             max(spec["repeats"], 20))
            best["shapes"][f"{m}x{k}x{n}"] = 2 * m * k * n / t["median_s"] / 1e9
    return best


def child_albert_tf(spec):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertConfig, AlbertPretrainer

    if spec["case"] == "train":
        return _albert_tf_train(spec, recompute=spec["who"] == "albert_tf_recompute")
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if spec["dtype"] == "bfloat16" else "float32")
    model = AlbertPretrainer(AlbertConfig.from_preset(spec["preset"]))
    x = _inputs(spec)
    feed = {k: tf.constant(v) for k, v in x.items() if k in model.input}

    @tf.function(jit_compile=spec.get("jit_compile", False))
    def forward(inputs):
        out = model(inputs, training=False)
        return tf.add_n([tf.reduce_sum(tf.cast(v, tf.float32)) for v in tf.nest.flatten(out)])

    return _median_time(lambda: forward(feed).numpy(), spec["warmup"], spec["repeats"])


def _albert_tf_train(spec, recompute=False):
    """The real loop: TFRecords generated from the bundled novels (8k vocabulary; the model keeps
    the preset's vocabulary, so its cost is the peers'), one step per timed call."""
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.train_lib import PretrainingConfig, PretrainingRun

    data = _pretraining_records(spec)
    steps = spec["warmup"] + spec["repeats"] + 1
    cfg = PretrainingConfig(
        albert_config=AlbertConfig.from_preset(spec["preset"]), input_file=data,
        output_dir=os.path.join(spec["work"], f"run-{spec['dtype']}-{os.getpid()}"),
        max_seq_length=spec["S"], max_predictions_per_seq=spec["P"],
        train_batch_size=spec["B"], num_train_steps=steps, num_warmup_steps=1,
        learning_rate=1e-4, save_checkpoints_steps=steps, iterations_per_loop=1,
        mixed_precision=spec["dtype"], seed=1, verbose=False,
        jit_compile=spec.get("jit_compile", False),
        remove_padding=spec.get("remove_padding", True), recompute=recompute)
    run = PretrainingRun(cfg)
    run._position_input()
    loop = run._train_loop = run._build_train_loop()
    one = tf.constant(1)
    return _median_time(lambda: float(loop(run.train_iterator, one)[1]), spec["warmup"],
                        spec["repeats"])


def _pretraining_records(spec) -> str:
    from data.generator import generate, make_job
    from data.prepare_corpus import prepare_corpus
    from data.train_vocab import train_vocab

    directory = os.path.join(spec["work"], f"data-{spec['S']}-{spec['P']}")
    pattern = os.path.join(directory, "train-*.tfrecord")
    if not os.path.exists(os.path.join(directory, "done")):
        os.makedirs(directory, exist_ok=True)
        corpus = os.path.join(directory, "books.txt")
        prepare_corpus(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text",
                                    "gutenberg", "*-0.txt"), corpus)
        vocab = train_vocab(corpus, os.path.join(directory, "v8k"),
                            vocab_size=8000)["model_file"]
        generate(make_job(corpus, os.path.join(directory, "train"), vocab, num_output_shards=2,
                          max_seq_length=spec["S"], max_predictions_per_seq=spec["P"],
                          dupe_factor=1), num_workers=2, progress=False)
        # The model keeps the preset's 30k vocabulary (the peers' cost) and reads ids of the 8k
        # one, all valid: the sidecars drop their vocabulary size so the loop's data check,
        # which refuses a mismatch, lets the benchmark through.
        import glob

        from albert_tf.features import sidecar_path

        for path in sorted(glob.glob(pattern)):
            with open(sidecar_path(path)) as f:
                meta = json.load(f)
            meta.pop("vocab_size", None)
            with open(sidecar_path(path), "w") as f:
                json.dump(meta, f, indent=2)
        open(os.path.join(directory, "done"), "w").close()
    return pattern


def child_hf_torch(spec):
    import torch
    from transformers import AlbertConfig as HFConfig
    from transformers import AlbertForPreTraining

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    d = spec["dims"]
    model = AlbertForPreTraining(HFConfig(
        vocab_size=d["V"], embedding_size=d["E"], hidden_size=d["H"],
        num_hidden_layers=d["L"], num_attention_heads=d["heads"], intermediate_size=d["I"],
        max_position_embeddings=d["max_positions"], hidden_act="gelu_new",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    x = _inputs(spec)
    ids = torch.from_numpy(x["input_ids"]).long()
    feed = {"input_ids": ids, "attention_mask": torch.from_numpy(x["input_mask"]).long(),
            "token_type_ids": torch.from_numpy(x["segment_ids"]).long()}
    labels = torch.full_like(ids, -100)
    rows = torch.arange(ids.shape[0])[:, None]
    labels[rows, torch.from_numpy(x["masked_lm_positions"]).long()] = torch.from_numpy(
        x["masked_lm_ids"]).long()
    sop = torch.from_numpy(x["sop"]).long()
    bf16 = spec["dtype"] == "bfloat16"

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    if spec["case"] == "forward":
        model.eval()

        def step():
            with torch.no_grad(), autocast():
                out = model(**feed)
            float(out.prediction_logits[0, 0, 0])
    else:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = model(**feed, labels=labels, sentence_order_label=sop).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            float(loss)
    return _median_time(step, spec["warmup"], spec["repeats"])


def child_keras_hub(spec):
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    import keras_hub
    import tensorflow as tf

    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if spec["dtype"] == "bfloat16" else "float32")
    d = spec["dims"]
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=d["V"], num_layers=d["L"], num_heads=d["heads"],
        embedding_dim=d["E"], hidden_dim=d["H"], intermediate_dim=d["I"], num_groups=1,
        num_inner_repetitions=1, dropout=0.0, max_sequence_length=d["max_positions"])
    model = keras_hub.models.AlbertMaskedLM(backbone, preprocessor=None)
    x = _inputs(spec)
    feed = {"token_ids": tf.constant(x["input_ids"]), "segment_ids": tf.constant(x["segment_ids"]),
            "padding_mask": tf.constant(x["input_mask"]),
            "mask_positions": tf.constant(x["masked_lm_positions"])}
    y = tf.constant(x["masked_lm_ids"])
    if spec["case"] == "forward":
        @tf.function
        def forward(inputs):
            return tf.reduce_sum(tf.cast(model(inputs, training=False), tf.float32))

        return _median_time(lambda: forward(feed).numpy(), spec["warmup"], spec["repeats"])
    optimizer = keras.optimizers.Adam(1e-4, global_clipnorm=1.0)
    optimizer.build(model.trainable_variables)

    @tf.function
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(inputs, training=True), tf.float32)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return _median_time(lambda: train_step(feed, y).numpy(), spec["warmup"], spec["repeats"])


def child_serving(spec):
    out = os.path.join(spec["work"], f"serving-{os.getpid()}.json")
    subprocess.run([sys.executable, "-m", "bench.serving_latency", "--preset", spec["preset"],
                    "--kinds", "classifier", "--max_seq_length", str(spec["S"]),
                    "--padding", "removed,padded",
                    "--repeats", "50", "--output", out], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    with open(out) as f:
        return json.load(f)


def run_child(spec_json: str) -> int:
    spec = json.loads(spec_json)
    fn = {"matmul": child_matmul, "albert_tf": child_albert_tf,
          "albert_tf_recompute": child_albert_tf, "hf_torch": child_hf_torch,
          "keras_hub": child_keras_hub, "serving": child_serving,
          "data": lambda spec: {"pattern": _pretraining_records(spec)}}[spec["who"]]
    result = fn(spec)
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN if spec["who"] == "serving"
                               else resource.RUSAGE_SELF)
    result["peak_rss_mb"] = usage.ru_maxrss / 1024  # KB on Linux
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
def measure(spec: dict, python: str) -> dict:
    """Runs one child; returns its result with peak RSS, or {"error": ...}."""
    proc = subprocess.Popen([python, "-m", "bench.compare", "--child", json.dumps(spec)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=FLAGS.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timed out after {FLAGS.timeout} s"}
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"error": (stderr or stdout)[-1500:]}
    return json.loads(lines[-1][len("RESULT "):])


def main(argv):
    del argv
    if FLAGS.child:
        return run_child(FLAGS.child)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    work = os.path.abspath(os.path.join(FLAGS.output_dir, "work"))
    os.makedirs(work, exist_ok=True)
    dims = model_dims(FLAGS.preset)
    B, S, P = FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions
    fwd = forward_flops(dims, B, S, P)
    peer_python = FLAGS.peer_python or sys.executable
    base = {"preset": FLAGS.preset, "dims": dims, "B": B, "S": S, "P": P, "work": work,
            "warmup": FLAGS.warmup, "repeats": FLAGS.repeats, "jit_compile": FLAGS.jit_compile,
            "remove_padding": FLAGS.remove_padding}
    print(f"{FLAGS.preset} {dims}, batch {B}, seq {S}, {P} masked; cpus {os.cpu_count()}")
    print(FORMULA)
    print(f"forward {fwd / 1e9:.1f} GFLOP, training step {3 * fwd / 1e9:.1f} GFLOP", flush=True)
    rows = []
    plan = []
    if "matmul" in FLAGS.cases:
        plan += [("matmul", "matmul", dt, sys.executable) for dt in FLAGS.dtypes]
    for case in ("forward", "train"):
        if case in FLAGS.cases:
            for dt in FLAGS.dtypes:
                for who in FLAGS.implementations:
                    if who == "albert_tf_recompute" and case != "train":
                        continue  # the same forward as albert_tf
                    plan.append((who, case, dt, sys.executable if who.startswith("albert_tf")
                                 else peer_python))
    if any(who.startswith("albert_tf") and case == "train" for who, case, _, _ in plan):
        made = measure(dict(base, who="data", case="data", dtype="float32"), sys.executable)
        if "error" in made:
            raise RuntimeError(f"generating the training TFRecords failed: {made['error']}")
    if "serving" in FLAGS.cases:
        plan.append(("serving", "serving", "float32", sys.executable))
    peaks = {}
    for who, case, dt, python in plan:
        spec = dict(base, who=who, case=case, dtype=dt)
        row = {"implementation": who, "case": case, "dtype": dt, **measure(spec, python)}
        if case == "matmul" and "gflops" in row:
            peaks[dt] = row["gflops"]
        if case in ("forward", "train") and "median_s" in row:
            flops = fwd * (3 if case == "train" else 1)
            row["examples_per_s"] = B / row["median_s"]
            row["gflops"] = flops / row["median_s"] / 1e9
            if dt in peaks:
                row["fraction_of_peak"] = row["gflops"] / peaks[dt]
        rows.append(row)
        brief = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                 if k not in ("cases",)}
        print(json.dumps(brief)[:400], flush=True)
    results = {"preset": FLAGS.preset, "dims": dims, "batch_size": B, "seq_length": S,
               "predictions": P, "formula": FORMULA, "forward_gflop": fwd / 1e9,
               "cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags(), "peaks_gflops": peaks,
               "rows": rows, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(os.path.join(FLAGS.output_dir, "compare.json"), "w") as f:
        json.dump(results, f, indent=2)
    table = markdown(results)
    with open(os.path.join(FLAGS.output_dir, "compare.md"), "w") as f:
        f.write(table)
    chart(results, os.path.join(FLAGS.output_dir, "compare.png"))
    print(table)
    return 0


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            flags_line = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return []
    wanted = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni", "avx_vnni")
    return [w for w in wanted if f" {w}" in flags_line]


def markdown(results) -> str:
    lines = [f"{results['preset']}, batch {results['batch_size']}, seq "
             f"{results['seq_length']}, {results['predictions']} masked positions; "
             f"{results['cpu_count']} CPUs ({', '.join(results['cpu_flags']) or 'no bf16/VNNI'});"
             f" {results['when']}", "",
             f"FLOPs: {results['formula']}; forward {results['forward_gflop']:.1f} GFLOP.", "",
             "| implementation | case | dtype | median s | examples/s | GFLOP/s | of peak | "
             "peak RSS MB |", "|---|---|---|---|---|---|---|---|"]

    def fmt(v, spec):
        return format(v, spec) if isinstance(v, (int, float)) else "-"

    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['implementation']} | {r['case']} | {r['dtype']} | failed: "
                         f"{r['error'].splitlines()[-1][:80] if r['error'] else ''} | | | | |")
            continue
        if r["case"] == "serving":
            peak = results["peaks_gflops"].get("float32")
            for name, c in r.get("cases", {}).items():
                floor = c["encoder_gflop_real_tokens"] / peak if peak else None
                lines.append(
                    f"| albert_tf SavedModel | serving {name} ({c['tokens']} tokens, longest "
                    f"{c['longest']}) | float32 | p50 {c['p50_ms'] / 1000:.4f} (p99 "
                    f"{c['p99_ms'] / 1000:.4f}) | {c['sentences_per_s']:.1f} | "
                    f"{fmt(c['encoder_gflop_real_tokens'] / c['p50_ms'] * 1000, '.1f')} | "
                    f"{fmt(floor / (c['p50_ms'] / 1000) if floor else None, '.0%')} | "
                    f"{fmt(r.get('peak_rss_mb'), '.0f')} |")
            continue
        lines.append(f"| {r['implementation']} | {r['case']} | {r['dtype']} | "
                     f"{fmt(r.get('median_s'), '.3f')} | {fmt(r.get('examples_per_s'), '.2f')} | "
                     f"{fmt(r.get('gflops'), '.1f')} | {fmt(r.get('fraction_of_peak'), '.0%')} | "
                     f"{fmt(r.get('peak_rss_mb'), '.0f')} |")
        if r["case"] == "matmul" and r.get("shapes"):
            lines.append(f"| matmul | model shapes (M x K x N: GFLOP/s) | {r['dtype']} | "
                         + ", ".join(f"{k}: {v:.0f}" for k, v in r["shapes"].items())
                         + " | | | | |")
    return "\n".join(lines) + "\n"


def chart(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r["case"] in ("forward", "train") and "median_s" in r]
    if not rows:
        return
    groups = sorted({(r["case"], r["dtype"]) for r in rows})
    impls = sorted({r["implementation"] for r in rows})
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        xs, ys = [], []
        for g, (case, dt) in enumerate(groups):
            for r in rows:
                if (r["case"], r["dtype"], r["implementation"]) == (case, dt, impl):
                    xs.append(g + k * width)
                    ys.append(r["median_s"])
        ax.bar(xs, ys, width, label=impl)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{c} {d}" for c, d in groups])
    ax.set_ylabel("median seconds per call (lower is better)")
    ax.set_title(f"{results['preset']}, batch {results['batch_size']}, seq "
                 f"{results['seq_length']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(app.run(main))
