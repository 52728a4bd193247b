"""Fill-mask answers of a pretrained model beside those of its random initialisation: what
pretraining changed in the masked-LM head's guesses, sentence by sentence.

    python -m albert_tf.analysis.fill_mask --model_dir runs/X/pretrain:best \\
        --spm_model_file runs/X/vocab/sample8k.model --random_seed 1 \\
        --text "The cat sat on the [MASK]." --text "She [MASK] the door." \\
        --output_json runs/X/fill_mask/fill_mask.json

`--model_dir` is a pretraining `--output_dir` (its latest checkpoint; `DIR:best` for the best). With `--random_seed N` the same model is also built from
random weights drawn as `run_pretraining --random_seed N` draws them (the pretraining run's own
starting point), so the two columns differ only by what training did. Each literal "[MASK]" in a
text is one masked position; texts are tokenized as the exported SavedModel tokenizes them
(`Tokenizer.encode_with_masks`, [CLS] text [SEP]). Writes {"inputs", "top_k", "models": {name:
[[{"piece", "probability"} x top_k] per [MASK]] per text}} and prints a table.
"""

from __future__ import annotations

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import os

import keras
import numpy as np
import tensorflow as tf
from absl import flags

from albert_tf import features as F
from albert_tf.commands import flags as albert_flags
from albert_tf.checkpoints import read_training_checkpoint
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.commands.runner import command
from albert_tf.paths import write_json
from albert_tf.tokenization import make_tokenizer


def top_k_answers(model, tokenizer, texts, top_k: int = 5) -> list:
    """[[[(piece, probability)] * top_k per [MASK]] per text] of an `AlbertPretrainer`."""
    if tokenizer.mask_id is None:
        raise ValueError(f"The vocabulary {tokenizer.vocabulary_file} has no [MASK] token: "
                         "there is nothing to fill (add a [MASK] line to it and use a model "
                         "pretrained with it).")
    answers = []
    for text in texts:
        ids = [tokenizer.cls_id] + tokenizer.encode_with_masks(text) + [tokenizer.sep_id]
        positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
        if not positions:
            raise ValueError(f"{text!r} holds no [MASK].")
        batch = {F.INPUT_IDS: tf.constant([ids]), F.INPUT_MASK: tf.ones([1, len(ids)], tf.int32),
                 F.SEGMENT_IDS: tf.zeros([1, len(ids)], tf.int32),
                 F.MASKED_LM_POSITIONS: tf.constant([positions])}
        logits = tf.cast(model(batch, training=False)["mlm_logits"], tf.float32)
        probabilities = tf.nn.softmax(tf.reshape(logits, [len(positions), -1]), -1).numpy()
        rows = []
        for p in probabilities:
            best = np.argsort(-p, kind="stable")[:top_k]
            rows.append([(tokenizer.ids_to_pieces([int(i)])[0], float(p[i])) for i in best])
        answers.append(rows)
    return answers


def build_models(model_dir: str, random_seed: int | None = None) -> dict:
    """{"trained": the `AlbertPretrainer` of a pretraining output directory (`DIR`: its latest
    checkpoint, `DIR:best`: its best), "random_init": the same model from the random weights
    `run_pretraining --random_seed` draws (with `random_seed`)}."""
    best = model_dir.endswith(":best")
    plain = model_dir[: -len(":best")] if best else model_dir
    trained, _ = read_training_checkpoint(plain, "best" if best else "latest")
    models = {"trained": trained}
    if random_seed is not None:  # seeded right before building, as the training loop does
        keras.utils.set_random_seed(random_seed)
        models["random_init"] = AlbertPretrainer(trained.config)
    return models


def define_flags():
    albert_flags.define("model_dir", "spm_model_file", "vocab_file", "random_seed", "top_k",
                        "do_lower_case",
                        random_seed=None,
                        notes={"model_dir": "Here: a pretraining --output_dir (its latest "
                                            "checkpoint; DIR:best for its best).",
                               "random_seed": "Here: also answer with the model's random "
                                              "initialisation as run_pretraining "
                                              "--random_seed draws it."})
    flags.DEFINE_multi_string("text", None, "A text with one or more [MASK] (repeatable).")
    flags.DEFINE_string("output_json", None, "Where the answers go (JSON).")


def answer(exp):
    tokenizer = make_tokenizer(exp.spm_model_file, exp.vocab_file, exp.do_lower_case)
    models = build_models(exp.model_dir, exp.random_seed)
    result = {"inputs": list(exp.text), "top_k": exp.top_k, "models": {
        name: [[[{"piece": piece, "probability": p} for piece, p in row] for row in rows]
               for rows in top_k_answers(model, tokenizer, exp.text, exp.top_k)]
        for name, model in models.items()}}
    for i, text in enumerate(result["inputs"]):
        print(text)
        for name, answers in result["models"].items():
            shown = " | ".join(", ".join(f"{a['piece']} {a['probability']:.3f}" for a in row)
                               for row in answers[i])
            print(f"  {name:>11}: {shown}")
    if exp.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(exp.output_json)), exist_ok=True)
        write_json(exp.output_json, result)


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(answer, define_flags, required=("model_dir", "spm_model_file|vocab_file", "text"))


if __name__ == "__main__":
    cli()
