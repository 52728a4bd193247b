"""Conversion between formats and `--init_checkpoint`: which reader, which writer, what is
reported. The formats themselves live in `tf1`, `hf` and `ours`."""

from __future__ import annotations

import os
import shutil

import numpy as np

from albert_tf.checkpoints.common import MODEL_KINDS, CheckpointError, assign_strict, build_model
from albert_tf.checkpoints.hf import hf_kind, load_hf_state_dict, read_hf_folder
from albert_tf.checkpoints.names import model_kind, model_weights
from albert_tf.checkpoints.ours import (CONFIG_FILE, FORMAT_FILE, find_sentencepiece,
                                        load_pretrained, save_albert_tf)
from albert_tf.checkpoints.tf1 import (TF1Checkpoint, key_of_with_group0_fallback,
                                       load_tf1_checkpoint, official_config,
                                       write_tf1_checkpoint)
from albert_tf.config import AlbertConfig


def initialize_from_checkpoint(model, path: str, init_from_group0: bool = False) -> dict:
    """`--init_checkpoint`: fills `model` from an official TF1 checkpoint or an albert_tf
    directory / `.keras` file, matching weights by official name, strictly."""
    path = os.fspath(path)
    if path.endswith(".keras") or os.path.exists(os.path.join(path, FORMAT_FILE)):
        source = load_pretrained(path)
        arrays = {w.official_name: w.to_official(w.variable.numpy())
                  for w in model_weights(source)}
        key_of = key_of_with_group0_fallback(arrays.keys(), init_from_group0)
        return assign_strict(model, arrays.keys(), arrays.__getitem__, key_of,
                             lambda name: None, path)
    return load_tf1_checkpoint(model, path, init_from_group0=init_from_group0)


def _load_source(source: str, input_path: str, albert_config_file: str | None, kind: str):
    """(model with weights, SentencePiece model path or None, source record)."""
    if source == "tf1":
        checkpoint = TF1Checkpoint(input_path)
        directory = os.path.dirname(checkpoint.prefix)
        if checkpoint.prefix.endswith(os.path.join("variables", "variables")):
            directory = os.path.dirname(directory)  # TF-Hub module: <module>/variables/variables
        config_path = albert_config_file or os.path.join(directory, CONFIG_FILE)
        if not os.path.exists(config_path):
            raise CheckpointError(
                f"No albert_config.json beside {checkpoint.prefix}; pass --albert_config_file.")
        config = AlbertConfig.from_json_file(config_path)
        kind = checkpoint.kind() if kind == "auto" else kind
        model = build_model(kind, config, checkpoint.num_labels())
        report = load_tf1_checkpoint(model, checkpoint)
        spm = find_sentencepiece(directory) or find_sentencepiece(
            os.path.join(directory, "assets"))
        record = {"type": "tf1", "path": checkpoint.prefix, "hub_module": checkpoint.hub_module,
                  "albert_config_file": config_path}
    elif source == "hf":
        config, state, weights_file = read_hf_folder(input_path)
        if albert_config_file:
            config = AlbertConfig.from_json_file(albert_config_file)
        kind = hf_kind(state) if kind == "auto" else kind
        num_labels = np.shape(state["classifier.weight"])[0] if "classifier.weight" in state \
            else None
        model = build_model(kind, config, num_labels)
        report = load_hf_state_dict(model, state, weights_file)
        spm = find_sentencepiece(input_path)
        record = {"type": "hf", "path": weights_file}
    elif source == "albert_tf":
        model = load_pretrained(input_path, backbone_only=(kind == "backbone"))
        report = {"assigned": [w.official_name for w in model_weights(model)], "skipped": {}}
        spm = None if input_path.endswith(".keras") else find_sentencepiece(input_path)
        record = {"type": "albert_tf", "path": os.path.abspath(input_path)}
    else:
        raise CheckpointError(f"Unknown source {source!r}; choose tf1, hf or albert_tf.")
    record["skipped"] = report["skipped"]
    return model, spm, record, report


def convert(source: str, input_path: str, output_dir: str, target: str = "albert_tf",
            albert_config_file: str | None = None, model: str = "auto",
            overwrite: bool = False) -> dict:
    """Converts a checkpoint between formats. Returns a summary dict (model kind, counts,
    skipped entries, output path)."""
    if model not in ("auto",) + MODEL_KINDS:
        raise CheckpointError(f"Unknown model kind {model!r}; choose auto or one of {MODEL_KINDS}.")
    keras_model, spm, record, report = _load_source(source, input_path, albert_config_file, model)
    if target == "albert_tf":
        written = save_albert_tf(keras_model, output_dir, spm, record, overwrite=overwrite)
    elif target == "tf1":
        config = official_config(keras_model.config)  # refuses what official code cannot read
        if os.path.exists(output_dir) and os.listdir(output_dir) and not overwrite:
            raise CheckpointError(f"{output_dir} exists and is not empty; choose a new directory "
                                  "or pass --overwrite.")
        written = write_tf1_checkpoint(keras_model, output_dir)
        config.to_json_file(os.path.join(output_dir, CONFIG_FILE))
        if spm:
            shutil.copy(spm, output_dir)
    else:
        raise CheckpointError(f"Unknown target {target!r}; choose albert_tf or tf1.")
    return {"model": model_kind(keras_model), "weights": len(report["assigned"]),
            "parameters": keras_model.count_params(), "skipped": report["skipped"],
            "sentencepiece_model": spm, "output": written}
