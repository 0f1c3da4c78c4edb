"""A toy training entry point that runs alone or under ``torchrun`` (used by test_exec_ddp).

    python tests/exec/ddp_toy.py OUT                               # one process
    torchrun --standalone --nproc_per_node=2 tests/exec/ddp_toy.py OUT

Every rank writes ``params_rank<r>.safetensors`` (for the test to compare); only the main
rank writes ``output_rank<r>.json``, as only rank 0 may write the registry.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from mmgrid.exec.ddp import (
    DistContext,
    all_reduce_mean,
    barrier,
    broadcast_object,
    local_batch_size,
    seed_for_rank,
    shard,
    unwrap_model,
    wrap_model,
)

N_EXAMPLES, BATCH, EPOCHS, SEED = 52, 8, 3, 0


def make_data(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same examples on every rank (shared seed), in a shuffled order."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_EXAMPLES, 4, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(N_EXAMPLES, generator=g)).unsqueeze(1)
    order = torch.randperm(N_EXAMPLES, generator=g).tolist()
    return [(x[i], y[i]) for i in order]


def main(out: Path) -> None:
    ctx = DistContext.from_env(device="cpu")
    # A different init on each rank: DDP must broadcast rank 0's parameters.
    torch.manual_seed(seed_for_rank(SEED, ctx.rank))
    model = wrap_model(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)), ctx)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mine = shard(make_data(SEED), ctx)
    bs = local_batch_size(BATCH, ctx)
    loss = torch.tensor(0.0)
    for _ in range(EPOCHS):
        for start in range(0, len(mine), bs):
            xb = torch.stack([x for x, _ in mine[start : start + bs]])
            yb = torch.stack([y for _, y in mine[start : start + bs]])
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    state = {k: v.detach().contiguous() for k, v in unwrap_model(model).state_dict().items()}
    digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in state.values())).hexdigest()[:16]
    ckpt_id = broadcast_object(digest if ctx.is_main else None, ctx)
    mean_loss = all_reduce_mean(float(loss.item()), ctx)
    save_file(state, str(out / f"params_rank{ctx.rank}.safetensors"), metadata={"id": ckpt_id, "own": digest})
    if ctx.is_main:
        result = {"world_size": ctx.world_size, "id": ckpt_id, "mean_last_loss": mean_loss, "n_local": len(mine)}
        (out / f"output_rank{ctx.rank}.json").write_text(json.dumps(result))
    barrier(ctx)
    ctx.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
