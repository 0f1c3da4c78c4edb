"""mergekit as an independent oracle: the same mergekit YAML run by mergekit itself (in
its own virtual environment) and by mmgrid's reader, on tiny Qwen3 HF folders built
here, compared tensor by tensor.

* Deterministic methods: ||ours - theirs|| / ||theirs|| <= 1e-6 per tensor in float32.
* DELLA (random masks): both tools' draws are replaced by the same mask, kept where
  u_e < k_e with u_e a hash of the task vector's float32 bits and the entry's position
  (``_inject_u``): in mergekit's process its ``torch.bernoulli`` inside ``della_magprune``
  (its ranks, probabilities and rescale run unchanged), in mmgrid's through
  :func:`mmgrid.merge.masks.injected_masks`. The results are then compared per tensor as
  the deterministic methods (1e-6).
* Methods that draw random masks (DARE): mergekit draws them from torch's global
  generator, mmgrid from its own keyed generator, so the masks cannot be the same.
  Both results are checked against DARE's moments instead (Yu et al. 2024: each entry
  of tau_i is kept with probability d = density and rescaled by about 1/d, so with
  u = sum_i w_i tau_i and r = theta* - theta_0):
  - unbiased: <r, u> / ||u||^2 = 1;
  - second moment: ||r||^2 / E||r||^2 = 1, E||r||^2 = ||u||^2 + (1/d - 1) sum_i w_i^2 ||tau_i||^2
    (independent masks);
  - kept fraction: the share of entries where every input was dropped (r = 0) is (1 - d)^n;
  each within 4 standard errors, computed from the masks' distribution (``_moments``).
  DARE-TIES's sign election after the drop changes the first two moments (entries
  against the elected sign are dropped too), so for it ours and mergekit's statistics
  are compared with each other, within 4 sqrt(2) of DARE's standard errors (the
  difference of two independent draws).

mergekit's Python: $MMGRID_MERGEKIT_PYTHON, bench/.venv-mergekit/bin/python or
/tmp/venv-mergekit/bin/python (mmgrid.merge.mergekit.oracle); absent, the test skips and
says so. Install: ``python3.11 -m venv /tmp/venv-mergekit && /tmp/venv-mergekit/bin/pip
install torch mergekit``.

Add a method by adding a row to ROWS (its mergekit recipe and whether it is random).
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from hf_data import qwen3_state, read_folder, write_folder
from mmgrid.merge import masks
from mmgrid.merge.mergekit import find_mergekit_python, run_mergekit_recipe
from mmgrid.merge.mergekit.oracle import candidates
from mmgrid.merge.mergekit.spec import METHOD_TABLE, supported_methods
from mmgrid.merge.methods import method_names

MK = find_mergekit_python()
pytestmark = pytest.mark.skipif(
    MK is None, reason=f"mergekit not installed (looked at {', '.join(candidates())}); set MMGRID_MERGEKIT_PYTHON "
    "to a Python with mergekit, e.g. python3.11 -m venv /tmp/venv-mergekit && /tmp/venv-mergekit/bin/pip install torch mergekit")

M = ["a", "b", "c"]


def _models(weights: list, **extra) -> list[dict]:
    return [{"model": m, "parameters": {"weight": w, **extra}} for m, w in zip(M, weights)]


EXACT, MOMENTS, COMPARE, INJECT = "exact", "moments", "compare", "inject"

# id -> (recipe with model names a, b, c, base; how it is compared: EXACT per tensor,
# INJECT per tensor with the same injected masks, MOMENTS against DARE's moments,
# COMPARE ours' moments against mergekit's)
ROWS: dict[str, tuple[dict, str]] = {
    "linear_equal": ({"merge_method": "linear", "models": _models([1.0, 1.0, 1.0])}, EXACT),
    "linear_unequal": ({"merge_method": "linear", "models": _models([0.7, 0.2, 0.4])}, EXACT),
    "linear_unnormalized": ({"merge_method": "linear", "models": _models([0.5, 0.25]), "parameters": {"normalize": False}}, EXACT),
    "linear_with_base": ({"merge_method": "linear", "base_model": "base", "models": _models([0.5, 0.3]),
                          "parameters": {"weight": 0.2}}, EXACT),
    "task_arithmetic": ({"merge_method": "task_arithmetic", "base_model": "base", "models": _models([0.6, 0.3, 0.9]),
                         "parameters": {"lambda": 0.8}}, EXACT),
    "task_arithmetic_normalize": ({"merge_method": "task_arithmetic", "base_model": "base",
                                   "models": _models([0.6, 0.3, 0.9]), "parameters": {"normalize": True}}, EXACT),
    "task_arithmetic_filters_gradients": ({
        "merge_method": "task_arithmetic", "base_model": "base",
        "models": [{"model": "a", "parameters": {"weight": [0.1, 0.5, 1.0]}},
                   {"model": "b", "parameters": {"weight": [{"filter": "self_attn", "value": [1.0, 0.0]},
                                                            {"filter": "mlp", "value": 0.4}, {"value": 0.7}]}},
                   {"model": "c"}],
        "parameters": {"weight": [{"filter": "layernorm", "value": 0.05}, {"value": 0.25}]}}, EXACT),
    "ties_equal": ({"merge_method": "ties", "base_model": "base", "models": _models([1.0, 1.0, 1.0], density=0.4)}, EXACT),
    "ties_equal_sum": ({"merge_method": "ties", "base_model": "base", "models": _models([0.5, 0.5, 0.5], density=0.6),
                        "parameters": {"normalize": False, "lambda": 1.3}}, EXACT),
    "ties_unequal": ({"merge_method": "ties", "base_model": "base", "models": _models([0.7, 0.3, 0.5], density=0.4)}, EXACT),
    "ties_density_gradient": ({"merge_method": "ties", "base_model": "base", "models": _models([1.0, 1.0], density=[0.3, 0.9])}, EXACT),
    # sphere methods (slerp's inputs: [base_model, the other model])
    "slerp": ({"merge_method": "slerp", "base_model": "base", "models": [{"model": "base"}, {"model": "a"}],
               "parameters": {"t": 0.3}}, EXACT),
    "slerp_filters_gradient": ({"merge_method": "slerp", "base_model": "a", "models": [{"model": "a"}, {"model": "b"}],
                                "parameters": {"t": [{"filter": "self_attn", "value": [0.0, 1.0]}, {"value": 0.65}]}}, EXACT),
    "nuslerp_task_vectors": ({"merge_method": "nuslerp", "base_model": "base", "models": _models([0.7, 0.2])[:2]}, EXACT),
    "nuslerp_rows": ({"merge_method": "nuslerp", "models": _models([0.3, 0.9])[:2],
                      "parameters": {"nuslerp_flatten": False}}, EXACT),
    "nuslerp_columns": ({"merge_method": "nuslerp", "models": _models([0.8, 0.5])[:2],
                         "parameters": {"nuslerp_flatten": False, "nuslerp_row_wise": True}}, EXACT),
    "multislerp": ({"merge_method": "multislerp", "models": _models([0.5, 0.2, 0.9])}, EXACT),
    "multislerp_base_unnormalized": ({"merge_method": "multislerp", "base_model": "base", "models": _models([0.5, 0.2, 0.6]),
                                      "parameters": {"normalize_weights": False}}, EXACT),
    "karcher": ({"merge_method": "karcher", "models": [{"model": m} for m in M]}, EXACT),
    "karcher_base_is_an_input": ({"merge_method": "karcher", "base_model": "base", "models": [{"model": m} for m in M[:2]],
                                  "parameters": {"max_iter": 20, "tol": 1e-7}}, EXACT),
    "model_stock": ({"merge_method": "model_stock", "base_model": "base", "models": [{"model": m} for m in M]}, EXACT),
    "model_stock_filter_wise": ({"merge_method": "model_stock", "base_model": "base", "models": [{"model": m} for m in M[:2]],
                                 "parameters": {"filter_wise": True}}, EXACT),
    "nearswap": ({"merge_method": "nearswap", "base_model": "base", "models": [{"model": "base"}, {"model": "a"}],
                  "parameters": {"t": 0.03}}, EXACT),
    "passthrough": ({"merge_method": "passthrough", "models": [{"model": "b", "parameters": {
        "scale": [{"filter": "mlp", "value": 0.5}, {"value": 1.0}]}}]}, EXACT),
    "passthrough_copy": ({"merge_method": "passthrough", "models": [{"model": "b"}]}, EXACT),  # a plain copy: the file
    # task-vector methods with their own sparsifiers or weights
    "breadcrumbs": ({"merge_method": "breadcrumbs", "base_model": "base", "models": _models([0.7, 0.3, 0.5], density=0.5, gamma=0.1)}, EXACT),
    "breadcrumbs_rescale_normalize": ({"merge_method": "breadcrumbs", "base_model": "base",
                                       "models": _models([0.7, 0.3, 0.5], density=0.6, gamma=0.05),
                                       "parameters": {"rescale": True, "normalize": True, "lambda": 0.8}}, EXACT),
    "breadcrumbs_ties": ({"merge_method": "breadcrumbs_ties", "base_model": "base",
                          "models": _models([0.7, 0.3, 0.5], density=0.5, gamma=0.1)}, EXACT),
    "breadcrumbs_ties_normalize": ({"merge_method": "breadcrumbs_ties", "base_model": "base",
                                    "models": _models([0.9, 0.2, 0.4], density=0.7, gamma=0.02),
                                    "parameters": {"normalize": True, "lambda": 1.2}}, EXACT),
    "sce": ({"merge_method": "sce", "base_model": "base", "models": [{"model": m} for m in M]}, EXACT),
    "sce_select": ({"merge_method": "sce", "base_model": "base", "models": [{"model": m} for m in M],
                    "parameters": {"select_topk": 0.4}}, EXACT),
    "ram": ({"merge_method": "ram", "base_model": "base", "models": [{"model": m} for m in M],
             "parameters": {"epsilon": 0.04}}, EXACT),
    "ramplus_tl": ({"merge_method": "ramplus_tl", "base_model": "base", "models": [{"model": m} for m in M],
                    "parameters": {"epsilon": 0.04}}, EXACT),
    "ramplus_tl_params": ({"merge_method": "ramplus_tl", "base_model": "base", "models": [{"model": m} for m in M[:2]],
                           "parameters": {"epsilon": 0.06, "r": 0.7, "alpha": 1.5}}, EXACT),
    "arcee_fusion": ({"merge_method": "arcee_fusion", "base_model": "base", "models": [{"model": "base"}, {"model": "a"}]}, EXACT),
    # DELLA: mergekit's Bernoulli draws and mmgrid's masks replaced by the same content-keyed mask (_inject_u)
    "della": ({"merge_method": "della", "base_model": "base", "models": _models([0.7, 0.3, 0.5], density=0.5, epsilon=0.2)}, INJECT),
    "della_sum_no_rescale": ({"merge_method": "della", "base_model": "base", "models": _models([0.6, 0.9], density=0.6, epsilon=0.1),
                              "parameters": {"normalize": False, "rescale": False, "lambda": 0.7}}, INJECT),
    "della_linear": ({"merge_method": "della_linear", "base_model": "base", "models": _models([0.6, 0.3, 0.8], density=0.4, epsilon=0.15)}, INJECT),
    "della_linear_normalize": ({"merge_method": "della_linear", "base_model": "base", "models": _models([0.6, 0.3], density=0.7, epsilon=0.1),
                                "parameters": {"normalize": True, "rescale": False}}, INJECT),
    "dare_linear": ({"merge_method": "dare_linear", "base_model": "base", "models": _models([0.6, 0.3], density=0.7)}, MOMENTS),
    "dare_ties": ({"merge_method": "dare_ties", "base_model": "base", "models": _models([0.5, 0.5], density=0.7)}, COMPARE),
}


# The injected mask's uniform draws: u_e in [0, 1) from an integer hash of (the task
# vector's float32 bits, the entry's position), exact in int64 and the same in both
# processes; entry e is kept where u_e < k_e (mergekit's Bernoulli(k_e) becomes this test).
_U_SRC = """
def _inject_u(delta):
    import torch
    flat = delta.detach().to(torch.float32).contiguous().reshape(-1)
    bits = flat.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    h = ((bits ^ torch.arange(flat.numel(), dtype=torch.int64)) * 40503) % (1 << 32)
    h = ((h ^ (h >> 13)) * 40503) % (1 << 32)
    h = ((h ^ (h >> 16)) * 40503) % (1 << 32)
    return ((h >> 8).to(torch.float64) / float(1 << 24)).reshape(delta.shape)
"""
exec(_U_SRC)

# mergekit's della_magprune wrapped so that its torch.bernoulli(k) is u(tau) < k (test-only,
# in mergekit's process; mergekit's rank, probability and rescale code runs unchanged)
_MK_INJECT = _U_SRC + """
import torch, mergekit.sparsify as _sp
_orig_magprune, _orig_bernoulli, _cur = _sp.della_magprune, torch.bernoulli, []
def _magprune(tensor, *a, **k):
    _cur.append(tensor)
    try:
        return _orig_magprune(tensor, *a, **k)
    finally:
        _cur.pop()
def _bernoulli(probs, *a, **k):
    if not _cur:
        return _orig_bernoulli(probs, *a, **k)
    return (_inject_u(_cur[-1]).reshape(probs.shape) < probs).to(probs.dtype)
def inject(on):
    _sp.della_magprune = _magprune if on else _orig_magprune
    torch.bernoulli = _bernoulli if on else _orig_bernoulli
"""


def _concrete(recipe: dict, paths: dict[str, Path]) -> dict:
    """The recipe with model names replaced by folder paths, in float32."""
    out = json.loads(json.dumps(recipe))
    for m in out["models"]:
        m["model"] = str(paths[m["model"]])
    if "base_model" in out:
        out["base_model"] = str(paths[out["base_model"]])
    out["dtype"] = "float32"
    return out


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """Folders, and mergekit's result of every row (run in one mergekit process)."""
    root = tmp_path_factory.mktemp("mk")
    base = qwen3_state(0)
    states = {"base": base, **{m: qwen3_state(i + 1, base) for i, m in enumerate(M)}}
    paths = {k: write_folder(root / k, v, shards=2 if k == "b" else 1) for k, v in states.items()}
    jobs = {}
    for rid, (recipe, _) in ROWS.items():
        (root / f"{rid}.yml").write_text(yaml.safe_dump(_concrete(recipe, paths)))
        jobs[rid] = (str(root / f"{rid}.yml"), str(root / f"theirs_{rid}"))
    script = (
        "import json, sys, traceback, yaml\n"
        "from mergekit.config import MergeConfiguration\nfrom mergekit.merge import run_merge, MergeOptions\n"
        + _MK_INJECT +
        "res = {}\n"
        f"inject_rows = {[r for r, (_, kind) in ROWS.items() if kind == INJECT]!r}\n"
        f"for rid, (cfg, out) in {jobs!r}.items():\n"
        "    inject(rid in inject_rows)\n"
        "    try:\n"
        "        c = MergeConfiguration.model_validate(yaml.safe_load(open(cfg)))\n"
        "        run_merge(c, out, options=MergeOptions(copy_tokenizer=False, lazy_unpickle=True, random_seed=0))\n"
        "        res[rid] = 'ok'\n"
        "    except Exception:\n"
        "        res[rid] = traceback.format_exc()[-2000:]\n"
        "print('RESULT ' + json.dumps(res))\n")
    proc = subprocess.run([MK, "-c", script], capture_output=True, text=True, timeout=600)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, f"mergekit did not run (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    status = json.loads(line[-1][7:])
    return root, states, paths, jobs, status


def _ours(root: Path, rid: str, paths: dict[str, Path], states: dict | None = None) -> dict:
    out = root / f"ours_{rid}"
    if ROWS[rid][1] == INJECT:
        recipe = ROWS[rid][0]
        inputs = [m["model"] for m in recipe["models"] if m["model"] != recipe.get("base_model")]
        base = states[recipe["base_model"]]

        def fn(key, index, drop, shape):  # the mask mergekit's patched draw made: u < k_e
            u = _inject_u(states[inputs[index]][key] - base[key])
            return (u < (1.0 - drop)).reshape(shape)

        with masks.injected_masks(fn):
            run_mergekit_recipe(root / f"{rid}.yml", out, max_shard_bytes=30_000, overwrite=True)
    else:
        run_mergekit_recipe(root / f"{rid}.yml", out, max_shard_bytes=30_000, overwrite=True)
    return read_folder(out)


def _check_known(rid: str) -> None:
    name = ROWS[rid][0]["merge_method"]
    if name not in supported_methods(set(method_names())):
        pytest.xfail(f"mergekit method {name!r} is not mapped onto a registered mmgrid method yet")


@pytest.mark.parametrize("rid", [r for r, (_, kind) in ROWS.items() if kind in (EXACT, INJECT)])
def test_deterministic_equals_mergekit(oracle, rid):
    root, states, paths, jobs, status = oracle
    _check_known(rid)
    assert status[rid] == "ok", f"mergekit failed on {rid}:\n{status[rid]}"
    theirs = read_folder(Path(jobs[rid][1]))
    ours = _ours(root, rid, paths, states)
    assert set(theirs) <= set(ours) and len(theirs) >= 3 * 11
    worst = 0.0
    for k, t in theirs.items():
        assert ours[k].dtype == torch.float32 and t.dtype == torch.float32, k
        rel = ((ours[k] - t).norm() / t.norm()).item()
        worst = max(worst, rel)
        assert rel <= 1e-6, f"{rid}: {k} differs from mergekit by {rel:.2e} relative"
    print(f"{rid}: {len(theirs)} tensors, max relative difference {worst:.2e}")


def _moments(r: dict, states: dict, models: list[str], weights: list[float], d: float) -> dict:
    """DARE's statistics of a result and their standard errors under DARE (Bernoulli(d)
    masks, kept entries times 1/d): the entry r_e = sum_i w_i m_ie tau_ie / d has its
    2^n mask patterns enumerated, which gives E r_e, E r_e^2 and E r_e^4 exactly."""
    base = states["base"]
    names = [k for k in base if k in r]
    flat = lambda f: torch.cat([f(k).reshape(-1) for k in names]).double()  # noqa: E731
    res = flat(lambda k: r[k] - base[k])
    c = torch.stack([w * flat(lambda k, m=m: states[m][k] - base[k]) / d for m, w in zip(models, weights)])
    u = c.sum(0) * d
    m2 = torch.zeros_like(u)
    m4 = torch.zeros_like(u)
    for pattern in itertools.product([0, 1], repeat=len(models)):
        prob = math.prod(d if k else 1 - d for k in pattern)
        val = sum(ci for ci, k in zip(c, pattern) if k)
        val = val if torch.is_tensor(val) else torch.zeros_like(u)
        m2 += prob * val ** 2
        m4 += prob * val ** 4
    var1 = m2 - u ** 2  # Var r_e
    e2 = m2.sum()
    p0 = (1 - d) ** len(models)
    return {"unbiased": (res.dot(u) / u.dot(u)).item(), "se_unbiased": (var1.dot(u ** 2).sqrt() / u.dot(u)).item(),
            "second": (res.dot(res) / e2).item(), "se_second": ((m4 - m2 ** 2).sum().sqrt() / e2).item(),
            "dropped": (res == 0).double().mean().item(), "p0": p0, "se_dropped": math.sqrt(p0 * (1 - p0) / res.numel())}


@pytest.mark.parametrize("rid", [r for r, (_, kind) in ROWS.items() if kind in (MOMENTS, COMPARE)])
def test_random_masks_match_mergekit_in_distribution(oracle, rid):
    root, states, paths, jobs, status = oracle
    _check_known(rid)
    assert status[rid] == "ok", f"mergekit failed on {rid}:\n{status[rid]}"
    recipe = ROWS[rid][0]
    models = [m["model"] for m in recipe["models"]]
    weights = [m["parameters"]["weight"] for m in recipe["models"]]
    d = recipe["models"][0]["parameters"]["density"]
    got = {}
    for who, r in (("mergekit", read_folder(Path(jobs[rid][1]))), ("mmgrid", _ours(root, rid, paths))):
        mo = got[who] = _moments(r, states, models, weights, d)
        print(f"{rid} {who}: " + ", ".join(f"{k} {v:.4f}" for k, v in mo.items()))
        if ROWS[rid][1] == MOMENTS:
            for stat, want in (("unbiased", 1.0), ("second", 1.0), ("dropped", mo["p0"])):
                assert abs(mo[stat] - want) <= 4 * mo[f"se_{stat}"], (who, stat, mo)
    if ROWS[rid][1] == COMPARE:
        a, b = got["mmgrid"], got["mergekit"]
        for stat in ("unbiased", "second", "dropped"):
            assert abs(a[stat] - b[stat]) <= 4 * math.sqrt(2) * a[f"se_{stat}"], (stat, got)


def test_every_enabled_method_has_a_row():
    """A mergekit method enabled in the table gets compared: add its row to ROWS."""
    rowed = {r["merge_method"] for r, _ in ROWS.values()}
    missing = [m for m in supported_methods(set(method_names())) if m not in rowed]
    assert not missing, f"add oracle rows for {missing}"
    assert all(METHOD_TABLE[r["merge_method"]].random == (kind != EXACT) for r, kind in ROWS.values())
    exact = {r["merge_method"] for r, kind in ROWS.values() if kind == EXACT}
    assert exact == {m for m in supported_methods(set(method_names())) if not METHOD_TABLE[m].random}

