"""The serving modules of the task heads, each registered against its model class
(`@serves`): the pretrainer (fill-mask), the classifier (classify / regress and the official
run_classifier signature), the SQuAD span models (v1, v2 null-score; the v2 answer-class model)
and the multiple-choice model (RACE). The signatures they add are described in
`albert_tf.export.serving`; `albert_tf.export.registry` imports this module, so a lookup there
sees them."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.export.request_checks import _after, _refuse_empty, _string_spec, _token_spec
from albert_tf.export.serving import (ARTICLE, CONTEXT, FILL_MASK_OUTPUTS, OFFICIAL_INPUT,
                                      OFFICIAL_SIGNATURE, OPTIONS, QUESTION, TEXT,
                                      AlbertServingModule, _padded_tokens, serves)
from albert_tf.models.classifier import AlbertClassifier
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.models.task_models import AlbertMultipleChoice, AlbertSpanModel, AlbertSquadV2
from albert_tf.packing import pack_ids
from albert_tf.tasks.race import LABELS, RacePreprocessor
from albert_tf.tasks.squad import (align_context_in_graph, decode_beam_in_graph, decode_in_graph,
                                   windows_in_graph)
from albert_tf.tokenization.in_graph import _whitespace_class


WARMUP_QUESTIONS = ("What does ALBERT share across its layers?", "What is the capital of France?")
WARMUP_CONTEXTS = ("ALBERT shares one transformer block across all of its layers, and it "
                   "factorizes the embedding into two smaller matrices.",
                   "Paris is the capital and most populous city of France.")
WARMUP_OPTIONS = (("one transformer block", "its vocabulary", "nothing", "the optimizer"),
                  ("Lyon", "Paris", "Nice", "Lille"))


def _question_context_warmup(tokenizer, max_seq_length: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """(tokens, questions, contexts) of the warmup questions about the warmup contexts."""
    _, tokens = _padded_tokens([pack_ids(tokenizer.encode(q), tokenizer.encode(c), max_seq_length,
                                         tokenizer)
                                for q, c in zip(WARMUP_QUESTIONS, WARMUP_CONTEXTS)])
    return (tokens, np.array([q.encode() for q in WARMUP_QUESTIONS], dtype=object),
            np.array([c.encode() for c in WARMUP_CONTEXTS], dtype=object))


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
