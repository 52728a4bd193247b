"""Every ALBERT model class, registered (`albert_tf.models.registry`), and the lookups the rest of
the code base uses instead of comparing kind strings: the class of a saved kind, building one for a
checkpoint, and the class of a built model.

A new head is one module with a `@register`ed class, imported here."""

from __future__ import annotations

from albert_tf.models import classifier, pretrainer, task_models, token_classifier  # noqa: F401
from albert_tf.models.backbone import AlbertBackbone
from albert_tf.models.registry import registered


class UnknownModelKind(ValueError):
    """A saved or requested kind that no registered class owns."""


def kinds() -> tuple[str, ...]:
    """The registered kind names, in registration order."""
    return tuple(registered())


def model_class(kind: str) -> type:
    """The class registered for `kind`; an unknown kind names the registered ones."""
    classes = registered()
    if kind not in classes:
        raise UnknownModelKind(f"Unknown model kind {kind!r}; choose one of {kinds()}.")
    return classes[kind]


def registered_classes() -> tuple[type, ...]:
    """Every registered class, in registration order."""
    return tuple(registered().values())


def class_of(model) -> type:
    """The registered class of a built model (by the kind it says it is)."""
    kind = getattr(model, "albert_kind", None)
    if kind is None:
        raise TypeError(f"Not an ALBERT model: {type(model).__name__}")
    return model_class(kind)


def build_model(kind: str, config, num_labels: int | None = None, dtype=None):
    """The model of `kind` built for reading a checkpoint of it (weights exist)."""
    return model_class(kind).for_checkpoint(config, num_labels=num_labels, dtype=dtype)


def other_heads_hf_prefixes(model) -> dict[str, tuple]:
    """{kind: its Hugging Face key prefixes} of every registered head `model` does not have."""
    own = set(class_of(model).hf_head_prefixes)
    return {k: tuple(p for p in c.hf_head_prefixes if p not in own)
            for k, c in registered().items() if set(c.hf_head_prefixes) - own}


def other_heads_official_names(model) -> dict[str, tuple]:
    """{kind: its official checkpoint name prefixes} of every registered head `model` lacks."""
    own = set(class_of(model).official_head_prefixes)
    return {k: tuple(p for p in c.official_head_prefixes if p not in own)
            for k, c in registered().items() if set(c.official_head_prefixes) - own}


def kind_of_hf_architecture(architecture: str) -> str | None:
    """The kind whose Hugging Face class is `architecture` (a `config.json` `architectures`
    entry), or None."""
    for kind, cls in registered().items():
        if cls.hf_architecture == architecture:
            return kind
    return None


def is_backbone_kind(kind: str) -> bool:
    """Whether `kind` names the bare encoder (no head)."""
    return issubclass(model_class(kind), AlbertBackbone)


def backbone_of(model):
    """The encoder of any registered model (a backbone is its own)."""
    return model if isinstance(model, AlbertBackbone) else model.backbone


def as_kind(model, kind: str):
    """`model` read as `kind`: itself, or its backbone when `kind` is the bare encoder."""
    if is_backbone_kind(kind):
        return backbone_of(model)
    if model_class(kind) is not class_of(model):
        raise UnknownModelKind(f"a {model.albert_kind} model cannot be read as a {kind}; "
                               f"it holds a {model.albert_kind} or its backbone.")
    return model
