"""The explorer page in a real headless browser (Debian's chromium + chromedriver, via selenium).

A person's path through the article: load the page (it runs the main run), flip fencing off and
see the stale writes drawn and the counts change, flip it back; run beside a second backend; a
backend that is down and an invalid scenario both show as a message on the page. Screenshots of
each stage are kept under ``.artifacts/explorer/`` (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outlive_conformance.explore import Explorer, ExplorerServer

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "explorer"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    db = tmp_path_factory.mktemp("explore") / "beside.db"
    out = {"sqlite": f"sqlite:///{db}"}
    try:
        import outlive_restate  # noqa: F401  - a real engine adapter whose server is not running
    except ImportError:
        pass
    else:
        out["down"] = f"restate://127.0.0.1:{_free_port()}?admin={_free_port()}"
    return out


@pytest.fixture(scope="module")
def page_url(backends: dict[str, str]) -> Iterator[str]:
    server = ExplorerServer(Explorer.create(backends=list(backends.values()), timeout=60))
    server.start_in_thread()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (CHROMIUM and CHROMEDRIVER):
        message = "chromium and chromedriver are not installed: run `make engines`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1600,1200", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def _state(driver: Any) -> str:
    return str(driver.execute_script("return document.body.dataset.state"))


def _settle(driver: Any) -> str:
    """Wait until the page finished its run (``done``) or showed why not (``error``)."""
    WebDriverWait(driver, 90, poll_frequency=0.1).until(lambda d: _state(d) in ("done", "error"))
    return _state(driver)


def _card(driver: Any, measure: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, f'.card[data-measure="{measure}"] .value').text)


def _items(driver: Any, backend: str, selector: str) -> list[Any]:
    return list(driver.find_elements(
        By.CSS_SELECTOR, f'.drawing[data-backend="{backend}"] svg g.item{selector}'))


def _shoot(driver: Any, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _flip(driver: Any, switch: str, value: str) -> str:
    driver.find_element(By.CSS_SELECTOR, f'input[name="sw-{switch}"][value="{value}"]').click()
    assert _state(driver) == "running"      # the click started a run (the answer comes later)
    return _settle(driver)


def test_main_run_then_fencing_off_draws_stale_writes_and_changes_the_counts(
        browser: Any, page_url: str) -> None:
    browser.get(page_url)
    assert _settle(browser) == "done"
    assert (_card(browser, "model_calls"), _card(browser, "posts"),
            _card(browser, "stale_writes_applied"), _card(browser, "final_acceptance_tick"),
            _card(browser, "newsletter_figure"), _card(browser, "verdict")) == (
        "6", "1", "0", "10", "4.7", "clean")
    refused = _items(browser, "memory://", ".late-write.refused")
    assert [(e.get_attribute("data-tick"), e.get_attribute("data-lane")) for e in refused] == [
        ("8", "attempt:1")]
    assert not _items(browser, "memory://", ".stale")
    assert len(_items(browser, "memory://", ".restored")) == 2       # #2 at t5, #3 at t13
    _shoot(browser, "01-main-run")

    assert _flip(browser, "fencing", "off") == "done"
    assert _card(browser, "stale_writes_applied") == "3"
    assert _card(browser, "model_calls") == "7"
    assert _card(browser, "verdict") == "broken"
    stale = _items(browser, "memory://", ".stale")
    assert len(stale) == 3 and {e.get_attribute("data-lane") for e in stale} == {"attempt:1"}
    changed = browser.find_elements(By.CSS_SELECTOR, ".card.changed")
    assert {c.get_attribute("data-measure") for c in changed} == {"model_calls",
                                                                  "stale_writes_applied"}
    here = browser.find_element(By.CSS_SELECTOR, "#necessity tr.here")
    assert here.get_attribute("data-protection") == "fencing"
    broken = browser.find_element(By.CSS_SELECTOR, '#invariants tr[data-invariant="no_stale_write"]')
    assert "BROKEN" in broken.text
    _shoot(browser, "02-fencing-off")

    assert _flip(browser, "fencing", "on") == "done"
    assert (_card(browser, "stale_writes_applied"), _card(browser, "model_calls"),
            _card(browser, "verdict")) == ("0", "6", "clean")
    assert not _items(browser, "memory://", ".stale")
    assert not browser.find_elements(By.CSS_SELECTOR, ".card.changed")
    _shoot(browser, "03-fencing-back-on")


def test_the_same_run_beside_a_second_backend_and_errors_on_the_page(
        browser: Any, page_url: str, backends: dict[str, str]) -> None:
    browser.get(page_url)
    _settle(browser)
    select = Select(browser.find_element(By.ID, "backend"))
    select.select_by_value(backends["sqlite"])
    assert _settle(browser) == "done"
    panels = browser.find_elements(By.CSS_SELECTOR, ".drawing")
    assert [p.get_attribute("data-backend") for p in panels] == ["memory://", backends["sqlite"]]
    assert len(_items(browser, backends["sqlite"], ".late-write.refused")) == 1
    assert "Identical on both backends" in browser.find_element(By.ID, "agreement").text
    _shoot(browser, "04-beside-sqlite")            # one above the other, each the column's width

    if "down" in backends:
        select.select_by_value(backends["down"])
        assert _settle(browser) == "error"
        error = browser.find_element(By.ID, "error")
        assert error.is_displayed() and "BackendUnavailable" in error.text
        assert backends["down"].split("?")[0] in error.text
        assert _items(browser, "memory://", ".late-write.refused")   # memory:// still drawn
        _shoot(browser, "05-backend-down")
        select.select_by_value("memory://")
        assert _settle(browser) == "done"
        assert not browser.find_element(By.ID, "error").is_displayed()

    browser.find_element(By.CSS_SELECTOR, "#toml-box summary").click()
    box = browser.find_element(By.ID, "toml")
    text = str(box.get_attribute("value"))
    assert "missed_beats = 2" in text
    browser.execute_script("arguments[0].value = arguments[1]", box,
                           text.replace("missed_beats = 2", 'missed_beats = "two"'))
    browser.find_element(By.ID, "run-toml").click()
    assert _settle(browser) == "error"
    error = browser.find_element(By.ID, "error")
    assert error.is_displayed()
    assert "ScenarioError" in error.text and "missed_beats" in error.text
    _shoot(browser, "06-invalid-scenario")


_RECORDS = ("attempt", "journal entry", "owner token", "acceptance", "effect")
_SWITCHES = ("silent", "fencing", "progress", "change", "pins", "rule", "dies", "key")


def test_at_1400_px_nothing_is_clipped_and_the_legend_covers_every_band(
        browser: Any, page_url: str, backends: dict[str, str]) -> None:
    browser.set_window_size(1400, 1000)
    try:
        browser.get(page_url)
        assert _settle(browser) == "done"
        # one paragraph tells the article's story; the glossary names every record and switch
        story = browser.find_element(By.ID, "story").text
        assert "Work That Outlives Its Worker" in story and "silent" in story
        browser.find_element(By.CSS_SELECTOR, "#glossary summary").click()
        terms = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#glossary dt")]
        assert set(_RECORDS) | set(_SWITCHES) <= set(terms), terms
        for run in ("main", "beside"):
            if run == "beside":
                Select(browser.find_element(By.ID, "backend")).select_by_value(backends["sqlite"])
                assert _settle(browser) == "done"
            box = browser.execute_script(
                "return document.getElementById('drawings').getBoundingClientRect().toJSON()")
            for drawing in browser.find_elements(By.CSS_SELECTOR, ".drawing"):
                names = drawing.find_elements(By.CSS_SELECTOR, "svg text.lane-name")
                assert any("newsletter" in n.text for n in names), [n.text for n in names]
                for element in names + drawing.find_elements(By.CSS_SELECTOR, "svg .legend-entry"):
                    r = browser.execute_script(
                        "return arguments[0].getBoundingClientRect().toJSON()", element)
                    assert box["left"] - 0.5 <= r["left"] and r["right"] <= box["right"] + 0.5, (
                        element.text, r, box)
            assert browser.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth")
            _shoot(browser, f"07-1400px-{run}")
        # the legend names every band and every mark the drawing holds
        svg = browser.find_element(By.CSS_SELECTOR, '.drawing[data-backend="memory://"] svg')
        legend = {e.get_attribute("data-legend") for e in svg.find_elements(
            By.CSS_SELECTOR, ".legend-entry")}
        bands = {str(e.get_attribute("class")) for e in svg.find_elements(
            By.CSS_SELECTOR, "rect.life")}
        marks = {e.get_attribute("data-glyph") for e in svg.find_elements(By.CSS_SELECTOR, "g.item")}
        assert bands == {"life", "life silent"}, bands
        assert bands <= legend and marks <= legend, (bands | marks) - legend
        assert svg.find_elements(By.CSS_SELECTOR, "path.arrow") and "arrow" in legend
    finally:
        Select(browser.find_element(By.ID, "backend")).select_by_value("memory://")
        _settle(browser)
        browser.set_window_size(1600, 1200)
