"""The TF Hub pair: a preprocessing SavedModel and a trainable encoder SavedModel, in the API of
TF Hub's BERT-family models (Model Garden's `export_tfhub.py`; tensorflow.org/hub "Common
SavedModel APIs for Text"), so `hub.KerasLayer` users load ALBERT as they load BERT.

    DIR/
        preprocess/   strings -> input_word_ids, input_mask, input_type_ids (int32 [batch,
                      seq_length]); `tokenize` and `bert_pack_inputs` for pairs
        encoder/      input_word_ids, input_mask, input_type_ids -> pooled_output,
                      sequence_output, encoder_outputs (one per layer), default (= pooled)

Preprocessing is ours: the official normalization and SentencePiece in-graph
(`InGraphTokenizer`, the ids of `Tokenizer.encode`) and the official packing
(`packing.pack_in_graph`: `[CLS] a [SEP] b [SEP]`, the longer segment truncated first), where
Model Garden's packer trims round-robin. The outputs are padded to `seq_length` (the packer's
argument; the root call's is the export's `seq_length`).

The encoder is `AlbertBackbone` with its variables exported trainable (`trainable_variables`,
`variables`, `regularization_losses` as `hub.KerasLayer(..., trainable=True)` reads them) and
`training` switching dropout. It keeps the SentencePiece model (`sp_model_file`, as the ALBERT
modules do) and `albert_config.json` in its assets.

Both are written into a temporary directory beside DIR and renamed to DIR when whole; DIR must
not exist or be empty.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import tensorflow as tf

from albert_tf.models.backbone import AlbertBackbone
from albert_tf.checkpoints import CONFIG_FILE, CheckpointError, initialize_backbone
from albert_tf.checkpoints.conversion import TFHUB_RECORD
from albert_tf.checkpoints.conversion import carried_tokenizer, checkpoint_config
from albert_tf.features import INPUT_IDS, INPUT_MASK, SEGMENT_IDS
from albert_tf.ownership import current_umask
from albert_tf.packing import PAIR_SPECIAL_TOKENS, SINGLE_SPECIAL_TOKENS, pack_in_graph
from albert_tf.tokenization import Tokenizer
from albert_tf.export.saved_model import ExportError

# TF Hub's input names -> ours.
HUB_INPUTS = {"input_word_ids": INPUT_IDS, "input_mask": INPUT_MASK,
              "input_type_ids": SEGMENT_IDS}


class _Untracked:
    """Holds an object out of SavedModel tracking (a plain Python object is not traversed)."""

    def __init__(self, value):
        self.value = value


def _tf_variables(model) -> list:
    """The tf.Variables behind a Keras 3 model's variables (weights and dropout seed states).
    They are tracked directly: Keras 3 would export each keras.Variable as a second copy."""
    return [getattr(v, "value", v) for v in model.variables]


# ---------------------------------------------------------------------------------------------
# The source: any checkpoint `--init_checkpoint` reads.
def load_backbone(path: str, albert_config_file: str | None = None,
                  spm_model_file: str | None = None):
    """(backbone, SentencePiece model path, report) of any `--init_checkpoint` source: an
    official TF1 checkpoint or TF-Hub module, a Hugging Face folder, our model directory or
    `.keras` file, a training `--output_dir` (`DIR:best`) or one of its checkpoints, read
    strictly by `initialize_backbone` (the heads dropped). The SentencePiece model defaults to
    the one the source carries (`carried_tokenizer`: a `.keras` model's, the one beside the
    source or in its assets/)."""
    config = checkpoint_config(path, albert_config_file)
    with tf.device("/cpu:0"):
        backbone = AlbertBackbone(config, name="albert")
    report = initialize_backbone(backbone, path)
    spm_model_file = spm_model_file or carried_tokenizer(path)["spm_model_file"]
    if not spm_model_file:
        raise ExportError(f"No SentencePiece model beside {path}; pass --spm_model_file.")
    if not os.path.exists(spm_model_file):
        raise ExportError(f"SentencePiece model not found: {spm_model_file}")
    return backbone, spm_model_file, report


# ---------------------------------------------------------------------------------------------
# The encoder.
class HubEncoder(tf.train.Checkpoint):
    """The encoder SavedModel's root: `__call__(inputs, training=False)` with `inputs` a dict of
    int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`; returns a dict of
    `pooled_output` [batch, H], `sequence_output` [batch, seq, H], `encoder_outputs` (a list of
    L [batch, seq, H], each layer's output) and `default` (= `pooled_output`)."""

    def __init__(self, backbone, spm_model_file: str, config_file: str):
        super().__init__()
        self._backbone = _Untracked(backbone)
        self.variables = _tf_variables(backbone)
        self.trainable_variables = [v for v in self.variables if v.trainable]
        self.regularization_losses = []
        self.sp_model_file = tf.saved_model.Asset(spm_model_file)
        self.albert_config_file = tf.saved_model.Asset(config_file)
        self.__call__ = tf.function(self._call)
        spec = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in HUB_INPUTS}
        for training in (False, True):
            self.__call__.get_concrete_function(spec, training=training)

    def _call(self, inputs, training=False):
        outputs = self._backbone.value({ours: tf.cast(inputs[hub], tf.int32)
                                        for hub, ours in HUB_INPUTS.items()}, training=training)
        return {"pooled_output": outputs["pooled_output"],
                "sequence_output": outputs["sequence_output"],
                "encoder_outputs": list(outputs["hidden_states"][1:]),
                "default": outputs["pooled_output"]}


# ---------------------------------------------------------------------------------------------
# The preprocessor.
def _segments(inputs) -> list:
    """1 or 2 segments of int32 ids [batch, (tokens)] (rank-2 ragged rows, e.g. words of
    pieces, are flattened)."""
    return [s.merge_dims(1, -1) if s.ragged_rank > 1 else s for s in inputs]


def _pad_to(tensor, length):
    return tf.pad(tensor, [[0, 0], [0, length - tf.shape(tensor)[1]]])


class HubPackInputs(tf.train.Checkpoint):
    """`bert_pack_inputs(segments, seq_length=...)`: a list of 1 or 2 int32 RaggedTensors
    [batch, (tokens)] (or [batch, (words), (tokens)]) -> the encoder's three inputs, int32
    [batch, seq_length]: `[CLS] a [SEP] (b [SEP])`, the longer segment truncated first (an empty
    b packs as one segment, as the official classifier does), padded with 0."""

    def __init__(self, default_seq_length: int, special):
        super().__init__()
        self._special = _Untracked(special)

        def pack(inputs, seq_length=default_seq_length):
            segments = _segments(inputs)
            if len(segments) not in (1, 2):
                raise ValueError(f"bert_pack_inputs packs 1 or 2 segments, not {len(segments)}.")
            need = SINGLE_SPECIAL_TOKENS if len(segments) == 1 else PAIR_SPECIAL_TOKENS
            check = tf.debugging.assert_greater_equal(
                seq_length, need, message=f"seq_length must be at least {need} for "
                f"{len(segments)} segment(s)")
            with tf.control_dependencies([check]):
                width = tf.cast(seq_length, tf.int32)
            packed = pack_in_graph(*segments, max_seq_length=tf.cast(width, tf.int64),
                                   special=self._special.value)
            return {"input_word_ids": _pad_to(packed[INPUT_IDS], width),
                    "input_mask": _pad_to(packed[INPUT_MASK], width),
                    "input_type_ids": _pad_to(packed[SEGMENT_IDS], width)}

        self.__call__ = tf.function(pack, autograph=False)
        for ragged_rank in (1, 2):
            for count in (1, 2):
                self.__call__.get_concrete_function(
                    [tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32)] * count,
                    seq_length=tf.TensorSpec([], tf.int32))


class HubTokenize(tf.train.Checkpoint):
    """`tokenize(sentences)`: string [batch] -> int32 RaggedTensor [batch, (ids)], the ids of
    `Tokenizer.encode`; `tokenize.get_special_tokens_dict()`: the ids and vocabulary size."""

    def __init__(self, in_graph, vocab_size: int):
        super().__init__()
        self._tokenizer = _Untracked(in_graph)
        self.sentencepiece = in_graph.trackable  # the vocabulary's resource
        self.__call__ = tf.function(lambda sentences: self._tokenizer.value(sentences),
                                    input_signature=[tf.TensorSpec([None], tf.string)])
        special = {"vocab_size": vocab_size, "start_of_sequence_id": in_graph.cls_id,
                   "end_of_segment_id": in_graph.sep_id, "padding_id": in_graph.pad_id,
                   "mask_id": -1 if in_graph.mask_id is None else in_graph.mask_id}
        self.get_special_tokens_dict = tf.train.Checkpoint()
        self.get_special_tokens_dict.__call__ = tf.function(
            lambda: {k: tf.constant(v, tf.int32) for k, v in special.items()},
            input_signature=[])


class HubPreprocessor(tf.train.Checkpoint):
    """The preprocessing SavedModel's root: `__call__(sentences)` (string [batch]) -> the
    encoder's inputs for one segment at `seq_length`; `tokenize`, `bert_pack_inputs`."""

    def __init__(self, tokenizer: Tokenizer, seq_length: int):
        super().__init__()
        in_graph = tokenizer.in_graph()
        self.tokenize = HubTokenize(in_graph, tokenizer.vocab_size)
        self.bert_pack_inputs = HubPackInputs(seq_length, in_graph)
        self.sp_model_file = tf.saved_model.Asset(tokenizer.spm_model_file)
        self.__call__ = tf.function(
            lambda sentences: self.bert_pack_inputs.__call__([self.tokenize.__call__(sentences)]),
            input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])


# ---------------------------------------------------------------------------------------------
# Writing.
def _readable_tree(directory: str) -> None:
    """Modes a plain mkdir and write would give under the umask (mkdtemp makes 0700)."""
    umask = current_umask()
    os.chmod(directory, 0o777 & ~umask)
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


def _check_target(export_dir: str) -> None:
    if os.path.exists(export_dir) and (not os.path.isdir(export_dir) or os.listdir(export_dir)):
        raise ExportError(f"{export_dir} exists and is not an empty directory; the TF Hub "
                          "pair is written to a new one. Choose another --export_dir (or "
                          "remove that one).")


def export_tfhub(backbone, export_dir: str, spm_model_file: str, seq_length: int = 128,
                 do_lower_case: bool = True, source: dict | None = None) -> dict:
    """Writes `export_dir/preprocess` and `export_dir/encoder` (module docstring).

    Args:
        backbone: an `AlbertBackbone` (a head's `.backbone`).
        export_dir: a directory that does not exist yet, or an empty one.
        spm_model_file: the model's SentencePiece model.
        seq_length: the preprocessor's sequence length (its root call; `bert_pack_inputs`'
            default), at most `max_position_embeddings`.
        do_lower_case: the tokenizer's lowercasing (the released models: True).
        source: where the weights came from (kept in each SavedModel's assets.extra/).

    Returns:
        The record written: paths, seq_length, config, vocabulary.
    """
    export_dir = os.path.abspath(export_dir)
    _check_target(export_dir)
    config = backbone.config
    if not 2 <= seq_length <= config.max_position_embeddings:
        raise ExportError(f"seq_length must be between 2 and the model's "
                          f"max_position_embeddings={config.max_position_embeddings}. "
                          f"Received: seq_length={seq_length}")
    tokenizer = Tokenizer(spm_model_file, do_lower_case)
    if tokenizer.vocab_size != config.vocab_size:
        raise ExportError(f"{spm_model_file} has {tokenizer.vocab_size} pieces but the model's "
                          f"vocab_size is {config.vocab_size}.")
    os.makedirs(os.path.dirname(export_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-tfhub-", dir=os.path.dirname(export_dir))
    record = {"config": config.to_dict(), "seq_length": seq_length,
              "do_lower_case": do_lower_case, "sentencepiece_sha256": tokenizer.sha256,
              "source": source or {}, "exported_with": {"tensorflow": tf.__version__}}
    try:
        config_file = os.path.join(tmp, CONFIG_FILE)
        config.to_json_file(config_file)
        tf.saved_model.save(HubPreprocessor(tokenizer, seq_length),
                            os.path.join(tmp, "preprocess"))
        tf.saved_model.save(HubEncoder(backbone, spm_model_file, config_file),
                            os.path.join(tmp, "encoder"))
        os.remove(config_file)
        for part in ("preprocess", "encoder"):
            os.makedirs(os.path.join(tmp, part, "assets.extra"))
            with open(os.path.join(tmp, part, "assets.extra", TFHUB_RECORD), "w",
                      encoding="utf-8") as f:
                json.dump(dict(record, part=part), f, indent=2)
        _readable_tree(tmp)
        if os.path.isdir(export_dir):
            os.rmdir(export_dir)  # empty (checked); a file written there since fails here
        os.rename(tmp, export_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dict(record, preprocess=os.path.join(export_dir, "preprocess"),
                encoder=os.path.join(export_dir, "encoder"))


__all__ = ["CheckpointError", "ExportError", "HubEncoder", "HubPreprocessor", "export_tfhub",
           "load_backbone"]
