"""The commands of the main job: each is what a user runs on their own data (`python -m ...`
arguments), paired with the artefact it writes last, so a step whose artefact exists is skipped.
Shared with the benches that tune the recipe on the same data (bench/pretraining_recipes.py,
bench/pretraining_judge.py, bench/finetuning_recipe.py).
"""

from __future__ import annotations

import math
import os

from albert_tf.demo.job import shown_path
from albert_tf.demo.settings import (BOOK_CHAPTER_REGEX, FILL_MASK_REQUESTS, SAMPLE_DIR,
                                     SENTIMENT_REQUESTS, WIKI_FLAGS)


def predictions_for(masked_lm_prob: float, max_seq_length: int) -> int:
    """max_predictions_per_seq that lets `masked_lm_prob` of a full sequence be masked."""
    return max(1, round(masked_lm_prob * max_seq_length))


def corpus_paths(root: str, vocab_size: int = 8000) -> dict:
    p = shown_path
    return {"corpus": p(os.path.join(root, "corpus")), "heldout": p(os.path.join(root, "heldout")),
            "vocab": p(os.path.join(root, "vocab", f"sample{vocab_size // 1000}k")),
            "vocab_size": vocab_size,
            "train_records": p(os.path.join(root, "pretraining", "train")),
            "heldout_records": p(os.path.join(root, "pretraining", "heldout.tfrecord"))}


def corpus_commands(paths: dict, books: str = "*-0.txt", heldout_every: int = 4) -> list:
    """Books (a document per chapter) and WikiText-2 test (per article); every
    `heldout_every`-th document of each held out: [(args, last artefact)]."""
    text_dir = os.path.join(shown_path(SAMPLE_DIR), "pretrain_text")
    corpus, heldout = paths["corpus"], paths["heldout"]
    every = ["--heldout_every", str(heldout_every)]
    return [(["albert_tf.data.prepare_corpus", "--input_file",
              ",".join(os.path.join(text_dir, "gutenberg", b) for b in books.split(",")),
              "--output_file", os.path.join(corpus, "books.txt"),
              "--document_marker_regex", BOOK_CHAPTER_REGEX,
              "--heldout_file", os.path.join(heldout, "books.txt"), *every],
             os.path.join(heldout, "books.txt")),
            (["albert_tf.data.prepare_corpus", "--input_file",
              os.path.join(text_dir, "wikitext-2-raw", "wiki.test.raw"),
              "--output_file", os.path.join(corpus, "wiki.txt"), *WIKI_FLAGS,
              "--heldout_file", os.path.join(heldout, "wiki.txt"), *every],
             os.path.join(heldout, "wiki.txt"))]


def vocab_commands(paths: dict) -> list:
    corpus = paths["corpus"]
    return [(["albert_tf.data.train_vocab", "--input_file",
              f"{os.path.join(corpus, 'books.txt')},{os.path.join(corpus, 'wiki.txt')}",
              "--model_prefix", paths["vocab"], "--vocab_size", str(paths["vocab_size"])],
             paths["vocab"] + ".model")]


def train_records_command(paths: dict, prefix: str, seq: int, mask: float, preds: int,
                          dupe: int, shards: int = 2) -> tuple:
    return (["albert_tf.data.create_pretraining_data", "--input_file",
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
    return [(["albert_tf.data.create_pretraining_data", "--input_file",
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


def classifier_args(s: dict, config: str, spm_model_file: str, output_dir: str, seed: int,
                    steps: int, learning_rate: float | None = None, init_checkpoint=None,
                    export_dir=None, data_dir=None) -> list:
    """`run_classifier` on the first `finetune_examples` SST-2 labels with the recipe's sizes
    (`s`: SETTINGS), from `init_checkpoint` or from random weights."""
    data_dir = data_dir or os.path.join(shown_path(SAMPLE_DIR), "glue", "SST-2")
    return ["albert_tf.run_classifier", "--task_name", s["finetune_task"],
            "--data_dir", data_dir, "--train_examples", str(s["finetune_examples"]),
            "--albert_config_file", config, "--spm_model_file", spm_model_file,
            "--output_dir", output_dir,
            *(["--init_checkpoint", init_checkpoint] if init_checkpoint else []),
            "--do_train", "--do_eval", "--max_seq_length", str(s["finetune_seq_length"]),
            "--train_batch_size", str(s["finetune_batch_size"]), "--eval_batch_size", "64",
            "--learning_rate", str(learning_rate or s["finetune_learning_rate"]),
            "--train_step", str(steps), "--warmup_step", str(max(1, steps // 10)),
            "--save_checkpoints_steps", str(steps),
            "--iterations_per_loop", str(min(s["log_every"], steps)),
            "--random_seed", str(seed),
            *(["--export_dir", export_dir] if export_dir else [])]


def finetune_commands(run_dir: str, s: dict, config: str, paths: dict, init: str,
                      pretrain_dir: str) -> list:
    """One `run_classifier` per seed, from the pretrained model or from random weights; the
    pretrained seed-1 model is exported for serving."""
    p = shown_path
    steps = finetune_steps(s)
    commands = []
    for seed in s["finetune_seeds"]:
        out = p(os.path.join(run_dir, "finetune", f"{init}_seed{seed}"))
        export = init == "pretrained" and seed == s["finetune_seeds"][0]
        commands.append((classifier_args(
            s, config, paths["vocab"] + ".model", out, seed, steps,
            init_checkpoint=pretrain_dir if init == "pretrained" else None,
            export_dir=p(os.path.join(run_dir, "exports", "albert_demo_sst2")) if export
            else None), os.path.join(out, "eval_results.json")))
    return commands


def export_commands(run_dir: str, paths: dict, pretrain_dir: str, seq: int) -> list:
    """The pretrained model as a fill-mask SavedModel (version 1 of albert_demo_mlm)."""
    export = os.path.join(run_dir, "exports", "albert_demo_mlm")
    return [(["albert_tf.export.export_saved_model", "--model_dir", pretrain_dir, "--checkpoint",
              "latest",
              "--spm_model_file", paths["vocab"] + ".model", "--export_dir", shown_path(export),
              "--version", "1", "--max_seq_length", str(seq)],
             os.path.join(export, "1", "saved_model.pb"))]


def serve_commands(run_dir: str, runtime: str) -> list:
    """Both SavedModels loaded as TF Serving loads them, answering the raw-text requests."""
    p = shown_path
    serve = os.path.join(run_dir, "serve")
    loader = ["--runtime", runtime, "--loader_binary", p(os.path.join(serve, "serving_loader"))]
    commands = []
    for name, export, requests in (("fill_mask", "albert_demo_mlm", FILL_MASK_REQUESTS),
                                   ("sentiment", "albert_demo_sst2", SENTIMENT_REQUESTS)):
        out = os.path.join(serve, f"{name}.json")
        commands.append((["albert_tf.export.cc_loader", *loader, "--saved_model",
                          p(os.path.join(run_dir, "exports", export, "1")),
                          *[a for t in requests for a in ("--text", t)],
                          "--output_json", p(out)], out))
    return commands


def fill_mask_commands(run_dir: str, paths: dict, pretrain_dir: str) -> list:
    """The pretrained model's fill-mask answers beside its random initialisation's (seed 1, the
    pretraining run's own)."""
    out = os.path.join(run_dir, "fill_mask", "fill_mask.json")
    return [(["albert_tf.analysis.fill_mask", "--model_dir", pretrain_dir,
              "--spm_model_file", paths["vocab"] + ".model", "--random_seed", "1",
              *[a for t in FILL_MASK_REQUESTS for a in ("--text", t)],
              "--output_json", shown_path(out)], out)]


def transitions_commands(run_dir: str, s: dict, paths: dict, pretrain_dir: str) -> list:
    """The paper's Figure 2 for the pretrained model, on held-out records."""
    out = os.path.join(run_dir, "transitions")
    seq = s["max_seq_length"]
    return [(["albert_tf.analysis.transitions", "--model_dir", pretrain_dir,
              "--label", "pretrained ALBERT (all layers shared)",
              "--input_file", paths["heldout_records"], "--output_dir", shown_path(out),
              "--max_seq_length", str(seq), "--max_predictions_per_seq",
              str(predictions_for(s["heldout_masked_lm_prob"], seq)),
              "--max_examples", str(s["transitions_examples"])],
             os.path.join(out, "transitions.png"))]
