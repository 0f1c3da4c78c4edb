"""Writing the synthetic world's files (``mmgrid world``): a drift world in the exact Amazon Reviews 2023
layout, with the preset knobs of its domains. The generative process itself is
:mod:`mmgrid.data.world_simulation`.

::

    OUT/raw/review_categories/<Domain>.jsonl.gz
    OUT/raw/meta_categories/meta_<Domain>.jsonl.gz
    OUT/truth.json          every generating knob of every domain

The default five domains span the item life-spans the paper's Table 4 discusses (MMGRid
section 4.2: cell phones turn over fast, books live long) and differ in per-period activity, so
the average interaction time gap and the share of active users differ between domains, and in
fast-turnover domains new items dominate the test window. Deterministic for a seed.

``world.preset`` picks the generating knobs: ``default`` (the world above; its files and truth are
unchanged by the existence of other presets) or ``dense_short_text``: many
interactions per user, more latent categories than the text vocabulary has groups, and item
text that is a short title only (a brand and one or two words drawn from the whole domain's
vocabulary, independent of the latent category), so that text says little and the collaborative
signal says a lot. Its truth.json also records ``preset``, ``n_categories`` and every item's
latent category. ``amazon_table1``: six domains fitted to MMGRid's own Amazon statistics,
users, items and interactions per phase in the ratios of its Table 1 and average interaction time
gaps of its Table 4 (:data:`AMAZON_TABLE1_TARGETS`), with fixed interactions per period and short,
weakly category-specific titles; its truth.json adds each domain's targets.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from mmgrid.data import vocab
from mmgrid.config import PAPER_PHASES, PlantConfig, WorldConfig
from mmgrid.data.errors import ConfigError
from mmgrid.fileio.atomic import swap_dir
from mmgrid.data.world_simulation import DAY_MS, DomainKnobs, ProcessScales, Simulated, simulate, trend_position

PERIOD_DAYS = 14.0  # activity and popularity are re-drawn every two weeks

# Ordered so that the first few domains already span the extremes (fast / long-lived).
#
# The category trend (trend weight, period, amplitude) is what makes the temporal merge's ground
# truth (MMGRid Table 4): the non-active users' lambda* falls as the domain's average
# interaction time gap rises. Fast-turnover domains (Phones, Games) follow a strong *directional*
# trend (period 1000 days, far longer than p1 -> test, weight 0.85 / 0.7, amplitude 3 / 2.5): the
# category mix's move from p1 to p2 keeps going into the test window, so extrapolating
# theta_p1 + lambda (theta_p2 - theta_p1) past 1 pays. Long-lived domains follow a *seasonal*
# trend: Health and Books with a 182-day cycle, so the test quarter's category mix is back to p1's
# and lambda* sits near 0 (Books' weight is 0.3, not 0.6: at 0.6 SemEmb's and at 0.45 SemID's Books
# Recall@10 fell below most-popular's on the demo world); Sports (240 days) is in between. For a sinusoidal trend of period P the
# category mix alone asks for lambda = 1 + cos(2 pi 91 d / P) (tests/data/test_world.py checks this
# proxy). Users are raised so that every domain has ~260-400 non-active test examples, and the
# trend's category phases are evenly spaced (world_simulation.simulate) so that its direction does not
# depend on the seed. The resulting lambda* per world seed 0-2: docs/studies.md, "Ground truth".
PRESETS: tuple[DomainKnobs, ...] = (
    # name, users, items, life-span d, initial item share, activity, burst, drift, trend weight, arrival,
    # conc, quality, then the trend's period (days) and amplitude
    DomainKnobs("Phones", 1050, 380, 25.0, 0.08, 0.065, 1.3, 0.5, 0.85, 0.5, 0.3, 0.7,
                trend_period_days=1000.0, trend_amplitude=3.0),
    DomainKnobs("Books", 1300, 260, 1200.0, 0.70, 0.04, 1.6, 0.2, 0.3, 0.6, 0.3, 0.8,
                trend_period_days=182.0, trend_amplitude=1.5),
    DomainKnobs("Games", 1050, 260, 120.0, 0.25, 0.06, 1.3, 0.4, 0.7, 0.5, 0.3, 0.7,
                trend_period_days=1000.0, trend_amplitude=2.5),
    DomainKnobs("Health", 600, 260, 600.0, 0.50, 0.12, 1.0, 0.15, 0.6, 0.6, 0.4, 0.6,
                trend_period_days=182.0, trend_amplitude=1.5),
    DomainKnobs("Sports", 900, 260, 300.0, 0.40, 0.075, 1.3, 0.3, 0.6, 0.5, 0.3, 0.7,
                trend_period_days=240.0, trend_amplitude=1.5),
)


# The dense, weak-text preset: like a real public dataset kept aside, interactions are
# dense (activity 0.3-0.45 per two weeks, bursts of 1 + Poisson(1.5-2): ~30-60 interactions per user
# after dedupe) and the item text is a short title. Ten latent categories per domain (the text
# vocabulary has six groups, and titles draw their words from all of them at random), focused users
# (Dirichlet 0.2), so that which items go together is learnt from co-occurrence, not from text.
# Life-spans keep the default world's order (Phones turn over fast, Books live long).
DENSE_SHORT_TEXT: tuple[DomainKnobs, ...] = (
    DomainKnobs("Phones", 420, 520, 60.0, 0.30, 0.35, 1.5, 0.3, 0.4, 0.5, 0.2, 0.8,
                trend_period_days=1000.0, trend_amplitude=2.0),
    DomainKnobs("Books", 420, 520, 900.0, 0.70, 0.30, 1.5, 0.2, 0.2, 0.6, 0.2, 0.8,
                trend_period_days=182.0, trend_amplitude=1.5),
    DomainKnobs("Games", 420, 520, 180.0, 0.40, 0.35, 1.5, 0.3, 0.3, 0.5, 0.2, 0.8,
                trend_period_days=1000.0, trend_amplitude=2.0),
    DomainKnobs("Health", 380, 520, 600.0, 0.50, 0.45, 2.0, 0.15, 0.3, 0.6, 0.2, 0.7,
                trend_period_days=182.0, trend_amplitude=1.5),
    DomainKnobs("Sports", 420, 520, 300.0, 0.40, 0.35, 1.5, 0.25, 0.3, 0.5, 0.2, 0.8,
                trend_period_days=240.0, trend_amplitude=1.5),
)
DENSE_N_CATEGORIES = 10  # latent categories per domain of the dense preset (the text does not reveal them)



@dataclass(frozen=True)
class PaperDomainStats:
    """One domain's statistics as the paper gives them (the targets of a fitted preset)."""

    name: str  # the domain's name in the synthetic world
    paper_name: str  # the paper's name of the domain
    users: int
    items: int
    interactions: tuple[int, int, int, int]  # per phase: pretrain, p1, p2, test (AMAZON_PHASES)
    avg_gap_days: float  # mean days from an item's first interaction to each training interaction

    def to_dict(self) -> dict:
        return {"paper_name": self.paper_name, "users": self.users, "items": self.items,
                "interactions": dict(zip(AMAZON_PHASES, self.interactions)), "avg_gap_days": self.avg_gap_days}


AMAZON_PHASES = ("pretrain", "p1", "p2", "test")  # MMGRid section 3.2's windows (config.PAPER_PHASES)

# MMGRid's own Amazon Reviews 2023 statistics, in its Table 4's domain order: users, items and interactions
# per phase from its Table 1 ("Statistics of the interaction data in Amazon dataset"), the average
# interaction time gap in days from its Table 4 ("Statistics and analysis of item recency bias", "Ave.
# Interaction Time Gap (d)": over the training interactions, days since the item's first interaction).
AMAZON_TABLE1_TARGETS: tuple[PaperDomainStats, ...] = (
    PaperDomainStats("Health", "Health and Household", 113_393, 57_727, (3_692_658, 252_223, 304_222, 290_457), 662.9),
    PaperDomainStats("Sports", "Sports and Outdoors", 34_571, 30_506, (1_468_421, 87_015, 113_283, 102_969), 563.9),
    PaperDomainStats("Movies", "Movies and TV", 5_289, 10_138, (617_122, 17_732, 14_804, 14_669), 520.8),
    PaperDomainStats("Games", "Video Games", 4_876, 4_068, (215_761, 9_365, 14_708, 12_228), 418.2),
    PaperDomainStats("Books", "Books", 38_418, 34_642, (2_578_864, 100_263, 90_801, 95_406), 336.6),
    PaperDomainStats("Phones", "Cell Phones and Accessories", 39_262, 19_868, (1_211_712, 63_152, 97_097, 100_437), 362.0),
)
# The preset at world.scale 1 is the paper's data scaled down to about the demo's size per domain, by one
# factor per quantity (so every ratio between domains and between phases is the paper's): users / 60,
# items / 40, interactions / 200. Interactions shrink more than users and items so that the pairs a user can
# review stay plentiful (the smallest domains, Games and Movies, are 15-25% dense after scaling).
AMAZON_SCALE = {"users": 1 / 60, "items": 1 / 40, "interactions": 1 / 200}
AMAZON_TITLE_SIGNAL = 0.35  # share of titles whose product word is the item's own category's (else any category's)

# Fitted generating knobs (scripts/fit_amazon_table1.py --seeds 0 1 2: the mean over world seeds 0-2 at scale 1; the knobs were written down
# before any paradigm ran on the world). Generated users and items are above the targets because the 5-core
# drops the lightest; generated interactions per phase are above them because the (user, item) dedupe and
# the 5-core drop some; the life-span and the share of items released before the start set the interaction
# time gap. The trend knobs follow the default world's domain of the same kind (Phones and Games directional,
# Books and Health seasonal, Sports and Movies in between); every user is present from the start with
# probability 0.3 (else arrives uniformly), users' activity varies widely (Beta with concentration 4).
AMAZON_TABLE1: tuple[DomainKnobs, ...] = (
    # name, users, items, life-span d, initial item share, activity, burst (unused), drift, trend weight,
    # arrival, conc, quality, then the activity's concentration and the trend's period (days) and amplitude
    DomainKnobs("Health", 2536, 2017, 935.0, 0.30, 0.3, 0.0, 0.15, 0.6, 0.6, 0.3, 0.8,
                activity_concentration=10.0, trend_period_days=182.0, trend_amplitude=1.5),
    DomainKnobs("Sports", 691, 1497, 729.4, 0.30, 0.3, 0.0, 0.3, 0.6, 0.6, 0.3, 0.8,
                activity_concentration=10.0, trend_period_days=240.0, trend_amplitude=1.5),
    DomainKnobs("Movies", 94, 355, 720.7, 0.30, 0.3, 0.0, 0.2, 0.4, 0.6, 0.3, 0.8,
                activity_concentration=10.0, trend_period_days=240.0, trend_amplitude=1.5),
    DomainKnobs("Games", 98, 164, 448.8, 0.30, 0.3, 0.0, 0.4, 0.7, 0.6, 0.3, 0.8,
                activity_concentration=10.0, trend_period_days=1000.0, trend_amplitude=2.5),
    DomainKnobs("Books", 716, 1251, 350.2, 0.30, 0.3, 0.0, 0.2, 0.3, 0.6, 0.3, 0.8,
                activity_concentration=10.0, trend_period_days=182.0, trend_amplitude=1.5),
    DomainKnobs("Phones", 915, 910, 432.7, 0.30, 0.3, 0.0, 0.5, 0.85, 0.6, 0.3, 0.8,
                activity_concentration=10.0, trend_period_days=1000.0, trend_amplitude=3.0),
)
# generated interactions per phase (pretrain, p1, p2, test) at scale 1 (the targets are Table 1 / 200)
AMAZON_TABLE1_COUNTS: dict[str, tuple[float, float, float, float]] = {
    "Health": (20435.47, 1526.3, 1860.99, 1854.79),
    "Sports": (8732.63, 544.46, 717.94, 700.88),
    "Movies": (3287.74, 100.88, 90.09, 101.73),
    "Games": (1210.77, 56.16, 89.74, 76.77),
    "Books": (13687.84, 550.84, 505.24, 577.3),
    "Phones": (7106.61, 391.33, 610.42, 670.77),
}

# The rolling-deployment preset: the default world's domains, each with a directional category trend whose drift
# over the quarters persists (Phones, Sports), reverses (Books, Health: it turns back at 60% of the span, about
# May 2022 on the default span) or accelerates (Games), for six or more incremental quarters (grids/rolling.yaml).
# Ground truth: truth.json's "trend_path" gives each domain's trend position s at every month start (the
# direction of the category mix; world_simulation.trend_position), so the expected sign of a period's drift
# velocity, and whether it keeps its sign into the next window, is known.
ROLLING_SHAPES = {"Phones": "persist", "Books": "reverse", "Games": "accelerate", "Health": "reverse",
                  "Sports": "persist"}
ROLLING_SIX: tuple[DomainKnobs, ...] = tuple(
    replace(k, trend_shape=ROLLING_SHAPES[k.name], trend_weight=max(k.trend_weight, 0.6), trend_amplitude=2.5)
    for k in PRESETS)

WORLD_PRESETS: dict[str, tuple[DomainKnobs, ...]] = {"default": PRESETS, "dense_short_text": DENSE_SHORT_TEXT,
                                                     "amazon_table1": AMAZON_TABLE1, "rolling_six": ROLLING_SIX}


def amazon_targets(scale: float = 1.0) -> dict[str, dict]:
    """The amazon_table1 world's target statistics per domain at ``world.scale`` (the paper's numbers times
    :data:`AMAZON_SCALE` and ``scale``; the gaps are days and do not scale)."""
    out = {}
    for t in AMAZON_TABLE1_TARGETS:
        n = {p: v * AMAZON_SCALE["interactions"] * scale for p, v in zip(AMAZON_PHASES, t.interactions)}
        out[t.name] = {"users": t.users * AMAZON_SCALE["users"] * scale, "items": t.items * AMAZON_SCALE["items"] * scale,
                       "interactions": n, "avg_gap_days": t.avg_gap_days}
    return out


def period_counts(phase_counts: dict[str, float], start_ms: int, end_ms: int, period_days: float) -> np.ndarray:
    """Interactions per period of the simulation for a number per phase (MMGRid's windows, the pretrain window
    opening at ``start_ms``): each phase's interactions spread evenly over its days, periods straddling a
    boundary taking their share of each side, rounded so the running total stays within one of the exact one."""
    period = int(period_days * DAY_MS)
    starts = np.arange(start_ms, end_ms, period, dtype=np.int64)
    expected = np.zeros(starts.size)
    for name, n in phase_counts.items():
        a, b = PAPER_PHASES[name]
        lo = start_ms if a is None else max(_date_ms(a, "phase"), start_ms)
        hi = min(_date_ms(b, "phase") if b is not None else end_ms, end_ms)
        if hi <= lo:
            continue
        overlap = np.clip(np.minimum(starts + period, hi) - np.maximum(starts, lo), 0, None)
        expected += n * overlap / (hi - lo)
    return np.diff(np.round(np.cumsum(np.concatenate([[0.0], expected])))).astype(np.int64)


def domain_knobs(n_domains: int, preset: str = "default") -> list[DomainKnobs]:
    """The knobs of ``n_domains`` domains: the preset's, then jittered copies named ``<Preset>_<k>``."""
    if n_domains < 1:
        raise ConfigError(f"world.n_domains: {n_domains} is not a positive number of domains.")
    if preset not in WORLD_PRESETS:
        raise ConfigError(f"world.preset: {preset!r} is not a world preset; use one of {sorted(WORLD_PRESETS)}.")
    presets = WORLD_PRESETS[preset]
    out = []
    for i in range(n_domains):
        base = presets[i % len(presets)]
        rep = i // len(presets)
        if rep == 0:
            out.append(base)
            continue
        f = 1.0 + 0.25 * ((-1) ** rep) * (rep + 1) / (rep + 2)  # deterministic spread of copies
        d = base.to_dict() | {"name": f"{base.name}_{rep + 1}", "lifespan_days": base.lifespan_days * f,
                              "activity": min(base.activity * f, 0.6)}  # fmt: skip
        out.append(DomainKnobs(**d))
    return out


def planted_knobs(knobs: list[DomainKnobs], plant: PlantConfig, span_days: float) -> list[DomainKnobs]:
    """The domains' knobs with the planted mechanisms scaled (:class:`~mmgrid.config.PlantConfig`).

    * ``turnover`` c: life-span L_d -> G (L_d / G)^c (G the geometric mean over the domains) and the share of
      items released before the start s_d -> m + c (s_d - m) (m the mean), so at 0 every domain turns its items
      over alike (MMGRid Table 4's mechanism removed);
    * ``trend_contrast`` c: the trend's weight, amplitude and frequency 1 / period (a period of 0, one cycle over
      the span, counts as 1 / span) move towards the domains' means, x -> m + c (x - m): at 0 every domain
      follows the same trend;
    * ``trend`` s: every trend weight times s (capped at 0.95): at 0 no temporal preference trend;
    * ``domain_contrast`` c: every other numeric knob (:data:`OTHER_KNOBS`) moves towards the domains' mean the
      same way (counts rounded): at 0, with the two contrasts above also 0, the domains are exchangeable.

    Knobs at 1 return ``knobs`` unchanged (the same objects, so the default world is byte for byte the same).
    """
    out = list(knobs)
    if not out:
        return out
    if plant.turnover != 1.0:
        c = float(plant.turnover)
        logs = np.log([k.lifespan_days for k in out])
        shares = np.array([k.initial_item_share for k in out])
        g, m = float(logs.mean()), float(shares.mean())
        out = [replace(k, lifespan_days=float(np.exp(g + c * (lg - g))),
                       initial_item_share=float(np.clip(m + c * (s - m), 0.01, 0.99)))
               for k, lg, s in zip(out, logs, shares)]
    if plant.trend_contrast != 1.0:
        c = float(plant.trend_contrast)
        w = np.array([k.trend_weight for k in out])
        a = np.array([k.trend_amplitude for k in out])
        f = np.array([1.0 / k.trend_period_days if k.trend_period_days > 0 else 1.0 / span_days for k in out])
        mw, ma, mf = w.mean(), a.mean(), f.mean()
        out = [replace(k, trend_weight=float(np.clip(mw + c * (wi - mw), 0.0, 0.95)),
                       trend_amplitude=float(max(ma + c * (ai - ma), 0.0)),
                       trend_period_days=float(1.0 / max(mf + c * (fi - mf), 1.0 / (100 * span_days))))
               for k, wi, ai, fi in zip(out, w, a, f)]
    if plant.trend != 1.0:
        out = [replace(k, trend_weight=float(min(k.trend_weight * plant.trend, 0.95))) for k in out]
    if plant.domain_contrast != 1.0:
        c = float(plant.domain_contrast)
        means = {a: float(np.mean([getattr(k, a) for k in out])) for a in OTHER_KNOBS}

        def moved(k: DomainKnobs, a: str) -> float | int:
            v = means[a] + c * (getattr(k, a) - means[a])
            return max(int(round(v)), 1) if a in ("n_users", "n_items") else float(max(v, 1e-3))

        out = [replace(k, **{a: moved(k, a) for a in OTHER_KNOBS}) for k in out]  # type: ignore[arg-type]  # each knob its own int or float
        out = [replace(k, activity=min(k.activity, 0.9), user_arrival_share=min(k.user_arrival_share, 1.0))
               for k in out]
    return out


# the knobs ``world.plant.domain_contrast`` moves (the others are turnover's and the trend's)
OTHER_KNOBS = ("n_users", "n_items", "activity", "burst", "drift", "user_arrival_share", "pref_concentration",
               "quality_sigma", "activity_concentration")


def _date_ms(text: str, where: str) -> int:
    try:
        return int(datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp() * 1000)
    except ValueError as exc:
        raise ConfigError(f"{where}: {text!r} is not a date of the form YYYY-MM-DD.") from exc


def write_world(out_dir: str | Path, cfg: WorldConfig) -> Path:
    """Generate and write the synthetic world.

    Args:
        out_dir: destination folder (its ``raw/`` and ``truth.json`` are replaced).
        cfg: seed, scale, number of domains, time span and preset.

    Returns:
        ``out_dir`` as a Path.
    """
    out = Path(out_dir)
    assert cfg.start is not None  # WorldConfig.__post_init__ fills it from the preset
    start, end = _date_ms(cfg.start, "world.start"), _date_ms(cfg.end, "world.end")
    if start >= end:
        raise ConfigError(f"world: start {cfg.start} is not before end {cfg.end}.")
    if cfg.scale <= 0:
        raise ConfigError(f"world.scale: {cfg.scale} must be positive.")
    knobs_all = domain_knobs(cfg.n_domains, cfg.preset)  # an unknown preset fails before anything is written
    plant = cfg.plant if cfg.plant is not None else PlantConfig()
    knobs_all = planted_knobs(knobs_all, plant, (end - start) / 86_400_000)
    dense = cfg.preset == "dense_short_text"
    amazon = cfg.preset == "amazon_table1"
    tmp = out / ".raw.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "review_categories").mkdir(parents=True)
    (tmp / "meta_categories").mkdir(parents=True)
    truth: dict = {"seed": cfg.seed, "scale": cfg.scale, "start": cfg.start, "end": cfg.end,
                   "period_days": PERIOD_DAYS, "domains": {}}  # fmt: skip
    if dense:  # only presets other than the default add keys, so the default truth.json stays byte for byte
        truth |= {"preset": cfg.preset, "n_categories": DENSE_N_CATEGORIES,
                  "item_text": "title only: a brand and 1-2 words drawn from the whole domain vocabulary, "
                               "independent of the latent category"}  # fmt: skip
    if amazon:
        truth |= {"preset": cfg.preset, "n_categories": len(vocab.CATEGORY_WORDS["Health"]),
                  "item_text": f"title only: a brand, sometimes a modifier, and a product word of the item's own "
                               f"category for a share {AMAZON_TITLE_SIGNAL} x world.plant.text_signal of the items "
                               f"(else of a random category)",
                  "paper_scale": AMAZON_SCALE}  # fmt: skip
    if not plant.is_default() or cfg.user_scale != 1.0:  # likewise: the default truth.json stays byte for byte
        truth |= {"plant": {"turnover": plant.turnover, "trend": plant.trend, "trend_contrast": plant.trend_contrast,
                            "personalization": plant.personalization, "recency": plant.recency,
                            "text_signal": plant.text_signal},
                  "user_scale": cfg.user_scale}  # fmt: skip
        if cfg.extend_users:
            truth["extend_users"] = True
    for d_i, knobs in enumerate(knobs_all):
        rng = np.random.default_rng([cfg.seed, d_i])
        words = vocab.CATEGORY_WORDS[knobs.name.split("_")[0]]
        n_cats = DENSE_N_CATEGORIES if dense else len(words)
        counts = None
        if amazon:  # Table 1's interactions per phase, scaled with the users
            per_phase = AMAZON_TABLE1_COUNTS[knobs.name.split("_")[0]]
            users = 1.0 if cfg.extend_users else cfg.user_scale  # extended: the world's own counts, then the extra
            counts = tuple(period_counts({p: n * cfg.scale * users for p, n in zip(AMAZON_PHASES, per_phase)},
                                         start, end, PERIOD_DAYS).tolist())
        sim = simulate(knobs, n_cats, start, end, PERIOD_DAYS, cfg.scale, rng,
                       ProcessScales(cfg.user_scale, plant.personalization, plant.recency, counts, cfg.extend_users))
        text_sim = sim
        if amazon:  # weakly category-specific titles, like real ones
            own = rng.random(sim.item_cat.size) < AMAZON_TITLE_SIGNAL * plant.text_signal
            text_sim = replace(sim, item_cat=np.where(own, sim.item_cat, rng.integers(0, len(words), sim.item_cat.size)))
        elif plant.text_signal != 1.0:  # some items speak another category's words (no draw at 1: same stream)
            own = rng.random(sim.item_cat.size) < plant.text_signal
            text_cat = np.where(own, sim.item_cat, rng.integers(0, len(words), sim.item_cat.size))
            text_sim = replace(sim, item_cat=text_cat)
        items = (_short_items(sim, words, rng) if dense else _title_items(text_sim, words, rng) if amazon
                 else _items(text_sim, words, rng))
        # the dense preset's reviews talk about words of a random group, so no text reveals the category
        word_cat = rng.integers(0, len(words), sim.user.size) if dense else None
        _write_reviews(tmp / "review_categories" / f"{knobs.name}.jsonl.gz", text_sim, items, words, rng, word_cat)
        _write_meta(tmp / "meta_categories" / f"meta_{knobs.name}.jsonl.gz", items, sim, knobs.name)
        truth["domains"][knobs.name] = knobs.to_dict() | {
            "categories": list(words),
            "users_generated": int(np.unique(sim.user).size),
            "items_generated": int(sim.item_cat.size),
            "reviews": int(sim.user.size),
        }
        if amazon:
            truth["domains"][knobs.name] |= {
                "interactions_generated_per_phase": dict(zip(AMAZON_PHASES, map(float, per_phase))),
                "targets": next(t.to_dict() for t in AMAZON_TABLE1_TARGETS if t.name == knobs.name.split("_")[0])}
        if dense or amazon:
            truth["domains"][knobs.name]["item_category"] = dict(
                zip(items.get_column("parent_asin").to_list(), sim.item_cat.astype(int).tolist()))
    if cfg.preset == "rolling_six":
        truth |= {"preset": cfg.preset, "trend_path": trend_path(knobs_all, start, end)}
    out.mkdir(parents=True, exist_ok=True)
    swap_dir(tmp, out / "raw")
    (out / "truth.json").write_text(json.dumps(truth, indent=2))
    return out


def trend_path(knobs: list[DomainKnobs], start_ms: int, end_ms: int) -> dict[str, dict[str, float]]:
    """Each directional domain's trend position s (:func:`~mmgrid.data.world_simulation.trend_position`) at every
    month start of the span: the planted drift's ground truth (its velocity's sign says which way the mix moves)."""
    months = []
    d = datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc).replace(day=1, hour=0, minute=0, second=0)
    while d.timestamp() * 1000 <= end_ms:
        months.append(d)
        d = d.replace(year=d.year + (d.month == 12), month=d.month % 12 + 1)
    out = {}
    for k in knobs:
        if k.trend_shape == "sine":
            continue
        fr = [min(max((m.timestamp() * 1000 - start_ms) / (end_ms - start_ms), 0.0), 1.0) for m in months]
        out[k.name] = {m.strftime("%Y-%m-%d"): round(float(trend_position(k.trend_shape, f)), 6)
                       for m, f in zip(months, fr)}
    return out


def _ids(prefix: str, n: int, width: int, rng: np.random.Generator) -> list[str]:
    alphabet = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    while True:
        chars = alphabet[rng.integers(0, alphabet.size, (n, width))]
        ids = [prefix + "".join(r) for r in chars]
        if len(set(ids)) == n:
            return ids


def _pseudo_word(rng: np.random.Generator) -> str:
    syl = vocab.SYLLABLES
    return "".join(syl[i] for i in rng.integers(0, len(syl), rng.integers(2, 4))).capitalize()


def _items(sim: Simulated, words: dict[str, str], rng: np.random.Generator) -> pl.DataFrame:
    """Item ids, titles (3-6 words from the category vocabulary), one-sentence descriptions."""
    n = sim.item_cat.size
    per = len(vocab.split_words(next(iter(words.values())))[0])
    nouns = pl.Series([w for c in words for w in vocab.split_words(words[c])[0]])
    mods = pl.Series([w for c in words for w in vocab.split_words(words[c])[1]])
    base = sim.item_cat.astype(np.int64) * per
    first = rng.integers(0, per, (2, n))
    second = (first + rng.integers(1, per, (2, n))) % per  # a different word of the same category
    brands = pl.Series([_pseudo_word(rng) for _ in range(12)])
    df = pl.DataFrame({
        "parent_asin": _ids("B0", n, 8, rng),
        "store": brands.gather(rng.integers(0, brands.len(), n)),
        "n1": nouns.gather(base + first[0]), "n2": nouns.gather(base + second[0]),
        "m1": mods.gather(base + first[1]), "m2": mods.gather(base + second[1]),
        "k": rng.integers(3, 7, n),
    })  # fmt: skip
    cap = {c: pl.col(c).str.slice(0, 1).str.to_uppercase() + pl.col(c).str.slice(1) for c in ("n1", "n2", "m1", "m2")}
    k = pl.col("k")
    title = pl.concat_str(
        [pl.col("store"), cap["m1"], pl.when(k >= 4).then(cap["m2"]), cap["n1"], pl.when(k >= 5).then(cap["n2"]),
         pl.when(k >= 6).then(pl.lit("Pro"))], separator=" ", ignore_nulls=True,
    )  # fmt: skip
    article = pl.when(pl.col("m1").str.contains(r"^[aeiou]")).then(pl.lit("An ")).otherwise(pl.lit("A "))
    desc = pl.concat_str([article, "m1", pl.lit(" "), "n1", pl.lit(" from "), "store", pl.lit(", "), "m2",
                          pl.lit(" and made for every day.")])  # fmt: skip
    return df.select(
        "parent_asin", title.alias("title"), pl.concat_list(desc).alias("description"),
        pl.concat_list(pl.concat_str([cap["m2"], pl.lit(" "), "n2"]), pl.concat_str([cap["m1"], pl.lit(" design")]))
        .alias("features"),
        "store",
    )  # fmt: skip


def _brand_titled(df: pl.DataFrame) -> pl.DataFrame:
    """Short-title items from ``parent_asin``, ``store`` (brand), ``m`` (modifier), ``n`` (product word) and
    ``two`` (whether the modifier is shown): title "Brand [Modifier] Noun"; no description, no features."""
    cap = {c: pl.col(c).str.slice(0, 1).str.to_uppercase() + pl.col(c).str.slice(1) for c in ("m", "n")}
    title = pl.concat_str([pl.col("store"), pl.when(pl.col("two")).then(cap["m"]), cap["n"]], separator=" ",
                          ignore_nulls=True)  # fmt: skip
    empty = pl.lit([], pl.List(pl.String))
    return df.select("parent_asin", title.alias("title"), empty.alias("description"), empty.alias("features"), "store")


def _short_items(sim: Simulated, words: dict[str, str], rng: np.random.Generator) -> pl.DataFrame:
    """Items of the dense preset: a title of a brand and one or two words (a modifier, sometimes a noun)
    drawn uniformly from the whole domain's vocabulary, independent of the latent category; no
    description, no features."""
    n = sim.item_cat.size
    nouns = pl.Series([w for c in words for w in vocab.split_words(words[c])[0]])
    mods = pl.Series([w for c in words for w in vocab.split_words(words[c])[1]])
    brands = pl.Series([_pseudo_word(rng) for _ in range(12)])
    df = pl.DataFrame({
        "parent_asin": _ids("B0", n, 8, rng),
        "store": brands.gather(rng.integers(0, brands.len(), n)),
        "m": mods.gather(rng.integers(0, mods.len(), n)),
        "n": nouns.gather(rng.integers(0, nouns.len(), n)),
        "two": rng.random(n) < 0.5,
    })  # fmt: skip
    return _brand_titled(df)


def _title_items(sim: Simulated, words: dict[str, str], rng: np.random.Generator) -> pl.DataFrame:
    """Items of the amazon_table1 preset: a title as short as a real one, a brand, a modifier for half of the
    items and a product word, both of the category in ``sim.item_cat`` (the preset mixes the latent category
    with random ones, so titles are weakly category-specific); no description, no features."""
    n = sim.item_cat.size
    per = len(vocab.split_words(next(iter(words.values())))[0])
    nouns = pl.Series([w for c in words for w in vocab.split_words(words[c])[0]])
    mods = pl.Series([w for c in words for w in vocab.split_words(words[c])[1]])
    base = sim.item_cat.astype(np.int64) * per
    brands = pl.Series([_pseudo_word(rng) for _ in range(40)])
    df = pl.DataFrame({
        "parent_asin": _ids("B0", n, 8, rng),
        "store": brands.gather(rng.integers(0, brands.len(), n)),
        "m": mods.gather(base + rng.integers(0, per, n)),
        "n": nouns.gather(base + rng.integers(0, per, n)),
        "two": rng.random(n) < 0.5,
    })  # fmt: skip
    return _brand_titled(df)


def _write_reviews(
    path: Path, sim: Simulated, items: pl.DataFrame, words: dict[str, str], rng: np.random.Generator,
    word_cat: np.ndarray | None = None,
) -> None:
    """Reviews in the Amazon 2023 field layout; texts use the words of the item's category (or of
    ``word_cat``, one word group per review)."""
    n = sim.user.size
    n_users = int(sim.user.max()) + 1 if n else 0
    user_ids = pl.Series(_ids("A", n_users, 27, rng))
    rating = rng.choice([5.0, 4.0, 3.0, 2.0, 1.0], n, p=[0.55, 0.22, 0.1, 0.06, 0.07])
    cats = list(words)
    nouns = pl.Series([w for c in cats for w in vocab.split_words(words[c])[0]])
    mods = pl.Series([w for c in cats for w in vocab.split_words(words[c])[1]])
    per = len(vocab.split_words(words[cats[0]])[0])
    base = (sim.item_cat[sim.item] if word_cat is None else word_cat) * per
    noun = nouns.gather(base + rng.integers(0, per, n))
    mod = mods.gather(base + rng.integers(0, per, n))
    senti = np.where(rating >= 4, 0, np.where(rating == 3, 1, 2))
    heads = [vocab.POSITIVE, vocab.NEUTRAL, vocab.NEGATIVE]
    head_flat = pl.Series([h for hs in heads for h in hs])
    offs = np.cumsum([0, len(heads[0]), len(heads[1])])
    sizes = np.array([len(h) for h in heads])
    head = head_flat.gather(offs[senti] + (rng.random(n) * sizes[senti]).astype(np.int64))
    quality = pl.Series(vocab.QUALITY).gather(rng.integers(0, len(vocab.QUALITY), n))
    closing = pl.Series(vocab.CLOSINGS).gather(rng.integers(0, len(vocab.CLOSINGS), n))
    asin = items.get_column("parent_asin").gather(sim.item)
    text = pl.concat_str([pl.lit("The "), "_mod", pl.lit(" "), "_noun", pl.lit(" is "), "_q", pl.lit(". "), "_c"])
    df = pl.DataFrame({
        "rating": rating,
        "title": head,
        "_mod": mod, "_noun": noun, "_q": quality, "_c": closing,
        "asin": asin,
        "parent_asin": asin,
        "user_id": user_ids.gather(sim.user),
        "timestamp": sim.ts,
        "helpful_vote": rng.poisson(0.4, n),
        "verified_purchase": rng.random(n) < 0.9,
    }).with_columns(text.alias("text"), pl.lit([], pl.List(pl.String)).alias("images"))  # fmt: skip
    df = df.sort("timestamp", "user_id")
    df = df.select("rating", "title", "text", "images", "asin", "parent_asin", "user_id", "timestamp",
                   "helpful_vote", "verified_purchase")  # fmt: skip
    _gzip_ndjson(df, path)


def _write_meta(path: Path, items: pl.DataFrame, sim: Simulated, domain: str) -> None:
    n = items.height
    rng = np.random.default_rng(n)
    counts = np.bincount(sim.item, minlength=n)
    price = np.round(rng.lognormal(3.0, 0.6, n), 2)
    main = vocab.MAIN_CATEGORY.get(domain.split("_")[0], domain)
    released = [datetime.fromtimestamp(r / 1000, tz=timezone.utc).strftime("%B %d, %Y") for r in sim.release_ms]
    df = items.with_columns(
        pl.lit(main).alias("main_category"),
        pl.Series("average_rating", np.round(rng.uniform(3.3, 4.9, n), 1)),
        pl.Series("rating_number", counts),
        pl.Series("price", price).set(pl.Series(rng.random(n) < 0.1), None),
        pl.lit([], pl.List(pl.String)).alias("images"),
        pl.lit([], pl.List(pl.String)).alias("videos"),
        pl.lit([], pl.List(pl.String)).alias("categories"),
        pl.struct(pl.col("store").alias("Brand"), pl.Series("Date First Available", released)).alias("details"),
        pl.lit(None, pl.String).alias("bought_together"),
    ).select("main_category", "title", "average_rating", "rating_number", "features", "description", "price",
             "images", "videos", "store", "categories", "details", "parent_asin", "bought_together")  # fmt: skip
    _gzip_ndjson(df, path)


def _gzip_ndjson(df: pl.DataFrame, path: Path) -> None:
    plain = path.with_suffix("")
    df.write_ndjson(plain)
    # Level 1: the world is written once per benchmark and read many times; speed matters more.
    # mtime=0: the same seed gives the same bytes, so `mmgrid prepare` sees unchanged inputs.
    with open(plain, "rb") as src, open(path, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as dst:
        shutil.copyfileobj(src, dst, length=1 << 22)
    plain.unlink()
