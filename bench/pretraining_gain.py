"""What our pretraining buys: GLUE and SQuAD dev scores of a model pretrained by our own
pipeline on the bundled corpus, beside the same fine-tuning from random initialisation and the
majority/constant baselines. Every step is a real command (printed, and listed in the report);
a step whose output exists is skipped, so rerunning resumes.

    python -m bench.pretraining_gain --out runs/gain --glue_dir ../shared/data/glue \
        --squad_file ../shared/data/squad/dev-v1.1.json.zip

Steps: corpus -> SentencePiece vocabulary -> pretraining TFRecords (`data.*`), pretraining
(`albert_tf.run_pretraining`, `albert_tf/sample_data/albert_config_small.json`, the demo's model), then for SST-2, CoLA, RTE,
STS-B (`albert_tf.run_classifier`) and SQuAD v1.1 (`albert_tf.run_squad_v1`; no train set is
shipped: the dev set's articles are split, the first `--squad_train_articles` to train, the rest
to evaluate) one fine-tuning from the pretrained model and one from random initialisation with
the same flags and seed. Writes OUT/report.md and OUT/results.json.
"""

import json
import os
import shlex
import subprocess
import sys
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("out", "runs/gain", "Output directory.")
flags.DEFINE_string("glue_dir", os.path.join(ROOT, "..", "shared", "data", "glue"),
                    "Directory holding CoLA/, RTE/, SST-2/, STS-B/ (original GLUE files).")
flags.DEFINE_string("squad_file", os.path.join(ROOT, "..", "shared", "data", "squad",
                                               "dev-v1.1.json.zip"), "SQuAD v1.1 dev.")
flags.DEFINE_string("albert_config", os.path.join(ROOT, "albert_tf", "sample_data",
                                                  "albert_config_small.json"), "Model config.")
flags.DEFINE_integer("dupe_factor", 10, "Pretraining data passes.")
flags.DEFINE_integer("pretrain_steps", 4000, "Pretraining steps.")
flags.DEFINE_integer("pretrain_batch_size", 64, "Pretraining batch size.")
flags.DEFINE_float("pretrain_learning_rate", 5e-3, "Pretraining LAMB learning rate.")
flags.DEFINE_integer("squad_train_articles", 38, "Dev articles to train SQuAD on.")
flags.DEFINE_list("tasks", ["sst-2", "cola", "rte", "sts-b", "squad"], "Fine-tuning tasks.")
FLAGS = flags.FLAGS

# task: (GLUE directory, max_seq_length, batch size, steps, warmup, learning rate)
GLUE = {"sst-2": ("SST-2", 64, 32, 2000, 200, 1e-4),
        "cola": ("CoLA", 64, 32, 800, 80, 1e-4),
        "rte": ("RTE", 128, 32, 400, 40, 5e-5),
        "sts-b": ("STS-B", 128, 32, 600, 60, 1e-4)}
MAIN_METRIC = {"sst-2": "accuracy", "cola": "matthews_corr", "rte": "accuracy",
               "sts-b": "pearson"}


def run(cmd, log, done):
    """Runs `cmd` (python -m ...) unless `done` exists; returns seconds."""
    printable = shlex.join(cmd)
    print(f"$ {printable}", flush=True)
    COMMANDS.append(printable)
    if done and (done() if callable(done) else os.path.exists(done)):
        print("  (done before: skipped)")
        return TIMINGS.get(printable, 0.0)
    t0 = time.time()
    with open(log, "a") as f:
        proc = subprocess.run([sys.executable, "-m", *cmd[2:]], cwd=ROOT, stdout=f,
                              stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=ROOT,
                                                                 TF_CPP_MIN_LOG_LEVEL="2"))
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}); see {log}")
    seconds = time.time() - t0
    print(f"  {seconds:.0f} s", flush=True)
    TIMINGS[printable] = seconds
    if TIMINGS_FILE:
        with open(TIMINGS_FILE, "w") as f:
            json.dump(TIMINGS, f, indent=2)
    return seconds


COMMANDS = []
TIMINGS = {}  # command -> seconds, kept in OUT/timings.json so a resumed run reports them
TIMINGS_FILE = None


def _finished(output_dir, steps):
    state = os.path.join(output_dir, "checkpoint")
    return os.path.exists(state) and f"ckpt-{steps}\"" in open(state).read()


def majority_baseline(task_name, glue_dir):
    from albert_tf.analysis.baselines import majority_class

    return majority_class(task_name, os.path.join(glue_dir, GLUE[task_name][0]))


def squad_split(out):
    from albert_tf.tasks.squad import evaluation as squad_eval

    data = squad_eval.load_dataset(FLAGS.squad_file)
    paths = {}
    for name, articles in (("train", data[:FLAGS.squad_train_articles]),
                           ("dev", data[FLAGS.squad_train_articles:])):
        paths[name] = os.path.join(out, f"squad_{name}.json")
        if not os.path.exists(paths[name]):
            with open(paths[name], "w") as f:
                json.dump({"version": "1.1", "data": articles}, f)
    return paths


def _pretrain(out: str, log: str, seconds: dict) -> tuple[str, str]:
    """Corpus, vocabulary, records and pretraining (each skipped when done): (vocab prefix,
    pretraining output dir)."""
    py = "python -m"
    corpus = os.path.join(out, "corpus")
    sample = os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text")
    seconds["corpus"] = run([*py.split(), "data.prepare_corpus", "--input_file",
                             f"{sample}/gutenberg/*-0.txt", "--output_file",
                             f"{corpus}/books.txt"], log, f"{corpus}/books.txt")
    seconds["corpus"] += run([*py.split(), "data.prepare_corpus", "--input_file",
                              f"{sample}/wikitext-2-raw/wiki.test.raw", "--output_file",
                              f"{corpus}/wiki.txt", "--paragraphs", "lines",
                              "--document_marker_regex", "^ = [^=].* = $",
                              "--drop_line_regex", "^ (= )+.*( =)+ $"], log,
                             f"{corpus}/wiki.txt")
    vocab = os.path.join(out, "vocab", "sample8k")
    seconds["vocab"] = run([*py.split(), "data.train_vocab", "--input_file",
                            f"{corpus}/books.txt,{corpus}/wiki.txt", "--model_prefix", vocab,
                            "--vocab_size", "8000"], log, vocab + ".model")
    records = os.path.join(out, "pretraining", "train")
    seconds["data"] = run([*py.split(), "data.create_pretraining_data", "--input_file",
                           f"{corpus}/*.txt", "--output_file", records, "--num_output_shards",
                           "4", "--spm_model_file", vocab + ".model", "--max_seq_length", "128",
                           "--max_predictions_per_seq", "20", "--dupe_factor",
                           str(FLAGS.dupe_factor), "--num_workers", "2"], log,
                          records + "-00003-of-00004.tfrecord")
    pretrained = os.path.join(out, "pretrain")
    seconds["pretrain"] = run(
        [*py.split(), "albert_tf.run_pretraining", "--albert_config_file", FLAGS.albert_config,
         "--input_file", records + "-*", "--output_dir", pretrained, "--do_train",
         "--train_batch_size", str(FLAGS.pretrain_batch_size), "--max_seq_length", "128",
         "--max_predictions_per_seq", "20", "--optimizer", "lamb", "--learning_rate",
         str(FLAGS.pretrain_learning_rate), "--num_train_steps", str(FLAGS.pretrain_steps),
         "--num_warmup_steps", str(FLAGS.pretrain_steps // 10), "--save_checkpoints_steps",
         "1000", "--iterations_per_loop", "100"], log,
        lambda: _finished(pretrained, FLAGS.pretrain_steps))
    return vocab, pretrained


def _finetune_command(task: str, out: str, task_out: str, vocab: str, init_flags: list) -> list:
    """The fine-tuning command of `task` (SQuAD v1.1 on held-out articles, or a GLUE task)."""
    if task == "squad":
        paths = squad_split(out)
        return ["python", "-m", "albert_tf.run_squad_v1", "--train_file", paths["train"],
                "--predict_file", paths["dev"], "--albert_config_file",
                FLAGS.albert_config, "--spm_model_file", vocab + ".model",
                "--output_dir", task_out, *init_flags, "--do_train", "--do_predict",
                "--max_seq_length", "192", "--doc_stride", "96",
                "--max_query_length", "32", "--train_batch_size", "32",
                "--learning_rate", "2e-4", "--num_train_epochs", "2",
                "--iterations_per_loop", "100", "--save_checkpoints_steps", "100000",
                "--predict_batch_size", "64"]
    directory, seq, batch, steps, warmup, lr = GLUE[task]
    return ["python", "-m", "albert_tf.run_classifier", "--task_name", task,
            "--data_dir", os.path.join(FLAGS.glue_dir, directory),
            "--albert_config_file", FLAGS.albert_config, "--spm_model_file",
            vocab + ".model", "--output_dir", task_out, *init_flags, "--do_train",
            "--do_eval", "--max_seq_length", str(seq), "--train_batch_size",
            str(batch), "--eval_batch_size", "64", "--learning_rate", str(lr),
            "--train_step", str(steps), "--warmup_step", str(warmup),
            "--save_checkpoints_steps", str(steps), "--iterations_per_loop",
            "100"]


def _table(results: dict) -> list[str]:
    """The Markdown table: each task's metric, baseline, random init and pretrained."""
    lines = ["| task (dev) | metric | baseline | random init | pretrained (ours) |",
             "|---|---|---|---|---|"]
    for task, row in results["tasks"].items():
        if task == "squad":
            for metric in ("exact_match", "f1"):
                lines.append(f"| SQuAD v1.1 (held-out articles, {row['random']['questions']} "
                             f"questions) | {metric} | 0.0 | {row['random'][metric]:.2f} | "
                             f"{row['pretrained'][metric]:.2f} |")
            continue
        metrics = [MAIN_METRIC[task]] + (["spearman"] if task == "sts-b" else []) + \
            (["accuracy"] if task == "cola" else [])
        for metric in metrics:
            base = row["baseline"].get(metric, 0.0)
            lines.append(f"| {task} ({row['random'].get('examples', '?')} examples) | {metric} "
                         f"| {base:.4f} | {row['random'][metric]:.4f} | "
                         f"{row['pretrained'][metric]:.4f} |")
    return lines


def main(argv):
    del argv
    out = os.path.abspath(FLAGS.out)
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "log.txt")
    seconds = {}
    global TIMINGS_FILE
    TIMINGS_FILE = os.path.join(out, "timings.json")
    if os.path.exists(TIMINGS_FILE):
        with open(TIMINGS_FILE) as f:
            TIMINGS.update(json.load(f))
    vocab, pretrained = _pretrain(out, log, seconds)
    results = {"tasks": {}, "seconds": seconds}
    for task in FLAGS.tasks:
        row = results["tasks"][task] = {}
        for init in ("pretrained", "random"):
            task_out = os.path.join(out, "finetune", f"{task}_{init}")
            init_flags = ["--init_checkpoint", pretrained] if init == "pretrained" else []
            cmd = _finetune_command(task, out, task_out, vocab, init_flags)
            seconds[f"{task}_{init}"] = run(cmd, log,
                                            os.path.join(task_out, "eval_results.json"))
            row[init] = json.load(open(os.path.join(task_out, "eval_results.json")))
        if task != "squad":
            row["baseline"] = majority_baseline(task, FLAGS.glue_dir)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    lines = _table(results)
    report = ["# What pretraining buys", "", *lines, "", "Seconds per step (0: run before "
              "timings were kept): " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()),
              "", "Commands:", "", "```", *COMMANDS, "```"]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(report) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    app.run(main)
