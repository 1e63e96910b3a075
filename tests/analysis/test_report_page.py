"""The leaderboard page in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium): a run
of 545 models (the paper's scale) loads from disk without console errors, sorting and filtering change what is
shown, every embedded plot renders, and the model links point at the model folders."""

import shutil
from pathlib import Path

import pytest

from report_fixtures import METHODS, big_run
from wildmerge.analysis.report.write import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _skip_reason():
    if not CHROMIUM or not DRIVER:
        return "Chromium is not installed (apt-get install -y chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


@pytest.fixture(scope="module")
def page(tiny_family, tmp_path_factory):
    run = big_run(tmp_path_factory.mktemp("page"), tiny_family["base"], tiny_family["experts"])
    written = write_report(run)
    return run, Path(written["index_html"])


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def _open(browser, path: Path):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(path.as_uri())
    WebDriverWait(browser, 30).until(lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "1")
    return browser


def _shown(browser, table: str) -> int:
    return int(browser.find_element("css selector", f'[data-table="{table}"]').get_attribute("data-shown"))


def _column(browser, table: str, index: int):
    """The cells of one column as shown, in one round trip (545 WebDriver calls would take seconds)."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(function (td) { return td.textContent; })",
        f'[data-table="{table}"] tbody tr td:nth-child({index})')


def test_page_is_self_contained_and_small(page):
    _, index = page
    text = index.read_text()
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text  # no network
    assert "<link" not in text and 'src="http' not in text
    assert index.stat().st_size < 3_000_000  # measured in the README; a guard against embedding models twice


def test_page_loads_without_console_errors(page, browser):
    _, index = page
    _open(browser, index)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    assert _shown(browser, "models") == 545
    assert browser.find_element("css selector", '[data-table="models"] .count').text == "545 of 545 rows"
    browser.save_screenshot(str(index.parent / "screenshot_top.png"))


def test_sorting_changes_the_order(page, browser):
    _, index = page
    _open(browser, index)
    header = browser.find_elements("css selector", '[data-table="models"] th')
    mean_col = [h.text for h in header].index("mean (%)") + 1
    header[mean_col - 1].click()
    up = [float(v) for v in _column(browser, "models", mean_col) if v]
    assert up == sorted(up) and len(up) == 544  # the failed job has no mean and sorts last
    header[mean_col - 1].click()
    down = [float(v) for v in _column(browser, "models", mean_col) if v]
    assert down == sorted(down, reverse=True) and down[0] == up[-1]
    assert _column(browser, "models", mean_col)[-1] == ""


def test_filtering_changes_what_is_shown(page, browser):
    from selenium.webdriver.support.ui import Select

    _, index = page
    _open(browser, index)
    search = browser.find_element("css selector", '[data-table="models"] input.filter')
    search.send_keys("tsv_m__n04")
    assert _shown(browser, "models") == 11
    assert all(t.startswith("tsv_m__n04") for t in _column(browser, "models", 1))
    search.clear()
    search.send_keys("x")  # typing then deleting restores every row
    search.clear()
    browser.execute_script("arguments[0].dispatchEvent(new Event('input'))", search)
    Select(browser.find_element("css selector", '[data-table="models"] select[data-column="status"]')
           ).select_by_visible_text("failed")
    assert _shown(browser, "models") == 1 and _column(browser, "models", 1) == ["tsv_m__n04_s03"]
    Select(browser.find_element("css selector", '[data-table="methods"] select[data-column="n"]')
           ).select_by_visible_text("12")
    assert _shown(browser, "methods") == len(METHODS)
    browser.save_screenshot(str(index.parent / "screenshot_filtered.png"))


def test_every_plot_renders(page, browser):
    _, index = page
    _open(browser, index)
    images = browser.find_elements("css selector", "figure img")
    assert len(images) >= 3
    for img in images:
        browser.execute_script("arguments[0].scrollIntoView()", img)
        ok = browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 100 && "
                                    "arguments[0].naturalHeight > 100", img)
        assert ok, img.get_attribute("alt")
    browser.execute_script("document.getElementById('figures').scrollIntoView()")
    browser.save_screenshot(str(index.parent / "screenshot_figures.png"))


def test_links_point_at_model_folders(page, browser):
    run, index = page
    _open(browser, index)
    link = browser.find_element("css selector", '[data-table="models"] tbody a[href$="ta__n02_s00"]')
    target = Path(browser.execute_script("return decodeURIComponent(new URL(arguments[0].getAttribute('href'), "
                                         "document.baseURI).pathname)", link))
    assert target == run / "models" / "ta__n02_s00" and target.is_dir()
    recipe = browser.find_element("css selector", '[data-table="models"] tbody a[href$="ta__n02_s00/recipe.yml"]')
    assert recipe.text == "recipe.yml"
