"""The generative process of the synthetic world (numpy, vectorised per period).

Items have a latent category, a release time, a popularity life-span and a quality; the weight of
item i at time t is ``quality_i * exp(-(t - release_i) / lifespan_i)`` once released (zero before).
Users arrive over time, have a per-period probability of being active, and a latent category
preference that drifts from a start vector to an end vector and is mixed with a domain-wide
category trend, ``exp(amplitude * sin(2 pi t / period + phase_c))`` with evenly spaced category
phases: a period much longer than the months from p1 to the test window makes it directional (what rose
from p1 to p2 keeps rising), a half-year period makes it seasonal (the test quarter looks like p1). An
active user's interactions pick a category from the current preference and then an item of that
category by its current weight: fast-turnover domains therefore keep moving to new items,
long-lived ones keep consuming old ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

DAY_MS = 86_400_000
REDRAWS = 20  # with fixed counts, how often a repeated (user, item) pair is drawn again


@dataclass(frozen=True)
class DomainKnobs:
    """Generating knobs of one synthetic domain (all recorded in truth.json)."""

    name: str
    n_users: int  # before k-core, at scale 1
    n_items: int  # before k-core, at scale 1
    lifespan_days: float  # mean popularity life-span (phones: weeks, books: years)
    initial_item_share: float  # share of items released before the start; the rest arrive uniformly
    activity: float  # mean per-period probability that a present user is active
    burst: float  # extra interactions of an active user in a period ~ Poisson(burst)
    drift: float  # how far a user's preference moves from its start to its end vector over the span
    trend_weight: float  # weight of the domain-wide category trend in every preference
    user_arrival_share: float  # share of users present from the start; the rest arrive uniformly
    pref_concentration: float  # Dirichlet concentration of user preferences (small = focused users)
    quality_sigma: float  # log-normal spread of item quality (popularity inequality)
    activity_concentration: float = 40.0  # Beta concentration of per-user activity (large = alike users)
    trend_period_days: float = 0.0  # period of the category trend; 0 = one cycle over the whole span
    trend_amplitude: float = 1.5  # log-scale amplitude of the category trend
    # sine: the periodic trend above; persist / reverse / accelerate: a trend along one fixed direction of the
    # category mix whose position s(f) over the span's fraction f moves steadily (2f - 1), turns back at
    # f = REVERSE_AT (1 - 4|f - REVERSE_AT|) or speeds up (2f^2 - 1): :func:`trend_position`
    trend_shape: str = "sine"

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["trend_shape"] == "sine":  # the sine presets' truth.json stays as it was before the knob existed
            del d["trend_shape"]
        return d


TREND_SHAPES = ("sine", "persist", "reverse", "accelerate")
REVERSE_AT = 0.6  # where a reversing trend turns back (fraction of the world's span)


def trend_position(shape: str, frac: float | np.ndarray) -> np.ndarray:
    """s(f): where a directional trend stands at fraction ``f`` of the world's span (-1 .. 1); its category
    logits are ``amplitude * s(f) * cos(phase_c)``. ``persist``: 2f - 1 (the mix keeps moving the same way at
    the same speed); ``reverse``: 1 - 4|f - REVERSE_AT| (it moves, then turns back); ``accelerate``: 2f^2 - 1
    (it moves faster every period)."""
    f = np.asarray(frac, dtype=float)
    if shape == "persist":
        return 2 * f - 1
    if shape == "reverse":
        return 1 - 4 * np.abs(f - REVERSE_AT)
    if shape == "accelerate":
        return 2 * f**2 - 1
    raise ValueError(f"trend shape {shape!r} is not one of {TREND_SHAPES[1:]}")


@dataclass
class Simulated:
    """Raw generated data of one domain."""

    user: np.ndarray  # int, per interaction
    item: np.ndarray  # int, per interaction
    ts: np.ndarray  # int64 ms, per interaction
    item_cat: np.ndarray  # latent category per item
    release_ms: np.ndarray  # release time per item


@dataclass(frozen=True)
class ProcessScales:
    """World-wide scales of the generative process (``world.user_scale`` and ``world.plant``; 1 = the default world),
    and a domain's fixed number of interactions per period (None: drawn, as in the default world)."""

    user_scale: float = 1.0
    personalization: float = 1.0
    recency: float = 1.0
    counts: tuple[int, ...] | None = None
    # with user_scale > 1: the user_scale-1 world exactly, plus the extra users (a population of *this* world:
    # same items, trends and first users; :func:`_extended`); False: a fresh draw with more users
    extend: bool = False


def simulate(k: DomainKnobs, n_cats: int, start_ms: int, end_ms: int, period_days: float, scale: float,
             rng: np.random.Generator, process: ProcessScales = ProcessScales()) -> Simulated:  # fmt: skip
    """Run the generative process of one domain between ``start_ms`` and ``end_ms``.

    ``process`` (:class:`ProcessScales`): ``user_scale`` multiplies the users only (more users from the same process); ``personalization`` mixes
    each user's start and end preference with the uniform one, ``w p_u + (1 - w) / n_cats`` (0: every user
    alike, so only the domain-wide trend and the items' popularity decide); ``recency`` scales the
    popularity decay, ``exp(-recency age / life-span)`` (0: an item's weight is its quality forever, so the
    all-time counts most-popular uses rank items as every user chooses them). All three at 1 draw exactly
    what they drew before they existed.

    ``process.counts`` (one number a period, or None): the number of interactions of each period is fixed instead of
    drawn. Each of a period's ``counts[p]`` interactions goes to a present user drawn with probability
    proportional to the user's activity (so ``burst`` is unused); everything else is the process above. The
    amazon_table1 preset uses it to follow MMGRid Table 1's interactions per phase without sampling noise. With
    ``counts``, a draw of a (user, item) pair the user already has is drawn again (up to 20 times), so that the
    dedupe of ``mmgrid prepare`` removes almost nothing.
    """
    if process.extend and process.user_scale > 1.0:
        return _extended(k, n_cats, start_ms, end_ms, period_days, scale, rng, process)
    user_scale, personalization = process.user_scale, process.personalization
    users_f = k.n_users * scale if user_scale == 1.0 else k.n_users * scale * user_scale
    n_users, n_items = max(int(round(users_f)), 10), max(int(round(k.n_items * scale)), n_cats)
    span = end_ms - start_ms
    # the draws in this order (items, users, trend phases, interactions) are the world's random stream
    catalog = _catalog(k, n_items, n_cats, start_ms, span, rng)
    users = _users(k, n_users, n_cats, start_ms, span, personalization, rng)
    u = rng.random(n_cats)
    phase = 2 * np.pi * (np.argsort(u) / n_cats + u[0])  # evenly spaced phases, in random order
    return _interactions(k, catalog, users, phase, _Window(start_ms, end_ms, period_days), rng, process)


@dataclass(frozen=True)
class _Window:
    start_ms: int
    end_ms: int
    period_days: float


@dataclass(frozen=True)
class _Catalog:
    cat: np.ndarray  # latent category per item
    release: np.ndarray  # release time (ms, float) per item
    life: np.ndarray  # popularity life-span (ms) per item
    quality: np.ndarray  # quality per item


@dataclass(frozen=True)
class _Users:
    arrive: np.ndarray  # arrival time (ms) per user
    act: np.ndarray  # per-period activity probability per user
    p0: np.ndarray  # start preference over categories, per user
    p1: np.ndarray  # end preference over categories, per user


def _catalog(k: DomainKnobs, n_items: int, n_cats: int, start_ms: int, span: int, rng: np.random.Generator) -> _Catalog:
    """Items: categories round-robin then shuffled, so every category has items before the start."""
    cat = rng.permutation(np.arange(n_items) % n_cats)
    pre = rng.random(n_items) < k.initial_item_share
    pre[np.unique(cat, return_index=True)[1]] = True
    pre_span = min(max(2 * k.lifespan_days, 90.0), 1100.0) * DAY_MS
    release = np.where(pre, start_ms - rng.random(n_items) * pre_span, start_ms + rng.random(n_items) * span)
    life = k.lifespan_days * DAY_MS * rng.lognormal(0.0, 0.3, n_items)
    quality = rng.lognormal(0.0, k.quality_sigma, n_items)
    return _Catalog(cat, release, life, quality)


def _users(k: DomainKnobs, n_users: int, n_cats: int, start_ms: int, span: int, personalization: float,
           rng: np.random.Generator) -> _Users:  # fmt: skip
    arrive = np.where(rng.random(n_users) < k.user_arrival_share, start_ms,
                      start_ms + rng.random(n_users) * max(span - 120 * DAY_MS, 1))  # fmt: skip
    c = k.activity_concentration
    act = rng.beta(c * k.activity, c * (1 - k.activity), n_users)  # mean = activity
    p0 = rng.dirichlet(np.full(n_cats, k.pref_concentration), n_users)
    p1 = rng.dirichlet(np.full(n_cats, k.pref_concentration), n_users)
    if personalization != 1.0:  # no draw here, so the default world's random stream is unchanged
        p0 = personalization * p0 + (1.0 - personalization) / n_cats
        p1 = personalization * p1 + (1.0 - personalization) / n_cats
    return _Users(arrive, act, p0, p1)


def _extended(k: DomainKnobs, n_cats: int, start_ms: int, end_ms: int, period_days: float, scale: float,
              rng: np.random.Generator, process: ProcessScales) -> Simulated:  # fmt: skip
    """``process.extend`` with ``user_scale`` > 1: the world at ``user_scale`` 1, draw for draw (same items, same
    trend phases, same users and interactions, and ``rng`` left where that world leaves it, so the item text drawn
    after the simulation is the same too), plus the extra users, drawn from a stream spawned off ``rng`` (which does
    not move it) over the same items and phases. The extra users are numbered after the world's own."""
    base_process = replace(process, user_scale=1.0, extend=False)
    n_base = max(int(round(k.n_users * scale)), 10)
    n_all = max(int(round(k.n_users * scale * process.user_scale)), 10)
    n_items = max(int(round(k.n_items * scale)), n_cats)
    span = end_ms - start_ms
    extra_rng = rng.spawn(1)[0]  # spawning changes no state of rng's bit generator
    catalog = _catalog(k, n_items, n_cats, start_ms, span, rng)
    users = _users(k, n_base, n_cats, start_ms, span, process.personalization, rng)
    u = rng.random(n_cats)
    phase = 2 * np.pi * (np.argsort(u) / n_cats + u[0])
    window = _Window(start_ms, end_ms, period_days)
    base = _interactions(k, catalog, users, phase, window, rng, base_process)
    n_extra = n_all - n_base
    if n_extra <= 0:
        return base
    extra_users = _users(k, n_extra, n_cats, start_ms, span, process.personalization, extra_rng)
    counts = None
    if process.counts is not None:  # the extra users' share of each period's interactions
        counts = tuple(int(round(c * (process.user_scale - 1.0))) for c in process.counts)
    extra = _interactions(k, catalog, extra_users, phase, window, extra_rng, replace(process, counts=counts))
    return Simulated(user=np.concatenate([base.user, extra.user + n_base]), item=np.concatenate([base.item, extra.item]),
                     ts=np.concatenate([base.ts, extra.ts]), item_cat=base.item_cat, release_ms=base.release_ms)


def _interactions(k: DomainKnobs, catalog: _Catalog, people: _Users, phase: np.ndarray, window: _Window,
                  rng: np.random.Generator, process: ProcessScales) -> Simulated:  # fmt: skip
    """Every period's interactions of ``people`` with ``catalog`` (see :func:`simulate`; of ``process``, the
    recency and the counts are read here)."""
    start_ms, end_ms, recency, counts = window.start_ms, window.end_ms, process.recency, process.counts
    cat, release, life, quality = catalog.cat, catalog.release, catalog.life, catalog.quality
    arrive, act, p0, p1 = people.arrive, people.act, people.p0, people.p1
    n_users, n_items, n_cats = arrive.size, cat.size, phase.size
    span = end_ms - start_ms
    period = int(window.period_days * DAY_MS)
    out_u, out_i, out_t = [], [], []
    # with fixed counts a user reviews an item once (as on Amazon): a pair already drawn is drawn again
    seen = np.zeros((n_users, n_items), dtype=bool) if counts is not None else None
    for p_i, t0 in enumerate(range(start_ms, end_ms, period)):
        t_mid = t0 + period // 2
        present = arrive <= t0 + period
        if counts is None:
            active = np.nonzero(present & (rng.random(n_users) < act))[0]
            if active.size == 0:
                continue
            users = np.repeat(active, 1 + rng.poisson(k.burst, active.size))
        else:
            pool = np.nonzero(present)[0]
            n_p = int(counts[p_i]) if p_i < len(counts) else 0
            if n_p <= 0 or pool.size == 0:
                continue
            users = np.sort(rng.choice(pool, n_p, p=act[pool] / act[pool].sum()))
        frac = (t_mid - start_ms) / span
        cycles = frac if k.trend_period_days <= 0 else (t_mid - start_ms) / (k.trend_period_days * DAY_MS)
        if k.trend_shape == "sine":
            trend = np.exp(k.trend_amplitude * np.sin(2 * np.pi * cycles + phase))
        else:
            trend = np.exp(k.trend_amplitude * trend_position(k.trend_shape, frac) * np.cos(phase))
        pref = (1 - k.drift * frac) * p0[users] + k.drift * frac * p1[users]
        pref = (1 - k.trend_weight) * pref + k.trend_weight * trend / trend.sum()
        cum = np.cumsum(pref, axis=1)
        chosen_cat = (rng.random((users.size, 1)) * cum[:, -1:] > cum).sum(axis=1).clip(0, n_cats - 1)
        age = np.maximum(t_mid - release, 0) / life
        weight = np.where(release <= t0 + period, quality * np.exp(-age if recency == 1.0 else -recency * age), 0.0)
        items = _pick_items(chosen_cat, cat, weight, n_cats, rng)
        if seen is not None:
            items = _fresh_items(users, items, chosen_cat, cat, weight, n_cats, rng, seen)
        ok = items >= 0
        users, items = users[ok], items[ok]
        ts = t0 + (rng.random(users.size) * period).astype(np.int64)
        # An item is never reviewed before its release, nor a user before arriving.
        ts = np.maximum(ts, np.maximum(release[items], arrive[users]).astype(np.int64) + 3_600_000)
        keep = ts < end_ms
        out_u.append(users[keep])
        out_i.append(items[keep])
        out_t.append(ts[keep])
    return Simulated(
        user=np.concatenate(out_u), item=np.concatenate(out_i), ts=np.concatenate(out_t).astype(np.int64),
        item_cat=cat, release_ms=release.astype(np.int64),
    )  # fmt: skip


def _fresh_items(users: np.ndarray, items: np.ndarray, chosen_cat: np.ndarray, cat: np.ndarray, weight: np.ndarray,
                 n_cats: int, rng: np.random.Generator, seen: np.ndarray) -> np.ndarray:  # fmt: skip
    """``items`` with every draw of a pair already in ``seen`` (or earlier in this batch) drawn again from its
    category; marks the resulting pairs in ``seen``. A pair still repeated after :data:`REDRAWS` draws is kept."""
    n_items = seen.shape[1]
    for _ in range(REDRAWS):
        ok = items >= 0
        code = users * n_items + np.where(ok, items, 0)
        first = np.zeros(code.size, dtype=bool)
        first[np.unique(code, return_index=True)[1]] = True
        bad = ok & (seen[users, np.where(ok, items, 0)] | ~first)
        if not bad.any():
            break
        rows = np.nonzero(bad)[0]
        items[rows] = _pick_items(chosen_cat[rows], cat, weight, n_cats, rng)
    ok = items >= 0
    seen[users[ok], items[ok]] = True
    return items


def _pick_items(chosen_cat: np.ndarray, cat: np.ndarray, weight: np.ndarray, n_cats: int,
                rng: np.random.Generator) -> np.ndarray:  # fmt: skip
    """For each draw, an item of its category by weight (any released item if the category has none)."""
    out = np.full(chosen_cat.size, -1, dtype=np.int64)
    for c in range(n_cats):
        rows = np.nonzero(chosen_cat == c)[0]
        if rows.size == 0:
            continue
        cand = np.nonzero(cat == c)[0]
        w = weight[cand]
        if w.sum() <= 0:
            cand, w = np.nonzero(weight > 0)[0], weight[weight > 0]
            if cand.size == 0:
                continue
        cum = np.cumsum(w)
        pos = np.searchsorted(cum, rng.random(rows.size) * cum[-1], side="right").clip(0, cand.size - 1)
        out[rows] = cand[pos]
    return out
