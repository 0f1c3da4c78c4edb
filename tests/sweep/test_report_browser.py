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

from mmgrid.render.report import write_report
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


# --------------------------------------------------------------------------- injection: stored strings stay text

# each payload would set window.__pwned (or document.title) if it ran; `<!--<script>` and `</script>` would
# break a script block (no figure drawn) if the JSON inside it escaped only `</`
PAYLOADS = ['<script>window.__pwned="script";document.title="pwned"</script>',
            '"><img src=x onerror="window.__pwned=\'img\';document.title=\'pwned\'">',
            "'><svg onload=\"window.__pwned='svg'\">",
            "<!--<script>", "</script><script>window.__pwned='close'</script>",
            "javascript:window.__pwned='js'", "\u2028\u2029</ScRiPt ><!--", "${window.__pwned='tpl'}"]


def _payload(i: int) -> str:
    return PAYLOADS[i % len(PAYLOADS)]


@pytest.fixture()
def poisoned_page(tmp_path):
    """A registry (the studies' fake grid) whose every free string field holds a payload: each checkpoint's
    params and meta, its config hash and data fingerprint (the manifest its card shows), every result record's
    extra fields and a study's name."""
    import torch

    from mmgrid.config import GridConfig
    from mmgrid.configtools import build
    from mmgrid.registry import Registry
    from sweep_fakes import FakePrepared, theta

    def strings(k: int) -> dict:
        return dict(params={f"k{n}": p for n, p in enumerate(PAYLOADS)} | {"stage": _payload(k)},
                    meta={_payload(k + 1): _payload(k + 2), "list": PAYLOADS, "nested": {"x": _payload(k + 3)}},
                    config_hash=_payload(k + 4), data_fingerprint=_payload(k + 5))

    reg = Registry.open(tmp_path / "reg", durable=False)
    base = reg.put({"w": torch.zeros(4), "b": torch.zeros(())}, {"paradigm": "fakelin", "domain": "any", "period": "base"},
                   "base", **strings(0))
    ids = [base]
    for i, d in enumerate(DOMAINS):
        prev, role = base, "init"
        for j, per in enumerate(PERIODS):
            prev = reg.put(theta(d, per), {"paradigm": "fakelin", "domain": d, "period": per}, "trained",
                           parents=[(prev, role)], seed=i, **strings(i + j))
            role = "previous_stage"
            ids.append(prev)
            reg.record_eval(prev, "test", "all", _values(i, j),
                            extra={"eval_domain": d, **{f"p{k}": p for k, p in enumerate(PAYLOADS)}})
            # a study's record of the same checkpoint (the card lists it with its study's name)
            reg.record_eval(prev, "valid", "all", _values(i, j), extra={"eval_domain": d, "study": _payload(i + j)})
    cfg = build(GridConfig, {"name": "t", "registry": str(tmp_path / "reg"), "prepared": str(tmp_path / "prep"),
                             "paradigms": ["fakelin"],
                             "sweeps": {"temporal": {"paradigm": "fakelin", "start": 0.0, "stop": 1.5, "step": 0.25}}})
    out = tmp_path / "report"
    write_report(cfg, reg, FakePrepared(), out, diagnostics=False, html=True)
    return out / "report.html", ids


def _chrome(binary: str, driver_path: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,2200"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=opts)


def _check_page(drv, uri: str, ids: list[str]) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    drv.get(uri)
    WebDriverWait(drv, 60).until(lambda d: d.execute_script("return window.mmgridReady === true"))
    title = drv.title
    expected = drv.execute_script("return document.querySelectorAll('div.plotly-graph-div, div.panel').length")
    drawn = drv.execute_script("return [...document.querySelectorAll('div.plotly-graph-div, div.panel')]"
                               ".filter(d => d._fullLayout && d.querySelector('svg.main-svg')).length")
    assert expected > 0 and drawn == expected, f"{drawn} of {expected} figures drawn"
    for cid in ids:  # open every card, from a link and from the page's own function
        drv.execute_script("location.hash = '#card-' + arguments[0];", cid)
        WebDriverWait(drv, 10).until(lambda d: d.execute_script(
            "return document.getElementById('card').dataset.id === arguments[0]", cid))
        drv.execute_script("window.mmgridOpenCard(arguments[0]);", cid)
        card = drv.execute_script("return document.getElementById('card').textContent")
        assert cid in card
    assert drv.execute_script("return window.__pwned === undefined"), drv.execute_script("return window.__pwned")
    assert drv.title == title and "pwned" not in drv.title
    # no element the payloads would create: every <img>, <svg onload> and inline handler is absent
    assert drv.execute_script("return document.querySelectorAll('img, [onerror], [onload]').length") == 0
    severe = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], severe


def test_stored_strings_cannot_run_script_in_the_page(poisoned_page):
    binary, driver_path = _skip_without_browser()
    path, ids = poisoned_page
    text = path.read_text()
    body = text.split("</head>", 1)[1]
    # no payload's markup survives in the body: `<` is an entity in HTML and \u003c in the JSON blocks
    assert not any(m in body for m in ("<script>window.__pwned", "<!--", "<img", "<svg onload", "</ScRiPt"))
    drv = _chrome(binary, driver_path)
    try:
        _check_page(drv, path.as_uri(), ids)
        # straight from a link to a card
        _check_page(drv, path.as_uri() + "#card-" + ids[-1], ids[-1:])
        card = drv.execute_script("return document.getElementById('card').textContent")
        assert "<!--<script>" in card and "onerror" in card  # shown as text
    finally:
        drv.quit()


def test_the_card_script_escapes_values_that_skipped_validation(tmp_path):
    """Defence in depth: a card whose every field (kind, seed, coordinates, parents, results, lineage) is a
    payload, as a registry written by another tool could hold, draws as text in the grid section."""
    binary, driver_path = _skip_without_browser()
    from mmgrid.sweep.grid_view import GridView
    from mmgrid.render.report_html import CSS
    from mmgrid.render.report_html_grid import grid_section
    import plotly.offline

    cid = "0123456789abcdef"
    p = PAYLOADS
    card = {"id": cid, "kind": p[0], "seed": p[1], "coords": {p[2]: p[3], "domain": p[4]},
            "manifest": {k: v for k, v in zip("abcdefgh", p)},
            "parents": [{"id": p[5], "role": p[6]}, {"id": cid, "role": p[7]}],
            "results": [{"split": p[0], "group": p[1], "metric": p[2], "value": p[3], "ci_low": p[4], "ci_high": 0.1,
                         "study": p[5], "eval_domain": p[6]}],
            "lineage": {"nodes": [{"id": p[7], "x": p[0], "y": 0, "label": p[1], "kind": p[2], "target": True}],
                        "edges": [{"from": p[7], "to": p[7], "role": p[3]}]}}
    view = GridView(split=p[0], metrics=["recall@10"], groups=["all"], seeds=["pooled", p[1]],
                    panels=[{"key": p[2], "paradigm": p[3], "variant": p[4], "domains": [p[5]], "periods": [p[6]]}],
                    cells=[{"panel": p[2], "domain": p[5], "period": p[6], "group": "all", "metric": "recall@10",
                            "seed": "pooled", "value": 12.5, "low": p[0], "high": None, "n_users": p[1], "id": cid,
                            "ids": [cid]}],
                    cards={cid: card})
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>t</title><style>" + CSS + "</style><script>"
            + plotly.offline.get_plotlyjs() + "</script></head><body>" + grid_section(view)
            + "<script>window.mmgridReady = true;</script></body></html>")
    path = tmp_path / "grid.html"
    path.write_text(page)
    drv = _chrome(binary, driver_path)
    try:
        _check_page(drv, path.as_uri(), [cid])
        text = drv.execute_script("return document.getElementById('card').textContent")
        assert all(x in text for x in ("<!--<script>", "onerror", "javascript:"))
    finally:
        drv.quit()
