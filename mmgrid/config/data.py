"""Typed config of the data layer (the ``data:`` and ``world:`` sections of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mmgrid.config.dates import parse_date_ms
from mmgrid.configtools import ranged
from mmgrid.errors import ConfigError

# The paper's global, half-open UTC windows (MMGRid section 3.2). Order matters: it is time order.
PAPER_PHASES: dict[str, list[str | None]] = {
    "pretrain": [None, "2022-07-01"],
    "p1": ["2022-07-01", "2022-10-01"],
    "p2": ["2022-10-01", "2023-01-01"],
    "test": ["2023-01-01", "2023-04-01"],
}


@dataclass
class ItemTextConfig:
    fields: list[str] = field(default_factory=lambda: ["title", "description", "features"])  # title always first
    max_chars: int = ranged(1, 10**7, default=256)  # item text is truncated to this many characters


@dataclass
class DataConfig:
    source: Literal["amazon2023", "benchmark_csv", "recbole"] = "amazon2023"  # raw file family
    root: str = "runs/demo/world"  # folder with raw/review_categories, raw/meta_categories (or csv / atomic files)
    domains: list[str] = field(default_factory=list)  # categories, e.g. Video_Games; empty = every file found
    kcore: int = ranged(1, default=5)  # iterative k-core on users and items
    min_date: str | None = None  # drop interactions before this UTC date (YYYY-MM-DD)
    max_history: int = ranged(1, 100_000, default=20)  # at most this many earlier interactions per example
    phases: dict[str, list[str | None]] = field(default_factory=lambda: {k: list(v) for k, v in PAPER_PHASES.items()})
    item_text: ItemTextConfig = field(default_factory=ItemTextConfig)
    recbole_text_field: str = "title"  # .item column used as item text for RecBole sources
    strict: bool = False  # fail on the first corrupt line instead of skipping and counting it
    # ms: values below 1e11 (seconds by magnitude) are an error; s: every value is seconds; auto: below 1e11 converted
    timestamp_unit: Literal["ms", "s", "auto"] = "ms"
    min_history: int = ranged(0, default=1)  # targets with fewer earlier interactions are not examples (counted in the manifest)
    lm_text_docs: int = ranged(1, 10**8, default=4000)  # review texts set apart (across domains) for the base LM: train + held-out
    lm_heldout_share: float = ranged(0, 1, hi_open=True, default=0.1)  # share of lm_text_docs kept for measuring text retention


@dataclass
class PlantConfig:
    """Planted mechanisms of the synthetic world (``world.plant``): each knob sets the size of one
    mechanism the papers claim; 0 removes it (the ``null`` world of that finding), 1 is the preset's world
    (every knob at 1 writes the files byte for byte as before the knobs existed), above 1 exaggerates it.
    docs/calibration.md says which finding each knob drives."""

    # between-domain contrast of item turnover (life-span, log scale, and the share of items released before the
    # start): 0 = every domain has the domains' geometric-mean life-span (MMGRid Table 4's mechanism removed)
    turnover: float = ranged(0, 4, default=1.0)
    # scale of every domain's category trend weight (a temporal preference trend); 0 = no trend
    trend: float = ranged(0, 4, default=1.0)
    # between-domain contrast of the trend (weight, amplitude, frequency 1 / period); 0 = every domain follows the
    # domains' mean trend, so no domain's lambda* differs from another's in expectation
    trend_contrast: float = ranged(0, 4, default=1.0)
    # between-domain contrast of every other knob (users, items, activity, bursts, drift, arrival, preference
    # concentration, quality spread): 0 = the domains differ only in the knobs above (and their vocabularies),
    # so with turnover and trend_contrast also 0 they are exchangeable and rho over domains has population value 0
    domain_contrast: float = ranged(0, 4, default=1.0)
    # weight of each user's own preference against the population's (uniform); 0 = every user alike, so nothing
    # personal separates a recommender from most-popular (Table 2)
    personalization: float = ranged(0, 1, default=1.0)
    # scale of the items' popularity decay exp(-recency age / life-span); 0 = an item's appeal never fades, so
    # most-popular's all-time counts rank items as users choose them (with personalization and trend at 0 as
    # well, nothing is left for a recommender to beat most-popular with: Table 2's null)
    recency: float = ranged(0, 4, default=1.0)
    # share of items whose title and reviews use their own category's words (else a random category's); 0 = text
    # says nothing about the category (what separates text-grounded from ID paradigms, Table 2)
    text_signal: float = ranged(0, 1, default=1.0)

    def is_default(self) -> bool:
        return all(float(v) == 1.0 for v in (self.turnover, self.trend, self.trend_contrast, self.domain_contrast,
                                               self.personalization, self.recency, self.text_signal))


# The first day of each world preset's generated interactions when ``world.start`` is not given:
# amazon_table1 needs years of history before the pretrain cut-off (MMGRid Table 4's average
# interaction time gaps reach 663 days, more than the default world's 18 months before 2022-07-01).
WORLD_PRESET_START: dict[str, str] = {"default": "2021-01-01", "dense_short_text": "2021-01-01",
                                      "amazon_table1": "2014-01-01", "rolling_six": "2021-01-01"}


@dataclass
class WorldConfig:
    seed: int = ranged(0, default=0)  # the world is deterministic for a seed
    scale: float = ranged(0, 10_000, lo_open=True, default=1.0)  # multiplies users and items; ~100 gives millions of reviews
    n_domains: int = ranged(1, 1000, default=5)  # synthetic domains, each with its own item life-span and activity
    # first day of generated interactions (UTC); empty = the preset's (WORLD_PRESET_START: 2021-01-01, amazon_table1
    # 2014-01-01), resolved when the config is built so saved runs record the date
    start: str | None = None
    end: str = "2023-04-01"  # day after the last generated interaction (UTC)
    # default: the drift world whose item text reveals the category; dense_short_text: many interactions
    # per user, short titles that do not reveal the (10) latent categories; amazon_table1: six domains with
    # MMGRid Table 1's size ratios and Table 4's interaction time gaps, short weak titles (docs/data.md)
    # rolling_six: the default domains with a drift that persists, reverses or accelerates over six or more
    # quarters (grids/rolling.yaml; docs/studies.md, "Rolling deployment")
    preset: Literal["default", "dense_short_text", "amazon_table1", "rolling_six"] = "default"
    # planted mechanisms and their zeros (docs/calibration.md); all 1 = the preset's world
    plant: PlantConfig = field(default_factory=PlantConfig)
    # multiplies the number of users only (items stay): more users drawn from the same process, e.g. a large
    # test population for a finding's population value (mmgrid calibrate); 1 = the preset's world
    user_scale: float = ranged(0, 10_000, lo_open=True, default=1.0)
    # with user_scale > 1: the world at user_scale 1 exactly (same items, trends, users and interactions) plus the
    # extra users, drawn from their own stream over the same items: more users of *this* world (a per-world
    # population, mmgrid calibrate); false: a fresh world with more users (same items, other users and trends)
    extend_users: bool = False

    def __post_init__(self) -> None:
        if self.start is None:
            self.start = WORLD_PRESET_START.get(self.preset, WORLD_PRESET_START["default"])
        if parse_date_ms(self.start, "world.start") >= parse_date_ms(self.end, "world.end"):
            raise ConfigError(f"world: start {self.start} is not before end {self.end}; give an earlier start.")
        if self.extend_users and self.user_scale < 1.0:
            raise ConfigError(f"world.extend_users: true adds users to the world at user_scale 1, but user_scale is "
                              f"{self.user_scale:g}; give user_scale >= 1 or extend_users: false.")
