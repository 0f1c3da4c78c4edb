"""Run by test_loop.py under torchrun (and as one process): train the toy model, write the state."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_fakes as F  # noqa: E402

from mmgrid.train.loop import dist_context, train_stage  # noqa: E402


def main(out: str) -> None:
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    dom, par = F.make_domain("A"), F.ToyParadigm()
    model = par.build(None, dom, {}, 0)
    examples = par.examples(model, dom, "pretrain")[:112]  # a multiple of the global batch: no padding
    dist = dist_context("cpu")
    log = train_stage(par, model, examples, epochs=2, lr=0.01, batch_size=16, seed=3, progress=False,
                      dist=dist, device="cpu")
    if dist is None or dist.is_main:
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        state["epoch_losses"] = torch.tensor(log.epoch_losses)
        save_file(state, out)
    if dist is not None:
        dist.close()


if __name__ == "__main__":
    main(sys.argv[1])
