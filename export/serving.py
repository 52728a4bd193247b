"""The serving module: one `tf.Module` per exported model, with the signatures TF Serving calls.

Signatures (all batch-major; every int is int32):

- `serving_default`: `text` (string [batch]) - raw text; or `text` and `text_b` for a model
  exported with `text_pair=True`. Tokenized in-graph (`albert_tf.tokenization.InGraphTokenizer`,
  the one tokenizer's normalization), each literal "[MASK]" becoming the [MASK] id, packed and
  truncated by `albert_tf.packing` (longest first, from the end), padded to the longest row of the
  batch (at most `max_seq_length`).
- `serve_text_pair`: `text`, `text_b` (exported for every model).
- `serve_tokens`: `input_ids`, `input_mask`, `segment_ids` [batch, length].
- `serve_examples`: `examples` (string [batch]) - serialized `tf.train.Example`s with the official
  int64 features `input_ids`, `input_mask`, `segment_ids` (any length up to the model's
  `max_position_embeddings`; padded per batch).
- classifiers: `classify` (method `tensorflow/serving/classify`: `inputs` -> `classes` [batch, C]
  string, `scores` [batch, C]); regression heads: `regress` (method `tensorflow/serving/regress`:
  `inputs` -> `outputs` [batch]). TF Serving's `:classify` / `:regress` APIs need these.

Outputs, from the token features (every signature returns the same set):
- all: `input_ids`, `input_mask`, `segment_ids` (what the model saw);
- pretrainer and backbone: `pooled_output` [batch, H], `sequence_output` [batch, length, H];
- pretrainer: fill-mask for each [MASK] of a row, in order: `mask_positions` [batch, M] (-1 past
  the row's masks), `fill_mask_ids`, `fill_mask_pieces`, `fill_mask_probabilities`
  [batch, M, top_k] (-1, "" and 0 past the row's masks); M is the most masks in any row (0 when
  the batch has none);
- classifier: `logits` and `probabilities` [batch, C], `label` [batch] (argmax); with one output
  (regression): `logits` [batch, 1] and `score` [batch];
- with `hidden_states=True`: `hidden_state_<i>` [batch, length, H] for i = 0 (embeddings) .. L.
"""

from __future__ import annotations

import tensorflow as tf

from albert_tf import features as F
from albert_tf.packing import pack_in_graph
from albert_tf.tokenization import MASK_ID, InGraphTokenizer

TEXT, TEXT_B, EXAMPLES = "text", "text_b", "examples"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
PREDICT_METHOD = "tensorflow/serving/predict"


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


class AlbertServingModule(tf.Module):
    """Wraps a plain (host, float32) ALBERT model and its tokenizer for `tf.saved_model.save`.

    Args:
        model: `AlbertPretrainer`, `AlbertClassifier` or `AlbertBackbone` (not under a strategy).
        kind: "pretrainer", "classifier" or "backbone".
        spm_model_proto: bytes of the SentencePiece model.
        do_lower_case: the tokenizer's lowercasing (released models: True).
        max_seq_length: longest packed sequence for text inputs.
        top_k: fill-mask candidates per [MASK] (pretrainer).
        text_pair: `serving_default` takes `text` and `text_b`.
        hidden_states: add `hidden_state_<i>` outputs.
        labels: class names for `classify` (default "0", "1", ...).
    """

    def __init__(self, model, kind, spm_model_proto, do_lower_case=True, max_seq_length=512,
                 top_k=5, text_pair=False, hidden_states=False, labels=None):
        super().__init__(name="albert_serving")
        config = model.config
        if max_seq_length > config.max_position_embeddings:
            raise ValueError(f"max_seq_length={max_seq_length} exceeds the model's "
                             f"max_position_embeddings={config.max_position_embeddings}.")
        # The Keras model is held untracked and its tf.Variables are tracked directly. Keras 3
        # exports each keras.Variable as a *copy* (a second tf.Variable) that the checkpoint
        # restores, while the functions read the original: Python's loader reconnects them, but
        # a TF1-style session load (TF Serving's) restores the copies and leaves the variables
        # the graph reads uninitialized ("Could not find variable ...").
        self._model = _Untracked(model)
        self.model_variables = [_tf_variable(v) for v in model.weights]
        self.kind = kind
        self.tokenizer = InGraphTokenizer(spm_model_proto, do_lower_case)
        self.sentencepiece = self.tokenizer.sentencepiece  # tracked: the model resource
        self.max_seq_length = int(max_seq_length)
        self.top_k = int(min(top_k, config.vocab_size))
        self.text_pair = bool(text_pair)
        self.hidden_states = bool(hidden_states)
        self.num_labels = getattr(model, "num_labels", None)
        if labels is not None and self.num_labels is not None and len(labels) != self.num_labels:
            raise ValueError(f"{len(labels)} label names given for {self.num_labels} labels.")
        self.labels = list(labels) if labels is not None else (
            [str(i) for i in range(self.num_labels)] if self.num_labels else None)
        self._config = config

    # -----------------------------------------------------------------------------------------
    def _check_tokens(self, features):
        """Clear errors for token inputs the model cannot take (instead of a gather error)."""
        cfg = self._config
        ids, mask, seg = (features[F.INPUT_IDS], features[F.INPUT_MASK],
                          features[F.SEGMENT_IDS])
        length = tf.shape(ids)[1]
        checks = [
            tf.debugging.assert_equal(tf.shape(ids), tf.shape(mask), message=(
                "input_mask must have the shape of input_ids")),
            tf.debugging.assert_equal(tf.shape(ids), tf.shape(seg), message=(
                "segment_ids must have the shape of input_ids")),
            tf.debugging.assert_less_equal(length, cfg.max_position_embeddings, message=(
                f"sequence length exceeds max_position_embeddings="
                f"{cfg.max_position_embeddings} of the model")),
            tf.debugging.assert_non_negative(ids, message="input_ids must be >= 0"),
            tf.debugging.assert_less(ids, cfg.vocab_size, message=(
                f"input_ids must be < vocab_size={cfg.vocab_size}")),
            tf.debugging.assert_non_negative(seg, message="segment_ids must be >= 0"),
            tf.debugging.assert_less(seg, cfg.type_vocab_size, message=(
                f"segment_ids must be < type_vocab_size={cfg.type_vocab_size}")),
        ]
        with tf.control_dependencies(checks):
            return {name: tf.identity(features[name]) for name in F.BACKBONE_INPUTS}

    def _fill_mask(self, input_ids, mlm_logits_fn):
        positions = tf.ragged.boolean_mask(
            tf.broadcast_to(tf.range(tf.shape(input_ids)[1]), tf.shape(input_ids)),
            tf.equal(input_ids, MASK_ID))
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

    def outputs_from_tokens(self, features):
        """The signature outputs of int32 token features (see module docstring)."""
        features = self._check_tokens(features)
        inputs = {name: features[name] for name in F.BACKBONE_INPUTS}
        out = dict(inputs)
        if self.kind == "pretrainer":
            backbone_out = self._model.value.backbone(inputs, training=False)
            model = self._model.value

            def mlm_logits(positions):
                return model.mlm_head(backbone_out["sequence_output"], positions,
                                      training=False)

            out.update(self._fill_mask(inputs[F.INPUT_IDS], mlm_logits))
        elif self.kind == "classifier":
            backbone_out = self._model.value.backbone(inputs, training=False)
            logits = tf.cast(self._model.value.classifier_head(backbone_out["pooled_output"]),
                             tf.float32)
            out["logits"] = logits
            if self.num_labels == 1:
                out["score"] = logits[:, 0]
            else:
                out["probabilities"] = tf.nn.softmax(logits, axis=-1)
                out["label"] = tf.argmax(logits, axis=-1, output_type=tf.int32)
        else:
            backbone_out = self._model.value(inputs, training=False)
        if self.kind != "classifier":
            out["pooled_output"] = backbone_out["pooled_output"]
            out["sequence_output"] = backbone_out["sequence_output"]
        if self.hidden_states:
            for i, h in enumerate(backbone_out["hidden_states"]):
                out[f"hidden_state_{i}"] = h
        return out

    # -----------------------------------------------------------------------------------------
    def tokens_from_text(self, text, text_b=None):
        ids_a = self.tokenizer.encode_with_masks(text)
        ids_b = None if text_b is None else self.tokenizer.encode_with_masks(text_b)
        if text_b is not None:
            tf.debugging.assert_equal(tf.shape(text), tf.shape(text_b), message=(
                "text and text_b must have the same batch size"))
        return pack_in_graph(ids_a, ids_b, self.max_seq_length)

    def tokens_from_examples(self, serialized):
        spec = {name: tf.io.RaggedFeature(tf.int64) for name in F.BACKBONE_INPUTS}
        parsed = tf.io.parse_example(serialized, spec)
        lengths = parsed[F.INPUT_IDS].row_lengths()
        checks = [tf.debugging.assert_equal(parsed[name].row_lengths(), lengths, message=(
            f"each example's {name} must have as many values as its input_ids"))
            for name in (F.INPUT_MASK, F.SEGMENT_IDS)]
        with tf.control_dependencies(checks):
            return {name: tf.cast(parsed[name].to_tensor(0), tf.int32)
                    for name in F.BACKBONE_INPUTS}

    def classify_outputs(self, serialized):
        out = self.outputs_from_tokens(self.tokens_from_examples(serialized))
        batch = tf.shape(serialized)[0]
        classes = tf.tile(tf.constant([self.labels], tf.string), [batch, 1])
        return {"classes": classes, "scores": out["probabilities"]}

    def regress_outputs(self, serialized):
        out = self.outputs_from_tokens(self.tokens_from_examples(serialized))
        return {"outputs": out["score"]}

    # -----------------------------------------------------------------------------------------
    def signatures(self) -> dict:
        """{signature name: concrete function}, ready for `tf.saved_model.save`."""
        text_fn = tf.function(lambda text: self.outputs_from_tokens(self.tokens_from_text(text)))
        pair_fn = tf.function(lambda text, text_b: self.outputs_from_tokens(
            self.tokens_from_text(text, text_b)))
        tokens_fn = tf.function(lambda input_ids, input_mask, segment_ids:
                                self.outputs_from_tokens({F.INPUT_IDS: input_ids,
                                                          F.INPUT_MASK: input_mask,
                                                          F.SEGMENT_IDS: segment_ids}))
        examples_fn = tf.function(lambda examples: self.outputs_from_tokens(
            self.tokens_from_examples(examples)))
        pair = pair_fn.get_concrete_function(_string_spec(TEXT), _string_spec(TEXT_B))
        signatures = {
            "serving_default": pair if self.text_pair else text_fn.get_concrete_function(
                _string_spec(TEXT)),
            "serve_text_pair": pair,
            "serve_tokens": tokens_fn.get_concrete_function(
                *(_token_spec(name) for name in F.BACKBONE_INPUTS)),
            "serve_examples": examples_fn.get_concrete_function(_string_spec(EXAMPLES)),
        }
        if self.kind == "classifier":
            if self.num_labels == 1:
                fn = tf.function(lambda inputs: self.regress_outputs(inputs))
                signatures["regress"] = fn.get_concrete_function(_string_spec("inputs"))
            else:
                fn = tf.function(lambda inputs: self.classify_outputs(inputs))
                signatures["classify"] = fn.get_concrete_function(_string_spec("inputs"))
        return signatures


def signature_method_names(signatures) -> dict:
    """{signature name: TF Serving method name} for the signatures that are not predict."""
    return {name: {"classify": CLASSIFY_METHOD, "regress": REGRESS_METHOD}[name]
            for name in signatures if name in ("classify", "regress")}
