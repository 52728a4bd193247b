"""Feature names: one spelling for data generation, the input pipeline, the models and serving.

These are the official ALBERT/BERT TFRecord feature names (official
`create_pretraining_data.py`).
"""

INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
TOKEN_BOUNDARY = "token_boundary"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
# The SOP label keeps the official (BERT-era) name: 1 = segments swapped, 0 = original order.
NEXT_SENTENCE_LABELS = "next_sentence_labels"
# Fine-tuning records (official `run_classifier.py` names): the label, and 0 for the padding
# examples that fill an evaluation file to whole batches.
LABEL_IDS = "label_ids"
IS_REAL_EXAMPLE = "is_real_example"

# Inputs of `AlbertBackbone`, in this order.
BACKBONE_INPUTS = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)
# Extra inputs of `AlbertPretrainer`.
PRETRAINER_INPUTS = BACKBONE_INPUTS + (MASKED_LM_POSITIONS,)


# ---------------------------------------------------------------------------------------------
# Pretraining TFRecord schema (official create_pretraining_data.py output) and its sidecar.
def pretraining_schema(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Feature name -> (length, dtype) of one pretraining `tf.train.Example`, in the order the
    official script writes them. Every feature is padded with zeros to its length."""
    return {
        INPUT_IDS: (max_seq_length, "int64"),
        INPUT_MASK: (max_seq_length, "int64"),
        SEGMENT_IDS: (max_seq_length, "int64"),
        TOKEN_BOUNDARY: (max_seq_length, "int64"),
        MASKED_LM_POSITIONS: (max_predictions_per_seq, "int64"),
        MASKED_LM_IDS: (max_predictions_per_seq, "int64"),
        MASKED_LM_WEIGHTS: (max_predictions_per_seq, "float32"),
        NEXT_SENTENCE_LABELS: (1, "int64"),
    }


SIDECAR_FORMAT = "albert_pretraining_tfrecord"
SIDECAR_VERSION = 1


def sidecar_path(tfrecord_path: str) -> str:
    """The JSON description written beside each generated TFRecord file."""
    return tfrecord_path + ".json"
