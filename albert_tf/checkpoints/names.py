"""The weight-name contract: every variable of our models <-> its official TF1 checkpoint name
<-> its Hugging Face `state_dict` key, used by every loader and writer; a pure mapping (no file
is read or written here, no variable assigned). Each model names its own variables
(`official_weights()`, built from `albert_tf.models.weight_names`); this module checks that the
names cover every variable once and maps official names to Hugging Face keys and config dimensions.

Official names (official `modeling.py` variable scopes):

    bert/embeddings/{word,token_type,position}_embeddings, bert/embeddings/LayerNorm/{gamma,beta}
    bert/encoder/embedding_hidden_mapping_in/{kernel,bias}
    bert/encoder/transformer/group_{g}/inner_group_{i}/
        attention_1/self/{query,key,value}/{kernel,bias}, attention_1/output/dense/{kernel,bias},
        LayerNorm/{gamma,beta}, ffn_1/intermediate/dense/{kernel,bias},
        ffn_1/intermediate/output/dense/{kernel,bias}, LayerNorm_1/{gamma,beta}
    bert/pooler/dense/{kernel,bias}
    cls/predictions/transform/dense/{kernel,bias}, cls/predictions/transform/LayerNorm/{gamma,beta},
    cls/predictions/output_bias, cls/seq_relationship/{output_weights [2, H], output_bias}

For the sharing modes that the official code does not have, an unshared sublayer kind uses its
layer index as the group: "none" is exactly the official layout with G = L, so a not-shared
model reads and writes official/HF checkpoints of `num_hidden_groups = num_hidden_layers`.
"""

from __future__ import annotations

import re

from albert_tf.models.weight_names import NamedWeight  # noqa: F401 - part of this module's contract

def model_kind(model) -> str:
    """The registered kind (`albert_tf.models.kinds()`: "pretrainer", "classifier", ...) that
    the model says it is (`albert_kind`, set by every model class and task model)."""
    kind = getattr(model, "albert_kind", None)
    if kind is None:
        raise TypeError(f"Not an ALBERT model: {type(model).__name__}")
    return kind


def model_weights(model) -> list[NamedWeight]:
    """The official names of every variable of `model` (any `model_kind`);
    checks that the table covers every variable exactly once (the contract cannot drift
    silently). A model with layers quantized by Keras's `quantize()` (int8 kernels and scales
    the table does not name) is refused by name (ValueError)."""
    kind = model_kind(model)
    quantized = {id(layer): layer.path for layer in model._flatten_layers()
                 if getattr(layer, "quantization_mode", None)}
    if quantized:
        paths = sorted(quantized.values())
        raise ValueError(
            f"{len(paths)} layers of the {kind} model are quantized by Keras's "
            f"quantize() ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''}); "
            "checkpoints, conversions and SavedModel exports hold the float32 weights. Write, "
            "convert or export the model before quantizing it (for int8 inference export the "
            "float32 model to TFLite with --quantize dynamic_int8).")
    named = model.official_weights()  # each model owns its names
    ids = [id(w.variable) for w in named]
    model_ids = {id(v) for v in model.weights}
    if len(set(ids)) != len(ids) or set(ids) != model_ids:
        raise RuntimeError(
            f"The official-name table covers {len(set(ids))} variables of {len(model_ids)}; "
            "a layer was added without a name mapping in its model's official_weights.")
    return named


# ---------------------------------------------------------------------------------------------
# Official TF1 name <-> Hugging Face key. (official regex, HF template, HF array is transpose)
_HF_RULES = [
    (r"bert/embeddings/(word|token_type|position)_embeddings",
     r"albert.embeddings.\1_embeddings.weight", False),
    (r"bert/embeddings/LayerNorm/gamma", "albert.embeddings.LayerNorm.weight", False),
    (r"bert/embeddings/LayerNorm/beta", "albert.embeddings.LayerNorm.bias", False),
    (r"bert/encoder/embedding_hidden_mapping_in/kernel",
     "albert.encoder.embedding_hidden_mapping_in.weight", True),
    (r"bert/encoder/embedding_hidden_mapping_in/bias",
     "albert.encoder.embedding_hidden_mapping_in.bias", False),
    (r"bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/(.+)", None, None),  # see below
    (r"bert/pooler/dense/kernel", "albert.pooler.weight", True),
    (r"bert/pooler/dense/bias", "albert.pooler.bias", False),
    (r"cls/predictions/transform/dense/kernel", "predictions.dense.weight", True),
    (r"cls/predictions/transform/dense/bias", "predictions.dense.bias", False),
    (r"cls/predictions/transform/LayerNorm/gamma", "predictions.LayerNorm.weight", False),
    (r"cls/predictions/transform/LayerNorm/beta", "predictions.LayerNorm.bias", False),
    (r"cls/predictions/output_bias", "predictions.bias", False),
    (r"cls/seq_relationship/output_weights", "sop_classifier.classifier.weight", False),
    (r"cls/seq_relationship/output_bias", "sop_classifier.classifier.bias", False),
    (r"output_weights", "classifier.weight", False),  # fine-tuned classifier head
    (r"output_bias", "classifier.bias", False),
    (r"cls/tagging/output_weights", "classifier.weight", False),  # token classifier head
    (r"cls/tagging/output_bias", "classifier.bias", False),
]
_HF_BLOCK = {
    "attention_1/self/query": "attention.query", "attention_1/self/key": "attention.key",
    "attention_1/self/value": "attention.value", "attention_1/output/dense": "attention.dense",
    "LayerNorm": "attention.LayerNorm", "ffn_1/intermediate/dense": "ffn",
    "ffn_1/intermediate/output/dense": "ffn_output", "LayerNorm_1": "full_layer_layer_norm",
}
_HF_LEAF = {"kernel": ("weight", True), "bias": ("bias", False), "gamma": ("weight", False),
            "beta": ("bias", False)}

# HF state-dict entries that are not parameters of their own: a buffer and the tied decoder.
HF_DERIVED_KEYS = ("albert.embeddings.position_ids", "predictions.decoder.weight",
                   "predictions.decoder.bias")
HF_HEAD_PREFIXES = ("predictions.", "sop_classifier.")


def official_to_hf(official_name: str) -> tuple[str, bool]:
    """HF key of an official name, and whether the HF array is the transpose of the official
    one (PyTorch `Linear.weight` is [out, in]; a TF1 `kernel` is [in, out])."""
    for pattern, template, transpose in _HF_RULES:
        m = re.fullmatch(pattern, official_name)
        if not m:
            continue
        if template is not None:
            return m.expand(template), transpose
        group, inner, rest = m.groups()
        scope, _, leaf = rest.rpartition("/")
        if scope in _HF_BLOCK and leaf in _HF_LEAF:
            hf_leaf, transpose = _HF_LEAF[leaf]
            return (f"albert.encoder.albert_layer_groups.{group}.albert_layers.{inner}."
                    f"{_HF_BLOCK[scope]}.{hf_leaf}", transpose)
    raise KeyError(f"No Hugging Face name for official variable {official_name!r}")


# Which config dimension each axis of an official variable is (for mismatch messages).
_DIMENSIONS = [
    (r".*/word_embeddings", ("vocab_size", "embedding_size")),
    (r".*/token_type_embeddings", ("type_vocab_size", "embedding_size")),
    (r".*/position_embeddings", ("max_position_embeddings", "embedding_size")),
    (r"bert/embeddings/LayerNorm/.*", ("embedding_size",)),
    (r".*/embedding_hidden_mapping_in/kernel", ("embedding_size", "hidden_size")),
    (r".*/ffn_1/intermediate/dense/kernel", ("hidden_size", "intermediate_size")),
    (r".*/ffn_1/intermediate/dense/bias", ("intermediate_size",)),
    (r".*/ffn_1/intermediate/output/dense/kernel", ("intermediate_size", "hidden_size")),
    (r"cls/predictions/transform/dense/kernel", ("hidden_size", "embedding_size")),
    (r"cls/predictions/transform/(dense/bias|LayerNorm/.*)", ("embedding_size",)),
    (r"cls/predictions/output_bias", ("vocab_size",)),
    (r"cls/seq_relationship/output_weights", (None, "hidden_size")),
    (r"output_weights", ("num_labels", "hidden_size")),
    (r"output_bias", ("num_labels",)),
    (r".*/kernel", ("hidden_size", "hidden_size")),
    (r".*/(bias|gamma|beta)", ("hidden_size",)),
]


def dimension_names(official_name: str) -> tuple:
    for pattern, dims in _DIMENSIONS:
        if re.fullmatch(pattern, official_name):
            return dims
    return ()


def explain_shape_mismatch(official_name, model_shape, checkpoint_shape) -> list[str]:
    """['intermediate_size: config 37, checkpoint 38'] for each axis that differs."""
    dims = dimension_names(official_name)
    if len(model_shape) != len(checkpoint_shape):
        return [f"rank of {official_name}: config {len(model_shape)}, "
                f"checkpoint {len(checkpoint_shape)}"]
    parts = []
    for axis, (a, b) in enumerate(zip(model_shape, checkpoint_shape)):
        if a != b:
            name = dims[axis] if axis < len(dims) and dims[axis] else f"axis {axis} of {official_name}"
            parts.append(f"{name}: config {a}, checkpoint {b}")
    return parts


# Block scopes in official names and in HF keys.
_BLOCK_RES = (re.compile(r"bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/"),
              re.compile(r"(?:albert\.)?encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\."))


def block_counts(names) -> tuple[int, int]:
    """(number of block owners `group_g`, number of inner groups) among official names or HF
    keys."""
    groups, inners = set(), set()
    for name in names:
        for pattern in _BLOCK_RES:
            m = pattern.match(name)
            if m:
                groups.add(int(m.group(1)))
                inners.add(int(m.group(2)))
    return (max(groups) + 1 if groups else 0), (max(inners) + 1 if inners else 0)
