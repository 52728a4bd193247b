"""`AlbertConfig`: the model hyper-parameters, in the official `albert_config.json` keys.

ALBERT (Lan et al., arXiv 1909.11942) is configured by a JSON file whose keys are defined by
Google's official `modeling.AlbertConfig`. This dataclass holds exactly those keys, plus one of
ours, `sharing`, which selects the cross-layer parameter-sharing mode of the paper's Table 5.

Unlike the official loader (which accepts any key), loading is strict: an unknown key raises, and
the official keys that the released code never reads (`net_structure_type`, `gap_size`,
`num_memory_blocks`, `down_scale_factor`, and `layers_to_keep`, which only the TF-Hub xxlarge v1
and the Chinese models' files carry) are accepted only at their neutral values, the values every
released file gives, because another value asks for a model that neither the official code nor
this one builds. `hidden_act` is read as the official `get_activation` reads it: any case, and an
empty or null value meaning "linear". Every released `albert_config.json` (v1 and v2, the
Chinese `*_zh` models, the TF-Hub modules' `assets/albert_config.json`) loads as it is. A dict or
JSON file must also give every key of `REQUIRED_KEYS`: the dataclass defaults are ALBERT-base's,
the official `modeling.AlbertConfig` defaults are xxlarge's (hidden 4096, 64 heads, FFN 16384, no
vocabulary), so a file without them would mean a different model to each. Building
`AlbertConfig(...)` in Python keeps the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

# Activations accepted in `hidden_act`. "gelu" is the official name of the tanh approximation of
# GELU (official `modeling.gelu`); "gelu_new" is Hugging Face's name for the same function.
ACTIVATIONS = ("gelu", "gelu_new", "relu", "tanh", "linear")

# Cross-layer sharing modes (paper Table 5). In each mode a shared sublayer is owned by a group
# (`num_hidden_groups` groups, layer l uses group int(l / L * G)); an unshared one by its layer.
SHARING_MODES = ("all", "attention", "ffn", "none")
ATTENTION_SHARED_MODES = ("all", "attention")
FFN_SHARED_MODES = ("all", "ffn")

# Official keys that the released code never reads, with the only values it supports.
NO_OP_KEYS = {"net_structure_type": 0, "gap_size": 0, "num_memory_blocks": 0,
              "down_scale_factor": 1}

# Keys of released files that are not fields here: the official code never reads them; a file
# may give them at the value shown (what the released files carry), which is then dropped.
# `layers_to_keep`: in the TF-Hub albert_xxlarge v1 config and the albert_*_zh configs, always
# []; a non-empty list would name a pruned model (only those layers) that no released code builds.
IGNORED_KEYS = {"layers_to_keep": []}

# Keys a config dict or JSON file must give. vocab_size, hidden_size, num_attention_heads and
# intermediate_size: the official defaults (none, 4096, 64, 16384) are not ours (ALBERT-base).
# num_hidden_layers and embedding_size: the defaults agree (12, 128), but every released
# albert_config.json gives them and a file without them is most likely a BERT config (no
# embedding_size: E = H there, 128 here). The other keys default to the same value in both.
REQUIRED_KEYS = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                 "num_attention_heads", "intermediate_size")

# The order in which Google's released v2 `albert_config.json` files list their keys; used when
# writing so a released file round-trips key for key.
OFFICIAL_KEY_ORDER = (
    "attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "embedding_size",
    "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings",
    "num_attention_heads", "num_hidden_layers", "num_hidden_groups", "net_structure_type",
    "gap_size", "num_memory_blocks", "inner_group_num", "down_scale_factor", "type_vocab_size",
    "vocab_size",
)


def _check_neutral(name: str, value, neutral) -> None:
    """Refuses a non-neutral value of an official key that no released code reads."""
    if value != neutral or isinstance(value, bool) != isinstance(neutral, bool):
        raise ValueError(
            f"`{name}` is an official key that the released ALBERT code never reads: every "
            f"released albert_config.json gives {name}={neutral!r}, and another value asks for "
            f"a model that neither the official code (which ignores the key) nor this one "
            f"builds; only {name}={neutral!r} is supported. Received: {name}={value!r}")


def layer_group(layer_index: int, num_hidden_layers: int, num_hidden_groups: int) -> int:
    """Group used by layer `layer_index` (0-based): the official `int(l / L * G)`. The float
    formula is kept as written so group assignment matches official checkpoints in every case
    (Hugging Face computes `int(l / (L / G))`, which can differ by rounding for unusual L, G)."""
    return int(layer_index / num_hidden_layers * num_hidden_groups)


@dataclasses.dataclass(frozen=True)
class AlbertConfig:
    """Hyper-parameters of an ALBERT model (official `albert_config.json` keys + `sharing`).

    Defaults are those of the released ALBERT-base v2 model.

    Args:
        vocab_size: SentencePiece vocabulary size V.
        embedding_size: factorized embedding size E (word, position and token-type tables are
            [*, E], then projected to H).
        hidden_size: transformer width H.
        num_hidden_layers: depth L (number of times a block is applied).
        num_hidden_groups: G, the number of distinct parameter groups; layer l uses group
            `int(l / L * G)` (official formula).
        num_attention_heads: heads; must divide `hidden_size`.
        intermediate_size: FFN inner width I.
        inner_group_num: blocks applied in sequence within each layer (official "inner groups").
        hidden_act: FFN and MLM-transform activation, one of `ACTIVATIONS` (in any case; None
            or "" is "linear", as in the official `get_activation`). The English models use
            "gelu", the Chinese ones "relu".
        hidden_dropout_prob: dropout after the embeddings and each sublayer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: rows of the position-embedding table (longest sequence).
        type_vocab_size: number of segment ids.
        initializer_range: stddev of the truncated-normal initializer.
        net_structure_type, gap_size, num_memory_blocks, down_scale_factor: official no-op keys,
            accepted only at 0, 0, 0, 1.
        sharing: "all" (official ALBERT), "attention" (attention shared, FFN per layer), "ffn"
            (FFN shared, attention per layer) or "none" (independent layers, BERT-style).

    Example:
        >>> cfg = AlbertConfig.from_preset("albert-base")
        >>> cfg.hidden_size, cfg.sharing
        (768, 'all')
        >>> AlbertConfig(hidden_size=100, num_attention_heads=3)
        Traceback (most recent call last):
        ...
        ValueError: `hidden_size` must be a multiple of `num_attention_heads`. Received: hidden_size=100, num_attention_heads=3
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    inner_group_num: int = 1
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    net_structure_type: int = 0
    gap_size: int = 0
    num_memory_blocks: int = 0
    down_scale_factor: int = 1
    sharing: str = "all"

    def __post_init__(self):
        positive = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                    "num_hidden_groups", "num_attention_heads", "intermediate_size",
                    "inner_group_num", "max_position_embeddings", "type_vocab_size")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"`{name}` must be a number in [0, 1). Received: {name}={value!r}")
            object.__setattr__(self, name, float(value))
        value = self.initializer_range
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError("`initializer_range` must be a positive number. "
                             f"Received: initializer_range={value!r}")
        object.__setattr__(self, "initializer_range", float(value))
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                "`hidden_size` must be a multiple of `num_attention_heads`. Received: "
                f"hidden_size={self.hidden_size}, num_attention_heads={self.num_attention_heads}")
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ValueError(
                "`num_hidden_groups` must be at most `num_hidden_layers` (every group is used by "
                f"at least one layer). Received: num_hidden_groups={self.num_hidden_groups}, "
                f"num_hidden_layers={self.num_hidden_layers}")
        act = self.hidden_act
        if act is None or act == "":  # official get_activation: no activation
            act = "linear"
        if isinstance(act, str):  # official get_activation lowercases the name
            object.__setattr__(self, "hidden_act", act.lower())
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"`hidden_act` must be one of {ACTIVATIONS}. "
                             f"Received: hidden_act={self.hidden_act!r}")
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"`sharing` must be one of {SHARING_MODES}. "
                             f"Received: sharing={self.sharing!r}")
        for name, neutral in NO_OP_KEYS.items():
            _check_neutral(name, getattr(self, name), neutral)

    # ----------------------------------------------------------------------------------------
    # Derived quantities.
    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def attention_shared(self) -> bool:
        return self.sharing in ATTENTION_SHARED_MODES

    @property
    def ffn_shared(self) -> bool:
        return self.sharing in FFN_SHARED_MODES

    # ----------------------------------------------------------------------------------------
    # Dict / JSON I/O.
    def sequence_length_problem(self, max_seq_length: int,
                                name: str = "--max_seq_length") -> str | None:
        """The one rule for a packed sequence length (every runner, the training loop and the
        exporter ask it): what is wrong with `max_seq_length` for this model, or None."""
        if max_seq_length > self.max_position_embeddings:
            return (f"{name}={max_seq_length} exceeds the model's max_position_embeddings="
                    f"{self.max_position_embeddings}")
        return None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "AlbertConfig":
        """Builds a config from official keys (plus `sharing`). Unknown keys raise, and so do
        missing `REQUIRED_KEYS`."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known - set(IGNORED_KEYS))
        if unknown:
            raise ValueError(
                f"Unknown ALBERT config keys {unknown}. Valid keys are the official "
                f"albert_config.json keys plus `sharing`: {sorted(known | set(IGNORED_KEYS))}")
        for name, neutral in IGNORED_KEYS.items():
            if name in values:
                _check_neutral(name, values[name], neutral)
        values = {k: v for k, v in values.items() if k not in IGNORED_KEYS}
        missing = [k for k in REQUIRED_KEYS if k not in values]
        if missing:
            raise ValueError(
                f"Missing ALBERT config keys {missing}. Every released albert_config.json gives "
                f"{', '.join(REQUIRED_KEYS)}; without them the official code builds its own "
                "defaults (xxlarge: hidden_size 4096) and this code ALBERT-base's, so neither "
                "is assumed.")
        return cls(**dict(values))

    def to_dict(self) -> dict:
        """Official keys in the released files' order; `sharing` only when it is not "all", so a
        released v2 JSON round-trips exactly and stays readable by the official code."""
        out = {k: getattr(self, k) for k in OFFICIAL_KEY_ORDER}
        if self.sharing != "all":
            out["sharing"] = self.sharing
        return out

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "AlbertConfig":
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"ALBERT config file not found: {path}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"ALBERT config file {path} is not valid JSON: {e}") from None
        if not isinstance(values, dict):
            raise ValueError(f"ALBERT config file {path} must hold a JSON object, "
                             f"got {type(values).__name__}")
        try:
            return cls.from_dict(values)
        except (TypeError, ValueError) as e:
            raise ValueError(f"Invalid ALBERT config file {path}: {e}") from None

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json_string())

    def replace(self, **changes) -> "AlbertConfig":
        """A copy with `changes` applied (validated)."""
        return dataclasses.replace(self, **changes)

    # ----------------------------------------------------------------------------------------
    @classmethod
    def from_preset(cls, name: str) -> "AlbertConfig":
        """One of `PRESETS` (e.g. "albert-base", "bert-large")."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}. Available: {sorted(PRESETS)}")
        return cls(**PRESETS[name])


def _bert(hidden, intermediate, heads, layers):
    # BERT is ALBERT with E = H and no sharing (paper Table 1).
    return dict(embedding_size=hidden, hidden_size=hidden, intermediate_size=intermediate,
                num_attention_heads=heads, num_hidden_layers=layers, sharing="none")


# v2 releases (their albert_config.json files). xlarge: the released tarball's JSON says 32 heads; the paper
# and the TF-Hub module use 16 (head count does not change the parameter count).
PRESETS: dict[str, dict] = {
    "albert-base": dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12,
                        num_hidden_layers=12),
    "albert-large": dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16,
                         num_hidden_layers=24),
    "albert-xlarge": dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=16,
                          num_hidden_layers=24),
    "albert-xxlarge": dict(hidden_size=4096, intermediate_size=16384, num_attention_heads=64,
                           num_hidden_layers=12),
    "bert-base": _bert(768, 3072, 12, 12),
    "bert-large": _bert(1024, 4096, 16, 24),
    "bert-xlarge": _bert(2048, 8192, 32, 24),
}
