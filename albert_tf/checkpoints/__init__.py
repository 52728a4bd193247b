"""Reading and writing ALBERT weights: Google's TF1 checkpoints and TF-Hub modules, Hugging Face
`save_pretrained` folders, and our own format.

    names       the weight-name table (our variables <-> official names <-> HF keys); a pure
                mapping
    common      errors, models by kind, `assign_strict` (the one strict assignment of foreign
                weights)
    tf1         official TF1 checkpoints (read, write) and TF-Hub modules (read), `official_config`
    hf          Hugging Face folders and state dicts: read, and written (`write_hf_folder`)
    ours        our directory format and `.keras` files: `save_albert_tf`, `load_pretrained`
    conversion  `convert` (any source to any target), `initialize_from_checkpoint`,
                `initialize_backbone` (fine-tuning: the backbone of any source, heads dropped)

Every load of a foreign format (TF1, TF-Hub, Hugging Face, `--init_checkpoint`) goes through
`assign_strict`: an unmapped entry, an unfilled weight or a shape mismatch is an error that
names them, never a partial load. Our own directories are loaded by Keras into a model rebuilt
from the stored config and kind.
"""

from albert_tf.checkpoints.common import (MODEL_KINDS, CheckpointError, CheckpointMismatchError,
                                          assign_strict, build_model)
from albert_tf.checkpoints.conversion import (convert, initialize_backbone,
                                              initialize_from_checkpoint,
                                              read_training_checkpoint)
from albert_tf.checkpoints.hf import (config_from_hf, hf_config_dict, hf_kind, hf_state_dict,
                                      load_hf_state_dict, read_hf_folder, write_hf_folder)
from albert_tf.checkpoints.names import model_kind, model_weights, official_to_hf
from albert_tf.checkpoints.ours import (CONFIG_FILE, FORMAT_FILE, FORMAT_VERSION, WEIGHTS_FILE,
                                        load_pretrained, save_albert_tf)
from albert_tf.checkpoints.tf1 import (TF1_CHECKPOINT_NAME, TF1Checkpoint, load_tf1_checkpoint,
                                       official_config, resolve_tf1_checkpoint,
                                       write_tf1_checkpoint)

__all__ = ["CONFIG_FILE", "FORMAT_FILE", "FORMAT_VERSION", "MODEL_KINDS", "TF1_CHECKPOINT_NAME",
           "WEIGHTS_FILE", "CheckpointError", "CheckpointMismatchError", "TF1Checkpoint",
           "assign_strict", "build_model", "config_from_hf", "convert", "hf_config_dict",
           "hf_kind", "hf_state_dict", "write_hf_folder",
           "initialize_backbone", "initialize_from_checkpoint", "read_training_checkpoint", "load_hf_state_dict", "load_pretrained",
           "load_tf1_checkpoint", "model_kind", "model_weights", "official_config",
           "official_to_hf", "read_hf_folder", "resolve_tf1_checkpoint", "save_albert_tf",
           "write_tf1_checkpoint"]
