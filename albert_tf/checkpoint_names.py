"""The weight-name contract: every variable of our models <-> its official TF1 checkpoint name
<-> its Hugging Face `state_dict` key. One table, used by every loader and writer.

Official names (REFERENCE section 8, official `modeling.py` variable scopes):

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

import dataclasses
import re
from typing import Mapping

import numpy as np

# Our sublayer variable -> official suffix under `transformer/group_g/inner_group_i/`.
_ATTENTION_NAMES = {
    "query": "attention_1/self/query", "key": "attention_1/self/key",
    "value": "attention_1/self/value", "output_dense": "attention_1/output/dense",
    "layer_norm": "LayerNorm",
}
_FFN_NAMES = {
    "intermediate": "ffn_1/intermediate/dense",
    "output_dense": "ffn_1/intermediate/output/dense",
    "layer_norm": "LayerNorm_1",
}


@dataclasses.dataclass(frozen=True)
class NamedWeight:
    """A model variable and its official TF1 name.

    `transposed` is True when our array is the transpose of the official one (only the SOP
    `output_weights`, stored [2, H] officially and as a [H, 2] Dense kernel here).
    """

    official_name: str
    variable: object
    transposed: bool = False

    def to_official(self, value: np.ndarray) -> np.ndarray:
        return value.T if self.transposed else value

    def from_official(self, value: np.ndarray) -> np.ndarray:
        return value.T if self.transposed else value


def _dense(prefix, layer):
    return [NamedWeight(f"{prefix}/kernel", layer.kernel),
            NamedWeight(f"{prefix}/bias", layer.bias)]


def _layer_norm(prefix, layer):
    return [NamedWeight(f"{prefix}/gamma", layer.gamma), NamedWeight(f"{prefix}/beta", layer.beta)]


def _sublayer_weights(prefix, layer, names):
    out = []
    for attr, official in names.items():
        sub = getattr(layer, attr)
        if attr == "layer_norm":
            out += _layer_norm(f"{prefix}/{official}", sub)
        else:
            out += _dense(f"{prefix}/{official}", sub)
    return out


def backbone_weights(backbone) -> list[NamedWeight]:
    """Official names of every variable of an `AlbertBackbone` (built)."""
    emb = backbone.embeddings
    out = [
        NamedWeight("bert/embeddings/word_embeddings", emb.word_embeddings.embeddings),
        NamedWeight("bert/embeddings/token_type_embeddings", emb.token_type_embeddings.embeddings),
        NamedWeight("bert/embeddings/position_embeddings", emb.position_embeddings.embeddings),
        *_layer_norm("bert/embeddings/LayerNorm", emb.layer_norm),
        *_dense("bert/encoder/embedding_hidden_mapping_in", emb.projection),
    ]
    enc = backbone.encoder
    inner = enc.inner_group_num
    for kind, layers, names in (("attention", enc.attention_layers, _ATTENTION_NAMES),
                                ("ffn", enc.ffn_layers, _FFN_NAMES)):
        for index, layer in enumerate(layers):
            owner, i = divmod(index, inner)
            prefix = f"bert/encoder/transformer/group_{owner}/inner_group_{i}"
            out += _sublayer_weights(prefix, layer, names)
    out += _dense("bert/pooler/dense", backbone.pooler)
    return out


def pretrainer_weights(pretrainer) -> list[NamedWeight]:
    """Official names of every variable of an `AlbertPretrainer` (backbone + both heads)."""
    head = pretrainer.mlm_head
    return backbone_weights(pretrainer.backbone) + [
        *_dense("cls/predictions/transform/dense", head.dense),
        *_layer_norm("cls/predictions/transform/LayerNorm", head.layer_norm),
        NamedWeight("cls/predictions/output_bias", head.output_bias),
        NamedWeight("cls/seq_relationship/output_weights", pretrainer.sop_head.kernel,
                    transposed=True),
        NamedWeight("cls/seq_relationship/output_bias", pretrainer.sop_head.bias),
    ]


def model_weights(model) -> list[NamedWeight]:
    """`pretrainer_weights` or `backbone_weights`, whichever `model` is; checks that the table
    covers every variable of the model exactly once (the contract cannot drift silently)."""
    if hasattr(model, "mlm_head"):
        named = pretrainer_weights(model)
    else:
        named = backbone_weights(model)
    ids = [id(w.variable) for w in named]
    model_ids = {id(v) for v in model.weights}
    if len(set(ids)) != len(ids) or set(ids) != model_ids:
        raise RuntimeError(
            f"The official-name table covers {len(set(ids))} variables of {len(model_ids)}; "
            "a layer was added without a name mapping in albert_tf/checkpoint_names.py.")
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


def _to_numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def load_hf_state_dict(model, state_dict: Mapping[str, object]) -> None:
    """Copies a Hugging Face ALBERT `state_dict` into `model` (`AlbertBackbone` or
    `AlbertPretrainer`), strictly.

    Keys may carry the `albert.` prefix (`AlbertForPreTraining`) or not (`AlbertModel`). Raises
    `ValueError` listing every model weight without a key, every key that maps to nothing (head
    keys are allowed when loading a backbone) and every shape mismatch; nothing is assigned
    unless everything matches.
    """
    keys = set(state_dict)
    prefixed = any(k.startswith("albert.") for k in keys)
    to_state_key = (lambda k: k) if prefixed else (lambda k: k[len("albert."):]
                                                  if k.startswith("albert.") else k)
    is_backbone = not hasattr(model, "mlm_head")
    assignments, missing, mismatched, used = [], [], [], set()
    for named in model_weights(model):
        hf_key, hf_transposed = official_to_hf(named.official_name)
        key = to_state_key(hf_key)
        if key not in state_dict:
            missing.append(f"{key} (for {named.official_name})")
            continue
        used.add(key)
        value = _to_numpy(state_dict[key])
        value = named.from_official(value.T if hf_transposed else value)
        if tuple(value.shape) != tuple(named.variable.shape):
            mismatched.append(f"{key}: checkpoint {tuple(value.shape)} vs model "
                              f"{tuple(named.variable.shape)} ({named.official_name})")
            continue
        assignments.append((named.variable, value))
    derived = {to_state_key(k) for k in HF_DERIVED_KEYS}
    unused = sorted(k for k in keys - used - derived
                    if not (is_backbone and k.startswith(HF_HEAD_PREFIXES)))
    problems = []
    if missing:
        problems.append(f"model weights with no checkpoint entry: {missing}")
    if unused:
        problems.append(f"checkpoint entries that map to no model weight: {unused}")
    if mismatched:
        problems.append(f"shape mismatches: {mismatched}")
    if problems:
        raise ValueError("Cannot load the Hugging Face weights; nothing was assigned. "
                         + "; ".join(problems))
    for variable, value in assignments:
        variable.assign(value.astype(variable.dtype))
