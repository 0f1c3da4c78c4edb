"""The grid's phases as time windows (MMGRid section 3.2: global, half-open UTC windows)."""

from __future__ import annotations

from mmgrid.config import parse_date_ms


def phase_windows(phases: dict[str, list[str | None]]) -> dict[str, tuple[int | None, int | None]]:
    """Phase name → half-open [start_ms, end_ms) window (None = open end)."""
    return {
        name: (
            None if b[0] is None else parse_date_ms(b[0], f"data.phases.{name}[0]"),
            None if b[1] is None else parse_date_ms(b[1], f"data.phases.{name}[1]"),
        )
        for name, b in phases.items()
    }
