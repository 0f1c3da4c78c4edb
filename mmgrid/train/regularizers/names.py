"""The table of regularizer names: ``@register`` a class with its typed parameters; look a
name up, validate a variant's parameters, build the regularizer for a run."""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from mmgrid.configtools import build
from mmgrid.errors import UnknownNameError
from mmgrid.train.origin import Origin


class Regularizer(Protocol):
    name: str

    def on_step_end(self, model: torch.nn.Module, step: int) -> dict[str, float]: ...


_REGISTRY: dict[str, tuple[type, Callable[[Any, Origin], Regularizer]]] = {}


def register(name: str, params_cls: type) -> Callable:
    """Class decorator: the regularizer ``name`` with typed parameters ``params_cls``."""

    def deco(cls: Callable[[Any, Origin], Regularizer]) -> Callable[[Any, Origin], Regularizer]:
        _REGISTRY[name] = (params_cls, cls)
        return cls

    return deco


def regularizer_names() -> list[str]:
    return ["none", *sorted(_REGISTRY)]


def get_regularizer_class(name: str) -> Callable[[Any, Origin], Regularizer]:
    """The class registered as ``name`` (UnknownNameError lists the known names)."""
    if name not in _REGISTRY:
        raise UnknownNameError("regularizer", name, regularizer_names())
    return _REGISTRY[name][1]


def check_params(name: str, params: dict[str, Any], where: str = "variants") -> Any:
    """Validate a variant's regularizer parameters (ConfigError / UnknownNameError before any job runs)."""
    if name == "none":
        return None
    if name not in _REGISTRY:
        raise UnknownNameError("regularizer", name, regularizer_names())
    return build(_REGISTRY[name][0], params, where=f"{where}.params")


def make_regularizer(name: str, params: dict[str, Any], origin: Origin) -> Regularizer | None:
    """The regularizer ``name`` for a run whose origin is ``origin`` (None for ``none``)."""
    typed = check_params(name, params)
    return None if typed is None else _REGISTRY[name][1](typed, origin)
