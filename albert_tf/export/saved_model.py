"""Exporting ALBERT models as SavedModels in TensorFlow Serving's layout.

    BASE/NAME/
        1/                      a version: saved_model.pb, variables/, assets/,
          assets.extra/tf_serving_warmup_requests      one PredictionLog per signature
        2/ ...
        models.config           model_config_list for --model_config_file
        batching_parameters.txt for --enable_batching --batching_parameters_file

A version is written under a hidden temporary name and renamed when complete (TF Serving only
watches numeric names, so it never sees half a version); an existing version is never replaced.

Sources (`load_for_export`): one of our exports, or any saved form `read_source` reads (a
`.keras` file of `AlbertTextClassifier` / `AlbertTextTagger`, a training `--output_dir`, its
`best/`, our model directory, an official TF1 checkpoint, a Hugging Face folder), each with the
SentencePiece model and labels it carries unless they are given.

Whatever the source's strategy or dtype policy, the exported model is a fresh float32 host copy
(`host_copy`): variables created under TPUStrategy or MirroredStrategy are read once and
assigned to a plain model, so the SavedModel serves on a CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from albert_tf.export.ops_check import check_saved_model_ops, load_allowed_ops
from albert_tf.export.registry import serving_module
from albert_tf.export.serving import (WARMUP_TEXTS, AlbertServingModule,  # noqa: F401
                            signature_method_names)
from albert_tf.paths import atomic_write
from albert_tf.checkpoints import CheckpointError, build_model, model_kind, model_weights
from albert_tf.checkpoints.conversion import read_source
from albert_tf.checkpoints.runs import delivered_checkpoint, is_training_output_dir
from albert_tf.config import AlbertConfig
from albert_tf.commands.flags import FLAGS
from albert_tf.ownership import OutputLock, current_umask
from albert_tf.tokenization import Tokenizer, make_tokenizer

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MODELS_CONFIG = "models.config"
BATCHING_CONFIG = "batching_parameters.txt"
EXPORT_RECORD = "albert_export.json"


class ExportError(ValueError):
    """A model cannot be exported as asked; the message names what to change."""


# ---------------------------------------------------------------------------------------------
# Sources.
def load_for_export(path: str, checkpoint: str | None = None, spm_model_file: str | None = None,
                    vocab_file: str | None = None):
    """(model, SentencePiece model path, source record) for any model the project produces.

    Args:
        path: one of our SavedModel exports (BASE/NAME or BASE/NAME/N), or any saved form
            `albert_tf.checkpoints.conversion.read_source` reads: a `.keras` file of
            `AlbertTextClassifier` / `AlbertTextTagger`, a training run's --output_dir
            (`DIR:best`, `RUN/ckpt-N`), our model directory, an official TF1 checkpoint or
            TF-Hub module, a Hugging Face folder; its labels and vocabulary travel with it.
        checkpoint: for a training run's --output_dir: "latest", "best", or a prefix; None:
            the run's model (`albert_tf.checkpoints.runs.delivered_checkpoint`: a fine-tuning
            run's best evaluated checkpoint, else its latest; a pretraining run's latest).
        spm_model_file: the SentencePiece model; default: the one found beside the source.
        vocab_file: without `spm_model_file`, a WordPiece vocabulary: no SentencePiece model is
            looked for, and the path returned is None (`export_saved_model(...,
            vocab_file=...)` tokenizes with it).
    """
    if vocab_file and not spm_model_file:
        model, _, record = _load_model_for_export(path, checkpoint, "")
        return model, None, record
    return _load_model_for_export(path, checkpoint, spm_model_file)


def _load_model_for_export(path: str, checkpoint: str, spm_model_file: str | None):
    """`load_for_export`; `spm_model_file` "": no SentencePiece model wanted."""
    path = os.fspath(path)
    record = {"path": os.path.abspath(path)}
    labels = None
    version = exported_version(path)
    if version:
        model, stored = load_exported(version)
        record.update(type="saved_model", version_dir=version, labels=stored.get("labels"),
                      max_seq_length=stored.get("max_seq_length"),
                      text_pair=stored.get("text_pair", False))
        if spm_model_file == "":
            return model, None, record
        spm_model_file = spm_model_file or sentencepiece_of_export(version)
        if not os.path.exists(spm_model_file):
            raise ExportError(f"SentencePiece model not found: {spm_model_file}")
        return model, spm_model_file, record
    if checkpoint is None and os.path.isdir(path) and is_training_output_dir(path):
        checkpoint = delivered_checkpoint(path)  # the run's model, as its runner exports it
    try:
        read = read_source(path, checkpoint=checkpoint)
    except CheckpointError as e:
        hint = " Use --checkpoint latest." if checkpoint == "best" else ""
        raise ExportError(f"{e}{hint}") from None
    model, labels = read.model, read.labels
    record.update(read.record, max_seq_length=read.max_seq_length,
                  do_lower_case=read.do_lower_case)
    found = read.spm_model_file
    record["labels"] = labels
    if spm_model_file == "":
        return model, None, record
    spm_model_file = spm_model_file or found
    if not spm_model_file:
        raise ExportError(f"No SentencePiece model beside {path}; pass --spm_model_file (or "
                          "--vocab_file alone for a WordPiece vocabulary).")
    if not os.path.exists(spm_model_file):
        raise ExportError(f"SentencePiece model not found: {spm_model_file}")
    return model, spm_model_file, record


def lower_case(source: dict) -> bool:
    """--do_lower_case of an export command: the flag where given, else what the source
    records (a `.keras` model's preprocessor, an export's), else true."""
    if FLAGS.do_lower_case is not None:
        return FLAGS.do_lower_case
    return source.get("do_lower_case") is not False


def exported_version(path: str) -> str | None:
    """The version directory of one of our SavedModel exports: `path` itself (BASE/NAME/N) or
    the newest version of BASE/NAME; None when `path` is neither."""
    if os.path.exists(os.path.join(path, "assets.extra", EXPORT_RECORD)):
        return path
    versions = [name for name in (os.listdir(path) if os.path.isdir(path) else [])
                if re.fullmatch(r"\d+", name)
                and os.path.exists(os.path.join(path, name, "assets.extra", EXPORT_RECORD))]
    return os.path.join(path, max(versions, key=int)) if versions else None


def sentencepiece_of_export(version_dir: str, directory: str | None = None) -> str:
    """The SentencePiece model an export tokenizes with, read from its graph (the
    SentencepieceOp's `model`; the export keeps no other copy) and written as
    `<directory>/<sha256 prefix>.model` (default: the temporary directory), a path for
    `Tokenizer`. The SavedModel format itself holds it twice, in the graph TF Serving's session
    loads and in the resource function `tf.saved_model.load` calls; both are needed."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    graph = proto.meta_graphs[0].graph_def
    nodes = list(graph.node) + [n for fn in graph.library.function for n in fn.node_def]
    models = {n.attr["model"].s for n in nodes if n.op == "SentencepieceOp"}
    if len(models) != 1:
        raise ExportError(f"{version_dir} holds {len(models)} SentencePiece models, not one; "
                          "pass --spm_model_file.")
    (model_proto,) = models
    digest = hashlib.sha256(model_proto).hexdigest()
    path = os.path.join(directory or tempfile.gettempdir(), f"albert_spm_{digest[:16]}.model")
    if not os.path.exists(path):
        with atomic_write(path, "wb") as f:
            f.write(model_proto)
    return path


def load_exported(version_dir: str):
    """(model, export record) of a SavedModel version written by `export_saved_model`: the
    model rebuilt from the record (kind, config, labels) and its weights read from the
    SavedModel's variables (tracked in the model's own weight order)."""
    import tensorflow_text  # noqa: F401 - the SentencePiece ops of the graph

    with open(os.path.join(version_dir, "assets.extra", EXPORT_RECORD), encoding="utf-8") as f:
        stored = json.load(f)
    with tf.device("/cpu:0"):
        model = build_model(stored["model"], AlbertConfig.from_dict(stored["config"]),
                            stored.get("num_labels"))
    loaded = tf.saved_model.load(version_dir)
    variables = list(getattr(loaded, "model_variables", []))
    if len(variables) != len(model.weights) or any(
            tuple(v.shape) != tuple(w.shape) for v, w in zip(variables, model.weights)):
        raise ExportError(f"{version_dir}'s variables do not match a {stored['model']} of its "
                          f"recorded config ({len(variables)} variables, {len(model.weights)} "
                          "expected); it was not written by this version of export_saved_model.")
    for weight, variable in zip(model.weights, variables):
        weight.assign(variable.numpy())
    return model, stored


def host_copy(model):
    """A float32 model of the same kind and config, built outside any strategy, with `model`'s
    weights (read from replicas or TPU once)."""

    kind = model_kind(model)
    with tf.device("/cpu:0"):
        copy = build_model(kind, model.config, getattr(model, "num_labels", None))
    for name in getattr(model, "SETTINGS", ()):  # a model's settings that are not weights
        setattr(copy, name, getattr(model, name))
    source = model_weights(model)
    target = model_weights(copy)
    for src, dst in zip(source, target):
        if src.official_name != dst.official_name:  # same table, same order
            raise RuntimeError(f"weight order differs: {src.official_name} vs "
                               f"{dst.official_name}")
        dst.variable.assign(np.asarray(src.variable.numpy(), np.float32))
    return copy


# ---------------------------------------------------------------------------------------------
# Versions.
def next_version(export_dir: str) -> int:
    versions = [int(name) for name in (os.listdir(export_dir) if os.path.isdir(export_dir)
                                       else []) if re.fullmatch(r"\d+", name)]
    return max(versions, default=0) + 1


def _set_method_names(version_dir: str, methods: dict) -> None:
    """TF2 writes every signature as a predict signature; TF Serving's Classify and Regress APIs
    need their own method names, so they are set in saved_model.pb after saving, and
    fingerprint.pb (a checksum of saved_model.pb that TF Serving reads) is written again for
    the edited file."""
    if not methods:
        return
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(version_dir, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    for meta_graph in proto.meta_graphs:
        for name, method in methods.items():
            meta_graph.signature_def[name].method_name = method
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    write_fingerprint(version_dir)


def write_fingerprint(version_dir: str) -> None:
    """fingerprint.pb of the SavedModel in `version_dir` as `tf.saved_model.save` writes it
    (TensorFlow's own `CreateFingerprintDef`), for a saved_model.pb edited after saving."""
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting

    with open(os.path.join(version_dir, "fingerprint.pb"), "wb") as f:
        f.write(fingerprinting.CreateFingerprintDef(version_dir))


def _readable_tree(directory: str) -> None:
    """The modes a plain `mkdir` and file write would give under this process's umask, under
    `directory` (itself included): a version is made in a private temporary directory (0700),
    and it must end up as readable as the rest of the model directory (`models.config`
    beside it): 0755/0644 under the usual umask 022, 0700/0600 under 077."""
    umask = current_umask()
    dir_mode, file_mode = 0o777 & ~umask, 0o666 & ~umask
    os.chmod(directory, dir_mode)
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(root, name), dir_mode)
        for name in files:
            os.chmod(os.path.join(root, name), file_mode)


# TF Serving's batching: values measured by `bench.serving_load`; why each is what it is, with the
# figures, in docs/serving.md ("Batching").
BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 2000, "max_enqueued_batches": 16,
            "num_batch_threads": 2}


def batching_parameters(signatures: dict, batching: dict | None = None) -> str:
    """TF Serving's `--batching_parameters_file` for a model with `signatures` ({name: concrete
    function}): `BATCHING` (or `batching`), measured values, and padding derived from the inputs.

    The server concatenates the requests of a batch along dimension 0. A string input of shape
    [batch] (raw text, serialized tf.Examples) concatenates as is and is tokenized or parsed,
    padded and masked in the graph, per batch, so its answers equal the unbatched ones. A token
    input of shape [batch, length] (`serve_tokens`) cannot: with `pad_variable_length_inputs:
    true` the server pads shorter requests with the *first element of each tensor* (a [CLS] id,
    an input_mask of 1), so padding would be attended to as real tokens and the answers change.
    So padding stays off: token requests of different lengths in one batch get the server's
    error ("different shapes and padding is turned off"), never a wrong answer; clients pad
    token requests to one length (`albert_tf.export.client` pads to the model's max_seq_length)."""
    batching = dict(BATCHING, **(batching or {}))
    token_inputs = sorted({name for fn in signatures.values()
                           for name, spec in fn.structured_input_signature[1].items()
                           if spec.shape.rank is not None and spec.shape.rank >= 2})
    lines = [f"{key} {{ value: {batching[key]} }}" for key in (
        "max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads")]
    comment = ["# Derived by albert_tf.export.saved_model.batching_parameters (docs/serving.md, "
               "Batching,",
               "# and Serving under load, where the values are measured).",
               "# String inputs ([batch]) batch as they are; token inputs "
               f"({', '.join(token_inputs) or 'none'}) would be padded with their first",
               "# element (input_mask 1s) and answer wrongly, so padding is off: send token "
               "requests of one length.",
               "# num_batch_threads: set it to the server's CPU cores."]
    return "\n".join(comment + lines + ["pad_variable_length_inputs: false"]) + "\n"


def write_serving_configs(export_dir: str, model_name: str, base_path: str | None = None,
                          signatures: dict | None = None) -> None:
    """`models.config` (model_config_list) and `batching_parameters.txt` (`batching_parameters`
    of the version's `signatures`) beside the versions.

    base_path defaults to `/models/<name>`, where the tensorflow/serving container expects a
    model (docs/serving.md mounts the export there)."""
    base_path = base_path or f"/models/{model_name}"
    with open(os.path.join(export_dir, MODELS_CONFIG), "w", encoding="utf-8") as f:
        f.write("model_config_list {\n  config {\n"
                f'    name: "{model_name}"\n    base_path: "{base_path}"\n'
                '    model_platform: "tensorflow"\n  }\n}\n')
    with open(os.path.join(export_dir, BATCHING_CONFIG), "w", encoding="utf-8") as f:
        f.write(batching_parameters(signatures or {}))


def write_warmup_requests(version_dir: str, model_name: str, requests: dict) -> str:
    """`assets.extra/tf_serving_warmup_requests`: one `PredictionLog` per request (predict,
    classify or regress), as TF Serving replays them before serving; `requests` maps each
    signature to its inputs, or to a list of inputs for several requests."""
    from tensorflow_serving.apis import (classification_pb2, input_pb2, model_pb2, predict_pb2,
                                         prediction_log_pb2, regression_pb2)

    path = os.path.join(version_dir, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature, inputs in ((signature, one) for signature, some in requests.items()
                                  for one in (some if isinstance(some, list) else [some])):
            spec = model_pb2.ModelSpec(name=model_name, signature_name=signature)
            if signature in ("classify", "regress"):
                examples = [tf.train.Example.FromString(b) for b in inputs["inputs"]]
                model_input = input_pb2.Input(example_list=input_pb2.ExampleList(
                    examples=examples))
                if signature == "classify":
                    log = prediction_log_pb2.PredictionLog(
                        classify_log=prediction_log_pb2.ClassifyLog(
                            request=classification_pb2.ClassificationRequest(
                                model_spec=spec, input=model_input)))
                else:
                    log = prediction_log_pb2.PredictionLog(
                        regress_log=prediction_log_pb2.RegressLog(
                            request=regression_pb2.RegressionRequest(
                                model_spec=spec, input=model_input)))
            else:
                request = predict_pb2.PredictRequest(model_spec=spec)
                for name, value in inputs.items():
                    request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
                log = prediction_log_pb2.PredictionLog(
                    predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path


# ---------------------------------------------------------------------------------------------
def _new_version_dir(model, export_dir: str, model_name: str, version: int | None,
                     max_seq_length: int) -> str:
    """The path of the version to write under `export_dir` (created), after checking the name,
    the sequence length and that the version is new."""
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", model_name):
        raise ExportError(f"--export_dir must end in the model name (BASE/NAME, NAME of letters, "
                          f"digits, '_', '-', '.'); got {export_dir!r}.")
    if max_seq_length > model.config.max_position_embeddings:
        raise ExportError(f"--max_seq_length={max_seq_length} exceeds the model's "
                          f"max_position_embeddings={model.config.max_position_embeddings}.")
    os.makedirs(export_dir, exist_ok=True)
    version = next_version(export_dir) if version is None else int(version)
    if not 1 <= version < 2 ** 63:
        raise ExportError(f"--version must be a positive integer below 2^63 (TF Serving reads "
                          f"versions as int64); got {version}.")
    final = os.path.join(export_dir, str(version))
    if os.path.exists(final):
        raise ExportError(f"Version {version} already exists at {final}; TF Serving may be "
                          "serving it. Choose another --version (or leave it out for the next).")
    return final


def export_saved_model(model, export_dir: str, spm_model_file: str, version: int | None = None,
                       max_seq_length: int = 512, top_k: int = 5, text_pair: bool = False,
                       hidden_states: bool = False, labels=None, do_lower_case: bool = True,
                       allowed_ops: str | None = None, serving_base_path: str | None = None,
                       source: dict | None = None, options: dict | None = None,
                       remove_padding: bool = True, threshold: float | None = None,
                       vocab_file: str | None = None, jit_compile: bool = False) -> str:
    """Writes `model` as version `version` (default: the next integer) of `export_dir`.

    Args:
        model: an ALBERT model (pretrainer, classifier or backbone), under any strategy.
        export_dir: `BASE/NAME`, the directory TF Serving watches for model NAME.
        spm_model_file: the SentencePiece model (in the graph); None with `vocab_file`.
        version: version number; an existing one is refused.
        max_seq_length: longest packed sequence of the text signatures (and the cap on their
            padding); at most the model's `max_position_embeddings`.
        top_k: fill-mask candidates per [MASK].
        text_pair: `serving_default` takes `text` and `text_b`.
        hidden_states: add `hidden_state_<i>` outputs.
        labels: class names of a classifier (for `classify`).
        allowed_ops: JSON op list of the target server (default: TF Serving 2.20's).
        serving_base_path: `base_path` written to models.config (default `/models/NAME`).
        source: where the model came from (kept in `assets.extra/albert_export.json`).
        options: a SQuAD span model's `doc_stride`, `max_query_length`, `n_best_size`,
            `max_answer_length`, `null_score_diff_threshold` (SQuAD 2.0; None: always
            answer), or a multiple-choice model's `max_qa_length`
            (`albert_tf.export.serving_tasks`).
        remove_padding: the encoder's matmuls run on the real tokens of a batch only (a batch
            of mixed lengths costs its tokens, not batch x longest; `AlbertEncoder`); False
            keeps the padded computation.
        threshold: a classifier's decision threshold, served as its `threshold` output (the
            official `--threshold_to_export`).
        vocab_file: without `spm_model_file`, a WordPiece vocabulary (`make_tokenizer`; the
            graph tokenizes and packs with it).
        jit_compile: a one-row request runs the backbone XLA-compiled at a fixed padded length
            (backbones, pretrainers, classifiers; `albert_tf.export.serving`); TF Serving must then
            be started with `--xla_cpu_compilation_enabled=true`. Off by default.

    Returns:
        The version directory written.
    """

    export_dir = os.path.abspath(export_dir)
    model_name = os.path.basename(export_dir.rstrip(os.sep))
    created = _missing_directories(export_dir)
    lock = OutputLock(export_dir, "the export directory", is_dir=True,
                      fix="export under another --export_dir")
    try:
        lock.acquire()
        _remove_unfinished_versions(export_dir)
        final = _new_version_dir(model, export_dir, model_name, version, max_seq_length)
        kind = model_kind(model)
        _check_model_kind(export_dir, kind)
        allowed = load_allowed_ops(allowed_ops) if allowed_ops else load_allowed_ops()
        tokenizer = _tokenizer_of(model, spm_model_file, vocab_file, do_lower_case)
        try:
            module = serving_module(host_copy(model), tokenizer,
                                    do_lower_case=do_lower_case, max_seq_length=max_seq_length,
                                    options=options, labels=labels,
                                    remove_padding=remove_padding, top_k=top_k,
                                    jit_compile=jit_compile,
                                    text_pair=text_pair, hidden_states=hidden_states,
                                    **({} if threshold is None else {"threshold": threshold}))
        except (ValueError, TypeError) as e:
            raise ExportError(f"Cannot export the {kind} model: {e}") from None
        record = _export_record(model, module, tokenizer, allowed, source,
                                max_seq_length=max_seq_length, text_pair=text_pair,
                                do_lower_case=do_lower_case, threshold=threshold,
                                remove_padding=bool(remove_padding),
                                jit_compile=bool(jit_compile))
        signatures = _write_version(module, final, model_name, tokenizer, allowed, record)
        write_serving_configs(export_dir, model_name, serving_base_path, signatures)
    except BaseException:
        lock.release()
        for directory in created:  # deepest first: what this call made and left empty
            if os.path.isdir(directory) and not os.listdir(directory):
                os.rmdir(directory)
        raise
    lock.release()
    return final


def _export_record(model, module, tokenizer, allowed: dict, source, *, max_seq_length,
                   text_pair, do_lower_case, threshold, remove_padding, jit_compile) -> dict:
    """`assets.extra/albert_export.json`: the model, its settings and vocabulary, the servers it
    suits and where it came from (the signatures are added when written)."""
    return {"model": module.kind, "config": model.config.to_dict(),
            "num_labels": module.num_labels, "labels": module.labels,
            "max_seq_length": max_seq_length, "top_k": module.top_k, "text_pair": text_pair,
            "do_lower_case": do_lower_case, "threshold": threshold, "options": module.options(),
            "remove_padding": remove_padding, "jit_compile": jit_compile,
            **_vocabulary_record(tokenizer),
            "compatible_with": {k: allowed.get(k) for k in
                                ("tensorflow", "tensorflow_text", "serving")},
            "exported_with": {"tensorflow": tf.__version__}, "source": source or {}}


def _vocabulary_record(tokenizer) -> dict:
    """The export record's entries naming the vocabulary (file name and sha256)."""
    name = os.path.basename(tokenizer.vocabulary_file)
    if tokenizer.kind == "sentencepiece":
        return {"sentencepiece_model": name, "sentencepiece_sha256": tokenizer.sha256}
    return {"vocab_file": name, "vocab_file_sha256": tokenizer.sha256}


def _tokenizer_of(model, spm_model_file, vocab_file, do_lower_case: bool) -> Tokenizer:
    tokenizer = make_tokenizer(spm_model_file, None if spm_model_file else vocab_file,
                               do_lower_case)
    if tokenizer.vocab_size != model.config.vocab_size:
        flag = "--spm_model_file" if spm_model_file else "--vocab_file"
        raise ExportError(f"{tokenizer.vocabulary_file} has {tokenizer.vocab_size} pieces but "
                          f"the model's vocab_size is {model.config.vocab_size}: pass the "
                          f"vocabulary the model was trained with ({flag}).")
    return tokenizer


def _check_model_kind(export_dir: str, kind: str) -> None:
    """Refuses a model of another kind in a model directory that holds versions: TF Serving
    would serve the new version as the next version of the same model, switching its kind
    (and signatures) under its clients."""
    newest = exported_version(export_dir)
    if newest is None:
        return
    try:
        with open(os.path.join(newest, "assets.extra", EXPORT_RECORD), encoding="utf-8") as f:
            theirs = json.load(f).get("model")
    except (OSError, ValueError, AttributeError):
        return
    if theirs and theirs != kind:
        raise ExportError(
            f"{export_dir} serves a {theirs} model (version {os.path.basename(newest)}); this "
            f"is a {kind} model, and TF Serving would serve it as the next version of that "
            "model, switching its kind and signatures under its clients. Export it under "
            "another model name (--export_dir BASE/OTHER_NAME).")


def _remove_unfinished_versions(export_dir: str) -> None:
    """Removes the hidden `.tmp-<version>-*` directories of exports that were killed while
    writing (this process holds the export directory's lock: no export of another process
    is running)."""
    if not os.path.isdir(export_dir):
        return
    for name in os.listdir(export_dir):
        if re.fullmatch(r"\.tmp-\d+-.+", name):
            shutil.rmtree(os.path.join(export_dir, name), ignore_errors=True)


def _missing_directories(path: str) -> list[str]:
    """`path` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while path and not os.path.exists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _write_version(module, final: str, model_name: str, tokenizer, allowed: dict,
                   record: dict) -> dict:
    """Saves `module` with its signatures, warmup requests, SentencePiece model and `record`
    in a temporary directory beside `final`, made readable and renamed to `final` when whole
    (removed on any error). Returns the signatures."""
    version = os.path.basename(final)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=os.path.dirname(final))
    try:
        signatures = module.signatures()
        tf.saved_model.save(module, tmp, signatures=signatures)
        _set_method_names(tmp, signature_method_names(signatures))
        check_saved_model_ops(tmp, allowed)
        write_warmup_requests(tmp, model_name, module.warmup_inputs(tokenizer))
        record = dict(record, signatures=sorted(signatures))
        with open(os.path.join(tmp, "assets.extra", EXPORT_RECORD), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2)
        _readable_tree(tmp)
        os.rename(tmp, final)  # atomic on one filesystem; fails if `final` appeared meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return signatures
