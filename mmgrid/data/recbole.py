"""RecBole atomic files as a source: ``<name>.inter`` and ``<name>.item``.

Atomic files are tab-separated with a typed header (``user_id:token  item_id:token
rating:float  timestamp:float``); RecBole timestamps are Unix seconds and are turned into
milliseconds here. ``item_id`` plays the part of Amazon's ``parent_asin``, and the ``.item``
column named by ``data.recbole_text_field`` becomes the item title and text, so any RecBole
dataset maps to the same prepared format.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import polars as pl

from mmgrid.data.errors import (CorruptLineError, EmptyFileError, MissingFieldError, NoUsableRecordsError,
                                RecboleWheelError)
from mmgrid.data.jsonl import SkipLog
from mmgrid.fileio.atomic import swap_dir
from mmgrid.data.timestamps import apply_timestamp_unit

SECONDS_HINT = "RecBole atomic files hold Unix seconds: convert the column to seconds in the file."


def atomic_files(root: Path) -> dict[str, dict[str, Path]]:
    """Dataset name → {"inter": path, "item": path} for every ``*.inter`` under root."""
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(root.rglob("*.inter")):
        entry = {"inter": p}
        item = p.with_suffix(".item")
        if item.exists():
            entry["item"] = item
        out[p.stem] = entry
    return out


def _read_atomic(path: Path) -> pl.DataFrame:
    try:
        df = pl.scan_csv(path, separator="\t", quote_char=None, infer_schema=False).collect(engine="streaming")
    except pl.exceptions.NoDataError as exc:
        raise EmptyFileError(str(path), "the file is empty (no header, no rows)") from exc
    if df.height == 0:
        raise EmptyFileError(str(path), "the file has a header but no rows")
    return df.rename({c: c.split(":")[0] for c in df.columns})


def read_inter(path: str | Path, *, strict: bool = False, skips: SkipLog | None = None) -> pl.DataFrame:
    """Read a ``.inter`` file.

    Returns:
        ``user_id``, ``parent_asin`` (the item_id), ``rating`` (Float64, null if absent),
        ``timestamp`` (Int64 milliseconds).
    """
    path = Path(path)
    skips = skips if skips is not None else SkipLog()
    df = _read_atomic(path)
    for col in ("user_id", "item_id", "timestamp"):
        if col not in df.columns:
            raise MissingFieldError(str(path), col)
    rating = pl.col("rating").cast(pl.Float64, strict=False) if "rating" in df.columns else pl.lit(None, pl.Float64)
    out = df.with_row_index("_row").select(
        "_row",
        "user_id",
        pl.col("item_id").alias("parent_asin"),
        rating.alias("rating"),
        pl.col("timestamp").cast(pl.Float64, strict=False).alias("timestamp"),  # seconds until checked below
    )
    bad = out.filter(pl.col("timestamp").is_null() | pl.col("user_id").is_null() | pl.col("parent_asin").is_null())
    if bad.height:
        first = int(bad.get_column("_row")[0]) + 2  # header is line 1
        if strict:
            raise CorruptLineError(str(path), first, "empty id or timestamp not a number")
        if bad.height == out.height:
            raise NoUsableRecordsError(str(path), bad.height, first, "an id is empty or the timestamp is not a number")
        for row in bad.get_column("_row").to_list():
            skips.add(str(path), int(row) + 2, "empty id or timestamp not a number")
        out = out.filter(~pl.col("_row").is_in(bad.get_column("_row").implode()))
    out = apply_timestamp_unit(out, str(path), "s", lambda row: int(row["_row"]) + 2, hint=SECONDS_HINT)
    return out.with_columns(pl.col("timestamp").round().cast(pl.Int64)).drop("_row")


def read_item(path: str | Path, text_field: str) -> pl.DataFrame:
    """Read a ``.item`` file.

    Returns:
        ``parent_asin`` (the item_id) and ``title`` (the text field), ready for
        :func:`mmgrid.data.amazon.item_table`.
    """
    path = Path(path)
    df = _read_atomic(path)
    for col in ("item_id", text_field):
        if col not in df.columns:
            raise MissingFieldError(
                str(path), col, accepted=tuple(c for c in df.columns if c != "item_id") if col == text_field else ()
            )
    return df.select(pl.col("item_id").alias("parent_asin"), pl.col(text_field).alias("title"))


# MovieLens-100K as shipped in the RecBole 1.2.1 wheel (a zip archive on PyPI): only these two members are
# ever read from it, and each is written under a name fixed here, never one taken from the archive.
RECBOLE_REQUIREMENT = "recbole==1.2.1"
RECBOLE_WHEEL = "recbole-1.2.1-py3-none-any.whl"
RECBOLE_WHEEL_SHA256 = "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407"
ML100K_MEMBERS = {
    "ml-100k.inter": "recbole/dataset_example/ml-100k/ml-100k.inter",
    "ml-100k.item": "recbole/dataset_example/ml-100k/ml-100k.item",
}
ML100K_MAX_BYTES = 16 * 2**20  # the members are 1.9 MB and 67 kB; anything larger is not that file


def download_recbole_wheel(cache: str | Path, runner=None) -> Path:
    """``pip download`` the RecBole 1.2.1 wheel into ``cache`` (reused when already there and intact).

    Only a built wheel is accepted (``--only-binary=:all:``, ``--no-deps``): pip never builds or runs
    anything of the package, and the file is checked against its pinned sha256.

    Raises:
        RecboleWheelError: pip failed (no network?) or the file is not the pinned wheel.
    """

    cache = Path(cache)
    wheel = cache / RECBOLE_WHEEL
    if not wheel.exists():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir",
               "--quiet", RECBOLE_REQUIREMENT, "-d", str(cache)]
        run = runner or (lambda c: subprocess.run(c, capture_output=True, text=True, timeout=600))
        done = run(cmd)
        if getattr(done, "returncode", 1) != 0 or not wheel.exists():
            tail = (getattr(done, "stderr", "") or "").strip().splitlines()[-1:] or ["no output"]
            raise RecboleWheelError(
                str(wheel), f"`{' '.join(cmd[2:])}` did not produce the wheel ({tail[0]})",
                "Check that PyPI is reachable, or download the wheel elsewhere and pass it with --wheel PATH.",
            )
    check_recbole_wheel(wheel)
    return wheel


def check_recbole_wheel(wheel: str | Path, sha256: str = RECBOLE_WHEEL_SHA256) -> None:
    """The file at ``wheel`` is RecBole 1.2.1's wheel byte for byte (its pinned ``sha256``).

    Raises:
        RecboleWheelError: it is missing or has another digest.
    """

    wheel = Path(wheel)
    if not wheel.is_file():
        raise RecboleWheelError(str(wheel), "no such file", f"Pass the path of {RECBOLE_WHEEL} "
                                "(`pip download --no-deps recbole==1.2.1`), or omit --wheel to download it.")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != sha256:
        raise RecboleWheelError(str(wheel), f"sha256 {digest[:16]}... is not RecBole 1.2.1's wheel "
                                f"({sha256[:16]}...)", "Download it again with "
                                "`pip download --no-deps recbole==1.2.1`.")


def extract_ml100k(wheel: str | Path, out: str | Path, sha256: str = RECBOLE_WHEEL_SHA256) -> Path:
    """Write MovieLens-100K's ``ml-100k.inter`` and ``ml-100k.item`` from the RecBole wheel to ``out/ml-100k/``.

    The wheel is opened as a zip and only the two known members are read (nothing is executed or
    installed); their target paths are fixed names under ``out``, never the archive's member paths,
    so nothing can be written outside ``out``. Both files are written to a temporary folder first and
    moved into place together, so a failure leaves no half dataset.

    Returns:
        The folder holding the two files (``out/ml-100k``): ``data.root`` is ``out``.

    Raises:
        RecboleWheelError: not the pinned wheel, a member missing, not a regular file or too large.
    """

    wheel, out = Path(wheel), Path(out)
    check_recbole_wheel(wheel, sha256)
    target = out / "ml-100k"
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ml-100k-", dir=out))
    try:
        with zipfile.ZipFile(wheel) as z:
            for name, member in ML100K_MEMBERS.items():
                try:
                    info = z.getinfo(member)
                except KeyError:
                    raise RecboleWheelError(str(wheel), f"no member {member}", "Use RecBole 1.2.1's wheel.") from None
                if info.is_dir() or info.file_size > ML100K_MAX_BYTES:
                    raise RecboleWheelError(str(wheel), f"{member} is not a regular file under "
                                            f"{ML100K_MAX_BYTES} bytes", "Use RecBole 1.2.1's wheel.")
                with z.open(info) as src, open(tmp / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        tmp.chmod(0o755)
        swap_dir(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target
