"""The one registry of ALBERT model kinds: a saved kind name (`albert_tf.json`, an export record,
`--model`) -> the model class that owns everything about that kind.

A model class registers itself with `@register` and says, as class attributes and methods,
everything the rest of the code base would otherwise ask with `if kind == ...`:

    albert_kind            the saved name ("classifier", "span", ...)
    for_checkpoint(config, num_labels=None, dtype=None)
                           classmethod: the model built (weights exist) for reading a checkpoint
                           of this kind; `num_labels` is the stored label/choice count (the
                           default builds `cls(config, dtype=dtype)`)
    official_weights()     [NamedWeight]: every variable with its official TF1 name
    official_head_prefixes names (or name prefixes) of this head's entries in an official
                           checkpoint; a backbone skips every registered head's entries
    hf_architecture        Hugging Face class this kind reads/writes as (None: no HF class)
    hf_head_prefixes       Hugging Face state-dict prefixes of this head's keys; a model skips
                           the keys of every other registered head
    hf_absent_prefixes     our weights' Hugging Face keys that its HF class does not have (a
                           token classifier's pooler): kept as they are on reading, not written
    hf_config(labels)      extra entries of the Hugging Face `config.json` (labels)
    hf_extra_state(state)  keys HF's `save_pretrained` writes besides the named weights
    has_tflite             whether `albert_tf.export.tflite` writes a TFLite form of it
    backbone               the encoder (`AlbertBackbone`); a backbone is its own

`RegisteredModel` gives the defaults. Nothing outside this registry compares kind strings.
The built-in classes are registered when `albert_tf.models.kinds` is imported; lookups live there.
The serving side registers its serving module against each class (`albert_tf.export.serving.serves`;
`albert_tf.export.registry` finds it): no model names its serving code.
"""

from __future__ import annotations

_KINDS: dict[str, type] = {}

_REQUIRED = ("albert_kind", "official_weights")


class RegisteredModel:
    """Defaults of the registry contract (mixed into every registered model class)."""

    albert_kind: str = ""
    official_head_prefixes: tuple = ()
    hf_architecture: str | None = None
    hf_head_prefixes: tuple = ()
    hf_absent_prefixes: tuple = ()
    has_tflite: bool = False

    @classmethod
    def for_checkpoint(cls, config, num_labels=None, dtype=None):
        """The model built for reading a checkpoint of this kind (heads without labels)."""
        return cls(config, dtype=dtype)

    def hf_config(self, labels=None) -> dict:
        """Extra entries of this model's Hugging Face `config.json` (none by default)."""
        return {}

    def hf_extra_state(self, state: dict) -> dict:
        """Keys Hugging Face writes besides the named weights (none by default)."""
        return state


def register(cls):
    """Class decorator: adds `cls` under `cls.albert_kind`. A second class under the same
    kind is an error (two owners of one saved name)."""
    missing = [a for a in _REQUIRED if not getattr(cls, a, None)]
    if missing:
        raise TypeError(f"{cls.__name__} cannot be registered: it lacks {missing}.")
    other = _KINDS.get(cls.albert_kind)
    if other is not None and (other.__module__, other.__qualname__) != (cls.__module__,
                                                                      cls.__qualname__):
        raise ValueError(f"Model kind {cls.albert_kind!r} is already registered by "
                         f"{other.__module__}.{other.__qualname__}.")
    _KINDS[cls.albert_kind] = cls
    return cls


def registered() -> dict[str, type]:
    """{kind: class} of every class registered so far (`albert_tf.models.kinds` imports them all)."""
    return dict(_KINDS)
