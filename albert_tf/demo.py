"""The main job end to end on the bundled sample, from one command: text to a served model, and a
report of what the pretraining bought, sized to this machine.

    python -m albert_tf.demo                      # or: albert-demo   (15 minutes of its own time)
    python -m albert_tf.demo --budget_minutes 60  # the same job, a larger pretraining run
    python -m albert_tf.demo --smoke              # the same steps, tiny sizes (CI runs it)

Every step runs the real command a user runs on their own data (each is printed, logged and
listed in the report, so any one can be scaled up by hand):

 1. corpus        `data.prepare_corpus`: five public-domain novels (one document per chapter)
                  and WikiText-2 test (one per article); every 4th document held out;
 2. vocab         `data.train_vocab`: a SentencePiece vocabulary of the training documents;
 3. data          `data.create_pretraining_data`: n-gram-masked MLM + sentence-order TFRecords
                  (40% masking) and the held-out records (15% masking, the usual evaluation;
                  sentence-order pairs from one document each, so their labels are balanced);
 4. finetune_random  `albert_tf.run_classifier`: SST-2 with few labels from random weights, one
                  run per seed (the baseline arm; it also tells the sizing what fine-tuning costs);
 5. size          a short `albert_tf.run_pretraining` probe times this machine's steps; the
                  pretraining step count that fits the rest of the budget is written to
                  RUN_DIR/size/sizing.json (and kept: a rerun resumes the same schedule);
 6. pretrain      `albert_tf.run_pretraining`: a small ALBERT with LAMB, evaluated on the held-out
                  records along the way;
 7. finetune_pretrained  the same fine-tunings from the pretrained model; seed 1's model is
                  exported as a SavedModel on raw text;
 8. export        `export.export_saved_model`: the pretrained model as a fill-mask SavedModel;
 9. serve         `export.cc_loader`: both SavedModels loaded as TF Serving loads them (C++
                  `LoadSavedModel` + `Session::Run`; `tf.saved_model.load` without g++),
                  answering raw-text requests;
10. fill_mask     `albert_tf.analysis.fill_mask`: the fill-mask answers of the pretrained model
                  beside those of its random initialisation;
11. analysis      `albert_tf.analysis.transitions`: the paper's Figure 2 for the pretrained model;
12. report        RUN_DIR/report.md, report.html and results.json: every figure beside its
                  baseline, the compute spent, each step's time and commands, charts.

Outputs go to `runs/<timestamp>/`. Running the command again resumes the newest run of the same
settings: a command whose last artefact exists is skipped (training resumes from its last
checkpoint), so it never starts over; `--new` starts a fresh run.
"""

from __future__ import annotations

import glob
import html
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from absl import app, flags
from albert_tf.cli import run_command
from albert_tf.analysis import baselines, charts, curves, flops
from albert_tf.config import AlbertConfig

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SAMPLE_DIR = os.path.join(PACKAGE_DIR, "sample_data")

# The bundled novels have a chapter heading alone on a line ("CHAPTER IV.", "Chapter 12",
# "Letter 3", "IV. THE BOSCOMBE VALLEY MYSTERY"): each chapter is a document.
BOOK_CHAPTER_REGEX = r"^(CHAPTER|Chapter|Letter) [IVXLC0-9]+\.?$|^[IVX]+\. [A-Z][A-Z -]+$"
WIKI_FLAGS = ["--paragraphs", "lines", "--document_marker_regex", "^ = [^=].* = $",
              "--drop_line_regex", "^ (= )+.*( =)+ $"]

# The recipe (docs/pretraining.md: how each value was chosen on held-out pretraining text; the
# fine-tuning rate on SST-2 train labels held out from training, bench/finetuning_recipe.py).
# The pretraining step count is not here: the job measures this machine and fits it to
# --budget_minutes (or takes --pretrain_steps).
SETTINGS = {
    "full": {"albert_config": "albert_config_small.json", "books": "*-0.txt",
             "vocab_size": 8000, "heldout_every": 4, "max_seq_length": 64,
             "masked_lm_prob": 0.4, "heldout_masked_lm_prob": 0.15, "dupe_factor": 10,
             "pretrain_batch_size": 32, "pretrain_learning_rate": 1e-2,
             "warmup_fraction": 0.1, "evaluations": 8, "budget_minutes": 15.0,
             "min_pretrain_steps": 200, "max_pretrain_steps": 10 ** 6, "probe_steps": 60,
             "finetune_task": "sst-2", "finetune_examples": 1000, "finetune_seeds": [1, 2, 3],
             "finetune_seq_length": 64, "finetune_batch_size": 32, "finetune_epochs": 5,
             "finetune_learning_rate": 2e-4, "log_every": 50, "transitions_examples": 256},
    "smoke": {"albert_config": "albert_config_tiny.json", "books": "11-0.txt",
              "vocab_size": 8000, "heldout_every": 4, "max_seq_length": 64,
              "masked_lm_prob": 0.4, "heldout_masked_lm_prob": 0.15, "dupe_factor": 1,
              "pretrain_batch_size": 16, "pretrain_learning_rate": 5e-3,
              "warmup_fraction": 0.1, "evaluations": 2, "budget_minutes": 3.0,
              "min_pretrain_steps": 20, "max_pretrain_steps": 60, "probe_steps": 20,
              "finetune_task": "sst-2", "finetune_examples": 200, "finetune_seeds": [1, 2],
              "finetune_seq_length": 48, "finetune_batch_size": 16, "finetune_epochs": 1,
              "finetune_learning_rate": 5e-4, "log_every": 10, "transitions_examples": 32,
              "serve_runtime": "python"},
}

FILL_MASK_REQUESTS = [
    "Alice was beginning to get very [MASK] of sitting by her sister on the bank.",
    "It is a truth universally acknowledged, that a single [MASK] in possession of a good "
    "fortune, must be in want of a wife.",
    "The [MASK] of the river was higher than it had been for many years.",
    "She opened the [MASK] and walked into the room.",
    "He put his hand in his [MASK] and took out a letter.",
    "The city is the [MASK] of the state and its largest port.",
    "They were married in [MASK] and had three children.",
    "The album was released in the United [MASK] in 1998.",
    "\"I do not know,\" said [MASK], looking at his friend.",
    "The game was played in front of a [MASK] of 20,000 people.",
    "It was a dark and stormy [MASK].",
    "The ship sailed across the [MASK] to America.",
]
SENTIMENT_REQUESTS = [
    "a gripping , beautifully acted and very funny film .",
    "the plot is dull and the jokes fall flat .",
    "an utterly charming movie that made me smile .",
    "a tedious , overlong mess with nothing to say .",
]
TAIL_COMMANDS = 5  # export, two serve requests, fill_mask, analysis (sizing's estimate)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AMX or AVX512-BF16): there
    `--mixed_precision bfloat16` pretrains faster than float32; elsewhere bfloat16 is emulated
    and slower."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            words = set(f.read().split())
    except OSError:
        return False
    return bool(words & {"amx_bf16", "avx512_bf16"})


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return "unknown CPU"
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    cores = len(re.findall(r"^processor\s*:", text, re.M))
    flags_ = set(text.split())
    features = [f for f in ("avx512_bf16", "amx_bf16", "avx512f", "avx2") if f in flags_][:2]
    return (f"{model.group(1).strip() if model else 'CPU'}, {cores} cores"
            + (f" ({', '.join(features)})" if features else ""))


def define_flags():
    flags.DEFINE_string("runs_dir", "runs", "Runs go to RUNS_DIR/<timestamp>/.")
    flags.DEFINE_string("run_dir", None, "Use (or resume) exactly this run directory.")
    flags.DEFINE_bool("new", False, "Start a new run instead of resuming the newest one.")
    flags.DEFINE_bool("smoke", False, "Tiny sizes: every step in a few minutes (CI).")
    flags.DEFINE_float("budget_minutes", None,
                       "The job's own time (install excluded): the pretraining steps are chosen "
                       "to fit it after timing this machine. Default 15 (--smoke: 3). More time "
                       "or an accelerator: a larger run from the same command.")
    flags.DEFINE_integer("pretrain_steps", None, "Pretraining steps, instead of fitting them to "
                         "the budget.")
    flags.DEFINE_integer("finetune_steps", None, "Fine-tuning steps of each run (default: "
                         "finetune_epochs over the labelled examples).")
    flags.DEFINE_bool("quiet", False, "Do not echo the commands' output (it is always logged).")


class StepFailed(RuntimeError):
    pass


def _shown_path(path: str) -> str:
    """`path` relative to the working directory when it lies inside it (shorter commands to
    copy), else absolute."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, ensure_ascii=False)
    os.replace(path + ".tmp", path)


def _read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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
            self.state = _read_json(self.state_file)
        self.state["settings"] = settings
        self._save()

    def path(self, *parts) -> str:
        return os.path.join(self.dir, *parts)

    def _save(self):
        _write_json(self.state_file, self.state)

    def step(self, name: str, commands, index: int, total: int) -> dict:
        """Runs each of `commands` ([(args of `python -m`, its last artefact)]) whose artefact
        does not exist yet; records the step's seconds (summed over the invocations that ran
        part of it) and commands."""
        shown = [shlex.join(["python", "-m", *args]) for args, _ in commands]
        record = self.state["steps"].get(name, {})
        print(f"[{index}/{total}] {name}", flush=True)
        todo = [(args, text) for (args, done), text in zip(commands, shown)
                if not os.path.exists(done)]
        if not todo:
            print("  done before: skipped", flush=True)
            record.update(commands=shown, skipped=True)
            record.setdefault("seconds", 0.0)
        else:
            # Seconds of an earlier invocation that ran part of this step and was cut short.
            seconds = record.get("seconds", 0.0) if record.get("partial") else 0.0
            log = self.path("logs", f"{name}.log")
            for args, text in todo:
                print(f"  $ {text}", flush=True)
                t0 = time.time()
                self._run(args, text, log)
                seconds += time.time() - t0
                self.state["steps"][name] = {"seconds": seconds, "commands": shown,
                                             "skipped": False, "partial": True}
                self._save()
            record = {"seconds": seconds, "commands": shown, "skipped": False}
            print(f"  {name}: {seconds:.0f} s", flush=True)
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

    def seconds(self, *names) -> float:
        return sum(self.state["steps"].get(n, {}).get("seconds", 0.0) for n in names)


def choose_run_dir(runs_dir: str, settings: dict, new: bool) -> str:
    """The newest run in `runs_dir` with the same settings (resume), else a new timestamped one."""
    if not new and os.path.isdir(runs_dir):
        for name in sorted(os.listdir(runs_dir), reverse=True):
            state = os.path.join(runs_dir, name, "state.json")
            try:
                if _read_json(state).get("settings") == settings:
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


# ----------------------------------------------------------------------------- the commands
# Shared with bench.pretraining_recipes, which tunes the recipe on the same data.

def predictions_for(masked_lm_prob: float, max_seq_length: int) -> int:
    """max_predictions_per_seq that lets `masked_lm_prob` of a full sequence be masked."""
    return max(1, round(masked_lm_prob * max_seq_length))


def corpus_paths(root: str, vocab_size: int = 8000) -> dict:
    p = _shown_path
    return {"corpus": p(os.path.join(root, "corpus")), "heldout": p(os.path.join(root, "heldout")),
            "vocab": p(os.path.join(root, "vocab", f"sample{vocab_size // 1000}k")),
            "vocab_size": vocab_size,
            "train_records": p(os.path.join(root, "pretraining", "train")),
            "heldout_records": p(os.path.join(root, "pretraining", "heldout.tfrecord"))}


def corpus_commands(paths: dict, books: str = "*-0.txt", heldout_every: int = 4) -> list:
    """Books (a document per chapter) and WikiText-2 test (per article); every
    `heldout_every`-th document of each held out: [(args, last artefact)]."""
    text_dir = os.path.join(_shown_path(SAMPLE_DIR), "pretrain_text")
    corpus, heldout = paths["corpus"], paths["heldout"]
    every = ["--heldout_every", str(heldout_every)]
    return [(["data.prepare_corpus", "--input_file",
              ",".join(os.path.join(text_dir, "gutenberg", b) for b in books.split(",")),
              "--output_file", os.path.join(corpus, "books.txt"),
              "--document_marker_regex", BOOK_CHAPTER_REGEX,
              "--heldout_file", os.path.join(heldout, "books.txt"), *every],
             os.path.join(heldout, "books.txt")),
            (["data.prepare_corpus", "--input_file",
              os.path.join(text_dir, "wikitext-2-raw", "wiki.test.raw"),
              "--output_file", os.path.join(corpus, "wiki.txt"), *WIKI_FLAGS,
              "--heldout_file", os.path.join(heldout, "wiki.txt"), *every],
             os.path.join(heldout, "wiki.txt"))]


def vocab_commands(paths: dict) -> list:
    corpus = paths["corpus"]
    return [(["data.train_vocab", "--input_file",
              f"{os.path.join(corpus, 'books.txt')},{os.path.join(corpus, 'wiki.txt')}",
              "--model_prefix", paths["vocab"], "--vocab_size", str(paths["vocab_size"])],
             paths["vocab"] + ".model")]


def train_records_command(paths: dict, prefix: str, seq: int, mask: float, preds: int,
                          dupe: int, shards: int = 2) -> tuple:
    return (["data.create_pretraining_data", "--input_file",
             os.path.join(paths["corpus"], "*.txt"), "--output_file", prefix,
             "--num_output_shards", str(shards), "--spm_model_file", paths["vocab"] + ".model",
             "--max_seq_length", str(seq), "--max_predictions_per_seq", str(preds),
             "--masked_lm_prob", str(mask), "--dupe_factor", str(dupe), "--num_workers", "2",
             "--random_seed", "12345"],
            f"{prefix}-{shards - 1:05d}-of-{shards:05d}.tfrecord.json")


def heldout_commands(paths: dict, seq: int = 64, mask: float = 0.15) -> list:
    """The held-out records: `mask` masking (15%, as evaluations usually are), one pass, and
    sentence-order pairs from one document each (balanced labels)."""
    out = paths["heldout_records"]
    return [(["data.create_pretraining_data", "--input_file",
              os.path.join(paths["heldout"], "*.txt"), "--output_file", out,
              "--num_output_shards", "1", "--spm_model_file", paths["vocab"] + ".model",
              "--max_seq_length", str(seq),
              "--max_predictions_per_seq", str(predictions_for(mask, seq)),
              "--masked_lm_prob", str(mask), "--dupe_factor", "1", "--num_workers", "1",
              "--random_seed", "54321", "--sentence_order_pairs_only"], out + ".json")]


def pretrain_args(s: dict, config: str, paths: dict, output_dir: str, steps: int,
                  evaluate: bool = True) -> list:
    seq = s["max_seq_length"]
    every = max(1, steps // s["evaluations"]) if evaluate else steps
    args = ["albert_tf.run_pretraining", "--albert_config_file", config,
            "--input_file", paths["train_records"] + "-*.tfrecord",
            "--output_dir", output_dir, "--do_train",
            "--train_batch_size", str(s["pretrain_batch_size"]), "--max_seq_length", str(seq),
            "--max_predictions_per_seq", str(predictions_for(s["masked_lm_prob"], seq)),
            "--optimizer", "lamb", "--learning_rate", str(s["pretrain_learning_rate"]),
            "--num_train_steps", str(steps),
            "--num_warmup_steps", str(max(1, round(s["warmup_fraction"] * steps))),
            "--save_checkpoints_steps", str(every), "--keep_checkpoint_max", "2",
            "--iterations_per_loop", str(min(s["log_every"], every)),
            "--mixed_precision", s["mixed_precision"], "--random_seed", "1",
            "--spm_model_file", paths["vocab"] + ".model"]
    if evaluate:
        args += ["--do_eval", "--eval_input_file", paths["heldout_records"],
                 "--eval_batch_size", "64", "--max_eval_steps", "100000"]
    return args


def finetune_steps(s: dict) -> int:
    return s.get("finetune_steps") or math.ceil(
        s["finetune_examples"] * s["finetune_epochs"] / s["finetune_batch_size"])


def finetune_commands(run: Run, s: dict, config: str, paths: dict, init: str,
                      pretrain_dir: str) -> list:
    """One `run_classifier` per seed, from the pretrained model or from random weights; the
    pretrained seed-1 model is exported for serving."""
    p = _shown_path
    data_dir = os.path.join(p(SAMPLE_DIR), "glue", "SST-2")
    steps = finetune_steps(s)
    commands = []
    for seed in s["finetune_seeds"]:
        out = p(run.path("finetune", f"{init}_seed{seed}"))
        export = init == "pretrained" and seed == s["finetune_seeds"][0]
        commands.append(
            (["albert_tf.run_classifier", "--task_name", s["finetune_task"],
              "--data_dir", data_dir, "--train_examples", str(s["finetune_examples"]),
              "--albert_config_file", config, "--spm_model_file", paths["vocab"] + ".model",
              "--output_dir", out,
              *(["--init_checkpoint", pretrain_dir] if init == "pretrained" else []),
              "--do_train", "--do_eval", "--max_seq_length", str(s["finetune_seq_length"]),
              "--train_batch_size", str(s["finetune_batch_size"]), "--eval_batch_size", "64",
              "--learning_rate", str(s["finetune_learning_rate"]), "--train_step", str(steps),
              "--warmup_step", str(max(1, steps // 10)), "--save_checkpoints_steps", str(steps),
              "--iterations_per_loop", str(min(s["log_every"], steps)),
              "--random_seed", str(seed),
              *(["--export_dir", p(run.path("exports", "albert_demo_sst2"))] if export else [])],
             os.path.join(out, "eval_results.json")))
    return commands


# ----------------------------------------------------------------------------- sizing

def choose_steps(s: dict, probe: dict, elapsed_s: float, finetune_s: float,
                 heldout_examples: int, compile_s: float) -> dict:
    """The pretraining step count that fits the rest of the budget.

    `probe`: {"examples_per_second" (steady state), "seconds" (the probe command's wall time),
    "steps"}. What is left after the steps already done (`elapsed_s`) pays for: the pretraining
    command (its start-up, as the probe's, and its evaluations: a held-out pass costs about a
    third of training on as many examples), the pretrained fine-tuning arm (as long as the
    random-init arm, `finetune_s`, which ran already), the remaining commands (each about one
    start-up, plus `compile_s` to build the C++ loader), and a 3% margin."""
    budget_s = s["budget_minutes"] * 60.0
    rate = probe["examples_per_second"]
    step_s = s["pretrain_batch_size"] / rate
    startup_s = max(0.0, probe["seconds"] - probe["steps"] * step_s)
    eval_s = heldout_examples / (3.0 * rate)
    reserve_s = (finetune_s + (TAIL_COMMANDS + 1) * startup_s + compile_s
                 + s["evaluations"] * eval_s + 0.03 * budget_s)
    train_s = budget_s - elapsed_s - reserve_s
    steps = int(train_s / step_s) // s["evaluations"] * s["evaluations"]
    chosen = min(max(steps, s["min_pretrain_steps"]), s["max_pretrain_steps"])
    return {"budget_s": budget_s, "examples_per_second": rate, "step_s": step_s,
            "startup_s": startup_s, "eval_s": eval_s, "elapsed_s": elapsed_s,
            "finetune_s": finetune_s, "compile_s": compile_s, "reserve_s": reserve_s,
            "train_s": train_s, "fitted_steps": steps, "steps": chosen,
            "note": ("" if chosen == steps else
                     f"the budget fits {steps} steps; clamped to [{s['min_pretrain_steps']}, "
                     f"{s['max_pretrain_steps']}]")}


def size_pretraining(run: Run, s: dict, config: str, paths: dict, index: int, total: int) -> dict:
    """Step `size`: times a short pretraining run and fits the step count to the budget; the
    choice is kept in RUN_DIR/size/sizing.json (and the state) so a rerun resumes it."""
    sizing_file = run.path("size", "sizing.json")
    if s.get("pretrain_steps"):  # given, not fitted
        print(f"[{index}/{total}] size\n  --pretrain_steps {s['pretrain_steps']}: not fitted",
              flush=True)
        sizing = {"steps": s["pretrain_steps"], "fitted": False}
        run.state["steps"]["size"] = {"seconds": 0.0, "commands": [], "skipped": False}
    elif os.path.exists(sizing_file):
        sizing = _read_json(sizing_file)
        print(f"[{index}/{total}] size\n  done before: skipped ({sizing['steps']} steps)",
              flush=True)
        run.state["steps"].setdefault("size", {"seconds": 0.0, "commands": []})["skipped"] = True
    else:
        probe_dir = run.path("size", "probe")
        shutil.rmtree(probe_dir, ignore_errors=True)  # a probe cut short times nothing
        steps = s["probe_steps"]
        args = pretrain_args(s, config, paths, _shown_path(probe_dir), steps, evaluate=False)
        args[args.index("--iterations_per_loop") + 1] = str(steps // 3)
        record = run.step("size", [(args, os.path.join(probe_dir, f"ckpt-{steps}.index"))],
                          index, total)
        rates = [v for _, v in curves.read_scalars(os.path.join(probe_dir, "train"))
                 ["examples_per_second"]][1:]  # the first loop traces the step
        probe = {"steps": steps, "seconds": record["seconds"],
                 "examples_per_second": sum(rates) / len(rates)}
        heldout = _read_json(paths["heldout_records"] + ".json")["counts"]["examples"]
        runtime = s.get("serve_runtime") or ("cpp" if shutil.which("g++") else "python")
        loader = run.path("serve", "serving_loader")
        compile_s = 25.0 if runtime == "cpp" and not os.path.exists(loader) else 0.0
        sizing = dict(choose_steps(s, probe, run.seconds(*run.state["steps"]),
                                   run.seconds("finetune_random"), heldout, compile_s),
                      probe=probe, fitted=True)
        _write_json(sizing_file, sizing)
        shutil.rmtree(probe_dir, ignore_errors=True)
        print(f"  {probe['examples_per_second']:.0f} examples/s: {sizing['steps']} pretraining "
              f"steps fit the budget of {s['budget_minutes']:g} minutes"
              + (f" ({sizing['note']})" if sizing["note"] else ""), flush=True)
    run.state["sizing"] = sizing
    run._save()
    return sizing


# ----------------------------------------------------------------------------- the job

def run_demo(run: Run) -> dict:
    """Runs (or resumes) every step of `run`; returns the results the report shows."""
    s = run.settings
    total = 12
    p = _shown_path
    paths = corpus_paths(run.dir, s["vocab_size"])
    config = os.path.join(p(SAMPLE_DIR), s["albert_config"])
    seq = s["max_seq_length"]

    run.step("corpus", corpus_commands(paths, s["books"], s["heldout_every"]), 1, total)
    run.step("vocab", vocab_commands(paths), 2, total)
    run.step("data", [train_records_command(
        paths, paths["train_records"], seq, s["masked_lm_prob"],
        predictions_for(s["masked_lm_prob"], seq), s["dupe_factor"]),
        *heldout_commands(paths, seq, s["heldout_masked_lm_prob"])], 3, total)
    pretrain_dir = p(run.path("pretrain"))
    run.step("finetune_random", finetune_commands(run, s, config, paths, "random",
                                                  pretrain_dir), 4, total)
    sizing = size_pretraining(run, s, config, paths, 5, total)
    steps = sizing["steps"]
    run.step("pretrain", [(pretrain_args(s, config, paths, pretrain_dir, steps),
                           os.path.join(pretrain_dir, f"eval_results_step_{steps}.json"))],
             6, total)
    run.step("finetune_pretrained", finetune_commands(run, s, config, paths, "pretrained",
                                                      pretrain_dir), 7, total)

    mlm_export = run.path("exports", "albert_demo_mlm")
    run.step("export", [(["export.export_saved_model", "--model_dir", pretrain_dir,
                          "--checkpoint", "latest", "--spm_model_file", paths["vocab"] + ".model",
                          "--export_dir", p(mlm_export), "--version", "1",
                          "--max_seq_length", str(seq)],
                         os.path.join(mlm_export, "1", "saved_model.pb"))], 8, total)

    serve = run.path("serve")
    runtime = s.get("serve_runtime") or ("cpp" if shutil.which("g++") else "python")
    loader = ["--runtime", runtime, "--loader_binary", p(run.path("serve", "serving_loader"))]
    run.step("serve", [
        (["export.cc_loader", *loader, "--saved_model", p(os.path.join(mlm_export, "1")),
          *[a for t in FILL_MASK_REQUESTS for a in ("--text", t)],
          "--output_json", p(os.path.join(serve, "fill_mask.json"))],
         os.path.join(serve, "fill_mask.json")),
        (["export.cc_loader", *loader,
          "--saved_model", p(run.path("exports", "albert_demo_sst2", "1")),
          *[a for t in SENTIMENT_REQUESTS for a in ("--text", t)],
          "--output_json", p(os.path.join(serve, "sentiment.json"))],
         os.path.join(serve, "sentiment.json"))], 9, total)

    fill_mask = run.path("fill_mask", "fill_mask.json")
    run.step("fill_mask", [(["albert_tf.analysis.fill_mask", "--model_dir", pretrain_dir,
                             "--spm_model_file", paths["vocab"] + ".model",
                             "--random_seed", "1",
                             *[a for t in FILL_MASK_REQUESTS for a in ("--text", t)],
                             "--output_json", p(fill_mask)], fill_mask)], 10, total)

    transitions = run.path("transitions")
    run.step("analysis", [(["albert_tf.analysis.transitions", "--model_dir", pretrain_dir,
                            "--label", "pretrained ALBERT (all layers shared)",
                            "--input_file", paths["heldout_records"],
                            "--output_dir", p(transitions), "--max_seq_length", str(seq),
                            "--max_predictions_per_seq",
                            str(predictions_for(s["heldout_masked_lm_prob"], seq)),
                            "--max_examples", str(s["transitions_examples"])],
                           os.path.join(transitions, "transitions.png"))], 11, total)

    print(f"[{total}/{total}] report", flush=True)
    t0 = time.time()
    results = collect_results(run, paths, pretrain_dir, steps)
    write_report(run, results)
    run.state["steps"]["report"] = {"seconds": time.time() - t0, "commands": [],
                                    "skipped": False}
    run._save()
    results["steps"] = run.state["steps"]
    results["timings"] = timings(run)
    write_report(run, results)  # again, with the report step's own time
    return results


# ----------------------------------------------------------------------------- results

def timings(run: Run) -> dict:
    steps = {name: round(r.get("seconds", 0.0), 1) for name, r in run.state["steps"].items()}
    return {"total_s": round(sum(steps.values()), 1), **steps}


def mean_std(values) -> tuple[float, float]:
    import numpy as np

    a = np.asarray(values, float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def gain_verdict(pretrained, random_init) -> dict:
    """A gain (or a loss) only when the difference of the means exceeds twice the larger
    standard deviation of the two arms."""
    mp, sp = mean_std(pretrained)
    mr, sr = mean_std(random_init)
    threshold = 2 * max(sp, sr)
    return {"pretrained_mean": mp, "pretrained_std": sp, "random_init_mean": mr,
            "random_init_std": sr, "difference": mp - mr, "threshold": threshold,
            "measurable_gain": bool(mp - mr > threshold),
            "measurable_loss": bool(mr - mp > threshold)}


def curve_slope(points) -> float | None:
    """Held-out accuracy gained per 1,000 steps over the second half of the evaluations."""
    if len(points) < 2:
        return None
    half = points[len(points) // 2 - (1 if len(points) % 2 == 0 else 0):]
    (s0, a0), (s1, a1) = half[0], half[-1]
    return (a1 - a0) / max(1, s1 - s0) * 1000 if s1 > s0 else None


def collect_results(run: Run, paths: dict, pretrain_dir: str, steps: int) -> dict:
    s = run.settings
    seq = s["max_seq_length"]
    train_preds = predictions_for(s["masked_lm_prob"], seq)
    heldout_preds = predictions_for(s["heldout_masked_lm_prob"], seq)
    final = _read_json(os.path.join(pretrain_dir, f"eval_results_step_{steps}.json"))
    evaluated = final["examples"]  # the evaluation's whole batches
    cache = run.path("baselines.json")
    base = _read_json(cache) if os.path.exists(cache) else None
    if base is None or base.get("masked_lm", {}).get("eval_examples") != evaluated:
        base = {"masked_lm": baselines.most_frequent_piece(
                    paths["train_records"] + "-*.tfrecord", paths["heldout_records"], seq,
                    heldout_preds, evaluated, train_max_predictions_per_seq=train_preds),
                "sentence_order": baselines.sentence_order_balance(
                    paths["heldout_records"], seq, heldout_preds, evaluated),
                "sst-2": baselines.majority_class(
                    "sst-2", os.path.join(SAMPLE_DIR, "glue", "SST-2"))}
        _write_json(cache, base)
    with open(paths["vocab"] + ".vocab", encoding="utf-8") as f:
        pieces = [line.split("\t")[0] for line in f]
    base["masked_lm"]["piece"] = pieces[base["masked_lm"]["piece_id"]]

    config = AlbertConfig.from_json_file(os.path.join(SAMPLE_DIR, s["albert_config"]))
    sizing = run.state.get("sizing", {})
    batch = s["pretrain_batch_size"]
    results = {"settings": s, "machine": cpu_name(), "sizing": sizing}
    mlm, sop = base["masked_lm"], base["sentence_order"]
    results["mlm"] = {"heldout_accuracy": final["masked_lm_accuracy"],
                      "unigram_baseline": mlm["accuracy"],
                      "ratio": final["masked_lm_accuracy"] / mlm["accuracy"],
                      "examples": evaluated, "positions": mlm["eval_positions"],
                      "baseline_piece": mlm["piece"], "heldout_loss": final["masked_lm_loss"]}
    results["sop"] = {"heldout_accuracy": final["sentence_order_accuracy"],
                      "constant_baseline": sop["accuracy"], "examples": sop["examples"],
                      "swapped_share": sop["swapped_share"],
                      "heldout_loss": final["sentence_order_loss"]}
    results["compute"] = {
        "steps": steps, "batch_size": batch, "seq_length": seq,
        "tokens": steps * batch * seq,
        "flops_estimate": flops.pretraining_flops(flops.config_dims(config), steps, batch, seq,
                                                  train_preds),
        "budget_s": s["budget_minutes"] * 60.0,
        # the paper's ALBERT-base: 125k steps of 4,096 sequences of 512, 20 predictions each
        "paper_base_flops": flops.pretraining_flops(flops.model_dims("albert-base"), 125_000,
                                                    4096, 512, 20),
        "examples_per_second": sizing.get("examples_per_second"),
        "mixed_precision": s["mixed_precision"]}
    arms = {}
    for init in ("pretrained", "random"):
        arms[init] = [_read_json(run.path("finetune", f"{init}_seed{seed}", "eval_results.json"))
                      for seed in s["finetune_seeds"]]
    majority = base["sst-2"]
    results["pretraining_gain"] = {
        "task": s["finetune_task"], "metric": "accuracy", "labels": s["finetune_examples"],
        "seeds": list(s["finetune_seeds"]), "dev_examples": arms["random"][0]["examples"],
        "pretrained": [r["accuracy"] for r in arms["pretrained"]],
        "random_init": [r["accuracy"] for r in arms["random"]],
        "majority_baseline": majority["accuracy"], "steps": finetune_steps(s),
        **gain_verdict([r["accuracy"] for r in arms["pretrained"]],
                       [r["accuracy"] for r in arms["random"]])}
    served = {name: _read_json(run.path("serve", f"{name}.json"))
              for name in ("fill_mask", "sentiment")}
    results["fill_mask"] = _read_json(run.path("fill_mask", "fill_mask.json"))
    frequent = {pieces[i] for i in base["masked_lm"]["frequent_ids"]}
    results["fill_mask"]["frequent_top1"] = sum(
        rows[0][0]["piece"] in frequent for rows in results["fill_mask"]["models"]["trained"])
    results["served"] = served
    results["served_fill_mask_matches"] = served_matches(served["fill_mask"],
                                                         results["fill_mask"])
    with open(run.path("transitions", "transitions.csv"), encoding="utf-8") as f:
        results["transitions_csv"] = f.read()
    curve = {name: curves.read_scalars(os.path.join(pretrain_dir, name))
             for name in ("train", "eval")}
    results["curves"] = curve
    # The held-out curve from the evaluation files (written whole, one per evaluation; a
    # resumed run re-evaluates a checkpoint whose evaluation was cut short).
    evaluations = sorted((_read_json(path) for path in glob.glob(
        os.path.join(pretrain_dir, "eval_results_step_*.json"))), key=lambda e: e["global_step"])
    evaluations = [e for e in evaluations if e["global_step"] <= steps]
    heldout_points = [(e["global_step"], e["masked_lm_accuracy"]) for e in evaluations]
    results["mlm"]["curve"] = heldout_points
    results["mlm"]["slope_per_1000_steps"] = curve_slope(heldout_points)
    results["sop"]["curve"] = [(e["global_step"], e["sentence_order_accuracy"])
                               for e in evaluations]
    for name in ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy"):
        curve["eval"][name] = [(e["global_step"], e[name]) for e in evaluations]
    results["charts"] = draw_charts(run, results, base)
    results["steps"] = run.state["steps"]
    results["timings"] = timings(run)
    return results


def served_matches(served: dict, analysis: dict) -> bool:
    """Whether the served SavedModel's top pieces equal the analysis' for the trained model."""
    pieces = served["outputs"]["fill_mask_pieces"]
    trained = analysis["models"]["trained"]
    return all([a["piece"] for a in trained[i][0]] == list(pieces[i][0])
               for i in range(len(trained)))


def draw_charts(run: Run, results: dict, base: dict) -> list:
    charts_dir = run.path("charts")
    ptrain, peval = results["curves"]["train"], results["curves"]["eval"]
    mlm, sop = results["mlm"], results["sop"]
    curves.plot_panels([
        ("held-out masked-LM accuracy (15% masking)", "accuracy",
         [("held-out", peval.get("masked_lm_accuracy", []), {"marker": "o"})],
         [(f"most frequent piece `{mlm['baseline_piece']}` ({mlm['unigram_baseline']:.3f})",
           mlm["unigram_baseline"])]),
        ("masked-LM loss", "cross-entropy",
         [(f"train ({run.settings['masked_lm_prob']:.0%} masking)",
           ptrain.get("masked_lm_loss", []), {}),
          ("held-out (15%)", peval.get("masked_lm_loss", []), {"marker": "o"})]),
        ("sentence-order accuracy", "accuracy",
         [("train", ptrain.get("sentence_order_accuracy", []), {}),
          ("held-out (pairs)", peval.get("sentence_order_accuracy", []), {"marker": "o"})],
         [(f"held-out constant guess ({sop['constant_baseline']:.3f})",
           sop["constant_baseline"])]),
    ], os.path.join(charts_dir, "pretraining.png"), "Pretraining on the bundled sample")
    gain = results["pretraining_gain"]
    plot_arms(gain, os.path.join(charts_dir, "finetuning.png"))
    return ["charts/pretraining.png", "charts/finetuning.png", "transitions/transitions.png"]


def plot_arms(gain: dict, path: str) -> str:
    """Dev accuracy per seed of both arms, their means and the majority baseline."""
    plt = charts.pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for x, (label, key) in enumerate((("random init", "random_init"),
                                      ("pretrained", "pretrained"))):
        values = gain[key]
        ax.scatter([x] * len(values), values, color=f"C{x}", zorder=3, label=f"{label} (seeds)")
        mean, std = mean_std(values)
        ax.errorbar([x + 0.15], [mean], yerr=[std], fmt="s", color=f"C{x}", capsize=4)
    ax.axhline(gain["majority_baseline"], color="0.45", linestyle="--", linewidth=1,
               label=f"majority class ({gain['majority_baseline']:.3f})")
    ax.set_xticks([0, 1], ["random init", "pretrained"])
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylabel("dev accuracy")
    ax.set_title(f"{gain['task'].upper()}, {gain['labels']:,} labels, "
                 f"{len(gain['seeds'])} seeds (mean +- std)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return charts.save(fig, path)


# ----------------------------------------------------------------------------- the report

def _pct(x):
    return f"{x:.1%}"


def _answers(rows) -> str:
    return ", ".join(f"`{a['piece']}` {a['probability']:.3g}" for a in rows[0])


def report_blocks(run: Run, results: dict) -> list:
    """The report as blocks: ("h1"|"h2"|"p", text), ("table", header, rows), ("code", text),
    ("img", path, alt), ("ul", items). Rendered to Markdown and HTML alike."""
    s = results["settings"]
    mlm, sop, compute = results["mlm"], results["sop"], results["compute"]
    gain, t = results["pretraining_gain"], results["timings"]
    sizing = results.get("sizing", {})
    budget_min = compute["budget_s"] / 60
    blocks = [("h1", "albert_tf main job"),
              ("p", f"Run directory `{_shown_path(run.dir)}`, {'smoke (tiny sizes)' if s['smoke'] else 'full'} "
                    f"settings, on {results['machine']}. The job's own time: "
                    f"{t['total_s'] / 60:.1f} minutes against a budget of {budget_min:g} "
                    "(install excluded). Every number below is read from the files the "
                    "commands wrote, and stands beside its baseline.")]
    fitted = (f"this machine ran {compute['examples_per_second']:.0f} examples/s in a "
              f"{sizing['probe']['steps']}-step probe, so {compute['steps']:,} steps fit the "
              "budget" if sizing.get("fitted") else "the step count was given "
              "(`--pretrain_steps`), not fitted to the budget")
    blocks += [
        ("h2", "Pretraining"),
        ("p", f"A small ALBERT (`{s['albert_config']}`) for {compute['steps']:,} steps of "
              f"{compute['batch_size']} sequences of {compute['seq_length']} pieces "
              f"({compute['tokens'] / 1e6:.1f}M tokens, about {compute['flops_estimate']:.1e} "
              f"FLOPs, {compute['mixed_precision']}): {fitted}. LAMB at "
              f"{s['pretrain_learning_rate']:g}, {s['warmup_fraction']:.0%} warmup then linear "
              f"decay, {s['masked_lm_prob']:.0%} of the pieces masked. Held out: every "
              f"{s['heldout_every']}th chapter and article, which neither the vocabulary nor "
              "the training records saw."),
        ("table", ["held-out (final model)", "model", "baseline", "model / baseline",
                   "baseline is", "examples"],
         [["masked-LM accuracy (15% masking)", f"{mlm['heldout_accuracy']:.4f}",
           f"{mlm['unigram_baseline']:.4f}", f"{mlm['ratio']:.2f}x",
           f"always the most frequent piece `{mlm['baseline_piece']}`",
           f"{mlm['examples']:,} ({mlm['positions']:,} masked positions)"],
          ["sentence-order accuracy", f"{sop['heldout_accuracy']:.4f}",
           f"{sop['constant_baseline']:.4f}",
           f"{sop['heldout_accuracy'] / sop['constant_baseline']:.2f}x",
           f"the better constant guess ({_pct(sop['swapped_share'])} of the pairs swapped)",
           f"{sop['examples']:,} pairs"],
          ["masked-LM loss", f"{mlm['heldout_loss']:.4f}", "", "", "", ""]]),
        ("img", "charts/pretraining.png", "pretraining curves"),
        ("p", scale_text(results))]
    pm, ps, rm, rs = (gain["pretrained_mean"], gain["pretrained_std"], gain["random_init_mean"],
                      gain["random_init_std"])
    rows = [["from random initialisation", ", ".join(f"{x:.4f}" for x in gain["random_init"]),
             f"{rm:.4f} +- {rs:.4f}"],
            ["from the pretrained model", ", ".join(f"{x:.4f}" for x in gain["pretrained"]),
             f"{pm:.4f} +- {ps:.4f}"],
            ["majority class", "", f"{gain['majority_baseline']:.4f}"]]
    blocks += [
        ("h2", "What pretraining bought downstream"),
        ("p", f"SST-2 with the first {gain['labels']:,} training labels, {gain['steps']} steps "
              f"per run, seeds {', '.join(map(str, gain['seeds']))} for each arm; all "
              f"{gain['dev_examples']} dev sentences scored. Same flags and seeds for both "
              "arms; only the initialisation differs."),
        ("table", ["dev accuracy", "per seed", "mean +- std"], rows),
        ("p", gain_text(results)),
        ("img", "charts/finetuning.png", "fine-tuning per seed")]
    fm = results["fill_mask"]
    rows = [[text, _answers(fm["models"]["trained"][i]), _answers(fm["models"]["random_init"][i])]
            for i, text in enumerate(fm["inputs"])]
    blocks += [
        ("h2", "Fill-mask: the pretrained model beside its random initialisation"),
        ("p", "Top 5 answers for [MASK] with their probabilities; the random initialisation is "
              "the pretraining run's own starting point (same seed), so the columns differ by "
              "what training did. " + ("The served SavedModel (below) gives the same top 5 for "
                                       "every sentence." if results["served_fill_mask_matches"]
                                       else "The served SavedModel's top 5 differ from these "
                                       "for some sentences (see serve/fill_mask.json).")),
        ("table", ["text", "pretrained", "random initialisation"], rows)]
    st = results["served"]["sentiment"]
    runtime = {"cpp": "C++ (`LoadSavedModel` + `Session::Run`, as TF Serving loads a model)",
               "python": "Python (`tf.saved_model.load`" + (
                   "; no g++ on this machine)" if not shutil.which("g++") else ")")}
    rows = []
    labels = st["outputs"].get("label", [])
    for i, text in enumerate(st["inputs"]):
        probs = st["outputs"]["probabilities"][i]
        label = labels[i] if i < len(labels) else None
        rows.append([text, {0: "negative (0)", 1: "positive (1)"}.get(label, str(label)),
                     ", ".join(f"{q:.3f}" for q in probs)])
    blocks += [("h2", "Serving: raw text in, answers out"),
               ("p", "Both SavedModels (TF Serving's versioned layout, tokenization in the "
                     f"graph) loaded from {runtime[st['runtime']]}: `albert_demo_mlm` answered "
                     f"the {len(fm['inputs'])} fill-mask requests above; `albert_demo_sst2` "
                     f"(seed {gain['seeds'][0]} of the pretrained arm) these:"),
               ("table", ["sentiment request", "label", "probabilities (negative, positive)"],
                rows)]
    blocks += [("h2", "The paper's Figure 2: input-output transitions per layer"),
               ("p", "L2 distance and angle between each layer's input and output embedding, "
                     "over held-out tokens (`transitions/transitions.csv`)."),
               ("img", "transitions/transitions.png", "transitions")]
    rows = [[name, f"{r.get('seconds', 0.0):.0f}" + (" (skipped: done before)"
                                                     if r.get("skipped") else "")]
            for name, r in results["steps"].items()]
    rows.append(["total", f"{t['total_s']:.0f} ({t['total_s'] / 60:.1f} min)"])
    blocks += [("h2", "Time of each step"), ("table", ["step", "seconds"], rows),
               ("p", "A skipped step shows the seconds of the invocation that ran it.")]
    if sizing.get("fitted"):
        blocks += [("p", f"Sizing: budget {sizing['budget_s']:.0f} s; {sizing['elapsed_s']:.0f} s "
                         f"spent before the probe's choice; reserved {sizing['reserve_s']:.0f} s "
                         f"for the rest (the pretrained fine-tuning arm "
                         f"{sizing['finetune_s']:.0f} s, start-ups, evaluations, a 3% margin); "
                         f"{sizing['train_s']:.0f} s of steps at {sizing['step_s'] * 1000:.0f} "
                         "ms each (`size/sizing.json`).")]
    blocks += [("h2", "Commands"),
               ("p", "Each step's commands, runnable as they are; scale a step up by changing "
                     "its sizes (see the README for a real run).")]
    for name, r in results["steps"].items():
        if r.get("commands"):
            blocks += [("p", f"**{name}**"), ("code", "\n".join(r["commands"]))]
    return blocks


def scale_text(results: dict) -> str:
    """What this run's scale shows and does not, from its own curve."""
    mlm, sop = results["mlm"], results["sop"]
    slope = mlm.get("slope_per_1000_steps")
    parts = [f"Held-out masked-LM accuracy reached {mlm['ratio']:.1f}x its baseline."]
    if slope is not None:
        parts.append(f"Over the second half of the run it still rose by {slope:+.3f} per 1,000 "
                     "steps, so a larger budget buys more" if slope > 0.002 else
                     f"Over the second half of the run it changed by {slope:+.3f} per 1,000 "
                     "steps: the curve has flattened at this learning-rate schedule")
        parts[-1] += " (`--budget_minutes` scales the run)."
    margin = sop["heldout_accuracy"] - sop["constant_baseline"]
    sigma = math.sqrt(0.25 / max(1, sop["examples"]))
    if margin > 2 * sigma:
        parts.append(f"Sentence order is {margin:+.3f} above its constant baseline on "
                     f"{sop['examples']:,} held-out pairs (2 sigma of that many coin flips is "
                     f"{2 * sigma:.3f}).")
    else:
        parts.append(f"Sentence order is not above its constant baseline ({margin:+.3f}; 2 "
                     f"sigma of {sop['examples']:,} coin flips is {2 * sigma:.3f}): at this "
                     "scale the model does not tell the order of two held-out segments better "
                     "than a constant guess.")
    return " ".join(parts)


def gain_text(results: dict) -> str:
    g = results["pretraining_gain"]
    if g["measurable_gain"]:
        return (f"Pretraining gained {g['difference']:+.4f} in mean accuracy, more than twice "
                f"the larger standard deviation ({g['threshold']:.4f}): a measurable gain.")
    if g["measurable_loss"]:
        verdict = (f"No gain at this scale; a measurable loss: the pretrained arm's mean is "
                   f"{-g['difference']:.4f} below random initialisation's, more than twice the "
                   f"larger standard deviation ({g['threshold']:.4f}). An outside ALBERT "
                   "(Hugging Face's) pretrained for minutes on this machine measured the same "
                   "direction on SST-2 (docs/pretraining.md).")
    else:
        verdict = (f"No measurable gain at this scale: the difference of the means, "
                   f"{g['difference']:+.4f}, is within twice the larger standard deviation "
                   f"({g['threshold']:.4f}).")
    fm = results["fill_mask"]
    return (f"{verdict} What the pretrained model has learned, from this run's own figures: "
            f"its masked-LM accuracy is {results['mlm']['ratio']:.1f}x that of always "
            f"answering `{results['mlm']['baseline_piece']}`, and {fm['frequent_top1']} of the "
            f"{len(fm['inputs'])} fill-mask answers below are among the 20 pieces most often "
            "masked in training: it has learned which pieces are frequent more than how the "
            "context decides them, and only the latter would help a sentiment classifier. "
            f"The paper pretrained ALBERT-base with about "
            f"{results['compute']['paper_base_flops']:.1e} FLOPs, "
            f"{results['compute']['paper_base_flops'] / results['compute']['flops_estimate']:.0e}"
            " times this run's; larger budgets (`--budget_minutes`, an accelerator) move this "
            "run toward that scale.")


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
                       ("report.html", to_html(blocks, "albert_tf main job"))):
        with open(run.path(name + ".tmp"), "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(run.path(name + ".tmp"), run.path(name))
    summary = {k: v for k, v in results.items() if k not in ("curves", "transitions_csv")}
    _write_json(run.path("results.json"), summary)
    return run.path("report.md")


def requested_settings(FLAGS) -> dict:
    """The run's identity: the sizes of --smoke or the full job, the flags that change them,
    and the compute dtype this CPU supports."""
    name = "smoke" if FLAGS.smoke else "full"
    settings = dict(SETTINGS[name], smoke=FLAGS.smoke,
                    mixed_precision="bfloat16" if cpu_has_bf16() else "float32",
                    pretrain_steps=FLAGS.pretrain_steps, finetune_steps=FLAGS.finetune_steps)
    if FLAGS.budget_minutes is not None:
        if FLAGS.budget_minutes <= 0:
            raise app.UsageError(f"--budget_minutes must be positive; got {FLAGS.budget_minutes}")
        settings["budget_minutes"] = FLAGS.budget_minutes
    for name in ("pretrain_steps", "finetune_steps"):
        if settings[name] is not None and settings[name] < 1:
            raise app.UsageError(f"--{name} must be at least 1; got {settings[name]}")
    return settings


def main(argv):
    del argv
    FLAGS = flags.FLAGS
    settings = requested_settings(FLAGS)
    run_dir = FLAGS.run_dir or choose_run_dir(FLAGS.runs_dir, settings, FLAGS.new)
    if FLAGS.run_dir and os.path.exists(os.path.join(run_dir, "state.json")):
        previous = _read_json(os.path.join(run_dir, "state.json")).get("settings")
        if previous != settings:
            print(f"error: {run_dir} was run with other settings ({previous}); use another "
                  "--run_dir or the same flags.", file=sys.stderr)
            return 2
    run = Run(run_dir, settings, echo=not FLAGS.quiet)
    print(f"albert_tf main job ({'smoke' if FLAGS.smoke else 'full'}, budget "
          f"{settings['budget_minutes']:g} minutes): {_shown_path(run.dir)}", flush=True)
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
    mlm, sop, gain = results["mlm"], results["sop"], results["pretraining_gain"]
    print(f"\nheld-out masked-LM accuracy {mlm['heldout_accuracy']:.3f} ({mlm['ratio']:.1f}x the "
          f"most frequent piece, {mlm['unigram_baseline']:.3f}); sentence order "
          f"{sop['heldout_accuracy']:.3f} on {sop['examples']:,} pairs (constant "
          f"{sop['constant_baseline']:.3f})")
    print(f"SST-2 dev accuracy, {gain['labels']:,} labels: pretrained "
          f"{gain['pretrained_mean']:.3f} +- {gain['pretrained_std']:.3f}, random init "
          f"{gain['random_init_mean']:.3f} +- {gain['random_init_std']:.3f}, majority "
          f"{gain['majority_baseline']:.3f}")
    print(f"report: {_shown_path(run.path('report.md'))} (and report.html, results.json); the "
          f"job's own time {results['timings']['total_s'] / 60:.1f} minutes; this invocation "
          f"took {time.time() - t0:.0f} s")
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    run_command(main, define_flags)


if __name__ == "__main__":
    cli()
