"""Index: queries, coords lookups, results, grids, aliases, and reindex from files alone."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from mmgrid.registry.api import Registry
from mmgrid.registry.errors import AmbiguousCheckpointError, UnknownCheckpointError

from .conftest import COORDS, tiny_state
from .test_dedupe_lineage import grid_with_merge


def snapshot(reg: Registry) -> dict[str, list]:
    con = sqlite3.connect(reg.root / "index.sqlite")
    out = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in ("checkpoints", "edges", "aliases", "results")}
    con.close()
    return out


def test_query_filters(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    df = reg.query()
    assert len(df) == 5 and {"id", "paradigm", "domain", "period", "variant", "kind", "created", "params"} <= set(df.columns)
    assert set(reg.query(domain="Books")["id"]) == {a1, a2}
    assert list(reg.query(paradigm="text", period="p1", domain="Games")["id"]) == [b1]
    assert set(reg.query(kind=["merged", "base"])["id"]) == {base, merged}
    assert list(reg.query(**{"lambda": 0.3})["id"]) == [merged]  # extra coords are queryable
    assert reg.query(domain="nope").empty
    assert reg.query(method="sft").shape[0] == 3
    assert "lambda" in reg.query().columns


def test_get_by_coords_alias_prefix(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    assert reg.get({**COORDS, "period": "p1"}).id == a1
    assert reg.get(a1[:7]).id == a1
    reg.alias("books-p1", a1)
    assert reg.get("books-p1").id == a1
    reg.alias("books-p1", a2)  # aliases move
    assert reg.get("books-p1").id == a2 and reg.aliases() == {"books-p1": a2}
    reg.put(tiny_state(9), {**COORDS, "period": "p1"}, "merged", parents=[(a1, "merge_input")])
    with pytest.raises(AmbiguousCheckpointError, match=a1):
        reg.get({**COORDS, "period": "p1"})
    assert reg.get({**COORDS, "period": "p1", "kind": "trained"}).id == a1
    with pytest.raises(UnknownCheckpointError, match="mmgrid query"):
        reg.get("no-such-thing")
    for weird in ("../../etc/passwd", "a\x00b", ""):
        with pytest.raises(UnknownCheckpointError):
            reg.get(weird)
    with pytest.raises(UnknownCheckpointError):
        reg.get({**COORDS, "period": "p9"})


def test_results_rows_and_filters(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    reg.record_eval(a1, "test", "all", {"recall@10": 0.1, "ndcg@10": 0.05})
    reg.record_eval(a1, "test", "active", {"recall@10": 0.2}, extra={"eval_domain": "Books"})
    recipe = {"method": "ties", "inputs": [a2, b1], "base": base, "alpha": 0.5}
    key = reg.record_eval(None, "test", "all", {"recall@10": 0.3}, recipe=recipe, extra={"alpha": 0.5, "paradigm": "text"})
    res = reg.results()
    assert len(res) == 4
    row = res[res.key == key].iloc[0]
    assert pd.isna(row["id"]) and row["recipe_hash"] and row["alpha"] == 0.5 and row["paradigm"] == "text"
    assert '"ties"' in row["recipe"]
    assert set(reg.results(metric="recall@10", group="all")["value"]) == {0.1, 0.3}
    assert list(reg.results(eval_domain="Books")["value"]) == [0.2]
    assert reg.results(id=a1, metric="ndcg@10")["value"].tolist() == [0.05]
    assert reg.results(domain="Books", group="active")["period"].tolist() == ["p1"]  # joined coords
    assert set(reg.results(paradigm="text")["value"]) == {0.1, 0.05, 0.2, 0.3}


def test_grid_table(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    ids = reg.grid("text", kind="trained")
    assert list(ids.columns) == ["p1", "p2"] and list(ids.index) == ["Books", "Games"]
    assert ids.loc["Books", "p2"] == a2 and ids.loc["Games", "p1"] == b1 and pd.isna(ids.loc["Games", "p2"])
    reg.record_eval(a1, "test", "all", {"recall@10": 0.1})
    reg.record_eval(a1, "test", "all", {"recall@10": 0.15})  # newest wins
    reg.record_eval(a2, "test", "all", {"recall@10": 0.2})
    vals = reg.grid("text", value="recall@10", split="test", group="all", kind="trained")
    assert vals.loc["Books", "p1"] == 0.15 and vals.loc["Books", "p2"] == 0.2 and pd.isna(vals.loc["Games", "p1"])


def test_reindex_from_files_reproduces_index(reg: Registry) -> None:
    base, a1, a2, b1, merged = grid_with_merge(reg)
    reg.alias("best", merged)
    reg.record_eval(merged, "test", "all", {"recall@10": 0.4}, extra={"lambda": 0.3})
    reg.record_eval(None, "valid", "all", {"recall@10": 0.5}, recipe={"m": 1})
    before = snapshot(reg)
    q_before, r_before = reg.query(), reg.results()
    reg.close()
    for suffix in ("", "-wal", "-shm"):
        (reg.root / f"index.sqlite{suffix}").unlink(missing_ok=True)
    fresh = Registry.open(reg.root)
    assert snapshot(fresh) == before
    pd.testing.assert_frame_equal(fresh.query(), q_before)
    pd.testing.assert_frame_equal(fresh.results(), r_before)
    assert fresh.reindex() > 0 and snapshot(fresh) == before  # reindex on a live index too
    fresh.close()


def test_worker_mode_never_touches_sqlite_and_driver_syncs(tmp_path) -> None:
    root = tmp_path / "shared"
    Registry.open(root).close()
    assert not root.exists()  # opening creates nothing; the first write does
    worker = Registry.open(root, index=False)
    cid = worker.put(tiny_state(0), COORDS, "base")
    worker.record_eval(cid, "test", "all", {"recall@10": 0.5})
    worker.alias("w", cid)
    assert list(worker.query()["id"]) == [cid]  # reads go through manifests
    assert worker.results()["value"].tolist() == [0.5]
    assert not (root / "index.sqlite").exists()
    driver = Registry.open(root)
    assert list(driver.query()["id"]) == [cid] and driver.results()["value"].tolist() == [0.5]
    cid2 = worker.put(tiny_state(1), {**COORDS, "period": "p1"}, "trained", parents=[(cid, "previous_stage")])
    assert driver.sync() >= 1 and set(driver.query()["id"]) == {cid, cid2}
    assert driver.sync() == 0  # nothing new: cheap and idempotent


def test_parents_by_alias_and_torn_results_line(reg: Registry) -> None:
    base = reg.put(tiny_state(0), COORDS, "base")
    reg.alias("the-base", base)
    child = reg.put(tiny_state(1), {**COORDS, "period": "p1"}, "trained", parents=[("the-base", "init")])
    assert reg.get(child).parents == [(base, "init")]
    assert child == Registry.make_id({**COORDS, "period": "p1"}, "trained", [(base, "init")])
    reg.record_eval(child, "test", "all", {"recall@10": 0.5})
    with open(next((reg.root / "results").glob("*.jsonl")), "ab") as fh:
        fh.write(b'{"key": "torn", "metr')  # a writer killed mid-line
    fresh = Registry.open(reg.root)
    fresh.reindex()
    assert fresh.results()["value"].tolist() == [0.5]


def test_worker_env_selects_worker_mode(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MMGRID_REGISTRY_WORKER", "1")
    worker = Registry.open(tmp_path / "r")
    assert not worker.indexed and not (tmp_path / "r" / "index.sqlite").exists()
    assert Registry.open(tmp_path / "r", index=True).indexed  # explicit wins
    monkeypatch.delenv("MMGRID_REGISTRY_WORKER")
    assert Registry.open(tmp_path / "r").indexed


def test_old_index_file_is_rebuilt_and_extra_coords_stay_queryable(reg: Registry) -> None:
    a = reg.put(tiny_state(0), {**COORDS, "lam": 0.5, "method": "ties", "alpha": 1}, "merged")
    b = reg.put(tiny_state(1), {**COORDS, "lam": 1.0, "method": "dare"}, "merged")
    con = sqlite3.connect(reg.root / "index.sqlite")
    con.execute("DELETE FROM coord_kv")
    con.execute("PRAGMA user_version=1")  # as written by an older mmgrid
    con.commit()
    con.close()
    fresh = Registry.open(reg.root)
    assert list(fresh.query(lam=0.5)["id"]) == [a]
    assert list(fresh.query(lam=1)["id"]) == [b]  # 1 == 1.0, as in Python
    assert list(fresh.query(alpha=1, lam=[0.5, 1.0])["id"]) == [a]
    assert set(fresh.query(method=["ties", "dare"])["id"]) == {a, b}


def test_an_index_file_of_an_older_schema_is_rebuilt_with_the_new_columns(tmp_path) -> None:
    """An index.sqlite written by an older mmgrid (schema version 3: no ``seed`` column) is dropped
    and rebuilt from the registry's files on open, instead of failing on the missing column."""
    import sqlite3

    import torch

    from mmgrid.registry import Registry

    reg = Registry.open(tmp_path / "reg")
    cid = reg.put({"w": torch.ones(2)}, {"paradigm": "p", "domain": "A", "period": "p1"}, "trained", seed=1)
    reg.close()
    conn = sqlite3.connect(tmp_path / "reg" / "index.sqlite")
    conn.executescript("DROP TABLE checkpoints; CREATE TABLE checkpoints(id TEXT PRIMARY KEY, paradigm TEXT); "
                       "PRAGMA user_version=3;")
    conn.close()
    again = Registry.open(tmp_path / "reg")
    rows = again.query(seed=1)
    assert list(rows["id"]) == [cid]
