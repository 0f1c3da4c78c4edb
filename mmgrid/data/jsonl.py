"""Lazy, bounded-memory scanning of JSON-lines files (plain or gzipped) with polars.

The fast path is one ``pl.scan_ndjson`` with a fixed schema, collected with the streaming engine
(polars decompresses ``.gz`` itself, in chunks, with no temporary file of the decompressed text). Only when polars refuses the file (a
corrupt line, a field of the wrong type) does a slow Python pass run: it finds the bad lines,
raises :class:`CorruptLineError` in strict mode, or else writes the good lines to a temporary file
and records what was skipped.

A file as a whole is checked too, each with a named error that gives the file (and line): no
record at all (:class:`EmptyFileError`: 0 bytes, an empty gzip stream, blank lines only), a gzip
stream that is truncated or corrupt (:class:`UnreadableFileError`, with the line where it breaks),
and every record skipped (:class:`NoUsableRecordsError`, with the first one's reason: JSON arrays
as lines, timestamps as text, ...).
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable

import polars as pl

from mmgrid.data.errors import CorruptLineError, EmptyFileError, NoUsableRecordsError, UnreadableFileError

# Keep the first few skipped lines verbatim (file, line, reason) in the manifest.
MAX_REPORTED = 20

Validator = Callable[[dict[str, Any]], str | None]


@dataclass
class SkipLog:
    """Lines skipped while reading, for the manifest."""

    counts: dict[str, int] = field(default_factory=dict)  # file -> skipped lines
    examples: list[dict[str, Any]] = field(default_factory=list)  # first few: file, line, reason

    def add(self, path: str, line: int | None, reason: str) -> None:
        self.counts[path] = self.counts.get(path, 0) + 1
        if len(self.examples) < MAX_REPORTED:
            self.examples.append({"file": path, "line": line, "reason": reason})

    def total(self) -> int:
        return sum(self.counts.values())


class ScratchDir:
    """A temporary folder for cleaned copies of files with corrupt lines; removed on :meth:`close`."""

    def __init__(self, parent: str | Path | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="mmgrid-scratch-", dir=parent))
        self._n = 0

    def new_file(self, stem: str) -> Path:
        self._n += 1
        return self.path / f"{self._n:04d}-{stem}"

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


GZIP_MAGIC = b"\x1f\x8b"
# What reading a broken gzip stream raises (gzip.BadGzipFile is an OSError).
GZIP_ERRORS = (OSError, EOFError, zlib.error)


def is_gzip(path: Path) -> bool:
    """The file starts with the gzip magic bytes (what polars goes by too, whatever the suffix)."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_lines(path: Path) -> BinaryIO:
    """Open a plain or gzipped JSON-lines file for reading bytes line by line."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")  # type: ignore[return-value]


def collect_jsonl(
    path: Path,
    schema: dict[str, pl.DataType],
    validate: Validator,
    scratch: ScratchDir,
    strict: bool,
    skips: SkipLog,
    build: Callable[[pl.LazyFrame], pl.LazyFrame] = lambda lf: lf,
) -> pl.DataFrame:
    """Read a JSON-lines file with ``schema``; corrupt lines are skipped (counted) or raise.

    Args:
        path: the file (``.jsonl`` or ``.jsonl.gz``).
        schema: column -> dtype; keys absent from a record read as null.
        validate: returns None for a usable record (a parsed dict) or the reason it is not;
            used only on the slow path.
        scratch: where cleaned copies go (slow path only).
        strict: raise on the first corrupt line instead of skipping it.
        skips: collects skipped lines.
        build: the lazy query to run on the scan (projection, renames...), collected streaming.

    Returns:
        The collected result of ``build``.
    """
    try:
        df = build(pl.scan_ndjson(path, schema=schema)).collect(engine="streaming")
    except pl.exceptions.ComputeError:  # polars refuses the file as a whole: find the bad lines one by one
        try:
            cleaned = _clean_copy(path, validate, scratch, strict, skips)
        except GZIP_ERRORS as exc:
            raise unreadable(path, exc) from exc
        df = build(pl.scan_ndjson(cleaned, schema=schema, ignore_errors=True)).collect(engine="streaming")
    except OSError as exc:  # polars' own decompression: a truncated or corrupt gzip stream
        raise unreadable(path, exc) from exc
    if df.height == 0:
        check_has_records(path)
    return df


def check_has_records(path: Path) -> None:
    """Raise :class:`EmptyFileError` if ``path`` holds no non-blank line (error path: stops at the first)."""
    try:
        with open_lines(path) as src:
            if any(raw.strip() for raw in src):
                return
    except GZIP_ERRORS as exc:
        raise unreadable(path, exc) from exc
    if path.stat().st_size == 0:
        raise EmptyFileError(str(path), "the file is empty (0 bytes)")
    if is_gzip(path):
        raise EmptyFileError(str(path), "the gzip stream holds no data")
    raise EmptyFileError(str(path), "the file holds only blank lines")


def unreadable(path: Path, exc: BaseException) -> UnreadableFileError:
    """The named error for a file that cannot be read to its end, with the line where reading stops."""
    if not path.is_file():
        return UnreadableFileError(str(path), None, f"cannot be read ({exc})", "Check the path and its permissions.")
    if not is_gzip(path):
        return UnreadableFileError(str(path), None, f"cannot be read ({exc})",
                                   "Check the file and its permissions, then run again.")  # fmt: skip
    broken = gzip_break(path)
    if broken is None:  # the stream is sound: report the reader's own words
        return UnreadableFileError(str(path), None, f"cannot be read ({exc})", "Check the file, then run again.")
    lines, problem = broken
    kind = "truncated" if isinstance(problem, EOFError) else "corrupt"
    return UnreadableFileError(
        str(path), lines + 1, f"the gzip stream is {kind} here, after {lines} complete line(s) ({problem})",
        "An interrupted download? Download the file again (`gzip -t FILE` checks a copy).",
    )


def gzip_break(path: Path, chunk: int = 1 << 16) -> tuple[int, BaseException] | None:
    """Where a gzip file stops decompressing: (complete lines before it, the problem), or None if sound.

    Decompresses chunk by chunk; the chunk that fails is replayed byte by byte from a copy of the
    decompressor, so the lines counted are exactly those before the first bad byte.
    """
    lines, d = 0, zlib.decompressobj(31)
    with open(path, "rb") as f:
        while data := f.read(chunk):
            while data:
                before = d.copy()
                try:
                    lines += d.decompress(data).count(b"\n")
                except zlib.error as exc:
                    for i in range(len(data)):
                        try:
                            lines += before.decompress(data[i : i + 1]).count(b"\n")
                        except zlib.error as byte_exc:
                            return lines, byte_exc
                    return lines, exc
                data = b""
                if d.eof and d.unused_data.strip(b"\0"):  # another gzip member follows
                    data, d = d.unused_data, zlib.decompressobj(31)
    if not d.eof:
        return lines, EOFError("the stream ends before its end-of-stream marker")
    return None


def _clean_copy(path: Path, validate: Validator, scratch: ScratchDir, strict: bool, skips: SkipLog) -> Path:
    """Slow path: copy the parseable, valid lines of ``path`` to a new plain file."""
    out = scratch.new_file(path.name.removesuffix(".gz") + ".clean")
    kept, skipped = 0, 0
    first: tuple[int | None, str] = (None, "")
    with open_lines(path) as src, open(out, "wb") as dst:
        for no, raw in enumerate(src, start=1):
            if not raw.strip():
                continue
            reason = _line_problem(raw, validate)
            if reason is None:
                dst.write(raw if raw.endswith(b"\n") else raw + b"\n")
                kept += 1
                continue
            if strict:
                raise CorruptLineError(str(path), no, reason)
            skips.add(str(path), no, reason)
            skipped, first = skipped + 1, first if skipped else (no, reason)
    if kept == 0 and skipped:
        raise NoUsableRecordsError(str(path), skipped, *first)
    return out


def _line_problem(raw: bytes, validate: Validator) -> str | None:
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return f"not valid JSON: {exc.msg if hasattr(exc, 'msg') else exc}"
    if not isinstance(rec, dict):
        return f"expected a JSON object, got {_JSON_KIND.get(type(rec).__name__, type(rec).__name__)}"
    return validate(rec)


_JSON_KIND = {"list": "a JSON array", "str": "a JSON string", "int": "a number", "float": "a number",
              "bool": "true/false", "NoneType": "null"}  # fmt: skip


def find_line(path: Path, predicate: Callable[[dict[str, Any]], bool]) -> int | None:
    """Line number (1-based) of the first record for which ``predicate`` holds (error path only)."""
    with open_lines(path) as src:
        for no, raw in enumerate(src, start=1):
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict) and predicate(rec):
                return no
    return None


def check_number(rec: dict[str, Any], key: str) -> str | None:
    """Reason if ``rec[key]`` is present but not a number (bool excluded)."""
    v = rec.get(key)
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return None
    return f"field {key!r} should be a number, got {json.dumps(v)[:40]}"


def check_list(rec: dict[str, Any], key: str) -> str | None:
    """Reason if ``rec[key]`` is present but not a list."""
    v = rec.get(key)
    if v is None or isinstance(v, list):
        return None
    return f"field {key!r} should be a list, got {json.dumps(v)[:40]}"
