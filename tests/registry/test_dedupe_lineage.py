"""Per-tensor dedupe across checkpoints, and lineage graphs with how each edge was made."""

from __future__ import annotations

import networkx as nx
import torch

from mmgrid.registry.api import Registry
from mmgrid.registry.lineage import text_tree

from .conftest import COORDS, tiny_state


def n_blobs(reg: Registry) -> int:
    return len(reg.store.iter_blobs())


def test_unchanged_tensors_are_stored_once(reg: Registry) -> None:
    base = tiny_state(0)
    b = reg.put(base, COORDS, "base")
    assert n_blobs(reg) == 5  # embed, 2 mlp, position ids, and the two equal norms share one
    stage = dict(base)
    stage["model.layers.1.mlp.weight"] = base["model.layers.1.mlp.weight"] + 1  # one layer trained
    s = reg.put(stage, {**COORDS, "period": "p1"}, "trained", parents=[(b, "previous_stage")])
    assert n_blobs(reg) == 6  # exactly one new blob
    mb, ms = reg.get(b), reg.get(s)
    same = [k for k in base if mb.blobs[k].sha256 == ms.blobs[k].sha256]
    assert same == [k for k in base if k != "model.layers.1.mlp.weight"]


def test_tied_and_equal_tensors_share_one_blob(reg: Registry) -> None:
    emb = torch.randn(10, 4)
    cid = reg.put({"embed": emb, "lm_head": emb, "copy": emb.clone()}, COORDS, "base")
    m = reg.get(cid)
    assert len({b.sha256 for b in m.blobs.values()}) == 1 and n_blobs(reg) == 1
    out = reg.load(cid)
    assert all(torch.equal(out[k], emb) for k in out)


def grid_with_merge(reg: Registry) -> tuple[str, str, str, str, str]:
    base = reg.put(tiny_state(0), {"paradigm": "base", "domain": "all", "period": "base"}, "base")
    a1 = reg.put(tiny_state(1), {**COORDS, "period": "p1"}, "trained", parents=[(base, "init")], params={"method": "sft", "lr": 1e-4})
    a2 = reg.put(tiny_state(2), {**COORDS, "period": "p2"}, "trained", parents=[(a1, "previous_stage")], params={"method": "sft", "lr": 1e-4})
    b1 = reg.put(tiny_state(3), {**COORDS, "domain": "Games", "period": "p1"}, "trained", parents=[(base, "init")], params={"method": "sft"})
    merged = reg.put(
        tiny_state(4), {**COORDS, "domain": "Books+Games", "period": "p2", "lambda": 0.3}, "merged",
        parents=[(a2, "merge_input"), (b1, "merge_input"), (base, "merge_base")],
        params={"method": "task_arithmetic", "lambda": 0.3},
    )
    return base, a1, a2, b1, merged


def test_lineage_graph_has_all_ancestors_and_edge_provenance(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    g = reg.lineage(merged)
    assert isinstance(g, nx.DiGraph)
    assert set(g.nodes) == {base, a1, a2, b1, merged}
    assert nx.is_directed_acyclic_graph(g) and nx.ancestors(g, merged) == {base, a1, a2, b1}
    assert g.edges[base, merged]["role"] == "merge_base"
    assert g.edges[a2, merged] == {**g.edges[a2, merged], "role": "merge_input", "method": "task_arithmetic"}
    assert g.edges[a2, merged]["params"]["lambda"] == 0.3
    assert g.edges[a1, a2]["role"] == "previous_stage" and g.edges[a1, a2]["params"]["lr"] == 1e-4
    assert g.nodes[merged]["kind"] == "merged" and g.nodes[merged]["coords"]["lambda"] == 0.3
    assert set(reg.lineage(a1).nodes) == {base, a1}  # only ancestors, never descendants


def test_lineage_text_tree(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    text = text_tree(reg.lineage(merged), merged)
    lines = text.splitlines()
    assert lines[0].startswith(merged)
    assert any("merge_input [task_arithmetic lambda=0.3]" in ln and a2 in ln for ln in lines)
    assert any("previous_stage [sft lr=0.0001]" in ln and a1 in ln for ln in lines)
    assert any("merge_base" in ln and base in ln for ln in lines)
    assert sum(base in ln for ln in lines) >= 2  # shared root shown under each path


def test_same_model_as_two_inputs_keeps_both_roles(reg: Registry) -> None:
    a = reg.put(tiny_state(0), COORDS, "base")
    m = reg.put(tiny_state(1), {**COORDS, "period": "m"}, "merged", parents=[(a, "merge_input"), (a, "merge_base")], params={"method": "x"})
    assert reg.lineage(m).edges[a, m]["roles"] == ["merge_input", "merge_base"]
