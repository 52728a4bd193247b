"""The serving module: one `tf.Module` per exported model, with the signatures TF Serving calls.

Signatures (all batch-major; every int is int32):

- `serving_default`: `text` (string [batch]) - raw text; or `text` and `text_b` for a model
  exported with `text_pair=True`. Tokenized in-graph (`albert_tf.tokenization.InGraphTokenizer`,
  the one tokenizer's normalization), each literal "[MASK]" becoming the [MASK] id, packed and
  truncated by `albert_tf.packing` (longest first, from the end), padded to the longest row of the
  batch (at most `max_seq_length`).
- `serve_text_pair`: `text`, `text_b` (exported for every model).
- `serve_tokens`: `input_ids`, `input_mask`, `segment_ids` [batch, length]; each row's
  `input_mask` is 1 on its tokens from position 0 and 0 on the padding after them (what every
  packer writes: values 0 or 1, at least one 1, no 1 after a 0).
- `serve_examples`: `examples` (string [batch]) - serialized `tf.train.Example`s with the official
  int64 features `input_ids`, `input_mask`, `segment_ids` (any length up to the model's
  `max_position_embeddings`; padded per batch).
- classifiers: `classify` (method `tensorflow/serving/classify`: `inputs` -> `classes` [batch, C]
  string, `scores` [batch, C]); regression heads: `regress` (method `tensorflow/serving/regress`:
  `inputs` -> `outputs` [batch]). TF Serving's `:classify` / `:regress` APIs need these. Their
  tf.Examples (and `serve_examples`') carry either the token features or raw text in a bytes
  feature `text` (and `text_b`), tokenized in the graph: a client needs no tokenizer.
- classifiers and regression heads: `official_serving_default`, the contract of the official
  `run_classifier.py --export_dir` (its Estimator export's `serving_default`, which ours gives
  to raw text): `input` (string [batch]) - serialized tf.Examples as the official runner writes
  them (int64 `input_ids`, `input_mask`, `segment_ids` of `max_seq_length` values; other
  features such as `label_ids`, `is_real_example` ignored; parsed as `serve_examples` parses)
  -> `probabilities` [batch, C] float32 (softmax) and `predictions` [batch] int32 (their
  argmax); a regression head: `probabilities` = its logits [batch, 1], `predictions` [batch]
  float32; exported with a `threshold`: `threshold`, a float32 scalar (as official).
- pretrainers: `fill_mask`: `text` -> the fill-mask outputs below and `num_tokens`,
  `truncated`, `max_seq_length` only (REST returns every output of a signature; this one
  leaves out the [batch, length, H] sequence output).

The text signatures (`serving_default`, `serve_text_pair`, `fill_mask`) also return
`num_tokens` [batch] (the packed length before truncation), `truncated` [batch] bool and
`max_seq_length` [batch] (the model's limit), so a cut text is visible in the answer.

Outputs, from the token features (every signature returns the same set):
- all: `input_ids`, `input_mask`, `segment_ids` (what the model saw);
- pretrainer and backbone: `pooled_output` [batch, H], `sequence_output` [batch, length, H];
- pretrainer: fill-mask for each [MASK] of a row, in order: `mask_positions` [batch, M] (-1 past
  the row's masks), `fill_mask_ids`, `fill_mask_pieces`, `fill_mask_probabilities`
  [batch, M, top_k] (-1, "" and 0 past the row's masks); M is the most masks in any row (0 when
  the batch has none);
- classifier: `logits` and `probabilities` [batch, C], `label` [batch] (argmax), and when the
  class names were given at export (`labels`), `label_name` string [batch] (the name of
  `label`, as `classify` names the classes); with one output
  (regression): `logits` [batch, 1] and `score` [batch]; exported with a `threshold` (the
  official `--threshold_to_export`): `threshold` [batch], that value for each row;
- with `hidden_states=True`: `hidden_state_<i>` [batch, length, H] for i = 0 (embeddings) .. L.

Requests are validated before the model runs; a bad one gets one error (InvalidArgumentError,
whose text TF Serving returns to the client) naming the input, the rows and the rule, never an
answer: a string input of another rank than its signature's (TF Serving and a loaded
signature feed any shape: "text must be a 1-D batch of strings (shape [batch]); got shape
[2,2]", `AlbertServingModule._text_signature`); an empty request ("the request holds no
texts"); inputs of different batch sizes or shapes; token rows longer than
`max_position_embeddings`; ids outside [0, vocab_size), segment
ids outside [0, type_vocab_size), an `input_mask` that is not 1s then 0s as above (checked in the
dtype sent: a tf.Example's int64 values before they are cast to int32); tf.Examples that carry
neither `text` nor `input_ids` (or both), a `text` of other than one value, a `text_b` of more,
and the other rules of `AlbertServingModule.tokens_from_examples`. Empty strings are text: they
pack to [CLS] [SEP].

The encoder runs on the real tokens of the batch only (`remove_padding`, the default export;
`AlbertEncoder`): per-token outputs at padding positions (`sequence_output`, `hidden_state_<i>`,
a span model's logits there) are 0 or computed from 0, never read by the model's own outputs.

Exported with `jit_compile=True` (opt-in; backbones, pretrainers and classifiers), a request of
one row runs the backbone as one XLA-compiled function: its tokens padded to a fixed length
(`OneRowBackbone.lengths()`: 16, 32, 64, ... and `max_position_embeddings`; one compilation per length,
replayed by the warmup requests), the outputs cut back to the row's length. Other batches run
the graph as without it. TF Serving runs such a model only when started with
`--xla_cpu_compilation_enabled=true`; without it every one-row request fails, the warmup's
among them, which fails the version's load.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.export.request_checks import (EXAMPLES, TEXT, TEXT_B, _Untracked, _after,
                                             _refuse_empty, _refuse_rank, _string_spec,
                                             _tf_variable, _token_spec, checked_tokens,
                                             tokens_of_examples)
from albert_tf.models.backbone import AlbertBackbone, padded_computation, set_remove_padding
from albert_tf.models.kinds import backbone_of
from albert_tf.packing import pack_ids, pack_in_graph, packed_length, pad_features
from albert_tf.records import example_of
from albert_tf.tokenization import in_graph_tokenizer

# The official run_classifier.py export's signature (an Estimator export of serialized
# tf.Examples under `serving_default`, its input "input", the name the Estimator gives a lone
# receiver tensor), here under its own name: our `serving_default` takes raw text.
OFFICIAL_SIGNATURE, OFFICIAL_INPUT = "official_serving_default", "input"
# The `fill_mask` signature's outputs (a pretrainer's): the candidates and what packing did.
FILL_MASK_OUTPUTS = ("mask_positions", "fill_mask_ids", "fill_mask_pieces",
                     "fill_mask_probabilities", "num_tokens", "truncated", "max_seq_length")
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
PREDICT_METHOD = "tensorflow/serving/predict"


# Small real requests, one per signature, written as TF Serving's warmup file.
WARMUP_TEXTS = ("ALBERT shares one transformer block across all of its layers.",
                "The capital of France is [MASK].")


def _padded_tokens(packed) -> tuple[list, dict]:
    """(padded rows, {input name: int32 [batch, longest]}) of (ids, segment ids) pairs."""
    length = max(len(ids) for ids, _ in packed)
    rows = [pad_features(ids, seg, length) for ids, seg in packed]
    return rows, {name: np.array([r[name] for r in rows], np.int32) for name in F.BACKBONE_INPUTS}


_SERVED: dict[type, type] = {}


def serves(model_class: type):
    """Class decorator of a serving module: it serves `model_class`, a registered model class
    (`albert_tf.models.registry`). One serving module per model class; the model side never
    names its serving module (the library does not import `export`)."""

    def register(module: type) -> type:
        other = _SERVED.get(model_class)
        if other is not None and (other.__module__, other.__qualname__) != (
                module.__module__, module.__qualname__):
            raise ValueError(f"{model_class.__name__} is already served by "
                             f"{other.__module__}.{other.__qualname__}.")
        _SERVED[model_class] = module
        return module

    return register


def served() -> dict[type, type]:
    """{model class: its serving module class} of the serving modules imported so far
    (`albert_tf.export.registry` imports them all)."""
    return dict(_SERVED)


def label_names(labels, num_labels: int | None, kind: str) -> list | None:
    """The class names a module serves: `labels` checked against the model's `num_labels`
    (one non-empty name per class, each once, in id order), else "0", "1", ...; None for a
    model without classes (where `labels` is refused)."""
    if labels is None:
        return [str(i) for i in range(num_labels)] if num_labels else None
    if num_labels is None:
        raise ValueError(f"label names (--labels) are a classifier's; a {kind} has no "
                         "classes to name. Leave --labels out.")
    if len(labels) != num_labels:
        raise ValueError(f"{len(labels)} label names given for {num_labels} labels.")
    names = [str(x) for x in labels]
    repeated = sorted({x for x in names if names.count(x) > 1})
    if repeated or "" in names:
        raise ValueError(f"label names (--labels) {names}: "
                         + (f"{repeated[0]!r} is named {names.count(repeated[0])} "
                            "times" if repeated else "one is empty")
                         + "; each class needs its own non-empty name, in id order.")
    return list(labels)


class OneRowBackbone:
    """A served model's backbone for one-row requests, XLA-compiled (the module's
    `jit_compile`): the row padded to the next of `lengths()`, run through the compiled
    function (traced once, on first use), and its outputs (`keys`) cut back to its length."""

    def __init__(self, model, keys: tuple):
        self.backbone = backbone_of(model)
        self.keys = keys
        self._compiled = None

    def lengths(self) -> list[int]:
        """The padded lengths a one-row request runs at: 16, 32, 64, ... and
        `max_position_embeddings`, the longest a token row may be."""
        cap = self.backbone.config.max_position_embeddings
        lengths = [n for n in (16 << i for i in range(16)) if n < cap]
        return lengths + [cap]

    def _compile(self):
        backbone, keys = self.backbone, self.keys

        def padded(input_ids, input_mask, segment_ids):
            with padded_computation(backbone):
                out = backbone({F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask,
                                F.SEGMENT_IDS: segment_ids}, training=False)
            return {key: out[key] for key in keys}

        spec = tf.TensorSpec([1, None], tf.int32)
        return tf.function(padded, jit_compile=True, autograph=False,
                           input_signature=[spec, spec, spec])

    def __call__(self, inputs) -> dict:
        if self._compiled is None:
            self._compiled = self._compile()
        length = tf.shape(inputs[F.INPUT_IDS])[1]  # checked: at most the last of lengths()
        lengths = tf.constant(self.lengths(), tf.int32)
        padded_length = lengths[tf.searchsorted(lengths, tf.reshape(length, [1]))[0]]
        pad = [[0, 0], [0, padded_length - length]]
        out = self._compiled(*(tf.pad(inputs[name], pad) for name in F.BACKBONE_INPUTS))
        # The row's own padding (a token request's) is 0 as the graph leaves it, when it
        # removes the padding.
        keep = (tf.cast(inputs[F.INPUT_MASK][:, :, None], tf.float32)
                if self.backbone.encoder.remove_padding else 1.0)
        cut = {"pooled_output": out["pooled_output"],
               "sequence_output": out["sequence_output"][:, :length] * keep}
        if "hidden_states" in out:
            cut["hidden_states"] = [h[:, :length] * keep for h in out["hidden_states"]]
        return cut


@serves(AlbertBackbone)
class AlbertServingModule(tf.Module):
    """Wraps a plain (host, float32) ALBERT model and its tokenizer for `tf.saved_model.save`.

    This class serves a bare `AlbertBackbone`; each registered model class has its own serving
    module (`@serves(ModelClass)`; `albert_tf.export.registry` finds it), a subclass that adds its
    head's outputs, signatures and warmup requests.

    Args:
        model: a registered ALBERT model (host, float32; not under a strategy).
        spm_model_proto: the vocabulary: a Python tokenizer (`Tokenizer`, SentencePiece, or
            `WordPieceTokenizer`; `albert_tf.tokenization.make_tokenizer`), or the bytes of a
            SentencePiece model. Its special ids ([CLS], [SEP], [MASK]) are the packing's.
        do_lower_case: the tokenizer's lowercasing (released models: True).
        max_seq_length: longest packed sequence for text inputs.
        top_k: fill-mask candidates per [MASK] (pretrainer).
        text_pair: `serving_default` takes `text` and `text_b`.
        hidden_states: add `hidden_state_<i>` outputs.
        labels: class names for `classify` (default "0", "1", ...).
        threshold: a classifier's decision threshold served with its answers (the official
            `--threshold_to_export`; None: no `threshold` output).
        remove_padding: run the encoder's per-token matmuls on the real tokens only
            (`AlbertEncoder`'s `remove_padding`; sets it on `model`, which the module owns): a
            batch of mixed lengths costs its real tokens, not batch x longest.
        jit_compile: a one-row request runs the backbone XLA-compiled at a fixed padded length
            (module docstring); needs TF Serving's `--xla_cpu_compilation_enabled=true`.
    """

    OPTIONS: tuple = ()  # the task's settings the module keeps (the export record lists them)
    # the options `python -m albert_tf.export.export_saved_model` passes from its flags of these
    # names
    EXPORT_FLAGS: tuple = ()
    NAMED_LABELS = True  # its outputs can carry class names (`labels`)
    SERVES_THRESHOLD = False  # a decision threshold is served with its answers (classifiers)
    SENTENCEPIECE_ONLY = False  # its text path needs a SentencePiece vocabulary
    TEXT_MODULE = True  # takes free text (`text`, `text_b`) and the module's keyword options
    FILL_MASK = False  # answers [MASK]s (a TFLite export's held-out requests mask a word)
    # (compared float output, answer output) of a quantized TFLite file against float32
    QUALITY_OUTPUTS = ("pooled_output", None)

    def __init__(self, model, spm_model_proto, do_lower_case=True, max_seq_length=512,
                 top_k=5, text_pair=False, hidden_states=False, labels=None,
                 remove_padding=True, threshold=None, jit_compile=False):
        super().__init__(name="albert_serving")
        config = model.config
        problem = config.sequence_length_problem(max_seq_length, "max_seq_length")
        if problem:
            raise ValueError(problem + ".")
        # The Keras model is held untracked and its tf.Variables are tracked directly. Keras 3
        # exports each keras.Variable as a *copy* (a second tf.Variable) that the checkpoint
        # restores, while the functions read the original: Python's loader reconnects them, but
        # a TF1-style session load (TF Serving's) restores the copies and leaves the variables
        # the graph reads uninitialized ("Could not find variable ...").
        self._model = _Untracked(model)
        set_remove_padding(model, remove_padding)
        self.model_variables = [_tf_variable(v) for v in model.weights]
        self.kind = kind = model.albert_kind  # for messages and the export record
        self.tokenizer = in_graph_tokenizer(spm_model_proto, do_lower_case)
        self.sentencepiece = self.tokenizer.trackable  # tracked: the vocabulary's resource
        self.max_seq_length = int(max_seq_length)
        self.top_k = int(min(top_k, config.vocab_size))
        self.text_pair = bool(text_pair)
        self.hidden_states = bool(hidden_states)
        self.num_labels = getattr(model, "num_labels", None)
        self.labels = label_names(labels, self.num_labels, kind)
        self.named_labels = labels is not None  # names known at export, not "0", "1", ...
        if threshold is not None and not self.SERVES_THRESHOLD:
            raise ValueError(f"a threshold is served by classifiers, not a {kind}.")
        self.threshold = None if threshold is None else float(threshold)
        self._config = config
        self.jit_compile = bool(jit_compile)  # the factory refuses it for the other kinds
        # the compiled backbone of one-row requests (`jit_compile`), traced once
        self._one_row = _Untracked(OneRowBackbone(model, self._backbone_keys()))

    # -----------------------------------------------------------------------------------------
    def options(self) -> dict:
        return {name: getattr(self, name) for name in self.OPTIONS}

    def warmup_inputs(self, tokenizer) -> dict:
        """{signature: {input name: numpy array}} of small real requests, one per signature
        (with `jit_compile`, `serve_tokens` has a list: one more request per compiled length)."""
        texts = np.array([t.encode() for t in WARMUP_TEXTS], dtype=object)
        rows, tokens = _padded_tokens([pack_ids(tokenizer.encode_with_masks(t), None,
                                                self.max_seq_length, tokenizer)
                                       for t in WARMUP_TEXTS])
        examples = np.array([example_of(r) for r in rows], dtype=object)
        out = {"serve_text_pair": {"text": texts, "text_b": texts[::-1].copy()},
               "serve_tokens": tokens, "serve_examples": {"examples": examples}}
        out["serving_default"] = out["serve_text_pair"] if self.text_pair else {"text": texts}
        out.update(self.head_warmup(texts, examples))
        if self.jit_compile:  # one row of each compiled length: compiled at load, not on a user
            filler = tokenizer.encode(WARMUP_TEXTS[0])[0]
            out["serve_tokens"] = [out["serve_tokens"]] + [
                {F.INPUT_IDS: np.array([[tokenizer.cls_id] + [filler] * (n - 2)
                                        + [tokenizer.sep_id]], np.int32),
                 F.INPUT_MASK: np.ones((1, n), np.int32),
                 F.SEGMENT_IDS: np.zeros((1, n), np.int32)}
                for n in self._one_row.value.lengths()]
        return out

    def head_warmup(self, texts, examples) -> dict:
        """Warmup requests of the head's own signatures (none for a backbone)."""
        return {}

    def _check_tokens(self, features, subject="row"):
        """`checked_tokens` for this module's model (TFLite's module keeps fewer checks)."""
        return checked_tokens(self._config, features, subject)

    def outputs_from_tokens(self, features):
        """The signature outputs of int32 token features (see module docstring)."""
        features = self._check_tokens(features)
        inputs = {name: features[name] for name in F.BACKBONE_INPUTS}
        backbone_out = self._backbone_outputs(inputs)
        out = dict(inputs)
        out.update(self.head_outputs(inputs, backbone_out))
        if self.hidden_states:
            for i, h in enumerate(backbone_out["hidden_states"]):
                out[f"hidden_state_{i}"] = h
        return out

    def _backbone_outputs(self, inputs) -> dict:
        """The backbone's pooled and sequence outputs (and hidden states when exported), one
        row through the compiled function when `jit_compile`."""
        backbone = backbone_of(self._model.value)

        def graph():
            out = backbone(inputs, training=False)
            return {key: out[key] for key in self._backbone_keys()}

        if not self.jit_compile:
            return graph()
        return tf.cond(tf.equal(tf.shape(inputs[F.INPUT_IDS])[0], 1),
                       lambda: self._one_row.value(inputs), graph)

    def _backbone_keys(self) -> tuple:
        return ("pooled_output", "sequence_output") + (
            ("hidden_states",) if self.hidden_states else ())

    def head_outputs(self, inputs, backbone_out) -> dict:
        """The head's outputs from the backbone's (a backbone: its pooled and sequence output)."""
        return {"pooled_output": backbone_out["pooled_output"],
                "sequence_output": backbone_out["sequence_output"]}

    # -----------------------------------------------------------------------------------------
    def _encode(self, text, text_b=None, encode=None):
        encode = encode or self.tokenizer.encode_with_masks
        checks = [lambda: _refuse_empty(tf.size(text), "texts")]
        if text_b is not None:
            checks.append(lambda: tf.debugging.assert_equal(tf.shape(text), tf.shape(text_b),
                                                            message=(
                "text and text_b must have the same batch size")))
        text, text_b = _after(checks, [text, text_b])
        ids_a = encode(text)
        ids_b = None if text_b is None else encode(text_b)
        return ids_a, ids_b

    def tokens_from_text(self, text, text_b=None, encode=None):
        return pack_in_graph(*self._encode(text, text_b, encode), self.max_seq_length,
                             special=self.tokenizer)

    def text_outputs(self, outputs, text, text_b=None, encode=None) -> dict:
        """`outputs` (token features -> outputs) of the packed text, and what packing did:
        `num_tokens` [batch] (the packed length before truncation, [CLS] and [SEP]s included),
        `truncated` (num_tokens > max_seq_length: the model saw a cut text) and
        `max_seq_length` [batch] (the limit, so any answer tells a client the model's)."""
        ids_a, ids_b = self._encode(text, text_b, encode)
        out = dict(outputs(pack_in_graph(ids_a, ids_b, self.max_seq_length,
                                         special=self.tokenizer)))
        num = tf.cast(packed_length(ids_a.row_lengths(),
                                    None if ids_b is None else ids_b.row_lengths()), tf.int32)
        out.update(num_tokens=num, truncated=num > self.max_seq_length,
                   max_seq_length=tf.fill(tf.shape(num), self.max_seq_length))
        return out

    def tokens_from_examples(self, serialized, encode=None):
        """Token features of serialized tf.Examples (`tokens_of_examples`: official token
        features or raw text, each refused by name when malformed)."""
        return tokens_of_examples(serialized, self._config,
                                  lambda text, text_b: self.tokens_from_text(text, text_b,
                                                                             encode))

    # -----------------------------------------------------------------------------------------
    def _function(self, fn):
        """`tf.function(fn)` without AutoGraph: the serving code branches on Python values only,
        and converting it cost about a third of an export's tracing."""
        return tf.function(fn, autograph=False)

    def _text_signature(self, fn, *specs):
        """`fn` traced on `specs` (TensorSpecs named as the signature's inputs) as a signature
        whose string inputs are checked first: each has its spec's rank (`_refuse_rank`,
        naming the input), whatever shape a client feeds. Every signature that takes strings
        (raw text, serialized tf.Examples) is made here."""
        def checked(*inputs):
            inputs = _after([lambda tensor=tensor, spec=spec: _refuse_rank(
                tensor, spec.name, spec.shape.rank) for tensor, spec in zip(inputs, specs)
                if spec.dtype == tf.string], list(inputs))
            return fn(*inputs)

        return self._function(checked).get_concrete_function(*specs)

    def _tokens_function(self, method, token_spec):
        """`method` (token features -> outputs) as one traced function that every signature
        calls: the model is traced once per export, not once per signature (the signatures'
        graphs call it; TF inlines the call when it loads them)."""
        return self._function(lambda input_ids, input_mask, segment_ids: method(
            {F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask, F.SEGMENT_IDS: segment_ids})
        ).get_concrete_function(*(token_spec(name) for name in F.BACKBONE_INPUTS))

    @staticmethod
    def _on_features(body, features):
        """`body` (a `_tokens_function`) called on a features dict."""
        return body(*(features[name] for name in F.BACKBONE_INPUTS))

    def signatures(self) -> dict:
        """{signature name: concrete function}, ready for `tf.saved_model.save`."""
        body = self._tokens_function(self.outputs_from_tokens, _token_spec)

        def outputs(features):
            return self._on_features(body, features)

        encode = self._function(self.tokenizer.encode_with_masks).get_concrete_function(
            _string_spec(TEXT))
        # Each piece traced once and called by the signatures that need it.
        text = self._text_signature(lambda text: self.text_outputs(
            outputs, text, None, encode), _string_spec(TEXT))
        pair = self._text_signature(lambda text, text_b: self.text_outputs(
            outputs, text, text_b, encode), _string_spec(TEXT), _string_spec(TEXT_B))
        examples = self._text_signature(lambda examples: outputs(self.tokens_from_examples(
            examples, encode)), _string_spec(EXAMPLES))
        signatures = {"serving_default": pair if self.text_pair else text,
                      "serve_text_pair": pair, "serve_tokens": body, "serve_examples": examples}
        signatures.update(self.head_signatures(text, examples))
        return signatures

    def head_signatures(self, text, examples) -> dict:
        """The head's own signatures, from the traced `text` and `examples` functions."""
        return {}


# ---------------------------------------------------------------------------------------------
# Fine-tuned task models whose text inputs are not one or two segments.
QUESTION, CONTEXT, ARTICLE, OPTIONS = "question", "context", "article", "options"


def signature_method_names(signatures) -> dict:
    """{signature name: TF Serving method name} for the signatures that are not predict."""
    return {name: {"classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}[name]
            for name in signatures if name in ("classify", "regress")}
