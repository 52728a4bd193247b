"""How far each layer moves its input: the paper's Figure 2 (Lan et al., 2020, section 4.3).

For every layer l, between its input h_l and its output h_(l+1) (`hidden_states[l]` and
`hidden_states[l + 1]` of `AlbertBackbone`; h_0 is the projected embedding), averaged over the real
tokens (input_mask 1) of the examples given:

- L2 distance ||h_(l+1) - h_l||_2;
- cosine similarity cos(h_l, h_(l+1)), and the angle between them in degrees, arccos of it (the
  paper plots the similarity "in terms of degree").

The paper finds ALBERT's transitions much smoother than BERT's (not-shared) ones: they oscillate
instead of converging, and do not fall to zero, so sharing stabilises the parameters.

    python -m albert_tf.analysis.transitions --model_dir runs/X/pretrain \\
        --input_file 'runs/X/pretraining/heldout-*.tfrecord' --output_dir runs/X/transitions
    python -m albert_tf.analysis.transitions --model_dir albert_dir,bert_dir \\
        --label ALBERT,BERT --input_file ... --output_dir ...   # two models on one chart

`--model_dir` takes any model the project reads: our model directory or `.keras` file, a training
`--output_dir` (latest checkpoint; `DIR:best` for the best), a Hugging Face folder, an official TF1
checkpoint (with `--albert_config_file` unless an `albert_config.json` lies beside it). Writes
`transitions.csv` (model, layer, l2_distance, cosine_similarity, angle_degrees, tokens) and
`transitions.png`.
"""

from __future__ import annotations

from albert_tf.paths import atomic_write
from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import csv
import os

from absl import flags

from albert_tf.commands import flags as albert_flags
from albert_tf.analysis import charts
from albert_tf.models.backbone import AlbertBackbone
from albert_tf.checkpoints import (CONFIG_FILE, FORMAT_FILE, CheckpointError, config_from_hf,
                                   initialize_backbone, load_pretrained)
from albert_tf.config import AlbertConfig
from albert_tf.input_pipeline import pretraining_dataset
from albert_tf.commands.runner import command

COLUMNS = ("model", "layer", "l2_distance", "cosine_similarity", "angle_degrees", "tokens")


def load_backbone(path: str, albert_config_file: str | None = None):
    """The `AlbertBackbone` of any model the project reads (see the module's docstring)."""
    plain = path[: -len(":best")] if path.endswith(":best") else path
    if plain.endswith(".keras") or os.path.exists(os.path.join(plain, FORMAT_FILE)):
        return load_pretrained(plain, backbone_only=True)
    if albert_config_file:
        config = AlbertConfig.from_json_file(albert_config_file)
    elif os.path.exists(os.path.join(plain, CONFIG_FILE)):
        config = AlbertConfig.from_json_file(os.path.join(plain, CONFIG_FILE))
    elif os.path.exists(os.path.join(plain, "config.json")):
        import json

        with open(os.path.join(plain, "config.json"), encoding="utf-8") as f:
            config = config_from_hf(json.load(f), os.path.join(plain, "config.json"))
    else:
        raise CheckpointError(f"{path}: no {CONFIG_FILE} or config.json beside the weights; "
                              "pass --albert_config_file.")
    backbone = AlbertBackbone(config)
    initialize_backbone(backbone, path)
    return backbone


def layer_transitions(backbone, batches) -> list[dict]:
    """Per layer: mean L2 distance, cosine similarity and angle (degrees) between its input and
    output over the real tokens of `batches` (dicts with input_ids, input_mask, segment_ids)."""
    import numpy as np

    sums = None
    tokens = 0
    for batch in batches:
        inputs = {k: batch[k] for k in ("input_ids", "input_mask", "segment_ids")}
        hidden = [np.asarray(h, np.float64) for h in backbone(inputs, training=False)["hidden_states"]]
        real = np.asarray(batch["input_mask"]).astype(bool)
        if sums is None:
            sums = np.zeros((len(hidden) - 1, 3))
        for layer in range(len(hidden) - 1):
            x, y = hidden[layer][real], hidden[layer + 1][real]
            cos = np.sum(x * y, -1) / (np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1))
            cos = np.clip(cos, -1.0, 1.0)
            sums[layer] += (np.linalg.norm(y - x, axis=-1).sum(), cos.sum(),
                            np.degrees(np.arccos(cos)).sum())
        tokens += int(real.sum())
    if not tokens:
        raise ValueError("No real tokens in the examples given (every input_mask is 0).")
    return [{"layer": layer + 1, "l2_distance": float(s[0] / tokens),
             "cosine_similarity": float(s[1] / tokens), "angle_degrees": float(s[2] / tokens),
             "tokens": tokens} for layer, s in enumerate(sums)]


def examples(input_file: str, max_seq_length: int, max_predictions_per_seq: int,
             max_examples: int, batch_size: int = 32):
    """The first `max_examples` examples of pretraining TFRecords, in order, as numpy batches."""
    dataset = pretraining_dataset(input_file, batch_size, max_seq_length,
                                  max_predictions_per_seq, is_training=False,
                                  drop_remainder=False).unbatch().take(max_examples)
    return list(dataset.batch(batch_size).as_numpy_iterator())


def write_csv(rows_by_model: dict, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for model, rows in rows_by_model.items():
            for row in rows:
                writer.writerow([model, row["layer"], f"{row['l2_distance']:.9g}",
                                 f"{row['cosine_similarity']:.9g}",
                                 f"{row['angle_degrees']:.9g}", row["tokens"]])
    return path


def plot(rows_by_model: dict, path: str, title: str | None = None) -> str:
    """Figure 2's two panels: L2 distance and cosine similarity (degrees) per layer."""
    plt = charts.pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    markers = "os^Dv"
    for i, (model, rows) in enumerate(rows_by_model.items()):
        layers = [r["layer"] for r in rows]
        left.plot(layers, [r["l2_distance"] for r in rows], marker=markers[i % 5], label=model)
        right.plot(layers, [r["angle_degrees"] for r in rows], marker=markers[i % 5],
                   label=model)
    left.set_title("L2 distance between a layer's input and output", fontsize=10)
    left.set_ylabel("L2 distance")
    right.set_title("cosine similarity, as an angle", fontsize=10)
    right.set_ylabel("degrees")
    for ax in (left, right):
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return charts.save(fig, path)


def run(model_dirs, labels, input_file, output_dir, max_seq_length, max_predictions_per_seq,
        max_examples=256, albert_config_file=None) -> dict:
    """Computes, writes the CSV and the PNG; returns {label: rows}."""
    if labels and len(labels) != len(model_dirs):
        raise ValueError(f"--label has {len(labels)} names for {len(model_dirs)} models.")
    labels = labels or [os.path.basename(os.path.normpath(d.removesuffix(":best")))
                        for d in model_dirs]
    batches = examples(input_file, max_seq_length, max_predictions_per_seq, max_examples)
    rows_by_model = {}
    for label, model_dir in zip(labels, model_dirs):
        backbone = load_backbone(model_dir, albert_config_file)
        rows_by_model[label] = layer_transitions(backbone, batches)
    write_csv(rows_by_model, os.path.join(output_dir, "transitions.csv"))
    plot(rows_by_model, os.path.join(output_dir, "transitions.png"),
         f"Input-output transitions per layer ({rows_by_model[labels[0]][0]['tokens']:,} tokens)")
    return rows_by_model


def define_flags():
    albert_flags.define("model_dir", "input_file", "output_dir", "max_seq_length",
                        "max_predictions_per_seq", "albert_config_file",
                        kinds={"model_dir": "list"}, max_seq_length=128,
                        notes={"model_dir": "One model, or several (comma-separated) on one "
                                            "chart.",
                               "input_file": "Pretraining TFRecords.",
                               "output_dir": "Where transitions.csv and transitions.png go.",
                               "albert_config_file": "For an official TF1 checkpoint without "
                                                     "albert_config.json."})
    flags.DEFINE_list("label", None, "A name per --model_dir (default: directory names).")
    flags.DEFINE_integer("max_examples", 256, "Examples averaged over (the first ones).")


def report(exp):
    rows_by_model = run(exp.model_dir, exp.label, exp.input_file, exp.output_dir,
                        exp.max_seq_length, exp.max_predictions_per_seq,
                        exp.max_examples, exp.albert_config_file)
    for label, rows in rows_by_model.items():
        print(f"{label}: layer  L2 distance  cosine  angle (deg)")
        for r in rows:
            print(f"  {r['layer']:>5}  {r['l2_distance']:11.4f}  {r['cosine_similarity']:6.4f}"
                  f"  {r['angle_degrees']:11.2f}")
    print(f"wrote {os.path.join(exp.output_dir, 'transitions.csv')} and transitions.png")


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    command(report, define_flags, required=("model_dir", "input_file", "output_dir"))


if __name__ == "__main__":
    cli()
