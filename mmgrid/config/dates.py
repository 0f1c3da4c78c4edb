"""Dates in a grid YAML: ``YYYY-MM-DD`` strings (UTC) to Unix milliseconds."""

from __future__ import annotations

from datetime import datetime, timezone

from mmgrid.errors import ConfigError


def parse_date_ms(text: str, where: str) -> int:
    """``YYYY-MM-DD`` (UTC) → Unix milliseconds."""
    try:
        dt = datetime.strptime(str(text), "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise ConfigError(f"{where}: {text!r} is not a date of the form YYYY-MM-DD.") from exc
    return int(dt.timestamp() * 1000)
