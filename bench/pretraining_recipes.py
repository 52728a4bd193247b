"""Which pretraining recipe buys the most held-out masked-LM accuracy in a fixed budget of CPU
time: masking rate, learning rate and warmup, optimizer, width and depth, sequence length, dupe
factor. Judged on held-out *pretraining* text only (never on a fine-tuning dev set).

    python -m bench.pretraining_recipes --work_dir bench_results/recipes --budget_s 480
    python -m bench.pretraining_recipes --work_dir bench_results/recipes --recipes mask40 \
        --seeds 1,2,3            # more seeds of one recipe

The corpus, vocabulary and held-out set are the main job's (`albert_tf.demo`: every 4th
document held out, held-out records at seq 64 with 15% masking and sentence-order pairs from
one document each). Every recipe gets the same budget of *its own* compute: its throughput
(examples/s) is measured first in a short run of its own (`throughput.json`, kept), and the
recipe then trains for budget_s x throughput / batch steps, so a slower recipe (seq 128, a wider
model) gets fewer steps, as it would in the job. Step counts, not wall time, are what the runs
use afterwards, so other load on the machine changes their wall time, not their results.

Every recipe is scored on the same held-out records (seq 64; a recipe trained at seq 128 is
evaluated on them after training, `--nodo_train --do_eval`), beside the most-frequent-piece
baseline of those records. Writes WORK_DIR/results.json and WORK_DIR/recipes.md (the table in
docs/pretraining.md comes from it). Rerunning skips finished runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

from absl import app, flags

from albert_tf import demo
from bench import ROOT, sh

SMALL = {"embedding_size": 64, "hidden_size": 128, "intermediate_size": 512,
         "num_attention_heads": 2, "num_hidden_layers": 4}

# name: what differs from the base recipe ("mask15"): seq 64, batch 32, LAMB, lr 5e-3, warmup 10%
# of the steps, 15% masking, dupe factor 10, the small model (H 128, E 64, 4 layers, 2 heads).
BASE = {"seq": 64, "batch": 32, "optimizer": "lamb", "lr": 5e-3, "warmup": 0.1,
        "mask": 0.15, "dupe": 10, "model": {}}
RECIPES = {
    # The main job's recipe before this benchmark (seq 128, batch 64, 15%, dupe 5).
    "before": {"seq": 128, "batch": 64, "dupe": 5},
    "mask15": {},
    "mask40": {"mask": 0.40},
    "mask25": {"mask": 0.25},
    "mask40_lr2.5e-3": {"mask": 0.40, "lr": 2.5e-3},
    "mask40_lr1e-2": {"mask": 0.40, "lr": 1e-2},
    "mask40_lr2e-2": {"mask": 0.40, "lr": 2e-2},
    "mask40_lr1e-2_warmup2%": {"mask": 0.40, "lr": 1e-2, "warmup": 0.02},
    "mask40_warmup2%": {"mask": 0.40, "warmup": 0.02},
    "mask40_warmup30%": {"mask": 0.40, "warmup": 0.30},
    "mask40_adamw2e-3": {"mask": 0.40, "optimizer": "adamw", "lr": 2e-3},
    "mask40_batch64": {"mask": 0.40, "batch": 64},
    "mask40_batch16": {"mask": 0.40, "batch": 16},
    "mask40_dupe3": {"mask": 0.40, "dupe": 3},
    "mask40_wide": {"mask": 0.40, "model": {"embedding_size": 128, "hidden_size": 256,
                                            "intermediate_size": 1024,
                                            "num_attention_heads": 4}},
    "mask40_deep6": {"mask": 0.40, "model": {"num_hidden_layers": 6}},
    "mask40_shallow2": {"mask": 0.40, "model": {"num_hidden_layers": 2}},
    "mask40_seq128": {"mask": 0.40, "seq": 128},
}

flags.DEFINE_string("work_dir", "bench_results/recipes", "Data, runs and results go here.")
flags.DEFINE_list("recipes", list(RECIPES), "Recipes to run (names in RECIPES).")
flags.DEFINE_list("seeds", ["1"], "Seeds (model initialisation and data order).")
flags.DEFINE_float("budget_s", 480.0, "Seconds of each recipe's own compute.")
flags.DEFINE_integer("probe_steps", 60, "Steps of the throughput probe (the first 20 warm up).")
flags.DEFINE_integer("evals", 5, "Evaluations along each run.")
flags.DEFINE_enum("mixed_precision", "float32", ["float32", "bfloat16"], "Compute dtype.")
FLAGS = flags.FLAGS


def recipe(name: str) -> dict:
    r = dict(BASE, **RECIPES[name])
    r["model"] = dict(SMALL, **r["model"])
    r["preds"] = max(1, round(r["mask"] * r["seq"]))
    return r


def prepare(work: str, log: str) -> dict:
    """Corpus, vocabulary and held-out records, as the main job makes them."""
    paths = demo.corpus_paths(work)
    for args, done in demo.corpus_commands(paths) + demo.vocab_commands(paths) + \
            demo.heldout_commands(paths, seq=64):
        if not os.path.exists(done):
            sh(args, log)
    return paths


def records(work, paths, r, log) -> str:
    """Training records of recipe `r`'s data settings (shared by recipes that agree)."""
    prefix = os.path.join(work, "data", f"train_s{r['seq']}_m{int(r['mask'] * 100)}_"
                                        f"d{r['dupe']}")
    if not os.path.exists(prefix + "-00001-of-00002.tfrecord.json"):
        sh(demo.train_records_command(paths, prefix, seq=r["seq"], mask=r["mask"],
                                      preds=r["preds"], dupe=r["dupe"])[0], log)
    return prefix + "-*.tfrecord"


def model_config(work, r) -> str:
    with open(os.path.join(ROOT, "albert_tf", "sample_data", "albert_config_small.json")) as f:
        config = json.load(f)
    config.update(r["model"])
    name = "_".join(f"{k[:3]}{v}" for k, v in sorted(r["model"].items()))
    path = os.path.join(work, "configs", f"{name}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)
    return path


def pretrain_args(config, train, output_dir, r, steps, seed, eval_file=None, every=None):
    args = ["albert_tf.run_pretraining", "--albert_config_file", config, "--input_file", train,
            "--output_dir", output_dir, "--do_train", "--train_batch_size", str(r["batch"]),
            "--max_seq_length", str(r["seq"]), "--max_predictions_per_seq", str(r["preds"]),
            "--optimizer", r["optimizer"], "--learning_rate", str(r["lr"]),
            "--num_train_steps", str(steps),
            "--num_warmup_steps", str(max(1, round(r["warmup"] * steps))),
            "--save_checkpoints_steps", str(every or steps), "--keep_checkpoint_max", "1",
            "--iterations_per_loop", "20", "--random_seed", str(seed),
            "--mixed_precision", FLAGS.mixed_precision]
    if eval_file:
        args += ["--do_eval", "--eval_input_file", eval_file, "--eval_batch_size", "64",
                 "--max_eval_steps", "1000"]
    return args


_RATE = re.compile(r"\| ([\d,.]+) examples/s")


def throughput(work, name, r, config, train, log) -> float:
    """Examples/s of recipe `r`'s computation (the mean of the probe's loops after the first,
    which traces)."""
    path = os.path.join(work, "throughput.json")
    known = json.load(open(path)) if os.path.exists(path) else {}
    # Recipes that run the same computation share one measurement (a probe's noise is a few %).
    model = "_".join(f"{k[:3]}{v}" for k, v in sorted(r["model"].items()))
    key = (f"seq{r['seq']}_batch{r['batch']}_preds{r['preds']}_{r['optimizer']}_{model}:"
           f"{FLAGS.mixed_precision}")
    if key not in known:
        out = os.path.join(work, "probe", name)
        subprocess.run(["rm", "-rf", out])
        sh(pretrain_args(config, train, out, r, FLAGS.probe_steps, 1), log)
        with open(log, encoding="utf-8") as f:
            lines = [line for line in f.read().splitlines() if line.startswith("step ")]
        rates = [float(m.group(1).replace(",", "")) for m in map(_RATE.search, lines[-(
            FLAGS.probe_steps // 20 - 1):]) if m]
        known[key] = sum(rates) / len(rates)
        with open(path, "w") as f:
            json.dump(known, f, indent=1)
    return known[key]


def main(argv):
    del argv
    work = os.path.abspath(FLAGS.work_dir)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    paths = prepare(work, log)
    heldout64 = paths["heldout_records"]
    results_path = os.path.join(work, "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    from albert_tf.analysis import baselines

    if "baseline" not in results:
        first = os.path.join(work, "data", "train_s64_m15_d10-*.tfrecord")
        records(work, paths, recipe("mask15"), log)
        results["baseline"] = baselines.most_frequent_piece(first, heldout64, 64, 10,
                                                            heldout_examples(heldout64))
    rates = {}
    for name in FLAGS.recipes:  # every probe first: one quiet stretch of the machine
        r = recipe(name)
        rates[name] = throughput(work, name, r, model_config(work, r),
                                 records(work, paths, r, log), log)
    for name in FLAGS.recipes:
        r = recipe(name)
        train = records(work, paths, r, log)
        config = model_config(work, r)
        rate = rates[name]
        steps = int(FLAGS.budget_s * rate / r["batch"])
        for seed in FLAGS.seeds:
            key = f"{name}/seed{seed}"
            if key in results.get("runs", {}):
                continue
            out = os.path.join(work, "runs", name, f"seed{seed}")
            every = max(1, steps // FLAGS.evals)
            t0 = time.time()
            same_seq = r["seq"] == 64
            # (a seq-128 recipe is evaluated once, at the end, on the seq-64 records)
            sh(pretrain_args(config, train, out, r, steps, seed,
                             heldout64 if same_seq else None, every), log)
            if not same_seq:  # the common yardstick: the seq-64 held-out records
                sh(["albert_tf.run_pretraining", "--albert_config_file", config,
                    "--input_file", train, "--output_dir", out, "--nodo_train", "--do_eval",
                    "--eval_input_file", heldout64, "--max_seq_length", "64",
                    "--max_predictions_per_seq", str(r["preds"]), "--eval_batch_size", "64",
                    "--max_eval_steps", "1000"], log)
            curve = []
            for step in range(every, steps + 1, every):
                p = os.path.join(out, f"eval_results_step_{step}.json")
                if os.path.exists(p):
                    curve.append(json.load(open(p)))
            final = json.load(open(os.path.join(out, f"eval_results_step_{steps}.json")))
            results.setdefault("runs", {})[key] = {
                "recipe": r, "steps": steps, "examples_per_second": rate,
                "tokens": steps * r["batch"] * r["seq"], "wall_s": time.time() - t0,
                "final": final, "curve": [(c["global_step"], c["masked_lm_accuracy"],
                                           c["sentence_order_accuracy"]) for c in curve]}
            with open(results_path, "w") as f:
                json.dump(results, f, indent=1)
            print(f"{key}: {steps} steps, held-out MLM {final['masked_lm_accuracy']:.4f}, SOP "
                  f"{final['sentence_order_accuracy']:.4f}", flush=True)
    write_table(work, results)


def heldout_examples(path) -> int:
    """Examples an evaluation of whole batches of 64 sees."""
    with open(path + ".json") as f:
        return json.load(f)["counts"]["examples"] // 64 * 64


def write_table(work, results):
    import numpy as np

    base = results["baseline"]["accuracy"]
    rows = {}
    for key, run in results.get("runs", {}).items():
        rows.setdefault(key.split("/")[0], []).append(run)
    lines = [f"Held-out masked-LM accuracy (seq 64, 15% masking, "
             f"{results['baseline']['eval_examples']:,} examples, "
             f"{results['baseline']['eval_positions']:,} masked positions); most-frequent-piece "
             f"baseline {base:.4f}. Each recipe: {FLAGS.budget_s:.0f} s of its own compute.", "",
             "| recipe | seeds | steps | tokens | held-out MLM | x baseline | held-out SOP |",
             "|---|---|---|---|---|---|---|"]
    for name, runs in rows.items():
        mlm = np.array([r["final"]["masked_lm_accuracy"] for r in runs])
        sop = np.array([r["final"]["sentence_order_accuracy"] for r in runs])
        spread = (lambda a: f"{a.mean():.4f} +- {a.std(ddof=1):.4f}" if len(a) > 1
                  else f"{a.mean():.4f}")
        lines.append(f"| {name} | {len(runs)} | {runs[0]['steps']:,} | "
                     f"{runs[0]['tokens'] / 1e6:.1f}M | {spread(mlm)} | "
                     f"{mlm.mean() / base:.2f} | {spread(sop)} |")
    with open(os.path.join(work, "recipes.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
