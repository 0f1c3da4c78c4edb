"""report.html in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by selenium):
no console error, one heatmap cell per grid cell with the registry's value, another metric changes
them, a click on a cell opens that checkpoint's card. A screenshot is left in the test's tmp folder.

Skipped, with the reason printed, only where no browser (or no driver / selenium) is installed;
``scripts/setup.sh`` installs them where it runs as root (CI).
"""

from __future__ import annotations

import re
import shutil

import pytest

from mmgrid.sweep.report import write_report
from sweep_fakes import DOMAINS

PERIODS = ("pretrain", "p1", "p2")


def _browser() -> tuple[str, str] | None:
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    return (binary, driver) if binary and driver else None


def _skip_without_browser() -> tuple[str, str]:
    found = _browser()
    if found is None:
        reason = ("no headless browser: needs `chromium` and `chromedriver` on PATH (Debian: apt-get install chromium "
                  "chromium-driver; scripts/setup.sh does this as root)")
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("SKIP: selenium is not installed (pip install -e '.[dev]')")
        pytest.skip("selenium is not installed (pip install -e '.[dev]')")
    return found


def _values(i: int, j: int) -> dict[str, float]:
    """Distinct metrics per (domain i, period j), so that a wrong cell or metric shows."""
    return {"recall@10": 0.10 + 0.05 * i + 0.01 * j, "ndcg@10": 0.02 + 0.03 * i + 0.004 * j,
            "recall@20": 0.30 + 0.01 * i, "ndcg@20": 0.05 + 0.01 * j}


@pytest.fixture()
def page(grid, tmp_path):
    cfg, reg, prep = grid
    cfg.paradigms = ["fakelin"]
    ids = {}
    for i, d in enumerate(DOMAINS):
        for j, per in enumerate(PERIODS):
            cid = reg.resolve({"paradigm": "fakelin", "domain": d, "period": per})
            ids[(d, per)] = cid
            reg.record_eval(cid, "test", "all", _values(i, j), extra={"eval_domain": d})
    out = tmp_path / "report"
    write_report(cfg, reg, prep, out, diagnostics=False, html=True)
    return out / "report.html", ids


def test_report_page_in_headless_chromium(page, tmp_path):
    binary, driver_path = _skip_without_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    path, ids = page
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,2200"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(driver_path), options=opts)
    try:
        drv.get(path.as_uri())
        WebDriverWait(drv, 60).until(lambda d: d.execute_script("return window.mmgridReady === true"))
        severe = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == [], severe
        # nothing was fetched: the page is one file
        assert drv.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []

        def heat() -> dict:
            return drv.execute_script("const g = document.getElementById('heat-fakelin_default').data[0];"
                                      "return {x: g.x, y: g.y, z: g.z, cd: g.customdata};")

        h = heat()
        assert h["y"] == DOMAINS and h["x"] == list(PERIODS)
        assert sum(v is not None for row in h["z"] for v in row) == len(DOMAINS) * len(PERIODS)
        for i, d in enumerate(DOMAINS):
            for j, per in enumerate(PERIODS):
                assert h["z"][i][j] == pytest.approx(100 * _values(i, j)["recall@10"], rel=1e-9)
                assert h["cd"][i][j][0] == ids[(d, per)]
        Select(drv.find_element(By.ID, "grid-metric")).select_by_value("ndcg@10")
        h2 = heat()
        for i in range(len(DOMAINS)):
            for j in range(len(PERIODS)):
                assert h2["z"][i][j] == pytest.approx(100 * _values(i, j)["ndcg@10"], rel=1e-9)
                assert h2["z"][i][j] != pytest.approx(h["z"][i][j])

        # a real mouse click on the cell (C, p1) opens that checkpoint's card
        d, per = "C", "p1"
        div = drv.find_element(By.ID, "heat-fakelin_default")
        drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", div)
        x, y, w, hgt = drv.execute_script(
            "const gd = arguments[0], L = gd._fullLayout, r = gd.getBoundingClientRect();"
            "return [L._size.l + L.xaxis.d2p(arguments[1]), L._size.t + L.yaxis.d2p(arguments[2]), r.width, r.height];",
            div, per, d)
        ActionChains(drv).move_to_element_with_offset(div, int(x - w / 2), int(y - hgt / 2)).click().perform()
        WebDriverWait(drv, 10).until(lambda dr: dr.execute_script("return !document.getElementById('card').hidden"))
        card = drv.find_element(By.ID, "card")
        assert card.get_attribute("data-id") == ids[(d, per)]
        assert drv.execute_script("return location.hash") == f"#card-{ids[(d, per)]}"
        assert ids[(d, per)] in card.text and "lineage" in card.text.lower() and "p1" in card.text
        assert card.find_elements(By.CSS_SELECTOR, "svg rect")  # the lineage is drawn
        # the card's parent link opens the parent's card (the pretrain checkpoint of C)
        card.find_element(By.CSS_SELECTOR, f"a[href='#card-{ids[(d, 'pretrain')]}']").click()
        WebDriverWait(drv, 10).until(
            lambda dr: dr.find_element(By.ID, "card").get_attribute("data-id") == ids[(d, "pretrain")])
        shot = tmp_path / "report-page.png"
        drv.execute_script("window.scrollTo(0, 0);")
        drv.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000
        assert [e for e in drv.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        drv.quit()


def test_report_html_is_self_contained(page):
    path, ids = page
    text = path.read_text()
    # no fetch at view time: no external script, stylesheet or image in the markup (the inlined scripts'
    # own text is left out: plotly.js names URLs for map features this page does not use)
    markup = re.sub(r"<script[^>]*>.*?</script>", "<script></script>", text, flags=re.S)
    assert not re.search(r"<(script|img|link|iframe)[^>]+(src|href)=", markup), markup[:2000]
    assert "Plotly" in text and all(i in text for i in ids.values())
