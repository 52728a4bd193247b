"""Hugging Face ALBERT: `save_pretrained` folders (config.json, safetensors or weights-only
PyTorch files, sharded or not) and `state_dict`s, loaded strictly through the name table; and
written (`write_hf_folder`: config.json, model.safetensors, spiece.model, tokenizer.json and
tokenizer_config.json) as `from_pretrained` reads them."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
from typing import Mapping

import numpy as np

from albert_tf.models import kinds
from albert_tf.checkpoints.common import (CheckpointError, CheckpointMismatchError,
                                          assign_strict, kind_from_heads, to_numpy)
from albert_tf.checkpoints.names import (HF_DERIVED_KEYS, model_kind,
                                         model_weights, official_to_hf)
from albert_tf.checkpoints.tf1 import official_config
from albert_tf.config import AlbertConfig
from albert_tf.ownership import current_umask
from albert_tf.tokenization.in_graph import _combining_class, _whitespace_class
from albert_tf.tokenization.model_file import _model_proto_messages

log = logging.getLogger(__name__)

_HF_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu",
                   "relu": "relu", "tanh": "tanh", "linear": "linear"}
_HF_KEYS = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
            "num_hidden_groups", "num_attention_heads", "intermediate_size", "inner_group_num",
            "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
            "type_vocab_size", "initializer_range")


def config_from_hf(values: dict, source: str = "config.json") -> AlbertConfig:
    """An `AlbertConfig` from a Hugging Face ALBERT `config.json` dict.

    HF metadata keys (architectures, token ids, labels, ...) are ignored; keys that would change
    the architecture away from ALBERT's are refused.
    """
    if values.get("model_type", "albert") != "albert":
        raise CheckpointError(f"{source}: model_type is {values.get('model_type')!r}, not 'albert'")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: position_embedding_type "
                              f"{values['position_embedding_type']!r} is not supported (absolute only)")
    eps = values.get("layer_norm_eps", 1e-12)
    if not np.isclose(eps, 1e-12, rtol=0, atol=1e-15):
        raise CheckpointError(f"{source}: layer_norm_eps={eps}; ALBERT uses 1e-12 everywhere")
    act = values.get("hidden_act", "gelu_new")
    if act not in _HF_ACTIVATIONS:
        raise CheckpointError(f"{source}: hidden_act {act!r} is not supported; supported: "
                              f"{sorted(_HF_ACTIVATIONS)}")
    if act == "gelu":
        log.warning("%s says hidden_act='gelu', which Hugging Face computes as the exact (erf) "
                    "GELU; ALBERT was trained with the tanh approximation (official 'gelu'), "
                    "which this model uses. Outputs differ from HF's by about 1e-3.", source)
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads", "intermediate_size") if k not in values]
    if missing:
        raise CheckpointError(f"{source} lacks the ALBERT keys {missing}")
    kwargs = {k: values[k] for k in _HF_KEYS if k in values}
    kwargs["hidden_act"] = _HF_ACTIVATIONS[act]
    try:
        return AlbertConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{source}: {e}") from None


def _load_hf_weights_file(path: str) -> dict:
    if path.endswith(".safetensors"):
        try:
            from safetensors.numpy import load_file
        except ImportError:
            raise CheckpointError(f"{path} is a safetensors file, and reading it needs the "
                                  "safetensors package: pip install safetensors") from None
        try:
            return load_file(path)
        except Exception as e:  # noqa: BLE001 - SafetensorError: a header or data cut short
            raise CheckpointError(
                f"{path} is damaged (truncated or corrupt: {' '.join(str(e).split())[:200]}): "
                "copy it again from where it came from.") from None
    try:
        import torch
    except ImportError:
        raise CheckpointError(
            f"{path} is a PyTorch pickle; reading it needs torch (pip install torch), or save the "
            "model with safe_serialization=True to get model.safetensors.") from None
    try:
        # weights_only: tensors and plain containers only; never a general unpickle.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"Refusing or unable to load {path} with torch's weights-only "
                              f"loader: {e}") from None
    return {k: v.detach().cpu().float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in state.items()}


def read_hf_folder(path: str) -> tuple[AlbertConfig, dict, str]:
    """(config, state dict of numpy arrays, weights file) of a `save_pretrained` folder.
    `model.safetensors` is preferred over `pytorch_model.bin`; sharded files are supported."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isdir(path) or not os.path.exists(config_path):
        raise CheckpointError(f"{path} is not a Hugging Face model folder (no config.json).")
    with open(config_path, encoding="utf-8") as f:
        config = config_from_hf(json.load(f), config_path)
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if os.path.exists(os.path.join(path, single)):
            file = os.path.join(path, single)
            return config, _load_hf_weights_file(file), file
        if os.path.exists(os.path.join(path, index)):
            with open(os.path.join(path, index), encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            state = {}
            for shard in shards:
                state.update(_load_hf_weights_file(os.path.join(path, shard)))
            return config, state, os.path.join(path, index)
    raise CheckpointError(f"{path} has config.json but no model.safetensors or "
                          "pytorch_model.bin.")


def hf_architectures(path: str) -> list:
    """The `architectures` entry of a Hugging Face folder's `config.json` (empty if none)."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            names = json.load(f).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str)]


def hf_kind(state_dict, architectures=()) -> str:
    """The kind of a Hugging Face state dict: the registered kind of its `architectures` (a
    token classifier and a sequence classifier have the same keys), else from its heads."""
    for architecture in architectures:
        kind = kinds.kind_of_hf_architecture(architecture)
        if kind is not None:
            return kind
    keys = list(state_dict)
    num_labels = (np.shape(state_dict["classifier.weight"])[0]
                  if "classifier.weight" in state_dict else None)
    return kind_from_heads(any(k.startswith("predictions.") for k in keys),
                            any(k.startswith("sop_classifier.") for k in keys), num_labels,
                            "the Hugging Face checkpoint")


def _identity_projection(state_dict, prefix: str, source: str) -> bool:
    """For an E = H model: Hugging Face always builds `embedding_hidden_mapping_in`; it can be
    dropped only when it is the identity with zero bias. Otherwise the checkpoint is a model
    ours cannot represent, and loading it would silently change its outputs."""
    weight, bias = state_dict.get(prefix + "weight"), state_dict.get(prefix + "bias")
    if weight is None and bias is None:
        return False
    weight, bias = to_numpy(weight), to_numpy(bias)
    if np.array_equal(weight, np.eye(*weight.shape)) and not np.any(bias):
        return True
    raise CheckpointMismatchError(
        f"{source}: embedding_size == hidden_size, so the model has no E -> H projection "
        f"(official rule), but {prefix}weight/bias is not the identity with zero bias (max "
        f"|W - I| {np.abs(weight - np.eye(*weight.shape)).max():.3g}, max |b| "
        f"{np.abs(bias).max():.3g}); this checkpoint's model cannot be represented. Use a config "
        "with embedding_size != hidden_size only if the checkpoint really has one.")


def load_hf_state_dict(model, state_dict: Mapping[str, object], source="state_dict") -> dict:
    """Copies a Hugging Face ALBERT `state_dict` into `model` strictly (see `assign_strict`).

    Keys may carry the `albert.` prefix (`AlbertForPreTraining`, `AlbertFor...`) or not
    (`AlbertModel`). When loading a backbone, the heads' entries are skipped (reported).
    """
    prefixed = any(k.startswith("albert.") for k in state_dict)

    def key_of(official_name):
        key, transposed = official_to_hf(official_name)
        if not prefixed and key.startswith("albert."):
            key = key[len("albert."):]
        return key, transposed

    derived = {k if prefixed else k.replace("albert.", "", 1) for k in HF_DERIVED_KEYS}
    kind = model_kind(model)
    other_heads = kinds.other_heads_hf_prefixes(model)
    projection = ("albert." if prefixed else "") + "encoder.embedding_hidden_mapping_in."
    identity = _identity_projection(state_dict, projection, source) \
        if model.config.embedding_size == model.config.hidden_size else False

    def skip_reason(key):
        if key in derived:
            return "derived (buffer or tied copy)"
        if identity and key.startswith(projection):
            return "identity E -> H projection (E = H: the model has none)"
        for head, prefixes in other_heads.items():
            if key.startswith(prefixes):
                return f"{head} head, not part of a {kind}"
        return None

    absent = tuple(p if prefixed else p.replace("albert.", "", 1)  # as the keys are
                   for p in kinds.class_of(model).hf_absent_prefixes)
    return assign_strict(model, state_dict.keys(), lambda k: state_dict[k], key_of, skip_reason,
                         source, may_lack=lambda key: key.startswith(absent))


# ---------------------------------------------------------------------------------------------
# Writing a `save_pretrained` folder.
HF_FILES = ("config.json", "model.safetensors", "spiece.model", "tokenizer.json",
            "tokenizer_config.json")
# Our activation -> HF's name for the same function (ours "gelu" is the tanh approximation).
_ACTIVATIONS_TO_HF = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh", "linear": "linear"}
# AlbertTokenizer's special tokens, the pieces of the official SentencePiece vocabularies.
_SPECIAL_TOKENS = {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "<unk>",
                   "sep_token": "[SEP]", "pad_token": "<pad>", "cls_token": "[CLS]",
                   "mask_token": "[MASK]"}


def hf_config_dict(model, labels=None) -> dict:
    """The Hugging Face `config.json` of `model` (a backbone, pretrainer or classifier), under
    which `from_pretrained` builds exactly its model; refuses what HF cannot build as ours."""
    kind = model_kind(model)
    architecture = kinds.class_of(model).hf_architecture
    if architecture is None:
        written = ", ".join(c.hf_architecture for c in kinds.registered_classes()
                            if c.hf_architecture)
        raise CheckpointError(
            f"a {kind} model has no Hugging Face class this converter maps its head to (it "
            f"writes {written}); write its backbone (--model backbone) or keep it in our "
            "format.")
    config = official_config(model.config)  # refuses attention-only / FFN-only sharing
    if config.hidden_act not in _ACTIVATIONS_TO_HF:
        raise CheckpointError(f"hidden_act {config.hidden_act!r} has no Hugging Face name.")
    per_group = config.num_hidden_layers // config.num_hidden_groups
    if config.inner_group_num > per_group:
        raise CheckpointError(
            f"inner_group_num={config.inner_group_num} exceeds num_hidden_layers / "
            f"num_hidden_groups = {per_group}: Hugging Face's AlbertTransformer cannot run that "
            "model (IndexError in its head-mask slicing). Keep it in our format.")
    values = {"architectures": [architecture], "model_type": "albert",
              **{k: getattr(config, k) for k in _HF_KEYS},
              "hidden_act": _ACTIVATIONS_TO_HF[config.hidden_act], "layer_norm_eps": 1e-12,
              "position_embedding_type": "absolute", "classifier_dropout_prob": float(
                  getattr(model, "dropout_rate", 0.1)),
              "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3, "torch_dtype": "float32"}
    try:
        values.update(model.hf_config(labels))  # the head's own entries (labels)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    return values


def hf_state_dict(model) -> dict:
    """{Hugging Face key: float32 numpy array} of `model`, as `save_pretrained` names them (an
    AlbertModel's without the `albert.` prefix): every weight through the one name table,
    kernels transposed to PyTorch's [out, in]; an E = H model's `embedding_hidden_mapping_in`
    (which HF always builds) the identity with zero bias; the MLM decoder (tied) written too."""
    kind = model_kind(model)
    state = {}
    for weight in model_weights(model):
        try:
            key, transposed = official_to_hf(weight.official_name)
        except KeyError as e:
            raise CheckpointError(f"{e.args[0]} (a {kind} model)") from None
        value = np.asarray(weight.to_official(weight.variable.numpy()), np.float32)
        state[key] = np.ascontiguousarray(value.T if transposed else value)
    cfg = model.config
    if cfg.embedding_size == cfg.hidden_size:
        state["albert.encoder.embedding_hidden_mapping_in.weight"] = np.eye(cfg.hidden_size,
                                                                           dtype=np.float32)
        state["albert.encoder.embedding_hidden_mapping_in.bias"] = np.zeros(cfg.hidden_size,
                                                                           np.float32)
    absent = kinds.class_of(model).hf_absent_prefixes  # weights HF's class does not have
    state = {k: v for k, v in state.items() if not k.startswith(absent)}
    return model.hf_extra_state(state)  # tied copies, AlbertModel's unprefixed keys


def _check_special_pieces(sentencepiece_model: str) -> None:
    """AlbertTokenizer finds its special tokens by piece: refuses a vocabulary that lacks one
    (HF would map it to <unk> without a word)."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=sentencepiece_model)
    pieces = {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
    missing = sorted(set(_SPECIAL_TOKENS.values()) - pieces)
    if missing:
        raise CheckpointError(f"{sentencepiece_model} has no piece {missing}: Hugging Face's "
                              "AlbertTokenizer needs the official special pieces.")


# sentencepiece's ModelProto.SentencePiece.Type: UNKNOWN, CONTROL (special tokens), USER_DEFINED.
_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4


def tokenizer_json(sentencepiece_model: str, do_lower_case: bool = True) -> dict:
    """The `tokenizer.json` of `AlbertTokenizerFast` (the `tokenizers` library's format) that
    encodes as our `Tokenizer` does: the official preprocessing (whitespace stripped and
    collapsed, NFKD without accents, lowercased; `` and '' kept, where transformers' own
    conversion of spiece.model maps them to "), the model's SentencePiece normalization (its
    precompiled character map), "▁" before each word, and the unigram model with the model's
    pieces and scores, a user-defined piece ("-", "." ...) scored 0 as SentencePiece keeps it
    whole. Without it, transformers converts spiece.model itself and puts a "▁" after each
    user-defined piece and at a trailing space (every WikiText line of the sample differs).
    The official re-split of pieces ending in digit + comma is not expressible here (the slow
    `AlbertTokenizer` does it)."""
    messages = _model_proto_messages()  # no sentencepiece_model_pb2: no protobuf version tie
    proto = messages["ModelProto"]()
    with open(sentencepiece_model, "rb") as f:
        proto.ParseFromString(f.read())
    ids = {p.piece: i for i, p in enumerate(proto.pieces)}
    # The official preprocessing with Python's own character tables, as the in-graph tokenizer
    # spells it: whitespace is what str.split() splits on (\x1c-\x1f included), accents what
    # unicodedata.combining() reports (a Devanagari or Thai vowel sign is not one:
    # StripAccents removed it), and lowercasing keeps a word-final sigma final (str.lower()'s
    # rule; the Lowercase normalizer maps each character alone).
    normalizers = [{"type": "Replace", "pattern": {"Regex": _whitespace_class() + "+"},
                    "content": " "},
                   {"type": "Strip", "strip_left": True, "strip_right": True},
                   {"type": "NFKD"},
                   {"type": "Replace", "pattern": {"Regex": _combining_class()}, "content": ""}]
    if do_lower_case:
        normalizers += [{"type": "Replace", "pattern": {"Regex": "(?<=\\p{L})\u03a3(?!\\p{L})"},
                         "content": "\u03c2"}, {"type": "Lowercase"}]
    normalizers += [{"type": "Precompiled", "precompiled_charsmap": base64.b64encode(
                        proto.normalizer_spec.precompiled_charsmap).decode("ascii")},
                    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                    {"type": "Strip", "strip_left": True, "strip_right": True}]
    metaspace = {"replacement": "\u2581", "prepend_scheme": "always", "split": True}

    def special(name, type_id):
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def sequence(name, type_id):
        return {"Sequence": {"id": name, "type_id": type_id}}

    cls, sep = _SPECIAL_TOKENS["cls_token"], _SPECIAL_TOKENS["sep_token"]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": p.piece, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, p in enumerate(proto.pieces) if p.type in (_UNKNOWN, _CONTROL)],
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": {"type": "Metaspace", **metaspace},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(cls, 0), sequence("A", 0), special(sep, 0)],
            "pair": [special(cls, 0), sequence("A", 0), special(sep, 0), sequence("B", 1),
                     special(sep, 1)],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (cls, sep)}},
        "decoder": {"type": "Metaspace", **metaspace},
        "model": {"type": "Unigram", "unk_id": ids[_SPECIAL_TOKENS["unk_token"]],
                  "vocab": [[p.piece, 0.0 if p.type == _USER_DEFINED else p.score]
                            for p in proto.pieces],
                  "byte_fallback": False}}


def write_hf_folder(model, output_dir: str, sentencepiece_model: str | None = None,
                    do_lower_case: bool = True, labels=None) -> str:
    """Writes `model` (backbone, pretrainer or classifier) as a Hugging Face `save_pretrained`
    folder: `config.json` (`hf_config_dict`), `model.safetensors` (`hf_state_dict`) and, with a
    SentencePiece model, `spiece.model`, `tokenizer.json` (`tokenizer_json`: the fast tokenizer,
    our ids) and `tokenizer_config.json` (AlbertTokenizer with `do_lower_case`, the official
    preprocessing), so that `AlbertModel` / `AlbertFor....from_pretrained(output_dir)`,
    `AutoTokenizer.from_pretrained(output_dir)` (fast or slow) and `pipeline(...)` load it.
    Everything is checked before anything is written. Returns `output_dir`."""
    try:
        from safetensors.numpy import save_file
    except ImportError:
        raise CheckpointError("--target hf writes model.safetensors, which needs the "
                              "safetensors package: pip install safetensors") from None

    values = hf_config_dict(model, labels)
    state = hf_state_dict(model)
    if sentencepiece_model:
        _check_special_pieces(sentencepiece_model)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(values, f, indent=2)
    weights = os.path.join(output_dir, "model.safetensors")
    save_file(state, weights, metadata={"format": "pt"})
    os.chmod(weights, 0o666 & ~current_umask())  # safetensors writes 0600; open() would not
    if sentencepiece_model:
        shutil.copy(sentencepiece_model, os.path.join(output_dir, "spiece.model"))
        tokenizer = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": bool(do_lower_case),
                     "remove_space": True, "keep_accents": False,
                     "model_max_length": model.config.max_position_embeddings,
                     **_SPECIAL_TOKENS}
        with open(os.path.join(output_dir, "tokenizer_config.json"), "w",
                  encoding="utf-8") as f:
            json.dump(tokenizer, f, indent=2)
        with open(os.path.join(output_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_json(sentencepiece_model, do_lower_case), f, ensure_ascii=False)
    return output_dir
