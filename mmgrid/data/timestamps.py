"""The unit of raw timestamps (``data.timestamp_unit``) and the range a Unix timestamp can have.

Amazon Reviews 2023 timestamps are Unix milliseconds. Magnitude tells the unit of any date
after 1973: seconds stay below 1e11 until the year 5138, milliseconds lie in [1e11, 1e14),
microseconds start at 1e14. So with ``ms`` a value below 1e11 is an error that says "seconds",
one at or above 1e14 an error that says "microseconds"; with ``auto`` values below 1e11 are
converted from seconds; with ``s`` every value is seconds, and one at or above 1e11 is an error
(it would be after the year 5138). A negative value is an error under every unit. Every error
names the file and the line of the first offending value.
"""

from __future__ import annotations

from typing import Any, Callable, Literal

import polars as pl

from mmgrid.data.errors import NegativeTimestampError, TimestampUnitError

TimestampUnit = Literal["ms", "s", "auto"]

# Below this a timestamp cannot be milliseconds of any date we care about (1e11 ms = 1973-03-03),
# while seconds stay below it until the year 5138: magnitude tells the unit.
SECONDS_BELOW = 100_000_000_000
# At or above this a value is not milliseconds (1e14 ms = year 5138) but microseconds (1e14 us = 1973).
MICROSECONDS_FROM = 100_000_000_000_000

LineOf = Callable[[dict[str, Any]], "int | None"]


def apply_timestamp_unit(df: pl.DataFrame, where: str, unit: TimestampUnit, line_of: LineOf,
                         hint: str | None = None) -> pl.DataFrame:  # fmt: skip
    """Check the raw ``timestamp`` column (Int64) and turn it into Unix milliseconds.

    Args:
        df: a frame with the file's ``timestamp`` values as read.
        where: the file, for messages.
        unit: ``ms``, ``s`` or ``auto`` (see the module docstring).
        line_of: the file's line number of an offending row (a dict of that row's columns).
        hint: replaces the "set data.timestamp_unit" advice (a source with a fixed unit).

    Raises:
        NegativeTimestampError: a value below 0.
        TimestampUnitError: a value whose magnitude says another unit.
    """
    ts = pl.col("timestamp")
    _raise_first(df.filter(ts < 0), lambda row: NegativeTimestampError(where, line_of(row), row["timestamp"]))
    if unit == "s":
        _raise_first(df.filter(ts >= SECONDS_BELOW), lambda row: TimestampUnitError(
            where, line_of(row), row["timestamp"], looks_like="milliseconds", expected="seconds",
            hint=hint))  # fmt: skip
        return df.with_columns(ts * 1000)
    _raise_first(df.filter(ts >= MICROSECONDS_FROM), lambda row: TimestampUnitError(
        where, line_of(row), row["timestamp"], looks_like="microseconds", hint=hint))  # fmt: skip
    if unit == "auto":
        return df.with_columns(pl.when(ts < SECONDS_BELOW).then(ts * 1000).otherwise(ts).alias("timestamp"))
    _raise_first(df.filter(ts < SECONDS_BELOW), lambda row: TimestampUnitError(
        where, line_of(row), row["timestamp"], looks_like="seconds", hint=hint))  # fmt: skip
    return df


def _raise_first(bad: pl.DataFrame, error: Callable[[dict[str, Any]], Exception]) -> None:
    if bad.height:
        raise error(bad.row(0, named=True))
