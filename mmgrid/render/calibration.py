"""The calibration studies' own records as Markdown and figures: ``mmgrid calibrate``'s ``OUT/calibration.md``
and ``OUT/power_curve.png`` from the typed :class:`~mmgrid.sweep.calibration.study.CalibrationResult`, and
``mmgrid calibrate --rolling``'s ``OUT/rolling_calibration.md`` from its summary rows
(:func:`mmgrid.sweep.calibration.rolling.summarize`). Performance measures as in Morris, White & Crowther
(Stat Med 2019): the rate of "holds" (type-I error under the null, else power), coverage, bias and the MDE,
each with its Monte Carlo standard error. The report's calibration section reads ``calibration.json``
(:mod:`mmgrid.render.report_calibration`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mmgrid.config import GridConfig
from mmgrid.stats.power import Bias, Rate
from mmgrid.sweep.calibration.measures import FINDINGS, target_check
from mmgrid.sweep.calibration.replicate import as_float
from mmgrid.sweep.calibration.rolling import METRIC, RollingPlan
from mmgrid.sweep.calibration.study import (CalibrationResult, grid_world_summary, own_world_count, own_world_sweeps,
                                            own_world_t2, uses_own_world)

__all__ = ["grid_world_lines", "power_curve", "rolling_calibration_markdown", "write_calibration",
           "write_rolling_calibration"]


def write_calibration(res: CalibrationResult, cfg: GridConfig) -> Path:
    """``OUT/calibration.md`` and ``OUT/power_curve.png``: the calibration study's findings per planted size, per
    domain and paradigm, the population values and the grid's own world, with its estimands."""
    c = cfg.sweeps.calibrate
    out = res.out
    grid_world = grid_world_summary(res, cfg)
    png = power_curve(res, out / "power_curve.png", c.power)
    lines = [f"# mmgrid calibrate: grid `{cfg.name}`", "",
             f"{res.replicates} replicate world(s) per planted size, each run through the grid's pipeline at its budget "
             f"(paradigm `{cfg.sweeps.temporal.paradigm}`, training seeds {cfg.train.seed_list}, "
             f"`train.max_examples` {cfg.train.max_examples}, `eval.max_users` {cfg.eval.max_users}); planted knobs "
             f"{', '.join(f'`world.plant.{k}`' for k in res.knobs)} = the size times the grid's own value "
             f"({_plant_text(cfg, res.knobs)}; 0 = the null world, 1 = the grid's world). Population values: "
             f"{c.population_worlds} world(s) with {c.population_user_scale:g}x the users, every test user"
             + (f"; {_own_world_what(cfg)} coverage and bias are measured against "
                f"{_own_world_who(cfg)} own world with {c.population_user_scale:g}x its users (its items, trends and "
                "users, plus more users)" if uses_own_world(cfg) else "") + ". Rates carry "
             "their Monte Carlo standard error (MCSE = sqrt(p (1 - p) / R)); the MDE is the |effect| a replicate "
             f"detects at {c.power:.0%} power, 2.80 x the SE its mean 95% interval implies. "
             f"{res.seconds_per_replicate:.0f} s per replicate on average; the study took {res.seconds:.0f} s here "
             "(cached replicates count 0).", "",
             "| finding | size | population value | null? | holds (type-I under the null, else power) | coverage | "
             "bias | MDE (80%) | n | targets |", "|---|---|---|---|---|---|---|---|---|---|"]
    for f in res.findings:
        also = f"; the configuration's value: {f.coverage_config.text()}" if f.coverage_config else ""
        row = f.__dict__
        lines.append(f"| {f.finding} | {f.size:g} | {_num(f.population)} | {'yes' if f.is_null else 'no'} | "
                     f"{f.holds.text() if f.holds else '-'} | {_coverage(f.coverage, f.coverage_of, f.coverage_expected)}"
                     f"{also} | "
                     f"{_bias(f.bias)} | {_num(f.mde)} | {row['n']} | "
                     f"{target_check(f, 1 - c.level, c.power, c.level)} |")
    lines += ["", "Per domain (non-active lambda*) and per paradigm (Table 2 difference):", "",
              "| finding | size | domain / paradigm | population value | coverage | bias | MDE | spread / SE | "
              "estimates (min / median / max) |", "|---|---|---|---|---|---|---|---|---|"]
    for f in res.findings:
        for d, v in f.per_domain.items():
            cov = _coverage(Rate(**v["coverage"]), v.get("coverage_of", "configuration"),
                            v.get("coverage_expected", float("nan")))
            if v.get("coverage_config"):
                cov += f"; the configuration's value: {Rate(**v['coverage_config']).text()}"
            lines.append(f"| {f.finding} | {f.size:g} | {d} | {_num(v['population'])} | {cov} | "
                         f"{_bias(Bias(**v['bias']))} | {_num(v['mde'])} | {_num(v.get('spread_ratio'))} | "
                         f"{' / '.join(f'{q:.2f}' for q in v['estimates']) if v.get('estimates') else '-'} |")
    lines += ["", "*spread / SE*: the SD of the replicates' estimates over the mean standard error their intervals "
              "imply (above 1: the worlds differ by more than one world's interval allows). *expected from the "
              "population value's own noise* (*from its noise* for an own world): the rate at which correct intervals "
              "cover a target estimated with the population runs' SE (their intervals combined as for a mean) or the "
              "own-world run's SE, 2 Phi(1.96 se / sqrt(se^2 + se_p^2)) - 1."]
    lines += ["", "Population values as the population runs measured them (lambda* all users / non-active users per "
              "domain; the rows above replace rho and the range by 0 where the null world's domains are alike):", "",
              "| size | lambda* per domain (all / non-active) | rho | max abs(lambda* - 1) | range of lambda* | "
              "Table 2 difference (SE) |", "|---|---|---|---|---|---|"]
    for size in res.sizes:
        pv = res.population.get(size) or {}
        lam = ", ".join(f"{d} {_num(g.get('all'))} / {_num(g.get('non_active'))}"
                        for d, g in sorted((pv.get("lambda_star") or {}).items()))
        lines.append(f"| {size:g} | {lam or '-'} | {_num(pv.get('t4_rho'))} | {_num(pv.get('f5_not1'))} | "
                     f"{_num(pv.get('f5_varies'))} | {_num(pv.get('t2_popular'))} ({_num(pv.get('t2_popular_se'))}) |")
    lines += grid_world_lines(grid_world)
    lines += ["", "What each finding's estimand is:", ""]
    lines += [f"- `{k}` ({FINDINGS[k][0]}): {FINDINGS[k][2]}" for k in c.findings]
    if png is not None:
        lines += ["", f"![power curve]({png.name})", "",
                  "*Rate of \"holds\" against the planted size (error bars: 95% Wilson interval of the rate, which stays "
                  "honest at 0/R and R/R where the MCSE is 0); dashed: 5% and "
                  f"{c.power:.0%}.*"]
    path = out / "calibration.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _plant_text(cfg: GridConfig, knobs: list[str]) -> str:
    """The grid's own values of the calibrated knobs, e.g. "all 1" or "turnover 1.5, trend 1"."""
    assert cfg.world is not None  # `mmgrid calibrate` refuses a grid without a world: section
    vals = {k: float(getattr(cfg.world.plant, k)) for k in knobs}
    if len(set(vals.values())) == 1:
        return f"all {next(iter(vals.values())):g} in this grid"
    return "in this grid " + ", ".join(f"{k} {v:g}" for k, v in vals.items())


def grid_world_lines(s: dict[str, Any] | None) -> list[str]:
    """calibration.md's section on the grid's own world, from :func:`~mmgrid.sweep.calibration.study.grid_world_summary`."""
    if s is None:
        return []
    other = " other" if s.get("is_replicate") is not None else ""
    where = (f"ranked among the {s['replicates']}{other} replicate worlds of planted size {s['size']:g}, which has the "
             "same knobs" if s["size"] is not None else "no planted size of this study has its knobs, so no ranks")
    if s.get("is_replicate") is not None:
        where += f" (it is replicate {s['is_replicate']} of that size: the same world seed and knobs)"
    lines = ["", f"The grid's own world (world seed {s['world_seed']}, its own `world.plant`), run through the same "
                 f"replicate pipeline and {where}: is the world a report was made on a typical draw?", "",
             "| estimate | the grid's world [95% interval] | rank among the replicates |", "|---|---|---|"]
    for d, v in s["lambda_star"].items():
        e = v["estimate"]
        lines.append(f"| {d} non-active lambda* | {as_float(e[0]):.2f} [{as_float(e[1]):.2f}, {as_float(e[2]):.2f}] "
                     f"| {v['rank'] or '-'} |")
    if s.get("t4_rho"):
        r = s["t4_rho"]
        lines.append(f"| rho(gap, non-active lambda*) | {as_float(r[0]):+.2f} [{as_float(r[1]):+.2f}, "
                     f"{as_float(r[2]):+.2f}] | {s.get('t4_rho_rank') or '-'} |")
    if s.get("t2_popular"):
        t = s["t2_popular"]
        lines.append(f"| Table 2 difference | {as_float(t[0]):+.4f} [{as_float(t[1]):+.4f}, {as_float(t[2]):+.4f}] | "
                     f"{s.get('t2_rank') or '-'} |")
    lines.append(f"| Figure 5 verdicts | lambda = 1 not the best: {'holds' if s['f5_not1'] else 'inconclusive'}; "
                 f"lambda* differs between domains: {'holds' if s['f5_varies'] else 'inconclusive'} | - |")
    return lines


def _own_world_what(cfg: GridConfig) -> str:
    """Whose coverage is measured against the own world: "the Table 2 difference's", "lambda*'s" or both."""
    who = [w for w, on in (("the non-active lambda*'s", own_world_sweeps(cfg)),
                           ("the Table 2 difference's", own_world_t2(cfg))) if on]
    return " and ".join(who)


def _own_world_who(cfg: GridConfig) -> str:
    n, r = own_world_count(cfg), cfg.sweeps.calibrate.replicates
    return "each replicate's" if n >= r else f"each of the first {n} replicates' (of {r})"


def _coverage(cov: Rate | None, of: str, expected: float) -> str:
    if cov is None:
        return "-"
    known = expected is not None and math.isfinite(expected)
    if of != "own world":
        return cov.text() + (f" ({expected:.0%} expected from the population value's own noise)" if known else "")
    return f"{cov.text()} (own world{f'; {expected:.0%} expected from its noise' if known else ''})"


def _num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.3f}"


def _bias(b: Bias | None) -> str:
    if b is None or not math.isfinite(b.bias):
        return "-"
    return f"{b.bias:+.3f}" + (f" (MCSE {b.mcse:.3f})" if math.isfinite(b.mcse) else "")


def power_curve(res: CalibrationResult, path: Path, power: float = 0.8) -> Path | None:
    """Rate of "holds" per finding against the planted size, with 2-MCSE error bars (PNG)."""
    # lazy: matplotlib (~0.5 s) only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as matplotlib above
    from scipy import stats as sps  # lazy: as matplotlib above (scipy ~0.3 s)

    series: dict[str, list[tuple[float, Rate]]] = {}
    for f in res.findings:
        if f.holds is not None and f.holds.n:
            series.setdefault(f.finding, []).append((f.size, f.holds))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    span = (max(res.sizes) - min(res.sizes)) or 1.0
    for i, (name, pts) in enumerate(series.items()):
        pts.sort(key=lambda x: x[0])
        dx = (i - (len(series) - 1) / 2) * 0.012 * span  # a small offset per finding: equal rates stay visible
        ci = [sps.binomtest(p[1].hits, p[1].n).proportion_ci(method="wilson") for p in pts]
        rate = [p[1].rate for p in pts]
        err = [[r - c.low for r, c in zip(rate, ci)], [c.high - r for r, c in zip(rate, ci)]]
        ax.errorbar([p[0] + dx for p in pts], rate, yerr=err, marker="o", capsize=3, label=name)
    ax.axhline(0.05, ls="--", c="grey", lw=0.8)
    ax.axhline(power, ls="--", c="grey", lw=0.8)
    ax.set_xlabel("planted size (0 = null world, 1 = preset world)")
    ax.set_ylabel('rate of "holds"')
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"power curve ({res.replicates} replicates per size)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def rolling_calibration_markdown(plan: RollingPlan, rows: list[dict[str, Any]], seconds: float) -> str:
    """The rolling calibration as Markdown: one row per (claim, planted drift) of
    :func:`mmgrid.sweep.calibration.rolling.summarize`."""
    lines = ["# mmgrid calibrate --rolling: the rolling deployment verdicts", "",
             f"{plan.replicates} replicate checkpoint world(s) per planted drift ({plan.periods} periods, "
             f"{plan.domains} domain(s), {plan.users} users per window, per-user noise {plan.noise:g}; drift 0 = "
             "no drift, lambda = 1 is best; drift d = the optimum runs d periods ahead of the latest checkpoint "
             f"every period). {METRIC}, every available strategy; pooled intervals over the (domain, window) "
             "cells (95%; the best strategy's at 1 - 0.05 / K over the K strategies compared). Rates carry their "
             "Monte Carlo standard error; MDE: the |difference| a replicate detects at 80% power at the level its "
             "verdict is judged at ((z_{1-alpha/2} + z_0.8) x the SE its "
             f"interval implies; 2.80 at 95%). {seconds:.0f} s in all.", "",
             "| claim | drift | holds (type-I error at drift 0, else power) | difference (mean, SD over replicates) | "
             "MDE (80%) | spread / SE | inconclusive with their MDE printed |", "|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['claim']} | {x['size']:g} | {x['holds_text']} | {x['diff_mean']:+.4f} ({x['diff_sd']:.4f}) "
                     f"| {x['mde_mean']:.4f} | {x['spread_ratio']:.1f} | {x['inconclusive_noted']}/{x['inconclusive']} |")
    lines += ["", "*spread / SE*: the SD of the replicates' differences over the mean SE their intervals imply (about "
              "1 when the intervals measure the variation from one world to the next). The pooled intervals are over "
              "the (domain, window) cells (`mmgrid.sweep.rolling.pooled_difference`): a window's own displacement "
              "of the optimum (`jitter`), shared by its users, is in them.",
              "", "The best strategy's verdict is selection-aware: each of the K strategies compared with latest is "
              "judged at the family level 1 - 0.05 / K (Bonferroni, Holm's first step), and the claim holds when one "
              "of them lies above 0; its MDE is at that level."]
    return "\n".join(lines)


def write_rolling_calibration(plan: RollingPlan, res: dict[str, Any], out: str | Path) -> Path:
    """``OUT/rolling_calibration.md`` from what :func:`mmgrid.sweep.calibration.rolling.run_rolling_calibration`
    returned."""
    path = Path(out) / "rolling_calibration.md"
    path.write_text(rolling_calibration_markdown(plan, res["rows"], res["seconds"]) + "\n")
    return path
