"""Run in FusionBench's Python (the oracle of tests/merge/test_continual.py): read
in.safetensors (keys '<model>/<param>', models _pretrained_, m1, m2, ...), merge with
FusionBench's MagMax, OPCM and DOP on small nn.Sequential models, write out.safetensors
('<method>/<param>') and print the SVD ranks DOP kept as JSON."""

import copy
import json
import sys
import types

import torch
from safetensors.torch import load_file, save_file
from torch import nn

import fusion_bench.method as fbm
import fusion_bench.utils.packages as pk

pk.is_ray_available = lambda: False  # ray.remote(cls) would rewrite the classes' signatures
for name in ("opcm", "dop", "magmax"):
    # each package without its __init__, which imports the CLIP task pools
    mod = types.ModuleType(f"fusion_bench.method.{name}")
    mod.__path__ = [f"{fbm.__path__[0]}/{name}"]
    sys.modules[mod.__name__] = mod

from fusion_bench.method.dop.dop_general import DOPMerging  # noqa: E402
from fusion_bench.method.magmax.magmax import MagMaxAlgorithm  # noqa: E402
from fusion_bench.method.opcm.opcm_general import OPCM  # noqa: E402
from fusion_bench.modelpool import BaseModelPool  # noqa: E402

src, dst = sys.argv[1], sys.argv[2]
flat = load_file(src)
names = sorted({k.split("/")[0] for k in flat})


def model(n):
    m = nn.Sequential(nn.Linear(4, 5), nn.LayerNorm(5), nn.Linear(5, 3))
    m.load_state_dict({k.split("/", 1)[1]: v for k, v in flat.items() if k.startswith(n + "/")})
    return m


def pool(ns):
    return BaseModelPool({n: model(n) for n in ns})


out = {}
seq = [n for n in names if n != "_pretrained_"]
res = MagMaxAlgorithm(scaling_factor=1.0).run(pool(["_pretrained_", *seq]))
out.update({f"magmax/{k}": v.detach().clone() for k, v in res.state_dict().items()})
res = OPCM(alpha=0.5, shuffle_order=False, save_on_every_step=False).run(pool(["_pretrained_", *seq]))
out.update({f"opcm/{k}": v.detach().clone() for k, v in res.state_dict().items()})
torch.manual_seed(0)
dop = DOPMerging(shuffle_order=False, save_on_every_step=False, lr=1e-3, num_steps=6000, mgda=False, alpha=0.8,
                 svd_epsilon=0.999)
res = dop.run(pool(["_pretrained_", *seq[:2]]))
out.update({f"dop/{k}": v.detach().clone().contiguous() for k, v in res.state_dict().items()})
ranks = []
for n in seq[:2]:
    for layer in ("0.weight", "2.weight"):
        tv = flat[f"{n}/{layer}"] - flat[f"_pretrained_/{layer}"]
        s = torch.linalg.svdvals(tv)
        ranks.append(int(torch.searchsorted(s.cumsum(0) / s.sum(), 0.999)))
save_file(out, dst)
print("RANKS " + json.dumps(ranks))
