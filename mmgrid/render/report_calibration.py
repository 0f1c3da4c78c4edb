"""The calibration study's results in the report: a typed record read from ``mmgrid calibrate``'s output
(``OUT/calibration.json``, :func:`mmgrid.sweep.calibration.study.write_record`) and its renderers for
report.md and report.html.

How the report finds the output (docs/report.md): ``mmgrid report --calibration DIR`` (DIR holds
calibration.json; an error before anything is written if it does not), else the run folder's own
``calibrate/`` beside the report's folder (``--out runs/demo/report`` reads ``runs/demo/calibrate/``) when
there is one; else the report has no calibration section.

Performance measures (Morris, White & Crowther, Stat Med 2019) per finding and planted size: the rate of
"holds" (type-I error where the population value is the null, power otherwise), the coverage of the
population value by the 95% intervals and the bias, each with its Monte Carlo standard error, and the
minimum detectable effect at 80% power from the replicates' mean interval width.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmgrid.errors import MmgridError
from mmgrid.render.report_html_encode import html_text, plotly_div

TITLE = "Calibration: type-I error, power, coverage and MDE (mmgrid calibrate)"
DEFAULT_DIR = "calibrate"  # the run folder's calibrate output, beside the report's folder


class CalibrationInputError(MmgridError):
    """The calibration output named for the report is missing or unreadable."""


@dataclass(frozen=True)
class CalibrationRow:
    """One finding at one planted size (a row of calibration.json's ``findings``)."""

    finding: str
    size: float
    population: float  # NaN: undefined
    is_null: bool
    holds: tuple[int, int, float, float] | None  # hits, n, rate, MCSE
    coverage: tuple[int, int, float, float] | None
    bias: tuple[float, float] | None  # bias, MCSE
    mde: float
    n: int
    # what coverage and bias are measured against: "configuration" (the population value) or "own world"
    # (each replicate's own world with more users); with "own world", the configuration's coverage beside it
    coverage_of: str = "configuration"
    coverage_config: tuple[int, int, float, float] | None = None


@dataclass
class CalibrationRecord:
    """A ``mmgrid calibrate`` output: every (finding, size) row, the design, where it was read."""

    path: str
    sizes: list[float]
    knobs: list[str]
    replicates: int
    seconds_per_replicate: float
    rows: list[CalibrationRow] = field(default_factory=list)

    def curve(self, finding: str) -> list[CalibrationRow]:
        """The power curve of ``finding``: its rows with a rate of "holds", by planted size."""
        return sorted((r for r in self.rows if r.finding == finding and r.holds is not None and r.holds[1]),
                      key=lambda r: r.size)


def find_calibration(out_dir: str | Path, given: str | Path | None = None) -> Path | None:
    """calibration.json of ``given`` (a folder or the file; must exist), else of the run folder's
    ``calibrate/`` beside ``out_dir``, else None."""
    if given is not None:
        p = Path(given)
        p = p / "calibration.json" if p.is_dir() else p
        if not p.is_file():
            raise CalibrationInputError(f"--calibration {given}: no calibration.json there. Run `mmgrid calibrate "
                                        f"CONFIG --out {given}` first, or leave --calibration out.")
        return p
    p = Path(out_dir).resolve().parent / DEFAULT_DIR / "calibration.json"
    return p if p.is_file() else None


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _rate(d: Any) -> tuple[int, int, float, float] | None:
    if not isinstance(d, dict):
        return None
    return int(d.get("hits") or 0), int(d.get("n") or 0), _num(d.get("rate")), _num(d.get("mcse"))


def read_calibration(path: str | Path) -> CalibrationRecord:
    """The typed record of a calibration.json (a named error when it is not one)."""
    try:
        data = json.loads(Path(path).read_text())
        rows = [CalibrationRow(str(f["finding"]), _num(f["size"]), _num(f.get("population")), bool(f.get("is_null")),
                               _rate(f.get("holds")), _rate(f.get("coverage")),
                               (_num(f["bias"].get("bias")), _num(f["bias"].get("mcse")))
                               if isinstance(f.get("bias"), dict) else None,
                               _num(f.get("mde")), int(f.get("n") or 0), str(f.get("coverage_of") or "configuration"),
                               _rate(f.get("coverage_config")))
                for f in data["findings"]]
        return CalibrationRecord(str(path), [_num(s) for s in data.get("sizes", [])], list(data.get("knobs", [])),
                                 int(data.get("replicates") or 0), _num(data.get("seconds_per_replicate")), rows)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CalibrationInputError(f"{path}: not a `mmgrid calibrate` output ({type(exc).__name__}: {exc}). "
                                    "Rerun `mmgrid calibrate`, or point --calibration at its --out folder.") from exc


# --------------------------------------------------------------------------- text


def _fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}f}" if math.isfinite(v) else "-"


def rate_text(r: tuple[int, int, float, float] | None) -> str:
    """``85% (MCSE 8%, 17/20)``; "-" without one."""
    if r is None or not r[1]:
        return "-"
    return f"{100 * r[2]:.0f}% (MCSE {100 * r[3]:.0f}%, {r[0]}/{r[1]})"


def row_cells(r: CalibrationRow) -> list[str]:
    """A row's cells: finding, size, population value, null?, type-I error or power, coverage, bias, MDE, n."""
    what = "type-I error" if r.is_null else "power"
    holds = f"{what} {rate_text(r.holds)}" if r.holds is not None and r.holds[1] else "-"
    bias = f"{r.bias[0]:+.3f} (MCSE {_fmt(r.bias[1])})" if r.bias is not None and math.isfinite(r.bias[0]) else "-"
    cov = rate_text(r.coverage)
    if r.coverage_of == "own world" and r.coverage is not None:
        cov += " of each world's own value" + (f"; {rate_text(r.coverage_config)} of the configuration's"
                                                if r.coverage_config is not None else "")
    return [r.finding, f"{r.size:g}", _fmt(r.population), "yes" if r.is_null else "no", holds,
            cov, bias, _fmt(r.mde), str(r.n)]


HEADER = ["finding", "planted size", "population value", "null?", "rate of holds", "coverage of 95% intervals",
          "bias", "MDE (80% power)", "replicates"]


def intro(rec: CalibrationRecord) -> str:
    """One paragraph: the design and what each column is."""
    return (f"From `{rec.path}`: {rec.replicates} replicate world(s) per planted size "
            f"({', '.join(f'{s:g}' for s in rec.sizes)}; knobs {', '.join(rec.knobs) or '-'}; size 0 = the null world), "
            f"{_fmt(rec.seconds_per_replicate, 0)} s per replicate. Rate of \"holds\": the type-I error where the "
            "population value is the estimand's null, the power otherwise; rates with their Monte Carlo standard "
            "error (MCSE = sqrt(p (1 - p) / R)); bias = mean(estimate - population value) with its MCSE; MDE = "
            "2.80 x the SE the replicates' mean 95% interval implies (docs/calibration.md).")


def calibration_markdown(rec: CalibrationRecord) -> list[str]:
    """report.md's calibration section (lines)."""
    lines = [intro(rec), "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rec.rows]
    return [*lines, ""]


def calibration_html(rec: CalibrationRecord) -> str:
    """report.html's calibration section: the power curve per finding (rate of "holds" against the planted
    size, error bars +- 2 MCSE clipped to [0, 100]%) and the table of every row."""
    import plotly.graph_objects as go  # lazy: plotly only for report.html

    fig = go.Figure()
    for f in dict.fromkeys(r.finding for r in rec.rows):
        pts = rec.curve(f)
        if not pts:
            continue
        holds = [p.holds for p in pts if p.holds is not None]  # all of them: curve() keeps rows with a rate
        y = [100 * h[2] for h in holds]
        hi = [min(100.0, v + 200 * h[3]) - v for v, h in zip(y, holds)]
        lo = [v - max(0.0, v - 200 * h[3]) for v, h in zip(y, holds)]
        fig.add_trace(go.Scatter(x=[p.size for p in pts], y=y, mode="lines+markers", name=f,
                                 error_y=dict(type="data", array=hi, arrayminus=lo, visible=True),
                                 text=[rate_text(p.holds) for p in pts], hovertemplate="%{text}<extra>" + f + "</extra>"))
    for level, name in ((5, "5%"), (80, "80%")):
        fig.add_hline(y=level, line=dict(dash="dash", color="grey", width=1), annotation_text=name)
    fig.update_layout(height=380, xaxis_title="planted size (0 = null world)", yaxis_title='rate of "holds" (%)',
                      yaxis_range=[-3, 103], title="Power curve")
    plot = plotly_div(fig, "calibration-power", {"responsive": True, "displaylogo": False})
    head = "".join(f"<th>{html_text(h)}</th>" for h in HEADER)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row_cells(r)) + "</tr>" for r in rec.rows)
    return (f"<p>{html_text(intro(rec))}</p><div class=\"fig\">{plot}</div>"
            "<p>Error bars: +- 2 MCSE of the rate (clipped to 0-100%).</p>"
            f'<div class="scroll"><table class="t" id="calibration-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")
