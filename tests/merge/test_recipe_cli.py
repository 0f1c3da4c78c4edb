"""Recipes, the registry path (ids, lineage edges, meta) and the CLI."""

from __future__ import annotations

import warnings
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


@pytest.mark.parametrize("form", ["flags", "recipe", "dry-run"])
def test_cli_merge_validates_once_and_looks_each_input_up_once(reg, models, tmp_path: Path, monkeypatch, capsys,
                                                               form):
    """`mmgrid merge` checks the method's parameters once (before anything is opened) and resolves each
    input and base reference in the registry once; the merge, the id and the lineage take the checked
    values and the manifests found. The stored model is the direct merge of the state dicts."""
    from mmgrid.cli import main
    from mmgrid.merge import api, merge, methods, recipe as recipe_mod
    from mmgrid.registry import Registry

    r, ids = reg
    for name, key in (("in-a", "a"), ("in-b", "b"), ("the-base", "base")):
        r.alias(name, ids[key])
    checks: list[str] = []
    real_validate = methods.validate_params
    for mod in (methods, recipe_mod, api):
        monkeypatch.setattr(mod, "validate_params", lambda name, params: checks.append(name) or real_validate(name, params))
    looked: list[str] = []
    real_resolve = Registry.resolve
    monkeypatch.setattr(Registry, "resolve", lambda self, ref: looked.append(ref) or real_resolve(self, ref))
    args = ["--registry", str(r.root)] + (["--dry-run"] if form == "dry-run" else [])
    if form == "recipe":
        path = tmp_path / "r.yaml"
        path.write_text(Recipe("ties", ["in-a", "in-b"], "the-base", {"density": 0.5}).to_yaml())
        args += ["--recipe", str(path)]
    else:
        args += ["--method", "ties", "--base", "the-base", "--inputs", "in-a", "in-b", "--set", "density=0.5"]
    assert main(["merge", *args]) == 0
    cid = capsys.readouterr().out.strip().splitlines()[-1]
    assert checks == ["ties"]
    assert {ref: looked.count(ref) for ref in ("in-a", "in-b", "the-base")} == {"in-a": 1, "in-b": 1, "the-base": 1}
    if form == "dry-run":
        assert not r.has(cid)
        return
    man = r.get(cid)
    assert sorted((p.id, p.role) for p in man.parents) == sorted([(ids["a"], "merge_input"), (ids["b"], "merge_input"), (ids["base"], "merge_base")])
    assert man.meta["merge"]["inputs"] == ["in-a", "in-b"] and man.params["density"] == 0.5
    want = merge("ties", [models["a"], models["b"]], base=models["base"], density=0.5)
    got = r.load(cid)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_a_checked_method_takes_no_second_set_of_parameters(reg):
    from mmgrid.merge import merge

    r, ids = reg
    checked = Recipe("ties", [ids["a"], ids["b"]], ids["base"], {"density": 0.5}).checked()
    with pytest.raises(MergeParamError, match="comes with its parameters"):
        merge(checked.method, [ids["a"], ids["b"]], base=ids["base"], registry=r, density=0.2)
    once = merge(checked.method, [ids["a"], ids["b"]], base=ids["base"], registry=r)
    named = merge("ties", [ids["a"], ids["b"]], base=ids["base"], registry=r, density=0.5)
    assert all(torch.equal(once[k], named[k]) for k in named)
    assert checked.method.report == {}  # the merge ran a fresh instance


@pytest.mark.parametrize("max_open", [64, 2])
def test_registry_inputs_are_read_in_blocks_from_their_blobs(reg, models, tmp_path: Path, monkeypatch, max_open):
    """merge_to_file over registry ids reads blocks of each blob in place: every blob is
    hashed once (the registry's first-read check) and no whole tensor is loaded, where
    it used to load the whole tensor once per block. The result equals the merge of
    the state dicts; past MAX_OPEN_FILES each read opens and closes its blob (no leak)."""
    import gc
    import os

    from safetensors.torch import load_file

    from mmgrid.merge import merge, merge_to_file
    from mmgrid.merge.executor import Route
    from mmgrid.merge.fastpass import reads
    from mmgrid.registry import store as store_mod

    r, ids = reg
    store_mod.forget_verified()
    hashed, whole = [], []
    real_hash, real_read = store_mod.sha256_file, store_mod.BlobStore.read_tensor
    monkeypatch.setattr(store_mod, "sha256_file", lambda p: hashed.append(p) or real_hash(p))
    monkeypatch.setattr(store_mod.BlobStore, "read_tensor", lambda self, *a, **k: whole.append(a) or real_read(self, *a, **k))
    monkeypatch.setattr(reads, "BLOCK_BYTES", 40)  # several blocks per tensor
    monkeypatch.setattr(reads, "MAX_OPEN_FILES", max_open)
    gc.collect()  # descriptors of earlier tests' garbage (mapped files) must not close mid-count
    fds = len(os.listdir("/proc/self/fd"))
    out = tmp_path / "m.safetensors"
    merge_to_file("task_arithmetic", [ids["a"], ids["b"]], out, base=ids["base"], registry=r, weights=[0.7, 0.4], durable=False,
                  route=Route(chunk=4))
    assert len(os.listdir("/proc/self/fd")) == fds
    got = load_file(str(out))
    want = merge("task_arithmetic", [models["a"], models["b"]], base=models["base"], weights=[0.7, 0.4])
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    blobs = {b.sha256 for i in ids.values() for k, b in r.get(i).blobs.items() if k != "codes"}
    assert sorted(p.name.split(".")[0] for p in hashed) == sorted(blobs)  # each float blob once
    assert {a[0] for a in whole} == {r.get(ids["a"]).blobs["codes"].sha256}  # only the int passthrough, whole


def test_registry_blob_corrupted_or_removed_is_named(reg, tmp_path: Path):
    from mmgrid.merge import merge_to_file
    from mmgrid.registry import store as store_mod
    from mmgrid.registry.errors import CorruptBlobError, MissingBlobError

    r, ids = reg
    blob = r.store.blob_path(r.get(ids["b"]).blobs["layers.0.up.weight"].sha256)
    raw = blob.read_bytes()
    out = tmp_path / "m.safetensors"
    store_mod.forget_verified()
    blob.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # one flipped bit
    with pytest.raises(CorruptBlobError, match="layers.0.up.weight"):
        merge_to_file("average", [ids["a"], ids["b"]], out, registry=r)
    blob.unlink()
    with pytest.raises(MissingBlobError, match="layers.0.up.weight"):
        merge_to_file("average", [ids["a"], ids["b"]], out, registry=r)
    assert not out.exists()
    blob.write_bytes(raw)


def test_temporal_sweep_over_registry_ids_maps_the_blobs(reg, models):
    from mmgrid.merge.interpolation import TemporalSweep

    from mmgrid.registry import store as store_mod

    r, ids = reg
    store_mod.forget_verified()  # a new process: each blob's first use checks its hash
    on_reg, in_mem = TemporalSweep(ids["a"], ids["b"], registry=r), TemporalSweep(models["a"], models["b"])
    ptr = on_reg.pairs["layers.0.q.weight"][0].data_ptr()
    mapped_from = [line.split()[-1] for line in open("/proc/self/maps")
                   if int(line.split("-")[0], 16) <= ptr < int(line.split()[0].split("-")[1], 16)]
    assert mapped_from == [str(r.store.blob_path(r.get(ids["a"]).blobs["layers.0.q.weight"].sha256))]  # no copy
    for lam in (-0.5, 0.4, 1.5):
        a, b = on_reg.state_at(lam), in_mem.state_at(lam)
        assert all(torch.equal(a[k], b[k]) for k in b)


def test_fixed_method_gets_a_new_id_others_keep_theirs(reg):
    """GCWM's version 2 changes its merges' ids; an unchanged method's id is the
    one computed the way it was before method versions existed."""
    from mmgrid.merge.methods import canonical_params
    from mmgrid.merge.recipe import default_coords
    from mmgrid.registry.names import make_id

    r, ids = reg
    parents = [(ids["a"], "merge_input"), (ids["b"], "merge_input"), (ids["base"], "merge_base")]
    cases = (("gcwm", {"threshold": 0.0}), ("ties", {"density": 0.3}), ("task_arithmetic", {}),
             ("task_arithmetic", {"lambdas": [0.5, 0.5]}))  # an old spelling: its canonical spelling's id
    for method, params in cases:
        rec = Recipe(method, [ids["a"], ids["b"]], ids["base"], params)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            old = make_id(default_coords(r, rec), "merged", parents,
                          {"method": method, **canonical_params(method, params)}, None, 0)
            assert (run_recipe(rec, r, dry_run=True) != old) == (method == "gcwm"), method


def test_merge_help_names_every_registered_method(capsys):
    """`mmgrid merge --help` lists the methods by hand (the parser must not import torch):
    it names every registered one."""
    import pytest as _pytest

    from mmgrid.cli import main
    from mmgrid.merge.methods import method_names

    with _pytest.raises(SystemExit):
        main(["merge", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    missing = [m for m in method_names() if m not in text]
    assert missing == []
