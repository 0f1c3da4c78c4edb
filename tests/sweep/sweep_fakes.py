"""A fake grid for the studies: tiny random state dicts in a real registry, a fake
paradigm (a 4-vector and a bias) and a fake evaluator whose metrics peak where the test
says, so lambda* and relative changes are known by construction."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pytest
import torch

from mmgrid.config import GridConfig
from mmgrid.configtools import build
from mmgrid.paradigms import Checkpoint, register_paradigm
from mmgrid.registry import Registry

DOMAINS = ["A", "B", "C", "D", "E"]
GAPS = [100.0, 200.0, 300.0, 400.0, 500.0]
# lambda* of each group by construction (all on the 0.25-grid)
STARS = {
    "A": {"all": 1.25, "active": 1.0, "non_active": 1.5},
    "B": {"all": 1.0, "active": 1.0, "non_active": 1.25},
    "C": {"all": 1.0, "active": 1.0, "non_active": 1.0},
    "D": {"all": 0.75, "active": 1.0, "non_active": 0.75},
    "E": {"all": 0.75, "active": 1.0, "non_active": 0.5},
}
P_ACTIVE = [0.4, 0.3, 0.5, 0.2, 0.35]


class LinModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(4))
        self.b = torch.nn.Parameter(torch.zeros(()))


@dataclass
class FakeParadigm:
    name: str = "fakelin"
    loads: list = field(default_factory=list)

    def load(self, ckpt: Checkpoint, domain, params):
        self.loads.append(domain.name)
        m = LinModel()
        m.load_state_dict({k: v.clone() for k, v in ckpt.state.items()})
        return m


PARADIGM = FakeParadigm()
register_paradigm("fakelin")(lambda: PARADIGM)


@dataclass
class FakeDomain:
    name: str


class FakePrepared:
    domains = DOMAINS

    def domain(self, name: str) -> FakeDomain:
        return FakeDomain(name)

    def stats(self) -> pl.DataFrame:
        return pl.DataFrame({"domain": DOMAINS, "avg_gap_days": GAPS, "p_active": P_ACTIVE,
                             "test_users": [100] * 5, "users": [150] * 5})


def theta(domain: str, period: str) -> dict[str, torch.Tensor]:
    i = DOMAINS.index(domain)
    g = torch.Generator().manual_seed(10 * i + {"base": 0, "pretrain": 1, "p1": 2, "p2": 3}[period])
    w = torch.randn(4, generator=g)
    if period == "p2":  # t2 = t1 + ones: theta(lambda) = theta_t1 + lambda * ones
        w = theta(domain, "p1")["w"] + 1.0
    return {"w": w, "b": torch.tensor(float(i))}


class EvalCounter:
    def __init__(self) -> None:
        self.factories: list[str] = []
        self.calls = 0

    def __call__(self, cfg, name, paradigm, domain, prepared):
        self.factories.append(domain.name)
        w1 = theta(domain.name, "p1")["w"]

        def evaluate(model):
            self.calls += 1
            out = {}
            for group, star in STARS[domain.name].items():
                d = float(((model.w.detach() - (w1 + star)) ** 2).sum())
                s = 1.0 / (1.0 + d)
                out[group] = {"ndcg@10": s, "recall@10": 2 * s, "ndcg@20": 1.1 * s, "recall@20": 2.2 * s}
            return out

        return evaluate


def fake_merge(method, models, base=None, registry=None, **params):
    """theta = base + sum_i w_i (theta_i - base), weights from the Eq. 7 params."""
    states = [registry.load(m) for m in models]
    w = params.get("weights") or params.get("lambdas") or [1.0 / len(states)] * len(states)
    if params.get("alpha") is not None:
        w = [params["alpha"], 1.0 - params["alpha"]]
    b = registry.load(base) if base is not None else {k: torch.zeros_like(v) for k, v in states[0].items()}
    out = {k: b[k] + sum(wi * (s[k] - b[k]) for wi, s in zip(w, states)) for k in states[0]}
    return out, {}


