"""The shell side: mmgrid query / results / show / lineage / registry verify|reindex|gc|alias."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from mmgrid.cli import main
from mmgrid.registry.api import Registry

from .test_dedupe_lineage import grid_with_merge
from .test_verify_gc import flip_byte


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_query_formats(reg: Registry, capsys: pytest.CaptureFixture) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    root = str(reg.root)
    rc, out, _ = run(capsys, "query", root, "--domain", "Books")
    assert rc == 0 and a1 in out and a2 in out and b1 not in out
    rc, out, _ = run(capsys, "query", root, "--kind", "merged", "--format", "csv")
    df = pd.read_csv(io.StringIO(out))
    assert list(df["id"]) == [merged] and df["lambda"].tolist() == [0.3]
    rc, out, _ = run(capsys, "query", root, "--paradigm", "text", "--period", "p1", "--format", "json")
    assert {r["id"] for r in json.loads(out)} == {a1, b1}
    rc, out, err = run(capsys, "query", root, "--domain", "nothing")  # a value no checkpoint has: named
    assert rc == 2 and "--domain 'nothing' matches no row" in err and "recorded: Books" in err
    rc, out, _ = run(capsys, "query", root, "--kind", "merged", "--period", "p1")  # each exists, not together
    assert rc == 0 and "(no rows)" in out


def test_show_lineage_with_registry_flag_and_env(reg: Registry, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    rc, out, _ = run(capsys, "show", a2, "--registry", str(reg.root))
    shown = json.loads(out)
    assert rc == 0 and shown["id"] == a2 and shown["parents"] == [{"id": a1, "role": "previous_stage"}]
    monkeypatch.setenv("MMGRID_REGISTRY", str(reg.root))
    rc, out, _ = run(capsys, "lineage", merged[:8])
    assert rc == 0 and out.splitlines()[0].startswith(merged) and "merge_base" in out and "previous_stage" in out
    rc, _, err = run(capsys, "show", "unknown-thing")
    assert rc == 2 and "no checkpoint" in err


def test_help_mentions_registry_default(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["lineage", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "MMGRID_REGISTRY" in text and "./runs/demo/registry" in text


def test_registry_maintenance_commands(reg: Registry, capsys: pytest.CaptureFixture) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    root = str(reg.root)
    reg.record_eval(a1, "test", "all", {"recall@10": 0.25})
    rc, out, _ = run(capsys, "results", root, "--metric", "recall@10", "--format", "csv")
    assert rc == 0 and pd.read_csv(io.StringIO(out))["value"].tolist() == [0.25]
    assert run(capsys, "registry", "alias", root, "keep-me", a2)[0] == 0
    rc, out, _ = run(capsys, "registry", "verify", root)
    assert rc == 0 and out.startswith("OK")
    rc, out, _ = run(capsys, "registry", "reindex", root)
    assert rc == 0 and "reindexed" in out
    rc, out, _ = run(capsys, "registry", "gc", root, "--keep", b1, "--dry-run")
    assert rc == 0 and "would remove 1 checkpoints" in out and reg.has(merged)
    flip_byte(reg.store.blob_path(next(iter(reg.get(a1).blobs.values())).sha256))
    rc, out, _ = run(capsys, "registry", "verify", root)
    assert rc == 1 and "corrupt" in out and a1 in out
    rc, _, err = run(capsys, "query", str(reg.root / "nope"))
    assert rc == 2 and "not a registry" in err
