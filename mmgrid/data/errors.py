"""Named errors of the data layer. Each says what went wrong, where, and how to fix it."""

from __future__ import annotations

import difflib

from mmgrid.errors import ConfigError, DataError


class CorruptLineError(DataError):
    """A JSON line (or CSV row) that cannot be parsed, or whose fields have the wrong type."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(
            f"{path}, line {line}: corrupt record ({reason}). Fix or delete that line, or run without "
            "--strict (data.strict=false) to skip corrupt lines and count them in manifest.json."
        )
        self.path, self.line, self.reason = path, line, reason


class MissingFieldError(DataError):
    """A required field is absent from a record (or from every record of a file)."""

    def __init__(self, path: str, field: str, line: int | None = None, accepted: tuple[str, ...] = ()) -> None:
        where = f"{path}, line {line}" if line is not None else f"{path} (every record)"
        alt = f" (accepted names: {', '.join(accepted)})" if accepted else ""
        super().__init__(
            f"{where}: required field {field!r}{alt} is missing. Add it, or check that this is an Amazon "
            "Reviews 2023 file of the right kind (reviews vs meta)."
        )
        self.path, self.field, self.line = path, field, line


class TimestampUnitError(DataError):
    """Timestamps look like Unix seconds where milliseconds are expected."""

    def __init__(self, path: str, line: int | None, value: int) -> None:
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(
            f"{where}: timestamp {value} looks like Unix seconds, but Amazon 2023 files use milliseconds. "
            "Multiply by 1000 in the file, or set data.timestamp_unit=s (all seconds) or "
            "data.timestamp_unit=auto (convert values below 1e11 from seconds)."
        )
        self.path, self.line, self.value = path, line, value


class UnknownDomainError(DataError):
    """A configured domain (category) has no raw file under data.root."""

    def __init__(self, domain: str, root: str, known: list[str]) -> None:
        close = difflib.get_close_matches(domain, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        super().__init__(
            f"data.domains: unknown category {domain!r}: no review file for it under {root}.{hint} "
            f"Found: {', '.join(known) or 'none'}. Fix data.domains or data.root."
        )
        self.domain, self.known = domain, known


class EmptyPhaseError(DataError):
    """A phase has no interactions (or no examples) for a domain after filtering."""

    def __init__(self, domain: str, phase: str, what: str = "interactions") -> None:
        super().__init__(
            f"domain {domain!r}, phase {phase!r}: no {what} left after filtering (dedupe, k-core, min_date). "
            "Move the phase boundaries in data.phases, lower data.kcore, or drop the domain from data.domains."
        )
        self.domain, self.phase = domain, phase


class MissingRawDataError(DataError):
    """data.root holds no raw files of the configured source."""


class PreparedDataError(DataError):
    """A prepared dataset folder is missing or incomplete."""


__all__ = [
    "ConfigError",
    "CorruptLineError",
    "DataError",
    "EmptyPhaseError",
    "MissingFieldError",
    "MissingRawDataError",
    "PreparedDataError",
    "TimestampUnitError",
    "UnknownDomainError",
]
