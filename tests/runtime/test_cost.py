"""The costed plan: parameter counts against the models themselves, FLOPs of a hand-computed case,
MMGRid Table 1's counts, held stages at zero cost, throughput sources, and `mmgrid plan`'s tables."""

from __future__ import annotations

import json
import math

import pytest

from mmgrid.cli import main
from mmgrid.config import load_grid
from mmgrid.errors import ConfigError
from mmgrid.models.builders import tiny_qwen3, tiny_qwen3_wide
from mmgrid.runtime import throughput as tp_mod
from mmgrid.runtime.cost import (CHARS_PER_TOKEN, DomainCounts, PlanInputs, cost_plan, counts_from_table1, planned_stages,
                                 stage_model)
from mmgrid.runtime.modelfiles import KNOWN_CONFIGS, shape_of
from mmgrid.runtime.throughput import ACCELERATORS, Throughput, accelerator

# MMGRid Table 1: pretrain interactions of the six domains
TABLE1_PRETRAIN = {"Video_Games": 215_761, "Movies_and_TV": 617_122, "Cell_Phones_and_Accessories": 1_211_712,
                   "Sports_and_Outdoors": 1_468_421, "Books": 2_578_864, "Health_and_Household": 3_692_658}


@pytest.mark.parametrize("build, vocab", [(tiny_qwen3, 886), (tiny_qwen3, 2048), (tiny_qwen3_wide, 4096)])
def test_parameter_count_matches_the_model(build, vocab) -> None:
    model = build(vocab)
    shape = shape_of(model.config.to_dict())
    assert shape.params() == sum(p.numel() for p in model.parameters())
    # the multiplying parameters: every tensor but the input embedding
    assert shape.flop_params() == sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)


def test_qwen3_06b_sizes_match_its_model_card() -> None:
    """Qwen3-0.6B's model card: 0.6B parameters, 0.44B of them non-embedding; tied embeddings."""
    shape = shape_of(KNOWN_CONFIGS["Qwen/Qwen3-0.6B"])
    assert shape.tied and math.isclose(shape.params(), 0.6e9, rel_tol=0.02)
    assert math.isclose(shape.layers * shape.layer_params(), 0.44e9, rel_tol=0.02)


def test_table1_counts_and_an_unknown_domain() -> None:
    got = {d.name: d for d in counts_from_table1(list(TABLE1_PRETRAIN))}
    assert {n: d.examples["pretrain"] for n, d in got.items()} == TABLE1_PRETRAIN
    assert (got["Video_Games"].users, got["Video_Games"].items, got["Video_Games"].examples["p2"]) == (4876, 4068, 14708)
    with pytest.raises(ConfigError, match="not one of MMGRid Table 1"):
        counts_from_table1(["Garden"])


def _one_domain_cfg(tmp_path, paradigms: str = "[text]"):
    return load_grid("demo", [f"paradigms={paradigms}", "variants=[{name: default}]", "train.seeds=null",
                              "train.shared_stages=[]", "train.max_examples=null", "train.batch_size=4",
                              f"registry={tmp_path / 'reg'}", f"prepared={tmp_path / 'prep'}"])


def _counts() -> DomainCounts:
    # 10 pretrain examples with histories of 0..9 items, 35-character titles
    return DomainCounts("A", users=5, items=40, examples={"pretrain": 10, "p1": 6, "p2": 6, "test": 5}, test_users=5,
                        history={"pretrain": list(range(10)), "p1": [3] * 6, "p2": [20] * 6}, title_chars=35.0)


def test_text_stage_flops_by_hand(tmp_path) -> None:
    cfg = _one_domain_cfg(tmp_path)
    shape = shape_of(tiny_qwen3(512).config.to_dict())
    assert CHARS_PER_TOKEN["tiny"][0] == 7.0
    m = stage_model(cfg, shape, "text", _counts(), "pretrain", CHARS_PER_TOKEN["tiny"])
    # titles: ceil(35 / 7) = 5 tokens (under max_title_tokens 16); histories cut to max_history 10: mean 4.5
    tokens = 8 + 4.5 * (5 + 1) + 5 + 1
    assert math.isclose(m.tokens_per_example, tokens)
    assert math.isclose(m.flops_per_example, 6 * shape.flop_params() * tokens)
    plan = cost_plan(PlanInputs(cfg, [_counts()], shape, Throughput(1e9, 0.01, "test"), "hand", "hand"))
    row = next(r for r in plan.rows if r.what == "text pretrain")
    epochs = cfg.train.epochs["pretrain"]
    assert row.examples == epochs * 10
    assert math.isclose(row.flops, epochs * 10 * 6 * shape.flop_params() * tokens)
    steps = epochs * math.ceil(10 / 4)
    assert math.isclose(row.seconds, steps * 0.01 + row.flops / 1e9)
    assert row.ckpt_bytes == 4 * shape.params()


def test_held_stages_cost_nothing(tmp_path) -> None:
    cfg = _one_domain_cfg(tmp_path, "[text, sasrec]")
    shape = shape_of(tiny_qwen3(512).config.to_dict())
    stages = [s.__class__(**{**s.__dict__, "id": f"id{i}"}) for i, s in enumerate(planned_stages(cfg, ["A"]))]
    assert len(stages) == 2 * 3
    tp = Throughput(1e9, 0.01, "test")
    free = cost_plan(PlanInputs(cfg, [_counts()], shape, tp, "", "", stages=stages))
    held = cost_plan(PlanInputs(cfg, [_counts()], shape, tp, "", "", stages=stages, held={"id0", "id1"}))
    text = [r for r in held.rows if r.kind == "stage" and r.what.startswith("text")]
    assert [r.held for r in text] == [1, 1, 0]
    assert [r.seconds == 0 for r in text] == [True, True, False]
    saved = sum(j["estimate_seconds"] for r in free.rows for j in r.jobs if j["id"] in ("id0", "id1"))
    assert math.isclose(free.totals(pending_only=True)["seconds"] - held.totals(pending_only=True)["seconds"], saved)
    assert math.isclose(held.totals()["seconds"] + saved, free.totals()["seconds"])


def test_accelerators_and_their_errors() -> None:
    assert ACCELERATORS["h100"][0] == 989e12 and ACCELERATORS["a100"][0] == 312e12 and ACCELERATORS["l4"][0] == 121e12
    t = accelerator("H100", 0.4)
    assert math.isclose(t.flops_per_s, 0.4 * 989e12) and t.step_seconds == 0 and "MFU 0.4" in t.source
    assert math.isclose(t.seconds(0.4 * 989e12 * 10, 1000), 10.0)
    with pytest.raises(ConfigError, match="h100"):
        accelerator("tpu9", 0.4)
    with pytest.raises(ConfigError, match="mfu"):
        accelerator("a100", 0.0)


def test_measured_throughput_is_cached_per_machine(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MMGRID_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(tp_mod, "_measure", lambda: calls.append(1) or Throughput(2e9, 0.003, "fake"))
    a = tp_mod.measured(threads=1)
    b = tp_mod.measured(threads=1)
    assert a == b == Throughput(2e9, 0.003, "fake") and len(calls) == 1
    tp_mod.measured(threads=1, refresh=True)
    assert len(calls) == 2 and (tmp_path / "throughput.json").is_file()


def test_plan_amazon2023_from_table1(tmp_path, capsys) -> None:
    args = ["plan", "amazon2023", f"prepared={tmp_path / 'none'}", f"registry={tmp_path / 'reg'}",
            "--accelerator", "h100", "--mfu", "0.4"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "MMGRid Table 1" in out and "H100" in out and "text pretrain" in out and "to run (not held)" in out
    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = {r["what"]: r for r in plan["rows"]}
    assert rows["text pretrain"]["count"] == 6 and rows["text pretrain"]["examples"] == 3 * sum(TABLE1_PRETRAIN.values())
    assert rows["emb p1"]["held"] == 0 and plan["estimates"] is True
    total = sum(r["flops"] for r in plan["rows"])
    assert math.isclose(plan["totals"]["flops"], total)
    assert math.isclose(plan["totals"]["seconds"], sum(r["seconds"] for r in plan["rows"]))
    assert not (tmp_path / "reg").exists()  # a plan writes nothing


@pytest.mark.slow
def test_plan_demo_prints_its_table_and_build_plan_trains_nothing(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MMGRID_CACHE", str(tmp_path / "cache"))
    over = [f"prepared={tmp_path / 'p'}", f"registry={tmp_path / 'reg'}", f"data.root={tmp_path / 'w'}"]
    assert main(["plan", "demo", *over]) == 0
    out = capsys.readouterr().out
    assert "synthetic world" in out and "this machine, measured" in out
    for what in ("base tiny_qwen3()", "text pretrain", "semid p2 [orbit-sd-0.007]", "sasrec p1", "temporal sweep",
                 "cross-domain sweep", "total"):
        assert what in out
    assert main(["build", "demo", *over, "--plan"]) == 0
    assert "text pretrain" in capsys.readouterr().out
    assert not (tmp_path / "reg").exists() and not (tmp_path / "p").exists()
