"""Markdown primitives of report.md and the console: a GitHub table of a DataFrame, the provenance
appendix (the registry ids behind each row of a table) and the lines shown under a finding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mmgrid.sweep.study_records import Finding
from mmgrid.sweep.tables import Provenance


def markdown_table(df: pd.DataFrame, fmt: str = "{:.3f}", index: bool = True, index_name: str = "") -> str:
    """A GitHub-Markdown table; MultiIndex columns are joined with a space; NaN shows as '-'."""
    cols = [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in df.columns]
    head = ([index_name or (df.index.name or "")] if index else []) + cols
    lines = ["| " + " | ".join(map(escape_cell, head)) + " |", "|" + "---|" * len(head)]
    for label, row in df.iterrows():
        cells = [cell_text(v, fmt) for v in row.tolist()]
        lines.append("| " + " | ".join(escape_cell(c) for c in ([str(label)] if index else []) + cells) + " |")
    return "\n".join(lines)


def escape_cell(text: str) -> str:
    """``text`` with its ``|`` escaped, so that it stays one cell."""
    return str(text).replace("|", "\\|")


def cell_text(v: Any, fmt: str) -> str:
    """One table cell: ``fmt`` for a float, an int as it is, '-' for None / NaN / inf."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if isinstance(v, (float, np.floating)):
        return fmt.format(float(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def provenance_markdown(title: str, prov: Provenance) -> str:
    """An appendix section listing the registry ids behind each row, rows and ids sorted (the same
    report whatever order the workers finished in)."""
    lines = [f"**{title}**", ""]
    for row, ids in sorted(prov.items(), key=lambda kv: str(kv[0])):
        ids = sorted(ids)
        shown = ", ".join(f"`{i}`" for i in ids[:40])
        more = f" (+{len(ids) - 40} more)" if len(ids) > 40 else ""
        lines.append(f"- {row}: {shown or '-'}{more}")
    return "\n".join(lines)


def finding_notes(f: Finding) -> list[str]:
    """The lines shown under a finding: its MDE note (inconclusive only) and its estimand's population value."""
    out = [f.note] if f.note else []
    if f.population:
        out.append(f"population value of this world and budget: {f.population}")
    return out
