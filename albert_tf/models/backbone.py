"""`AlbertBackbone`: the ALBERT encoder as a Keras model with the official feature names."""

from __future__ import annotations

import contextlib
import dataclasses

import keras

from albert_tf import features
from albert_tf.config import AlbertConfig
from albert_tf.layers import AlbertEmbedding, AlbertEncoder
from albert_tf.layers.common import Dense, truncated_normal
from albert_tf.models.registry import RegisteredModel, register
from albert_tf.models.weight_names import backbone_weights

LAYER_NORM_EPSILON = 1e-12  # official value everywhere, the MLM head included


def _as_config(config) -> AlbertConfig:
    if isinstance(config, AlbertConfig):
        return config
    if isinstance(config, dict):
        return AlbertConfig.from_dict(config)
    raise TypeError(f"`config` must be an AlbertConfig or a dict of its keys. "
                    f"Received: {type(config).__name__}")


@dataclasses.dataclass(frozen=True)
class Performance:
    """Switches that change what a model's computation costs, never its result (each tested
    equal), given to the model's constructor (`performance=`), so they hold before anything
    is traced: the encoder's per-token matmuls on each batch's real tokens only
    (`remove_padding`; a head that reads the padded positions, `reads_padding`, keeps them),
    each layer's activations recomputed in the backward pass (`recompute`), attention as
    einsum (`use_einsum`, the official flag)."""

    remove_padding: bool = False
    recompute: bool = False
    use_einsum: bool = False


def built_backbone(backbone_or_config, dtype=None, performance: Performance | None = None):
    """(backbone, config) for a head's constructor: a built `AlbertBackbone` is used as it is
    (its weights and `performance` are shared with the head); an `AlbertConfig` (or a dict of
    its keys) builds a new one named `albert`, the name its official weights are read under."""
    if isinstance(backbone_or_config, AlbertBackbone):
        return backbone_or_config, backbone_or_config.config
    config = _as_config(backbone_or_config)
    return AlbertBackbone(config, dtype=dtype, performance=performance, name="albert"), config


class AlbertConfigSerialization:
    """`get_config`/`from_config` for models whose constructor is `(config, dtype=None,
    performance=None, **kw)`: the config is stored as its official-key dict, the performance
    switches as the encoder runs them (a reloaded `.keras` model computes the same bits)."""

    def get_config(self):
        encoder = getattr(self, "backbone", self).encoder
        return {"config": self.config.to_dict(), "dtype": self._dtype_arg, "name": self.name,
                "trainable": self.trainable,
                "performance": {"remove_padding": encoder.remove_padding,
                                "recompute": encoder.recompute,
                                "use_einsum": encoder.use_einsum}}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("performance"), dict):
            config["performance"] = Performance(**config["performance"])
        return cls(**config)


def backbone_inputs() -> dict:
    """Symbolic int32 [batch, seq] inputs named as the official features."""
    return {name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in features.BACKBONE_INPUTS}


def set_remove_padding(model, enabled: bool) -> None:
    """Sets `AlbertEncoder.remove_padding` on a model built elsewhere (the exporter's, whose
    model a user gives), before its functions are traced; the library's own models take it as
    a constructor argument (`Performance`). Training, prediction and export set it the same
    way, so a checkpoint gives the same bits on every path.

    A model whose outputs read the encoder at padded positions (`reads_padding`: SQuAD's span
    head, whose official softmax covers every position of the window, padding included) keeps
    the padded computation whatever `enabled` says: removing the padding would leave zeros
    there and change its loss and predictions. Every other head reads real tokens only, so
    `remove_padding` gives it the same results (tests/test_remove_padding.py)."""
    reads_padding = getattr(model, "reads_padding", False)
    getattr(model, "backbone", model).encoder.remove_padding = bool(enabled) and not reads_padding


@contextlib.contextmanager
def padded_computation(model):
    """Within it, functions traced from `model` compute the padded layout (every position, the
    attention masked), whatever its `remove_padding`: the shape a compiled (XLA) function of a
    fixed padded length needs. The real positions' outputs are the same either way
    (tests/test_remove_padding.py)."""
    encoder = getattr(model, "backbone", model).encoder
    saved = encoder.remove_padding
    encoder.remove_padding = False
    try:
        yield
    finally:
        encoder.remove_padding = saved


@register
@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertBackbone(RegisteredModel, AlbertConfigSerialization, keras.Model):
    """ALBERT encoder (arXiv 1909.11942): factorized embedding, shared post-LN blocks, pooler.

    Args:
        config: an `AlbertConfig` (or a dict of its keys).
        dtype: optional dtype policy name for every layer (e.g. "mixed_bfloat16"); None uses the
            global policy. LayerNorm and softmax are computed in float32 under any policy.

    Inputs (dict of int32 [batch, seq]): `input_ids`, `input_mask` (1 = token, 0 = right
    padding), `segment_ids`.

    Outputs (dict): `sequence_output` [batch, seq, H]; `pooled_output` [batch, H] (tanh dense on
    the first token); `hidden_states`, a list of L + 1 tensors [batch, seq, H] (the projected
    embeddings, then every layer's output).

    Example:
        >>> cfg = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=12,
        ...                    num_hidden_layers=2, num_attention_heads=3, intermediate_size=20)
        >>> model = AlbertBackbone(cfg)
        >>> ids = tf.constant([[2, 7, 9, 3, 0]])
        >>> out = model({"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
        ...              "segment_ids": tf.zeros_like(ids)})
        >>> out["sequence_output"].shape, len(out["hidden_states"])
        (TensorShape([1, 5, 12]), 3)
    """

    # The registry contract (`albert_tf.models.registry`): what checkpoints, serving and export ask.
    albert_kind = "backbone"
    hf_architecture = "AlbertModel"
    has_tflite = True

    def hf_extra_state(self, state: dict) -> dict:
        """HF's `AlbertModel` keys carry no `albert.` prefix."""
        return {k[len("albert."):]: v for k, v in state.items()}

    def __init__(self, config, dtype=None, performance: Performance | None = None, **kwargs):
        config = _as_config(config)
        performance = performance or Performance()
        inputs = backbone_inputs()
        embeddings = AlbertEmbedding(
            vocab_size=config.vocab_size, embedding_size=config.embedding_size,
            hidden_size=config.hidden_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            hidden_dropout_prob=config.hidden_dropout_prob,
            initializer_range=config.initializer_range, layer_norm_epsilon=LAYER_NORM_EPSILON,
            dtype=dtype, name="embeddings")
        encoder = AlbertEncoder(
            hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            num_hidden_groups=config.num_hidden_groups, inner_group_num=config.inner_group_num,
            sharing=config.sharing, hidden_act=config.hidden_act,
            hidden_dropout_prob=config.hidden_dropout_prob,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            initializer_range=config.initializer_range, layer_norm_epsilon=LAYER_NORM_EPSILON,
            remove_padding=performance.remove_padding, recompute=performance.recompute,
            use_einsum=performance.use_einsum, dtype=dtype, name="encoder")
        pooler = Dense(
            config.hidden_size, activation="tanh",
            kernel_initializer=truncated_normal(config.initializer_range), dtype=dtype,
            name="pooler")

        x = embeddings(inputs[features.INPUT_IDS], inputs[features.SEGMENT_IDS])
        hidden_states = encoder(x, inputs[features.INPUT_MASK])
        sequence_output = hidden_states[-1]
        pooled_output = pooler(sequence_output[:, 0, :])
        outputs = {"sequence_output": sequence_output, "pooled_output": pooled_output,
                   "hidden_states": hidden_states}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        self.config = config
        self._dtype_arg = dtype
        self.embeddings = embeddings
        self.encoder = encoder
        self.pooler = pooler

    def official_weights(self) -> list:
        """[NamedWeight]: every variable with its official TF1 name (`bert/...`)."""
        return backbone_weights(self)

    @property
    def word_embeddings(self) -> keras.layers.Embedding:
        """The [V, E] table layer (tied to the MLM decoder)."""
        return self.embeddings.word_embeddings
