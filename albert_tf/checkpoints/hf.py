"""Hugging Face ALBERT: `save_pretrained` folders (config.json, safetensors or weights-only
PyTorch files, sharded or not) and `state_dict`s, loaded strictly through the name table."""

from __future__ import annotations

import json
import logging
import os
from typing import Mapping

import numpy as np

from albert_tf.checkpoints.common import (CheckpointError, CheckpointMismatchError,
                                          assign_strict, kind_from_heads, to_numpy)
from albert_tf.checkpoints.names import (HF_DERIVED_KEYS, HF_HEAD_PREFIXES, model_kind,
                                         official_to_hf)
from albert_tf.config import AlbertConfig

log = logging.getLogger(__name__)

_HF_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu",
                   "relu": "relu", "tanh": "tanh", "linear": "linear"}
_HF_KEYS = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
            "num_hidden_groups", "num_attention_heads", "intermediate_size", "inner_group_num",
            "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
            "type_vocab_size", "initializer_range")


def config_from_hf(values: dict, source: str = "config.json") -> AlbertConfig:
    """An `AlbertConfig` from a Hugging Face ALBERT `config.json` dict.

    HF metadata keys (architectures, token ids, labels, ...) are ignored; keys that would change
    the architecture away from ALBERT's are refused.
    """
    if values.get("model_type", "albert") != "albert":
        raise CheckpointError(f"{source}: model_type is {values.get('model_type')!r}, not 'albert'")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: position_embedding_type "
                              f"{values['position_embedding_type']!r} is not supported (absolute only)")
    eps = values.get("layer_norm_eps", 1e-12)
    if not np.isclose(eps, 1e-12, rtol=0, atol=1e-15):
        raise CheckpointError(f"{source}: layer_norm_eps={eps}; ALBERT uses 1e-12 everywhere")
    act = values.get("hidden_act", "gelu_new")
    if act not in _HF_ACTIVATIONS:
        raise CheckpointError(f"{source}: hidden_act {act!r} is not supported; supported: "
                              f"{sorted(_HF_ACTIVATIONS)}")
    if act == "gelu":
        log.warning("%s says hidden_act='gelu', which Hugging Face computes as the exact (erf) "
                    "GELU; ALBERT was trained with the tanh approximation (official 'gelu'), "
                    "which this model uses. Outputs differ from HF's by about 1e-3.", source)
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in values]
    if missing:
        raise CheckpointError(f"{source} lacks the ALBERT keys {missing}")
    kwargs = {k: values[k] for k in _HF_KEYS if k in values}
    kwargs["hidden_act"] = _HF_ACTIVATIONS[act]
    try:
        return AlbertConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from None


def _load_hf_weights_file(path: str) -> dict:
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file

        return load_file(path)
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path} is a PyTorch pickle; reading it needs torch (pip install torch), or save the "
            "model with safe_serialization=True to get model.safetensors.") from None
    try:
        # weights_only: tensors and plain containers only; never a general unpickle.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"Refusing or unable to load {path} with torch's weights-only "
                              f"loader: {e}") from None
    return {k: v.detach().cpu().float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def read_hf_folder(path: str) -> tuple[AlbertConfig, dict, str]:
    """(config, state dict of numpy arrays, weights file) of a `save_pretrained` folder.
    `model.safetensors` is preferred over `pytorch_model.bin`; sharded files are supported."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isdir(path) or not os.path.exists(config_path):
        raise CheckpointError(f"{path} is not a Hugging Face model folder (no config.json).")
    with open(config_path, encoding="utf-8") as f:
        config = config_from_hf(json.load(f), config_path)
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if os.path.exists(os.path.join(path, single)):
            file = os.path.join(path, single)
            return config, _load_hf_weights_file(file), file
        if os.path.exists(os.path.join(path, index)):
            with open(os.path.join(path, index), encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            state = {}
            for shard in shards:
                state.update(_load_hf_weights_file(os.path.join(path, shard)))
            return config, state, os.path.join(path, index)
    raise CheckpointError(f"{path} has config.json but no model.safetensors or "
                          "pytorch_model.bin.")


def hf_kind(state_dict) -> str:
    keys = list(state_dict)
    num_labels = (np.shape(state_dict["classifier.weight"])[0]
                  if "classifier.weight" in state_dict else None)
    return kind_from_heads(any(k.startswith("predictions.") for k in keys),
                            any(k.startswith("sop_classifier.") for k in keys), num_labels,
                            "the Hugging Face checkpoint")


def _identity_projection(state_dict, prefix: str, source: str) -> bool:
    """For an E = H model: Hugging Face always builds `embedding_hidden_mapping_in`; it can be
    dropped only when it is the identity with zero bias. Otherwise the checkpoint is a model
    ours cannot represent, and loading it would silently change its outputs."""
    weight, bias = state_dict.get(prefix + "weight"), state_dict.get(prefix + "bias")
    if weight is None and bias is None:
        return False
    weight, bias = to_numpy(weight), to_numpy(bias)
    if np.array_equal(weight, np.eye(*weight.shape)) and not np.any(bias):
        return True
    raise CheckpointMismatchError(
        f"{source}: embedding_size == hidden_size, so the model has no E -> H projection "
        f"(official rule), but {prefix}weight/bias is not the identity with zero bias (max "
        f"|W - I| {np.abs(weight - np.eye(*weight.shape)).max():.3g}, max |b| "
        f"{np.abs(bias).max():.3g}); this checkpoint's model cannot be represented. Use a config "
        "with embedding_size != hidden_size only if the checkpoint really has one.")


def load_hf_state_dict(model, state_dict: Mapping[str, object], source="state_dict") -> dict:
    """Copies a Hugging Face ALBERT `state_dict` into `model` strictly (see `assign_strict`).

    Keys may carry the `albert.` prefix (`AlbertForPreTraining`, `AlbertFor...`) or not
    (`AlbertModel`). When loading a backbone, the heads' entries are skipped (reported).
    """
    prefixed = any(k.startswith("albert.") for k in state_dict)

    def key_of(official_name):
        key, transposed = official_to_hf(official_name)
        if not prefixed and key.startswith("albert."):
            key = key[len("albert."):]
        return key, transposed

    derived = {k if prefixed else k.replace("albert.", "", 1) for k in HF_DERIVED_KEYS}
    kind = model_kind(model)
    projection = ("albert." if prefixed else "") + "encoder.embedding_hidden_mapping_in."
    identity = _identity_projection(state_dict, projection, source) \
        if model.config.embedding_size == model.config.hidden_size else False

    def skip_reason(key):
        if key in derived:
            return "derived (buffer or tied copy)"
        if identity and key.startswith(projection):
            return "identity E -> H projection (E = H: the model has none)"
        if kind != "pretrainer" and key.startswith(HF_HEAD_PREFIXES):
            return f"pretraining head, not part of a {kind}"
        if kind == "backbone" and key.startswith("classifier."):
            return "classifier head, not part of a backbone"
        return None

    return assign_strict(model, state_dict.keys(), lambda k: state_dict[k], key_of, skip_reason,
                         source)
