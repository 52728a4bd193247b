"""The serving module of a token classifier
(`albert_tf.models.token_classifier.AlbertTokenClassifier`): raw text in, one tag per
whitespace-separated word out.

Signatures:
- `serving_default`: `text` (string [batch], each a sentence; words are the runs of characters
  between whitespace, as `tf.strings.split`). In-graph, as `run_tagging --do_predict`
  (`albert_tf.tasks.tagging.TaggingPreprocessor.windows_in_graph`): each word tokenized alone,
  a long sentence split into windows of max_seq_length at word boundaries, each word tagged by
  its first piece. Outputs: `words` [batch, W] (string), `tags` [batch, W] (string), `tag_ids`
  [batch, W] (int32), `scores` [batch, W] (float32, the tag's probability), `num_words`
  [batch] and `num_windows` [batch] (int32), with W the most words of any row; past a row's
  words `words` and `tags` are "", `tag_ids` -1 and `scores` 0. A text without words (empty
  or blank) gets no tags: `num_words` 0, `num_windows` 0 (no window is run for it), its row
  of `words`/`tags` all "" (W = 0 when every text of the batch is empty).
- `serve_tokens`: `input_ids`, `input_mask`, `segment_ids` [batch, length] (checked as every
  module's) -> `logits`, `probabilities` [batch, length, num_labels], `tag_ids` [batch, length]
  (0 past the row's tokens; a client picks each word's first piece).

An empty request is refused with an error naming it, as the other modules refuse one.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.models.token_classifier import AlbertTokenClassifier
from albert_tf.tasks.tagging import TaggingPreprocessor
from albert_tf.export.serving import TEXT, WARMUP_TEXTS, AlbertServingModule, serves
from albert_tf.export.request_checks import _after, _refuse_empty, _string_spec, _token_spec


@serves(AlbertTokenClassifier)
class TaggingServingModule(AlbertServingModule):
    """Wraps a plain (host, float32) `AlbertTokenClassifier` and its tokenizer for
    `tf.saved_model.save`; arguments as `AlbertServingModule`'s, `labels` the tag names
    (index = tag id; default "0", "1", ...). Its signatures take sentences, not the text
    models' options (`TEXT_MODULE = False`: no top_k, text pair, hidden states or
    threshold)."""

    TEXT_MODULE = False
    QUALITY_OUTPUTS = ("probabilities", "tag_ids")

    def __init__(self, model, spm_model_proto, do_lower_case=True, max_seq_length=512,
                 labels=None, remove_padding=True):
        super().__init__(model, spm_model_proto, do_lower_case=do_lower_case,
                         max_seq_length=max_seq_length, labels=labels,
                         remove_padding=remove_padding)
        self.preprocessor = TaggingPreprocessor(None, self.labels, self.max_seq_length)

    def warmup_inputs(self, tokenizer) -> dict:
        texts = np.array([t.encode() for t in WARMUP_TEXTS], dtype=object)
        length = min(self.max_seq_length, 16)
        tokens = {name: np.zeros((2, length), np.int32) for name in F.BACKBONE_INPUTS}
        for i, text in enumerate(WARMUP_TEXTS):
            ids = [tokenizer.cls_id] + tokenizer.encode(text)[:length - 2] + [tokenizer.sep_id]
            tokens[F.INPUT_IDS][i, :len(ids)] = ids
            tokens[F.INPUT_MASK][i, :len(ids)] = 1
        return {"serving_default": {TEXT: texts}, "serve_tokens": tokens}

    def outputs_from_tokens(self, features):
        features = self._check_tokens(features)
        return self._tag_tokens(features)

    def _tag_tokens(self, features):
        inputs = {name: features[name] for name in F.BACKBONE_INPUTS}
        logits = tf.cast(self._model.value(inputs, training=False)["logits"], tf.float32)
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
                "tag_ids": tf.argmax(logits, axis=-1, output_type=tf.int32)}

    def tags_from_text(self, text, tag_tokens):
        """The `serving_default` outputs of sentences `text` [batch]; `tag_tokens` runs the
        model on unchecked token features (the windows this module packs itself)."""
        text = _after([lambda: _refuse_empty(tf.size(text), "texts")], [text])[0]
        win = self.preprocessor.windows_in_graph(self.tokenizer, text)
        words = win["words"]
        tokens = {name: win[name] for name in F.BACKBONE_INPUTS}
        num_labels = len(self.labels)

        def run():
            return tag_tokens(tokens)["probabilities"]

        def nothing():
            return tf.zeros([0, tf.shape(tokens[F.INPUT_IDS])[1], num_labels], tf.float32)

        probabilities = tf.cond(tf.size(win["window"]) > 0, run, nothing)
        per_word = tf.gather_nd(probabilities, tf.stack([win["window"], win["position"]], 1))
        ids = tf.argmax(per_word, axis=-1, output_type=tf.int32)
        score = tf.reduce_max(per_word, axis=-1)

        def rows(values, default):
            return tf.RaggedTensor.from_row_splits(values, words.row_splits).to_tensor(default)

        # A sentence's windows are consecutive: its last window's index - its first's + 1; a
        # text without words runs no window: 0. (Each row's own reduction: [batch] also when
        # some or all rows are empty.)
        window_rows = tf.RaggedTensor.from_row_splits(win["window"], words.row_splits)
        num_windows = tf.where(words.row_lengths() > 0, tf.reduce_max(window_rows, axis=1)
                               - tf.reduce_min(window_rows, axis=1) + 1, 0)
        return {"words": words.to_tensor(""),
                "tags": rows(tf.gather(tf.constant(self.labels), ids), ""),
                "tag_ids": rows(ids, -1), "scores": rows(score, 0.0),
                "num_words": tf.cast(words.row_lengths(), tf.int32),
                "num_windows": tf.cast(num_windows, tf.int32)}

    def signatures(self) -> dict:
        body = self._tokens_function(self.outputs_from_tokens, _token_spec)
        unchecked = self._tokens_function(self._tag_tokens, _token_spec)
        text = self._text_signature(lambda text: self.tags_from_text(
            text, lambda features: self._on_features(unchecked, features)), _string_spec(TEXT))
        return {"serving_default": text,
                "serve_tokens": body}
