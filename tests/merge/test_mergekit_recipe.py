"""mergekit recipes read by mmgrid (no mergekit needed): settings evaluated as mergekit
documents them (hand-computed), the method table, named errors before anything is
written, HF folders in and out (sharded with the index), the registry path and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from hf_data import qwen3_state, read_folder, write_folder
from mmgrid.merge.errors import MergekitRecipeError, MergekitUnsupportedError, SourceError
from mmgrid.merge.mergekit import METHOD_TABLE, load, run_mergekit_recipe, supported_methods
from mmgrid.merge.mergekit.spec import evaluate, layer_position
from mmgrid.merge.methods import method_names


def test_gradient_interpolates_over_layers():
    # t = i / (L - 1); value (1 - f) v[j] + f v[j + 1], j = floor(t (n - 1))
    assert evaluate([0.0, 1.0], "x", 0.25) == 0.25
    assert evaluate([0.2, 0.4, 1.0], "x", 0.75) == pytest.approx(0.7)  # j=1, f=0.5: (0.4 + 1.0) / 2
    assert evaluate([0.2, 0.4, 1.0], "x", 1.0) == 1.0
    assert evaluate(["a", "b", "c"], "x", 0.9) == "b"  # non-numeric lists step: int(0.9 * 2) = 1
    assert layer_position("model.layers.2.mlp.up_proj.weight", 5) == 0.5
    assert layer_position("model.layers.0.mlp.up_proj.weight", 1) == 1.0  # mergekit: one layer has t = 1
    assert layer_position("model.embed_tokens.weight", 5) == 0.0
    assert layer_position("model.norm.weight", 5) == 0.0


def test_filters_first_match_wins_and_fall_through():
    cond = [{"filter": "self_attn", "value": 0.1}, {"filter": "mlp", "value": [0.0, 1.0]}]
    assert evaluate(cond, "model.layers.1.self_attn.q_proj.weight", 0.5) == 0.1
    assert evaluate(cond, "model.layers.1.mlp.up_proj.weight", 0.5) == 0.5
    assert evaluate(cond, "model.norm.weight", 0.5) is None  # no match: the next level is asked
    assert evaluate([{"filter": "*", "value": 3}], "anything", 0) == 3
    spec = load({"merge_method": "task_arithmetic", "base_model": "B",
                 "models": [{"model": "A", "parameters": {"weight": cond}}],
                 "parameters": {"weight": 0.7, "lambda": [1.0, 2.0]}})
    assert spec.resolve("model.norm.weight", 0.0).per_model[0]["weight"] == 0.7  # top level
    r = spec.resolve("model.layers.1.mlp.up_proj.weight", 0.5)
    assert r.per_model[0]["weight"] == 0.5 and r.glob["lambda"] == 1.5


def test_method_mapping_hand_computed():
    def build(recipe, tensor="model.layers.0.mlp.up_proj.weight", t=0.0):
        spec = load(recipe)
        return spec.row.build(spec.resolve(tensor, t), {"weights", "alpha"})

    m = [{"model": "A", "parameters": {"weight": 3.0}}, {"model": "C", "parameters": {"weight": 1.0}}]
    assert build({"merge_method": "linear", "models": m}) == ("average", {"weights": [3.0, 1.0]}, "")
    # normalize false: sum_i w_i theta_i = task arithmetic on a zero base
    assert build({"merge_method": "linear", "models": m, "parameters": {"normalize": False}})[::2] == ("task_arithmetic", "<zero>")
    ta = build({"merge_method": "task_arithmetic", "base_model": "B", "models": m, "parameters": {"normalize": True, "lambda": 0.5}})
    assert ta == ("task_arithmetic", {"weights": [0.75, 0.25], "scale": 0.5}, None)
    dm = [{"model": "A", "parameters": {"weight": 1.0, "density": 0.4}}, {"model": "C", "parameters": {"weight": 1.0, "density": 0.4}}]
    ties = build({"merge_method": "ties", "base_model": "B", "models": dm})
    assert ties[1] == {"density": 0.4, "scope": "tensor", "combine": "disjoint_mean", "weights": [1.0, 1.0], "scale": 1.0,
                       "sign_rule": "weighted"}  # mergekit elects the sign on weighted task vectors
    dare = build({"merge_method": "dare_linear", "base_model": "B", "models": dm, "parameters": {"rescale": False}})
    assert dare[0] == "dare" and dare[1]["p"] == pytest.approx(0.6)
    assert dare[1]["weights"] == pytest.approx([0.4, 0.4])  # 1/(1-p) undone: kept entries unscaled
    # a base listed among the models is the base, not an input (mergekit skips it)
    spec = load({"merge_method": "task_arithmetic", "base_model": "B", "models": [{"model": "B"}, *m]})
    assert spec.models == ["A", "C"]


def test_method_table_and_unknown_methods():
    ok = supported_methods(set(method_names()))
    assert {"linear", "task_arithmetic", "ties", "dare_linear", "dare_ties"} <= set(ok)
    assert all(METHOD_TABLE[k].method in method_names() for k in ok)
    with pytest.raises(MergekitRecipeError, match="unknown mergekit method 'tiez'.*supported: .*ties"):
        load({"merge_method": "tiez", "models": [{"model": "A"}]})
    assert set(ok) == set(METHOD_TABLE) and len(ok) == 20  # every mergekit method is mapped
    with pytest.raises(MergekitRecipeError, match="base_model: arcee_fusion .*needs a base"):
        load({"merge_method": "arcee_fusion", "models": [{"model": "A"}]})


@pytest.mark.parametrize("recipe, match", [
    ({"merge_method": "ties", "models": [{"model": "A", "parameters": {"weight": 1}}]}, "base_model: ties .*needs a base"),
    ({"merge_method": "linear", "slices": [{"sources": []}]}, "slices: layer slicing .*not supported yet"),
    ({"merge_method": "linear", "models": [{"model": "A"}], "tokenizer_source": "union"}, "union"),
    ({"merge_method": "linear", "models": [{"model": "A", "parameters": {"density": 0.5}}]}, r"models\[0\].parameters.density: not a per-model parameter of linear"),
    ({"merge_method": "linear", "models": [{"model": "A"}], "parameters": {"t": 0.5}}, "parameters.t: not a parameter of linear"),
    ({"merge_method": "linear", "models": [{"model": "A", "parameters": {"weight": {"filter": "x", "value": 1}}}]}, "wrap a {filter, value} condition in a list"),
    ({"merge_method": "linear", "models": [{"model": "A", "parameters": {"weight": [{"filter": "x"}]}}]}, r"weight\[0\]: a list setting"),
    ({"merge_method": "linear", "models": [{"model": "A"}], "dtype": "float8"}, "dtype: 'float8'"),
    ({"merge_method": "linear", "models": []}, "models: give a non-empty list"),
    ({"merge_method": "linear", "models": [{"model": "A"}], "bogus": 1}, r"unknown key\(s\) \['bogus'\]"),
    ({"models": [{"model": "A"}]}, "merge_method: missing"),
    ({"merge_method": "linear", "models": [{"model": "A"}, {"model": "A"}]}, "listed twice"),
])
def test_bad_recipes_get_named_errors(recipe, match):
    with pytest.raises(MergekitRecipeError, match=match):
        load(recipe)


def test_global_parameter_types_are_checked_per_tensor():
    spec = load({"merge_method": "ties", "base_model": "B", "models": [{"model": "A", "parameters": {"weight": 1}}],
                 "parameters": {"normalize": [{"filter": "mlp", "value": "yes"}], "lambda": 1}})
    with pytest.raises(MergekitRecipeError, match="parameters.normalize: true or false, got 'yes' on tensor x.mlp"):
        spec.resolve("x.mlp", 0.0)
    assert spec.resolve("x.attn", 0.0).glob == {"int8_mask": False, "normalize": True, "rescale": False, "lambda": 1}


def test_yaml_is_read_with_safe_load(tmp_path: Path):
    p = tmp_path / "r.yml"
    p.write_text("merge_method: !!python/object/apply:os.system ['echo pwned']\nmodels: [{model: A}]\n")
    with pytest.raises(MergekitRecipeError, match="not valid YAML"):
        load(p)
    with pytest.raises(MergekitRecipeError, match="no mergekit recipe at"):
        load(tmp_path / "missing.yml")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    base = qwen3_state(0)
    st = {"base": base, "a": qwen3_state(1, base), "b": qwen3_state(2, base)}
    paths = {"base": write_folder(root / "base", base, tokenizer="base"),
             "a": write_folder(root / "a", st["a"], shards=3, tokenizer="a"),
             "b": write_folder(root / "b", st["b"], tokenizer="b")}
    return root, st, paths


def _ta(paths, **extra):
    return {"merge_method": "task_arithmetic", "base_model": str(paths["base"]),
            "models": [{"model": str(paths["a"]), "parameters": {"weight": 0.5}},
                       {"model": str(paths["b"]), "parameters": {"weight": [{"filter": "mlp", "value": 0.2}, {"value": 0.4}]}}],
            **extra}


def test_hf_folder_in_and_sharded_out(folders, tmp_path: Path):
    root, st, paths = folders
    res = run_mergekit_recipe(_ta(paths, tokenizer_source=str(paths["a"]), dtype="bfloat16"), tmp_path / "o",
                              max_shard_bytes=8_000)
    out = tmp_path / "o"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(res.files) > 1 and sorted(set(index["weight_map"].values())) == sorted(res.files)
    got = read_folder(out)
    assert set(got) == set(st["base"])
    assert index["metadata"]["total_size"] == sum(t.numel() * 2 for t in got.values())
    for k, t in got.items():
        wb = 0.2 if "mlp" in k else 0.4
        want = st["base"][k] + 0.5 * (st["a"][k] - st["base"][k]) + wb * (st["b"][k] - st["base"][k])
        assert t.dtype == torch.bfloat16 and torch.allclose(t.float(), want, rtol=1e-2, atol=1e-3), k
    assert json.loads((out / "tokenizer_config.json").read_text()) == {"marker": "a"}  # tokenizer_source
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert len({g.params["weights"][1] for g in res.groups}) == 2  # two parameter groups (mlp / other)
    # one file below the threshold, and the base's tokenizer by default
    run_mergekit_recipe(_ta(paths), tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                                "tokenizer_config.json"]
    assert json.loads((tmp_path / "one" / "tokenizer_config.json").read_text()) == {"marker": "base"}
    (tmp_path / "one" / "stray").write_text("old")  # overwrite replaces the folder whole
    run_mergekit_recipe(_ta(paths), tmp_path / "one", overwrite=True)
    assert not (tmp_path / "one" / "stray").exists() and (tmp_path / "one" / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_errors_write_nothing(folders, tmp_path: Path):
    root, st, paths = folders
    bad = _ta(paths)
    bad["models"][1]["parameters"] = {}  # b has no weight
    with pytest.raises(MergekitRecipeError, match=r"models\[1\].parameters.weight: task_arithmetic needs a weight"):
        run_mergekit_recipe(bad, tmp_path / "x")
    ties = {"merge_method": "ties", "base_model": str(paths["base"]),
            "models": [{"model": str(paths["a"]), "parameters": {"weight": 1.0, "density": 0.3}},
                       {"model": str(paths["b"]), "parameters": {"weight": 1.0, "density": 0.5}}]}
    with pytest.raises(MergekitUnsupportedError, match="'density' differ"):
        run_mergekit_recipe(ties, tmp_path / "x")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"\x80")
    with pytest.raises(SourceError, match="never unpickles"):
        run_mergekit_recipe({**_ta(paths), "base_model": str(tmp_path / "bin")}, tmp_path / "x")
    with pytest.raises(SourceError, match="no registry is given"):
        run_mergekit_recipe({**_ta(paths), "base_model": "some-id"}, tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("keep")
    with pytest.raises(MergekitRecipeError, match="not empty"):
        run_mergekit_recipe(_ta(paths), tmp_path / "full")
    assert not (tmp_path / "x").exists() and (tmp_path / "full" / "f").read_text() == "keep"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_registry_ids_in_registry_checkpoint_out(folders, tmp_path: Path):
    from mmgrid.merge import merge
    from mmgrid.registry import Registry

    root, st, paths = folders
    reg = Registry.open(tmp_path / "reg")
    cfg = (paths["base"] / "config.json").read_bytes()
    ids = {"base": reg.put(st["base"], {"paradigm": "text", "domain": "none", "period": "p0"}, "base", files={"config.json": cfg})}
    for k, dom in (("a", "A"), ("b", "B")):
        ids[k] = reg.put(st[k], {"paradigm": "text", "domain": dom, "period": "p1"}, "trained",
                         parents=[(ids["base"], "init")], files={"config.json": cfg})
    recipe = {"merge_method": "ties", "base_model": ids["base"],
              "models": [{"model": ids["a"], "parameters": {"weight": 1.0, "density": 0.5}},
                         {"model": ids["b"], "parameters": {"weight": 1.0, "density": 0.5}}]}
    res = run_mergekit_recipe(recipe, registry=reg)
    man = reg.get(res.id)
    assert man.kind == "merged" and man.coords["domain"] == "A+B" and man.coords["variant"] == "mergekit-ties"
    roles = sorted((p.role if hasattr(p, "role") else p[1]) for p in man.parents)
    assert roles == ["merge_base", "merge_input", "merge_input"]
    assert man.params["merge_method"] == "ties" and reg.file(res.id, "config.json") == cfg
    direct = merge("ties", [ids["a"], ids["b"]], base=ids["base"], registry=reg, density=0.5, scope="tensor")
    loaded = reg.load(res.id)
    assert all(torch.equal(loaded[k], direct[k]) for k in direct)
    assert run_mergekit_recipe(recipe, registry=reg).id == res.id  # same recipe, same id


def test_cli_mergekit(folders, tmp_path: Path, capsys):
    from mmgrid.cli import main

    root, st, paths = folders
    rec = tmp_path / "r.yml"
    rec.write_text(yaml.safe_dump(_ta(paths)))
    assert main(["merge", "--mergekit", str(rec), "--out", str(tmp_path / "o"), "--max-shard-size", "0.00003"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "o")
    assert (tmp_path / "o" / "model.safetensors.index.json").exists()
    want = run_mergekit_recipe(rec, tmp_path / "o2")
    assert want.out and all(torch.equal(a, read_folder(tmp_path / "o2")[k]) for k, a in read_folder(tmp_path / "o").items())
    assert main(["merge", "--mergekit", str(rec)]) == 2  # neither --out nor --registry
    assert "--out DIR" in capsys.readouterr().err
    assert main(["merge", "--method", "ties", "--inputs", "a"]) == 2  # registry merges still need --registry
    assert "--registry" in capsys.readouterr().err


def test_new_method_rows_hand_computed():
    """The rows added for mmgrid's sphere and sparsifying methods: inputs, order and parameters."""
    def spec_build(recipe, tensor="model.layers.0.mlp.up_proj.weight"):
        spec = load(recipe)
        return spec, spec.row.build(spec.resolve(tensor, 0.0), set())

    # slerp: mergekit's v_0 is the base model, whatever the listing order
    spec, b = spec_build({"merge_method": "slerp", "base_model": "B", "models": [{"model": "A"}, {"model": "B"}],
                          "parameters": {"t": 0.25}})
    assert spec.models == ["B", "A"] and b == ("slerp", {"t": 0.25}, "")
    # karcher: the base model is one more equally weighted input, no base
    spec, b = spec_build({"merge_method": "karcher", "base_model": "B", "models": [{"model": "A"}, {"model": "C"}],
                          "parameters": {"max_iter": 7}})
    assert spec.models == ["A", "C", "B"] and b == ("karcher", {"max_iter": 7, "tol": 1e-5}, "")
    _, b = spec_build({"merge_method": "nuslerp", "models": [{"model": "A", "parameters": {"weight": 2.0}},
                                                               {"model": "C", "parameters": {"weight": 1.0}}],
                       "parameters": {"nuslerp_flatten": False}})
    assert b == ("nuslerp", {"weights": [2.0, 1.0], "flatten": False, "row_wise": False}, None)
    _, b = spec_build({"merge_method": "model_stock", "base_model": "B", "models": [{"model": "A"}, {"model": "C"}]})
    assert b == ("model_stock", {"filter_wise": False, "clamp_cos": False}, None)
    _, b = spec_build({"merge_method": "passthrough", "models": [{"model": "A", "parameters": {"scale": 0.5}}]})
    assert b == ("passthrough", {"scale": 0.5}, "")
    gta = {"base_model": "B", "models": [{"model": "A", "parameters": {"weight": 3.0, "density": 0.5}},
                                         {"model": "C", "parameters": {"weight": 1.0, "density": 0.5}}]}
    _, b = spec_build({"merge_method": "breadcrumbs", **gta, "parameters": {"normalize": True, "rescale": True}})
    assert b[1] == {"density": 0.5, "gamma": 0.01, "scale": 1.0, "rescale": "l1", "weights": [0.75, 0.25]}
    _, b = spec_build({"merge_method": "della", **gta})  # mergekit's della defaults: normalize, rescale, epsilon 0.15
    assert b[1] == {"density": 0.5, "epsilon": 0.15, "scale": 1.0, "rescale": "l1", "weights": [3.0, 1.0],
                    "combine": "disjoint_mean", "sign_rule": "weighted"}
    _, b = spec_build({"merge_method": "sce", "base_model": "B", "models": [{"model": "A"}, {"model": "C"}],
                       "parameters": {"select_topk": 1.5}})
    assert b == ("sce", {"select_topk": 1.0}, None)  # mergekit: >= 1 keeps everything


@pytest.mark.parametrize("recipe, err, match", [
    ({"merge_method": "della", "base_model": "B", "models": [{"model": "A", "parameters": {"weight": 1, "density": 0.9}}]},
     MergekitRecipeError, r"density \+/- epsilon = 0.9 \+/- 0.15 must lie inside \(0, 1\)"),
    ({"merge_method": "slerp", "base_model": "B", "models": [{"model": "A"}], "parameters": {"t": "half"}},
     MergekitRecipeError, "parameters.t: slerp needs a number, got 'half'"),
    ({"merge_method": "multislerp", "models": [{"model": "A", "parameters": {"weight": 1}}], "parameters": {"eps": 1e-3}},
     MergekitUnsupportedError, "eps is fixed at 1e-8"),
    ({"merge_method": "karcher", "models": [{"model": "A"}], "parameters": {"max_iter": 2.5}},
     MergekitRecipeError, "whole number of iterations"),
    ({"merge_method": "breadcrumbs", "base_model": "B", "models": [
        {"model": "A", "parameters": {"weight": 1, "gamma": 0.1}}, {"model": "C", "parameters": {"weight": 1, "gamma": 0.2}}]},
     MergekitUnsupportedError, "the models' 'gamma' differ"),
])
def test_new_rows_refuse_bad_parameters_by_name(recipe, err, match):
    spec = load(recipe)
    with pytest.raises(err, match=match):
        spec.row.build(spec.resolve("model.layers.0.mlp.up_proj.weight", 0.0), set())


def test_ramplus_and_arcee_fusion_map_their_parameters():
    spec = load({"merge_method": "ramplus_tl", "base_model": "B", "models": [{"model": "A"}, {"model": "C"}],
                 "parameters": {"r": 0.3, "alpha": 0.5}})
    got = spec.row.build(spec.resolve("model.layers.0.mlp.up_proj.weight", 0.0), set())
    assert got == ("ramplus_tl", {"r": 0.3, "rho_max": 0.5, "epsilon": 1e-5}, None)
    spec = load({"merge_method": "arcee_fusion", "base_model": "B", "models": [{"model": "B"}, {"model": "A"}]})
    assert spec.models == ["A"]
    assert spec.row.build(spec.resolve("model.norm.weight", 0.0), set()) == ("arcee_fusion", {}, None)
    spec = load({"merge_method": "arcee_fusion", "base_model": "B", "models": [{"model": "A"}, {"model": "C"}]})
    with pytest.raises(MergekitRecipeError, match="arcee_fusion merges one model"):
        spec.row.build(spec.resolve("model.norm.weight", 0.0), set())


@pytest.mark.parametrize("method,dtype,direct", [("task_arithmetic", None, True), ("ram", None, True),
                                                 ("sce", None, True), ("task_arithmetic", "bfloat16", False)])
def test_one_group_recipe_writes_the_merge_pass_into_the_folder(folders, tmp_path: Path, monkeypatch, method, dtype,
                                                                direct):
    """A recipe of one parameter group whose output keeps the inputs' dtype and fits one
    shard is merged straight into the folder's model.safetensors: the same files, byte for
    byte, as the general path (a scratch file per group, copied into the folder); another
    output dtype takes the general path."""
    from mmgrid.merge.mergekit import run as run_mod

    root, st, paths = folders
    models = [{"model": str(paths["a"]), "parameters": {"weight": 0.5}}, {"model": str(paths["b"]), "parameters": {"weight": 0.3}}]
    if method != "task_arithmetic":
        models = [{"model": m["model"]} for m in models]
    recipe = {"merge_method": method, "base_model": str(paths["base"]), "models": models}
    if dtype:
        recipe["dtype"] = dtype
    got = []
    real = run_mod._direct
    monkeypatch.setattr(run_mod, "_direct", lambda *a: got.append(real(*a)) or got[-1])
    run_mergekit_recipe(recipe, tmp_path / "fast")
    assert (got[0] is not None) == direct
    monkeypatch.setattr(run_mod, "_direct", lambda *a: None)
    run_mergekit_recipe(recipe, tmp_path / "general")
    names = sorted(p.name for p in (tmp_path / "fast").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "general").iterdir()) and "model.safetensors" in names
    for n in names:
        assert (tmp_path / "fast" / n).read_bytes() == (tmp_path / "general" / n).read_bytes(), n


# --- a plain passthrough: the file copied without torch ------------------------------------

def _copy_inputs(tmp_path: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    st = {k: v.to(dtype) for k, v in qwen3_state(3).items()}
    st["model.layers.0.step"] = torch.arange(5)  # a non-float tensor is copied too
    return write_folder(tmp_path / "src", st, tokenizer="src")


@pytest.mark.parametrize("extra", [{}, {"dtype": "bfloat16"}, {"parameters": {"scale": 1.0}}])
def test_plain_passthrough_is_copied_with_the_engines_result(tmp_path: Path, monkeypatch, extra):
    """One folder, scale 1, the stored dtype: the copy path writes the input's file byte for
    byte, and the same tensors, config, tokenizer files and card as the merge engine."""
    from mmgrid.merge.mergekit import entry

    src = _copy_inputs(tmp_path)
    recipe = {"merge_method": "passthrough", "models": [{"model": str(src)}], **extra}
    copied = []
    real = entry.copy_recipe
    monkeypatch.setattr(entry, "copy_recipe", lambda *a: copied.append(real(*a)) or copied[-1])
    run_mergekit_recipe(recipe, tmp_path / "copy")
    assert copied[0] is not None
    assert (tmp_path / "copy" / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    monkeypatch.setattr(entry, "copy_recipe", lambda *a: None)
    run_mergekit_recipe(recipe, tmp_path / "engine")
    a, b = read_folder(tmp_path / "copy"), read_folder(tmp_path / "engine")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    for name in ("config.json", "tokenizer_config.json", "README.md"):
        assert (tmp_path / "copy" / name).read_bytes() == (tmp_path / "engine" / name).read_bytes(), name


@pytest.mark.parametrize("extra", [{"dtype": "float32"}, {"parameters": {"scale": [{"filter": "mlp", "value": 0.5}, {"value": 1.0}]}}])
def test_passthrough_that_changes_values_takes_the_engine(tmp_path: Path, extra):
    """Another output dtype or a scale other than 1 on some tensor is a merge, not a copy."""
    src = _copy_inputs(tmp_path)
    recipe = {"merge_method": "passthrough", "models": [{"model": str(src)}], **extra}
    run_mergekit_recipe(recipe, tmp_path / "out")
    got, want = read_folder(tmp_path / "out"), read_folder(src)
    name = "model.layers.0.mlp.up_proj.weight"
    if "dtype" in extra:
        assert got[name].dtype == torch.float32 and torch.equal(got[name], want[name].float())
    else:
        assert torch.equal(got[name], (want[name].float() * 0.5).to(torch.bfloat16))
        assert torch.equal(got["model.norm.weight"], want["model.norm.weight"])


def test_plain_passthrough_imports_no_torch(tmp_path: Path):
    """The copy runs in a process that never imports torch (its start-up is most of a copy's time)."""
    import subprocess
    import sys

    src = _copy_inputs(tmp_path)
    code = ("import sys\nfrom mmgrid.merge.mergekit import run_mergekit_recipe\n"
            f"r = run_mergekit_recipe({{'merge_method': 'passthrough', 'models': [{{'model': {str(src)!r}}}]}}, {str(tmp_path / 'o')!r})\n"
            "print(r.files, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["['model.safetensors']", "False"]


@pytest.mark.parametrize("dtype,value", [(torch.bfloat16, float("nan")), (torch.float32, float("-inf")),
                                         (torch.float16, float("inf")), (torch.bfloat16, float("-nan"))])
def test_plain_passthrough_names_a_nan_or_inf_tensor_and_writes_nothing(tmp_path: Path, dtype, value):
    from mmgrid.merge.errors import NonFiniteError

    st = {k: v.to(dtype) for k, v in qwen3_state(3).items()}
    st["model.layers.1.mlp.up_proj.weight"][2, 3] = value
    src = write_folder(tmp_path / "src", st)
    with pytest.raises(NonFiniteError, match="model.layers.1.mlp.up_proj.weight"):
        run_mergekit_recipe({"merge_method": "passthrough", "models": [{"model": str(src)}]}, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))
    st["model.layers.1.mlp.up_proj.weight"][2, 3] = torch.finfo(dtype).max  # the largest finite value is no error
    src = write_folder(tmp_path / "src2", st)
    run_mergekit_recipe({"merge_method": "passthrough", "models": [{"model": str(src)}]}, tmp_path / "out")
