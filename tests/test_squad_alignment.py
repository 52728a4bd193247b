"""SQuAD answers where the official preprocessing changes a word's length: NFKD turns "…" into
"...", "ﬁ" into "fi", drops a decomposed accent. The official `convert_examples_to_features`
aligns the tokenized characters to the original paragraph character by character (`_lcs_match`,
then `_convert_index` for characters without a match), so an answer's pieces map back to exactly
its own characters; the expected texts below are the official alignment's on these contexts
(checked against it outside this repository). Python (`align_context`) and in-graph
(`align_context_in_graph`) give the same spans."""

import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.tasks.squad import align_context, align_context_in_graph, predict_answers
from albert_tf.tasks.squad.features import END_POSITIONS, START_POSITIONS, question_features
from albert_tf.tasks.squad import evaluation as S
from albert_tf.tokenization import Tokenizer
from conftest import SHARED_DIR
from test_tokenization import official_module

DECOMPOSED = "Zu\u0308rich"  # "Zürich" with a combining diaeresis: NFKD drops one character
# (context, answers): each answer's text appears once in its context.
CASES = [
    ("He paused… then the ﬁnal verdict came: Café Noël won, ﬁnally!",
     ["paused", "then", "ﬁnal verdict", "Café Noël", "Noël", "ﬁnally", "…"]),
    (f"The ﬂights to {DECOMPOSED}… were late; the oﬃce at Besançon…  said “ﬁve” o’clock.",
     ["ﬂights", DECOMPOSED, "were late", "oﬃce", "Besançon", "ﬁve", "o’clock"]),
    ("Résumé—naïve coöperation…and ½ of ﬁeld-work",
     ["Résumé", "naïve coöperation", "and", "½", "ﬁeld-work"]),
]


def _question(context, answer, number):
    return {"id": f"q{number}", "question": "What is it?", "answers": [answer],
            "answer_starts": [context.index(answer)]}


@pytest.mark.needs_shared("official_albert")
def test_answers_map_to_their_own_characters_as_official(sample_vocab):
    """The gold answer of every question (a training label) maps to pieces whose characters in
    the context are the answer itself, and a prediction of those pieces is answered with that
    text: "paused" from "paused…" (not "paused…"), "ﬁnally" from "ﬁnally!", "…" alone, each
    ligature and decomposed accent as written. The pieces are the official tokenizer's
    (`encode_pieces` of the preprocessed paragraph)."""
    tokenizer = Tokenizer(sample_vocab)
    official = official_module("albert.tokenization")
    judge = official.FullTokenizer(None, do_lower_case=True, spm_model_file=sample_vocab)
    number, checked = 0, []
    for text, answers in CASES:
        context = align_context(text, tokenizer)
        assert context.pieces == [official.printable_text(p) for p in judge.tokenize(
            official.preprocess_text(text, lower=True))]
        assert context.exact == len(context.pieces)  # every piece on its own characters
        for answer in answers:
            number += 1
            question = _question(text, answer, number)
            (feature,) = question_features(question, context, tokenizer, max_seq_length=96,
                                           doc_stride=32, max_query_length=8, unique_id=number,
                                           is_training=True)
            start, end = feature[START_POSITIONS][0], feature[END_POSITIONS][0]
            assert 0 < start <= end  # found in the window, not [CLS]
            first, last = (start - feature["offset"], end - feature["offset"])
            assert context.text_of(first, last) == answer
            # The model predicting exactly those pieces is answered with the same characters.
            logits = np.full(96, -10.0, np.float32)
            start_logits, end_logits = logits.copy(), logits.copy()
            start_logits[start] = end_logits[end] = 10.0
            answered, _ = predict_answers([feature], [start_logits], [end_logits],
                                          {question["id"]: context})
            assert answered == {question["id"]: answer}
            checked.append(answer)
    assert len(checked) == 19
    # The characters NFKD changes are inside the answers checked.
    assert {"…", "ﬁ", "ﬂ", "ﬃ", "½", "\u0308", "é", "ç"} <= set("".join(checked))


def test_piece_spans_inside_changed_words(sample_vocab):
    """Piece by piece, the official alignment's characters: the pieces of an expansion each
    span the one character they come from ("...": "…", "…", "…"; "fi" split as "f" + "in":
    "ﬁ" and "ﬁn"), and a decomposed accent lies inside the span of the piece around it."""
    tokenizer = Tokenizer(sample_vocab)
    text = "The word x… and the word ﬁn, then Zu\u0308r: all three change length."
    context = align_context(text, tokenizer)
    spans = [text[s:e] for s, e in zip(context.starts, context.ends)]
    surfaces = [p.replace("\u2581", "") for p in context.pieces]
    ellipsis = text.index("…")
    dots = [span for surface, span, start in zip(surfaces, spans, context.starts)
            if surface and set(surface) <= {"."} and start == ellipsis]
    assert dots and set(dots) == {"…"} and "".join(
        s for s, start in zip(surfaces, context.starts) if start == ellipsis) == "..."
    # Whatever the segmentation, each piece's span, preprocessed, holds its surface; a word's
    # first piece starts where it starts, its last ends where it ends.
    for surface, span in zip(surfaces, spans):
        assert surface in tokenizer.preprocess(span) or not surface
    for word in ("x…", "ﬁn", "Zu\u0308r"):
        begin = text.index(word)
        end = begin + len(word)
        inside = [i for i, s in enumerate(context.starts) if begin <= s < end]
        assert context.starts[inside[0]] == begin and context.ends[inside[-1]] == end, word
        assert context.text_of(inside[0], inside[-1]) == word


def test_in_graph_alignment_equals_python_where_words_change_length(sample_vocab):
    """The in-graph alignment (raw-text SQuAD serving) gives the same ids and the same
    character spans (as UTF-8 byte offsets) as `align_context` on these contexts."""
    tokenizer = Tokenizer(sample_vocab)
    contexts = [text for text, _ in CASES] + ["x… ﬁn Zu\u0308r", "\u0301lone mark, ΟΔΟΣ ﬀ", ""]
    _, ids, starts, ends = align_context_in_graph(tf.constant(contexts), tokenizer.in_graph())
    for i, text in enumerate(contexts):
        aligned = align_context(text, tokenizer)
        to_bytes = np.cumsum([0] + [len(ch.encode()) for ch in text])
        assert ids[i].numpy().tolist() == aligned.ids
        assert starts[i].numpy().tolist() == to_bytes[aligned.starts].tolist()
        assert ends[i].numpy().tolist() == to_bytes[aligned.ends].tolist()


@pytest.mark.needs_shared("official_albert", "data/squad")
def test_every_dev_paragraph_gets_the_official_ids(sample_vocab, digit_comma_vocab):
    """Every paragraph of SQuAD dev v1.1 and v2.0 (3,271), under two vocabularies: the ids of
    `align_context` are the official reader's (`encode_ids` of the preprocessed paragraph,
    encoded whole). Encoded word by word, as before, SentencePiece broke ties between
    equal-score segmentations differently ("8,000" as 0 00 or 00 0) in 8 paragraphs with the
    sample vocabulary."""
    official = official_module("albert.tokenization")
    paragraphs = []
    for archive in ("dev-v1.1.json.zip", "dev-v2.0.json.zip"):
        for article in S.load_dataset(os.path.join(SHARED_DIR, "data", "squad", archive)):
            paragraphs += [p["context"] for p in article["paragraphs"]]
    assert len(paragraphs) == 3271
    for vocab in (sample_vocab, digit_comma_vocab):
        tok = Tokenizer(vocab)
        differ = [p for p in paragraphs if align_context(p, tok).ids != official.encode_ids(
            tok.sp, official.preprocess_text(p, lower=True))]
        assert differ == [], vocab
    tok = Tokenizer(sample_vocab)
    word_by_word = sum([i for w in p.split() for i in tok.encode(w)] != official.encode_ids(
        tok.sp, official.preprocess_text(p, lower=True)) for p in paragraphs)
    assert word_by_word == 8
