"""Which fine-tuning learning rate and length the main job's SST-2 arms use, chosen on labels
held out from SST-2's *train* split (never on the dev set the job reports).

    python -m bench.finetuning_recipe --work_dir bench_results/finetuning \
        --init_checkpoint RUN_DIR/pretrain --spm_model_file RUN_DIR/vocab/sample8k.model

RUN_DIR is a main job's run directory (`python -m albert_tf.demo`). Both arms of the job (the
pretrained model and its random initialisation) fine-tune on the first 1,000 train labels, as
the job does, and are scored on 1,000 other train sentences (rows 15,001-16,000 of train.tsv),
for every learning rate x step count x seed. A setting is good for the job when both arms leave
the majority-class plateau in every seed: the job compares the two arms, and an arm stuck at
majority says nothing about its initialisation. Writes WORK_DIR/results.json and
WORK_DIR/finetuning.md (the table in docs/pretraining.md). Rerunning skips finished runs.
"""

from __future__ import annotations

import glob
import json
import os
import statistics

from absl import app, flags

from albert_tf.demo import SETTINGS, classifier_args
from albert_tf.paths import atomic_write
from bench import ROOT, sh

SST2 = os.path.join(ROOT, "albert_tf", "sample_data", "glue", "SST-2")
TRAIN_LABELS = SETTINGS["full"]["finetune_examples"]  # the job's: 1,000
VALIDATION_ROWS = (15000, 16000)  # data rows of train.tsv (header excluded), never trained on

flags.DEFINE_string("work_dir", "bench_results/finetuning", "Data, runs and results go here.")
flags.DEFINE_string("init_checkpoint", None, "The pretrained model (a main job's RUN_DIR/pretrain).")
flags.DEFINE_string("spm_model_file", None, "Its vocabulary (RUN_DIR/vocab/sample8k.model).")
flags.DEFINE_string("albert_config_file",
                    os.path.join(ROOT, "albert_tf", "sample_data", "albert_config_small.json"),
                    "The model config of the pretrained run.")
flags.DEFINE_list("learning_rates", ["1e-4", "2e-4", "5e-4", "1e-3", "2e-3"], "Peak rates.")
flags.DEFINE_list("steps", ["157", "313"], "Steps (157: 5 epochs of 1,000 labels at batch 32).")
flags.DEFINE_list("seeds", ["1", "2"], "Seeds of each arm and setting.")
FLAGS = flags.FLAGS


def split(work: str) -> str:
    """A GLUE-layout directory: train.tsv (the first 1,000 train labels and the rest, the job
    reads only the first 1,000) and dev.tsv (the validation rows of train)."""
    out = os.path.join(work, "sst2_validation")
    if os.path.exists(os.path.join(out, "dev.tsv")):
        return out
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(SST2, "train.tsv"), encoding="utf-8") as f:
        header, *rows = f.read().splitlines()
    lo, hi = VALIDATION_ROWS
    with open(os.path.join(out, "train.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join([header] + rows[:TRAIN_LABELS]) + "\n")
    with atomic_write(os.path.join(out, "dev.tsv")) as f:  # last: the directory is complete
        f.write("\n".join([header] + rows[lo:hi]) + "\n")
    return out


def run(work, data, arm, lr, steps, seed, log) -> float:
    out = os.path.join(work, "runs", f"{arm}_lr{lr}_steps{steps}", f"seed{seed}")
    final = os.path.join(out, f"eval_results_step_{steps}.json")
    if not os.path.exists(final):
        args = classifier_args(SETTINGS["full"], FLAGS.albert_config_file,
                               FLAGS.spm_model_file, out, seed, int(steps), learning_rate=lr,
                               init_checkpoint=FLAGS.init_checkpoint
                               if arm == "pretrained" else None, data_dir=data)
        sh(args, log)
    return json.load(open(final))["accuracy"]


def main(argv):
    del argv
    if not FLAGS.init_checkpoint or not glob.glob(os.path.join(FLAGS.init_checkpoint, "*")):
        raise app.UsageError("--init_checkpoint: a main job's RUN_DIR/pretrain directory.")
    if not FLAGS.spm_model_file or not os.path.exists(FLAGS.spm_model_file):
        raise app.UsageError("--spm_model_file: that job's RUN_DIR/vocab/sample8k.model.")
    work = os.path.abspath(FLAGS.work_dir)
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    data = split(work)
    with open(os.path.join(data, "dev.tsv"), encoding="utf-8") as f:
        labels = [line.rsplit("\t", 1)[1] for line in f.read().splitlines()[1:]]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    results = {"majority": majority, "validation_examples": len(labels), "runs": {}}
    lines = ["| learning rate | steps | random init (per seed) | pretrained (per seed) | "
             "mean of both arms | arms at majority |", "|---|---|---|---|---|---|"]
    for steps in FLAGS.steps:
        for lr in FLAGS.learning_rates:
            accs = {arm: [run(work, data, arm, lr, steps, s, log) for s in FLAGS.seeds]
                    for arm in ("random_init", "pretrained")}
            both = accs["random_init"] + accs["pretrained"]
            stuck = sum(abs(a - majority) < 0.005 for a in both)
            results["runs"][f"lr{lr}_steps{steps}"] = dict(accs, mean=statistics.mean(both),
                                                         at_majority=stuck)
            lines.append(f"| {lr} | {steps} | "
                         + ", ".join(f"{a:.3f}" for a in accs["random_init"]) + " | "
                         + ", ".join(f"{a:.3f}" for a in accs["pretrained"])
                         + f" | {statistics.mean(both):.3f} | {stuck} of {len(both)} |")
            print(lines[-1], flush=True)
    lines.append(f"\nValidation: {len(labels):,} train sentences never trained on; majority "
                 f"class {majority:.3f}.")
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(work, "finetuning.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
