"""MMGRid Eq. 8 has one definition (mmgrid.merge.api.neutral_base): the lazy base of
``base=[a, b]`` and the checkpoint the cross-domain study stores (a merge with
NEUTRAL_BASE_METHOD) are the same tensors, bit for bit, on float32 and bf16 inputs."""

from __future__ import annotations

import pytest
import torch

from mmgrid.merge import merge
from mmgrid.merge.api import NEUTRAL_BASE_METHOD, neutral_base
from mmgrid.merge.tensors import from_state


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lazy_neutral_base_equals_the_stored_one(dtype):
    g = torch.Generator().manual_seed(0)
    shapes = {"embed_tokens.weight": (10, 4), "layers.0.q.weight": (4, 4), "layers.0.norm.weight": (4,)}
    a, b = ({k: torch.randn(s, generator=g).to(dtype) for k, s in shapes.items()} for _ in range(2))
    a["codes"], b["codes"] = torch.arange(5), torch.arange(5)
    lazy = neutral_base([from_state(a, "a"), from_state(b, "b")])
    stored = merge(NEUTRAL_BASE_METHOD, [a, b])
    for name, t in stored.items():
        got = lazy.get(name)
        assert got.dtype == t.dtype and torch.equal(got, t), name
        if t.is_floating_point():  # Eq. 8 by hand: the mean of the two, rounded once to the inputs' dtype
            assert torch.equal(t, ((a[name].float() + b[name].float()) / 2).to(dtype))


def test_a_merge_on_the_neutral_base_equals_one_on_the_stored_average(models):
    ins = [models["a"], models["b"]]
    on_list = merge("task_arithmetic", ins, base=[models["a"], models["c"]], alpha=0.3)
    on_state = merge("task_arithmetic", ins, base=merge(NEUTRAL_BASE_METHOD, [models["a"], models["c"]]), alpha=0.3)
    assert all(torch.equal(on_list[k], on_state[k]) for k in on_list)
