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

# Inputs of `AlbertBackbone`, in this order.
BACKBONE_INPUTS = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)
# Extra inputs of `AlbertPretrainer`.
PRETRAINER_INPUTS = BACKBONE_INPUTS + (MASKED_LM_POSITIONS,)
