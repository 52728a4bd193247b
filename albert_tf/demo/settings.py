"""The main job's recipe, its requests and the facts of this machine that pick its dtype.

How each value was chosen: docs/pretraining.md (held-out pretraining text; the fine-tuning rate
on SST-2 train labels held out from training, bench/finetuning_recipe.py).
"""

from __future__ import annotations

import os
import re
import shutil

from absl import app

from albert_tf.paths import SAMPLE_DATA_DIR


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # albert_tf/


SAMPLE_DIR = SAMPLE_DATA_DIR


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


def requested_settings(smoke: bool, pretrain_steps: int | None = None,
                       finetune_steps: int | None = None,
                       budget_minutes: float | None = None) -> dict:
    """The run's identity: the sizes of --smoke or the full job, the flags that change them,
    and the compute dtype this CPU supports."""
    name = "smoke" if smoke else "full"
    settings = dict(SETTINGS[name], smoke=smoke,
                    mixed_precision="bfloat16" if cpu_has_bf16() else "float32",
                    pretrain_steps=pretrain_steps, finetune_steps=finetune_steps)
    if budget_minutes is not None:
        if budget_minutes <= 0:
            raise app.UsageError(f"--budget_minutes must be positive; got {budget_minutes}")
        settings["budget_minutes"] = budget_minutes
    for name in ("pretrain_steps", "finetune_steps"):
        if settings[name] is not None and settings[name] < 1:
            raise app.UsageError(f"--{name} must be at least 1; got {settings[name]}")
    return settings


def serve_runtime(s: dict) -> str:
    """C++ (as TF Serving loads a model) where g++ can build the loader, else Python."""
    return s.get("serve_runtime") or ("cpp" if shutil.which("g++") else "python")
