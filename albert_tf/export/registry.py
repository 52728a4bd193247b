"""The serving registry: the serving module of every registered model class, each of which
registers itself (`albert_tf.export.serving.serves`). This module imports every serving module, so a
lookup here sees them all; the exporters (`albert_tf.export.saved_model`, `albert_tf.export.tflite`,
the commands) ask here, never by a kind string.
"""

from __future__ import annotations

from albert_tf.models.kinds import class_of
from albert_tf.export import serving_tagging  # noqa: F401 - registers the token classifier's module
from albert_tf.export import serving_tasks  # noqa: F401 - registers the task heads' modules
from albert_tf.export.serving import served


def serving_module_class(model) -> type:
    """The serving module class of the model's registered class (`@serves`)."""
    module = served().get(class_of(model))
    if module is None:
        raise ValueError(f"a {model.albert_kind} model has no serving module: it is not "
                         "exported as a SavedModel.")
    return module


def serving_module(model, spm_model_proto, do_lower_case=True, max_seq_length=512,
                   options=None, remove_padding=True, jit_compile=False, **kwargs):
    """The serving module of any registered model; `options` are the task's settings (span:
    doc_stride, max_query_length, n_best_size, max_answer_length, null_score_diff_threshold;
    multiple_choice: max_qa_length), `kwargs` the text models' (top_k, text_pair,
    hidden_states, labels); `remove_padding` and `jit_compile` as `AlbertServingModule`."""
    options = dict(options or {})
    module = serving_module_class(model)
    kind = model.albert_kind
    if jit_compile and not module.TEXT_MODULE:
        raise ValueError(f"jit_compile serves one-row requests of backbones, pretrainers and "
                         f"classifiers; a {kind} model exports without it.")
    if module.SENTENCEPIECE_ONLY and getattr(spm_model_proto, "kind",
                                             "sentencepiece") != "sentencepiece":
        raise ValueError(f"a {kind} model exports with a SentencePiece model (the official "
                         "SQuAD code aligns answers on SentencePiece pieces); a WordPiece "
                         "vocabulary serves the other kinds.")
    if not module.TEXT_MODULE:  # their signatures take the task's inputs, not free text
        labels = {"labels": kwargs.get("labels")} if module.NAMED_LABELS else {}
        return module(model, spm_model_proto, do_lower_case, max_seq_length,
                      remove_padding=remove_padding, **labels, **options)
    if options:
        raise ValueError(f"Options {sorted(options)} are for span and multiple-choice models, "
                         f"not a {kind}.")
    return module(model, spm_model_proto, do_lower_case=do_lower_case,
                  max_seq_length=max_seq_length, remove_padding=remove_padding,
                  jit_compile=jit_compile, **kwargs)
