"""The ``mmgrid`` command: the entry layer, on top of every other package.

Each concern adds its own sub-commands through a ``register(subparsers)`` function in its
module of this package (``mmgrid/cli/<concern>.py``); this file only wires them together and
turns named errors into a one-line message and exit status 2. What a command opens before it
works (its grid, registry, prepared data) is :mod:`mmgrid.cli.context`; the grammar of naming
a registry or a run is :mod:`mmgrid.cliargs`. Command modules import heavy libraries (torch,
transformers) inside their handlers so that ``mmgrid --help`` stays fast; each command that
reads a grid runs :func:`mmgrid.validate.validate_grid` before any job.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from mmgrid._version import __version__
from mmgrid.cliargs import flush_notes
from mmgrid.errors import MmgridError

COMMAND_MODULES = (
    "mmgrid.cli.data",  # world, prepare
    "mmgrid.cli.registry",  # query, show, lineage, registry ...
    "mmgrid.cli.merge",  # merge
    "mmgrid.cli.lora",  # merge-lora, extract-lora, apply-lora
    "mmgrid.cli.train",  # build, plan
    "mmgrid.cli.eval",  # eval
    "mmgrid.cli.sweep",  # sweep, predict-lambda, report, export mlflow
    "mmgrid.cli.calibrate",  # calibrate
    "mmgrid.cli.compare",  # compare
    "mmgrid.cli.demo",  # demo, validate
    "mmgrid.cli.plugins",  # plugins, study
)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmgrid",
        description=(
            "Build a grid of generative-recommender checkpoints (paradigm x domain x period), "
            "merge across it, and report. Start with `mmgrid demo`."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mmgrid {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress output (bars, progress lines); sets MMGRID_QUIET=1 for workers too")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args, extra = parser.parse_known_args(argv)
    if any(e in ("-q", "--quiet") for e in extra):  # also accepted after the command: `mmgrid demo --quiet`
        args.quiet = True
        extra = [e for e in extra if e not in ("-q", "--quiet")]
    if extra:
        # argparse cannot take positionals after options; KEY=VALUE overrides may stand anywhere
        if hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
            args.overrides = [*(args.overrides or []), *extra]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "quiet", False):
        os.environ["MMGRID_QUIET"] = "1"  # read by mmgrid.runtime.progress, here and in executor workers
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    rc = 2
    try:
        rc = _run(args)
        return rc
    finally:
        flush_notes(show=rc == 0)  # a failure keeps its one error line


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; named errors become one line and exit status 2."""
    try:
        rc = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:  # `mmgrid query ... | head -1`: the reader has what it wanted
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as git and the shell report it
    except MmgridError as exc:
        print(f"mmgrid: error: {exc}", file=sys.stderr)
        return 2
    # storage errors that escaped a command: named at the boundary, one line, exit 2
    except Exception as exc:  # noqa: BLE001 - only OSError, sqlite3 and safetensors I/O errors are named here
        msg = _storage_message(exc, getattr(args, "command", None) or "mmgrid")
        if msg is None:
            raise
        print(f"mmgrid: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mmgrid: interrupted; finished checkpoints are kept in the registry.", file=sys.stderr)
        return 130
    return int(rc or 0)


def _storage_message(exc: BaseException, command: str) -> str | None:
    """The one-line message of an ``OSError``, a ``sqlite3.Error`` or a safetensors I/O error that a
    command let escape (what, where, the system's reason, how to fix); None for any other error."""
    import sqlite3  # lazy: only reached on an error (sqlite3 stays out of `mmgrid --help`)

    from mmgrid.errors import describe_os_error  # lazy: only reached on an error

    if isinstance(exc, OSError):
        return describe_os_error(exc, f"`mmgrid {command}` reading or writing a file")
    if isinstance(exc, sqlite3.Error):
        return describe_os_error(exc, f"`mmgrid {command}` using a registry index (index.sqlite)") + (
            " If the index is damaged, `mmgrid registry reindex ROOT` rebuilds it from the registry's files.")
    if type(exc).__name__ == "SafetensorError":
        return describe_os_error(exc, f"`mmgrid {command}` reading or writing a safetensors file")
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush into the closed pipe
    prints no second traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
