"""Generative-recommender paradigms behind one Protocol (see base.py)."""

from __future__ import annotations

import importlib

from mmgrid.paradigms.base import Checkpoint, Paradigm, get_paradigm, paradigm_names, register_paradigm

_MODULES = ("text", "semid", "emb", "sasrec")
__all__ = ["Checkpoint", "Paradigm", "get_paradigm", "paradigm_names", "register_paradigm"]


def _load_all() -> None:
    for m in _MODULES:
        try:
            importlib.import_module(f"mmgrid.paradigms.{m}")
        except ModuleNotFoundError as exc:  # a paradigm still being written
            if exc.name != f"mmgrid.paradigms.{m}":
                raise
