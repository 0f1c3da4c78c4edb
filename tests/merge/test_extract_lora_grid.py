"""extract-lora -> merge-lora -> apply-lora -> evaluate on the tiny real grid of tests/eval
(emb paradigm, 3 domains), through the CLI as a user would run it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "eval"))
from jobs_tinygrid import built_grid  # noqa: E402


def test_extract_merge_apply_evaluate(tmp_path_factory, tmp_path, capsys):
    from mmgrid.cli import main
    from mmgrid.registry import Registry

    cfg, _ = built_grid(tmp_path_factory, "registry-extract-lora")
    reg = Registry.open(cfg.registry)
    df = reg.query(paradigm="emb", kind="trained")
    seed0 = df[df["seed"] == 0] if "seed" in df.columns else df
    finals = seed0[seed0["period"] == "p2"].sort_values("domain")
    assert len(finals) >= 2, seed0[["id", "domain", "period", "seed"]].to_string()
    doms = list(finals["domain"])[:2]
    ids = [finals[finals["domain"] == d]["id"].iloc[0] for d in doms]
    bases = []
    for cid in ids:  # the base: the p2 checkpoint's origin down its lineage (pretrain / start)
        man = reg.get(cid)
        parents = {p.role: p.id for p in man.parents}
        bases.append(parents.get("init") or parents.get("previous_stage"))
    assert all(bases), [reg.get(c).parents for c in ids]
    base = bases[0]
    prep = ["--prepared", str(cfg.prepared)]
    ads = []
    for d, cid in zip(doms, ids):
        out = tmp_path / f"ad_{d}"
        assert main(["extract-lora", cid, "--base", base, "--registry", str(cfg.registry), "--out", str(out),
                     "--rank", "4", "--evaluate", *prep]) == 0, capsys.readouterr().err
        text = capsys.readouterr().out
        assert "relative reconstruction error" in text and "stored base + adapter as" in text
        assert "adapter" in text and "checkpoint" in text and "recall@10" in text.lower()
        ads.append(out)
    assert main(["merge-lora", *map(str, ads), "--out", str(tmp_path / "merged"), "--weights", "0.5", "0.5",
                 "--rank", "8"]) == 0
    capsys.readouterr()
    assert main(["apply-lora", str(tmp_path / "merged"), "--base", base, "--registry", str(cfg.registry),
                 "--source", ids[0], "--variant", "lora-merged"]) == 0
    applied = capsys.readouterr().out.strip().splitlines()[-1]
    man = reg.get(applied)
    assert {(p.role, p.id) for p in man.parents} == {("merge_base", reg.get(base).id), ("merge_input", ids[0])}
    assert main(["eval", "--registry", str(cfg.registry), applied, "--domain", doms[0], *prep]) == 0
    res = reg.results(id=applied, group="all", metric="recall@10")
    assert len(res) == 1 and 0.0 <= res["value"].iloc[0] <= 1.0
