"""The typed records the studies hand to the report's renderers (report.md, report.html, analysis/).

One dataclass per report section (Table 2, Figure 2, Figures 3-4, Figure 5, Tables 3-4, Orbit),
:class:`Section` (a result, or what it misses, or how it failed) and :class:`StudyResults` (every
section in order), with the findings' list and the report's glossary. Computed by
:mod:`mmgrid.sweep.study_results`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.errors import MmgridError
from mmgrid.stats import INCONCLUSIVE, mde_note
from mmgrid.sweep.lambda_model import LambdaPrediction
from mmgrid.sweep.tables import Provenance


class MissingInputs(MmgridError):
    """A report section's inputs are not in the registry yet."""


class ReportSectionError(MmgridError):
    """A report section failed to compute or render; names the section and the error."""

    def __init__(self, title: str, exc: BaseException) -> None:
        super().__init__(f"report section {title!r} failed: {type(exc).__name__}: {exc} (traceback above). Nothing "
                         "was written; fix the cause, or rerun with --keep-going to write the other sections "
                         "(the command still exits non-zero).")
        self.title, self.error = title, exc


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Finding:
    """One of the papers' findings judged from a 95% interval (:data:`FINDINGS`)."""

    key: str
    verdict: str  # mmgrid.stats HOLDS / FAILS / INCONCLUSIVE
    evidence: str
    section: str  # key of the section whose tables are the evidence
    # inconclusive only: what the run could have seen (:func:`with_mde`), e.g. "inconclusive: this run detects
    # |rho| >= 1.20 at 80% power; MMGRid reports -0.89, below it: this run could not have seen it"
    note: str = ""
    # the population value of the finding's estimand for this world and budget (``mmgrid calibrate CONFIG
    # --population``), as text; "" where none was computed
    population: str = ""


def with_mde(f: Finding, intervals: list[tuple[float, float]], scale: float = 1.0, unit: str = "",
             what: str = "effect") -> Finding:
    """``f`` with its minimum-detectable-effect note when it is inconclusive (else ``f`` unchanged).

    ``intervals``: the 95% interval(s) of the effect the verdict was judged on (in the effect's own units,
    before ``scale``). With several (one per domain or comparison), the standard error is the mean of those
    their widths imply, as the calibration study reads it (:mod:`mmgrid.sweep.calibration.measures`):
    MDE = (z_0.975 + z_0.8) x mean(width / (2 x 1.96)) (:func:`mmgrid.stats.mde_note`). The published value
    of the finding (:data:`mmgrid.sweep.calibration.measures.PUBLISHED`), where there is one, is compared with it.
    """
    if f.verdict != INCONCLUSIVE:
        return f
    # lazy: the calibration package loads the replicate machinery (config, registry) only when a note is made
    from mmgrid.sweep.calibration.measures import PUBLISHED

    widths = [float(hi) - float(lo) for lo, hi in intervals
              if lo is not None and hi is not None and math.isfinite(float(lo)) and math.isfinite(float(hi))]
    width = sum(widths) / len(widths) if widths else float("nan")
    published = PUBLISHED.get(f.key)
    note = mde_note(-width / 2, width / 2, reported=published[0] if published else None, what=what, unit=unit,
                    scale=scale)
    return replace(f, note=note + (f" ({published[1]})" if published and widths else ""))


def with_population(f: Finding, text: str) -> Finding:
    """``f`` with the population value of its estimand (``text``; "" leaves it unchanged)."""
    return replace(f, population=text) if text else f


FINDINGS = [
    ("t2_text", "Table 2", "the text-grounded paradigm (BIGRec) underperforms the other GR paradigms (NDCG@10)"),
    ("t2_emb", "Table 2", "SemEmb (HLLM) outperforms SemID (LC-Rec) (NDCG@10)"),
    ("t2_popular", "Table 2", "every generative-recommendation paradigm beats most-popular (NDCG@10)"),
    ("f4_hist", "Figure 4", "a historical checkpoint as base beats the original base"),
    ("f4_neutral", "Figure 4", "a neutral (averaged) base beats the historical base (the original where no historical ran)"),
    ("f5_not1", "Figure 5", "lambda = 1 is not the best lambda in every domain (all users)"),
    ("f5_varies", "Figure 5", "the best lambda differs between domains (all users)"),
    ("t4_rho", "Table 4", "the non-active users' lambda* falls as the average interaction time gap rises"),
    ("t4_loo", "Table 4", "the leave-one-out prediction is closer to lambda* than the default lambda = 1"),
    ("t3_hat", "Table 3", "lambda_hat* (Eq. 11) beats lambda = 1 for all users (NDCG@10)"),
    ("t3_continual", "Table 3", "lambda scaling beats the best continual-merging baseline"),
    ("world", "synthetic world", "each domain's non-active lambda* interval contains the world's own value"),
]


# the report's terms, shared by report.md and report.html
GLOSSARY = [
    ("R@K, N@K", "Recall@K and NDCG@K of the held-out next item, in % (0-100) everywhere in this report."),
    ("[low, high]", "95% interval: percentile bootstrap over test users and, independently, training seeds."),
    ("% points", "a difference of two metrics given in %, e.g. 12.0 - 10.5 = +1.5 points."),
    ("p (Holm)", "two-sided sign-flip randomization p of a paired per-user difference, Holm-corrected over "
                 "the comparisons of one table and metric."),
    ("holds / does not hold / inconclusive", "the 95% interval of the effect lies on the claimed side / on "
                                             "the other side / straddles no effect."),
    ("theta_t1, theta_t2", "the checkpoints after the second-to-last and the last training stage."),
    ("lambda (temporal)", "MMGRid Eq. 10: theta_t1 + lambda (theta_t2 - theta_t1); lambda = 1 is theta_t2."),
    ("lambda*", "the lambda with the best metric on the seed-averaged per-user curve; (edge) = on the grid's "
                "first or last point."),
    ("lambda_hat*", "MMGRid Eq. 11: (1 - p_active) lambda*_pred + p_active, lambda*_pred from the leave-one-out "
                    "regression on domain statistics."),
    ("MDE", "minimum detectable effect: the |effect| a run of this size detects at 80% power, (z_0.975 + z_0.8) x SE "
            "with SE = width of the 95% interval / (2 x 1.96); given under every inconclusive finding."),
    ("population value", "what the same pipeline finds on a far larger population of the same synthetic world "
                         "(`mmgrid calibrate CONFIG --population`); the world's own value of a finding's estimand."),
    ("continual merge", "a merge of a domain's checkpoints in the order they arrived, pretrain -> t1 -> t2 "
                        "(base: the pretrain stage): MagMax (per entry the largest-magnitude task vector), OPCM "
                        "(each update projected off the merged subspace), DOP (dual orthogonal projections), and "
                        "task arithmetic (weights 1/2) and TIES (density 0.2) over the same sequence."),
    ("active / non-active users", "users above / below the activity threshold of the prepared data."),
    ("alpha (cross-domain)", "MMGRid Eq. 7: the weight of the pair's first domain in a cross-domain merge."),
    ("base: original / historical / neutral", "MMGRid Eq. 8: the start model, an earlier checkpoint, or the "
                                              "average of the pair's checkpoints, as the merge's base."),
    ("text retention", "exp(base text loss - text loss) = base perplexity / perplexity on held-out text "
                       "(1 = the start model's text ability kept)."),
]


@dataclass
class BaselineResults:
    """MMGRid Table 2 with intervals and the paired comparisons against the references."""

    table: pd.DataFrame  # rows: pretty paradigm names; columns (domain, short metric); "mean [low, high]" in %
    provenance: Provenance
    has_intervals: bool
    comparisons: pd.DataFrame  # long: paradigm, reference, domain, metric, diff, ci_low, ci_high, p, p_holm ...
    comparison_tables: dict[str, pd.DataFrame]  # short metric -> rows "A - B", columns domains
    findings: list[Finding]


@dataclass
class DiagnosticsResults:
    """Figure 2 (task-vector L1 norms) and the pairwise conflict diagnostics."""

    norms: pd.DataFrame
    norm_table: pd.DataFrame
    norm_provenance: Provenance
    pairs: pd.DataFrame  # empty with fewer than two domains


@dataclass
class CrossDomainResults:
    """Figures 3-4: relative changes, their errors, the summary table and the base orderings."""

    metric: str
    rel: pd.DataFrame  # merged rows with rel_change (fraction)
    heat: pd.DataFrame  # the rows of Figure 3 (original base, alpha 0.5)
    errors: pd.DataFrame  # joint change with 95% interval per paradigm, method, base, alpha (in %)
    summary: pd.DataFrame
    summary_provenance: Provenance
    orderings: pd.DataFrame  # paired base orderings with p_holm
    cells: pd.DataFrame  # one row per (pair, method, base, alpha, evaluated domain): merged and own value in % with intervals
    seeds: list[int]  # training seeds the study ran on
    all_seeds: list[int]
    findings: list[Finding]


@dataclass
class TemporalResults:
    """Figure 5: the lambda curves, lambda* per domain and group with interval and edge flag."""

    paradigm: str
    metric: str
    smooth: int
    results: pd.DataFrame  # long temporal results (recorded group means)
    stars: pd.DataFrame  # domain, group, lambda_star, ci_low, ci_high, on_edge, ...
    curves: dict  # (domain, group) -> evidence.Curves; {} without per-user values
    band: pd.DataFrame | None  # domain, group, lambda, value, low, high; None without per-user values
    seeds: list[int]
    lambda_table: pd.DataFrame  # rows domain, columns group; "lambda* [low, high] (edge)"
    lambda_provenance: Provenance
    edge: list[tuple[str, str]]
    world: pd.DataFrame | None  # the synthetic world's own lambda against the non-active interval
    world_lambdas: dict[str, float]
    findings: list[Finding]
    pu: Any = None  # the per-user reader (its cache serves Table 3)
    # where world_lambdas come from: the population value of the world and budget (``mmgrid calibrate CONFIG
    # --population``), or the labelled fallback formula for the category mix alone (:data:`FORMULA_LABEL`)
    world_source: str = ""


POPULATION_LABEL = ("population value: the argmax of the non-active users' NDCG@10 curve of the same pipeline on "
                    "{worlds} world(s) with {scale:g}x the users, every test user (`mmgrid calibrate CONFIG --population`)")
FORMULA_LABEL = ("formula for the category mix alone, 1 + cos(2 pi 91 / P) with P the trend's period (truth.json); run "
                 "`mmgrid calibrate CONFIG --population` for the population value")


CONTINUAL_HOW = ("no continual-merging evaluations recorded: run `mmgrid sweep continual RUN` (RUN: the run folder, "
                 "e.g. runs/demo; after `mmgrid predict-lambda RUN` so that lambda_hat* is among the strategies), "
                 "then `mmgrid report RUN --out DIR` again.")


@dataclass
class ContinualResults:
    """Table 3's continual-merging rows (:mod:`mmgrid.sweep.continual`): every strategy over each domain's
    sequence pretrain -> t1 -> t2 against lambda = 1, per user group, and the verdict on
    "lambda scaling beats the best continual-merging baseline"."""

    metric: str
    study: Any  # mmgrid.sweep.continual.ContinualStudy (empty rows: nothing recorded)
    groups: dict[str, tuple[pd.DataFrame, pd.DataFrame]]  # group -> (means, differences to lambda = 1), in %
    provenance: Provenance  # row label -> recipe hashes
    seeds: list[int]  # training seeds recorded
    all_seeds: list[int]  # the grid's training seeds
    how: str = ""  # what to run when nothing is recorded (:data:`CONTINUAL_HOW`), else ""
    pooled: pd.DataFrame | None = None  # all users, every domain pooled: label, mean/ci/diff/p_holm in % (console)

    @property
    def empty(self) -> bool:
        """Nothing recorded: the report shows :attr:`how` instead of the tables."""
        return bool(self.how)


@dataclass
class PredictionResults:
    """Tables 3-4: the fitted lambda* regression (Eq. 11), Spearman's rho, the LOO error, Table 3."""

    prediction: LambdaPrediction
    feature: str
    table4: pd.DataFrame
    table4_provenance: Provenance
    regression: pd.DataFrame
    spearman: Any  # mmgrid.stats Spearman result (rho, ci_low, ci_high, pvalue, n) or None
    loo_error: Any  # mmgrid.stats LOO-vs-default result or None
    plot_table: pd.DataFrame
    lambda_hat_used: dict[str, float]
    table3: pd.DataFrame
    table3_provenance: Provenance
    table3_comparisons: pd.DataFrame | None
    findings: list[Finding]
    continual: ContinualResults | None = None  # Table 3's continual-merging rows (None: not computed)


@dataclass
class ParetoResults:
    """The Orbit Pareto plot: text retention against Recall@10 per variant, with 95% intervals."""

    points: pd.DataFrame  # variant, regularizer, paradigm, text_retention(+_low/_high), recall@10(+_low/_high) in %, ids


@dataclass
class Section:
    """One report section: its result, or what it misses, or how it failed."""

    key: str
    title: str
    result: Any = None
    missing: str | None = None
    error: str | None = None  # "TypeError: ..." when the section failed (keep_going)

    @property
    def ok(self) -> bool:
        return self.result is not None


@dataclass
class StudyResults:
    """Every section of the report, in order, with the grid's description."""

    cfg: GridConfig
    domains: list[str]
    sections: dict[str, Section] = field(default_factory=dict)
    registry_root: str = ""
    fingerprint: str = "?"
    # results that are not a study section of the registry: "calibration" (a `mmgrid calibrate` output,
    # :mod:`mmgrid.render.report_calibration`), rendered after the sections where a renderer is registered
    extras: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        s = self.sections.get(key)
        return s.result if s is not None else self.extras.get(key)

    @property
    def failed(self) -> list[Section]:
        return [s for s in self.sections.values() if s.error is not None]

    def findings(self) -> dict[str, Finding]:
        """Key -> finding, from every section that computed."""
        out: dict[str, Finding] = {}
        for s in self.sections.values():
            for f in getattr(s.result, "findings", None) or []:
                out.setdefault(f.key, f)
        return out


SECTION_TITLES = {
    "table2": "Table 2: baselines (last-stage checkpoints, all users)",
    "diagnostics": "Figure 2: task-vector magnitude and domain conflict",
    "cross_domain": "Figures 3 and 4: cross-domain merging",
    "temporal": "Figure 5: temporal lambda sweeps",
    "prediction": "Tables 3 and 4: predicting lambda* from domain statistics",
    "pareto": "Orbit: text retention against Recall@10",
}
