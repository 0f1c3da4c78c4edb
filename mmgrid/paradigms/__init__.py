"""Generative-recommender paradigms behind one Protocol (see base.py).

``get_paradigm(name)`` and ``paradigm_names()`` first import every paradigm module of
:data:`PARADIGM_MODULES` (each registers itself with :mod:`mmgrid.paradigms.registration`).
"""

from __future__ import annotations

import importlib

from mmgrid.paradigms.base import Checkpoint, Paradigm
from mmgrid.paradigms.registration import lookup, register_paradigm, registered_names

PARADIGM_MODULES = ("text", "semid", "emb", "sasrec")
__all__ = ["PARADIGM_MODULES", "Checkpoint", "Paradigm", "get_paradigm", "paradigm_names", "register_paradigm"]


def _load_all() -> None:
    # lazy: the paradigm modules import torch (~2-3 s, measured with -X importtime); whoever only
    # needs Checkpoint (registry, merge, train.checkpoints) must not pay it
    for m in PARADIGM_MODULES:
        importlib.import_module(f"mmgrid.paradigms.{m}")


def get_paradigm(name: str) -> Paradigm:
    """The paradigm registered as ``name`` (raises UnknownNameError with the known names)."""
    _load_all()
    return lookup(name)


def paradigm_names() -> list[str]:
    """Every registered paradigm name, sorted."""
    _load_all()
    return registered_names()
