"""What every checkpoint format shares: the errors, building a model by kind (the registry), and
`assign_strict`, the one strict assignment every foreign source (TF1, Hugging Face,
`--init_checkpoint`) goes through: an unmapped entry, an unfilled weight or a shape mismatch is
an error that names them, and nothing is assigned."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import tensorflow as tf

from albert_tf.models import kinds
from albert_tf.checkpoints.names import block_counts, explain_shape_mismatch, model_weights
from albert_tf.config import AlbertConfig


class CheckpointError(ValueError):
    """A checkpoint cannot be found, read or used; the message names the file and the fix."""


class CheckpointMismatchError(ValueError):
    """A checkpoint does not fit the model: names or shapes disagree. Nothing was assigned."""


@contextlib.contextmanager
def reading_checkpoint(prefix: str):
    """Reads of the TensorFlow checkpoint `prefix` (its `.index` and `.data-*` files) in the
    block: a file that cannot be read (truncated, corrupt, missing) is a CheckpointError that
    names it (`damaged_checkpoint`) instead of TensorFlow's `IndexError: Read less bytes than
    requested`, which names none. Keep the block to the reads: it turns every IndexError and
    TensorFlow error into that message."""
    try:
        yield
    except (IndexError, tf.errors.OpError) as e:
        raise damaged_checkpoint(prefix, e) from None


def damaged_checkpoint(prefix: str, error: BaseException) -> CheckpointError:
    """The one-line error for the checkpoint `prefix` that failed to read with `error`: the
    `.index` file when it does not open, else the data file (a missing one named as missing),
    and whether it is truncated or corrupt."""
    text = " ".join(str(error).split())
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", text)  # TF's "{{function_node ...}}"
    text = re.sub(r"\s*\[Op:\w+\]$", "", text)[:200] or type(error).__name__
    index = prefix + ".index"
    try:
        tf.train.load_checkpoint(prefix)
        index_ok = True
    except Exception:  # noqa: BLE001 - TF raises several types for a bad index
        index_ok = False
    fix = ("Copy the checkpoint again from where it came from, or use another checkpoint "
           "(of a run: RUN/ckpt-N).")
    if not index_ok:
        if not tf.io.gfile.exists(index):
            return CheckpointError(f"{index} is missing: the checkpoint {prefix} cannot be "
                                   f"read without it. {fix}")
        return CheckpointError(f"{index} is damaged (truncated or corrupt): the checkpoint "
                               f"{prefix} cannot be read. {fix}")
    shards = sorted(tf.io.gfile.glob(prefix + ".data-*"))
    missing = [f for f in re.findall(r"\S+\.data-\d+-of-\d+", text)
               if not tf.io.gfile.exists(f)] or ([] if shards else
                                               [f"{prefix}.data-00000-of-00001"])
    if missing:
        return CheckpointError(f"{missing[0]} is missing: the checkpoint {prefix} cannot be "
                               f"read without it. {fix}")
    data = shards[0] if len(shards) == 1 else \
        f"{prefix}.data-* (one of its {len(shards)} data files)"
    if isinstance(error, IndexError) or "less bytes" in text:
        how = "truncated: it ends before the tensors its index lists"
    elif "Checksum does not match" in text:
        how = "corrupt: its checksum does not match"
    else:
        how = f"truncated or corrupt: {text}"
    return CheckpointError(f"{data} is damaged ({how}): the checkpoint {prefix} cannot be "
                           f"read. {fix}")


def check_intact(prefix: str) -> None:
    """Reads every tensor of the checkpoint `prefix` (TensorFlow checks each one's checksum):
    a CheckpointError naming the damaged file (`damaged_checkpoint`) unless all are whole."""
    with reading_checkpoint(prefix):
        reader = tf.train.load_checkpoint(prefix)
        for key in reader.get_variable_to_dtype_map():
            reader.get_tensor(key)


# The saved kinds: every class registered in `albert_tf.models.registry` (`albert_tf.models.kinds`).
MODEL_KINDS = kinds.kinds()


def build_model(kind: str, config: AlbertConfig, num_labels: int | None = None, dtype=None):
    """The registered model of `kind` built for reading a checkpoint of it (weights exist);
    `num_labels` is a classifier's labels or a multiple-choice model's choices."""
    try:
        return kinds.build_model(kind, config, num_labels, dtype=dtype)
    except ValueError as e:  # an unknown kind, a classifier without labels
        raise CheckpointError(str(e)) from None


def kind_from_heads(has_mlm: bool, has_sop: bool, num_labels: int | None, source: str) -> str:
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


def assign_strict(model, keys, read, key_of, skip_reason, source: str,
                  may_lack=lambda key: False) -> dict:
    """Fills every variable of `model` from a checkpoint, or raises and assigns nothing.

    Args:
        model: an ALBERT model (backbone, pretrainer or classifier), built.
        keys: the checkpoint's entry names.
        read: `read(key) -> np.ndarray`.
        key_of: `key_of(official_name) -> (key, transposed)` where `transposed` says the stored
            array is the transpose of the official layout.
        skip_reason: `skip_reason(key) -> str | None`; entries with a reason (optimizer slots,
            buffers, heads the model does not have) are skipped and reported.
        source: the checkpoint's path, for messages.
        may_lack: `may_lack(key) -> bool`; a model weight whose key the checkpoint's format
            does not have at all (a Hugging Face token classifier's pooler) keeps its value and
            is reported under "kept".

    Returns:
        {"assigned": [official names], "skipped": {key: reason}} (and "kept": [keys] when
        `may_lack` kept any).

    Raises:
        CheckpointMismatchError: listing every model weight with no entry, every entry that maps
            to no model weight, and every shape mismatch with the config dimension it concerns.
    """
    keys = set(keys)
    named = model_weights(model)
    assignments, missing, mismatched, dimensions, used, kept = [], [], [], [], set(), []
    for weight in named:
        key, transposed = key_of(weight.official_name)
        if key not in keys:
            (kept if may_lack(key) else missing).append(key)
            continue
        used.add(key)
        value = to_numpy(read(key))
        value = weight.from_official(value.T if transposed else value)
        model_shape, ckpt_shape = tuple(weight.variable.shape), tuple(value.shape)
        if model_shape != ckpt_shape:
            mismatched.append(f"{key} {ckpt_shape} vs {model_shape}")
            # named in the official orientation (the classifier's output_weights is [labels, H],
            # our kernel [H, labels])
            official = (lambda shape: shape[::-1]) if weight.transposed else (lambda shape: shape)
            for d in explain_shape_mismatch(weight.official_name, official(model_shape),
                                            official(ckpt_shape)):
                if d not in dimensions:
                    dimensions.append(d)
            continue
        assignments.append((weight, value))
    skipped, unused = {}, []
    for key in sorted(keys - used):
        reason = skip_reason(key)
        if reason:
            skipped[key] = reason
        else:
            unused.append(key)
    if missing or unused or mismatched:
        problems = []
        if mismatched:
            problems.append(f"the config disagrees with the checkpoint on {'; '.join(dimensions)} "
                            f"-- shape mismatches (checkpoint vs model): {mismatched}")
        ours = block_counts(w.official_name for w in named)
        theirs = block_counts(keys)
        if theirs != (0, 0) and ours != theirs:
            problems.append(f"the checkpoint has {theirs[0]} block group(s) x {theirs[1]} inner "
                            f"group(s), the model {ours[0]} x {ours[1]}: check num_hidden_groups, "
                            "inner_group_num and sharing in the config")
        if missing:
            problems.append(f"model weights with no checkpoint entry: {missing}")
        if unused:
            problems.append(f"checkpoint entries that map to no model weight: {unused}")
        raise CheckpointMismatchError(
            f"Cannot load {source} into {type(model).__name__}; nothing was assigned. "
            + "; ".join(problems))
    for weight, value in assignments:
        weight.variable.assign(value.astype(weight.variable.dtype))
    report = {"assigned": [w.official_name for w, _ in assignments], "skipped": skipped}
    return {**report, "kept": kept} if kept else report


def to_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)
