"""Entity precision, recall and F1 over tag sequences, exactly as `seqeval` computes them in its
default mode (conlleval's chunking: `seqeval.metrics.sequence_labeling.get_entities`) with the
micro average, and token accuracy. Pure Python: seqeval is not a dependency
(tests/test_tagging.py checks these against figures seqeval 1.2.2 computed, and against
seqeval itself where it is importable).

Chunking: a tag is `B-TYPE`, `I-TYPE`, `E-TYPE`, `S-TYPE` or `O` (the prefix is the first
character, the type what follows the first "-"); as conlleval, an `I-` after `O` or after
another type starts an entity, and sentences are joined with an `O` between them.
"""

from __future__ import annotations

BIO_PREFIXES = ("B-", "I-")


def is_bio(labels) -> bool:
    """Whether a tag set is BIO / IOB2 entity tags: "O" and `B-`/`I-` tags only, at least one
    `B-` (part-of-speech tags are not)."""
    labels = list(labels)
    return (any(t.startswith("B-") for t in labels)
            and all(t == "O" or t.startswith(BIO_PREFIXES) for t in labels))


def _end_of_chunk(prev_tag, tag, prev_type, type_) -> bool:
    return (prev_tag in ("E", "S")
            or (prev_tag in ("B", "I") and tag in ("B", "S", "O"))
            or (prev_tag not in ("O", ".") and prev_type != type_))


def _start_of_chunk(prev_tag, tag, prev_type, type_) -> bool:
    return (tag in ("B", "S")
            or (prev_tag in ("E", "S", "O") and tag in ("E", "I"))
            or (tag not in ("O", ".") and prev_type != type_))


def get_entities(sequences) -> list:
    """[(type, first, last)] of the entities of a tag sequence, or of a list of sentences'
    sequences (joined with an "O" after each, positions in the joined sequence)."""
    seq = list(sequences)
    if any(isinstance(s, (list, tuple)) for s in seq):
        seq = [tag for sentence in seq for tag in list(sentence) + ["O"]]
    prev_tag, prev_type, begin, chunks = "O", "", 0, []
    for i, chunk in enumerate(seq + ["O"]):
        tag = chunk[0]
        type_ = chunk[1:].split("-", maxsplit=1)[-1] or "_"
        if _end_of_chunk(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _start_of_chunk(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def entity_scores(true_sentences, predicted_sentences) -> dict:
    """{"precision", "recall", "f1"} (micro average, 0 where undefined, as seqeval's
    `zero_division`) and the counts `true_entities`, `predicted_entities`, `correct_entities`."""
    true = set(get_entities([list(s) for s in true_sentences]))
    predicted = set(get_entities([list(s) for s in predicted_sentences]))
    correct = len(true & predicted)
    precision = correct / len(predicted) if predicted else 0.0
    recall = correct / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "true_entities": len(true),
            "predicted_entities": len(predicted), "correct_entities": correct}


def token_accuracy(true_sentences, predicted_sentences) -> float:
    """The fraction of words whose predicted tag is the true one."""
    pairs = [(t, p) for ts, ps in zip(true_sentences, predicted_sentences)
             for t, p in zip(ts, ps)]
    return sum(t == p for t, p in pairs) / max(len(pairs), 1)
