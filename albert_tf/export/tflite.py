"""ALBERT as a TensorFlow Lite model that takes raw text (or token ids), for phones.

One signature, `serving_default`, one example per invocation (batch dimension 1):

- `--inputs text` (default): `text` (string [1]), and `text_b` (string [1]) for a model exported
  with `text_pair=True`. Tokenized inside the model by `albert_tf.tokenization.OnDeviceTokenizer`
  (tensorflow-text's `FastSentencepieceTokenizer` with the official preprocessing compiled into
  the SentencePiece normalizer; a literal "[MASK]" is the [MASK] id), packed and truncated to
  `max_seq_length` as the SavedModel does (`albert_tf.packing.pack_row_in_graph`), no padding.
- `--inputs tokens`: `input_ids`, `input_mask`, `segment_ids` (int32 [1, length]), for apps
  that tokenize themselves.

Outputs, as the SavedModel's `serving_default` (`albert_tf.export.serving`): `input_ids`,
`input_mask`, `segment_ids` (what the model saw, [1, length]); classifier: `logits`, `probabilities`
[1, C], `label` [1] (regression: `logits` [1, 1], `score` [1]); pretrainer: `pooled_output` [1, H],
`sequence_output` [1, length, H] and, for each [MASK] in order, `mask_positions` [1, M],
`fill_mask_ids`, `fill_mask_pieces`, `fill_mask_probabilities` [1, M, top_k] (M is at least 1:
a text without [MASK] gives one entry of position -1, id -1, piece "" and probability 0, the
SavedModel's padding; TFLite cannot return an empty tensor); backbone:
`pooled_output`, `sequence_output`.

The graph uses TFLite builtin ops plus tensorflow-text's `TFText>FastSentencepieceTokenize`
(text inputs only): an interpreter needs tensorflow-text's registrar
(`tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS`; `interpreter()` here does it). Token
inputs out of range (ids >= vocab_size, length > max_position_embeddings) are not checked in
the graph (TFLite has no assertions): the interpreter fails on the gather.

Quantization (`quantize`): "none" (float32), "float16" (weights stored as float16, computed in
float32), "dynamic_int8" (weights int8; matrix products quantize activations per call).

Beside `FILE.tflite`, `FILE.json` records the signature, inputs, outputs, labels, quantization,
sizes and the agreement with the float32 TensorFlow graph measured at export. A quantized file
is also measured on held-out text (`quality`: `check_texts` lines of the bundled WikiText-2
test split, each with its third word masked for a pretrainer): the largest difference of its
probabilities (or scores, pooled outputs) from float32's and how often its answer (label,
top fill-mask piece) is float32's; an export below `min_agreement` is refused, not written.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.packing import pack_ids, pack_row_in_graph, packed_length
from albert_tf.ownership import OutputLock
from albert_tf.paths import HELD_OUT_TEXT, SAMPLE_DATA_DIR, atomic_files
from albert_tf.tokenization import MASK_ID, Tokenizer
from albert_tf.export.registry import serving_module_class
from albert_tf.checkpoints import model_kind
from albert_tf.models.kinds import class_of, registered_classes
from albert_tf.export.saved_model import host_copy

QUANTIZATIONS = ("none", "float16", "dynamic_int8")
INPUTS = ("text", "tokens")
SIGNATURE = "serving_default"
CHECK_TEXTS = ("ALBERT shares one transformer block across all of its layers.",
               "The capital of France is [MASK].",
               "A touching, funny and beautifully acted film.",
               "")


class TFLiteExportError(ValueError):
    """A model cannot be exported to TensorFlow Lite as asked; the message names the fix."""


class TFLiteModule:
    """Mixed before a model's serving module class (`tflite_module`): its outputs for one
    example, with ops TensorFlow Lite runs."""

    LABEL_NAME_OUTPUT = False  # the file's outputs stay numeric; FILE.json records the labels

    def __init__(self, model, tokenizer: Tokenizer, max_seq_length=512, top_k=5,
                 text_pair=False, labels=None):
        super().__init__(model, tokenizer.model_proto, tokenizer.do_lower_case,
                         max_seq_length=max_seq_length, top_k=top_k, text_pair=text_pair,
                         labels=labels, remove_padding=False)  # one example: no padding
        self.sentencepiece = None  # the SavedModel tokenizer's resource is not part of this graph
        self.tokenizer = tokenizer.on_device()
        # every piece, then "" (index vocab_size) for padding entries: TFLite selects no strings
        self._pieces = tf.constant([tokenizer.sp.IdToPiece(i)
                                    for i in range(tokenizer.vocab_size)] + [""])

    def _check_tokens(self, features):
        # TFLite has no assertion ops; out-of-range ids fail in the interpreter's gather.
        return {name: tf.cast(features[name], tf.int32) for name in F.BACKBONE_INPUTS}

    def _fill_mask(self, input_ids, mlm_logits_fn):
        found = tf.cast(tf.where(tf.equal(input_ids[0], MASK_ID))[:, 0], tf.int32)
        # TFLite cannot hand out an empty tensor: with no [MASK] there is one padding entry
        # (position -1, id -1, piece "", probability 0), as the SavedModel pads short rows.
        count = tf.maximum(tf.size(found), 1)
        positions = tf.concat([found, [-1]], axis=0)[:count][None]  # [1, M]
        valid = positions >= 0
        logits = mlm_logits_fn(tf.maximum(positions, 0))  # [1, M, V]
        probabilities, ids = tf.math.top_k(tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1),
                                           k=self.top_k)
        valid_k = tf.broadcast_to(valid[:, :, None], tf.shape(ids))
        return {"mask_positions": positions,
                "fill_mask_ids": tf.where(valid_k, ids, -1),
                "fill_mask_pieces": tf.gather(self._pieces, tf.where(
                    valid_k, ids, tf.shape(self._pieces)[0] - 1)),
                "fill_mask_probabilities": tf.where(valid_k, probabilities, 0.0)}

    def tokens_from_text(self, text, text_b=None):  # noqa: D102 - one row, no batch
        ids_b = None if text_b is None else self.tokenizer.encode_one(text_b)
        return pack_row_in_graph(self.tokenizer.encode_one(text), ids_b, self.max_seq_length)

    def text_outputs(self, text, text_b=None) -> dict:
        """The outputs of one text (pair) with `num_tokens`, `truncated` and `max_seq_length`,
        as the SavedModel's text signatures (`AlbertServingModule.text_outputs`)."""
        ids_a = self.tokenizer.encode_one(text)
        ids_b = None if text_b is None else self.tokenizer.encode_one(text_b)
        out = dict(self.outputs_from_tokens(pack_row_in_graph(ids_a, ids_b,
                                                              self.max_seq_length)))
        num = packed_length(tf.size(ids_a), None if ids_b is None else tf.size(ids_b))
        out.update(num_tokens=tf.reshape(num, [1]),
                   truncated=tf.reshape(num > self.max_seq_length, [1]),
                   max_seq_length=tf.constant([self.max_seq_length], tf.int32))
        return out

    def function(self, inputs: str):
        """The concrete function of `serving_default` for `inputs` ("text" or "tokens")."""
        if inputs == "tokens":
            spec = [tf.TensorSpec([1, None], tf.int32, name=name) for name in F.BACKBONE_INPUTS]
            fn = self._function(lambda input_ids, input_mask, segment_ids: self.outputs_from_tokens(
                {F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask, F.SEGMENT_IDS: segment_ids}))
        elif self.text_pair:
            spec = [tf.TensorSpec([1], tf.string, name=name) for name in ("text", "text_b")]
            fn = self._function(lambda text, text_b: self.text_outputs(text, text_b))
        else:
            spec = [tf.TensorSpec([1], tf.string, name="text")]
            fn = self._function(lambda text: self.text_outputs(text))
        return fn.get_concrete_function(*spec)


# ---------------------------------------------------------------------------------------------
def interpreter(model, num_threads: int | None = None):
    """A TFLite interpreter of `model` (a path or the file's bytes) with tensorflow-text's ops
    registered, tensors allocated."""
    from tensorflow.lite.python.interpreter import InterpreterWithCustomOps
    from tensorflow_text import tflite_registrar

    kwargs = {"model_content": model} if isinstance(model, (bytes, bytearray)) else {
        "model_path": os.fspath(model)}
    with warnings.catch_warnings():  # tf.lite.Interpreter's notice that LiteRT replaces it
        warnings.simplefilter("ignore")
        result = InterpreterWithCustomOps(
            custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS, num_threads=num_threads,
            **kwargs)
    result.allocate_tensors()
    return result


def run(runner, inputs: dict) -> dict:
    """Calls a signature runner on numpy inputs (strings as bytes or str)."""
    feed = {}
    for name, value in inputs.items():
        array = np.asarray(value)
        if array.dtype.kind in "US":
            array = np.array([v.encode() if isinstance(v, str) else v
                              for v in array.reshape(-1)], dtype=object).reshape(array.shape)
        feed[name] = array
    return runner(**feed)


def _converter(concrete_function, module, quantize):
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete_function], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = True  # tensorflow-text's, registered by its registrar
    if quantize == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "dynamic_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    return converter


def _check_inputs(module, inputs, tokenizer):
    """Requests to compare the file with the TensorFlow graph on."""
    texts = list(CHECK_TEXTS)
    if inputs == "text":
        if module.text_pair:
            return [{"text": np.array([a.encode()], object),
                     "text_b": np.array([b.encode()], object)}
                    for a, b in zip(texts, texts[1:] + texts[:1])]
        return [{"text": np.array([t.encode()], object)} for t in texts]

    out = []
    for text in texts:
        ids, segments = pack_ids(tokenizer.encode_with_masks(text), None, module.max_seq_length)
        out.append({F.INPUT_IDS: np.array([ids], np.int32),
                    F.INPUT_MASK: np.ones([1, len(ids)], np.int32),
                    F.SEGMENT_IDS: np.array([segments], np.int32)})
    return out


def compare_outputs(expected: dict, got: dict) -> dict:
    """{output: largest absolute difference} of the float outputs; raises if an int or string
    output (ids, positions, labels, pieces) differs in shape."""
    diffs = {}
    for name, value in expected.items():
        value = np.asarray(value)
        other = np.asarray(got[name])
        if value.shape != other.shape:
            raise AssertionError(f"{name}: shape {other.shape}, expected {value.shape}")
        if value.dtype.kind == "f":
            diffs[name] = float(np.max(np.abs(value - other))) if value.size else 0.0
    return diffs


def held_out_requests(module, inputs: str, tokenizer, count: int) -> list[dict]:
    """`count` requests of real text no check is tuned on (`albert_tf.paths.HELD_OUT_TEXT`,
    its first `count` lines of at least 8 words): for a pretrainer, its third word masked; for
    a pair model, each line with the next as text_b."""
    texts = []
    with open(HELD_OUT_TEXT, encoding="utf-8") as f:
        for line in f:
            words = line.split()
            if len(words) >= 8 and not line.lstrip().startswith("="):
                if module.FILL_MASK:
                    words[2] = "[MASK]"
                texts.append(" ".join(words))
            if len(texts) == count + 1:
                break
    requests = []
    for a, b in zip(texts, texts[1:]):
        if inputs == "tokens":
            ids, segments = pack_ids(tokenizer.encode_with_masks(a), None,
                                     module.max_seq_length)
            requests.append({F.INPUT_IDS: np.array([ids], np.int32),
                             F.INPUT_MASK: np.ones([1, len(ids)], np.int32),
                             F.SEGMENT_IDS: np.array([segments], np.int32)})
        else:
            requests.append({"text": np.array([a.encode()], object)} | (
                {"text_b": np.array([b.encode()], object)} if module.text_pair else {}))
    return requests


# What a quantized file is judged by: (float output compared, the answer that must agree).
def tflite_module(model, tokenizer: Tokenizer, **kwargs):
    """`TFLiteModule` mixed before the model's own serving module class."""
    base = serving_module_class(model)
    cls = type(f"TFLite{base.__name__}", (TFLiteModule, base), {})
    return cls(model, tokenizer, **kwargs)


def measure_quality(function, runner, requests, quality_outputs, regression: bool) -> dict:
    """The quantized file against the float32 TensorFlow graph on `requests`: `texts`,
    `max_abs_difference` of the compared float output, and `agreement` (share of requests
    whose answer, the label or the top fill-mask piece, is float32's; None for a backbone)."""
    compared, answer = quality_outputs
    if regression:
        compared, answer = "score", None
    worst, agree = 0.0, []
    for request in requests:
        expected = function(**{k: tf.constant(v) for k, v in request.items()})
        got = run(runner, request)
        worst = max(worst, float(np.max(np.abs(expected[compared].numpy() - got[compared]))))
        if answer is not None:
            want, have = expected[answer].numpy(), np.asarray(got[answer])
            if answer == "fill_mask_ids":
                want, have = want[..., 0], have[..., 0]
            agree.append(bool(np.array_equal(want, have)))
    return {"texts": len(requests), "text_source": os.path.relpath(HELD_OUT_TEXT,
                                                                   SAMPLE_DATA_DIR),
            "compared_output": compared, "max_abs_difference": worst,
            "agreement": float(np.mean(agree)) if agree else None}


def export_tflite(model, output: str, spm_model_file: str, quantize: str = "none",
                  inputs: str = "text", max_seq_length: int | None = None, top_k: int = 5,
                  text_pair: bool = False, labels=None, do_lower_case: bool = True,
                  source: dict | None = None, tolerance: float = 1e-4,
                  check_texts: int = 100, min_agreement: float = 0.95) -> dict:
    """Writes `model` as a TensorFlow Lite file and returns its record (also `FILE.json`).

    Args:
        model: a pretrainer, classifier or backbone (any strategy or dtype policy; a float32
            host copy is exported).
        output: the `.tflite` path (written whole or not at all; an existing file is refused).
        spm_model_file: the SentencePiece model the model was trained with.
        quantize: "none", "float16" or "dynamic_int8".
        inputs: "text" (raw text, tokenized in the model) or "tokens".
        max_seq_length: longest packed sequence of text inputs (default: min(512,
            max_position_embeddings)).
        top_k: fill-mask candidates per [MASK] (pretrainer).
        text_pair: the text signature takes `text` and `text_b`.
        labels: class names of a classifier.
        tolerance: largest difference allowed between a float32 file and the TensorFlow graph
            on the check requests (quantized files: measured and recorded, not enforced).
        check_texts: held-out texts a quantized file is measured on (`measure_quality`).
        min_agreement: a quantized file whose answers agree with float32's on fewer of them is
            refused (nothing written).
    """

    output = _checked_output(output, quantize, inputs)
    kind = model_kind(model)
    tokenizer = _checked_model(model, spm_model_file, do_lower_case, max_seq_length)
    if max_seq_length is None:
        max_seq_length = min(512, model.config.max_position_embeddings)
    module = tflite_module(host_copy(model), tokenizer, max_seq_length=max_seq_length,
                           top_k=top_k, text_pair=text_pair, labels=labels)
    function = module.function(inputs)
    content = _converter(function, module, quantize).convert()
    runner = interpreter(content).get_signature_runner(SIGNATURE)
    differences = _check_against_graph(function, module, runner, inputs, tokenizer, quantize,
                                       tolerance)
    quality = None
    if quantize != "none":
        quality = measure_quality(function, runner, held_out_requests(
            module, inputs, tokenizer, check_texts), module.QUALITY_OUTPUTS,
            getattr(model, "num_labels", 0) == 1)
        if quality["agreement"] is not None and quality["agreement"] < min_agreement:
            raise TFLiteExportError(
                f"The {quantize} file answers as float32 on only {quality['agreement']:.1%} of "
                f"{quality['texts']} held-out texts (< {min_agreement:.0%}; largest "
                f"{quality['compared_output']} difference {quality['max_abs_difference']:.3g})"
                "; nothing was written. Use --quantize float16 (or none), or lower "
                "--min_agreement knowingly.")
    details = runner.get_input_details(), runner.get_output_details()
    record = {
        "model": kind, "signature": SIGNATURE, "inputs": inputs, "quantize": quantize,
        "input_names": sorted(details[0]), "output_names": sorted(details[1]),
        "max_seq_length": max_seq_length, "top_k": module.top_k if module.FILL_MASK else None,
        "text_pair": bool(text_pair), "labels": module.labels, "do_lower_case": do_lower_case,
        "config": model.config.to_dict(), "size_bytes": len(content),
        "custom_ops": ["TFText>FastSentencepieceTokenize"] if inputs == "text" else [],
        "check_max_abs_difference": differences, "quality": quality,
        "sentencepiece_model": os.path.basename(spm_model_file),
        "exported_with": {"tensorflow": tf.__version__}, "source": source or {},
    }
    _write(output, content, record)
    return record


def _checked_output(output, quantize: str, inputs: str) -> str:
    """The absolute `.tflite` path, after checking the export's settings; nothing is written
    over an existing file."""
    if quantize not in QUANTIZATIONS:
        raise TFLiteExportError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}; got "
                                f"{quantize!r}.")
    if inputs not in INPUTS:
        raise TFLiteExportError(f"--inputs must be text or tokens; got {inputs!r}.")
    output = os.path.abspath(os.fspath(output))
    if not output.endswith(".tflite"):
        raise TFLiteExportError(f"--output must end in .tflite; got {output!r}.")
    for path in (output, record_path(output)):
        if os.path.exists(path):
            raise TFLiteExportError(f"{path} exists; choose another --output (or delete it).")
    return output


def _checked_model(model, spm_model_file: str, do_lower_case: bool,
                   max_seq_length: int | None) -> Tokenizer:
    """The tokenizer of `spm_model_file`, after checking that the model has an on-device
    export and fits the vocabulary and the sequence length."""
    if not class_of(model).has_tflite:
        have = ", ".join(c.albert_kind for c in registered_classes() if c.has_tflite)
        raise TFLiteExportError(
            f"A {model_kind(model)} model has no TensorFlow Lite export (its text pipeline "
            "needs windows, options or spans the on-device graph does not have; TFLite "
            f"exports: {have}); export a SavedModel with python -m "
            f"albert_tf.export.export_saved_model.")
    if max_seq_length is not None and max_seq_length > model.config.max_position_embeddings:
        raise TFLiteExportError(f"--max_seq_length={max_seq_length} exceeds the model's "
                                f"max_position_embeddings={model.config.max_position_embeddings}.")
    tokenizer = Tokenizer(spm_model_file, do_lower_case)
    if tokenizer.vocab_size != model.config.vocab_size:
        raise TFLiteExportError(
            f"{spm_model_file} has {tokenizer.vocab_size} pieces but the model's vocab_size is "
            f"{model.config.vocab_size}: pass the SentencePiece model the model was trained "
            "with (--spm_model_file).")
    return tokenizer


def _check_against_graph(function, module, runner, inputs: str, tokenizer, quantize: str,
                         tolerance: float) -> dict:
    """{output: largest absolute difference} of the TFLite file against the TensorFlow graph
    it came from, on real requests; ids, labels and fill-mask answers of a float32 file must
    be equal and its floats within `tolerance`."""
    differences = {}
    for request in _check_inputs(module, inputs, tokenizer):
        expected = {k: v.numpy() for k, v in function(**{
            k: tf.constant(v) for k, v in request.items()}).items()}
        got = run(runner, request)
        for name, diff in compare_outputs(expected, got).items():
            differences[name] = max(differences.get(name, 0.0), diff)
        for name in ("input_ids", "label", "fill_mask_ids"):
            if name in expected and quantize == "none" and not np.array_equal(
                    expected[name], got[name]):
                raise TFLiteExportError(f"The TFLite file's {name} differ from the TensorFlow "
                                        f"graph's on {request}; please report this.")
    worst = max(differences.values(), default=0.0)
    if quantize == "none" and worst > tolerance:
        raise TFLiteExportError(f"The float32 TFLite file differs from the TensorFlow graph by "
                                f"{worst:.3g} (> {tolerance}) on the check requests: "
                                f"{differences}; please report this.")
    return differences


def _write(output: str, content: bytes, record: dict) -> None:
    """The file and its record (`FILE.json`), the file renamed into place last, holding the
    output's lock (`albert_tf.ownership`): of two exports to one --output, the second is
    refused, never written over the first."""
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with OutputLock(output, "--output", is_dir=False):
        for path in (output, record_path(output)):
            if os.path.exists(path):  # written while this export converted
                raise TFLiteExportError(f"{path} exists; choose another --output (or delete "
                                        "it).")
        _write_locked(output, content, record)


def _write_locked(output: str, content: bytes, record: dict) -> None:
    """The .tflite file and its record (`.json`) written whole together
    (`albert_tf.paths.atomic_files`: the model renamed last); a record left without its model
    (a rename that failed) is removed."""
    try:
        with atomic_files([(record_path(output), "w"), (output, "wb")]) as (record_file, file):
            json.dump(record, record_file, indent=2)
            file.write(content)
    except BaseException:
        if not os.path.exists(output) and os.path.exists(record_path(output)):
            os.unlink(record_path(output))  # the record of a file that was not written
        raise


def record_path(output: str) -> str:
    return output[:-len(".tflite")] + ".json"
