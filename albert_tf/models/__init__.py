"""The models: the backbone (factorized embedding and the shared encoder), every head
(`pretrainer`, `classifier`, `task_models`, `token_classifier`), the pretraining loss, the
registry of saved kinds (`registry`) with the lookups the rest of the code base uses instead of
comparing kind strings (`kinds`, which imports every head), and the official weight names
(`weight_names`). Importing this package loads none of them: `registry` and `weight_names` stay
free of TensorFlow."""
