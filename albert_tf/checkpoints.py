"""Reading and writing ALBERT weights: Google's TF1 checkpoints and TF-Hub modules, Hugging Face
`save_pretrained` folders, and our own format.

Our format is a directory:

    albert_config.json   official keys (+ `sharing` when not "all")
    model.weights.h5     Keras weights of the model (no code, no pickle)
    albert_tf.json       what the weights are (model kind, labels) and where they came from
    *.model              the SentencePiece model, when one was found beside the source

`load_pretrained(DIR)` rebuilds the model from these. Loads of foreign formats (TF1 checkpoints,
TF-Hub modules, Hugging Face folders, `--init_checkpoint`) go through
`checkpoint_names.assign_strict`: an unmapped entry, an unfilled weight or a shape mismatch is an
error that names them, never a partial load. Our own directories are read by Keras'
`load_weights` into a model rebuilt from the stored config and kind (it raises on a missing layer
or a shape mismatch); `.keras` files by `keras.models.load_model` in safe mode.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
import tempfile

import numpy as np

from albert_tf.checkpoint_names import (CheckpointMismatchError, assign_strict,
                                        load_hf_state_dict, model_kind, model_weights)
from albert_tf.config import AlbertConfig

FORMAT_FILE = "albert_tf.json"
WEIGHTS_FILE = "model.weights.h5"
CONFIG_FILE = "albert_config.json"
TF1_CHECKPOINT_NAME = "model.ckpt"
FORMAT_VERSION = 1
MODEL_KINDS = ("pretrainer", "classifier", "backbone")

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint cannot be found, read or used; the message names the file and the fix."""


# ---------------------------------------------------------------------------------------------
# Building models by kind.
def build_model(kind: str, config: AlbertConfig, num_labels: int | None = None, dtype=None):
    """An `AlbertPretrainer`, `AlbertClassifier` or `AlbertBackbone`, built (weights exist)."""
    from albert_tf.backbone import AlbertBackbone
    from albert_tf.classifier import AlbertClassifier
    from albert_tf.pretrainer import AlbertPretrainer

    if kind == "pretrainer":
        return AlbertPretrainer(config, dtype=dtype)
    if kind == "classifier":
        if not num_labels:
            raise CheckpointError("A classifier needs `num_labels`.")
        return AlbertClassifier(config, num_labels=num_labels, dtype=dtype)
    if kind == "backbone":
        return AlbertBackbone(config, dtype=dtype)
    raise CheckpointError(f"Unknown model kind {kind!r}; choose one of {MODEL_KINDS}.")


def _kind_from_heads(has_mlm: bool, has_sop: bool, num_labels: int | None, source: str) -> str:
    if num_labels:
        return "classifier"
    if has_mlm and has_sop:
        return "pretrainer"
    if has_mlm or has_sop:
        present = "masked-LM" if has_mlm else "sentence-order"
        raise CheckpointError(
            f"{source} has the {present} head but not the other pretraining head, so it is "
            "neither a full pretrainer nor a bare encoder. Pass --model backbone (model='backbone') "
            "to convert the encoder alone; the head entries are then reported as skipped.")
    return "backbone"


# ---------------------------------------------------------------------------------------------
# Official TF1 checkpoints and TF-Hub modules.
def _tf1_skip_reason(name: str) -> str | None:
    leaf = name.rsplit("/", 1)[-1]
    if leaf in ("adam_m", "adam_v") or "AdamWeightDecayOptimizer" in name or "/lamb" in name:
        return "optimizer slot"
    if name == "global_step":
        return "training step counter"
    return None


def resolve_tf1_checkpoint(path: str) -> str:
    """The checkpoint prefix for `path`: a prefix (`.../model.ckpt-best`), its `.index` file, a
    directory holding one checkpoint (a `checkpoint` state file or a single `*.index`), or a
    TF-Hub module directory (`variables/variables`)."""
    import tensorflow as tf

    path = os.fspath(path)
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if tf.io.gfile.exists(path + ".index"):
        return path
    if tf.io.gfile.isdir(path):
        hub = os.path.join(path, "variables", "variables")
        if tf.io.gfile.exists(hub + ".index"):
            return hub
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
        if len(indexes) == 1:
            return indexes[0][: -len(".index")]
        if len(indexes) > 1:
            raise CheckpointError(
                f"{path} holds several checkpoints ({[os.path.basename(i) for i in indexes]}); "
                "pass the prefix of one, e.g. --input " + indexes[0][: -len(".index")])
    raise CheckpointError(
        f"No TF1 checkpoint at {path}: expected a prefix with a .index file (e.g. "
        "albert_base/model.ckpt-best), a directory holding one, or a TF-Hub module directory.")


class TF1Checkpoint:
    """A name-based TF1 checkpoint, names normalized (TF-Hub `module/` prefix removed)."""

    def __init__(self, path: str):
        import tensorflow as tf

        self.prefix = resolve_tf1_checkpoint(path)
        try:
            self._reader = tf.train.load_checkpoint(self.prefix)
        except Exception as e:  # noqa: BLE001 - TF raises several types for corrupt files
            raise CheckpointError(f"Cannot read the TF1 checkpoint {self.prefix}: {e}") from None
        self._shapes = {}
        self._stored = {}
        for stored, shape in self._reader.get_variable_to_shape_map().items():
            name = stored[len("module/"):] if stored.startswith("module/") else stored
            self._shapes[name] = tuple(shape)
            self._stored[name] = stored
        self.hub_module = any(k.startswith("module/") for k in self._stored.values())

    @property
    def names(self) -> list[str]:
        return sorted(self._shapes)

    def shape(self, name):
        return self._shapes[name]

    def read(self, name) -> np.ndarray:
        return self._reader.get_tensor(self._stored[name])

    def kind(self) -> str:
        num_labels = self._shapes["output_weights"][0] if "output_weights" in self._shapes else None
        return _kind_from_heads(
            any(n.startswith("cls/predictions/") for n in self._shapes),
            any(n.startswith("cls/seq_relationship/") for n in self._shapes), num_labels,
            self.prefix)

    def num_labels(self) -> int | None:
        shape = self._shapes.get("output_weights")
        return shape[0] if shape else None


def _group0(official_name: str) -> str:
    return re.sub(r"(transformer/)group_\d+/", r"\1group_0/", official_name)


def _key_of(names, init_from_group0: bool):
    """Official `get_assignment_map_from_checkpoint`: a weight takes its own name; with
    `init_from_group0`, a block weight whose group the checkpoint lacks falls back to group 0
    (groups the checkpoint has are never replaced by group 0)."""
    names = set(names)
    if not init_from_group0:
        return lambda n: (n, False)
    return lambda n: (n if n in names else _group0(n), False)


def load_tf1_checkpoint(model, checkpoint: TF1Checkpoint | str,
                        init_from_group0: bool = False) -> dict:
    """Fills `model` from an official TF1 checkpoint, strictly. Optimizer slots and
    `global_step` are skipped; so are the pretraining heads when `model` is a backbone.
    `init_from_group0` (official flag): block weights of groups the checkpoint lacks are filled
    from its group 0 (e.g. to grow a one-group model into several); groups it has load as
    themselves."""
    if not isinstance(checkpoint, TF1Checkpoint):
        checkpoint = TF1Checkpoint(checkpoint)
    kind = model_kind(model)
    key_of = _key_of(checkpoint.names, init_from_group0)

    def skip_reason(name):
        reason = _tf1_skip_reason(name)
        if reason:
            return reason
        if kind == "backbone" and (name.startswith("cls/") or name in ("output_weights",
                                                                       "output_bias")):
            return "head, not part of a backbone"
        return None

    return assign_strict(model, checkpoint.names, checkpoint.read, key_of, skip_reason,
                         checkpoint.prefix)


def initialize_from_checkpoint(model, path: str, init_from_group0: bool = False) -> dict:
    """`--init_checkpoint`: fills `model` from an official TF1 checkpoint or an albert_tf
    directory / `.keras` file, matching weights by official name, strictly."""
    path = os.fspath(path)
    if path.endswith(".keras") or os.path.exists(os.path.join(path, FORMAT_FILE)):
        source = load_pretrained(path)
        arrays = {w.official_name: w.to_official(w.variable.numpy())
                  for w in model_weights(source)}
        key_of = _key_of(arrays.keys(), init_from_group0)
        return assign_strict(model, arrays.keys(), arrays.__getitem__, key_of,
                             lambda name: None, path)
    return load_tf1_checkpoint(model, path, init_from_group0=init_from_group0)


def official_config(config: AlbertConfig) -> AlbertConfig:
    """The config under which official code (and Hugging Face) builds exactly `config`'s model
    from an official checkpoint of it.

    "all" is official ALBERT as is. "none" (every layer its own block) is official ALBERT with
    one group per layer: layer l uses group int(l / L * L) = l, which is how our weight table
    already names a not-shared model's blocks. Attention-only and FFN-only sharing cannot be
    expressed: an official group holds attention and FFN together.
    """
    import dataclasses

    if config.sharing == "all":
        return config
    if config.sharing == "none":
        return dataclasses.replace(config, num_hidden_groups=config.num_hidden_layers,
                                   sharing="all")
    raise CheckpointError(
        f"sharing={config.sharing!r} cannot be written in the official format: an official "
        "block group shares its attention and its FFN together, so official code and Hugging "
        "Face would build a different model. Keep this model in our format (--target albert_tf).")


def write_tf1_checkpoint(model, output_dir: str, name: str = TF1_CHECKPOINT_NAME) -> str:
    """Writes `model`'s weights as an official name-based TF1 checkpoint (SaveV2, the format of
    a TF1 `Saver`), readable by the official code, `tf.train.load_checkpoint` and Hugging Face's
    `load_tf_weights_in_albert`. Returns the checkpoint prefix."""
    import tensorflow as tf

    tf.io.gfile.makedirs(output_dir)
    prefix = os.path.join(output_dir, name)
    named = model_weights(model)
    tensors = [tf.constant(w.to_official(w.variable.numpy())) for w in named]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[w.official_name for w in named],
                      shape_and_slices=[""] * len(named), tensors=tensors)
    tf.compat.v1.train.update_checkpoint_state(output_dir, prefix)
    return prefix


# ---------------------------------------------------------------------------------------------
# Hugging Face folders.
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
    return _kind_from_heads(any(k.startswith("predictions.") for k in keys),
                            any(k.startswith("sop_classifier.") for k in keys), num_labels,
                            "the Hugging Face checkpoint")


# ---------------------------------------------------------------------------------------------
# Our format.
def _find_sentencepiece(directory: str) -> str | None:
    candidates = sorted(glob.glob(os.path.join(directory, "*.model")))
    return candidates[0] if candidates else None


def save_albert_tf(model, output_dir: str, sentencepiece_model: str | None = None,
                   source: dict | None = None, overwrite: bool = False) -> str:
    """Writes `model` in our format (see module docstring), atomically: into a temporary
    directory renamed into place, so a failed write leaves nothing under `output_dir`."""
    output_dir = os.path.abspath(output_dir)
    if os.path.exists(output_dir) and os.listdir(output_dir) and not overwrite:
        raise CheckpointError(f"{output_dir} exists and is not empty; choose a new directory or "
                              "pass --overwrite.")
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".albert_tf-", dir=parent)
    try:
        model.config.to_json_file(os.path.join(tmp, CONFIG_FILE))
        model.save_weights(os.path.join(tmp, WEIGHTS_FILE))
        kind = model_kind(model)
        record = {"format": "albert_tf", "format_version": FORMAT_VERSION, "model": kind,
                  "num_labels": getattr(model, "num_labels", None), "source": source or {}}
        if sentencepiece_model:
            shutil.copy(sentencepiece_model, tmp)
            record["sentencepiece_model"] = os.path.basename(sentencepiece_model)
        with open(os.path.join(tmp, FORMAT_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        if os.path.exists(output_dir):
            shutil.rmtree(output_dir)
        os.replace(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


def load_pretrained(path: str, backbone_only: bool = False, dtype=None):
    """The model stored at `path` with its weights.

    Args:
        path: a directory written by `python -m albert_tf.convert` / `save_albert_tf`, or a
            `.keras` file (loaded in Keras safe mode: no arbitrary code).
        backbone_only: return the `AlbertBackbone` of the stored model.
        dtype: dtype policy name for the rebuilt model (directories only).

    Returns:
        `AlbertPretrainer`, `AlbertClassifier` or `AlbertBackbone`, as stored.
    """
    import keras

    path = os.fspath(path)
    if path.endswith(".keras"):
        if not os.path.exists(path):
            raise CheckpointError(f"No such file: {path}")
        model = keras.models.load_model(path, safe_mode=True)
    else:
        record_path = os.path.join(path, FORMAT_FILE)
        if not os.path.exists(record_path):
            hint = ""
            if os.path.exists(os.path.join(path, "config.json")):
                hint = " It looks like a Hugging Face folder: convert it with --source hf."
            elif glob.glob(os.path.join(path, "*.index")):
                hint = " It looks like a TF1 checkpoint: convert it with --source tf1."
            raise CheckpointError(
                f"{path} is not an albert_tf checkpoint directory (no {FORMAT_FILE})." + hint
                + " Usage: python -m albert_tf.convert --source {tf1,hf} --input PATH --output DIR")
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        if record.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"{record_path}: unsupported format_version "
                                  f"{record.get('format_version')!r} (this release reads "
                                  f"{FORMAT_VERSION})")
        config = AlbertConfig.from_json_file(os.path.join(path, CONFIG_FILE))
        model = build_model(record["model"], config, record.get("num_labels"), dtype=dtype)
        model.load_weights(os.path.join(path, WEIGHTS_FILE))
    if backbone_only:
        return model if model_kind(model) == "backbone" else model.backbone
    return model


# ---------------------------------------------------------------------------------------------
# Conversion.
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
        spm = _find_sentencepiece(directory) or _find_sentencepiece(
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
        spm = _find_sentencepiece(input_path)
        record = {"type": "hf", "path": weights_file}
    elif source == "albert_tf":
        model = load_pretrained(input_path, backbone_only=(kind == "backbone"))
        report = {"assigned": [w.official_name for w in model_weights(model)], "skipped": {}}
        spm = None if input_path.endswith(".keras") else _find_sentencepiece(input_path)
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


__all__ = ["CheckpointError", "CheckpointMismatchError", "TF1Checkpoint", "build_model",
           "config_from_hf", "convert", "load_pretrained", "load_tf1_checkpoint",
           "official_config",
           "read_hf_folder", "save_albert_tf", "write_tf1_checkpoint"]
