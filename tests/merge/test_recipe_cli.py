"""Recipes, the registry path (ids, lineage edges, meta) and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.recipe import Recipe, run_recipe


def test_recipe_yaml_roundtrip():
    r = Recipe("ties", ["a", "b"], "base", {"density": 0.3}, seed=2)
    back = Recipe.from_yaml(r.to_yaml())
    assert back == r
    with pytest.raises(MergeParamError):
        Recipe.from_yaml("method: ties\ninputs: [a]\nparams: {density: 2.0}\n")
    with pytest.raises(MergeParamError):
        Recipe.from_yaml("method: ties\ninputs: [a]\nbogus: 1\n")


@pytest.fixture()
def reg(tmp_path: Path, models):
    from mmgrid.registry import Registry

    r = Registry.open(tmp_path / "reg")
    ids = {}
    ids["base"] = r.put(models["base"], {"paradigm": "text", "domain": "none", "period": "p0"}, "base",
                        files={"config.json": b"{}"})
    for k, dom in (("a", "A"), ("b", "B")):
        ids[k] = r.put(models[k], {"paradigm": "text", "domain": dom, "period": "p2"}, "trained",
                       parents=[(ids["base"], "init")], files={"config.json": b"{\"x\": 1}"}, meta={"note": k})
    return r, ids


def test_run_recipe_stores_lineage(reg, models):
    from mmgrid.merge import merge

    r, ids = reg
    rec = Recipe("gcwm", [ids["a"], ids["b"]], ids["base"], {"threshold": 0.0})
    cid = run_recipe(rec, r)
    assert run_recipe(rec, r, dry_run=True) == cid  # dry run predicts the id
    man = r.get(cid)
    assert man.kind == "merged" and man.coords["domain"] == "A+B"
    roles = sorted((p.role if hasattr(p, "role") else p[1]) for p in man.parents)
    assert roles == ["merge_base", "merge_input", "merge_input"]
    assert man.params["method"] == "gcwm"
    assert "conflict" in man.meta["merge"]["report"] and man.meta["note"] == "a"
    assert r.file(cid, "config.json") == b"{\"x\": 1}"
    loaded = r.load(cid)
    direct = merge("gcwm", [ids["a"], ids["b"]], base=ids["base"], registry=r, threshold=0.0)
    assert all(torch.equal(loaded[k], direct[k]) for k in direct)


def test_cli_merge(reg, tmp_path: Path, capsys):
    from mmgrid.cli import main

    r, ids = reg
    root = str(r.root)
    rc = main(["merge", "--method", "ties", "--base", ids["base"], "--inputs", ids["a"], ids["b"],
               "--set", "density=0.5", "--registry", root])
    assert rc == 0
    cid = capsys.readouterr().out.strip().splitlines()[-1]
    assert r.get(cid).params["density"] == 0.5
    rec = tmp_path / "r.yaml"
    rec.write_text(Recipe("temporal", [ids["a"], ids["b"]], None, {"lam": 1.5}).to_yaml())
    assert main(["merge", "--recipe", str(rec), "--registry", root, "--out-coords", "variant=lam1.5"]) == 0
    assert main(["merge", "--method", "ties", "--base", ids["base"], "--inputs", ids["a"], "--set", "density=7",
                 "--registry", root]) == 2
