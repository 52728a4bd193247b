"""Google's official TF1 checkpoints and TF-Hub modules: reading (names normalized, strict
loading with the official `init_from_group0` fallback) and writing (SaveV2, what a TF1 `Saver`
writes), and the config under which official code builds the same model."""

from __future__ import annotations

import os
import re

import numpy as np

from albert_tf.models import kinds
from albert_tf.checkpoints.common import (CheckpointError, assign_strict, kind_from_heads,
                                          reading_checkpoint)
from albert_tf.checkpoints.names import model_kind, model_weights
from albert_tf.config import AlbertConfig

TF1_CHECKPOINT_NAME = "model.ckpt"


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
        with reading_checkpoint(self.prefix):  # a damaged file is named (and not a traceback)
            self._reader = tf.train.load_checkpoint(self.prefix)
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
        with reading_checkpoint(self.prefix):
            return self._reader.get_tensor(self._stored[name])

    def kind(self) -> str:
        num_labels = self._shapes["output_weights"][0] if "output_weights" in self._shapes else None
        return kind_from_heads(
            any(n.startswith("cls/predictions/") for n in self._shapes),
            any(n.startswith("cls/seq_relationship/") for n in self._shapes), num_labels,
            self.prefix)

    def num_labels(self) -> int | None:
        shape = self._shapes.get("output_weights")
        return shape[0] if shape else None


def _group0(official_name: str) -> str:
    return re.sub(r"(transformer/)group_\d+/", r"\1group_0/", official_name)


def key_of_with_group0_fallback(names, init_from_group0: bool):
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
    key_of = key_of_with_group0_fallback(checkpoint.names, init_from_group0)
    other_heads = tuple(p for names in kinds.other_heads_official_names(model).values()
                        for p in names)

    def skip_reason(name):
        reason = _tf1_skip_reason(name)
        if reason:
            return reason
        if name.startswith(other_heads):
            return f"head, not part of a {kind}"
        return None

    return assign_strict(model, checkpoint.names, checkpoint.read, key_of, skip_reason,
                         checkpoint.prefix)


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

    named = model_weights(model)  # a model it cannot write is refused before any directory
    tf.io.gfile.makedirs(output_dir)
    prefix = os.path.join(output_dir, name)
    tensors = [tf.constant(w.to_official(w.variable.numpy())) for w in named]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=[w.official_name for w in named],
                      shape_and_slices=[""] * len(named), tensors=tensors)
    # The state file names the checkpoint relative to its directory (as a TF1 Saver with
    # save_relative_paths), so the directory may be moved (`write_replacing` writes beside).
    with tf.io.gfile.GFile(os.path.join(output_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
    return prefix
