"""AlbertConfig: official JSON round trip, presets, strict validation with clear messages."""

import json
import math
import os

import keras
import numpy as np
import pytest

from albert_tf import PRESETS, AlbertConfig
from albert_tf.config import REQUIRED_KEYS
from albert_tf.layers import AlbertFeedForward, AlbertMaskedLMHead
from albert_tf.params import backbone_param_count

TESTDATA = os.path.join(os.path.dirname(__file__), "testdata")
RELEASED = os.path.join(TESTDATA, "released_configs")  # README.md there: where each came from
RELEASED_FILES = sorted(n for n in os.listdir(RELEASED) if n.endswith(".json"))


def test_official_v2_json_round_trips_key_for_key(tmp_path):
    src = os.path.join(TESTDATA, "albert_base_v2_config.json")
    cfg = AlbertConfig.from_json_file(src)
    assert cfg == AlbertConfig.from_preset("albert-base")
    out = tmp_path / "albert_config.json"
    cfg.to_json_file(out)
    original, written = json.load(open(src)), json.load(open(out))
    assert list(written) == list(original)  # same keys, same order
    assert written == original               # same values (0 == 0.0)
    assert AlbertConfig.from_json_file(out) == cfg


def test_sharing_is_written_only_when_not_official(tmp_path):
    assert "sharing" not in AlbertConfig().to_dict()
    cfg = AlbertConfig(sharing="ffn")
    cfg.to_json_file(tmp_path / "c.json")
    assert json.load(open(tmp_path / "c.json"))["sharing"] == "ffn"
    assert AlbertConfig.from_json_file(tmp_path / "c.json") == cfg


def test_xlarge_released_json_loads_as_written():
    cfg = AlbertConfig.from_json_file(os.path.join(TESTDATA, "albert_xlarge_v2_config.json"))
    assert cfg.num_attention_heads == 32  # tarball value, not the preset's 16
    assert AlbertConfig.from_preset("albert-xlarge").num_attention_heads == 16
    assert backbone_param_count(cfg) == 58_724_864  # heads do not change the count


def test_presets():
    assert sorted(PRESETS) == ["albert-base", "albert-large", "albert-xlarge", "albert-xxlarge",
                               "bert-base", "bert-large", "bert-xlarge"]
    counts = {name: backbone_param_count(AlbertConfig.from_preset(name)) for name in PRESETS}
    assert counts["albert-base"] == 11_683_584
    assert counts["albert-large"] == 17_683_968
    assert counts["albert-xlarge"] == 58_724_864
    assert counts["albert-xxlarge"] == 222_595_584
    for name in ("bert-base", "bert-large", "bert-xlarge"):
        cfg = AlbertConfig.from_preset(name)
        assert cfg.embedding_size == cfg.hidden_size and cfg.sharing == "none"
    with pytest.raises(ValueError, match=r"Unknown preset 'albert-huge'.*albert-base"):
        AlbertConfig.from_preset("albert-huge")


@pytest.mark.slow
@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=100, num_attention_heads=3),
     r"`hidden_size` must be a multiple of `num_attention_heads`. Received: hidden_size=100, "
     r"num_attention_heads=3"),
    (dict(num_hidden_groups=13),
     r"`num_hidden_groups` must be at most `num_hidden_layers`.*num_hidden_groups=13, "
     r"num_hidden_layers=12"),
    (dict(hidden_size=0), r"`hidden_size` must be a positive integer. Received: hidden_size=0"),
    (dict(vocab_size=-5), r"`vocab_size` must be a positive integer. Received: vocab_size=-5"),
    (dict(intermediate_size=3072.0),
     r"`intermediate_size` must be a positive integer. Received: intermediate_size=3072.0"),
    (dict(hidden_act="swishy"), r"`hidden_act` must be one of .*Received: hidden_act='swishy'"),
    (dict(sharing="some"), r"`sharing` must be one of \('all', 'attention', 'ffn', 'none'\). "
                           r"Received: sharing='some'"),
    (dict(hidden_dropout_prob=1.0),
     r"`hidden_dropout_prob` must be a number in \[0, 1\). Received: hidden_dropout_prob=1.0"),
    (dict(initializer_range=0), r"`initializer_range` must be a positive number"),
    (dict(down_scale_factor=2), r"only down_scale_factor=1 is supported. Received: "
                                r"down_scale_factor=2"),
    (dict(net_structure_type=1), r"only net_structure_type=0 is supported"),
    (dict(gap_size=3), r"only gap_size=0 is supported"),
    (dict(num_memory_blocks=4), r"only num_memory_blocks=0 is supported"),
])
def test_invalid_values_say_what_must_hold(changes, message):
    with pytest.raises(ValueError, match=message):
        AlbertConfig(**changes)


def test_unknown_key_raises(tmp_path):
    path = tmp_path / "albert_config.json"
    values = AlbertConfig().to_dict()
    values["layer_norm_eps"] = 1e-12
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError, match=r"albert_config.json.*Unknown ALBERT config keys "
                                         r"\['layer_norm_eps'\]"):
        AlbertConfig.from_json_file(path)


@pytest.mark.parametrize("drop", [["hidden_size"], ["vocab_size"], ["embedding_size"],
                                  ["num_hidden_layers", "num_attention_heads"],
                                  ["intermediate_size"]])
def test_a_file_without_an_architecture_key_names_the_file_and_the_keys(tmp_path, drop):
    """A config file lacking a key whose default differs between this code (ALBERT-base) and
    the official `modeling.AlbertConfig` (xxlarge), or that every released file gives, is
    refused, naming the file and each missing key; nothing falls back to a default."""
    values = json.load(open(os.path.join(TESTDATA, "albert_base_v2_config.json")))
    for key in drop:
        del values[key]
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as error:
        AlbertConfig.from_json_file(path)
    assert str(error.value).startswith(f"Invalid ALBERT config file {path}: Missing ALBERT "
                                       f"config keys {drop}.")
    with pytest.raises(ValueError, match=r"Missing ALBERT config keys"):
        AlbertConfig.from_dict(values)


def test_required_keys_and_what_still_loads():
    """The required keys are the architecture's; the keys whose official default is ours
    (groups, dropout, positions, ...) may be left out; every config the repo ships loads;
    `AlbertConfig(...)` in Python keeps its defaults."""
    assert REQUIRED_KEYS == ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                             "num_attention_heads", "intermediate_size")
    minimal = {k: v for k, v in AlbertConfig().to_dict().items() if k in REQUIRED_KEYS}
    assert AlbertConfig.from_dict(minimal) == AlbertConfig()
    sample = os.path.join(os.path.dirname(TESTDATA), "..", "albert_tf", "sample_data")
    shipped = [os.path.join(sample, n) for n in sorted(os.listdir(sample))
               if n.startswith("albert_config") and n.endswith(".json")]
    shipped += [os.path.join(TESTDATA, n) for n in sorted(os.listdir(TESTDATA))
                if n.endswith("_config.json")]
    assert len(shipped) == 4
    for path in shipped:
        assert AlbertConfig.from_json_file(path).vocab_size in (8000, 30000)
    assert AlbertConfig(hidden_size=128, num_attention_heads=2).intermediate_size == 3072


def test_bad_files_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        AlbertConfig.from_json_file(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json is not valid JSON"):
        AlbertConfig.from_json_file(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"list.json must hold a JSON object"):
        AlbertConfig.from_json_file(tmp_path / "list.json")


def test_config_is_frozen_and_replace_validates():
    cfg = AlbertConfig()
    with pytest.raises(Exception):
        cfg.hidden_size = 10  # frozen
    assert cfg.replace(hidden_size=1536).hidden_size == 1536
    with pytest.raises(ValueError, match="multiple of"):
        cfg.replace(hidden_size=770)


# ---------------------------------------------------------------------------------------------
# Every released albert_config.json (tests/testdata/released_configs/README.md).
RELEASED_BACKBONE_PARAMS = {"base": 11_683_584, "large": 17_683_968, "xlarge": 58_724_864,
                            "xxlarge": 222_595_584}
ZH_VOCAB_SAVING = (30000 - 21128) * 128  # vocab_chinese.txt has 21,128 entries, E = 128


def test_every_released_config_loads_as_written():
    """All twelve files load; every key has the file's value (`layers_to_keep: []` is accepted
    and dropped); the backbone sizes are the released ones (the Chinese models' vocabulary is
    8,872 entries smaller)."""
    assert len(RELEASED_FILES) == 12
    carry_layers_to_keep = []
    for name in RELEASED_FILES:
        path = os.path.join(RELEASED, name)
        values = json.load(open(path))
        cfg = AlbertConfig.from_json_file(path)
        for key, value in values.items():
            if key == "layers_to_keep":
                carry_layers_to_keep.append(name)
                continue
            assert getattr(cfg, key) == value, (name, key)
        size = name.split("_")[1]
        expected = RELEASED_BACKBONE_PARAMS[size]
        if name.endswith("_zh.json"):
            assert cfg.hidden_act == "relu" and cfg.vocab_size == 21128
            expected -= ZH_VOCAB_SAVING
        assert backbone_param_count(cfg) == expected, name
    assert carry_layers_to_keep == ["albert_base_zh.json", "albert_large_zh.json",
                                    "albert_xlarge_zh.json", "albert_xxlarge_v1.json",
                                    "albert_xxlarge_zh.json"]
    assert backbone_param_count(AlbertConfig.from_json_file(
        os.path.join(RELEASED, "albert_base_zh.json"))) == 10_547_968


def _zeros(self, shape, dtype=None):
    return keras.ops.zeros(shape, dtype=dtype)


def _official_shapes(c: AlbertConfig) -> dict:
    """Official TF1 variable name -> shape, from the config alone."""
    v, e, h, i = c.vocab_size, c.embedding_size, c.hidden_size, c.intermediate_size
    block = "bert/encoder/transformer/group_0/inner_group_0/"
    return {
        "bert/embeddings/word_embeddings": (v, e),
        "bert/embeddings/token_type_embeddings": (c.type_vocab_size, e),
        "bert/embeddings/position_embeddings": (c.max_position_embeddings, e),
        "bert/encoder/embedding_hidden_mapping_in/kernel": (e, h),
        block + "attention_1/self/query/kernel": (h, h),
        block + "attention_1/output/dense/kernel": (h, h),
        block + "ffn_1/intermediate/dense/kernel": (h, i),
        block + "ffn_1/intermediate/output/dense/kernel": (i, h),
        block + "LayerNorm_1/gamma": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "cls/predictions/transform/dense/kernel": (h, e),
        "cls/predictions/output_bias": (v,),
        "cls/seq_relationship/output_weights": (2, h),
    }


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "xxlarge" in n
                                  else n for n in RELEASED_FILES])
def test_every_released_config_builds_its_model(name, monkeypatch):
    """The pretraining model each released file describes: every official weight has the shape
    the file says, the attention has its head count, the FFN and the MLM transform its
    activation, the layers its dropout; for the base files a forward pass gives [1, 4, H],
    L + 1 hidden states and V logits (an xxlarge one takes 7 s). Zero initial values: the
    shapes are the test, and xxlarge builds in 1.6 s instead of 17 s."""
    from albert_tf.models.pretrainer import AlbertPretrainer
    monkeypatch.setattr(keras.initializers.TruncatedNormal, "__call__", _zeros)
    cfg = AlbertConfig.from_json_file(os.path.join(RELEASED, name))
    model = AlbertPretrainer(cfg)
    shapes = {w.official_name: tuple(w.variable.shape)[::-1 if w.transposed else 1]
              for w in model.official_weights()}
    for official_name, shape in _official_shapes(cfg).items():
        assert shapes[official_name] == shape, (name, official_name)
    assert len(shapes) == 32  # one shared block (G = 1, inner = 1) and both heads
    encoder = model.backbone.encoder
    assert encoder.attention_layers[0].num_attention_heads == cfg.num_attention_heads
    assert encoder.ffn_layers[0].hidden_act == model.mlm_head.hidden_act == cfg.hidden_act
    assert encoder.hidden_dropout_prob == cfg.hidden_dropout_prob
    assert encoder.attention_probs_dropout_prob == cfg.attention_probs_dropout_prob
    assert model.backbone.count_params() == backbone_param_count(cfg)
    if "_base_" not in name:
        return
    ids = np.array([[2, 50, 70, 3]], np.int32)
    out = model({"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": 0 * ids,
                 "masked_lm_positions": np.array([[1]], np.int32)})
    assert tuple(out["sequence_output"].shape) == (1, 4, cfg.hidden_size)
    assert len(out["hidden_states"]) == cfg.num_hidden_layers + 1
    assert tuple(out["mlm_logits"].shape) == (1, 1, cfg.vocab_size)


@pytest.mark.parametrize("key, value", [
    ("layers_to_keep", [0, 1, 2]), ("layers_to_keep", None), ("net_structure_type", 1),
    ("gap_size", 2), ("num_memory_blocks", 4), ("down_scale_factor", 2),
    ("down_scale_factor", True)])
def test_a_model_changing_value_of_a_released_key_is_refused(tmp_path, key, value):
    """The keys no released code reads load at the released value; any other value asks for a
    model nobody builds and is refused, naming the file, the key, the value and why."""
    values = json.load(open(os.path.join(RELEASED, "albert_base_zh.json")))
    values[key] = value
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as error:
        AlbertConfig.from_json_file(path)
    message = str(error.value)
    neutral = "[]" if key == "layers_to_keep" else str(int(key == "down_scale_factor"))
    assert message.startswith(f"Invalid ALBERT config file {path}: `{key}` is an official key "
                              "that the released ALBERT code never reads: every released "
                              f"albert_config.json gives {key}={neutral}, and another value "
                              "asks for a model that neither the official code (which ignores "
                              "the key) nor this one builds"), message
    assert message.endswith(f"only {key}={neutral} is supported. Received: {key}={value!r}")


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


OFFICIAL_ACTIVATIONS = {"gelu": _gelu_tanh, "relu": lambda x: np.maximum(x, 0),
                        "tanh": np.tanh, "linear": lambda x: x}


def _layer_norm(x):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12)


@pytest.mark.parametrize("name, act", [("gelu", "gelu"), ("relu", "relu"), ("tanh", "tanh"),
                                       ("linear", "linear"), ("RELU", "relu"), ("Gelu", "gelu"),
                                       ("", "linear"), (None, "linear")])
def test_every_official_activation_runs_in_the_ffn_and_the_mlm_head(name, act):
    """Every name the official `get_activation` accepts (any case; "" and None = no activation)
    gives its function in the FFN (training and inference) and in the MLM transform."""
    cfg = AlbertConfig(hidden_act=name)
    assert cfg.hidden_act == act
    f = OFFICIAL_ACTIVATIONS[act]
    x = np.random.default_rng(0).normal(0, 2, (2, 3, 8)).astype(np.float32)
    ffn = AlbertFeedForward(8, 13, hidden_act=cfg.hidden_act)
    ffn.build((None, None, 8))
    w1, b1 = ffn.intermediate.kernel.numpy(), ffn.intermediate.bias.numpy()
    w2, b2 = ffn.output_dense.kernel.numpy(), ffn.output_dense.bias.numpy()
    expected = _layer_norm(x + f(x @ w1 + b1) @ w2 + b2)
    for training in (False, True):
        np.testing.assert_allclose(ffn(x, training=training).numpy(), expected, atol=2e-5)
    table = keras.layers.Embedding(11, 5)
    table.build((None, None))
    head = AlbertMaskedLMHead(11, 5, 8, table, hidden_act=cfg.hidden_act)
    positions = np.array([[0, 2], [1, 1]], np.int32)
    logits = head(x, positions).numpy()
    gathered = np.take_along_axis(x, positions[..., None], axis=1)
    transformed = _layer_norm(f(gathered @ head.dense.kernel.numpy() + head.dense.bias.numpy()))
    expected = transformed @ table.embeddings.numpy().T + head.output_bias.numpy()
    np.testing.assert_allclose(logits, expected, atol=2e-5)
