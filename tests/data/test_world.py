"""The synthetic world: Amazon 2023 layout and fields, determinism, and the effects it must allow."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from data_fixtures import grid_yaml
from mmgrid.config import load_grid
from mmgrid.data.amazon import read_meta, read_reviews
from mmgrid.config import WorldConfig
from mmgrid.data.pipeline import prepare
from mmgrid.data.world_files import write_world


def _contents(root: Path) -> dict[str, bytes]:
    # compressed bytes: a rewritten world must hash the same, so `prepare` stays up to date
    out = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.gz"))}
    out["truth.json"] = (root / "truth.json").read_bytes()
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_world(tmp_path_factory.mktemp("w") / "world", WorldConfig(seed=3))


@pytest.fixture(scope="module")
def world_stats(world: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("p")
    return prepare(load_grid(grid_yaml(tmp, {"root": str(world)})), log=lambda m: None).stats()


def test_layout_and_fields(world: Path) -> None:
    truth = json.loads((world / "truth.json").read_text())
    assert list(truth["domains"]) == ["Phones", "Books", "Games", "Health", "Sports"]
    for knob in ("n_users", "n_items", "lifespan_days", "activity", "drift", "initial_item_share", "categories"):
        assert knob in truth["domains"]["Phones"]
    r = read_reviews(world / "raw" / "review_categories" / "Phones.jsonl.gz")
    m = read_meta(world / "raw" / "meta_categories" / "meta_Phones.jsonl.gz")
    assert r.height == truth["domains"]["Phones"]["reviews"] and r.null_count().row(0) == (0,) * r.width
    assert r.get_column("timestamp").min() >= 1609459200000 and r.get_column("timestamp").max() < 1680307200000
    assert set(r.get_column("parent_asin").unique()) <= set(m.get_column("parent_asin"))
    n_words = m.get_column("title").str.split(" ").list.len()
    assert n_words.min() >= 3 and n_words.max() <= 6
    assert m.get_column("description").list.len().to_list() == [1] * m.height


def test_deterministic_for_a_seed(world: Path, tmp_path: Path) -> None:
    again = write_world(tmp_path / "again", WorldConfig(seed=3))
    assert _contents(again) == _contents(world)
    other = write_world(tmp_path / "other", WorldConfig(seed=4, n_domains=1))
    key = "raw/review_categories/Phones.jsonl.gz"
    assert gzip.decompress(_contents(other)[key]) != gzip.decompress(_contents(world)[key])


def test_default_world_size_and_phases(world_stats) -> None:
    for row in world_stats.iter_rows(named=True):
        assert 250 <= row["users"] <= 600, row
        assert 150 <= row["items"] <= 320, row
        assert min(row["n_pretrain"], row["n_p1"], row["n_p2"]) > 200, row
        assert row["n_test"] >= 250, row


def test_paper_effects_possible(world_stats) -> None:
    s = {r["domain"]: r for r in world_stats.iter_rows(named=True)}
    gaps = [s[d]["avg_gap_days"] for d in ("Phones", "Games", "Books")]
    assert gaps == sorted(gaps) and gaps[-1] > 5 * gaps[0]  # life-span orders the interaction time gap
    assert s["Phones"]["new_share_test"] > 0.5  # fast turnover: new items dominate the test window
    assert s["Books"]["new_share_test"] < 0.2
    p = [r["p_active"] for r in s.values()]
    assert max(p) - min(p) > 0.1  # domains differ in the share of active users


def test_scale_multiplies_users_and_items(tmp_path: Path) -> None:
    small = json.loads((write_world(tmp_path / "a", WorldConfig(n_domains=1, scale=0.5)) / "truth.json").read_text())
    big = json.loads((write_world(tmp_path / "b", WorldConfig(n_domains=1, scale=2.0)) / "truth.json").read_text())
    assert big["domains"]["Phones"]["items_generated"] == 4 * small["domains"]["Phones"]["items_generated"]
    assert big["domains"]["Phones"]["reviews"] > 3 * small["domains"]["Phones"]["reviews"]


def test_more_domains_than_presets(tmp_path: Path) -> None:
    truth = json.loads((write_world(tmp_path / "w", WorldConfig(n_domains=7, scale=0.2)) / "truth.json").read_text())
    assert list(truth["domains"])[5:] == ["Phones_2", "Books_2"]


def test_rewritten_world_keeps_prepare_up_to_date(world: Path, tmp_path: Path) -> None:
    cfg = load_grid(grid_yaml(tmp_path, {"root": str(world)}))
    prepare(cfg, log=lambda m: None)
    write_world(world, WorldConfig(seed=3))  # `mmgrid demo` rewrites the world on every run
    msgs: list[str] = []
    prepare(cfg, log=msgs.append)
    assert "up to date" in msgs[-1]


def _trend_lambda(knobs, seed: int, d_i: int) -> float:
    """The least-squares lambda with which p1's category mix + lambda (p2's - p1's) fits the test mix."""
    import numpy as np

    from mmgrid.data.world_files import PERIOD_DAYS, _date_ms
    from mmgrid.data.world_simulation import simulate

    cfg = WorldConfig(seed=seed)
    edges = [_date_ms(d, "") for d in ("2022-07-01", "2022-10-01", "2023-01-01", "2023-04-01")]  # demo's p1, p2, test
    sim = simulate(knobs, 6, _date_ms(cfg.start, ""), _date_ms(cfg.end, ""), PERIOD_DAYS, 1.0,
                   np.random.default_rng([seed, d_i]))  # fmt: skip
    cat = sim.item_cat[sim.item]
    mix = [np.bincount(cat[(sim.ts >= a) & (sim.ts < b)], minlength=6) for a, b in zip(edges, edges[1:])]
    p1, p2, test = (m / m.sum() for m in mix)
    return float((p2 - p1) @ (test - p1) / ((p2 - p1) @ (p2 - p1)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_category_trend_orders_the_temporal_ground_truth(seed: int) -> None:
    # The turnover mechanism (MMGRid Table 4) without training: fast-turnover domains' directional trend keeps moving past
    # p2 (the category mix wants lambda > 1), long-lived domains' seasonal trend returns to p1's mix
    # (lambda near 0), Sports in between; so lambda* can fall as the interaction time gap rises.
    from mmgrid.data.world_files import PRESETS

    lam = {k.name: _trend_lambda(k, seed, i) for i, k in enumerate(PRESETS)}
    assert min(lam["Phones"], lam["Games"]) > 1.1, lam
    assert 0.15 < lam["Sports"] < 0.6, lam
    # Books' seasonal trend is weaker (weight 0.3, see world.PRESETS), so its pull back to p1's mix is too
    assert max(lam["Health"], lam["Books"]) < 0.3, lam


# --- world presets ---------------------------------------------------------------------------------

# sha256 of the quick world (2 domains, scale 0.5, seed 0) as written before presets existed: truth.json's
# bytes, and per domain the CSV of reviews (user, item, time, rating) followed by the CSV of (item, title).
_QUICK_DEFAULT = {
    "truth": "98dbfaaf5f6ec69f994303912757dbe2091730faf5d9732d26c03600df68075a",
    "Phones": "23f730ac7b5eead5202cddfbba3700dfa7e4c19e50d6c5b084fae9240cb5ef02",
    "Books": "de7db67ebd8ab09d7bf4770f209a9409739617f562aaaa4258587a0be9a47c06",
}


def _digest(root: Path) -> dict[str, str]:
    import hashlib

    out = {"truth": hashlib.sha256((root / "truth.json").read_bytes()).hexdigest()}
    for d in ("Phones", "Books"):
        r = read_reviews(root / "raw" / "review_categories" / f"{d}.jsonl.gz")
        m = read_meta(root / "raw" / "meta_categories" / f"meta_{d}.jsonl.gz")
        body = r.select("user_id", "parent_asin", "timestamp", "rating").write_csv() + \
            m.select("parent_asin", "title").write_csv()  # fmt: skip
        out[d] = hashlib.sha256(body.encode()).hexdigest()
    return out


def test_default_preset_is_the_world_from_before_presets(tmp_path: Path) -> None:
    plain = write_world(tmp_path / "plain", WorldConfig(n_domains=2, scale=0.5))
    named = write_world(tmp_path / "named", WorldConfig(n_domains=2, scale=0.5, preset="default"))
    assert _digest(plain) == _QUICK_DEFAULT
    assert _contents(named) == _contents(plain)


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_world(tmp_path_factory.mktemp("d") / "world", WorldConfig(seed=1, n_domains=2,
                                                                           preset="dense_short_text"))


def _noun_accuracy(titles: list[str], cats: list[int]) -> float:
    """Leave-one-out accuracy of guessing an item's category as the commonest category of the other items
    whose title shares its last word (the noun; a trailing "Pro" is dropped); 0 for an item whose noun no
    other item has, or a tie."""
    from collections import Counter

    def noun(title: str) -> str:
        return title.removesuffix(" Pro").split()[-1].lower()

    by_word: dict[str, Counter] = {}
    for t, c in zip(titles, cats):
        by_word.setdefault(noun(t), Counter())[c] += 1
    hits = 0
    for t, c in zip(titles, cats):
        counts = by_word[noun(t)].copy()
        counts[c] -= 1
        best = max(counts.values())
        hits += best > 0 and counts[c] == best and list(counts.values()).count(best) == 1
    return hits / len(titles)


def test_dense_short_text_truth_text_and_density(dense: Path, world: Path, world_stats, tmp_path: Path) -> None:
    truth = json.loads((dense / "truth.json").read_text())
    assert truth["preset"] == "dense_short_text" and truth["n_categories"] == 10
    assert "preset" not in json.loads((world / "truth.json").read_text())  # the default truth has no new keys
    for name in ("Phones", "Books"):
        m = read_meta(dense / "raw" / "meta_categories" / f"meta_{name}.jsonl.gz")
        cat_of = truth["domains"][name]["item_category"]
        assert sorted(cat_of) == sorted(m.get_column("parent_asin")) and set(cat_of.values()) == set(range(10))
        titles = m.get_column("title").to_list()
        assert max(len(t.split()) for t in titles) <= 3 and min(len(t.split()) for t in titles) >= 2
        assert m.get_column("description").list.len().max() == 0 and m.get_column("features").list.len().max() == 0
        # the text does not reveal the latent category: a title's noun guesses it no better than chance
        # (1/10), while the default world's nouns give it away (each noun belongs to one category)
        acc = _noun_accuracy(titles, [cat_of[a] for a in m.get_column("parent_asin")])
        assert acc < 0.25, (name, acc)
    default_m = read_meta(world / "raw" / "meta_categories" / "meta_Phones.jsonl.gz")
    default_truth = json.loads((world / "truth.json").read_text())
    words = default_truth["domains"]["Phones"]["categories"]
    from mmgrid.data import vocab

    noun_cat = {n: i for i, c in enumerate(words) for n in vocab.split_words(vocab.CATEGORY_WORDS["Phones"][c])[0]}
    default_titles = default_m.get_column("title").to_list()
    default_cats = [noun_cat[t.removesuffix(" Pro").split()[-1].lower()] for t in default_titles]
    assert _noun_accuracy(default_titles, default_cats) > 0.9
    # dense: many interactions per user after prepare (the default world has 6-14 a user)
    assert max(r["interactions"] / r["users"] for r in world_stats.iter_rows(named=True)) < 15
    stats = prepare(load_grid(grid_yaml(tmp_path, {"root": str(dense)})), log=lambda m: None).stats()
    for row in stats.iter_rows(named=True):
        per_user = row["interactions"] / row["users"]
        assert per_user > 25, row
        assert row["n_test"] >= 1000 and row["items"] >= 300, row


def test_unknown_preset_is_a_config_error(tmp_path: Path) -> None:
    from mmgrid.errors import ConfigError

    with pytest.raises(ConfigError, match="preset"):
        load_grid(grid_yaml(tmp_path, {"root": str(tmp_path)}, world={"seed": 0}), ["world.preset=sparse"])
    from mmgrid.data.world_files import domain_knobs

    with pytest.raises(ConfigError, match="dense_short_text"):
        domain_knobs(2, "sparse")
