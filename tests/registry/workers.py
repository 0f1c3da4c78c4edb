"""Functions run in child processes by the concurrency and crash tests (importable by spawn)."""

from __future__ import annotations

import sys

import torch

from mmgrid.registry.api import Registry


def small_state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"shared": torch.ones(32), "w": torch.randn(64, 64, generator=g), "b": torch.randn(64, generator=g)}


def writer(root: str, worker: int, n: int, base: str, index: bool) -> list[str]:
    """Put ``n`` stages, one identical 'common' checkpoint, and record an eval per stage."""
    reg = Registry.open(root, index=index)
    ids, parent = [], base
    for i in range(n):
        cid = reg.put(small_state(1000 * worker + i), {"paradigm": "text", "domain": f"d{worker}", "period": f"p{i}"},
                      "trained", parents=[(parent, "previous_stage")], params={"method": "sft", "worker": worker})
        reg.record_eval(cid, "test", "all", {"recall@10": worker + i / 100, "ndcg@10": 0.5})
        ids.append(cid)
        parent = cid
    ids.append(reg.put(small_state(7), {"paradigm": "text", "domain": "common", "period": "p0"}, "trained",
                       parents=[(base, "init")]))
    reg.close()
    return ids


if __name__ == "__main__":  # crash test: put one checkpoint (the test SIGKILLs us mid-put)
    reg = Registry.open(sys.argv[1])
    print(reg.put(small_state(int(sys.argv[2])), {"paradigm": "text", "domain": "crash", "period": "p0"}, "base"), flush=True)
