"""AlbertConfig: official JSON round trip, presets, strict validation with clear messages."""

import json
import os

import pytest

from albert_tf import PRESETS, AlbertConfig
from albert_tf.config import REQUIRED_KEYS
from albert_tf.params import backbone_param_count

TESTDATA = os.path.join(os.path.dirname(__file__), "testdata")


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
