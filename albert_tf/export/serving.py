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
from albert_tf.models.backbone import AlbertBackbone, padded_computation, set_remove_padding
from albert_tf.models.kinds import backbone_of
from albert_tf.models.classifier import AlbertClassifier
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.models.task_models import AlbertMultipleChoice, AlbertSpanModel, AlbertSquadV2
from albert_tf.records import example_of
from albert_tf.packing import pack_ids, pack_in_graph, packed_length, pad_features
from albert_tf.tokenization import in_graph_tokenizer
from albert_tf.tokenization.in_graph import _whitespace_class
from albert_tf.tasks.race import LABELS, RacePreprocessor
from albert_tf.tasks.squad import (align_context_in_graph, decode_beam_in_graph, decode_in_graph,
                                   windows_in_graph)

TEXT, TEXT_B, EXAMPLES = "text", "text_b", "examples"
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
WARMUP_QUESTIONS = ("What does ALBERT share across its layers?", "What is the capital of France?")
WARMUP_CONTEXTS = ("ALBERT shares one transformer block across all of its layers, and it "
                   "factorizes the embedding into two smaller matrices.",
                   "Paris is the capital and most populous city of France.")
WARMUP_OPTIONS = (("one transformer block", "its vocabulary", "nothing", "the optimizer"),
                  ("Lyon", "Paris", "Nice", "Lille"))


def _padded_tokens(packed) -> tuple[list, dict]:
    """(padded rows, {input name: int32 [batch, longest]}) of (ids, segment ids) pairs."""
    length = max(len(ids) for ids, _ in packed)
    rows = [pad_features(ids, seg, length) for ids, seg in packed]
    return rows, {name: np.array([r[name] for r in rows], np.int32) for name in F.BACKBONE_INPUTS}


def _question_context_warmup(tokenizer, max_seq_length: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """(tokens, questions, contexts) of the warmup questions about the warmup contexts."""
    _, tokens = _padded_tokens([pack_ids(tokenizer.encode(q), tokenizer.encode(c), max_seq_length,
                                         tokenizer)
                                for q, c in zip(WARMUP_QUESTIONS, WARMUP_CONTEXTS)])
    return (tokens, np.array([q.encode() for q in WARMUP_QUESTIONS], dtype=object),
            np.array([c.encode() for c in WARMUP_CONTEXTS], dtype=object))


def _string_spec(name):
    return tf.TensorSpec([None], tf.string, name=name)


def _token_spec(name):
    return tf.TensorSpec([None, None], tf.int32, name=name)


class _Untracked:
    """Holds an object out of `tf.Module` tracking (a plain Python object is not traversed)."""

    def __init__(self, value):
        self.value = value


def _tf_variable(variable):
    value = getattr(variable, "value", variable)  # keras.Variable -> its tf.Variable
    if not isinstance(value, tf.Variable):
        raise TypeError(f"{variable.path if hasattr(variable, 'path') else variable} is not "
                        "backed by a tf.Variable")
    return value


# ---------------------------------------------------------------------------------------------
# Request validation. Each rule is an assertion (an InvalidArgumentError, whose text TF Serving
# returns to the client) naming the input, the offending rows and the rule; the rules of a
# request run one after the other, so a request that breaks several gets the first one's error,
# and the model runs only on a request that breaks none.
def _in_order(checks):
    """The assertions made by `checks` (functions of no arguments, each returning an assertion
    op or None), each made to run after the one before it passed. Returns the last one."""
    last = None
    for make in checks:
        with tf.control_dependencies([] if last is None else [last]):
            op = make()
            last = last if op is None else op
    return last


def _after(checks, tensors):
    """`tensors` (a list; None entries kept) once `checks` (see `_in_order`) have passed."""
    last = _in_order(checks)
    with tf.control_dependencies([] if last is None else [last]):
        return [None if t is None else tf.identity(t) for t in tensors]


def _refuse_rows(bad, subject, rule):
    """An assertion that no entry of `bad` (bool [rows]) is true; the error reads
    "<subject> [i j ...]: <rule>" with the offending rows, 0-based."""
    rows = tf.cast(tf.where(bad)[:, 0], tf.int32)
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [tf.strings.format(
        f"{subject} {{}}: {rule}", rows, summarize=10)])


def _runtime_rank(tensor):
    """The rank of `tensor` as fed, read from values at run time. A signature's placeholder has
    the rank of its spec, so TensorFlow folds `tf.rank` (and the size of `tf.shape`) to that
    rank in the graph, while TF Serving, and a loaded SavedModel's signature, feed a tensor of
    any shape: the shape vector passes through SerializeTensor/ParseTensor, whose output has no
    static shape, so its size is computed from what was fed."""
    return tf.size(tf.io.parse_tensor(tf.io.serialize_tensor(tf.shape(tensor)), tf.int32))


def _refuse_rank(tensor, name, rank):
    """An assertion that the string input `name` has rank `rank` (1: a [batch] of texts or
    serialized examples; 2: [batch, n]); the error reads "text must be a 1-D batch of strings
    (shape [batch]); got shape [2,2]". Without it a [2, 2] text failed inside StringSplit
    ("input must be a vector, got shape: [2,2]"), naming no input."""
    layout = "[batch]" if rank == 1 else "[batch, " + ", ".join("n" * (rank - 1)) + "]"
    shape = tf.strings.reduce_join(tf.strings.as_string(tf.shape(tensor)), separator=",")
    return tf.debugging.Assert(tf.equal(_runtime_rank(tensor), rank), [tf.strings.join([
        f"{name} must be a {rank}-D batch of strings (shape {layout}); got shape [", shape,
        "]"])])


def _refuse_empty(batch_size, what):
    """An assertion that the request holds at least one row (`what`: "texts", "examples"...)."""
    return tf.debugging.Assert(batch_size > 0, [f"the request holds no {what}: send one or more"])


def _token_checks(config, ids, mask, segments, subject="row"):
    """The rules of token features (dense [rows, length], int32 or int64, checked in the dtype
    they came in, before any cast: an int64 id 2**32 + 10 is refused, not served as 10), as
    `_in_order` checks: 0 <= input_ids < vocab_size, 0 <= segment_ids < type_vocab_size, and
    input_mask 1 on the row's first tokens and 0 after them (values 0 or 1, at least one 1, no 1
    after a 0), as every packer writes it: the model attends to the tokens of mask 1, so a mask
    of other values, all zeros or with holes would be answered, wrongly."""
    def refuse(bad, rule):
        return lambda: _refuse_rows(tf.reduce_any(bad, axis=1), subject, rule)

    ones = tf.reduce_sum(mask, axis=1, keepdims=True)  # read only once the values are 0 or 1
    positions = tf.range(tf.shape(mask, out_type=mask.dtype)[1])
    prefix = tf.cast(positions[tf.newaxis, :] < ones, mask.dtype)
    return [
        refuse(ids < 0, "input_ids must be >= 0"),
        refuse(ids >= config.vocab_size, f"input_ids must be < vocab_size={config.vocab_size}"),
        refuse(segments < 0, "segment_ids must be >= 0"),
        refuse(segments >= config.type_vocab_size,
               f"segment_ids must be < type_vocab_size={config.type_vocab_size}"),
        refuse(tf.logical_and(tf.not_equal(mask, 0), tf.not_equal(mask, 1)),
               "input_mask values must be 0 or 1"),
        lambda: _refuse_rows(ones[:, 0] < 1, subject,
                             "input_mask has no 1: a row needs at least one token"),
        refuse(tf.not_equal(mask, prefix), "input_mask must be 1s then 0s: 1 on the tokens of "
               "the row from position 0, 0 on the padding after them, no 1 after a 0"),
    ]


def checked_tokens(cfg, features, subject="row"):
    """`features` behind the checks of a token request to the model of `cfg`: clear errors
    for token inputs the model cannot take (instead of a gather error or a wrong answer): an
    empty request, shapes, the length limit and `_token_checks`' rules, in that order;
    `subject` names a row in the errors."""
    ids, mask, seg = (features[F.INPUT_IDS], features[F.INPUT_MASK],
                      features[F.SEGMENT_IDS])
    length = tf.shape(ids)[1]
    checks = [
        lambda: _refuse_empty(tf.shape(ids)[0], "rows"),
        lambda: tf.debugging.assert_equal(tf.shape(ids), tf.shape(mask), message=(
            "input_mask must have the shape of input_ids")),
        lambda: tf.debugging.assert_equal(tf.shape(ids), tf.shape(seg), message=(
            "segment_ids must have the shape of input_ids")),
        lambda: tf.debugging.assert_less_equal(length, cfg.max_position_embeddings, message=(
            f"sequence length exceeds max_position_embeddings="
            f"{cfg.max_position_embeddings} of the model")),
        *_token_checks(cfg, ids, mask, seg, subject),
    ]
    return dict(zip(F.BACKBONE_INPUTS, _after(checks, [features[name] for name in
                                                       F.BACKBONE_INPUTS])))


def tokens_of_examples(serialized, config, tokens_from_text):
    """Token features of serialized tf.Examples (`AlbertServingModule.tokens_from_examples`):
    the official int64 features `input_ids`, `input_mask`, `segment_ids` (any length, padded
    per batch), or raw text in a bytes feature `text` (and `text_b` for a pair), tokenized and
    packed by `tokens_from_text(text, text_b)` as the text signatures do; the examples of one
    request carry one kind or the other.

    Refused, each with an error naming the serialized examples (0-based) and the rule: an
    empty request; an example with neither kind (random bytes that parse as a tf.Example,
    an Example of other features; bytes that do not parse at all get the parser's error,
    "Could not parse example input") or both; a request mixing the kinds; `text` with
    other than exactly one value, `text_b` with more than one, `text_b` in some text
    examples of a request and not in others (each would be packed otherwise than alone);
    token features of different lengths, and the token rules of `serve_tokens`, checked on
    the int64 values before they are cast to int32 (`_token_checks`)."""
    spec = {name: tf.io.RaggedFeature(tf.int64) for name in F.BACKBONE_INPUTS}
    spec.update({TEXT: tf.io.RaggedFeature(tf.string), TEXT_B: tf.io.RaggedFeature(tf.string)})
    parsed = tf.io.parse_example(serialized, spec)
    count = {name: parsed[name].row_lengths() for name in spec}
    has_text = (count[TEXT] > 0) | (count[TEXT_B] > 0)
    has_tokens = (count[F.INPUT_IDS] > 0) | (count[F.INPUT_MASK] > 0) | (
        count[F.SEGMENT_IDS] > 0)
    has_b = count[TEXT_B] > 0
    example = "serialized example"
    checks = [
        lambda: _refuse_empty(tf.size(serialized), "examples"),
        lambda: _refuse_rows(~has_text & ~has_tokens, example, (
            "not a tf.Example with a bytes feature text (and text_b) or the int64 features "
            "input_ids, input_mask, segment_ids")),
        lambda: _refuse_rows(has_text & has_tokens, example, (
            "carries both text and token features; an example carries one or the other")),
        lambda: tf.debugging.Assert(
            tf.equal(tf.reduce_all(has_text), tf.reduce_any(has_text)),
            ["the examples of a request must all carry text or all carry token features"]),
        lambda: _refuse_rows(has_text & tf.not_equal(count[TEXT], 1), example, (
            "its feature text must hold exactly one string")),
        lambda: _refuse_rows(count[TEXT_B] > 1, example, (
            "its feature text_b must hold at most one string")),
        lambda: _refuse_rows(has_text & ~has_b & tf.reduce_any(has_b), example, (
            "has no feature text_b while other examples of the request have one; the "
            "text examples of a request must all carry text_b or none")),
        *(lambda name=name: _refuse_rows(
            tf.not_equal(count[name], count[F.INPUT_IDS]), example,
            f"its {name} must have as many values as its input_ids")
          for name in (F.INPUT_MASK, F.SEGMENT_IDS)),
    ]

    def from_tokens():
        tokens = [parsed[name].to_tensor(0) for name in F.BACKBONE_INPUTS]  # int64
        tokens = _after(_token_checks(config, *tokens, example), tokens)
        return {name: tf.cast(t, tf.int32) for name, t in zip(F.BACKBONE_INPUTS, tokens)}

    def from_text():
        text = parsed[TEXT].to_tensor("")[:, 0]
        text_b = parsed[TEXT_B].to_tensor("", shape=[None, 1])[:, 0]
        return tf.cond(tf.reduce_any(parsed[TEXT_B].row_lengths() > 0),
                       lambda: tokens_from_text(text, text_b),
                       lambda: tokens_from_text(text, None))

    with tf.control_dependencies([_in_order(checks)]):
        return tf.cond(tf.reduce_any(has_text), from_text, from_tokens)


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


@serves(AlbertPretrainer)
class PretrainerServingModule(AlbertServingModule):
    """An `AlbertPretrainer`: the backbone's outputs, fill-mask for each [MASK], and the
    `fill_mask` signature."""

    FILL_MASK = True
    QUALITY_OUTPUTS = ("fill_mask_probabilities", "fill_mask_ids")

    def _fill_mask(self, input_ids, mlm_logits_fn):
        positions = tf.ragged.boolean_mask(
            tf.broadcast_to(tf.range(tf.shape(input_ids)[1]), tf.shape(input_ids)),
            tf.equal(input_ids, -1 if self.tokenizer.mask_id is None  # no [MASK]: none to
                     else self.tokenizer.mask_id))                            # fill
        positions = positions.to_tensor(-1)  # [batch, M]
        valid = positions >= 0
        logits = mlm_logits_fn(tf.maximum(positions, 0))  # [batch, M, V]
        probabilities, ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=self.top_k)
        valid_k = tf.broadcast_to(valid[:, :, None], tf.shape(ids))
        ids = tf.where(valid_k, ids, -1)
        return {
            "mask_positions": positions,
            "fill_mask_ids": ids,
            "fill_mask_pieces": tf.where(valid_k, self.tokenizer.id_to_piece(tf.maximum(ids, 0)),
                                         ""),
            "fill_mask_probabilities": tf.where(valid_k, probabilities, 0.0),
        }

    def head_warmup(self, texts, examples) -> dict:
        return {"fill_mask": {"text": texts}}

    def head_outputs(self, inputs, backbone_out) -> dict:
        model = self._model.value

        def mlm_logits(positions):
            return model.mlm_head(backbone_out["sequence_output"], positions, training=False)

        return {**self._fill_mask(inputs[F.INPUT_IDS], mlm_logits),
                **super().head_outputs(inputs, backbone_out)}

    def head_signatures(self, text, examples) -> dict:
        # only the fill-mask outputs (REST returns every output)
        return {"fill_mask": self._text_signature(
            lambda text_in: {k: v for k, v in text(text_in).items() if k in FILL_MASK_OUTPUTS},
            _string_spec(TEXT))}


@serves(AlbertClassifier)
class ClassifierServingModule(AlbertServingModule):
    """An `AlbertClassifier`: logits, probabilities and label (regression: score), TF
    Serving's `classify` / `regress` and the official `official_serving_default`."""

    SERVES_THRESHOLD = True
    QUALITY_OUTPUTS = ("probabilities", "label")
    # `label_name` beside `label` when the class names are known at export (TFLite: off)
    LABEL_NAME_OUTPUT = True

    def head_warmup(self, texts, examples) -> dict:
        return {"regress" if self.num_labels == 1 else "classify": {"inputs": examples},
                OFFICIAL_SIGNATURE: {OFFICIAL_INPUT: examples}}

    def head_outputs(self, inputs, backbone_out) -> dict:
        logits = tf.cast(self._model.value.classifier_head(backbone_out["pooled_output"]),
                         tf.float32)
        out = {"logits": logits}
        if self.num_labels == 1:
            out["score"] = logits[:, 0]
        else:
            out["probabilities"] = tf.nn.softmax(logits, axis=-1)
            out["label"] = tf.argmax(logits, axis=-1, output_type=tf.int32)
            if self.named_labels and self.LABEL_NAME_OUTPUT:
                # What a predict client (TF Serving's REST `predict` on serving_default) reads
                # for the class: its name, as `classify` names them.
                out["label_name"] = tf.gather(tf.constant(self.labels, tf.string), out["label"])
        if self.threshold is not None:
            out["threshold"] = tf.fill(tf.shape(logits)[:1], self.threshold)
        return out

    def official_outputs(self, outputs):
        """The official classifier export's outputs from a classifier's `outputs`: softmax
        `probabilities` [batch, C] and their argmax `predictions` (int32); for one output
        (STS-B) `probabilities` is the logits [batch, 1] and `predictions` [batch] their values,
        as official `create_model`; with a threshold, `threshold` (a scalar, as the official
        `_add_threshold_to_model_fn` adds it)."""
        if self.num_labels == 1:
            out = {"probabilities": outputs["logits"], "predictions": outputs["score"]}
        else:
            out = {"probabilities": outputs["probabilities"],
                   "predictions": tf.argmax(outputs["probabilities"], axis=-1,
                                            output_type=tf.int32)}
        if self.threshold is not None:
            out["threshold"] = tf.constant(self.threshold, tf.float32)
        return out

    def head_signatures(self, text, examples) -> dict:
        signatures = {}
        if self.num_labels == 1:
            signatures["regress"] = self._text_signature(
                lambda inputs: {"outputs": examples(inputs)["score"]}, _string_spec("inputs"))
        else:
            signatures["classify"] = self._text_signature(lambda inputs: {
                "classes": tf.tile(tf.constant([self.labels], tf.string),
                                   [tf.shape(inputs)[0], 1]),
                "scores": examples(inputs)["probabilities"]}, _string_spec("inputs"))
        signatures[OFFICIAL_SIGNATURE] = self._text_signature(
            lambda input: self.official_outputs(examples(input)), _string_spec(OFFICIAL_INPUT))
        return signatures


# ---------------------------------------------------------------------------------------------
# Fine-tuned task models whose text inputs are not one or two segments.
QUESTION, CONTEXT, ARTICLE, OPTIONS = "question", "context", "article", "options"


@serves(AlbertSpanModel)
class SpanServingModule(AlbertServingModule):
    """A SQuAD span model (`albert_tf.tasks.squad.span_model`) answering questions about raw text.

    Signatures:
    - `serving_default`: `question`, `context` (string [batch]). In-graph, as
      `run_squad_v1`/`run_squad_v2` predict: the context's pieces aligned to its characters
      (`albert_tf.tasks.squad.align_context_in_graph`), the question's first `max_query_length`
      pieces, windows of the context every `doc_stride` pieces, the best span of at most
      `max_answer_length` pieces among each window's top `n_best_size` starts and ends, the
      best window. Outputs [batch]: `answer` (the context's own characters; "" when no span
      is valid, or for a SQuAD 2.0 model when `null_odds` >= `null_score_diff_threshold`, as
      official),
      `answer_start`, `answer_end` (character offsets in the context, end exclusive; -1 with no
      answer), `score` (start + end logit of the span), `null_odds` (null score minus `score`,
      as `null_odds.json`), `num_windows`.
    - `serve_tokens`: `input_ids`, `input_mask`, `segment_ids` [batch, length] ->
      `start_logits`, `end_logits` [batch, length].
    """

    OPTIONS = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
               "null_score_diff_threshold")
    EXPORT_FLAGS = OPTIONS
    NAMED_LABELS = False  # its answers are spans of the context
    # The official SQuAD code aligns answers on SentencePiece pieces.
    SENTENCEPIECE_ONLY = True
    TEXT_MODULE = False

    def __init__(self, model, spm_model_proto, do_lower_case=True, max_seq_length=384,
                 doc_stride=128, max_query_length=64, n_best_size=20, max_answer_length=30,
                 null_score_diff_threshold=None, remove_padding=True):
        super().__init__(model, spm_model_proto, do_lower_case=do_lower_case,
                         max_seq_length=max_seq_length, remove_padding=remove_padding)
        if not 1 <= max_query_length <= max_seq_length - 4:
            raise ValueError(f"max_query_length={max_query_length} must be between 1 and "
                             f"max_seq_length - 4 = {max_seq_length - 4} (a window needs room "
                             "for [CLS], [SEP], a context piece and [SEP]).")
        for name, value in (("doc_stride", doc_stride), ("n_best_size", n_best_size),
                            ("max_answer_length", max_answer_length)):
            if value < 1:
                raise ValueError(f"{name} must be positive; got {value}.")
        self.doc_stride = int(doc_stride)
        self.max_query_length = int(max_query_length)
        self.n_best_size = int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.null_score_diff_threshold = (None if null_score_diff_threshold is None
                                          else float(null_score_diff_threshold))
        self._whitespace = _whitespace_class()  # an answer's surrounding whitespace, stripped

    def warmup_inputs(self, tokenizer) -> dict:
        tokens, questions, contexts = _question_context_warmup(tokenizer, self.max_seq_length)
        return {"serving_default": {"question": questions, "context": contexts},
                "serve_tokens": tokens}

    def logits_from_tokens(self, features):
        features = self._check_tokens(features)
        out = self._model.value({name: features[name] for name in F.BACKBONE_INPUTS},
                                training=False)
        return {"start_logits": tf.cast(out["start_logits"], tf.float32),
                "end_logits": tf.cast(out["end_logits"], tf.float32)}

    def answer(self, question, context, logits_from_tokens=None):
        question, context = _after([
            lambda: _refuse_empty(tf.size(question), "questions"),
            lambda: tf.debugging.assert_equal(tf.shape(question), tf.shape(context), message=(
                "question and context must have the same batch size"))], [question, context])
        text, ids, starts, ends = align_context_in_graph(context, self.tokenizer)
        query = self.tokenizer(question)[:, :self.max_query_length]
        windows = windows_in_graph(query, ids, self.max_seq_length, self.doc_stride)
        logits = (logits_from_tokens or self.logits_from_tokens)(
            {name: windows[name] for name in F.BACKBONE_INPUTS})
        batch = tf.shape(question, out_type=tf.int64)[0]
        best = self.decode(logits, windows, batch)
        found = best["score"] > float("-inf")
        if self.null_score_diff_threshold is not None:
            found &= best["null_odds"] < self.null_score_diff_threshold  # official: "" at >=
        rows = tf.range(batch)

        def offset(offsets, piece):
            """The byte offset of each found answer's `piece`; 0 where none was found (an empty
            context has no piece: the last row's index would fall past the end)."""
            values = tf.concat([offsets.flat_values, tf.zeros([1], offsets.flat_values.dtype)],
                               axis=0)
            index = tf.gather(offsets.row_starts(), rows) + piece
            return tf.gather(values, tf.where(found, index, tf.size(offsets.flat_values,
                                                                    out_type=index.dtype)))

        begin, end = offset(starts, best["first"]), offset(ends, best["last"])
        # The whitespace around the pieces' characters stripped, as the official
        # `final_text = ....strip()` (and `predict_answers`).
        raw = tf.strings.substr(text, begin, end - begin)
        left = tf.strings.regex_replace(raw, f"^{self._whitespace}+", "")
        begin += tf.cast(tf.strings.length(raw) - tf.strings.length(left), begin.dtype)
        end = begin + tf.cast(tf.strings.length(tf.strings.regex_replace(
            left, f"{self._whitespace}+$", "")), begin.dtype)

        def characters(byte_offset):
            return tf.strings.length(tf.strings.substr(text, tf.zeros_like(byte_offset),
                                                       byte_offset), unit="UTF8_CHAR")

        return {"answer": tf.where(found, tf.strings.substr(text, begin, end - begin), ""),
                "answer_start": tf.where(found, characters(begin), -1),
                "answer_end": tf.where(found, characters(end), -1),
                "score": best["score"], "null_odds": best["null_odds"],
                "num_windows": tf.math.bincount(tf.cast(windows["example"], tf.int32),
                                                minlength=tf.cast(batch, tf.int32),
                                                maxlength=tf.cast(batch, tf.int32))}

    def decode(self, outputs, windows, batch):
        """The best span of each question over its windows (`decode_in_graph`)."""
        return decode_in_graph(outputs["start_logits"], outputs["end_logits"], windows, batch,
                               self.n_best_size, self.max_answer_length)

    def signatures(self) -> dict:
        body = self._tokens_function(self.logits_from_tokens, _token_spec)
        return {
            "serving_default": self._text_signature(lambda question, context: self.answer(
                question, context, lambda features: self._on_features(body, features)),
                _string_spec(QUESTION), _string_spec(CONTEXT)),
            "serve_tokens": body,
        }


@serves(AlbertSquadV2)
class SquadV2ServingModule(SpanServingModule):
    """The official ALBERT SQuAD 2.0 model (`albert_tf.models.task_models.AlbertSquadV2`) answering
    questions about raw text, as `run_squad_v2 --v2_head answer_class` predicts: the windows
    of `SpanServingModule`, the model's beam of starts and ends in each, the best valid span
    over the windows (`decode_beam_in_graph`, the rules of `predict_answers_v2`), and "" where
    the null score (the smallest `cls_logits` of the question's windows, output `null_odds`)
    reaches `null_score_diff_threshold` (>=, as official). `serve_tokens` returns the beam
    outputs
    (`start_top_log_probs`, `start_top_index`, `end_top_log_probs`, `end_top_index`,
    `cls_logits`)."""

    OPTIONS = ("doc_stride", "max_query_length", "max_answer_length",
               "null_score_diff_threshold", "start_n_top", "end_n_top")
    EXPORT_FLAGS = ()  # the module's defaults and the model's beam (the record keeps them)

    def __init__(self, model, spm_model_proto, do_lower_case=True, max_seq_length=384,
                 doc_stride=128, max_query_length=64, max_answer_length=30,
                 null_score_diff_threshold=0.0, start_n_top=None, end_n_top=None,
                 remove_padding=True):
        if start_n_top is not None:
            model.start_n_top = int(start_n_top)
        if end_n_top is not None:
            model.end_n_top = int(end_n_top)
        super().__init__(model, spm_model_proto, do_lower_case, max_seq_length, doc_stride,
                         max_query_length, 1, max_answer_length, null_score_diff_threshold,
                         remove_padding)
        self.start_n_top, self.end_n_top = model.start_n_top, model.end_n_top

    def logits_from_tokens(self, features):
        features = self._check_tokens(features)
        out = self._model.value({name: features[name] for name in F.BACKBONE_INPUTS},
                                training=False)
        return {name: out[name] for name in ("start_top_log_probs", "start_top_index",
                                             "end_top_log_probs", "end_top_index",
                                             "cls_logits")}

    def decode(self, outputs, windows, batch):
        return decode_beam_in_graph(outputs, windows, batch, self.max_answer_length)


@serves(AlbertMultipleChoice)
class MultipleChoiceServingModule(AlbertServingModule):
    """A RACE multiple-choice model (`albert_tf.tasks.race.multiple_choice_model`) on raw text.

    Signatures:
    - `serving_default`: `article`, `question` (string [batch]), `options` (string [batch,
      num_choices]). `albert_tf.tasks.race.RacePreprocessor`, the packing of the records:
      each option's second segment (the question with its `_` blanks filled by the option,
      else question + " " + option), its last `max_qa_length` pieces, the article cut to fit,
      `[CLS] article [SEP] qa [SEP]` per option, padded to the batch's longest. Outputs: `logits`,
      `probabilities` [batch, num_choices], `label` [batch] (index of the best option),
      `answer` [batch] (its letter, "A"...).
    - `serve_tokens`: `input_ids`, `input_mask`, `segment_ids` [batch, num_choices, length] ->
      the same outputs.
    """

    OPTIONS = ("max_qa_length",)
    EXPORT_FLAGS = OPTIONS
    TEXT_MODULE = False

    def __init__(self, model, spm_model_proto, do_lower_case=True, max_seq_length=512,
                 max_qa_length=128, labels=None, remove_padding=True):
        super().__init__(model, spm_model_proto, do_lower_case=do_lower_case,
                         max_seq_length=max_seq_length,
                         labels=labels or list(LABELS[:model.num_labels]),
                         remove_padding=remove_padding)
        self.preprocessor = RacePreprocessor(self.tokenizer, max_seq_length, max_qa_length,
                                             self.num_labels)
        self.max_qa_length = self.preprocessor.max_qa_length

    def warmup_inputs(self, tokenizer) -> dict:
        tokens, questions, contexts = _question_context_warmup(tokenizer, self.max_seq_length)
        choices = self.num_labels
        options = np.array([[o.encode() for o in (list(row) * choices)[:choices]]
                            for row in WARMUP_OPTIONS], dtype=object)
        return {"serving_default": {"article": contexts, "question": questions,
                                    "options": options},
                "serve_tokens": {name: np.repeat(t[:, None, :], choices, axis=1)
                                 for name, t in tokens.items()}}

    def outputs_from_tokens(self, features):
        def rows(tokens):  # [batch, choices, length] -> [batch * choices, length]
            shape = tf.shape(tokens)
            return tf.reshape(tokens, tf.stack([shape[0] * shape[1], shape[2]]))

        flat = {name: rows(features[name]) for name in F.BACKBONE_INPUTS}
        choices = self.num_labels
        checked = self._check_tokens(flat, f"row (question * {choices} + option)")
        with tf.control_dependencies([tf.debugging.assert_equal(
                tf.shape(features[F.INPUT_IDS])[1], choices, message=(
                    f"the model takes {choices} options per question"))]):
            inputs = {name: tf.reshape(checked[name], tf.shape(features[name]))
                      for name in F.BACKBONE_INPUTS}
        logits = tf.cast(self._model.value(inputs, training=False)["logits"], tf.float32)
        label = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "label": label, "answer": tf.gather(tf.constant(self.labels), label)}

    def tokens_from_text(self, article, question, options):
        choices = self.num_labels
        article, question, options = _after([
            lambda: _refuse_empty(tf.size(article), "articles"),
            lambda: tf.debugging.assert_equal(tf.shape(options), tf.stack(
                [tf.shape(article)[0], choices]), message=(
                    f"options must be [batch, {choices}] for [batch] articles")),
            lambda: tf.debugging.assert_equal(tf.shape(question), tf.shape(article), message=(
                "article and question must have the same batch size"))],
            [article, question, options])
        features = self.preprocessor(article, question, options)
        return {name: features[name] for name in F.BACKBONE_INPUTS}

    def signatures(self) -> dict:
        choice_spec = lambda name: tf.TensorSpec([None, None, None], tf.int32, name=name)  # noqa: E731
        body = self._tokens_function(self.outputs_from_tokens, choice_spec)
        return {
            "serving_default": self._text_signature(
                lambda article, question, options: self._on_features(
                    body, self.tokens_from_text(article, question, options)),
                _string_spec(ARTICLE), _string_spec(QUESTION),
                tf.TensorSpec([None, None], tf.string, name=OPTIONS)),
            "serve_tokens": body,
        }


def signature_method_names(signatures) -> dict:
    """{signature name: TF Serving method name} for the signatures that are not predict."""
    return {name: {"classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}[name]
            for name in signatures if name in ("classify", "regress")}
