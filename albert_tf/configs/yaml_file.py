"""A config file's text as data: YAML read with the YAML 1.2 core schema, so that a value means
what the same text means on the command line, or JSON; within stated limits of size and alias
expansion (`MAX_CONFIG_BYTES`, `MAX_CONFIG_NODES`, `MAX_CONFIG_CHARS`); every key a name and no
key given twice. `read_config_file` gives the values; the command layer
(`albert_tf.commands.experiment.apply_config_file`) reads the texts as typed
(`read_config_texts`) and parses them as flags.

No TensorFlow and no absl here: readers of a run's `config.yaml` below the command layer
(`albert_tf.checkpoints`) use it too.
"""

from __future__ import annotations

import json
import re

import yaml

from albert_tf.configs import definitions

SECTIONS = definitions.SECTIONS
CONFIG_NAME = "config.yaml"  # a training run's effective config, in its --output_dir


class ConfigFileError(ValueError):
    """A --config_file that cannot be used (unreadable, not YAML/JSON, an unknown key, a value
    of the wrong type); the message names the file and the key."""


# What a --config_file may be: its size, and its size once YAML's aliases are expanded (every
# node an alias repeats counted again: ten anchors of ten aliases each are ten billion nodes
# from a few hundred bytes). A run's config.yaml is about 2 KB and 150 nodes.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_NODES = 100_000
MAX_CONFIG_CHARS = 10_000_000


class Plain(str):
    """A plain (unquoted) YAML number or boolean: its text, as typed, which is what the flag
    parses (the command line's meaning), and `value`, what YAML 1.2 reads it as."""

    def __new__(cls, text, value):
        plain = super().__new__(cls, text)
        plain.value = value
        return plain


def _yaml12_values(value):
    """The YAML 1.2 value of a config file's data (`Plain` texts replaced by their values)."""
    if isinstance(value, Plain):
        return value.value
    if isinstance(value, dict):
        return {_yaml12_values(k): _yaml12_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_yaml12_values(v) for v in value]
    return value


class _DuplicateKeyError(ValueError):
    pass


class _LimitError(ValueError):
    pass


def _yaml12_int(text: str) -> int:
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _yaml12_float(text: str) -> float:
    word = text.lower()
    if word.endswith(".inf"):
        return float("-inf") if word.startswith("-") else float("inf")
    if word == ".nan":
        return float("nan")
    return float(text)


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (on libyaml where PyYAML has it: ten times faster, and it refuses
    nesting deeper than 1000) with the YAML 1.2 core schema (PyYAML reads YAML 1.1, where yes, no,
    on and off are booleans, 010 is octal 8 and 1_000 a number): null is ~, null or nothing;
    booleans are true and false (any case of the first letter, or all capitals); numbers are
    decimal (010 is ten), 0o octal and 0x hexadecimal integers, decimal floats, .inf and .nan;
    everything else is a string. No merge keys (<<), timestamps, sets or binary (YAML 1.1
    types). Numbers and booleans keep their text (`Plain`), which is what the flags parse. A
    key given twice in one mapping is refused (PyYAML keeps the last silently). Composing stops
    at `MAX_CONFIG_NODES` nodes (before aliases, which `_check_expansion` counts)."""

    yaml_implicit_resolvers = {}
    yaml_constructors = {}
    _composed = 0

    def resolve(self, kind, value, implicit):
        self._composed += 1
        if self._composed > MAX_CONFIG_NODES:
            raise _LimitError(f"holds more than {MAX_CONFIG_NODES} nodes, the limit")
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(
                None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
        mapping = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == "<<" \
                    and not key_node.style:  # plain: None (Python parser) or "" (libyaml)
                raise _DuplicateKeyError(f"the merge key << (line {line}) is YAML 1.1, not "
                                         "read here; write the keys out")
            key = _yaml12_values(self.construct_object(key_node, deep=deep))
            if not isinstance(key, (str, int, float, bool, type(None))):
                raise _DuplicateKeyError(f"the key at line {line} is not a name")
            if key in mapping:
                raise _DuplicateKeyError(f"{key} is given twice (line {line})")
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_yaml_map(self, node):
        data = {}
        yield data
        data.update(self.construct_mapping(node))

    def _plain(self, node, value):
        return Plain(self.construct_scalar(node), value)

    def construct_yaml12_null(self, node):
        self.construct_scalar(node)
        return None

    def construct_yaml12_bool(self, node):
        return self._plain(node, self.construct_scalar(node).lower() == "true")

    def construct_yaml12_int(self, node):
        return self._plain(node, _yaml12_int(self.construct_scalar(node)))

    def construct_yaml12_float(self, node):
        return self._plain(node, _yaml12_float(self.construct_scalar(node)))


for _tag, _pattern, _first in (
        ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
        ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
        ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
        ("float", r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                  r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", list("-+0123456789."))):
    _StrictLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}",
                                        re.compile(f"^(?:{_pattern})$"), _first)
for _tag, _constructor in (
        ("null", _StrictLoader.construct_yaml12_null),
        ("bool", _StrictLoader.construct_yaml12_bool),
        ("int", _StrictLoader.construct_yaml12_int),
        ("float", _StrictLoader.construct_yaml12_float),
        ("str", yaml.SafeLoader.construct_yaml_str),
        ("seq", yaml.SafeLoader.construct_yaml_seq),
        ("map", _StrictLoader.construct_yaml_map)):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _constructor)
_StrictLoader.add_constructor(None, yaml.SafeLoader.construct_undefined)


def _check_expansion(root) -> None:
    """Refuses a composed YAML document that is larger than the limits once its aliases are
    expanded (or that holds itself): counted over the graph of nodes, each node once, so the
    count costs the size of the file, not of the expansion."""
    if isinstance(root, yaml.ScalarNode):
        return
    nodes, chars = {}, {}
    stack, open_ = [(root, False)], set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in nodes:
            continue
        children = ([n for pair in node.value for n in pair]
                    if isinstance(node, yaml.MappingNode) else node.value)
        if children_done:
            open_.discard(key)
            count, length = 1, 0
            for child in children:
                if isinstance(child, yaml.ScalarNode):
                    count, length = count + 1, length + len(child.value)
                else:
                    count, length = count + nodes[id(child)], length + chars[id(child)]
            nodes[key], chars[key] = count, length
            if nodes[key] > MAX_CONFIG_NODES:
                raise _LimitError(f"expands (its aliases repeated) to more than "
                                  f"{MAX_CONFIG_NODES} nodes, the limit")
            if chars[key] > MAX_CONFIG_CHARS:
                raise _LimitError(f"expands (its aliases repeated) to more than "
                                  f"{MAX_CONFIG_CHARS} characters, the limit")
            continue
        if key in open_:
            raise _LimitError(f"holds an alias inside its own anchor (line "
                              f"{node.start_mark.line + 1}), a value without end")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children
                     if not isinstance(c, yaml.ScalarNode) and id(c) not in nodes)


def _load_yaml(text: str):
    """The data of a YAML config file's text (`_StrictLoader`), its expansion checked
    (`_check_expansion`) before anything is built from it."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_expansion(root)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: the problem and where."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if not problem:
        return str(error).splitlines()[0]
    return problem + (f" (line {mark.line + 1}, column {mark.column + 1})" if mark else "")


def _read_config_file(path: str, texts: bool) -> dict:
    """The sections of the YAML or JSON file at `path`; YAML numbers and booleans as their
    text (`Plain`) if `texts`, else as their values."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigFileError(f"--config_file {path}: cannot read it ({e.strerror or e}).") \
            from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"--config_file {path} is larger than {MAX_CONFIG_BYTES} bytes, "
                              "the limit for a config file; give the flags' values, not data.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"--config_file {path} is not UTF-8 text (byte {e.start}).") \
            from None
    kind = "JSON" if path.endswith(".json") else "YAML"
    try:
        data = (json.loads(text, object_pairs_hook=_json_pairs) if kind == "JSON"
                else _load_yaml(text))
        if not texts:
            data = _yaml12_values(data)
    except _DuplicateKeyError as e:
        raise ConfigFileError(f"--config_file {path}: {e}; give each key once."
                              if "given twice" in str(e) else f"--config_file {path}: {e}.") \
            from None
    except _LimitError as e:
        raise ConfigFileError(f"--config_file {path} {e}; write the values out.") from None
    except (RecursionError, yaml.YAMLError) as e:
        if not isinstance(e, RecursionError) and "nesting depth" not in str(e):
            raise ConfigFileError(f"--config_file {path} is not valid {kind}: "
                                  f"{_yaml_problem(e)}") from None
        raise ConfigFileError(f"--config_file {path} is not a config: its {kind} is nested "
                              "too deeply.") from None
    except ValueError as e:
        raise ConfigFileError(f"--config_file {path} is not valid {kind}: "
                              f"{str(e).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"--config_file {path} must hold a mapping of the sections "
                              f"{', '.join(SECTIONS)}; it holds a {type(data).__name__}.")
    odd = [k for k in data if not isinstance(k, str)]
    odd += [f"{s}.{k}" for s, v in data.items() if isinstance(v, dict)
            for k in v if not isinstance(k, str)]
    if odd:
        raise ConfigFileError(f"--config_file {path}: {odd[0]!r} is not a name; keys are "
                              "section and flag names.")
    return data


def _json_pairs(pairs):
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise _DuplicateKeyError(f"{key} is given twice")
    return dict(pairs)


def read_config_texts(path: str) -> dict:
    """`read_config_file`, with YAML's plain numbers and booleans as their text as typed
    (`Plain`, which the flags parse: the command line's meaning)."""
    return _read_config_file(path, texts=True)


def read_config_file(path: str) -> dict:
    """The sections of the YAML or JSON file at `path` as {section: {flag: value}}, read with
    the YAML 1.2 core schema (`_StrictLoader`) and within `MAX_CONFIG_BYTES` and
    `MAX_CONFIG_NODES`/`MAX_CONFIG_CHARS` once expanded."""
    return _read_config_file(path, texts=False)
