"""Each benchmark's record: ``bench/results/<name>.md``, written by the benchmark itself.

``with recorded("data_prep"):`` around a benchmark's ``main()`` copies what it prints to the
terminal and, when it finishes without an error, writes the record: the machine (platform, CPU
model and count, memory, Python and torch versions), the load average before and after, the
command, the UTC time, and the output. The previous records of that file are kept below,
under "Earlier records", so a rerun adds a measurement and loses none. Child processes a
benchmark starts (``--child``) and ``MMGRID_BENCH_NO_RECORD=1`` write nothing.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shlex
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

RESULTS = Path(__file__).resolve().parent / "results"
EARLIER = "## Earlier records"


class _Tee(io.TextIOBase):
    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, s: str) -> int:
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self) -> None:
        for st in self.streams:
            st.flush()


def machine() -> str:
    """One line naming the machine the benchmark ran on."""
    from mmgrid.runtime.throughput import cpu_model  # the one reading of the processor's name (imports torch)

    cpu = cpu_model()
    mem = "?"
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem = f"{pages * size / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    torch = sys.modules.get("torch")
    tv = f", torch {torch.__version__}" if torch is not None else ""
    return (f"{platform.platform()}; {cpu}; {os.cpu_count()} CPUs; {mem} memory; "
            f"Python {platform.python_version()}{tv}")


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def render(name: str, command: str, output: str, load_before: str, load_after: str, seconds: float,
           earlier: str = "") -> str:
    """The Markdown of one record (plus the earlier ones, kept below)."""
    script = command.split()[1] if command.startswith("python ") and len(command.split()) > 1 else f"bench/{name}.py"
    title = script if Path(script).stem == name else f"{script} ({name})"  # a named record of a benchmark
    text = (f"# {title}\n\nWritten by the benchmark when it finished "
            f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s).\n\n"
            f"- machine: {machine()}\n- load average (1, 5, 15 min) before: {load_before}; after: {load_after}\n"
            f"- command: `{command}`\n\n```\n{output.rstrip()}\n```\n")
    if earlier.strip():
        text += f"\n{EARLIER}\n\n{earlier.strip()}\n"
    return text


def _earlier(path: Path) -> str:
    """The records a file holds now, as they will sit under "Earlier records"."""
    if not path.is_file():
        return ""
    old = path.read_text()
    if old.startswith("# bench/") and EARLIER in old:  # one of ours with older ones below
        head, _, rest = old.partition(EARLIER)
        return head.split("\n", 1)[1].strip() + "\n\n" + rest.strip()
    return old.split("\n", 1)[1].strip() if old.startswith("# ") else old


@contextmanager
def recorded(name: str) -> Iterator[None]:
    """Copy stdout and write ``bench/results/<name>.md`` when the block ends without an error."""
    if os.environ.get("MMGRID_BENCH_NO_RECORD") == "1" or "--child" in sys.argv:
        yield
        return
    buf, real = io.StringIO(), sys.stdout
    before, t0 = _load(), time.perf_counter()
    sys.stdout = _Tee(real, buf)
    try:
        yield
    finally:
        sys.stdout = real
    path = RESULTS / f"{name}.md"
    command = "python " + shlex.join([f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])  # quoted as typed
    text = render(name, command, buf.getvalue(), before, _load(), time.perf_counter() - t0, _earlier(path))
    RESULTS.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    print(f"record written to {path}", file=sys.stderr)


def run_recorded(main: Callable[[], int], default: str) -> None:
    """A benchmark's entry point: ``main()`` under :func:`recorded`, the record named by the command line's
    ``--record NAME`` (else ``default``); a non-zero code exits with it and leaves no record."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--record", default=default)
    with recorded(pre.parse_known_args()[0].record):
        code = main()
        if code:  # no record of a failed run
            raise SystemExit(code)
