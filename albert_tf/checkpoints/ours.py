"""Our format: a directory

    albert_config.json   official keys (+ `sharing` when not "all")
    model.weights.h5     Keras weights of the model (no code, no pickle)
    albert_tf.json       what the weights are (model kind, labels, the tokenizer's casing)
                         and where they came from
    *.model              the SentencePiece model, when one was found beside the source

read by Keras' `load_weights` into a model rebuilt from the stored config and kind (it raises
on a missing layer or a shape mismatch); `.keras` files by `keras.models.load_model` in safe
mode. These are our own models, so they are not name-mapped: `assign_strict` is for foreign
formats."""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import shutil
import tempfile
import zipfile

import keras

import albert_tf
from albert_tf.checkpoints.common import CheckpointError, build_model
from albert_tf.checkpoints.names import model_kind
from albert_tf.config import AlbertConfig
from albert_tf.models.kinds import backbone_of
from albert_tf.tokenization import check_vocabulary_digest

FORMAT_FILE = "albert_tf.json"
WEIGHTS_FILE = "model.weights.h5"
CONFIG_FILE = "albert_config.json"
FORMAT_VERSION = 1


# What a conversion writes: `--overwrite` replaces a directory holding these only.
OURS_FILES = (CONFIG_FILE, WEIGHTS_FILE, FORMAT_FILE, "*.model")
TF1_FILES = (CONFIG_FILE, "checkpoint", "model.ckpt*", "*.model")


def check_replaceable(output_dir: str, overwrite: bool, written=OURS_FILES) -> None:
    """Refuses a non-empty `output_dir` unless `overwrite` and it holds only what a conversion
    writes (`written`: names or globs): --overwrite replaces an earlier conversion, never a
    directory of other work (a project, a training run)."""
    if not os.path.exists(output_dir):
        return
    if not os.path.isdir(output_dir):
        raise CheckpointError(f"{output_dir} is a file; --output names a directory.")
    entries = sorted(os.listdir(output_dir))
    if not entries:
        return
    if not overwrite:
        raise CheckpointError(f"{output_dir} exists and is not empty; choose a new directory or "
                              "pass --overwrite.")
    others = [e for e in entries if not any(fnmatch.fnmatch(e, p) for p in written)]
    if others:
        raise CheckpointError(
            f"{output_dir} holds files a conversion does not write ({', '.join(others[:5])}"
            f"{' ...' if len(others) > 5 else ''}); --overwrite replaces only an earlier "
            "conversion. Choose a new directory.")


def write_replacing(output_dir: str, overwrite: bool, written, write) -> str:
    """`write(directory)` into a new directory beside `output_dir`, then put in its place: an
    earlier conversion there (files of `written` only: `check_replaceable`) is replaced whole,
    none of its files left beside the new ones (an earlier tokenizer), and a failed write
    leaves `output_dir` as it was. Returns the absolute `output_dir`."""
    output_dir = os.path.abspath(output_dir)
    check_replaceable(output_dir, overwrite, written)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".albert_tf-", dir=parent)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # a directory as mkdir makes it (mkdtemp's is private)
    try:
        write(tmp)
        if not os.path.isdir(output_dir):
            os.replace(tmp, output_dir)
            return output_dir
        for entry in os.listdir(output_dir):
            if any(fnmatch.fnmatch(entry, p) for p in written):
                old = os.path.join(output_dir, entry)
                if os.path.isdir(old) and not os.path.islink(old):
                    shutil.rmtree(old)
                else:
                    os.remove(old)
        for entry in os.listdir(tmp):
            os.replace(os.path.join(tmp, entry), os.path.join(output_dir, entry))
        os.rmdir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output_dir


def find_sentencepiece(directory: str) -> str | None:
    candidates = sorted(glob.glob(os.path.join(directory, "*.model")))
    return candidates[0] if candidates else None


def save_albert_tf(model, output_dir: str, sentencepiece_model: str | None = None,
                   source: dict | None = None, overwrite: bool = False,
                   labels: list | None = None, do_lower_case: bool | None = None) -> str:
    """Writes `model` in our format (see module docstring), atomically: into a temporary
    directory put into place (`write_replacing`), so a failed write leaves nothing under
    `output_dir`. `labels`: the class or tag names, recorded (albert_tf.json "labels");
    `do_lower_case`: its tokenizer's casing, recorded where known ("do_lower_case")."""

    def write(tmp):
        model.config.to_json_file(os.path.join(tmp, CONFIG_FILE))
        model.save_weights(os.path.join(tmp, WEIGHTS_FILE))
        kind = model_kind(model)
        record = {"format": "albert_tf", "format_version": FORMAT_VERSION, "model": kind,
                  "num_labels": getattr(model, "num_labels", None), "source": source or {}}
        if labels:
            record["labels"] = list(labels)
        if sentencepiece_model:
            shutil.copy(sentencepiece_model, tmp)
            record["sentencepiece_model"] = os.path.basename(sentencepiece_model)
        if do_lower_case is not None:
            record["do_lower_case"] = bool(do_lower_case)
        with open(os.path.join(tmp, FORMAT_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)

    return write_replacing(output_dir, overwrite, OURS_FILES, write)


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
    path = os.fspath(path)
    if path.endswith(".keras"):
        config = keras_file_config(path)  # its classes checked before Keras reads it
        pre = (config.get("config", {}).get("preprocessor") or {}).get("config", {})
        vocabulary = pre.get("spm_model_file") or pre.get("vocab_file")
        if vocabulary and os.path.isfile(vocabulary):
            try:  # the file now at its vocabulary's path is the one it was saved with
                check_vocabulary_digest(vocabulary, pre.get("vocabulary_sha256"), path)
            except ValueError as e:
                raise CheckpointError(str(e)) from None
        try:
            model = keras.models.load_model(path, safe_mode=True)
        except (TypeError, ValueError, AttributeError, KeyError) as e:  # a config Keras refuses
            raise CheckpointError(f"{path} cannot be loaded by Keras: "
                                  f"{' '.join(str(e).split())[:200]}") from None
        # a Keras task (`AlbertTextClassifier`) saved whole: the ALBERT model it wraps
        model = getattr(model, "albert_model", model)
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
        weights = os.path.join(path, WEIGHTS_FILE)
        if not os.path.isfile(weights):
            raise CheckpointError(f"{weights} is missing: {path} holds no weights.")
        try:
            model.load_weights(weights)
        except OSError as e:  # h5py: "Unable to synchronously open file (truncated file ...)"
            raise CheckpointError(
                f"{weights} is damaged (truncated or corrupt: {' '.join(str(e).split())[:200]})"
                ": copy it again from where it came from.") from None
    if backbone_only:
        return backbone_of(model)
    return model


def keras_file_config(path: str) -> dict:
    """The config (config.json) of a `.keras` file, read as JSON without building anything,
    after checking that every class it names is Keras's or one of albert_tf's exported models
    (`AlbertTextClassifier`, `AlbertTextTagger`, the ALBERT models), whose modules are then
    imported so Keras finds them registered. A class of any other module (`{"module": "os",
    "class_name": "system"}`) is refused with its name: nothing of the file is run; so is a
    file of any other model (a plain Keras `Sequential`), named, before Keras builds it."""
    if not os.path.isfile(path):
        raise CheckpointError(f"no such path: {path}")
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise CheckpointError(f"{path} is not a Keras model file (a zip with config.json): "
                              f"{e}") from None
    ours = set(albert_tf.__all__)
    for name in ours - _NOT_MODELS:  # the exported models' modules register them and their parts
        getattr(albert_tf, name)
    for obj in _keras_objects(config):
        module, name = str(obj.get("module") or ""), str(obj["class_name"])
        registered = str(obj.get("registered_name") or "")
        if module == "keras" or module.startswith("keras."):
            continue  # Keras's own: Keras finds it among its built-ins or refuses it
        if not module and (name.startswith("__")  # Keras's markers: __tensor__, __numpy__, ...
                           or keras.saving.get_registered_object(registered or name)):
            continue
        if module.split(".")[0] == "albert_tf" and registered.startswith("albert_tf>") \
                and keras.saving.get_registered_object(registered) is not None:
            continue
        raise CheckpointError(
            f"{path} names the class {name!r} of "
            + (f"module {module!r}" if module else "no module")
            + ", which is neither Keras's nor albert_tf's: it is not loaded (nothing of the "
            "file was run). Load only .keras files saved from albert_tf models.")
    top = str(config.get("class_name")) if isinstance(config, dict) else type(config).__name__
    if not (isinstance(config, dict) and top in ours and top not in _NOT_MODELS
            and str(config.get("registered_name") or "").startswith("albert_tf>")):
        raise CheckpointError(
            f"{path} holds a Keras {top}, not an ALBERT model: a .keras source is a saved "
            "AlbertTextClassifier or AlbertTextTagger (clf.save(\"model.keras\")) or an "
            f"ALBERT model ({', '.join(sorted(ours - _NOT_MODELS - _TEXT_MODELS))}).")
    return config


# albert_tf's exports that are not a model a `.keras` source may hold, and its text models.
_NOT_MODELS = frozenset({"AlbertConfig", "AlbertTextPreprocessor", "load_pretrained", "PRESETS",
                         "SHARING_MODES"})
_TEXT_MODELS = frozenset({"AlbertTextClassifier", "AlbertTextTagger"})


def _keras_objects(config):
    """Every serialized object (a dict with "class_name") in a `.keras` config."""
    if isinstance(config, dict):
        if "class_name" in config:
            yield config
        for value in config.values():
            yield from _keras_objects(value)
    elif isinstance(config, list):
        for value in config:
            yield from _keras_objects(value)
