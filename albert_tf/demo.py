"""The main job end to end on the bundled sample, from one command: text to a served model.

    python -m albert_tf.demo            # or: albert-demo          (about 12 minutes on 2 cores)
    python -m albert_tf.demo --smoke    # the same steps, tiny sizes (a few minutes; CI runs it)

Every step runs the real command a user runs on their own data (each is printed, logged and
listed in the report, so any one can be scaled up by hand):

 1. corpus     `data.prepare_corpus`: five public-domain novels and WikiText-2 test to one
               sentence per line; every 10th Wikipedia article held out for evaluation;
 2. vocab      `data.train_vocab`: a SentencePiece vocabulary with the official special ids;
 3. data       `data.create_pretraining_data`: n-gram-masked MLM + sentence-order TFRecords, for
               training and from the held-out articles;
 4. pretrain   `albert_tf.run_pretraining`: a small ALBERT (`sample_data/albert_config_small.json`)
               with LAMB, evaluated on the held-out records;
 5. finetune   `albert_tf.run_classifier` on an SST-2 slice (`sample_data/glue/SST-2`) from the
               pretrained model and from random initialisation, same flags and seed; the first
               one is exported as a SavedModel on raw text;
 6. export     `export.export_saved_model`: the pretrained model as a fill-mask SavedModel;
 7. serve      `export.cc_loader`: both SavedModels loaded as TF Serving loads them
               (`LoadSavedModel` + `Session::Run` from C++; `tf.saved_model.load` where no g++ is
               installed), answering raw-text requests;
 8. analysis   `albert_tf.analysis.transitions`: the paper's Figure 2 (how far each layer moves
               its input) for the pretrained model;
 9. report     RUN_DIR/report.md and report.html: metrics beside their baselines, each step's
               time and commands, PNG charts of the curves.

Outputs go to `runs/<timestamp>/`. Running the command again resumes the newest run of the same
settings: a step whose outputs exist is skipped (training resumes from its last checkpoint), so
it never starts over; `--new` starts a fresh run.
"""

from __future__ import annotations

import html
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

from absl import app, flags

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SAMPLE_DIR = os.path.join(PACKAGE_DIR, "sample_data")

# Sizes of the full run and of --smoke (chosen so the full run takes about 12 minutes on a
# 2-core CPU; see the README for a real run's sizes).
SETTINGS = {
    "full": {"albert_config": "albert_config_small.json", "vocab_size": 8000, "dupe_factor": 5,
             "pretrain_steps": 900, "pretrain_batch_size": 64, "pretrain_learning_rate": 5e-3,
             "checkpoint_every": 200, "log_every": 50, "finetune_steps": 500,
             "finetune_batch_size": 32, "finetune_learning_rate": 1e-4, "heldout_every": 10,
             "max_seq_length": 128, "max_predictions_per_seq": 20, "finetune_seq_length": 64,
             "transitions_examples": 256},
    "smoke": {"albert_config": "albert_config_tiny.json", "vocab_size": 8000, "dupe_factor": 1,
              "pretrain_steps": 40, "pretrain_batch_size": 16, "pretrain_learning_rate": 5e-3,
              "checkpoint_every": 20, "log_every": 10, "finetune_steps": 40,
              "finetune_batch_size": 16, "finetune_learning_rate": 1e-4, "heldout_every": 10,
              "max_seq_length": 64, "max_predictions_per_seq": 10, "finetune_seq_length": 48,
              "transitions_examples": 32, "books": ["11-0.txt"], "serve_runtime": "python"},
}

FILL_MASK_REQUESTS = [
    "Alice was beginning to get very [MASK] of sitting by her sister on the bank.",
    "It is a truth universally acknowledged, that a single [MASK] in possession of a good "
    "fortune, must be in want of a wife.",
    "The [MASK] of the river was higher than it had been for many years.",
]
SENTIMENT_REQUESTS = [
    "a gripping , beautifully acted and very funny film .",
    "the plot is dull and the jokes fall flat .",
    "an utterly charming movie that made me smile .",
    "a tedious , overlong mess with nothing to say .",
]


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AMX or AVX512-BF16): there
    `--mixed_precision bfloat16` pretrains about 1.5x faster than float32 (163 against 110
    examples/s for the demo's model); elsewhere bfloat16 is emulated and slower."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            words = set(f.read().split())
    except OSError:
        return False
    return bool(words & {"amx_bf16", "avx512_bf16"})


def define_flags():
    flags.DEFINE_string("runs_dir", "runs", "Runs go to RUNS_DIR/<timestamp>/.")
    flags.DEFINE_string("run_dir", None, "Use (or resume) exactly this run directory.")
    flags.DEFINE_bool("new", False, "Start a new run instead of resuming the newest one.")
    flags.DEFINE_bool("smoke", False, "Tiny sizes: every step in a few minutes (CI).")
    flags.DEFINE_integer("pretrain_steps", None, "Override the pretraining steps.")
    flags.DEFINE_integer("finetune_steps", None, "Override the fine-tuning steps.")
    flags.DEFINE_bool("quiet", False, "Do not echo the commands' output (it is always logged).")


class StepFailed(RuntimeError):
    pass


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies inside it (shorter commands to
    copy), else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


class Run:
    """A run directory: its settings, state (seconds and commands of every step) and steps."""

    def __init__(self, run_dir: str, settings: dict, echo: bool = True):
        self.dir = os.path.abspath(run_dir)
        self.settings = settings
        self.echo = echo
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.state_file = os.path.join(self.dir, "state.json")
        self.state = {"settings": settings, "steps": {}}
        if os.path.exists(self.state_file):
            with open(self.state_file, encoding="utf-8") as f:
                self.state = json.load(f)
        self.state["settings"] = settings
        self._save()

    def path(self, *parts) -> str:
        return os.path.join(self.dir, *parts)

    def _save(self):
        with open(self.state_file + ".tmp", "w", encoding="utf-8") as f:
            json.dump(self.state, f, indent=1)
        os.replace(self.state_file + ".tmp", self.state_file)

    def step(self, name: str, commands, done, index: int, total: int) -> dict:
        """Runs `commands` (lists of args, `python -m module ...`) unless `done()`; records and
        returns {"seconds", "commands", "skipped"}."""
        shown = [shlex.join(["python", "-m", *c]) for c in commands]
        record = self.state["steps"].get(name, {})
        print(f"[{index}/{total}] {name}", flush=True)
        if done():
            print("  done before: skipped", flush=True)
            record.update(commands=shown, skipped=True)
            record.setdefault("seconds", 0.0)
        else:
            t0 = time.time()
            log = self.path("logs", f"{name}.log")
            for command, text in zip(commands, shown):
                print(f"  $ {text}", flush=True)
                self._run(command, text, log)
            record = {"seconds": time.time() - t0, "commands": shown, "skipped": False}
            print(f"  {name}: {record['seconds']:.0f} s", flush=True)
        self.state["steps"][name] = record
        self._save()
        return record

    def _run(self, command, text, log):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        root = os.path.dirname(PACKAGE_DIR)  # this checkout's packages, whatever the cwd
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"$ {text}\n")
            f.flush()
            proc = subprocess.Popen([sys.executable, "-m", *command], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=env, text=True,
                                    errors="replace", bufsize=1)
            tail = []
            for line in proc.stdout:
                f.write(line)
                f.flush()
                tail = (tail + [line])[-30:]
                if self.echo:
                    print("    " + line, end="", flush=True)
            code = proc.wait()
        if code:
            raise StepFailed(f"failed (exit {code}): {text}\n" + "".join(tail)
                             + f"(whole output: {log})")


def choose_run_dir(runs_dir: str, settings: dict, new: bool) -> str:
    """The newest run in `runs_dir` with the same settings (resume), else a new timestamped one."""
    if not new and os.path.isdir(runs_dir):
        for name in sorted(os.listdir(runs_dir), reverse=True):
            state = os.path.join(runs_dir, name, "state.json")
            try:
                with open(state, encoding="utf-8") as f:
                    if json.load(f).get("settings") == settings:
                        return os.path.join(runs_dir, name)
            except (OSError, ValueError):
                continue
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = os.path.join(runs_dir, stamp)
    suffix = 1
    while os.path.exists(path):
        suffix += 1
        path = os.path.join(runs_dir, f"{stamp}-{suffix}")
    return path


def _finished_training(output_dir: str, steps: int) -> bool:
    state = os.path.join(output_dir, "checkpoint")
    if not os.path.exists(state):
        return False
    with open(state, encoding="utf-8") as f:
        return f'ckpt-{steps}"' in f.read()


def _exists(*paths):
    return lambda: all(os.path.exists(p) for p in paths)


def run_demo(run: Run) -> dict:
    """Runs (or resumes) every step of `run`; returns the results the report shows."""
    s = run.settings
    total = 9
    sample = _shown_path(SAMPLE_DIR)
    text_dir = os.path.join(sample, "pretrain_text")
    corpus, heldout = run.path("corpus"), run.path("heldout")
    books = ",".join(os.path.join(text_dir, "gutenberg", b) for b in s.get("books", ["*-0.txt"]))
    p = _shown_path
    run.step("corpus", [
        ["data.prepare_corpus", "--input_file", books,
         "--output_file", p(os.path.join(corpus, "books.txt"))],
        ["data.prepare_corpus", "--input_file",
         os.path.join(text_dir, "wikitext-2-raw", "wiki.test.raw"),
         "--output_file", p(os.path.join(corpus, "wiki.txt")), "--paragraphs", "lines",
         "--document_marker_regex", "^ = [^=].* = $", "--drop_line_regex", "^ (= )+.*( =)+ $",
         "--heldout_file", p(os.path.join(heldout, "wiki.txt")),
         "--heldout_every", str(s["heldout_every"])]],
        _exists(os.path.join(corpus, "books.txt"), os.path.join(corpus, "wiki.txt"),
                os.path.join(heldout, "wiki.txt")), 1, total)

    vocab = run.path("vocab", f"sample{s['vocab_size'] // 1000}k")
    run.step("vocab", [
        ["data.train_vocab", "--input_file",
         f"{p(os.path.join(corpus, 'books.txt'))},{p(os.path.join(corpus, 'wiki.txt'))}",
         "--model_prefix", p(vocab), "--vocab_size", str(s["vocab_size"])]],
        _exists(vocab + ".model"), 2, total)

    seq, preds = str(s["max_seq_length"]), str(s["max_predictions_per_seq"])
    train_records = run.path("pretraining", "train")
    heldout_records = run.path("pretraining", "heldout.tfrecord")  # one file
    run.step("data", [
        ["data.create_pretraining_data", "--input_file", p(os.path.join(corpus, "*.txt")),
         "--output_file", p(train_records), "--num_output_shards", "2",
         "--spm_model_file", p(vocab + ".model"), "--max_seq_length", seq,
         "--max_predictions_per_seq", preds, "--dupe_factor", str(s["dupe_factor"]),
         "--num_workers", "2", "--random_seed", "12345"],
        ["data.create_pretraining_data", "--input_file", p(os.path.join(heldout, "wiki.txt")),
         "--output_file", p(heldout_records), "--num_output_shards", "1",
         "--spm_model_file", p(vocab + ".model"), "--max_seq_length", seq,
         "--max_predictions_per_seq", preds, "--dupe_factor", "1", "--num_workers", "1",
         "--random_seed", "54321"]],
        _exists(train_records + "-00001-of-00002.tfrecord.json",
                heldout_records + ".json"), 3, total)

    config = os.path.join(sample, s["albert_config"])
    pretrain_dir = run.path("pretrain")
    steps = s["pretrain_steps"]
    run.step("pretrain", [
        ["albert_tf.run_pretraining", "--albert_config_file", config,
         "--input_file", p(train_records) + "-*.tfrecord",
         "--eval_input_file", p(heldout_records),
         "--output_dir", p(pretrain_dir), "--do_train", "--do_eval",
         "--train_batch_size", str(s["pretrain_batch_size"]), "--eval_batch_size", "64",
         "--max_seq_length", seq, "--max_predictions_per_seq", preds, "--optimizer", "lamb",
         "--learning_rate", str(s["pretrain_learning_rate"]), "--num_train_steps", str(steps),
         "--num_warmup_steps", str(max(1, steps // 10)),
         "--save_checkpoints_steps", str(s["checkpoint_every"]),
         "--iterations_per_loop", str(s["log_every"]), "--max_eval_steps", "1000",
         "--mixed_precision", s["mixed_precision"],
         "--random_seed", "1", "--spm_model_file", p(vocab + ".model")]],
        lambda: _finished_training(pretrain_dir, steps), 4, total)

    sst2 = os.path.join(sample, "glue", "SST-2")
    finetune = {}
    commands = []
    for init in ("pretrained", "random"):
        finetune[init] = run.path("finetune", f"sst-2_{init}")
        commands.append(
            ["albert_tf.run_classifier", "--task_name", "sst-2", "--data_dir", sst2,
             "--albert_config_file", config, "--spm_model_file", p(vocab + ".model"),
             "--output_dir", p(finetune[init]),
             *(["--init_checkpoint", p(pretrain_dir) + ":best"] if init == "pretrained" else []),
             "--do_train", "--do_eval", "--max_seq_length", str(s["finetune_seq_length"]),
             "--train_batch_size", str(s["finetune_batch_size"]), "--eval_batch_size", "64",
             "--learning_rate", str(s["finetune_learning_rate"]),
             "--train_step", str(s["finetune_steps"]),
             "--warmup_step", str(max(1, s["finetune_steps"] // 10)),
             "--save_checkpoints_steps", str(s["finetune_steps"]),
             "--iterations_per_loop", str(s["log_every"]), "--random_seed", "1",
             *(["--export_dir", p(run.path("exports", "albert_demo_sst2"))]
               if init == "pretrained" else [])])
    run.step("finetune", commands,
             _exists(*(os.path.join(d, "eval_results.json") for d in finetune.values()),
                     run.path("exports", "albert_demo_sst2", "1", "saved_model.pb")), 5, total)

    mlm_export = run.path("exports", "albert_demo_mlm")
    run.step("export", [
        ["export.export_saved_model", "--model_dir", p(pretrain_dir), "--checkpoint", "best",
         "--spm_model_file", p(vocab + ".model"), "--export_dir", p(mlm_export),
         "--version", "1", "--max_seq_length", seq]],
        _exists(os.path.join(mlm_export, "1", "saved_model.pb")), 6, total)

    serve = run.path("serve")
    loader = run.path("serve", "serving_loader")
    runtime = s.get("serve_runtime") or ("cpp" if shutil.which("g++") else "python")
    run.step("serve", [
        ["export.cc_loader", "--runtime", runtime, "--loader_binary", p(loader),
         "--saved_model", p(os.path.join(mlm_export, "1")),
         *[a for t in FILL_MASK_REQUESTS for a in ("--text", t)],
         "--output_json", p(os.path.join(serve, "fill_mask.json"))],
        ["export.cc_loader", "--runtime", runtime, "--loader_binary", p(loader),
         "--saved_model", p(run.path("exports", "albert_demo_sst2", "1")),
         *[a for t in SENTIMENT_REQUESTS for a in ("--text", t)],
         "--output_json", p(os.path.join(serve, "sentiment.json"))]],
        _exists(os.path.join(serve, "fill_mask.json"), os.path.join(serve, "sentiment.json")),
        7, total)

    transitions = run.path("transitions")
    run.step("analysis", [
        ["albert_tf.analysis.transitions", "--model_dir", f"{p(pretrain_dir)}:best",
         "--label", "pretrained ALBERT (all layers shared)",
         "--input_file", p(heldout_records), "--output_dir", p(transitions),
         "--max_seq_length", seq, "--max_predictions_per_seq", preds,
         "--max_examples", str(s["transitions_examples"])]],
        _exists(os.path.join(transitions, "transitions.csv")), 8, total)

    print("[9/9] report", flush=True)
    t0 = time.time()
    results = collect_results(run, train_records, heldout_records, pretrain_dir, finetune,
                              sst2, serve, transitions)
    write_report(run, results)
    run.state["steps"]["report"] = {"seconds": time.time() - t0, "commands": [],
                                    "skipped": False}
    run._save()
    write_report(run, results)  # again, with the report step's own time
    return results


def collect_results(run, train_records, heldout_records, pretrain_dir, finetune, sst2, serve,
                    transitions) -> dict:
    from albert_tf.analysis import baselines, curves

    s = run.settings
    results = {"settings": s, "steps": run.state["steps"]}
    with open(os.path.join(pretrain_dir, "best", "best_eval.json"), encoding="utf-8") as f:
        results["pretrain_best"] = json.load(f)
    evaluated = results["pretrain_best"]["examples"]  # the evaluation's whole batches
    cache = run.path("baselines.json")
    base = None
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            base = json.load(f)
        if base.get("masked_lm", {}).get("eval_examples") != evaluated:
            base = None
    if base is None:
        seq, preds = s["max_seq_length"], s["max_predictions_per_seq"]
        base = {"masked_lm": baselines.most_frequent_piece(
                    train_records + "-*.tfrecord", heldout_records, seq, preds, evaluated),
                "sentence_order": baselines.sentence_order_balance(
                    heldout_records, seq, preds, evaluated),
                "sst-2": baselines.majority_class("sst-2", sst2)}
        with open(cache, "w", encoding="utf-8") as f:
            json.dump(base, f, indent=1)
    results["baselines"] = base
    vocab_file = run.path("vocab", f"sample{s['vocab_size'] // 1000}k.vocab")
    with open(vocab_file, encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f]
    base["masked_lm"]["piece"] = pieces[base["masked_lm"]["piece_id"]]
    final = os.path.join(pretrain_dir, f"eval_results_step_{s['pretrain_steps']}.json")
    with open(final, encoding="utf-8") as f:
        results["pretrain_final"] = json.load(f)
    results["finetune"] = {}
    for init, directory in finetune.items():
        with open(os.path.join(directory, "eval_results.json"), encoding="utf-8") as f:
            results["finetune"][init] = json.load(f)
    for name in ("fill_mask", "sentiment"):
        with open(os.path.join(serve, f"{name}.json"), encoding="utf-8") as f:
            results[name] = json.load(f)
    with open(os.path.join(transitions, "transitions.csv"), encoding="utf-8") as f:
        results["transitions_csv"] = f.read()
    results["curves"] = {
        "pretrain_train": curves.read_scalars(os.path.join(pretrain_dir, "train")),
        "pretrain_eval": curves.read_scalars(os.path.join(pretrain_dir, "eval")),
        **{f"finetune_{init}_train": curves.read_scalars(os.path.join(d, "train"))
           for init, d in finetune.items()}}
    charts_dir = run.path("charts")
    c = results["curves"]
    ptrain, peval = c["pretrain_train"], c["pretrain_eval"]
    curves.plot_panels([
        ("pretraining loss (MLM + SOP)", "loss",
         [("train", ptrain.get("loss", []), {}), ("held-out", peval.get("loss", []),
                                                   {"marker": "o"})]),
        ("masked-LM accuracy", "accuracy",
         [("train", ptrain.get("masked_lm_accuracy", []), {}),
          ("held-out", peval.get("masked_lm_accuracy", []), {"marker": "o"})],
         [(f"most frequent piece ({base['masked_lm']['accuracy']:.3f})",
           base["masked_lm"]["accuracy"])]),
        ("sentence-order accuracy", "accuracy",
         [("train", ptrain.get("sentence_order_accuracy", []), {}),
          ("held-out", peval.get("sentence_order_accuracy", []), {"marker": "o"})],
         [(f"better constant guess ({base['sentence_order']['accuracy']:.3f})",
           base["sentence_order"]["accuracy"])]),
    ], os.path.join(charts_dir, "pretraining.png"), "Pretraining on the bundled sample")
    ftp, ftr = c["finetune_pretrained_train"], c["finetune_random_train"]
    majority = base["sst-2"]["accuracy"]
    curves.plot_panels([
        ("SST-2 fine-tuning loss", "cross-entropy",
         [("from the pretrained model", ftp.get("cross_entropy", []), {}),
          ("from random initialisation", ftr.get("cross_entropy", []), {})]),
        ("SST-2 training accuracy", "accuracy",
         [("from the pretrained model", ftp.get("accuracy", []), {}),
          ("from random initialisation", ftr.get("accuracy", []), {})],
         [(f"majority class on dev ({majority:.3f})", majority)]),
    ], os.path.join(charts_dir, "finetuning.png"), "Fine-tuning on the SST-2 slice")
    results["charts"] = ["charts/pretraining.png", "charts/finetuning.png",
                         "transitions/transitions.png"]
    return results


# ----------------------------------------------------------------------------- the report

def report_blocks(run: Run, results: dict) -> list:
    """The report as blocks: ("h1"|"h2"|"p", text), ("table", header, rows), ("code", text),
    ("img", path, alt), ("ul", items). Rendered to Markdown and HTML alike."""
    s = results["settings"]
    base = results["baselines"]
    best, final = results["pretrain_best"], results["pretrain_final"]
    mlm, sop = base["masked_lm"], base["sentence_order"]
    ft = results["finetune"]
    steps = results["steps"]
    total = sum(r.get("seconds", 0.0) for r in steps.values())
    blocks = [("h1", "albert_tf demo run"),
              ("p", f"Run directory `{_shown_path(run.dir)}`; settings "
                    f"`{'smoke' if s.get('smoke') else 'full'}` (model "
                    f"`{s['albert_config']}`, {s['pretrain_steps']} pretraining steps of "
                    f"{s['pretrain_batch_size']} in {s['mixed_precision']}, "
                    f"{s['finetune_steps']} fine-tuning steps of "
                    f"{s['finetune_batch_size']}). Every number below is read from the files "
                    "the commands wrote.")]
    blocks += [("h2", "Pretraining: did it learn?"),
               ("p", f"Held-out: the {sop['examples']:,} examples (whole evaluation batches of "
                     f"the records generated from every {s['heldout_every']}th Wikipedia "
                     f"article, which the training records never saw), {mlm['eval_positions']:,} "
                     "masked positions; the baselines are scored on the same examples."),
               ("table", ["held-out metric", "model (best checkpoint, step "
                          f"{best.get('global_step', '?')})", f"model (final, step "
                          f"{final.get('global_step', '?')})", "baseline", "baseline is"],
                [["masked-LM accuracy", f"{best['masked_lm_accuracy']:.4f}",
                  f"{final['masked_lm_accuracy']:.4f}", f"{mlm['accuracy']:.4f}",
                  f"always the most frequent masked piece `{mlm['piece']}`"],
                 ["sentence-order accuracy", f"{best['sentence_order_accuracy']:.4f}",
                  f"{final['sentence_order_accuracy']:.4f}", f"{sop['accuracy']:.4f}",
                  f"the better constant guess ({sop['swapped_share']:.1%} of pairs swapped)"],
                 ["masked-LM loss", f"{best['masked_lm_loss']:.4f}",
                  f"{final['masked_lm_loss']:.4f}", "", ""]]),
               ("img", "charts/pretraining.png", "pretraining curves")]
    majority = base["sst-2"]
    blocks += [("h2", "Fine-tuning on SST-2"),
               ("p", f"Training slice of {_count_lines(os.path.join(SAMPLE_DIR, 'glue', 'SST-2', 'train.tsv')):,} "
                     f"sentences; every one of the {majority['examples']} dev sentences scored."),
               ("table", ["dev", "accuracy"],
                [["majority class (`" + str(majority["majority_label"]) + "`)",
                  f"{majority['accuracy']:.4f}"],
                 ["fine-tuned from random initialisation", f"{ft['random']['accuracy']:.4f}"],
                 ["fine-tuned from our pretrained model", f"{ft['pretrained']['accuracy']:.4f}"]]),
               ("p", "Same flags and seed for both fine-tunings; only the initialisation "
                     "differs. At this scale (minutes of pretraining on 2 MB of text) "
                     "pretraining need not help: the comparison is shown, not assumed."),
               ("img", "charts/finetuning.png", "fine-tuning curves")]
    fm, st = results["fill_mask"], results["sentiment"]
    runtime = {"cpp": "C++ (`LoadSavedModel` + `Session::Run`, as TF Serving loads a model)",
               "python": "Python (`tf.saved_model.load`; no g++ on this machine)"}
    rows = []
    for i, text in enumerate(fm["inputs"]):
        pieces = fm["outputs"]["fill_mask_pieces"][i][0]
        probs = fm["outputs"]["fill_mask_probabilities"][i][0]
        rows.append([text, ", ".join(f"`{x}` {q:.3g}" for x, q in zip(pieces, probs))])
    blocks += [("h2", "Serving: raw text in, answers out"),
               ("p", "Both SavedModels (TF Serving's versioned layout, tokenization in-graph) "
                     f"loaded from {runtime[fm['runtime']]}."),
               ("table", ["fill-mask request (`albert_demo_mlm`)", "top candidates for [MASK]"],
                rows)]
    rows = []
    labels = st["outputs"].get("label", [])
    for i, text in enumerate(st["inputs"]):
        probs = st["outputs"]["probabilities"][i]
        label = labels[i] if i < len(labels) else None
        rows.append([text, {0: "negative (0)", 1: "positive (1)"}.get(label, str(label)),
                     ", ".join(f"{q:.3f}" for q in probs)])
    blocks += [("table", ["sentiment request (`albert_demo_sst2`)", "label",
                          "probabilities (negative, positive)"], rows)]
    blocks += [("h2", "The paper's Figure 2: input-output transitions per layer"),
               ("p", "L2 distance and angle between each layer's input and output embedding, "
                     "over the held-out tokens (`transitions/transitions.csv`)."),
               ("img", "transitions/transitions.png", "transitions")]
    rows = [[name, f"{r.get('seconds', 0.0):.0f}" + (" (skipped: done before)"
                                                     if r.get("skipped") else "")]
            for name, r in steps.items()]
    rows.append(["total", f"{total:.0f} ({total / 60:.1f} min)"])
    blocks += [("h2", "Time of each step"), ("table", ["step", "seconds"], rows),
               ("p", "Seconds of a skipped step are those of the run that did it (0 if that "
                     "was not recorded).")]
    blocks += [("h2", "Commands"),
               ("p", "Each step's commands, runnable as they are; scale a step up by changing "
                     "its sizes (see the README for a real run).")]
    for name, r in steps.items():
        if r.get("commands"):
            blocks += [("p", f"**{name}**"), ("code", "\n".join(r["commands"]))]
    return blocks


def _count_lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f) - 1


def _md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind == "h1":
            out.append(f"# {block[1]}")
        elif kind == "h2":
            out.append(f"## {block[1]}")
        elif kind == "p":
            out.append(block[1])
        elif kind == "table":
            out.append("| " + " | ".join(_md_cell(h) for h in block[1]) + " |")
            out.append("|" + "---|" * len(block[1]))
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block[2]]
        elif kind == "code":
            out.append("```\n" + block[1] + "\n```")
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
        elif kind == "ul":
            out += [f"- {item}" for item in block[1]]
        out.append("")
    return "\n".join(out)


def _inline_html(text) -> str:
    """Markdown's `code` and **bold** in our own text, HTML-escaped."""
    import re

    text = html.escape(str(text))
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)


def to_html(blocks, title: str) -> str:
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
           f"<title>{html.escape(title)}</title>",
           "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
           "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;"
           "padding:4px 8px;text-align:left;vertical-align:top}pre{background:#f4f4f4;"
           "padding:8px;overflow-x:auto;white-space:pre-wrap}img{max-width:100%}</style>",
           "</head><body>"]
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{_inline_html(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(block[1])}</p>")
        elif kind == "table":
            out.append("<table><tr>" + "".join(f"<th>{_inline_html(h)}</th>" for h in block[1])
                       + "</tr>")
            out += ["<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in row) + "</tr>"
                    for row in block[2]]
            out.append("</table>")
        elif kind == "code":
            out.append(f"<pre><code>{html.escape(block[1])}</code></pre>")
        elif kind == "img":
            out.append(f"<p><img src=\"{html.escape(block[1])}\" alt=\"{html.escape(block[2])}\">"
                       "</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in block[1])
                       + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(run: Run, results: dict) -> str:
    blocks = report_blocks(run, results)
    for name, text in (("report.md", to_markdown(blocks)),
                       ("report.html", to_html(blocks, "albert_tf demo run"))):
        with open(run.path(name + ".tmp"), "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(run.path(name + ".tmp"), run.path(name))
    summary = {k: v for k, v in results.items() if k not in ("curves", "transitions_csv")}
    with open(run.path("results.json.tmp"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
    os.replace(run.path("results.json.tmp"), run.path("results.json"))
    return run.path("report.md")


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    name = "smoke" if FLAGS.smoke else "full"
    settings = dict(SETTINGS[name], smoke=FLAGS.smoke,
                    mixed_precision="bfloat16" if cpu_has_bf16() else "float32")
    if FLAGS.pretrain_steps:
        settings["pretrain_steps"] = FLAGS.pretrain_steps
    if FLAGS.finetune_steps:
        settings["finetune_steps"] = FLAGS.finetune_steps
    run_dir = FLAGS.run_dir or choose_run_dir(FLAGS.runs_dir, settings, FLAGS.new)
    if FLAGS.run_dir and os.path.exists(os.path.join(run_dir, "state.json")):
        with open(os.path.join(run_dir, "state.json"), encoding="utf-8") as f:
            previous = json.load(f).get("settings")
        if previous != settings:
            print(f"error: {run_dir} was run with other settings ({previous}); use another "
                  "--run_dir or the same flags.", file=sys.stderr)
            return 2
    run = Run(run_dir, settings, echo=not FLAGS.quiet)
    print(f"albert_tf demo ({name}): {_shown_path(run.dir)}", flush=True)
    t0 = time.time()
    try:
        results = run_demo(run)
    except StepFailed as e:
        print(f"error: {e}", file=sys.stderr)
        print("Fix the cause and run the same command again: finished steps are kept.",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: run the same command again to resume.", file=sys.stderr)
        return 130
    best = results["pretrain_best"]
    base = results["baselines"]
    print(f"\nheld-out masked-LM accuracy {best['masked_lm_accuracy']:.3f} (most frequent piece "
          f"{base['masked_lm']['accuracy']:.3f}); sentence order "
          f"{best['sentence_order_accuracy']:.3f} (constant {base['sentence_order']['accuracy']:.3f})")
    print(f"SST-2 dev accuracy: pretrained {results['finetune']['pretrained']['accuracy']:.3f}, "
          f"random init {results['finetune']['random']['accuracy']:.3f}, majority "
          f"{base['sst-2']['accuracy']:.3f}")
    print(f"report: {_shown_path(run.path('report.md'))} (and report.html); this invocation "
          f"took {time.time() - t0:.0f} s")
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    define_flags()
    sys.exit(app.run(main))


if __name__ == "__main__":
    cli()
