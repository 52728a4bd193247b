"""Conversion between formats and `--init_checkpoint`: which reader, which writer, what is
reported. The formats themselves live in `tf1`, `hf` and `ours`."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import warnings

import numpy as np
import tensorflow as tf

from albert_tf.checkpoints.common import (MODEL_KINDS, CheckpointError, assign_strict, build_model,
                                          reading_checkpoint)
from albert_tf.checkpoints.hf import (HF_FILES, config_from_hf, hf_architectures, hf_kind,
                                      load_hf_state_dict, read_hf_folder, write_hf_folder)
from albert_tf.checkpoints.names import model_kind, model_weights
from albert_tf.checkpoints.runs import (checkpoint_prefix, is_training_output_dir,
                                       recorded_run_casing, run_model_kind,
                                       split_run_checkpoint, training_run)
from albert_tf.checkpoints.ours import (CONFIG_FILE, FORMAT_FILE, TF1_FILES, find_sentencepiece,
                                        keras_file_config, load_pretrained, save_albert_tf,
                                        write_replacing)
from albert_tf.checkpoints.tf1 import (TF1_CHECKPOINT_NAME, TF1Checkpoint,
                                       key_of_with_group0_fallback, load_tf1_checkpoint,
                                       official_config, resolve_tf1_checkpoint,
                                       write_tf1_checkpoint)
from albert_tf.config import AlbertConfig
from albert_tf.models.kinds import as_kind
from albert_tf.ownership import OutputLock
from albert_tf.tokenization import (DIGIT_COMMA_FORMS, Tokenizer, check_vocabulary_digest,
                                    digit_comma_form, with_digit_comma_form)


def initialize_from_checkpoint(model, path: str, init_from_group0: bool = False) -> dict:
    """`--init_checkpoint` of a whole model (pretraining: BERT's phase 2 continues from a run):
    fills `model` strictly, matching weights by official name, from any source `--help` lists:
    an official TF1 checkpoint or TF-Hub module, a Hugging Face folder, our model directory or
    `.keras` file, or a pretraining `--output_dir` (`DIR:best` for its best checkpoint). A
    source without one of the model's weights (a backbone without the pretraining heads) is an
    error naming them (`assign_strict`)."""
    path, which = _path_and_checkpoint(path)
    if tfhub_part(path):
        raise CheckpointError(f"{path} is a TF Hub SavedModel of ours: it holds the backbone "
                              "only (encoder) or no weights (preprocess); fine-tuning reads the "
                              "encoder, a whole-model --init_checkpoint needs a checkpoint with "
                              "the heads.")
    if path.endswith(".keras") or os.path.exists(os.path.join(path, FORMAT_FILE)):
        source = load_pretrained(path)
    elif os.path.exists(os.path.join(path, "config.json")):
        _, state, weights_file = read_hf_folder(path)
        return dict(load_hf_state_dict(model, state, weights_file),
                    source={"type": "hf", "path": weights_file})
    elif is_training_output_dir(path):
        source, _ = read_training_checkpoint(path, which)
    else:
        return load_tf1_checkpoint(model, path, init_from_group0=init_from_group0)
    arrays = _arrays_by_official_name(source)
    key_of = key_of_with_group0_fallback(arrays.keys(), init_from_group0)
    return assign_strict(model, arrays.keys(), arrays.__getitem__, key_of,
                         lambda name: None, path)


def _path_and_checkpoint(path) -> tuple[str, str]:
    """(path, checkpoint) of an `--init_checkpoint` value: `DIR:best` is a run's best
    checkpoint, `RUN/ckpt-N` one checkpoint of a run, anything else "latest" of `path`."""
    path = check_path(path)
    which = "latest"
    if path.endswith(":best"):
        path, which = path[: -len(":best")], "best"
    one_checkpoint = split_run_checkpoint(path)
    if one_checkpoint:
        path, which = one_checkpoint
    return path, which


def _arrays_by_official_name(model) -> dict:
    return {w.official_name: w.to_official(w.variable.numpy()) for w in model_weights(model)}


def read_training_checkpoint(output_dir: str, checkpoint: str = "latest"):
    """The model of a training `--output_dir` (its `albert_config.json`, the model kind its
    `train_settings.json` records, a pretrainer for runs that record none, and a checkpoint:
    "latest", "best" or a prefix), and the checkpoint prefix read. Only the model is read (not
    the optimizer); a checkpoint without one of its weights is an error naming them."""
    config_path = os.path.join(output_dir, CONFIG_FILE)
    config = AlbertConfig.from_json_file(config_path)
    prefix = checkpoint_prefix(output_dir, checkpoint)
    kind, num_labels = run_model_kind(output_dir)
    model = build_model(kind, config, num_labels)
    with reading_checkpoint(prefix):  # a damaged file is named
        status = tf.train.Checkpoint(model=model).read(prefix)
    status.expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        paths = re.findall(r"path=([^,\s]+)", str(e)) or [str(e).splitlines()[0][:200]]
        raise CheckpointError(
            f"{prefix} does not hold a {kind} of {config_path}: it has no value for "
            f"{', '.join(paths[:4])}{' ...' if len(paths) > 4 else ''}. A run of an earlier "
            "version records no model kind and is read as pretraining's: export a "
            "fine-tuning run with its runner's --export_dir.") from None
    return model, prefix


TFHUB_RECORD = "albert_tfhub.json"  # in assets.extra/ of the TF Hub pair `export_tfhub` writes


def tfhub_part(path: str) -> str | None:
    """"encoder" or "preprocess" for a SavedModel of our TF Hub pair (`albert_tf.export.tfhub`),
    else None."""
    record = os.path.join(os.fspath(path), "assets.extra", TFHUB_RECORD)
    if not os.path.isfile(record):
        return None
    with open(record, encoding="utf-8") as f:
        return json.load(f).get("part")


def _read_tfhub_encoder(backbone, path: str) -> dict:
    """Fills `backbone` from our TF2 TF-Hub encoder (`albert_tf.export.tfhub.HubEncoder`: the
    backbone's variables, in order, as the SavedModel's `variables` list), strictly: the same config
    (its record's), every variable's shape, or nothing is assigned."""
    with open(os.path.join(path, "assets.extra", TFHUB_RECORD), encoding="utf-8") as f:
        record = json.load(f)
    want = {k: v for k, v in backbone.config.to_dict().items() if k not in _NOT_ARCHITECTURE}
    have = {k: v for k, v in record["config"].items() if k not in _NOT_ARCHITECTURE}
    if want != have:
        changed = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
        raise CheckpointError(f"{path} is an encoder of another architecture: "
                              + ", ".join(f"{k} {have.get(k)} there, {want.get(k)} here"
                                          for k in changed))
    variables = [getattr(v, "value", v) for v in backbone.variables]
    prefix = os.path.join(path, "variables", "variables")
    with reading_checkpoint(prefix):
        reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    keys = [f"variables/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(len(variables))]
    bad = [(k, v) for k, v in zip(keys, variables)
           if k not in shapes or list(shapes[k]) != v.shape.as_list()]
    if bad or f"variables/{len(variables)}/.ATTRIBUTES/VARIABLE_VALUE" in shapes:
        raise CheckpointError(f"{path}: its variables are not this backbone's ({len(variables)} "
                              f"expected; first mismatch: {bad[0][1].name if bad else 'count'})"
                              ". It was exported by another albert_tf version; convert it with "
                              "that version.")
    with reading_checkpoint(prefix):
        values = [reader.get_tensor(k) for k in keys]
    for variable, value in zip(variables, values):
        variable.assign(value)
    return {"assigned": [w.official_name for w in model_weights(backbone)], "skipped": {},
            "source": {"type": "tfhub_encoder", "path": path}}


def initialize_backbone(backbone, path: str, init_from_group0: bool = False) -> dict:
    """Fine-tuning initialisation: fills `backbone` (an `AlbertBackbone`, e.g. a classifier's
    `.backbone`) strictly from any source the project reads, dropping the source's heads and
    reporting them:

    - an official TF1 checkpoint or TF-Hub module (prefix, `.index` file or directory);
    - a Hugging Face `save_pretrained` folder;
    - our model directory or a `.keras` file;
    - a pretraining `--output_dir` (its latest checkpoint; `DIR:best` for the best one);
    - the encoder SavedModel of our TF Hub pair (`albert_tf.export.tfhub`).

    Every backbone weight must be found with its shape (or nothing is assigned); returns
    {"assigned": [official names], "skipped": {source entry: reason}, "source": what was
    read}."""
    path, which = _path_and_checkpoint(path)
    if tfhub_part(path) == "encoder":
        return _read_tfhub_encoder(backbone, path)
    if path.endswith(".keras") or os.path.exists(os.path.join(path, FORMAT_FILE)):
        source = load_pretrained(path)
        what = {"type": "albert_tf", "path": path}
    elif os.path.exists(os.path.join(path, "config.json")):
        config, state, weights_file = read_hf_folder(path)
        report = load_hf_state_dict(backbone, state, weights_file)
        report["source"] = {"type": "hf", "path": weights_file}
        return report
    elif is_training_output_dir(path):
        source, prefix = read_training_checkpoint(path, which)
        what = {"type": "pretraining_output_dir", "path": prefix}
    else:
        report = load_tf1_checkpoint(backbone, path, init_from_group0=init_from_group0)
        report["source"] = {"type": "tf1", "path": TF1Checkpoint(path).prefix}
        return report
    arrays = _arrays_by_official_name(source)
    ours = {w.official_name for w in model_weights(backbone)}
    key_of = key_of_with_group0_fallback(arrays.keys(), init_from_group0)
    report = assign_strict(backbone, arrays.keys(), arrays.__getitem__, key_of,
                           lambda name: None if name in ours else
                           f"{model_kind(source)} head, not part of the backbone", path)
    report["source"] = what
    return report


# What a config may change without making another model of the same weights.
_NOT_ARCHITECTURE = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")


def carried_config(path: str) -> tuple[AlbertConfig, str] | None:
    """(config, where) of the config an `--init_checkpoint` source carries: a training run's or
    our directory's `albert_config.json`, a Hugging Face folder's `config.json`, a `.keras`
    file's own, the `albert_config.json` beside a TF1 checkpoint or in a TF-Hub module (also
    under assets/); None if it carries none."""
    path = check_path(path).removesuffix(":best")
    run = split_run_checkpoint(path)
    path = run[0] if run else path
    if path.endswith(".keras"):
        return (load_pretrained(path, backbone_only=True).config, path) \
            if os.path.isfile(path) else None
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    for candidate in (os.path.join(directory, CONFIG_FILE),
                      os.path.join(directory, "assets", CONFIG_FILE)):
        if os.path.isfile(candidate):
            return AlbertConfig.from_json_file(candidate), candidate
    hf_config = os.path.join(directory, "config.json")
    if os.path.isfile(hf_config):
        with open(hf_config, encoding="utf-8") as f:
            return config_from_hf(json.load(f), hf_config), hf_config
    return None


def checkpoint_config(path: str, albert_config_file: str | None = None) -> AlbertConfig:
    """The model config of an `--init_checkpoint` source: `albert_config_file` when given (as
    the official commands take it), else the one the source carries (`carried_config`). A
    given config whose architecture differs from the carried one is used, with a warning that
    names the keys: with shared weights (ALBERT) every shape can still fit, so another
    `num_hidden_layers` would otherwise build another model silently."""
    carried = carried_config(path)
    if albert_config_file:
        config = AlbertConfig.from_json_file(albert_config_file)
        if carried is not None:
            ours, theirs = config.to_dict(), carried[0].to_dict()
            differ = [f"{k}: {ours.get(k)} (given) vs {theirs.get(k)}"
                      for k in sorted(set(ours) | set(theirs))
                      if k not in _NOT_ARCHITECTURE and ours.get(k) != theirs.get(k)]
            if differ:
                warnings.warn(f"{albert_config_file} differs from the config the checkpoint "
                              f"carries ({carried[1]}) on {'; '.join(differ)}: the model is "
                              f"built from {albert_config_file}.", stacklevel=2)
        return config
    if carried is None:
        raise CheckpointError(f"No model config found with {path} (looked for {CONFIG_FILE} "
                              "and config.json beside it and in assets/); pass "
                              "--albert_config_file (albert_config_file=).")
    return carried[0]


def check_path(path: str) -> str:
    """`path` (a `DIR:best` suffix aside) as given, or CheckpointError "no such path: PATH"
    where nothing is there (a TF1 prefix is there when its `.index` is), or where it is an
    exported SavedModel (`refuse_saved_model`)."""
    path = os.fspath(path)
    plain = path.removesuffix(":best")
    if "://" in plain or os.path.exists(plain) or tf.io.gfile.exists(plain + ".index"):
        refuse_saved_model(plain)
        return path
    raise CheckpointError(f"no such path: {plain}")


# What `albert_tf.export.saved_model` writes into a version's assets.extra/ (its EXPORT_RECORD): the
# model and where it came from.
EXPORT_RECORD = "albert_export.json"


def refuse_saved_model(path: str) -> None:
    """CheckpointError where `path` is a SavedModel for serving (one of our exports,
    BASE/NAME/N or BASE/NAME, or another TF2 SavedModel) given where a checkpoint is read
    (`--init_checkpoint`, convert, the exports): it holds a serving graph, not the weights by
    name, and was read as a TF1 checkpoint, a 5 KB list of missing weights. The message names
    the run or checkpoint its export record says it came from. Our TF Hub pair
    (`tfhub_part`) and official TF1 Hub modules (tfhub_module.pb) are read as they are."""
    if not os.path.isdir(path) or tfhub_part(path) or is_training_output_dir(path) \
            or any(os.path.exists(os.path.join(path, name))
                   for name in ("tfhub_module.pb", FORMAT_FILE, "config.json")):
        return  # read as what it is (a run whose --export_dir is inside it, too)
    versions = sorted((int(name), os.path.join(path, name)) for name in os.listdir(path)
                      if name.isdigit()
                      and os.path.exists(os.path.join(path, name, "saved_model.pb")))
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        version = path
    elif versions:
        version = versions[-1][1]
    else:
        return
    origin = None
    try:
        with open(os.path.join(version, "assets.extra", EXPORT_RECORD), encoding="utf-8") as f:
            source = json.load(f).get("source") or {}
        if source.get("output_dir"):  # a runner's --export_dir
            origin = source["output_dir"] + (":best" if source.get("which") == "best" else "")
        elif source.get("checkpoint") or source.get("path"):  # export_saved_model --model_dir
            origin = source.get("checkpoint") or source["path"]
            origin = os.path.dirname(origin) if source.get("type") == "hf" else origin
    except (OSError, ValueError, AttributeError):
        pass
    where = (f" ({origin}, as its assets.extra/{EXPORT_RECORD} records)" if origin else
             " (or the checkpoint it was exported from)")
    raise CheckpointError(f"{path} is an exported SavedModel, not a checkpoint: pass the run "
                          f"directory it was exported from{where}.")


def source_format(path: str) -> str:
    """The format of a source, from what is there: "albert_tf" (our directory, a `.keras`
    file, a training run's --output_dir or one of its checkpoints, `DIR:best`), "hf" (a
    folder with config.json) or "tf1" (an official checkpoint or TF-Hub module)."""
    path = check_path(path)
    if path.endswith(".keras") or os.path.exists(os.path.join(path, FORMAT_FILE)) \
            or training_run(path):
        return "albert_tf"
    if os.path.exists(os.path.join(path, "config.json")):
        return "hf"
    try:
        resolve_tf1_checkpoint(path)
    except CheckpointError as e:
        raise CheckpointError(
            f"{path} is neither an albert_tf model directory (no {FORMAT_FILE}), a .keras "
            f"file, a training run's --output_dir ({CONFIG_FILE} and ckpt-N), a Hugging Face "
            f"folder (config.json) nor an official TF1 checkpoint ({e})") from None
    return "tf1"


@dataclasses.dataclass
class Source:
    """A model read from any saved form (`read_source`) and what travels with it: the
    tokenizer (SentencePiece model, or a WordPiece vocabulary), the class or tag names, the
    text settings a `.keras` model recorded; `record` says what was read, `report` which
    weights were assigned and which entries skipped."""

    model: object
    spm_model_file: str | None
    record: dict
    report: dict
    labels: list | None = None
    vocab_file: str | None = None
    do_lower_case: bool | None = None
    max_seq_length: int | None = None


def keras_settings(path: str) -> dict:
    """What a `.keras` file of `AlbertTextClassifier` / `AlbertTextTagger` records beside the
    model: its preprocessor's vocabulary paths and settings, its labels (none for a bare
    ALBERT model)."""
    config = keras_file_config(path).get("config", {})
    pre = (config.get("preprocessor") or {}).get("config", {})
    return {"spm_model_file": pre.get("spm_model_file"), "vocab_file": pre.get("vocab_file"),
            "do_lower_case": pre.get("do_lower_case"),
            "vocabulary_sha256": pre.get("vocabulary_sha256"),
            "max_seq_length": pre.get("sequence_length"), "labels": config.get("labels")}


def recorded_labels(directory: str) -> tuple:
    """(labels, the file that records them) of the class or tag names a run (labels.json),
    our directory (albert_tf.json "labels") or a Hugging Face folder (config.json's id2label,
    unless HF's default LABEL_i) records, else (None, None)."""
    for name, key in (("labels.json", None), (FORMAT_FILE, "labels")):
        file = os.path.join(directory, name)
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as f:
                value = json.load(f)
            value = value.get(key) if key and isinstance(value, dict) else value
            if isinstance(value, list) and value:
                return value, file
    hf_config = os.path.join(directory, "config.json")
    if os.path.isfile(hf_config):  # a Hugging Face folder's id2label, unless HF's LABEL_i
        with open(hf_config, encoding="utf-8") as f:
            id2label = json.load(f).get("id2label") or {}
        names = [id2label.get(str(i)) for i in range(len(id2label))]
        if names and all(names) and names != [f"LABEL_{i}" for i in range(len(names))]:
            return names, hf_config
    return None, None


def carried_tokenizer(path: str, check: bool = True) -> dict:
    """{"spm_model_file", "vocab_file", "do_lower_case"} a source carries (None where it
    carries none): the SentencePiece model a `.keras` model recorded (its path, refused where
    the file there is not the one it was saved with: `check_vocabulary_digest`), our
    directory's or a run's copy, the `.model` beside a TF1 checkpoint or in a TF-Hub module's
    assets/, a Hugging Face folder's spiece.model; and the casing it records
    (`recorded_casing`: None for an official TF1 checkpoint, which records none; its readers
    take True, as the official code). `check=False`: a `.keras` model's paths as recorded,
    not checked (for a caller given its own vocabulary, which takes the casing only)."""
    path = check_path(path)
    if path.endswith(".keras"):
        settings = keras_settings(path)
        for key in ("spm_model_file", "vocab_file") if check else ():
            if settings[key] and not os.path.exists(settings[key]):
                raise CheckpointError(f"{path} tokenizes with {key}={settings[key]!r}, which is "
                                      f"gone (a .keras file records the path, not the file): "
                                      "put it back there or pass --spm_model_file.")
        try:
            if check:
                check_vocabulary_digest(
                    settings["spm_model_file"] or settings["vocab_file"] or "",
                    settings["vocabulary_sha256"], path)
        except ValueError as e:
            raise CheckpointError(str(e)) from None
        return {k: settings[k] for k in ("spm_model_file", "vocab_file", "do_lower_case")}
    run = training_run(path)
    directory = run[0] if run else path if os.path.isdir(path) else os.path.dirname(path)
    if os.path.basename(directory) == "variables":  # a TF-Hub module's variables/variables
        directory = os.path.dirname(directory)
    spm = find_sentencepiece(directory) or find_sentencepiece(os.path.join(directory, "assets"))
    return {"spm_model_file": spm, "vocab_file": None,
            "do_lower_case": recorded_casing(directory)}


def recorded_casing(directory: str) -> bool | None:
    """The `do_lower_case` a source directory records, else None: our directory's
    albert_tf.json, a training run's config.yaml (the run's --do_lower_case), a Hugging Face
    folder's tokenizer_config.json, our TF Hub module's assets.extra record."""
    for name in (FORMAT_FILE, "tokenizer_config.json",
                 os.path.join("assets.extra", TFHUB_RECORD)):
        file = os.path.join(directory, name)
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as f:
                value = json.load(f)
            if isinstance(value, dict) and isinstance(value.get("do_lower_case"), bool):
                return value["do_lower_case"]
    return recorded_run_casing(directory)


def read_source(path: str, source: str = "auto", albert_config_file: str | None = None,
                kind: str = "auto", checkpoint: str | None = None) -> Source:
    """The model of any saved form, with what travels with it (`Source`): the one reader of
    `convert`, the exports and the Python API. `path`: a `.keras` file of
    `AlbertTextClassifier` / `AlbertTextTagger` (or of an ALBERT model), a training run's
    --output_dir (the run's model, `delivered_checkpoint`), `DIR:best`, `RUN/ckpt-N`, our model
    directory, an official TF1 checkpoint or TF-Hub module, or a Hugging Face folder.
    `source`: "auto" (from what is there, `source_format`) or the format it must be;
    `kind`: the model to build ("auto": the one stored); `checkpoint`: of a run, "latest",
    "best" or a prefix (default: as `_training_run`)."""
    path = check_path(path)
    found = source_format(path)
    source = found if source == "auto" else source
    if found == "albert_tf" and training_run(path) and source != "albert_tf":
        raise CheckpointError(f"{path} is a training run's --output_dir (or one of its "
                              f"checkpoints), not a {source} checkpoint: convert it with "
                              "--source albert_tf.")
    if kind not in ("auto",) + MODEL_KINDS:
        raise CheckpointError(f"Unknown model kind {kind!r}; choose auto or one of {MODEL_KINDS}.")
    if source not in ("tf1", "hf", "albert_tf"):
        raise CheckpointError(f"Unknown source {source!r}; choose auto, tf1, hf or albert_tf.")
    model, record, report = _read_model(source, path, albert_config_file, kind, checkpoint)
    tokenizer = carried_tokenizer(path)
    settings = keras_settings(path) if path.endswith(".keras") else {}
    run = training_run(path)
    directory = run[0] if run else path if os.path.isdir(path) else None
    labels = settings.get("labels") or (recorded_labels(directory)[0] if directory else None)
    if labels is None and isinstance(getattr(model, "labels", None), list):
        labels = model.labels
    record["skipped"] = report["skipped"]
    return Source(model, tokenizer["spm_model_file"], record, report, labels=labels,
                  vocab_file=tokenizer["vocab_file"], do_lower_case=tokenizer["do_lower_case"],
                  max_seq_length=settings.get("max_seq_length"))


def _read_model(source: str, input_path: str, albert_config_file: str | None, kind: str,
                checkpoint: str | None):
    """(model with weights, source record, report) of `read_source`."""
    run = training_run(input_path)
    if source == "tf1":
        tf1 = TF1Checkpoint(input_path)
        directory = os.path.dirname(tf1.prefix)
        if tf1.prefix.endswith(os.path.join("variables", "variables")):
            directory = os.path.dirname(directory)  # TF-Hub module: <module>/variables/variables
        config_path = albert_config_file or os.path.join(directory, CONFIG_FILE)
        if not os.path.exists(config_path):
            config_path = os.path.join(directory, "assets", CONFIG_FILE)
        if not os.path.exists(config_path):
            raise CheckpointError(
                f"No albert_config.json beside {tf1.prefix}; pass --albert_config_file.")
        config = AlbertConfig.from_json_file(config_path)
        kind = tf1.kind() if kind == "auto" else kind
        model = build_model(kind, config, tf1.num_labels())
        report = load_tf1_checkpoint(model, tf1)
        record = {"type": "tf1", "path": tf1.prefix, "hub_module": tf1.hub_module,
                  "albert_config_file": config_path}
    elif source == "hf":
        config, state, weights_file = read_hf_folder(input_path)
        if albert_config_file:
            config = AlbertConfig.from_json_file(albert_config_file)
        kind = hf_kind(state, hf_architectures(input_path)) if kind == "auto" else kind
        num_labels = np.shape(state["classifier.weight"])[0] if "classifier.weight" in state \
            else None
        model = build_model(kind, config, num_labels)
        report = load_hf_state_dict(model, state, weights_file)
        record = {"type": "hf", "path": weights_file}
    elif run is not None:  # the model the run trains
        which = checkpoint if checkpoint and os.path.isdir(input_path) else run[1]
        stored, prefix = read_training_checkpoint(run[0], which)
        model = stored if kind == "auto" else as_kind(stored, kind)
        report = _read_as_report(stored, model)
        record = {"type": "albert_tf_run", "path": os.path.abspath(prefix),
                  "checkpoint": os.path.abspath(prefix)}
    else:
        stored = load_pretrained(input_path)
        model = stored if kind == "auto" else as_kind(stored, kind)
        report = _read_as_report(stored, model)
        record = {"type": "albert_tf", "path": os.path.abspath(input_path)}
    return model, record, report


def _read_as_report(stored, model) -> dict:
    """The report of our `stored` model read as `model` (itself, or its backbone with
    `--model backbone`): every weight of `model` assigned, the heads it leaves skipped."""
    kept = {w.official_name for w in model_weights(model)}
    return {"assigned": sorted(kept), "skipped": {
        w.official_name: f"{model_kind(stored)} head, not part of the backbone"
        for w in model_weights(stored) if w.official_name not in kept}}


def convert(source: str, input_path: str, output_dir: str, target: str = "albert_tf",
            albert_config_file: str | None = None, model: str = "auto",
            overwrite: bool = False, do_lower_case: bool | None = None,
            spm_model_file: str | None = None, digit_comma: str | None = None) -> dict:
    """Converts a checkpoint between formats (`source` "auto": from what is there). Returns a
    summary dict (model kind, counts, skipped entries, output path, casing). The tokenizer
    travels into every target: the source's (`read_source`), or `spm_model_file` where given
    (refused unless it has the model's vocab_size pieces); its casing `do_lower_case`
    (default the source's, `carried_tokenizer`, else True) is recorded by our directory
    (albert_tf.json) and a Hugging Face folder (tokenizer_config.json; `write_hf_folder`).
    `--overwrite` replaces an earlier conversion at `output_dir` whole (`write_replacing`);
    an output that is the input, inside it or holding it is refused before anything is
    read. The conversion holds the lock of `output_dir` (`.NAME.lock` beside it,
    `albert_tf.ownership`) from before it reads: a second conversion into the same output
    while this one runs is refused, naming this one, instead of both reporting success with
    one model gone. `digit_comma` ("official" or "huggingface", `DIGIT_COMMA_FORMS`): the
    form of the digit-comma re-split the written vocabulary records (default: the one the
    source's records; a model fine-tuned with Hugging Face's `AlbertTokenizer` was trained on
    "huggingface")."""
    _check_not_into_itself(input_path, output_dir)
    if digit_comma is not None and digit_comma not in DIGIT_COMMA_FORMS:
        raise CheckpointError(f"Unknown digit_comma {digit_comma!r}; choose "
                              f"{' or '.join(DIGIT_COMMA_FORMS)}.")
    if target not in ("albert_tf", "tf1", "hf"):
        raise CheckpointError(f"Unknown target {target!r}; choose albert_tf, tf1 or hf.")
    with OutputLock(output_dir, "--output", is_dir=False):
        with tempfile.TemporaryDirectory() as scratch:
            return _convert(source, input_path, output_dir, target, albert_config_file, model,
                            overwrite, do_lower_case, spm_model_file, digit_comma, scratch)


def _convert(source, input_path, output_dir, target, albert_config_file, model, overwrite,
             do_lower_case, spm_model_file, digit_comma, scratch) -> dict:
    """`convert` under the output's lock (`scratch`: a directory for a re-marked vocabulary)."""
    read = read_source(input_path, source, albert_config_file, model)
    keras_model, record, report = read.model, read.record, read.report
    spm = spm_model_file or read.spm_model_file
    if spm and not os.path.isfile(spm):
        raise CheckpointError(
            f"{spm} (--spm_model_file) is not a file: give the SentencePiece model's .model "
            "file" if os.path.exists(spm) else f"no such path: {spm} (--spm_model_file)")
    if spm_model_file:
        pieces = Tokenizer(spm_model_file).vocab_size
        if pieces != keras_model.config.vocab_size:
            raise CheckpointError(
                f"--spm_model_file {spm_model_file} has {pieces} pieces but the model's "
                f"vocab_size is {keras_model.config.vocab_size}: pass the SentencePiece model "
                "it was trained with. Nothing was written.")
    if do_lower_case is None:
        do_lower_case = True if read.do_lower_case is None else read.do_lower_case
    form = None
    if spm:
        with open(spm, "rb") as f:
            proto = f.read()
        form = digit_comma or digit_comma_form(proto, spm)
        marked = with_digit_comma_form(proto, form)  # the vocabulary, recording `form`
        if marked != proto:
            spm = os.path.join(scratch, os.path.basename(spm))
            with open(spm, "wb") as f:
                f.write(marked)
    elif digit_comma is not None:
        raise CheckpointError(f"--digit_comma {digit_comma} is recorded in the vocabulary, and "
                              f"{input_path} carries none: pass --spm_model_file.")
    if target == "albert_tf":
        written = save_albert_tf(keras_model, output_dir, spm, record, overwrite=overwrite,
                                 labels=read.labels, do_lower_case=do_lower_case)
    elif target == "tf1":
        config = official_config(keras_model.config)  # refuses what official code cannot read

        def write(directory):
            write_tf1_checkpoint(keras_model, directory)
            config.to_json_file(os.path.join(directory, CONFIG_FILE))
            if spm:
                shutil.copy(spm, directory)

        directory = write_replacing(output_dir, overwrite, TF1_FILES, write)
        written = os.path.join(directory, TF1_CHECKPOINT_NAME)
    else:
        written = write_replacing(
            output_dir, overwrite, HF_FILES,
            lambda directory: write_hf_folder(keras_model, directory, spm,
                                              do_lower_case=do_lower_case, labels=read.labels))
    notes = []
    if target == "hf" and spm and Tokenizer(spm).resplit_table is not None:
        notes.append(
            f"the vocabulary has pieces ending in digit + comma, which transformers' fast "
            f"tokenizer (tokenizer.json, AutoTokenizer's default) never re-splits: text "
            f"reaching one gets other ids there. AlbertTokenizer (use_fast=False) re-splits "
            f"them in the Hugging Face form, which equals ours where the vocabulary records "
            f"it (this one records {form}; --digit_comma huggingface).")
    return {"model": model_kind(keras_model),
            "read": read.record.get("checkpoint") or read.record.get("path"),
            "weights": len(report["assigned"]), "notes": notes,
            "parameters": keras_model.count_params(), "skipped": report["skipped"],
            "sentencepiece_model": spm_model_file or read.spm_model_file,
            "digit_comma": form, "do_lower_case": do_lower_case, "labels": read.labels,
            "output": written}


def _check_not_into_itself(input_path: str, output_dir: str) -> None:
    """CheckpointError where `output_dir` is the input's directory (a folder source's, or the
    one holding a file source), inside a folder source, or holds the input: the conversion
    would write over (or `--overwrite` delete) what it reads."""
    plain = os.fspath(input_path).removesuffix(":best")
    folder = os.path.isdir(plain)  # a file (.keras, TF1 prefix): its directory may hold others
    source = plain if folder else os.path.dirname(os.path.abspath(plain))
    source, output = os.path.realpath(source), os.path.realpath(output_dir)
    if output == source:
        where = "is"
    elif folder and output.startswith(source + os.sep):
        where = "is inside"
    elif source.startswith(output + os.sep):
        where = "holds"
    else:
        return
    raise CheckpointError(
        f"--output {output_dir} {where} the input's directory ({source}): a conversion never "
        "writes where it reads. Choose an --output outside it. Nothing was written.")
