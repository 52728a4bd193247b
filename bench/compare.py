"""Side by side: albert_tf against Hugging Face transformers (PyTorch) and keras-hub, on the
same batches, in separate processes, interleaved.

    python -m bench.compare                       # albert-base, batch 8, seq 128, fp32 + bf16
    python -m bench.compare --peer_python .venv-peers/bin/python --rounds 3

The peers are never dependencies of albert_tf: they live in their own environment
(`bench/requirements.txt`, docs/benchmarks.md "Side by side"); `--peer_python` names its
interpreter (default: this one, if it has them). Every measurement runs in a fresh child process
(`--child`), so each has the machine to itself and its peak RSS is its own (`ru_maxrss`).

The same work for every side: pretraining TFRecords are generated once from the bundled novels
(in a child of their own, so no measurement's peak RSS includes it) and the first
`warmup + repeats` batches of them, in file order, are saved; every side's call i runs batch i.
Two rows for each side and case:

- `padded`: the batches as stored, every sequence padded to `--seq_length`.
- `no padding`: each side's way of not computing on padding. Ours: `remove_padding` (the
  encoder's per-token matmuls on the real tokens only). The peers have no such mode; they get
  each batch cut to its longest sequence (dynamic padding, their best). The real tokens and the
  tokens each side computes on are printed with the row.

Cases:

- `matmul`: the peak, measured at the model's own matmul shapes ([tokens, H] x [H, H], [H, I],
  [I, H] for the batch's tokens and for one 20-token sentence): the best of `--peak_runs` timed
  calls of each shape; the peak is the best shape's. Also the padded batch's "matmuls alone"
  floor (`_matmul_floor`): the forward and the training step if only their matmuls took time,
  each at its own shape's and layout's best rate, printed beside each padded row.
- `forward`: the pretraining model's forward pass (no gradient).
- `train`: one training step. Ours runs its loop's step (`albert_tf.training.train_lib`: forward,
  backward, clipping, LAMB) on the saved batches, and again as `albert_tf_recompute`
  (`TrainingConfig.recompute`) and `albert_tf_ops_gelu` (GELU's backward as TensorFlow ops,
  the step before its fused backward: the same-run baseline) and `albert_tf_keras_dense` (the
  dense layers as Keras runs them: under mixed precision the shared block's weights cast on
  every call and the bfloat16 bias gradients by `BiasAddGrad`; the step before the cast-once
  weights, the same-run baseline). Hugging Face's `AlbertForPreTraining` with AdamW (its MLM
  head scores every position, not only the masked ones); keras-hub's `AlbertMaskedLM` with Adam
  (MLM on the masked positions, no sentence-order head).
- `serving` (ours): the exported SavedModel's `serving_default` on raw text, one sentence and a
  batch of 32 (`bench.serving_latency`).

`--rounds` R: every measurement runs R times, the sides alternating within a round (a round's
order reversed every other round), so slow drift of a shared machine hits every side alike. A
row's time is the median over rounds of each round's median of `--repeats` calls; a ratio
against ours is the median of the per-round ratios (the same round's runs). FLOPs are counted
analytically (the formula is printed) for the common task on the tokens computed on: encoder +
MLM head on the masked positions + pooler/SOP; "of peak" divides that by the time and by the
measured peak of the same dtype. Writes `OUTPUT_DIR/compare.json`, `compare.md` and
`compare.png`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, call_times, write_results  # noqa: E402

flags.DEFINE_string("preset", "albert-base", "Model preset (albert_tf.config.PRESETS).")
flags.DEFINE_integer("batch_size", 8, "Batch size.")
flags.DEFINE_integer("seq_length", 128, "Sequence length.")
flags.DEFINE_integer("predictions", 20, "Masked positions per sequence.")
flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Precisions.")
flags.DEFINE_list("implementations", ["albert_tf", "albert_tf_recompute", "hf_torch",
                                       "keras_hub"],
                  "Who runs (albert_tf_recompute: training only, TrainingConfig.recompute; "
                  "albert_tf_ops_gelu: training only, our step with GELU's backward as "
                  "TensorFlow ops, as before 2026-11-27, the baseline of the fused one; "
                  "albert_tf_keras_dense: training only, the dense layers as Keras runs them, "
                  "the step before the cast-once weights: under mixed precision the shared "
                  "block's weights cast on every call and bfloat16 bias gradients by "
                  "BiasAddGrad).")
flags.DEFINE_list("cases", ["matmul", "forward", "train", "serving"], "What runs.")
flags.DEFINE_bool("jit_compile", False, "albert_tf: compile the forward pass and the training "
                  "step with XLA (PretrainingConfig.jit_compile).")
flags.DEFINE_list("padding", ["padded", "removed"], "Rows: padded batches, and each side's way "
                  "of skipping padding (ours: remove_padding; peers: cut to the longest).")
flags.DEFINE_enum("corpus", "novels", ["novels", "sst2"], "The records' text: the bundled "
                  "novels (every sequence full at seq 128), or the SST-2 training sentences as "
                  "one-sentence documents (short examples: padding to remove).")
flags.DEFINE_integer("warmup", 2, "Untimed calls per measurement.")
flags.DEFINE_integer("repeats", 5, "Timed calls per measurement (the median is reported).")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds: each measurement runs once per round.")
flags.DEFINE_integer("peak_runs", 10, "Timed calls per matmul shape; the best one counts.")
flags.DEFINE_string("peer_python", None, "Interpreter of the peers' environment.")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "compare"), "Results.")
flags.DEFINE_string("doc", None, "A Markdown file whose generated section to rewrite with the "
                    "table (`--doc_section`).")
flags.DEFINE_string("doc_section", "bench.compare", "The section's name: its markers are "
                    "`<!-- NAME: begin -->` and `<!-- NAME: end -->`.")
flags.DEFINE_integer("timeout", 1800, "Seconds allowed to one measurement.")
flags.DEFINE_string("child", None, "(internal) one measurement, as JSON.")
FLAGS = flags.FLAGS
# Our step again with one thing changed: training only (the forward is albert_tf's).
TRAINING_ONLY = ("albert_tf_recompute", "albert_tf_ops_gelu", "albert_tf_keras_dense")

from albert_tf.analysis.flops import (FORMULA, encoder_flops, forward_flops,  # noqa: E402
                                      model_dims)


# ---------------------------------------------------------------------------------------------
# Children: one measurement each; print "RESULT <json>".
def _median_time(fn, warmup, repeats):
    times = sorted(call_times(fn, warmup, repeats))
    return {"median_s": times[len(times) // 2], "min_s": times[0], "max_s": times[-1],
            "repeats": repeats}


def _batches(spec) -> list[dict]:
    """The saved batches (`_save_batches`), as the side's row computes on them: padded, or cut to
    each batch's longest sequence (the peers' no-padding row; ours keeps them whole and skips
    padding inside the encoder)."""
    import numpy as np

    with np.load(spec["batches"]) as z:
        arrays = {k: z[k] for k in z.files}
    out = []
    for i in range(len(arrays["input_ids"])):
        batch = {k: v[i] for k, v in arrays.items()}
        if spec["padding"] == "removed" and not spec["who"].startswith("albert_tf"):
            longest = int(batch["input_mask"].sum(1).max())
            for k in ("input_ids", "input_mask", "segment_ids", "token_boundary"):
                batch[k] = batch[k][:, :longest]
        out.append(batch)
    return out


def _cycle(batches):
    """A function returning batch 0, 1, 2, ... on successive calls (then from the start)."""
    state = {"i": 0}

    def next_batch():
        batch = batches[state["i"] % len(batches)]
        state["i"] += 1
        return batch

    return next_batch


def child_matmul(spec):
    """The best of `peak_runs` timed calls of each of the model's matmul shapes, and the padded
    batch's matmul floor (`_matmul_floor`)."""
    import tensorflow as tf

    dtype = tf.bfloat16 if spec["dtype"] == "bfloat16" else tf.float32
    d = spec["dims"]

    def best_s(f, *args):
        return _median_time(lambda: f(*args).numpy(), spec["warmup"] + 3,
                            spec["peak_runs"])["min_s"]

    def rand(*shape):
        return tf.cast(tf.random.normal(shape), dtype)

    plain = tf.function(lambda a, b: tf.matmul(a, b))
    shapes = {}
    for m in (20, spec["B"] * spec["S"]):
        for k, n in ((d["H"], d["H"]), (d["H"], d["I"]), (d["I"], d["H"])):
            shapes[f"{m}x{k}x{n}"] = 2 * m * k * n / best_s(plain, rand(m, k), rand(k, n)) / 1e9
    best = max(shapes, key=shapes.get)
    return {"gflops": shapes[best], "best_shape": best, "shapes": shapes,
            "runs_per_shape": spec["peak_runs"], "floor": _matmul_floor(spec, best_s, rand)}


def _matmul_floor(spec, best_s, rand):
    """The padded batch's forward and training step if nothing but their matmuls took time,
    each matmul at the best rate TensorFlow reaches for its own shape and layout: per layer the
    dense projections ([T, K] x [K, N] for the Q, K, V, output and FFN weights, T = B*S tokens;
    a training step adds the input gradient dY W^T and the weight gradient X^T dY, timed as
    such) and the attention core (scores and context, batched per head; its backward counted
    as two more of the same), times L; the rest of the FLOPs (the E -> H projection, the MLM
    head, the pooler: under 3% at albert-base) at the peak, added by `_aggregate`. The FLOPs
    are the formula's, so the floor's fraction of the peak is about the most a step built from
    these kernels reaches (its own calls can run a little faster than these isolated ones)."""
    import tensorflow as tf

    d, B, S, P = spec["dims"], spec["B"], spec["S"], spec["P"]
    T, H, I, L, heads = B * S, d["H"], d["I"], d["L"], d["heads"]
    fwd = tf.function(lambda a, b: tf.matmul(a, b))
    d_in = tf.function(lambda dy, w: tf.matmul(dy, w, transpose_b=True))
    d_w = tf.function(lambda x, dy: tf.matmul(x, dy, transpose_a=True))
    forward = train = 0.0
    rates = {}
    for (k, n), count in (((H, H), 4), ((H, I), 1), ((I, H), 1)):
        x, w, dy = rand(T, k), rand(k, n), rand(T, n)
        times = {"forward": best_s(fwd, x, w), "input_grad": best_s(d_in, dy, w),
                 "weight_grad": best_s(d_w, x, dy)}
        rates.update({f"{T}x{k}x{n} {name}": 2 * T * k * n / t / 1e9
                      for name, t in times.items()})
        forward += count * times["forward"]
        train += count * sum(times.values())
    # The layouts AlbertAttention uses: [b, n, q, d] x [b, n, d, k], then [b, n, q, k] x
    # [b, n, k, d].
    q, k = rand(B, heads, S, H // heads), rand(B, heads, H // heads, S)
    core = best_s(fwd, q, k) + best_s(fwd, rand(B, heads, S, S), q)
    rates[f"attention core {B}x{heads}x{S}x{H // heads}"] = 4 * B * S * S * H / core / 1e9
    rest = forward_flops(d, B, S, P) - encoder_flops(d, [S] * B) + 2 * T * d["E"] * H
    return {"forward_s": L * (forward + core), "train_s": L * (train + 3 * core),
            "rest_forward_gflop": rest / 1e9, "rates_gflops": rates, "tokens": T}


def child_albert_tf(spec):
    import keras
    import tensorflow as tf

    from albert_tf import AlbertConfig, AlbertPretrainer

    if spec["case"] == "train":
        if spec["who"] == "albert_tf_ops_gelu":  # the previous backward: no XLA-fused GELU
            from albert_tf.layers import common

            common._gelu_grad_fused = common._gelu_grad_bucketed = common._gelu_grad
        if spec["who"] == "albert_tf_keras_dense":  # the dense layers as Keras runs them
            from albert_tf.layers import common, transformer

            transformer.CAST_SHARED_WEIGHTS_ONCE = False
            common.add_bias = transformer.add_bias = lambda x, bias: keras.ops.add(x, bias)
        return _albert_tf_train(spec, recompute=spec["who"] == "albert_tf_recompute")
    keras.mixed_precision.set_global_policy(
        "mixed_bfloat16" if spec["dtype"] == "bfloat16" else "float32")
    from albert_tf.models.backbone import set_remove_padding

    model = AlbertPretrainer(AlbertConfig.from_preset(spec["preset"]))
    set_remove_padding(model, spec["padding"] == "removed")
    feeds = [{k: tf.constant(v) for k, v in b.items() if k in model.input}
             for b in _batches(spec)]
    next_batch = _cycle(feeds)

    @tf.function(jit_compile=spec.get("jit_compile", False))
    def forward(inputs):
        out = model(inputs, training=False)
        return tf.add_n([tf.reduce_sum(tf.cast(v, tf.float32)) for v in tf.nest.flatten(out)])

    return _median_time(lambda: forward(next_batch()).numpy(), spec["warmup"], spec["repeats"])


def _albert_tf_train(spec, recompute=False):
    """The loop's own training step on the saved batches (8k-vocabulary ids; the model keeps the
    preset's vocabulary, so its cost is the peers'), one step per timed call."""
    import numpy as np
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun

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
        remove_padding=spec["padding"] == "removed", recompute=recompute)
    run = PretrainingRun(cfg)
    batches = _batches(spec)
    stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    dataset = tf.data.Dataset.from_tensor_slices(stacked).repeat()  # batch 0, 1, 2, ...
    iterator = iter(run.strategy.experimental_distribute_dataset(dataset))
    loop = run.trainer.build_train_loop()
    one = tf.constant(1)
    return _median_time(lambda: float(loop(iterator, one)[1]), spec["warmup"],
                        spec["repeats"])


def _pretraining_records(spec) -> str:
    from albert_tf.data.generator import generate, make_job
    from albert_tf.data.prepare_corpus import prepare_corpus
    from albert_tf.data.train_vocab import train_vocab

    corpus_name = spec.get("corpus", "novels")
    suffix = "" if corpus_name == "novels" else f"-{corpus_name}"
    directory = os.path.join(spec["work"], f"data-{spec['S']}-{spec['P']}{suffix}")
    pattern = os.path.join(directory, "train-*.tfrecord")
    if not os.path.exists(os.path.join(directory, "done")):
        os.makedirs(directory, exist_ok=True)
        books = os.path.join(directory, "books.txt")
        prepare_corpus(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text",
                                    "gutenberg", "*-0.txt"), books)
        vocab = train_vocab(books, os.path.join(directory, "v8k"),
                            vocab_size=8000)["model_file"]
        corpus = books
        if corpus_name == "sst2":  # short documents: one SST-2 sentence each
            corpus = os.path.join(directory, "sst2.txt")
            sst2 = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2", "train.tsv")
            with open(sst2, encoding="utf-8") as f, open(corpus, "w", encoding="utf-8") as out:
                out.write("\n\n".join(line.split("\t")[0].strip() for line in list(f)[1:]) + "\n")
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


def _save_batches(spec) -> dict:
    """The first `warmup + repeats` batches of the records, in file order, as one .npz every side
    reads: {path, real tokens and longest sequence per batch}."""
    import glob

    import numpy as np
    import tensorflow as tf

    from albert_tf.features import pretraining_schema
    from albert_tf.input_pipeline import schema_parser

    files = sorted(glob.glob(_pretraining_records(spec)))
    count = spec["warmup"] + spec["repeats"]
    parse = schema_parser(pretraining_schema(spec["S"], spec["P"]))
    rows = list(tf.data.TFRecordDataset(files).map(parse).take(count * spec["B"]).batch(
        spec["B"], drop_remainder=True).as_numpy_iterator())
    if len(rows) < count:
        raise RuntimeError(f"the records hold {len(rows)} batches of {spec['B']}; {count} needed")
    path = os.path.join(spec["work"], f"batches-{spec['B']}x{spec['S']}-{spec['P']}-{count}-"
                        f"{spec.get('corpus', 'novels')}.npz")
    np.savez(path, **{k: np.stack([r[k] for r in rows]) for k in rows[0]})
    lengths = np.stack([r["input_mask"].sum(1) for r in rows])
    return {"batches": path, "real_tokens": lengths.sum(1).tolist(),
            "longest": lengths.max(1).tolist()}


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
    def torch_batch(x):
        ids = torch.from_numpy(x["input_ids"]).long()
        feed = {"input_ids": ids, "attention_mask": torch.from_numpy(x["input_mask"]).long(),
                "token_type_ids": torch.from_numpy(x["segment_ids"]).long()}
        labels = torch.full_like(ids, -100)
        for row, (positions, ids_, weights) in enumerate(zip(
                x["masked_lm_positions"], x["masked_lm_ids"], x["masked_lm_weights"])):
            real = weights > 0  # padded prediction slots score nothing
            labels[row, torch.from_numpy(positions[real]).long()] = torch.from_numpy(
                ids_[real]).long()
        sop = torch.from_numpy(x["next_sentence_labels"][:, 0]).long()
        return feed, labels, sop

    next_batch = _cycle([torch_batch(b) for b in _batches(spec)])
    bf16 = spec["dtype"] == "bfloat16"

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    if spec["case"] == "forward":
        model.eval()

        def step():
            feed, _, _ = next_batch()
            with torch.no_grad(), autocast():
                out = model(**feed)
            float(out.prediction_logits[0, 0, 0])
    else:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            feed, labels, sop = next_batch()
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
    feeds = [({"token_ids": tf.constant(x["input_ids"]),
               "segment_ids": tf.constant(x["segment_ids"]),
               "padding_mask": tf.constant(x["input_mask"] > 0),
               "mask_positions": tf.constant(x["masked_lm_positions"])},
              tf.constant(x["masked_lm_ids"]), tf.constant(x["masked_lm_weights"]))
             for x in _batches(spec)]
    next_batch = _cycle(feeds)
    # One trace for every batch length (the no-padding row's batches differ in length).
    matrix = tf.TensorSpec([None, None], tf.int32)
    inputs_spec = {"token_ids": matrix, "segment_ids": matrix,
                   "padding_mask": tf.TensorSpec([None, None], tf.bool),
                   "mask_positions": matrix}
    if spec["case"] == "forward":
        @tf.function(input_signature=[inputs_spec])
        def forward(inputs):
            return tf.reduce_sum(tf.cast(model(inputs, training=False), tf.float32))

        return _median_time(lambda: forward(next_batch()[0]).numpy(), spec["warmup"],
                            spec["repeats"])
    optimizer = keras.optimizers.Adam(1e-4, global_clipnorm=1.0)
    optimizer.build(model.trainable_variables)

    @tf.function(input_signature=[inputs_spec, matrix, tf.TensorSpec([None, None], tf.float32)])
    def train_step(inputs, labels, weights):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(inputs, training=True), tf.float32)
            losses = keras.losses.sparse_categorical_crossentropy(labels, logits,
                                                                  from_logits=True)
            loss = tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return _median_time(lambda: train_step(*next_batch()).numpy(), spec["warmup"],
                        spec["repeats"])


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
          "albert_tf_recompute": child_albert_tf, "albert_tf_ops_gelu": child_albert_tf,
          "albert_tf_keras_dense": child_albert_tf,
          "hf_torch": child_hf_torch,
          "keras_hub": child_keras_hub, "serving": child_serving,
          "data": _save_batches}[spec["who"]]
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


def _plan(python, peer_python):
    """[(who, case, dtype, padding, interpreter)] of one round, in run order."""
    plan = [("matmul", "matmul", dt, "-", python) for dt in FLAGS.dtypes
            if "matmul" in FLAGS.cases]
    for case in ("forward", "train"):
        if case not in FLAGS.cases:
            continue
        for dt in FLAGS.dtypes:
            for padding in FLAGS.padding:
                for who in FLAGS.implementations:
                    if who in TRAINING_ONLY and case != "train":
                        continue  # the same forward as albert_tf
                    plan.append((who, case, dt, padding,
                                 python if who.startswith("albert_tf") else peer_python))
    return plan


def _useful_gflop(dims, data, P):
    """Per call, averaged over the batches: the forward FLOPs of the real tokens (each sequence
    at its own length): the work every side must do, whatever it computes on padding."""
    lengths = data["lengths"]
    return sum(forward_flops(dims, 1, n, P) for batch in lengths for n in batch) / len(
        lengths) / 1e9


def _aggregate(key, results, data, dims, P, peaks, floors=None):
    """One row from the rounds' results of one measurement."""
    who, case, dt, padding = key
    ok = [r for r in results if "error" not in r]
    row = {"implementation": who, "case": case, "dtype": dt, "padding": padding,
           "rounds": len(results)}
    if not ok:
        return dict(row, error=results[-1]["error"])
    if case == "matmul":
        best = max(ok, key=lambda r: r["gflops"])
        return dict(row, **dict(best, peak_rss_mb=max(r["peak_rss_mb"] for r in ok)))
    times = sorted(r["median_s"] for r in ok)
    row.update(median_s=statistics.median(times), round_min_s=times[0], round_max_s=times[-1],
               round_medians_s=[r["median_s"] for r in ok],
               peak_rss_mb=max(r["peak_rss_mb"] for r in ok))
    B, S = len(data["lengths"][0]), data["S"]
    if padding == "padded":
        computed = B * S
    elif who.startswith("albert_tf"):
        computed = sum(map(sum, data["lengths"])) / len(data["lengths"])
    else:
        computed = B * sum(map(max, data["lengths"])) / len(data["lengths"])
    useful = _useful_gflop(dims, data, P) * (3 if case == "train" else 1)
    row.update(tokens_computed=computed, useful_gflop=useful,
               examples_per_s=B / row["median_s"], gflops=useful / row["median_s"])
    if dt in peaks:
        row["fraction_of_peak"] = row["gflops"] / peaks[dt]
        floor = (floors or {}).get(dt)
        if floor and padding == "padded":  # the matmuls alone, at their own shapes' rates
            calls = 3 if case == "train" else 1
            row["matmul_floor_s"] = (floor["train_s" if case == "train" else "forward_s"]
                                     + calls * floor["rest_forward_gflop"] / peaks[dt])
            row["floor_fraction_of_peak"] = useful / row["matmul_floor_s"] / peaks[dt]
    return row


def _ratios(rows, per_round):
    """Each peer row's speed relative to ours (ours' time / the peer's; < 1: ours is faster), the
    median of the per-round ratios."""
    for row in rows:
        if (row["case"] not in ("forward", "train") or "error" in row
                or row["implementation"] == "albert_tf"):
            continue
        ours = per_round.get(("albert_tf", row["case"], row["dtype"], row["padding"]), [])
        theirs = per_round[(row["implementation"], row["case"], row["dtype"], row["padding"])]
        pairs = [a["median_s"] / b["median_s"] for a, b in zip(ours, theirs)
                 if "median_s" in a and "median_s" in b]
        if pairs:
            row["ours_time_over_theirs"] = statistics.median(pairs)


def main(argv):
    del argv
    if FLAGS.child:
        return run_child(FLAGS.child)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    work = os.path.abspath(os.path.join(FLAGS.output_dir, "work"))
    os.makedirs(work, exist_ok=True)
    dims = model_dims(FLAGS.preset)
    B, S, P = FLAGS.batch_size, FLAGS.seq_length, FLAGS.predictions
    peer_python = FLAGS.peer_python or sys.executable
    base = {"preset": FLAGS.preset, "dims": dims, "B": B, "S": S, "P": P, "work": work,
            "warmup": FLAGS.warmup, "repeats": FLAGS.repeats, "jit_compile": FLAGS.jit_compile,
            "peak_runs": FLAGS.peak_runs, "padding": "-", "corpus": FLAGS.corpus}
    print(f"{FLAGS.preset} {dims}, batch {B}, seq {S}, {P} masked; cpus {os.cpu_count()}")
    print(FORMULA)
    plan = _plan(sys.executable, peer_python)
    data = {"S": S, "lengths": [[S] * B]}
    if any(case in ("forward", "train") for _, case, _, _, _ in plan):
        made = measure(dict(base, who="data", case="data", dtype="float32"), sys.executable)
        if "error" in made:
            raise RuntimeError(f"generating the benchmark batches failed: {made['error']}")
        base["batches"] = made["batches"]
        import numpy as np

        with np.load(made["batches"]) as z:
            data["lengths"] = z["input_mask"].sum(2).tolist()
        print(f"{len(data['lengths'])} batches of real records: "
              f"{sum(map(sum, data['lengths'])):,} real tokens of {B * S * len(data['lengths']):,}"
              f" (longest per batch {[max(x) for x in data['lengths']]}); useful work "
              f"{_useful_gflop(dims, data, P):.1f} GFLOP forward per batch", flush=True)
    per_round = {key[:4]: [] for key in plan}
    for r in range(FLAGS.rounds):
        for who, case, dt, padding, python in (plan if r % 2 == 0 else plan[::-1]):
            spec = dict(base, who=who, case=case, dtype=dt, padding=padding)
            result = measure(spec, python)
            per_round[(who, case, dt, padding)].append(result)
            brief = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()
                     if k in ("median_s", "gflops", "peak_rss_mb", "error", "best_shape")}
            print(f"round {r + 1}/{FLAGS.rounds} {who} {case} {dt} {padding}: "
                  f"{json.dumps(brief)[:300]}", flush=True)
    peaks = {}
    for (who, case, dt, _), results in per_round.items():
        if case == "matmul" and any("gflops" in x for x in results):
            peaks[dt] = max(x["gflops"] for x in results if "gflops" in x)
    floors = {}  # the fastest round's floor of each dtype
    for (who, case, dt, _), results in per_round.items():
        found = [x["floor"] for x in results if case == "matmul" and "floor" in x]
        if found:
            floors[dt] = min(found, key=lambda f: f["train_s"])
    rows = [_aggregate(key, results, data, dims, P, peaks, floors)
            for key, results in per_round.items()]
    _ratios(rows, per_round)
    if "serving" in FLAGS.cases:
        rows.append({"implementation": "serving", "case": "serving", "dtype": "float32",
                     "padding": "-", **measure(dict(base, who="serving", case="serving",
                                                    dtype="float32"), sys.executable)})
    results = {"preset": FLAGS.preset, "dims": dims, "batch_size": B, "seq_length": S,
               "predictions": P, "formula": FORMULA, "rounds": FLAGS.rounds,
               "repeats": FLAGS.repeats, "peak_runs": FLAGS.peak_runs,
               "batch_lengths": data["lengths"], "corpus": FLAGS.corpus,
               "useful_forward_gflop": _useful_gflop(dims, data, P),
               "padded_forward_gflop": forward_flops(dims, B, S, P) / 1e9,
               "cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags(), "peaks_gflops": peaks,
               "matmul_floors": floors,
               "rows": rows, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_results(FLAGS.output_dir, "compare", results, markdown(results), FLAGS.doc,
                  FLAGS.doc_section)
    chart(results, os.path.join(FLAGS.output_dir, "compare.png"))
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
    lengths = results["batch_lengths"]
    real = sum(map(sum, lengths))
    lines = [f"{results['preset']}, batch {results['batch_size']}, seq "
             f"{results['seq_length']}, {results['predictions']} masked positions; "
             f"{results['cpu_count']} CPUs ({', '.join(results['cpu_flags']) or 'no bf16/VNNI'});"
             f" {results['when']}", "",
             f"Every side ran the same {len(lengths)} batches of real records (corpus: "
             f"{results.get('corpus', 'novels')}; {real:,} real "
             f"tokens of {results['batch_size'] * results['seq_length'] * len(lengths):,}); "
             f"{results['rounds']} interleaved rounds, each the median of {results['repeats']} "
             "calls; a time is the median of the rounds (min-max in brackets), `vs ours` the "
             "median of the per-round ratios ours / theirs (below 1: ours is faster).", "",
             f"FLOPs: {results['formula']}; useful work (real tokens) "
             f"{results['useful_forward_gflop']:.1f} GFLOP per forward, "
             f"{results['padded_forward_gflop']:.1f} padded. Peak: best of "
             f"{results['peak_runs']} calls at the model's matmul shapes.", "",
             "Matmuls alone: the padded batch's matmuls, each at the best rate TensorFlow "
             "reaches for its own shape and layout (a training step's input and weight "
             "gradients timed as such), everything else free, and its fraction of the peak: "
             "about the least time a step of these kernels takes (a step's own kernels, the "
             "bias fused into the matmul or the thread pool already warm, can run a little "
             "faster than these isolated calls).", "",
             "| side | case | dtype | padding | tokens computed | median s (rounds) | "
             "useful GFLOP/s | of peak | matmuls alone: s, of peak | vs ours | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def fmt(v, spec):
        return format(v, spec) if isinstance(v, (int, float)) else "-"

    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['implementation']} | {r['case']} | {r['dtype']} | "
                         f"{r.get('padding', '-')} | failed: "
                         f"{r['error'].splitlines()[-1][:80] if r['error'] else ''} | | | | | | |")
            continue
        if r["case"] == "serving":
            peak = results["peaks_gflops"].get("float32")
            for name, c in r.get("cases", {}).items():
                floor = c["encoder_gflop_real_tokens"] / peak if peak else None
                lines.append(
                    f"| albert_tf SavedModel | serving {name} | float32 | - | {c['tokens']} "
                    f"(longest {c['longest']}) | p50 {c['p50_ms'] / 1000:.4f} (p99 "
                    f"{c['p99_ms'] / 1000:.4f}) | "
                    f"{fmt(c['encoder_gflop_real_tokens'] / c['p50_ms'] * 1000, '.1f')} | "
                    f"{fmt(floor / (c['p50_ms'] / 1000) if floor else None, '.0%')} | | | "
                    f"{fmt(r.get('peak_rss_mb'), '.0f')} |")
            continue
        if r["case"] == "matmul":
            lines.append(f"| matmul peak | best of {r['runs_per_shape']} at {r['best_shape']} | "
                         f"{r['dtype']} | - | - | - | {r['gflops']:.1f} | 100% | | | "
                         f"{fmt(r.get('peak_rss_mb'), '.0f')} |")
            lines.append(f"| matmul | model shapes (M x K x N: GFLOP/s) | {r['dtype']} | | | "
                         + ", ".join(f"{k}: {v:.0f}" for k, v in r["shapes"].items())
                         + " | | | | | |")
            floor = results.get("matmul_floors", {}).get(r["dtype"])
            if floor:
                lines.append(f"| matmul | the floor's shapes and layouts (GFLOP/s) | "
                             f"{r['dtype']} | | | " + ", ".join(
                                 f"{k}: {v:.0f}" for k, v in floor["rates_gflops"].items())
                             + " | | | | | |")
            continue
        lines.append(f"| {r['implementation']} | {r['case']} | {r['dtype']} | {r['padding']} | "
                     f"{r['tokens_computed']:.0f} | {r['median_s']:.3f} ({r['round_min_s']:.3f}-"
                     f"{r['round_max_s']:.3f}) | {fmt(r.get('gflops'), '.1f')} | "
                     f"{fmt(r.get('fraction_of_peak'), '.0%')} | "
                     + (f"{r['matmul_floor_s']:.3f}, {r['floor_fraction_of_peak']:.0%} | "
                        if "matmul_floor_s" in r else "- | ") +
                     f"{fmt(r.get('ours_time_over_theirs'), '.2f')} | "
                     f"{fmt(r.get('peak_rss_mb'), '.0f')} |")
    return "\n".join(lines) + "\n"


def chart(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r["case"] in ("forward", "train") and "median_s" in r]
    if not rows:
        return
    groups = sorted({(r["case"], r["dtype"], r["padding"]) for r in rows})
    impls = sorted({r["implementation"] for r in rows})
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        xs, ys = [], []
        for g, group in enumerate(groups):
            for r in rows:
                if (r["case"], r["dtype"], r["padding"], r["implementation"]) == (*group, impl):
                    xs.append(g + k * width)
                    ys.append(r["median_s"])
        ax.bar(xs, ys, width, label=impl)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{c} {d}\n{p}" for c, d, p in groups])
    ax.set_ylabel("median seconds per call (lower is better)")
    ax.set_title(f"{results['preset']}, batch {results['batch_size']}, seq "
                 f"{results['seq_length']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(app.run(main))
