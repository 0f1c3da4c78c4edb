"""The world's planted mechanisms: every knob at 1 is the world from before the knobs, and each
knob at 0 removes its mechanism, measured on the simulated interactions (no training)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from mmgrid.config import PlantConfig, WorldConfig
from mmgrid.config.grid import load_grid
from mmgrid.data.world_files import PERIOD_DAYS, PRESETS, _date_ms, planted_knobs, write_world
from mmgrid.data.world_simulation import ProcessScales, simulate
from mmgrid.errors import ConfigError

# sha256 of the decompressed files of the default world (5 domains, scale 1, seed 0) written by the code from
# before the planted knobs existed (main at 36e73e6), and of its truth.json.
_DEFAULT_WORLD = {
    "meta_Books.jsonl.gz": "afa09881a81786a25e9463c1167087b96f4c3b35338950af6705856111cb3319",
    "meta_Games.jsonl.gz": "8f2adc45ba76ba2dbecbfb1ee9b281291e114c32b7c098d14329a0d7e6f16337",
    "meta_Health.jsonl.gz": "146db1a4fe3458dd9faacd311ed6aa3cebfdcb65149c83311390c17c5be5ee09",
    "meta_Phones.jsonl.gz": "8b54c15ed97b8ad7419060c0fe86dc8c6bbde019131ec631dc02f887cfac63cb",
    "meta_Sports.jsonl.gz": "39bb148ab2b1f116656848d6cee887d0fb64e1c373d86b465ec7a00d0ccbec4f",
    "Books.jsonl.gz": "9ab5a41288a5ab59eed3aec4a5d3e996f87d8c25b961975eb1bc562c1f912424",
    "Games.jsonl.gz": "f04f70732b10f162c84e55e96e67ad4ee55d39b7d90fa17cdd4fc4cf4c3e54d5",
    "Health.jsonl.gz": "09811841bcd2f974f6c237347fe3d2027d8e3442125c4259d984c4678ef961ad",
    "Phones.jsonl.gz": "c763bd8b48d48b14dee360c2893ccf6180ff80890b1063e3946917714b2ecae0",
    "Sports.jsonl.gz": "e31e0d768f654ba09e595ed79ecc448ea9f2f79e5c085832c17ad576e27dba19",
    "truth.json": "f748a1f0134d4bcc0b3dff9d4af9ee1d98d241c0f465aaad2ffeff1b6563e52e",
}


def _digests(root: Path) -> dict[str, str]:
    out = {p.name: hashlib.sha256(gzip.decompress(p.read_bytes())).hexdigest() for p in sorted(root.rglob("*.gz"))}
    out["truth.json"] = hashlib.sha256((root / "truth.json").read_bytes()).hexdigest()
    return out


def test_default_knobs_write_the_world_from_before_them(tmp_path: Path) -> None:
    plain = write_world(tmp_path / "plain", WorldConfig())
    assert _digests(plain) == _DEFAULT_WORLD
    explicit = write_world(tmp_path / "explicit", WorldConfig(plant=PlantConfig(1.0, 1.0, 1.0, 1.0, 1.0), user_scale=1.0))
    assert _digests(explicit) == _DEFAULT_WORLD


def test_knob_ranges_are_checked(tmp_path: Path) -> None:
    (tmp_path / "g.yaml").write_text("name: g\nworld: {plant: {personalization: 1.5}}\n")
    with pytest.raises(ConfigError, match="personalization"):
        load_grid(tmp_path / "g.yaml")
    (tmp_path / "g.yaml").write_text("name: g\nworld: {plant: {turnover: -1}}\n")
    with pytest.raises(ConfigError, match="turnover"):
        load_grid(tmp_path / "g.yaml")


def test_zeroed_contrasts_make_every_domain_alike():
    span = 820.0
    knobs = planted_knobs(list(PRESETS), PlantConfig(turnover=0.0, trend_contrast=0.0), span)
    life = {k.lifespan_days for k in knobs}
    assert len({round(v, 9) for v in life}) == 1
    # the geometric mean of the presets' life-spans
    assert next(iter(life)) == pytest.approx(float(np.exp(np.mean(np.log([k.lifespan_days for k in PRESETS])))))
    for attr in ("initial_item_share", "trend_weight", "trend_amplitude", "trend_period_days"):
        assert len({round(getattr(k, attr), 9) for k in knobs}) == 1, attr
    # the mean frequency: 1 / P = mean of 1 / P_d
    assert knobs[0].trend_period_days == pytest.approx(1 / np.mean([1 / k.trend_period_days for k in PRESETS]))
    # a half-size contrast lies in between, order kept
    half = planted_knobs(list(PRESETS), PlantConfig(turnover=0.5), span)
    for k0, k1 in zip(PRESETS, half):
        g = next(iter(life))
        assert min(k0.lifespan_days, g) - 1e-9 <= k1.lifespan_days <= max(k0.lifespan_days, g) + 1e-9
    assert [k.trend_weight for k in planted_knobs(list(PRESETS), PlantConfig(trend=0.0), span)] == [0.0] * 5
    assert planted_knobs(list(PRESETS), PlantConfig(), span) == list(PRESETS)
    # every knob at 0: the domains are exchangeable (only their names differ)
    zero = planted_knobs(list(PRESETS), PlantConfig(turnover=0.0, trend_contrast=0.0, domain_contrast=0.0), span)
    assert len({tuple(round(v, 9) if isinstance(v, float) else v for k, v in z.to_dict().items() if k != "name")
                for z in zero}) == 1


def _sim(k, seed=0, d_i=0, **kw):
    start, end = _date_ms("2021-01-01", ""), _date_ms("2023-04-01", "")
    return simulate(k, 6, start, end, PERIOD_DAYS, 0.5, np.random.default_rng([seed, d_i]), ProcessScales(**kw))


def _avg_gap_days(sim) -> float:
    first = np.full(sim.item_cat.size, np.iinfo(np.int64).max)
    np.minimum.at(first, sim.item, sim.ts)
    return float(np.mean(sim.ts - first[sim.item]) / 86_400_000)


def test_turnover_zero_removes_the_gap_contrast_between_domains():
    """MMGRid Table 4's covariate: the average interaction time gap differs ~10x between Phones and Books in the
    preset world and by far less once their turnover is alike."""
    span = 820.0
    by = {k.name: (i, k) for i, k in enumerate(PRESETS)}
    gaps = {}
    for c in (1.0, 0.0):
        ks = {k.name: k for k in planted_knobs(list(PRESETS), PlantConfig(turnover=c), span)}
        gaps[c] = {n: np.mean([_avg_gap_days(_sim(ks[n], s, by[n][0])) for s in (0, 1)]) for n in ("Phones", "Books")}
    planted, null = gaps[1.0], gaps[0.0]
    assert planted["Books"] / planted["Phones"] > 4, planted
    assert 0.6 < null["Books"] / null["Phones"] < 1.6, null


def _user_category_spread(sim) -> float:
    cat = sim.item_cat[sim.item]
    users = np.unique(sim.user)
    shares = np.stack([np.bincount(cat[sim.user == u], minlength=6) / max((sim.user == u).sum(), 1)
                       for u in users[:300]])
    counts = np.array([(sim.user == u).sum() for u in users[:300]])
    keep = counts >= 5
    return float(shares[keep].std(axis=0).mean())


def test_personalization_zero_makes_users_alike():
    k = PRESETS[3]  # Health: most active users
    k = planted_knobs([k], PlantConfig(trend=0.0), 820.0)[0]
    alike, own = _user_category_spread(_sim(k, personalization=0.0)), _user_category_spread(_sim(k))
    assert own > 1.5 * alike, (own, alike)


def test_user_scale_draws_more_users_of_the_same_items(tmp_path: Path) -> None:
    a = write_world(tmp_path / "a", WorldConfig(n_domains=1, scale=0.5))
    b = write_world(tmp_path / "b", WorldConfig(n_domains=1, scale=0.5, user_scale=3.0))
    ta, tb = json.loads((a / "truth.json").read_text()), json.loads((b / "truth.json").read_text())
    da, db = ta["domains"]["Phones"], tb["domains"]["Phones"]
    assert da["items_generated"] == db["items_generated"]
    assert 2.3 < db["users_generated"] / da["users_generated"] < 3.7
    assert tb["user_scale"] == 3.0 and "plant" in tb and "plant" not in ta


def _reviews(root: Path, name: str) -> set[tuple[str, str, int]]:
    with gzip.open(root / "raw" / "review_categories" / f"{name}.jsonl.gz", "rt") as f:
        return {(r["user_id"], r["parent_asin"], r["timestamp"]) for r in map(json.loads, f)}


def _titles(root: Path, name: str) -> dict[str, str]:
    with gzip.open(root / "raw" / "meta_categories" / f"meta_{name}.jsonl.gz", "rt") as f:
        return {r["parent_asin"]: r["title"] for r in map(json.loads, f)}


@pytest.mark.parametrize("preset", ["default", "amazon_table1"])
def test_extend_users_adds_users_to_this_world(tmp_path: Path, preset: str) -> None:
    """world.extend_users: the world at user_scale 1, every review of it kept (same users, items, times), the same
    item titles, plus the extra users' reviews; a fresh draw with the same user_scale shares none of that."""
    kw = dict(n_domains=1, scale=0.4) if preset == "default" else dict(n_domains=1, scale=0.05, preset=preset)
    a = write_world(tmp_path / "a", WorldConfig(**kw))
    b = write_world(tmp_path / "b", WorldConfig(**kw, user_scale=3.0, extend_users=True))
    c = write_world(tmp_path / "c", WorldConfig(**kw, user_scale=3.0))
    name = json.loads((a / "truth.json").read_text())["domains"].popitem()[0]
    ra, rb, rc = _reviews(a, name), _reviews(b, name), _reviews(c, name)
    assert ra <= rb and len(rb) > 2 * len(ra)
    assert len(ra & rc) < 0.01 * len(ra)  # the fresh draw: other users
    assert _titles(a, name) == _titles(b, name)
    ua, ub = {u for u, _, _ in ra}, {u for u, _, _ in rb}
    assert 2.3 < len(ub) / len(ua) < 3.7
    tb = json.loads((b / "truth.json").read_text())
    assert tb["extend_users"] is True and tb["user_scale"] == 3.0


def test_extend_users_needs_user_scale_at_least_1() -> None:
    with pytest.raises(ConfigError, match="extend_users"):
        WorldConfig(user_scale=0.5, extend_users=True)


def test_text_signal_sets_how_often_a_title_names_its_category(tmp_path: Path) -> None:
    """The same seed draws the same items (the text's draws come after the simulation), so titles of the world with
    full signal name each item's latent category; with signal s a title names it with probability s + (1 - s) / 6."""
    from mmgrid.data import vocab
    from mmgrid.data.amazon import read_meta

    noun_cat = {w: c for c, text in vocab.CATEGORY_WORDS["Phones"].items() for w in vocab.split_words(text)[0]}

    def title_cats(root: Path) -> np.ndarray:
        meta = read_meta(root / "raw" / "meta_categories" / "meta_Phones.jsonl.gz")
        words = [t.lower().split() for t in meta["title"].to_list()]
        return np.array([noun_cat[w[-2] if w[-1] == "pro" else w[-1]] for w in words])

    own = title_cats(write_world(tmp_path / "a", WorldConfig(n_domains=1)))
    for signal, lo, hi in ((0.0, 0.08, 0.28), (0.5, 0.48, 0.68)):
        other = title_cats(write_world(tmp_path / f"s{signal}", WorldConfig(n_domains=1,
                                                                            plant=PlantConfig(text_signal=signal))))
        assert other.size == own.size
        assert lo < float(np.mean(other == own)) < hi, (signal, float(np.mean(other == own)))


def test_recency_zero_keeps_old_items_as_popular_as_new_ones():
    """Phones (25-day life-span): with decay, interactions in the test quarter go to recent items (those released in
    the quarter get ~20% with ~10% of the items); without it, to items by quality whatever their age, so the
    quarter's new items get about their share of the released items' time."""
    k = PRESETS[0]
    test_start = _date_ms("2023-01-01", "")

    def new_share(sim) -> float:
        t = sim.ts >= test_start
        return float(np.mean(sim.release_ms[sim.item[t]] >= test_start))

    decayed, flat = new_share(_sim(k)), new_share(_sim(k, recency=0.0))
    assert decayed > 0.15 and flat < 0.5 * decayed, (decayed, flat)


def test_rolling_six_preset_plants_persisting_reversing_accelerating_drift(tmp_path):
    """The rolling_six world: each domain's directional trend and its ground truth (truth.json's trend_path),
    against s(f) by hand: persist 2f - 1, reverse 1 - 4|f - 0.6|, accelerate 2f^2 - 1."""
    import json

    from mmgrid.config import WorldConfig
    from mmgrid.data.world_files import write_world
    from mmgrid.data.world_simulation import trend_position

    assert trend_position("persist", 0.25) == pytest.approx(-0.5)
    assert trend_position("reverse", 0.6) == pytest.approx(1.0)
    assert trend_position("reverse", 0.85) == pytest.approx(0.0)
    assert trend_position("accelerate", 0.5) == pytest.approx(-0.5)
    out = write_world(tmp_path / "w", WorldConfig(seed=0, scale=0.2, n_domains=3, preset="rolling_six"))
    truth = json.loads((out / "truth.json").read_text())
    assert truth["preset"] == "rolling_six"
    assert {d: truth["domains"][d]["trend_shape"] for d in truth["domains"]} == {
        "Phones": "persist", "Books": "reverse", "Games": "accelerate"}
    path = {d: np.array(list(p.values())) for d, p in truth["trend_path"].items()}
    v = {d: np.diff(p) for d, p in path.items()}
    assert (v["Phones"] > 0).all()  # persists: the same direction every month
    assert (v["Books"][:10] > 0).all() and (v["Books"][-6:] < 0).all()  # reverses
    half = len(v["Games"]) // 2  # accelerates: months differ in length, so compare the halves' mean speed
    assert (v["Games"] > 0).all() and v["Games"][half:].mean() > 2.5 * v["Games"][:half].mean()
    assert list(truth["trend_path"]["Phones"])[0] == "2021-01-01"
