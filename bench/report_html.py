"""Cost of report.html: `mmgrid report RUN --out DIR --html` against the same command without
`--html` (the baseline, measured in the same run), the page's size (and how much of it is
plotly.js), and its drawing time in a real headless Chromium.

Usage:
    python bench/report_html.py [--run DIR] [--repeats N]

``--run DIR`` reuses a finished run folder (``mmgrid demo --quick --out DIR``); without it, a quick
demo is built in a temporary folder first (about a minute). Both report commands run in fresh
processes, alternating, ``--repeats`` times each (default 3); the medians and their ratio are
printed. The drawing time is from ``driver.get(page)`` until the page says it is ready
(``window.mmgridReady``, set on the load event) and every plotly figure on it has been drawn
(an SVG inside each ``.js-plotly-plot``), in Debian's ``chromium`` driven by ``chromedriver``
through selenium (as tests/sweep/test_report_browser.py does); a fresh navigation per repeat.
Asserts nothing; writes bench/results/report_html.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from record import recorded  # noqa: E402


def _mmgrid(*args: str) -> float:
    """Wall seconds of one ``python -m mmgrid ...`` in a fresh process (this checkout's mmgrid)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MMGRID_QUIET": "1"}
    env.pop("MMGRID_REGISTRY", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mmgrid", *args], cwd=REPO, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"mmgrid {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return dt


def _draw_times(page: Path, repeats: int) -> tuple[list[float], list[float], int] | str:
    """Seconds from navigation to ready-and-drawn (measured here, and by the page's own clock),
    and the number of plotly figures; or why the browser could not be used."""
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        return "no headless browser (needs chromium and chromedriver on PATH; Debian: apt-get install chromium chromium-driver)"
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,2200"):
        opts.add_argument(a)
    drawn = ("const gs = document.querySelectorAll('.js-plotly-plot');"
             "return window.mmgridReady === true && gs.length > 0 && "
             "Array.from(gs).every(g => g._fullLayout && g.querySelector('svg.main-svg')) ? gs.length : 0;")
    wall, page_clock, n = [], [], 0
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        for _ in range(repeats):
            drv.get("about:blank")
            t0 = time.perf_counter()
            drv.get(page.as_uri())  # returns after the load event
            n = WebDriverWait(drv, 120, poll_frequency=0.01).until(lambda d: d.execute_script(drawn))
            wall.append(time.perf_counter() - t0)
            page_clock.append(drv.execute_script("return performance.now()") / 1000)
    finally:
        drv.quit()
    return wall, page_clock, n


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=None, help="a finished run folder (mmgrid demo --quick --out DIR) to reuse")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each report command (default 3)")
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="mmgrid-bench-report-html-"))
    try:
        if args.run:
            run = Path(args.run).resolve()
            if not (run / "mmgrid-run.yaml").is_file():
                raise SystemExit(f"--run {run}: no mmgrid-run.yaml there; pass a folder `mmgrid demo --out` wrote.")
            print(f"run: {run} (reused)")
        else:
            run = scratch / "demo"
            print("building a quick demo (mmgrid demo --quick exec.workers=1) ...", flush=True)
            print(f"demo: {_mmgrid('demo', '--quick', '--out', str(run), 'exec.workers=1'):.1f} s")
        md_only, with_html = [], []
        for i in range(args.repeats):
            md_only.append(_mmgrid("report", str(run), "--out", str(scratch / "md")))
            with_html.append(_mmgrid("report", str(run), "--out", str(scratch / "html"), "--html"))
            print(f"repeat {i + 1}: report {md_only[-1]:.2f} s, report --html {with_html[-1]:.2f} s", flush=True)
        base, html = statistics.median(md_only), statistics.median(with_html)
        print(f"\nmmgrid report RUN --out DIR          median {base:.2f} s (baseline)")
        print(f"mmgrid report RUN --out DIR --html   median {html:.2f} s")
        print(f"ratio --html / baseline: {html / base:.2f}x (+{html - base:.2f} s)")

        import plotly.offline

        page = scratch / "html" / "report.html"
        size = page.stat().st_size
        plotly_js = len(plotly.offline.get_plotlyjs().encode())
        inlined = plotly.offline.get_plotlyjs() in page.read_text(encoding="utf-8")
        print(f"\nreport.html: {size / 2**20:.2f} MiB ({size} bytes); plotly.js {'inlined' if inlined else 'NOT found'}: "
              f"{plotly_js / 2**20:.2f} MiB ({100 * plotly_js / size:.0f}% of the page); the rest (markup, data, "
              f"scripts): {(size - plotly_js) / 2**10:.0f} KiB")

        drawn = _draw_times(page, args.repeats)
        if isinstance(drawn, str):
            print(f"drawing time: not measured: {drawn}")
        else:
            wall, page_clock, n = drawn
            print(f"drawing time in headless Chromium (navigation to ready with all {n} plotly figures drawn), "
                  f"{len(wall)} loads: median {statistics.median(wall):.2f} s "
                  f"(each: {', '.join(f'{w:.2f}' for w in wall)}); by the page's clock: "
                  f"median {statistics.median(page_clock):.2f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    with recorded("report_html"):
        code = main(sys.argv[1:])
    sys.exit(code)
