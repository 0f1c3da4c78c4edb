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
    """Timestamps whose magnitude says another unit than the one expected (see mmgrid.data.timestamps)."""

    def __init__(self, path: str, line: int | None, value: int, looks_like: str = "seconds",
                 expected: str = "milliseconds", hint: str | None = None) -> None:  # fmt: skip
        where = f"{path}, line {line}" if line is not None else path
        if hint is None and expected == "seconds":
            hint = "Set data.timestamp_unit=ms (all milliseconds) or data.timestamp_unit=auto."
        elif hint is None and looks_like == "microseconds":
            hint = "Divide the file's timestamps by 1000 (mmgrid reads seconds or milliseconds only)."
        elif hint is None:
            hint = ("Multiply by 1000 in the file, or set data.timestamp_unit=s (all seconds) or "
                    "data.timestamp_unit=auto (convert values below 1e11 from seconds).")  # fmt: skip
        source = "data.timestamp_unit=s asks for" if expected == "seconds" else "Amazon 2023 files use"
        super().__init__(
            f"{where}: timestamp {value} looks like Unix {looks_like}, but {source} {expected}. {hint}"
        )
        self.path, self.line, self.value, self.looks_like = path, line, value, looks_like


class NegativeTimestampError(DataError):
    """A timestamp below zero: before 1970, so not the time of a review."""

    def __init__(self, path: str, line: int | None, value: int) -> None:
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(
            f"{where}: timestamp {value} is negative (before 1970-01-01); review timestamps are positive "
            "Unix times. Fix or delete that line."
        )
        self.path, self.line, self.value = path, line, value


class EmptyFileError(DataError):
    """A raw file with no record at all (0 bytes, an empty gzip stream, only blank lines, a bare header)."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(
            f"{path}: {what}, so there is nothing to read. An interrupted download or export? Write or "
            "download the file again, or remove it (and drop its domain from data.domains)."
        )
        self.path = path


class UnreadableFileError(DataError):
    """A raw file that cannot be read to its end: a truncated or corrupt gzip stream, an I/O error."""

    def __init__(self, path: str, line: int | None, reason: str, fix: str) -> None:
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(f"{where}: {reason}. {fix}")
        self.path, self.line, self.reason = path, line, reason


class NoUsableRecordsError(DataError):
    """Every record of a file was skipped as corrupt: the file has the wrong shape as a whole."""

    def __init__(self, path: str, skipped: int, line: int | None, reason: str) -> None:
        where = f"line {line}" if line is not None else "the first"
        super().__init__(
            f"{path}, {where}: no usable record: all {skipped} records were skipped as corrupt; the first "
            f"because {reason}. {_shape_hint(reason)}"
        )
        self.path, self.line, self.reason, self.skipped = path, line, reason, skipped


def _shape_hint(reason: str) -> str:
    """How to fix a file whose every record fails for ``reason``."""
    if "expected a JSON object" in reason:
        return ("Each line must be one JSON object with named fields ({\"parent_asin\": ..., ...}, the Amazon "
                "Reviews 2023 layout), not a JSON array or a bare value: convert the file.")  # fmt: skip
    if "timestamp" in reason:
        return ("Timestamps must be numbers of Unix milliseconds (e.g. 1656633600000), not text: convert the "
                "column in the file.")  # fmt: skip
    if "not valid JSON" in reason:
        return "This does not look like a JSON-lines file (one JSON object per line): check the file and its format."
    return "Check that this is a file of the configured data.source and kind (reviews vs meta), then fix it."


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
    "EmptyFileError",
    "EmptyPhaseError",
    "MissingFieldError",
    "MissingRawDataError",
    "NegativeTimestampError",
    "NoUsableRecordsError",
    "PreparedDataError",
    "TimestampUnitError",
    "UnknownDomainError",
    "UnreadableFileError",
]


class RecboleWheelError(DataError):
    """The RecBole wheel that should hold MovieLens-100K's atomic files cannot be used."""

    def __init__(self, path: str, reason: str, fix: str) -> None:
        super().__init__(f"{path}: {reason}. {fix}")
        self.path, self.reason = path, reason
