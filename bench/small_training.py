"""The same pretraining work in two loops at the main job's size: ours (`albert_tf.run_pretraining`)
against Hugging Face's `AlbertForPreTraining` with the official LAMB written in PyTorch.

    python -m bench.small_training                          # float32 and bfloat16, ~10 min
    python -m bench.small_training --doc docs/benchmarks.md # and rewrite its generated section

The main job's pretraining (`albert_tf/demo/settings.py`, "full"): `albert_config_small.json`
(E 64, H 128, 4 layers sharing one, 2 heads, I 512, V 8,000), seq 64, batch 32, 26 masked
positions (`masked_lm_prob` 0.4), LAMB at 1e-2, `iterations_per_loop` 50. Records are generated
once (a child of their own) from the bundled novels with the main job's generation flags and an
8k SentencePiece vocabulary trained on them.

- Ours: the command itself, `python -m albert_tf.run_pretraining` on those records with the main
  job's flags (its input pipeline, its compiled loop of 50 steps: forward, MLM on the masked
  positions, SOP, backward, global-norm clipping at 1.0, LAMB, the finiteness gate). A loop's
  figure is the examples/s line the run prints for it (host sync included); the first loop
  (tracing) is left out. `ours_jit`: the same command with `--jit_compile` (the step compiled
  by XLA; opt-in, not the main job's).
- Theirs: transformers' `AlbertForPreTraining` of the same config (dropout 0, `gelu_new`, the
  official tanh GELU) on the first `--batches` batches of the same records (saved once, in file
  order, cycled), the same work per step: the MLM head on the 26 masked positions only (the
  sequence output gathered, then `model.predictions`), its loss weighted by
  `masked_lm_weights` as the official loss, SOP from `model.sop_classifier`, backward,
  `clip_grad_norm_(1.0)`, and the official LAMB (`albert_tf/training/optimization.py`'s formula: no
  bias correction, decay 0.01, LayerNorm and biases excluded from decay and the trust ratio;
  `bench.torch_lamb`, tested against the official update); bfloat16 through `torch.autocast`. Timed
  per 50 steps, the first 50 left out, as ours.

Every measurement is a fresh process; `--rounds` runs each once per round, the two alternating
(the order reversed every other round). A figure is the median of a run's per-loop examples/s;
the table gives the median over rounds and the range, and ours / theirs as the median of the
per-round ratios. Writes `OUTPUT_DIR/small_training.{json,md}`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from bench import ROOT, machine, write_results  # noqa: E402

flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Precisions.")
flags.DEFINE_integer("rounds", 3, "Rounds; each runs every measurement once.")
flags.DEFINE_list("sides", ["ours", "ours_jit", "hf_torch"], "ours: the main job's command; "
                  "ours_jit: the same with --jit_compile (XLA; opt-in); hf_torch: the peer.")
flags.DEFINE_integer("loops", 6, "Timed loops of 50 steps per measurement (one more untimed).")
flags.DEFINE_bool("profile", True, "Also profile one loop of ours per dtype (TensorFlow's "
                  "profiler): where a step's time goes, by op type.")
flags.DEFINE_integer("batches", 64, "Saved batches the PyTorch loop cycles through.")
flags.DEFINE_string("work_dir", os.path.join("bench_results", "small_training", "work"),
                    "Records, vocabulary and runs (kept: the records are reused).")
flags.DEFINE_string("output_dir", os.path.join("bench_results", "small_training"), "Results.")
flags.DEFINE_string("doc", None, "A Markdown file whose generated section to rewrite.")
flags.DEFINE_integer("timeout", 1800, "Seconds allowed to one measurement.")
flags.DEFINE_string("child", None, "(internal) one measurement, as JSON.")
FLAGS = flags.FLAGS

CONFIG = os.path.join(ROOT, "albert_tf", "sample_data", "albert_config_small.json")
SEQ, BATCH, PREDICTIONS, MASKED_LM_PROB, LEARNING_RATE, LOOP = 64, 32, 26, 0.4, 1e-2, 50
RATE = re.compile(r"\| ([0-9,.]+) examples/s")


# ---------------------------------------------------------------------------------------------
# Children: one measurement each; print "RESULT <json>".
def child_data(spec):
    """The records (main job's flags) and the first `batches` batches saved as .npz."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.features import pretraining_schema
    from albert_tf.input_pipeline import schema_parser
    from albert_tf.data.generator import generate, make_job
    from albert_tf.data.prepare_corpus import prepare_corpus
    from albert_tf.data.train_vocab import train_vocab

    work = spec["work"]
    records = os.path.join(work, "records", "train.tfrecord")
    if not os.path.exists(os.path.join(work, "records", "done")):
        os.makedirs(os.path.dirname(records), exist_ok=True)
        books = os.path.join(work, "books.txt")
        prepare_corpus(os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text",
                                    "gutenberg", "*-0.txt"), books)
        vocab = train_vocab(books, os.path.join(work, "v8k"), vocab_size=8000)["model_file"]
        generate(make_job(books, records, vocab, max_seq_length=SEQ,
                          max_predictions_per_seq=PREDICTIONS, masked_lm_prob=MASKED_LM_PROB,
                          dupe_factor=1), num_workers=2, progress=False)
        open(os.path.join(work, "records", "done"), "w").close()
    parse = schema_parser(pretraining_schema(SEQ, PREDICTIONS))
    rows = list(tf.data.TFRecordDataset([records])
                .map(parse).batch(BATCH, drop_remainder=True).take(spec["batches"])
                .as_numpy_iterator())
    batches = os.path.join(work, "batches.npz")
    np.savez(batches, **{k: np.stack([r[k] for r in rows]) for k in rows[0]})
    mask = np.stack([r["input_mask"] for r in rows])
    weights = np.stack([r["masked_lm_weights"] for r in rows])
    return {"records": records, "batches": batches, "saved_batches": len(rows),
            "real_token_share": float(mask.mean()),
            "masked_per_sequence": float(weights.sum(-1).mean())}


def child_ours(spec):
    """The main job's `run_pretraining` on the records; per-loop examples/s from its lines."""
    steps = LOOP * (spec["loops"] + 1)
    out = os.path.join(spec["work"], f"run-{spec['dtype']}-{os.getpid()}")
    cmd = [sys.executable, "-m", "albert_tf.run_pretraining", "--albert_config_file", CONFIG,
           "--input_file", spec["records"], "--output_dir", out,
           "--train_batch_size", str(BATCH), "--max_seq_length", str(SEQ),
           "--max_predictions_per_seq", str(PREDICTIONS), "--optimizer", "lamb",
           "--learning_rate", str(LEARNING_RATE), "--num_train_steps", str(steps),
           "--num_warmup_steps", str(LOOP), "--iterations_per_loop", str(LOOP),
           "--save_checkpoints_steps", str(steps), "--mixed_precision", spec["dtype"],
           "--random_seed", "1", "--do_eval=false",
           f"--jit_compile={str(spec['who'] == 'ours_jit').lower()}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"run_pretraining exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    rates = [float(m.replace(",", "")) for m in RATE.findall(proc.stdout + proc.stderr)]
    if len(rates) != spec["loops"] + 1:
        raise RuntimeError(f"expected {spec['loops'] + 1} loop lines, found {len(rates)}:\n"
                           f"{proc.stdout[-3000:]}")
    shutil.rmtree(out, ignore_errors=True)
    return {"loop_examples_per_s": rates[1:]}


def child_profile(spec):
    """One loop of 50 steps of the main job's loop (the `run_pretraining` command's settings,
    through the library), after a warm one, under TensorFlow's profiler; the executor's op
    events summed by op type, per step. Ops on the two inter-op threads overlap and a matmul
    also waits for the intra-op pool, so the sum exceeds the step time: it ranks, it does not
    partition."""
    import collections
    import glob
    import tempfile

    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    from albert_tf.config import AlbertConfig
    from albert_tf.training.train_lib import PretrainingConfig, PretrainingRun

    out = tempfile.mkdtemp(dir=spec["work"], prefix=f"profile-{spec['dtype']}-")
    cfg = PretrainingConfig(
        albert_config=AlbertConfig.from_json_file(CONFIG), input_file=spec["records"],
        output_dir=os.path.join(out, "run"), train_batch_size=BATCH, max_seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS, optimizer="lamb", learning_rate=LEARNING_RATE,
        num_train_steps=LOOP * 10, num_warmup_steps=LOOP, iterations_per_loop=LOOP,
        save_checkpoints_steps=LOOP * 10, mixed_precision=spec["dtype"], seed=1,
        do_eval=False, verbose=False)
    run = PretrainingRun(cfg)
    loop = run.trainer.build_train_loop()
    run.controller.position_input()
    iterator = run.controller.train_iterator
    float(loop(iterator, tf.constant(LOOP))[1])  # traced and warm
    tf.profiler.experimental.start(os.path.join(out, "trace"))
    start = time.perf_counter()
    float(loop(iterator, tf.constant(LOOP))[1])
    step_ms = (time.perf_counter() - start) * 1000 / LOOP
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(out, "trace", "plugins", "profile", "*",
                                     "*.xplane.pb"))[0], "rb") as f:
        space.ParseFromString(f.read())
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    ms, count = collections.Counter(), collections.Counter()
    for line in plane.lines:
        if not line.name.startswith("tf_Compute"):
            continue
        for event in line.events:
            name = plane.event_metadata[event.metadata_id].name
            if ":" in name and not name.startswith("ExecutorState"):
                op = name.rsplit(":", 1)[1]
                ms[op] += event.duration_ps / 1e9 / LOOP
                count[op] += 1
    shutil.rmtree(out, ignore_errors=True)
    return {"step_ms_profiled": step_ms, "ops_per_step": sum(count.values()) / LOOP,
            "op_ms_per_step": sum(ms.values()),
            "by_type": [[op, t, count[op] / LOOP] for op, t in ms.most_common(12)]}


def child_hf(spec):
    import numpy as np
    import torch
    from transformers import AlbertConfig as HFConfig
    from transformers import AlbertForPreTraining

    from bench.torch_lamb import TorchAlbertOptimizer

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    with open(CONFIG) as f:
        c = json.load(f)
    model = AlbertForPreTraining(HFConfig(
        vocab_size=c["vocab_size"], embedding_size=c["embedding_size"],
        hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
        num_hidden_groups=c["num_hidden_groups"], inner_group_num=c["inner_group_num"],
        num_attention_heads=c["num_attention_heads"], intermediate_size=c["intermediate_size"],
        max_position_embeddings=c["max_position_embeddings"],
        type_vocab_size=c["type_vocab_size"], hidden_act="gelu_new",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    model.train()
    with np.load(spec["batches"]) as z:
        arrays = {k: torch.from_numpy(z[k]).long() if z[k].dtype.kind == "i"
                  else torch.from_numpy(z[k]) for k in z.files}
    count = len(arrays["input_ids"])
    optimizer = TorchAlbertOptimizer(model.named_parameters())
    loss_fn = torch.nn.CrossEntropyLoss(reduction="none")
    bf16 = spec["dtype"] == "bfloat16"

    def step(i):
        x = {k: v[i % count] for k, v in arrays.items()}
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model.albert(input_ids=x["input_ids"], attention_mask=x["input_mask"],
                               token_type_ids=x["segment_ids"])
            hidden = torch.gather(out.last_hidden_state, 1, x["masked_lm_positions"][:, :, None]
                                  .expand(-1, -1, out.last_hidden_state.shape[-1]))
            mlm = model.predictions(hidden).float()
            sop = model.sop_classifier(out.pooler_output).float()
        weights = x["masked_lm_weights"]
        per = loss_fn(mlm.reshape(-1, mlm.shape[-1]), x["masked_lm_ids"].reshape(-1))
        loss = ((per * weights.reshape(-1)).sum() / (weights.sum() + 1e-5)
                + loss_fn(sop, x["next_sentence_labels"][:, 0]).mean())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step(LEARNING_RATE)
        return loss

    rates, i = [], 0
    for loop in range(spec["loops"] + 1):
        start = time.perf_counter()
        for _ in range(LOOP):
            loss = step(i)
            i += 1
        float(loss)  # one host sync per loop, as ours
        if loop:
            rates.append(LOOP * BATCH / (time.perf_counter() - start))
    return {"loop_examples_per_s": rates, "last_loss": float(loss)}


def run_child(spec_json: str) -> int:
    spec = json.loads(spec_json)
    result = {"data": child_data, "ours": child_ours, "ours_jit": child_ours,
              "hf_torch": child_hf, "profile": child_profile}[spec["who"]](spec)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
def measure(spec: dict) -> dict:
    proc = subprocess.run([sys.executable, "-m", "bench.small_training", "--child",
                           json.dumps(spec)], cwd=ROOT, capture_output=True, text=True,
                          timeout=FLAGS.timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{spec['who']} failed:\n{(proc.stderr or proc.stdout)[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv):
    del argv
    if FLAGS.child:
        return run_child(FLAGS.child)
    work = os.path.abspath(FLAGS.work_dir)
    os.makedirs(work, exist_ok=True)
    data = measure({"who": "data", "work": work, "batches": FLAGS.batches})
    print(f"records {data['records']}: {data['saved_batches']} batches saved, real tokens "
          f"{data['real_token_share']:.1%}, {data['masked_per_sequence']:.1f} masked per "
          "sequence", flush=True)
    runs = {(dtype, who): [] for dtype in FLAGS.dtypes for who in FLAGS.sides}
    for r in range(FLAGS.rounds):
        for dtype in FLAGS.dtypes:
            order = FLAGS.sides if r % 2 == 0 else FLAGS.sides[::-1]
            for who in order:
                result = measure({"who": who, "work": work, "dtype": dtype,
                                  "loops": FLAGS.loops, **data})
                rate = statistics.median(result["loop_examples_per_s"])
                runs[(dtype, who)].append(rate)
                print(f"round {r + 1} {dtype:8s} {who:8s} {rate:8.1f} examples/s", flush=True)
    rows = []
    for dtype in FLAGS.dtypes:
        row = {"dtype": dtype, **{who: runs[(dtype, who)] for who in FLAGS.sides}}
        for who in FLAGS.sides:
            if who != "hf_torch" and "hf_torch" in row:
                row[f"{who}_ratio_per_round"] = [a / b for a, b in zip(row[who],
                                                                        row["hf_torch"])]
        rows.append(row)
    profiles = {}
    if FLAGS.profile:
        for dtype in FLAGS.dtypes:
            profiles[dtype] = measure({"who": "profile", "work": work, "dtype": dtype, **data})
            print(f"profile {dtype}: {profiles[dtype]['step_ms_profiled']:.1f} ms a step "
                  "profiled", flush=True)
    results = {"machine": machine(), "date": time.strftime("%Y-%m-%d"),
               "profiles": profiles, "rounds": FLAGS.rounds, "loops": FLAGS.loops, "steps_per_loop": LOOP,
               "batch_size": BATCH, "seq_length": SEQ, "predictions": PREDICTIONS,
               "data": data, "rows": rows}
    write_results(FLAGS.output_dir, "small_training", results, markdown(results), FLAGS.doc)
    return 0


def markdown(results) -> str:
    def cell(values):
        return (f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})")

    data = results["data"]
    lines = [f"{results['machine']}, {results['date']}; the main job's pretraining: "
             f"`albert_config_small.json`, batch {results['batch_size']}, seq "
             f"{results['seq_length']}, {results['predictions']} masked positions "
             f"({data['masked_per_sequence']:.1f} real per sequence), "
             f"{data['real_token_share']:.1%} real tokens; {results['rounds']} rounds, each "
             f"measurement {results['loops']} timed loops of {results['steps_per_loop']} steps "
             "after one untimed.", "",
             "| dtype | loop | examples/s (rounds) | / HF torch + LAMB (rounds) |",
             "|---|---|---|---|"]
    names = {"ours": "ours (the main job's command)", "ours_jit": "ours, `--jit_compile`",
             "hf_torch": "HF torch + official LAMB"}
    for row in results["rows"]:
        for who in (w for w in names if w in row):
            ratios = row.get(f"{who}_ratio_per_round")
            ratio = (f"**{statistics.median(ratios):.2f}x** ({min(ratios):.2f}-"
                     f"{max(ratios):.2f})" if ratios else "1.00x")
            lines.append(f"| {row['dtype']} | {names[who]} | {cell(row[who])} | {ratio} |")
    for dtype, profile in results.get("profiles", {}).items():
        lines += ["", f"Where a step of ours goes, {dtype} (one loop of "
                  f"{results['steps_per_loop']} steps under TensorFlow's profiler, "
                  f"{profile['step_ms_profiled']:.1f} ms a step profiled; "
                  f"{profile['ops_per_step']:,.0f} op events a step, their times summed over "
                  f"the executor's threads {profile['op_ms_per_step']:.1f} ms: the threads "
                  "overlap, so the column ranks the ops, it does not split the step):", "",
                  "| op type | ms per step (summed) | op events per step |", "|---|---|---|"]
        lines += [f"| `{op}` | {t:.1f} | {n:,.0f} |" for op, t, n in profile["by_type"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(app.run(main))
