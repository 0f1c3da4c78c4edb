"""Exported folders carry a README.md model card that huggingface_hub.ModelCard parses:
base_model (the lineage's base), base_model_relation, library_name, tags, the method, its
parameters and the lineage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmgrid.merge.mergekit import run_mergekit_recipe
from mmgrid.merge.recipe import Recipe, run_recipe
from mmgrid.registry import Registry
from mmgrid.registry import card as mc

from hf_data import qwen3_config, qwen3_state, write_folder

ModelCard = pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed: the cards are parsed "
                                "with its ModelCard (pip install huggingface_hub)").ModelCard

HUB = "Qwen/Qwen3-0.6B"  # a hub id as a base's source; nothing is fetched


@pytest.fixture
def lineage(tmp_path: Path):
    """A base from the hub, two checkpoints trained from it, and their TIES merge."""
    reg = Registry.open(tmp_path / "reg")
    cfg = json.dumps(qwen3_config()).encode()
    base = qwen3_state(0)
    ids = {"base": reg.put(base, {"paradigm": "base", "domain": "all", "period": "base"}, "base",
                           files={"config.json": cfg}, meta={"source": HUB})}
    for k, dom, seed in (("a", "Books", 1), ("b", "Movies", 2)):
        ids[k] = reg.put(qwen3_state(seed, base), {"paradigm": "text", "domain": dom, "period": "p0"}, "trained",
                         parents=[(ids["base"], "init")], params={"method": "lora", "lr": 1e-3},
                         files={"config.json": cfg})
    ids["m"] = run_recipe(Recipe("ties", [ids["a"], ids["b"]], base=ids["base"], params={"density": 0.5}), reg)
    yield reg, ids
    reg.close()


def test_trained_checkpoint_card_round_trips(lineage, tmp_path: Path):
    reg, ids = lineage
    out = reg.export_hf(ids["a"], tmp_path / "a")
    data = ModelCard.load(out / "README.md").data
    assert data.base_model == HUB
    assert data.base_model_relation == "finetune"
    assert data.library_name == "transformers"
    assert "mmgrid" in data.tags and "text" in data.tags
    rec = data.to_dict()["mmgrid"]
    assert rec["id"] == ids["a"] and rec["kind"] == "trained" and rec["params"]["lr"] == 1e-3
    assert [e["id"] for e in rec["lineage"]] == [ids["a"], ids["base"]]
    assert rec["lineage"][0]["parents"] == [{"id": ids["base"], "role": "init"}]


def test_merge_card_round_trips(lineage, tmp_path: Path):
    reg, ids = lineage
    out = reg.export_hf(ids["m"], tmp_path / "m")
    card = ModelCard.load(out / "README.md")
    data = card.data
    assert data.base_model == HUB and data.base_model_relation == "merge"
    assert {"mmgrid", "merge", "ties"} <= set(data.tags)
    rec = data.to_dict()["mmgrid"]
    assert rec["method"] == "ties" and rec["params"]["density"] == 0.5
    assert {e["id"] for e in rec["lineage"]} == {ids["m"], ids["a"], ids["b"], ids["base"]}
    roles = {(p["id"], p["role"]) for p in rec["lineage"][0]["parents"]}
    assert roles == {(ids["a"], "merge_input"), (ids["b"], "merge_input"), (ids["base"], "merge_base")}
    assert "## Lineage" in card.text and ids["a"][:12] in card.text
    # the weights are still what transformers opens
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_base_without_hub_source_is_named_by_its_id(tmp_path: Path):
    reg = Registry.open(tmp_path / "reg")
    cfg = json.dumps(qwen3_config()).encode()
    base = reg.put(qwen3_state(0), {"paradigm": "base", "domain": "all", "period": "base"}, "base",
                   files={"config.json": cfg}, meta={"source": "tiny_qwen3()"})
    child = reg.put(qwen3_state(1), {"paradigm": "text", "domain": "Books", "period": "p0"}, "trained",
                    parents=[(base, "init")], files={"config.json": cfg})
    data = ModelCard.load(reg.export_hf(child, tmp_path / "c") / "README.md").data
    assert data.base_model == base and data.base_model_relation == "finetune"
    own = ModelCard.load(reg.export_hf(base, tmp_path / "b") / "README.md").data
    assert own.base_model is None and "base_model_relation" not in own.to_dict()  # a base model has no base
    reg.close()


def test_hub_names():
    assert mc.hub_name("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert mc.hub_name("/cache/huggingface/hub/models--Qwen--Qwen3-0.6B/snapshots/abc") == "Qwen/Qwen3-0.6B"
    assert mc.hub_name("tiny_qwen3()") is None and mc.hub_name("") is None and mc.hub_name(None) is None
    assert mc.card_base_models("---\nbase_model: [a/b, c/d]\n---\nx") == ["a/b", "c/d"]
    assert mc.card_base_models("no front matter") == [] and mc.card_base_models("---\n: [\n---\n") == []


def test_mergekit_recipe_folder_has_a_merge_card(tmp_path: Path):
    base = qwen3_state(0)
    hub = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc"
    paths = {"base": write_folder(hub, base), "a": write_folder(tmp_path / "a", qwen3_state(1, base)),
             "b": write_folder(tmp_path / "b", qwen3_state(2, base))}
    (paths["b"] / "README.md").write_text("---\nbase_model: Qwen/Qwen3-0.6B\nbase_model_relation: finetune\n---\n")
    recipe = {"merge_method": "task_arithmetic", "base_model": str(paths["base"]),
              "models": [{"model": str(paths["a"]), "parameters": {"weight": 0.5}},
                         {"model": str(paths["b"]), "parameters": {"weight": 0.3}}]}
    run_mergekit_recipe(recipe, tmp_path / "out")
    card = ModelCard.load(tmp_path / "out" / "README.md")
    data = card.data
    # the hub base (a hub cache folder), a's own folder (no card), b's card's base
    assert data.base_model == ["Qwen/Qwen3-0.6B", "a"]
    assert data.base_model_relation == "merge" and {"mmgrid", "merge", "task_arithmetic"} <= set(data.tags)
    rec = data.to_dict()["mmgrid"]
    assert rec["params"]["models"] == [{"model": "a", "parameters": {"weight": 0.5}},
                                       {"model": "b", "parameters": {"weight": 0.3}}]
    assert rec["params"]["base_model"] == "Qwen/Qwen3-0.6B"
    assert {(p["id"], p["role"]) for p in rec["parents"]} == {("Qwen/Qwen3-0.6B", "merge_base"), ("a", "merge_input"),
                                                               ("b", "merge_input")}
    assert str(tmp_path) not in card.content  # no machine path in a card


def test_a_hub_base_exported_as_is_names_its_source_not_itself(lineage, tmp_path: Path):
    reg, ids = lineage
    data = ModelCard.load(reg.export_hf(ids["base"], tmp_path / "base") / "README.md").data
    assert data.base_model is None  # not its own base: no self-loop in the model tree
    assert data.to_dict()["mmgrid"]["source"] == HUB


def test_extracted_lora_adapter_card_round_trips(lineage, tmp_path: Path):
    """An adapter extracted from a registry checkpoint names the model it applies to (the base,
    by its hub source), relation adapter, library peft and the extraction's parameters."""
    from mmgrid.merge.lora import extract_lora

    reg, ids = lineage
    extract_lora(ids["a"], ids["base"], tmp_path / "ad", rank=2, include=["mlp"], registry=reg)
    data = ModelCard.load(tmp_path / "ad" / "README.md").data
    assert data.base_model == HUB and data.base_model_relation == "adapter" and data.library_name == "peft"
    assert data.to_dict()["mmgrid"]["params"]["rank"] == 2 and data.to_dict()["mmgrid"]["method"] == "extract_lora"
    extract_lora(ids["a"], {k: v for k, v in reg.load(ids["base"]).items()}, tmp_path / "sd", rank=2, include=["mlp"],
                 registry=reg)
    assert "base_model" not in ModelCard.load(tmp_path / "sd" / "README.md").data.to_dict()  # a state dict has no name
