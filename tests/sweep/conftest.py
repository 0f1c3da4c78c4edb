"""Fixtures of the studies' tests (the fakes live in sweep_fakes.py)."""

from __future__ import annotations

import pytest
import torch

from mmgrid.config import GridConfig
from mmgrid.configtools import build
from mmgrid.registry import Registry
from sweep_fakes import DOMAINS, EvalCounter, FakePrepared, theta


@pytest.fixture()
def grid(tmp_path):
    reg = Registry.open(tmp_path / "reg", durable=False)
    base = reg.put({"w": torch.zeros(4), "b": torch.zeros(())}, {"paradigm": "fakelin", "domain": "any", "period": "base"},
                   "base")
    for d in DOMAINS:
        prev, role = base, "init"
        for period in ("pretrain", "p1", "p2"):
            prev = reg.put(theta(d, period), {"paradigm": "fakelin", "domain": d, "period": period}, "trained",
                           parents=[(prev, role)], params={"stage": period})
            role = "previous_stage"
    cfg = build(GridConfig, {
        "name": "t", "registry": str(tmp_path / "reg"), "prepared": str(tmp_path / "prep"),
        "sweeps": {"temporal": {"paradigm": "fakelin", "start": 0.0, "stop": 1.5, "step": 0.25},
                   "cross_domain": {"paradigms": ["fakelin"], "pairs": [["A", "B"], ["B", "C"]],
                                    "methods": {"average": {}, "task_arithmetic": {}},
                                    "alphas": [0.25, 0.5]}},
    })
    return cfg, reg, FakePrepared()


@pytest.fixture()
def counter():
    return EvalCounter()
