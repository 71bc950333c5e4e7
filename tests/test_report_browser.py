"""The HTML report in a real browser (headless Chromium through Selenium).

The full default report (`precisionlab run`, every lab at its default size, plus a saved ladder
result through --include) is built once per session; set PRECISIONLAB_BROWSER_REPORT=quick to use
`run --quick` instead. At 390 (a phone), 1000, 1280 and
1920 px the page must not scroll sideways (wide tables scroll inside their own boxes), every
image must have loaded, every contents and summary link must land on an element, and the console
must hold no error. A screenshot of each width is saved beside the report (screenshot-<width>.png).
At 1280 px and wider every table shows all its columns, none cut at the box's edge (a newcomer read
`1e-0` for `1e-08` in a cut conclusion column); where a table must scroll (1000 px) its first column
stays pinned. At every width every figure is whole in its box (legend and axes on screen) and shown at no less than
FIGURE_MIN_SCALE of its drawing's size (its axis text stays readable): a phone gets each figure's narrow
drawing. At 390 px the summary's checks are on screen beside each headline.

Needs selenium (pip) and Chromium with its driver (Debian: apt-get install chromium chromium-driver;
.ci/run installs them); without them the tests skip and say which is missing, unless
PRECISIONLAB_REQUIRE_BROWSER=1 (set by .ci/run after installing them), which makes that a failure.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest

WIDTHS = (390, 1000, 1280, 1920)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver",)
SCREENSHOT_HEIGHT = 2400
"""Pixels of the page top saved in each screenshot (Chromium cannot capture a 30000-px page in one)."""


def _first(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    for candidate in (f"/usr/lib/chromium/{n}" for n in names):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="session")
def browser_paths() -> tuple[str, str]:
    pytest.importorskip("selenium", reason="the browser test needs selenium (pip install selenium)")
    browser, driver = _first(BROWSERS), _first(DRIVERS)
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("a Chromium browser", browser), ("chromedriver", driver)) if p is None)
        reason = f"no {missing} installed (Debian: apt-get install chromium chromium-driver; .ci/run does it)"
        if os.environ.get("PRECISIONLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)  # CI installed the browser: a skip here would hide a broken install
        pytest.skip(reason)
    return browser, driver


@pytest.fixture(scope="session")
def report(browser_paths: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default report, built once (`run --quick` with PRECISIONLAB_BROWSER_REPORT=quick), with a saved
    ladder (a fabricated climb, tests/saved_results.py) included after the labs."""
    from click.testing import CliRunner

    from precisionlab.cli.main import cli
    from precisionlab.labs.ladder import ladder_lab
    from precisionlab.report.outputs import write_lab
    from tests.saved_results import LADDER_MODEL, smollm2_like_climb

    folder = tmp_path_factory.mktemp("browser")
    ladder = ladder_lab(smollm2_like_climb(), {"model": "smollm2-135m", "target": "int4", "max_drop": 1.0},
                        LADDER_MODEL)
    write_lab(ladder, folder / "ladder")
    out = folder / "report"
    args = ["run", "--out", str(out), "--include", str(folder / "ladder" / "ladder.json")]
    if os.environ.get("PRECISIONLAB_BROWSER_REPORT", "").strip().lower() == "quick":
        args.append("--quick")
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="session")
def driver(browser_paths: tuple[str, str]):  # type: ignore[no-untyped-def]
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = browser_paths
    options = Options()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--hide-scrollbars", "--window-size=1920,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(chromedriver))
    yield chrome
    chrome.quit()


OVERFLOWING = """
const vw = document.documentElement.clientWidth;
function contained(el) {
  for (let p = el.parentElement; p; p = p.parentElement) {
    const ox = getComputedStyle(p).overflowX;
    if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') {
      const r = p.getBoundingClientRect();
      return r.left >= -0.5 && r.right <= vw + 0.5;
    }
  }
  return false;
}
return [...document.body.querySelectorAll('*')].filter(el => {
  const r = el.getBoundingClientRect();
  return r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5) && !contained(el);
}).slice(0, 10).map(el => `${el.tagName.toLowerCase()}#${el.id} ${Math.round(el.getBoundingClientRect().right)}px`);
"""

BROKEN_IMAGES = """
return [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'));
"""

BAD_ALT = """
return [...document.images].filter(i => (i.getAttribute('alt') || '').trim().length < 40)
  .map(i => i.getAttribute('src'));
"""

DEAD_LINKS = """
return [...document.querySelectorAll('nav a[href^="#"], #summary a[href^="#"], main a[href^="#"]')]
  .map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(decodeURIComponent(id)));
"""


def _open(chrome, page: Path, width: int) -> None:  # type: ignore[no-untyped-def]
    chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    chrome.get(page.resolve().as_uri())
    chrome.get_log("browser")  # start the console log afresh for this load
    chrome.get(page.resolve().as_uri())
    chrome.execute_script("return document.readyState")


def _screenshot(chrome, path: Path, width: int) -> None:  # type: ignore[no-untyped-def]
    height = min(int(chrome.execute_script("return document.documentElement.scrollHeight")), SCREENSHOT_HEIGHT)
    shot = chrome.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_reads_well_in_a_browser(report: Path, driver, width: int) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.report.html import FIGURE_MIN_SCALE

    _open(driver, report / "index.html", width)
    assert driver.execute_script("return document.documentElement.clientWidth") == width
    scroll_width = driver.execute_script("return document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the page scrolls sideways: {scroll_width} px wide at {width} px"
    assert driver.execute_script(OVERFLOWING) == [], "elements wider than the viewport outside a scroll box"
    assert driver.execute_script(BROKEN_IMAGES) == [], "images that did not load"
    assert driver.execute_script(BAD_ALT) == [], "images without alt text that says what they show"
    assert driver.execute_script(DEAD_LINKS) == [], "contents or summary links that land on nothing"
    assert driver.execute_script(CUT_FIGURES) == [], "figures cut at their box's edge (legend or axes off screen)"
    assert driver.execute_script(SHRUNK_FIGURES, FIGURE_MIN_SCALE) == [], "figures shrunk below readable"
    errors = [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
    assert errors == [], errors
    _screenshot(driver, report / f"screenshot-{width}.png", width)
    assert (report / f"screenshot-{width}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_has_its_tables_once_and_its_provenance(report: Path, driver) -> None:  # type: ignore[no-untyped-def]
    _open(driver, report / "index.html", 1280)
    titles = driver.execute_script("return [...document.querySelectorAll('section.part')]"
                                   ".filter(s => s.querySelector('table, .cards')).map(s => s.id)")
    assert len(titles) == len(set(titles))
    formats_tables = driver.execute_script(
        "return [...document.querySelectorAll('section.part')].filter(s => s.id.endsWith('-formats')"
        " && s.querySelector('table')).length")
    assert formats_tables == 1, "the formats table is printed once; later copies link to it"
    text = driver.execute_script("return document.querySelector('.provenance').innerText")
    for field in ("precisionlab", "date", "cpu", "python", "numpy", "command"):
        assert field in text


def test_the_included_ladder_is_a_section_with_its_figure(report: Path, driver) -> None:  # type: ignore[no-untyped-def]
    _open(driver, report / "index.html", 1280)
    last = driver.execute_script("return [...document.querySelectorAll('section.lab')].map(s => s.id).pop()")
    assert last == "lab-ladder"
    width = driver.execute_script("return document.querySelector('#lab-ladder figure img').naturalWidth")
    assert width > 0
    assert driver.execute_script("return document.querySelector('nav a[href=\"#lab-ladder\"]') !== null")


CUT_TABLES = """
return [...document.querySelectorAll('.scroll')].filter(box => box.querySelector('table'))
  .filter(box => box.scrollWidth > box.clientWidth + 1)
  .map(box => `${(box.closest('section.part') || {}).id}: ${box.scrollWidth} px in ${box.clientWidth}`);
"""

PINNED_FIRST_COLUMN = """
const out = [];
for (const box of document.querySelectorAll('.scroll')) {
  if (!box.querySelector('table') || box.scrollWidth <= box.clientWidth + 1) continue;
  box.scrollLeft = box.scrollWidth;
  const left = box.getBoundingClientRect().left;
  const cell = box.querySelector('tbody td:first-child');
  const where = (box.closest('section.part') || {}).id;
  if (Math.abs(cell.getBoundingClientRect().left - left) > 2) out.push(`${where}: first column scrolled away`);
  box.scrollLeft = 0;
}
return out;
"""

PHONE_SUMMARY = """
const vw = document.documentElement.clientWidth;
return [...document.querySelectorAll('#summary tbody tr')].map(row => {
  const checks = row.querySelector('td.checks').getBoundingClientRect();
  const name = row.querySelector('td').innerText;
  return (checks.width > 40 && checks.height > 0 && checks.left >= 0 && checks.right <= vw + 0.5) ? null
    : `${name}: checks at ${Math.round(checks.left)}..${Math.round(checks.right)} px of ${vw}`;
}).filter(x => x);
"""

CUT_FIGURES = """
return [...document.querySelectorAll('figure .figbox')].filter(box => box.scrollWidth > box.clientWidth + 1)
  .map(box => `${box.closest('figure').id}: ${box.scrollWidth} px in ${box.clientWidth}`);
"""

SHRUNK_FIGURES = """
return [...document.querySelectorAll('figure img')]
  .filter(i => i.getBoundingClientRect().width < arguments[0] * i.naturalWidth - 1)
  .map(i => `${i.getAttribute('src')}: ${Math.round(i.getBoundingClientRect().width)} of ${i.naturalWidth} px`);
"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_table_shows_all_its_columns_at_desktop_widths(report: Path, driver, width: int) -> None:  # type: ignore[no-untyped-def]
    _open(driver, report / "index.html", width)
    assert driver.execute_script(CUT_TABLES) == [], "tables cut at their box's edge"


def test_a_table_that_must_scroll_keeps_its_first_column(report: Path, driver) -> None:  # type: ignore[no-untyped-def]
    _open(driver, report / "index.html", 1000)
    assert driver.execute_script(PINNED_FIRST_COLUMN) == []


def test_on_a_phone_the_summary_checks_and_the_figures_are_readable(report: Path, driver) -> None:  # type: ignore[no-untyped-def]
    from precisionlab.report.html import FIGURE_MIN_SCALE

    _open(driver, report / "index.html", 390)
    assert driver.execute_script("return document.querySelectorAll('#summary tbody tr').length") > 5
    assert driver.execute_script(PHONE_SUMMARY) == [], "summary checks off screen"
    assert driver.execute_script(SHRUNK_FIGURES, FIGURE_MIN_SCALE) == [], "figures shrunk below readable"
    driver.execute_script("document.getElementById('summary').scrollIntoView()")
    _screenshot_from(driver, report / "screenshot-390-summary.png", 390,
                     int(driver.execute_script("return document.getElementById('summary').offsetTop")))


def _screenshot_from(chrome, path: Path, width: int, top: int) -> None:  # type: ignore[no-untyped-def]
    shot = chrome.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": top, "width": width, "height": 1600, "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
