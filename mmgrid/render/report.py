"""``mmgrid report``: DIR/report.md with PNG figures and Markdown tables (and DIR/report.html), from the registry.

The studies compute first (:func:`mmgrid.sweep.study_results.compute_study_results`: one typed
result per section); this module only renders them. Sections: Table 2 (baselines), Figure 2 and
pairwise task-vector diagnostics, Figures 3-4 (cross-domain), Figure 5 (temporal lambda curves with
lambda* per group), Tables 3-4 and the regression (lambda* prediction, Spearman's rho), the Orbit
Pareto plot, a glossary and an appendix naming the registry ids behind every table row.

A section whose inputs are missing says so. A section that fails stops the report with a
:class:`~mmgrid.sweep.study_results.ReportSectionError` before anything is written; with
``keep_going`` the other sections are written, the failed one is marked, and
:class:`ReportIncomplete` is raised after the files are in place. Every file is staged and renamed
into place (:mod:`mmgrid.render.report_files`), so a failure never leaves a half report.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.errors import MmgridError
from mmgrid.render import figures as fg
from mmgrid.render.markdown import finding_notes, markdown_table, provenance_markdown
from mmgrid.render.report_calibration import TITLE as CALIBRATION_TITLE
from mmgrid.render.report_calibration import calibration_markdown, find_calibration, read_calibration
from mmgrid.render.report_files import StagedFiles
from mmgrid.render.report_rolling import TITLE as ROLLING_TITLE
from mmgrid.render.report_rolling import rolling_markdown, rolling_results
from mmgrid.render.report_temporal import README_FIGURE, render_prediction, render_temporal  # noqa: F401
from mmgrid.runtime.progress import progress as progress_bar
from mmgrid.sweep import evidence as ev
from mmgrid.sweep import tables as tb
from mmgrid.sweep.study_results import (FINDINGS, GLOSSARY, SECTION_TITLES, BaselineResults, CrossDomainResults,  # noqa: F401
                                        DiagnosticsResults, MissingInputs, ParetoResults, ReportSectionError, Section,
                                        StudyResults, compute_study_results, pareto_points)

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset


class ReportIncomplete(MmgridError):
    """``--keep-going``: the report was written, but some sections failed (named in the message)."""


@dataclass
class Report:
    """What a report is made of while it is written (figures go to ``out``: the staging folder)."""

    out: Path
    parts: list[str] = field(default_factory=list)
    provenance: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def add(self, *text: str) -> None:
        self.parts.extend(text)

    def figure(self, path: Path, caption: str) -> None:
        self.figures.append(path.name)
        self.add(f"![{caption}]({path.name})", "", f"*{caption}*", "")

    def table(self, df: pd.DataFrame, title: str, prov: dict[str, list[str]] | None = None, fmt: str = "{:.3f}") -> None:
        self.add(markdown_table(df, fmt), "")
        if prov:
            self.provenance.append(provenance_markdown(title, prov))
            self.add(f"<sub>Registry ids behind each row: appendix, *{title}*.</sub>", "")


def write_report(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", out_dir: str | Path,
                 diagnostics: bool = True, html: bool = False, keep_going: bool = False,
                 calibration: str | Path | None = None) -> Path:
    """Write ``out_dir/report.md`` (and ``report.html`` with ``html``) and their figures from the registry.

    Args:
        cfg: the grid.
        registry: an open registry.
        prepared: the prepared dataset.
        out_dir: output folder (created).
        diagnostics: compute Figure 2 and the pairwise task-vector diagnostics (loads every trained
            checkpoint once).
        html: also write the self-contained interactive page ``report.html``.
        keep_going: a failing section is marked in the report instead of stopping it; the report is
            written and :class:`ReportIncomplete` raised.
        calibration: a ``mmgrid calibrate`` output folder (or its calibration.json) whose results the report
            shows; None: the run folder's ``calibrate/`` beside ``out_dir`` where there is one
            (:func:`mmgrid.render.report_calibration.find_calibration`).

    Returns:
        The path of report.md.

    Raises:
        ReportSectionError: a section failed (without ``keep_going``); nothing was written.
        ReportIncomplete: with ``keep_going``, after writing, when a section failed.
        ReportWriteError: a file could not be written; the previous report is unchanged.
    """
    cal_path = find_calibration(out_dir, calibration)  # a named error before anything is computed or written
    cal = read_calibration(cal_path) if cal_path is not None else None
    n = len(SECTION_TITLES) - (0 if diagnostics else 1)
    with progress_bar(total=n, desc="report", unit="section", leave=True, min_interval=0.0) as bar:
        results = compute_study_results(cfg, registry, prepared, diagnostics, keep_going,
                                        on_section=lambda title: (bar.set_postfix(section=title.split(":")[0]), bar.update(1)))
    if cal is not None:
        results.extras["calibration"] = cal
    rolling = rolling_results(cfg, registry)
    if rolling is not None:
        results.extras["rolling"] = rolling
    view = None
    if html:
        from mmgrid.sweep.grid_view import grid_view  # lazy: the HTML page's grid (pandas only) is read only with --html

        view = grid_view(cfg, registry)
    with StagedFiles(out_dir) as files:
        text = render_markdown(results, Path(files.stage), keep_going)
        files.write_text("report.md", text)
        if html:
            from mmgrid.render.report_html import render_html  # lazy: plotly (~0.3 s) only for --html

            files.write_text("report.html", render_html(results, view))
        files.commit()
    path = Path(out_dir) / "report.md"
    lines = console_findings(results)
    if lines:
        print("Findings (95% intervals; details in report.md):", *lines, sep="\n")
    lines = console_continual(results)
    if lines:
        print(*lines, sep="\n")
    if results.failed:
        names = "; ".join(f"{s.title} ({s.error})" for s in results.failed)
        raise ReportIncomplete(f"{len(results.failed)} report section(s) failed: {names}. The other sections were "
                               f"written to {path} with the failed ones marked; fix the cause and rerun.")
    return path


def render_markdown(results: StudyResults, out: Path, keep_going: bool = False) -> str:
    """report.md's text from the typed results; figures are drawn into ``out``."""
    cfg = results.cfg
    rep = Report(out)
    rep.add(f"# mmgrid report: grid `{cfg.name}`", "",
            f"Registry `{results.registry_root}`, prepared data fingerprint `{results.fingerprint}`, "
            f"grid hash `{cfg.hash()}`, written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
            f"Domains: {', '.join(results.domains)}. Recall and NDCG in % everywhere; test window `{cfg.eval.split}`. "
            "Terms: see the *Glossary* at the end.", "",
            f"Every metric is a mean over test users and training seeds ({_seeds_text(cfg)}) with its 95% "
            "interval in brackets: a percentile bootstrap that resamples users and, independently, seeds "
            "(docs/studies.md, *Statistics*). Paired comparisons give the mean per-user difference with its "
            "interval and a two-sided sign-flip randomization p; corrected p-values are Holm's.", "")
    if results.failed:
        rep.add("**This report is incomplete: " + ", ".join(f"*{s.title}*" for s in results.failed)
                + " failed (marked below).**", "")
    rep.add("## Findings", "", *findings_lines(results))
    for key, section in results.sections.items():
        _render_section(rep, section, RENDERERS[key], keep_going)
    cal = results.get("calibration")
    if cal is not None:
        rep.add('<a id="calibration"></a>', "", f"## {CALIBRATION_TITLE}", "", *calibration_markdown(cal))
    rolling = results.get("rolling")
    if rolling is not None:
        lines, figs = rolling_markdown(rolling, out)
        rep.figures += figs
        rep.add('<a id="rolling"></a>', "", f"## {ROLLING_TITLE}", "", *lines)
    rep.add("## Glossary", "", *(f"- **{term}**: {text}" for term, text in GLOSSARY), "")
    rep.add("## Appendix: provenance", "",
            "Each row's numbers were read from registry evaluations of these checkpoint ids or merge-recipe "
            "hashes (`mmgrid query`, `reg.results(recipe_hash=...)`, `reg.lineage(id)`).", "")
    rep.add(*(p + "\n" for p in rep.provenance))
    return "\n".join(rep.parts)


def section_markdown(key: str, result: Any, out: str | Path) -> str:
    """One section's report.md text (its figures drawn into ``out``): what the ``analysis/`` scripts print."""
    rep = Report(Path(out))
    RENDERERS[key](rep, result)
    return "\n".join(rep.parts)


def _render_section(rep: Report, section: Section, render: Callable[[Report, Any], None], keep_going: bool) -> None:
    rep.add(f'<a id="{section.key}"></a>', "", f"## {section.title}", "")
    if section.missing is not None:
        rep.add(f"_Not available: {section.missing}_", "")
        return
    if section.error is not None:
        rep.add(f"**FAILED: this section could not be computed: {section.error}** (the command exited non-zero; "
                "the traceback was printed).", "")
        return
    start = len(rep.parts)
    try:
        render(rep, section.result)
    except OSError:
        raise  # a full disk or unwritable folder is the report's failure, not the section's
    except Exception as exc:  # noqa: BLE001 - named: the section, the error, its traceback
        print(f"mmgrid report: section {section.title!r} failed to render:\n{traceback.format_exc()}", file=sys.stderr)
        if not keep_going:
            raise ReportSectionError(section.title, exc) from exc
        del rep.parts[start:]
        section.error = f"{type(exc).__name__}: {exc}"
        rep.add(f"**FAILED: this section could not be drawn: {section.error}** (the command exited non-zero).", "")


def findings_lines(results: StudyResults) -> list[str]:
    """One verdict line per paper finding, in the order of :data:`FINDINGS`, linking to its section."""
    got = results.findings()
    lines = ["Each of the papers' findings, judged from a 95% interval of its effect: **holds** (the interval "
             "lies on the claimed side), **does not hold** (on the other side) or **inconclusive** (it "
             "straddles no effect). Evidence in parentheses; each links to the section with its tables.", ""]
    for key, where, claim in FINDINGS:
        f = got.get(key)
        if f is None:
            lines.append(f"- *not evaluated* at 95%: {where}: {claim} (its inputs are missing; see the section)")
        else:
            lines.append(f"- **{f.verdict}** at 95%: {where}: {claim} ({f.evidence}; [evidence](#{f.section}))")
            lines += [f"  - {text}" for text in finding_notes(f)]
    cd = results.get("cross_domain")
    if cd is not None and cd.seeds and len(cd.seeds) < len(cd.all_seeds):
        lines.append(f"- _The cross-domain study (Figure 4) ran on training seed(s) {', '.join(map(str, cd.seeds))} only._")
    return [*lines, ""]


def console_findings(results: StudyResults) -> list[str]:
    """The findings as the console prints them after a report: verdict, claim, and the notes."""
    got = results.findings()
    lines = []
    for key, where, claim in FINDINGS:
        f = got.get(key)
        if f is not None:
            lines.append(f"  {f.verdict:>13}  {where}: {claim}")
            lines += [f"{'':17}{text}" for text in finding_notes(f)]
    return lines


def console_continual(results: StudyResults) -> list[str]:
    """Table 3's continual-merging rows as the console prints them after a report: all users, every domain's
    users pooled, each strategy's mean and its difference to lambda = 1 (Holm p); or how to record them."""
    pred = results.get("prediction")
    c = getattr(pred, "continual", None)
    if c is None:
        return []
    if c.empty:
        return [f"Table 3, continual merging: {c.how}"]
    if c.pooled is None or c.pooled.empty:
        return []
    short = dict(tb.METRICS).get(c.metric, c.metric)
    lines = [f"Table 3, continual merging ({short} in %, all users of every domain pooled, 95% intervals; "
             "minus lambda = 1 in % points, Holm p):"]
    for r in c.pooled.itertuples():
        vs = ("reference" if not pd.notna(r.diff) or r.strategy.startswith("lambda = 1") else
              f"{r.diff:+.2f} [{r.diff_low:+.2f}, {r.diff_high:+.2f}], p {ev.fmt_p(r.p_holm)}")
        lines.append(f"  {r.strategy:<28} {_ci(r.mean, r.ci_low, r.ci_high, '{:.2f}'):<22}  {vs}")
    return lines


# --------------------------------------------------------------------------- sections


def _seeds_text(cfg: GridConfig) -> str:
    seeds = getattr(cfg.train, "seed_list", None) or [cfg.train.seed]
    return f"training seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _table2(rep: Report, r: BaselineResults) -> None:
    rep.add("Rows: paradigms (SASRec and most-popular as references); R = Recall, N = NDCG, in %, "
            "mean [95% interval] over test users and seeds.", "")
    rep.table(r.table, "Table 2", r.provenance)
    if not r.has_intervals:
        rep.add("_No per-user values in this registry: the cells are recorded means without intervals "
                "(re-run `mmgrid eval` to record them)._", "")
    for short, wide in r.comparison_tables.items():
        rep.add(f"Paired per user, {short} (in % points): paradigm minus reference, mean [95% interval], "
                "Holm-corrected p over the table's comparisons in parentheses.", "")
        rep.table(wide, f"Table 2 comparisons ({short})")


def _diagnostics(rep: Report, r: DiagnosticsResults) -> None:
    rep.figure(fg.figure2_norms(r.norms, rep.out / "figure2_norms.png"),
               "Figure 2: L1 norm of task vectors (theta - start model) per paradigm, domain and period "
               "(exact values: a norm of stored weights has no sampling interval)")
    rep.table(r.norm_table, "Figure 2 (L1 norms)", r.norm_provenance, fmt="{:.4g}")
    if not r.pairs.empty:
        rep.add("Between domains' last-stage task vectors: cosine, sign dissimilarity (share of entries whose "
                "sign differs where the other vector is nonzero, both ways averaged, Orbit Eq. 1) and GCWM "
                "geometry conflict (1 - Bures fidelity of the updates' covariances; 0 = same geometry).", "")
        pairs = r.pairs
        show = pairs.set_index(pairs["paradigm"] + " / " + pairs["domain_i"] + "+" + pairs["domain_j"])
        rep.table(show[["cosine", "sign_dissimilarity", "geometry_conflict"]], "Task-vector conflict",
                  {i: [x.id_i, x.id_j, x.base_i, x.base_j] for i, x in zip(show.index, show.itertuples())})


def _cross_domain(rep: Report, r: CrossDomainResults) -> None:
    if r.seeds and len(r.seeds) < len(r.all_seeds):
        rep.add(f"**This study ran on training seed {', '.join(map(str, r.seeds))} only** (of {len(r.all_seeds)}: "
                f"{', '.join(map(str, r.all_seeds))}), to keep the budget: its intervals resample users only.", "")
    m = r.metric.upper()
    if not r.heat.empty:
        rep.figure(fg.figure3_heatmaps(r.heat, rep.out / "figure3_heatmaps.png"),
                   f"Figure 3: % change of {m} on the row domain after merging with the column domain "
                   "(original base, alpha = 0.5) against its own t2 checkpoint; the cells' 95% intervals are in "
                   "the summary table below and, per cell, in report.html")
    if r.rel["alpha"].notna().any():
        rep.figure(fg.figure4_alpha(r.rel, rep.out / "figure4_alpha.png", r.errors),
                   "Figure 4: joint % change (mean over both domains and all pairs) against alpha, per base; "
                   "error bars: 95% bootstrap over users")
    rep.add(f"Mean % change of {m} (all users) over pairs, evaluated domains and alphas "
            "[95% interval over users]:", "")
    rep.table(r.summary, "Cross-domain summary", r.summary_provenance, fmt="{:+.2f}")
    order = r.orderings
    if not order.empty:
        show = order.set_index(order["paradigm"] + " / " + order["method"] + ": " + order["better"] + " - "
                               + order["worse"])
        show = pd.DataFrame({f"{m} difference (% points)": [ev.fmt_ci(x.diff, x.ci_low, x.ci_high, sign=True)
                                                            for x in order.itertuples()],
                             "p (Holm)": [ev.fmt_p(v) for v in order["p_holm"]],
                             "examples / cells": [f"{x.n_users} / {x.n_cells}" for x in order.itertuples()]},
                            index=show.index)
        rep.add("Base orderings of MMGRid Fig. 4, paired per user over every (pair, evaluated domain, alpha) "
                "evaluated with both bases:", "")
        rep.table(show, "Base orderings")


def _pareto(rep: Report, r: ParetoResults) -> None:
    pts = r.points
    rep.figure(fg.pareto_orbit(pts, rep.out / "orbit_pareto.png"),
               "Text retention (exp(base text loss - text loss) = base ppl / ppl) against Recall@10 (%), per variant; "
               "error bars: 95% intervals of the mean over domains (Recall@10; the text loss of the one held-out text "
               "set is recorded without an interval); the unregularized variant is the open circle")
    show = pts.set_index(pts["variant"] + " / " + pts["paradigm"])
    table = pd.DataFrame({"regularizer": show["regularizer"],
                          "text retention [95%]": [_ci(a, b, c, "{:.3f}") for a, b, c in
                                                   zip(show["text_retention"], show["text_retention_low"],
                                                       show["text_retention_high"])],
                          "R@10 (%) [95%]": [_ci(a, b, c, "{:.2f}") for a, b, c in
                                             zip(show["recall@10"], show["recall@10_low"], show["recall@10_high"])]},
                         index=show.index)
    rep.table(table, "Orbit Pareto", {i: ids for i, ids in zip(show.index, pts["ids"])})


def _ci(v: float, lo: float, hi: float, fmt: str) -> str:
    if not pd.notna(v):
        return "-"
    return fmt.format(v) + (f" [{fmt.format(lo)}, {fmt.format(hi)}]" if pd.notna(lo) and pd.notna(hi) else "")


RENDERERS: dict[str, Callable[[Report, Any], None]] = {
    "table2": _table2, "diagnostics": _diagnostics, "cross_domain": _cross_domain,
    "temporal": render_temporal, "prediction": render_prediction, "pareto": _pareto}
