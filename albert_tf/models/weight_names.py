"""Official TF1 names of our layers' variables (official `modeling.py`
variable scopes): what each model's `official_weights()` is built from, so a model owns the
names of its head (`albert_tf.checkpoints.names` checks the coverage and maps them to Hugging
Face keys). Pure: nothing is read, written or assigned here."""

from __future__ import annotations

import dataclasses

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


def dense_weights(prefix, layer) -> list[NamedWeight]:
    return [NamedWeight(f"{prefix}/kernel", layer.kernel),
            NamedWeight(f"{prefix}/bias", layer.bias)]


def layer_norm_weights(prefix, layer) -> list[NamedWeight]:
    return [NamedWeight(f"{prefix}/gamma", layer.gamma), NamedWeight(f"{prefix}/beta", layer.beta)]


def _sublayer_weights(prefix, layer, names):
    out = []
    for attr, official in names.items():
        sub = getattr(layer, attr)
        if attr == "layer_norm":
            out += layer_norm_weights(f"{prefix}/{official}", sub)
        else:
            out += dense_weights(f"{prefix}/{official}", sub)
    return out


def backbone_weights(backbone) -> list[NamedWeight]:
    """Official names of every variable of an `AlbertBackbone` (built)."""
    emb = backbone.embeddings
    out = [
        NamedWeight("bert/embeddings/word_embeddings", emb.word_embeddings.embeddings),
        NamedWeight("bert/embeddings/token_type_embeddings", emb.token_type_embeddings.embeddings),
        NamedWeight("bert/embeddings/position_embeddings", emb.position_embeddings.embeddings),
        *layer_norm_weights("bert/embeddings/LayerNorm", emb.layer_norm),
    ]
    if emb.projection is not None:  # official: only when E != H
        out += dense_weights("bert/encoder/embedding_hidden_mapping_in", emb.projection)
    enc = backbone.encoder
    inner = enc.inner_group_num
    for kind, layers, names in (("attention", enc.attention_layers, _ATTENTION_NAMES),
                                ("ffn", enc.ffn_layers, _FFN_NAMES)):
        for index, layer in enumerate(layers):
            owner, i = divmod(index, inner)
            prefix = f"bert/encoder/transformer/group_{owner}/inner_group_{i}"
            out += _sublayer_weights(prefix, layer, names)
    out += dense_weights("bert/pooler/dense", backbone.pooler)
    return out
