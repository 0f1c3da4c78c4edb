"""Fixtures of the data tests (the helpers and the hand-computed case live in data_fixtures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_fixtures import HAND_META, HAND_REVIEWS, grid_yaml, write_category


@pytest.fixture
def hand_root(tmp_path: Path) -> Path:
    """The hand-computed case as category ``Toys`` (gzipped) under tmp_path/raw_root."""
    root = tmp_path / "raw_root"
    write_category(root, "Toys", HAND_REVIEWS, HAND_META, gz=True)
    return root


@pytest.fixture
def hand_cfg(tmp_path: Path, hand_root: Path):
    from mmgrid.config import load_grid

    return load_grid(grid_yaml(tmp_path, {"root": str(hand_root), "kcore": 1, "lm_text_docs": 6}))
