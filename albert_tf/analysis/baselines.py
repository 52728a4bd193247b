"""What a model must beat: the masked-LM accuracy of always guessing the most frequent masked piece,
and the majority class of a GLUE classification task."""

from __future__ import annotations
from albert_tf.tasks import glue


def masked_pieces(input_patterns, max_seq_length: int, max_predictions_per_seq: int,
                  max_examples: int | None = None):
    """(ids, weights) of every masked position of pretraining TFRecords (of their first
    `max_examples` examples, in the evaluation's order), flattened (numpy)."""
    import numpy as np

    from albert_tf.input_pipeline import pretraining_dataset

    dataset = pretraining_dataset(input_patterns, 1024, max_seq_length, max_predictions_per_seq,
                                  is_training=False, drop_remainder=False)
    if max_examples is not None:
        dataset = dataset.unbatch().take(max_examples).batch(1024)
    ids, weights = [], []
    for batch in dataset.as_numpy_iterator():
        ids.append(batch["masked_lm_ids"].reshape(-1))
        weights.append(batch["masked_lm_weights"].reshape(-1))
    return np.concatenate(ids), np.concatenate(weights)


def most_frequent_piece(train_patterns, eval_patterns, max_seq_length: int,
                        max_predictions_per_seq: int, max_eval_examples: int | None = None,
                        train_max_predictions_per_seq: int | None = None) -> dict:
    """The piece most often masked in the training records, and the masked-LM accuracy of
    predicting it at every masked position of the evaluation records (weighted as the model's
    `masked_lm_accuracy` is): the unigram model's accuracy. Also the 20 pieces most often
    masked in training (`frequent_ids`, most frequent first). `max_predictions_per_seq` is the
    evaluation records' (and, unless `train_max_predictions_per_seq` is given, the training
    records'); `max_eval_examples`: only the first ones (those an evaluation of whole batches
    saw)."""
    import numpy as np

    ids, weights = masked_pieces(train_patterns, max_seq_length,
                                 train_max_predictions_per_seq or max_predictions_per_seq)
    counts = np.bincount(ids[weights > 0], minlength=1)
    piece = int(np.argmax(counts))
    eval_ids, eval_weights = masked_pieces(eval_patterns, max_seq_length,
                                           max_predictions_per_seq, max_eval_examples)
    total = float(eval_weights.sum())
    if not total:
        raise ValueError(f"{eval_patterns} hold no masked positions.")
    return {"piece_id": piece, "train_share": float(counts[piece] / counts.sum()),
            "frequent_ids": [int(i) for i in np.argsort(-counts, kind="stable")[:20]],
            "accuracy": float(((eval_ids == piece) * eval_weights).sum() / total),
            "eval_positions": int(total), "eval_examples": len(eval_ids) // max_predictions_per_seq}


def sentence_order_balance(eval_patterns, max_seq_length: int, max_predictions_per_seq: int,
                           max_examples: int | None = None) -> dict:
    """Share of sentence-order label 1 (swapped) among the records (their first
    `max_examples`): the accuracy of the better constant guess is max(share, 1 - share)."""
    import numpy as np

    from albert_tf.input_pipeline import pretraining_dataset

    dataset = pretraining_dataset(eval_patterns, 1024, max_seq_length, max_predictions_per_seq,
                                  is_training=False, drop_remainder=False).unbatch()
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    labels = np.array([int(x["next_sentence_labels"][0]) for x in dataset.as_numpy_iterator()])
    examples, swapped = len(labels), int(labels.sum())
    share = swapped / examples
    return {"examples": examples, "swapped_share": share, "accuracy": max(share, 1 - share)}


def majority_class(task_name: str, data_dir: str) -> dict:
    """The training set's most frequent label, scored on the dev set with the task's metrics."""
    import numpy as np

    task = glue.get_task(task_name)
    train = glue.load_split(task, data_dir, "train")
    dev = glue.load_split(task, data_dir, "dev")
    if task.is_regression:  # a constant prediction has no correlation
        return {"constant": float(np.mean([float(e.label) for e in train])), "pearson": 0.0,
                "spearman": 0.0}
    labels = [e.label for e in train]
    majority = max(task.labels, key=labels.count)
    predictions = np.full(len(dev), task.labels.index(majority))
    gold = np.array([task.labels.index(e.label) for e in dev])
    return dict(glue.glue_metrics(task, predictions, gold), majority_label=majority,
                examples=len(dev))
