"""`unstable report` in a real browser: the system's Chromium, headless and offline (file://), opens a tiny
run's report.html; no console error, the charts drawn, the game browser filters and replays a game, and an
answer holding markup shows as text without running. Screenshots go to docs/ (report-overview.png,
report-replay.png) with UNSTABLE_SCREENSHOTS=1, else beside the test's run. Skipped only where Chromium
is absent (CI installs it: .ci/run)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from unstable_core.report.html.page import write_report

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "run-7a23685"
DRIVER = "/usr/bin/chromedriver"
PLANTED = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def planted_run(tmp_path: Path) -> Path:
    """The fixture run, with the answer of game 0's first turn replaced by markup that would run if parsed."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run, ignore=shutil.ignore_patterns("checkpoints"))
    path = run / "games" / "games.jsonl"
    games = [json.loads(line) for line in path.read_text().splitlines()]
    step = games[0]["trajectories"][0]["steps"][0]
    step["action"] = step["act"] = PLANTED
    step["step_info"]["legal"] = {"moves": ["[0]", "[1]", PLANTED], "ids": [[1], [2], [3]], "played": 2}
    reply = {**step, "pid": 1, "turn": 1, "act": "[4]", "action": "[4]", "step_info": {}, "reward": 0.5}
    games[0]["trajectories"][1]["steps"] = [reply]  # a second turn to step to
    path.write_text("".join(json.dumps(g) + "\n" for g in games))
    return run


def browser(chromium: str):
    """Headless Chromium through the system's chromedriver (selenium-manager downloads nothing)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager, should it be asked, fetches nothing
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=opts)


def open_report(driver, path: Path) -> float:
    """Open the report and wait until its script has drawn it; the seconds it took."""
    from selenium.webdriver.support.ui import WebDriverWait

    started = time.monotonic()
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.find_element("tag name", "body").get_attribute("data-ready"))
    return time.monotonic() - started


def errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.skipif(_chromium() is None or not Path(DRIVER).exists(), reason="no chromium/chromedriver")
def test_report_in_a_real_browser(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    report = write_report(planted_run(tmp_path))
    # docs/'s screenshots are retaken on request only (UNSTABLE_SCREENSHOTS=1), so a test run leaves the tree clean
    shots = ROOT / "docs" if os.environ.get("UNSTABLE_SCREENSHOTS") == "1" else tmp_path
    driver = browser(_chromium())
    try:
        open_report(driver, report)
        assert driver.find_elements(By.CSS_SELECTOR, ".chart canvas"), "no chart drawn"
        drawn = driver.execute_script("return document.querySelector('.chart canvas').width")
        assert drawn > 0
        assert "result:" in driver.find_element(By.ID, "verdict").text
        driver.save_screenshot(str(shots / "report-overview.png"))
        all_games = len(driver.find_elements(By.CSS_SELECTOR, "tr.game-row"))
        Select(driver.find_element(By.ID, "f-kind")).select_by_visible_text("train")
        train = driver.find_elements(By.CSS_SELECTOR, "tr.game-row")
        assert 0 < len(train) < all_games
        assert all(r.find_elements(By.TAG_NAME, "td")[-1].text == "train" for r in train)
        Select(driver.find_element(By.ID, "f-kind")).select_by_visible_text("all")
        driver.find_element(By.CSS_SELECTOR, 'tr.game-row[data-n="0"]').click()
        WebDriverWait(driver, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "#turn pre.answer").text)
        assert driver.find_element(By.CSS_SELECTOR, "#turn pre.obs").text.startswith("<|im_start|>system")
        assert driver.find_element(By.CSS_SELECTOR, "#turn pre.answer").text == PLANTED  # text, not markup
        assert PLANTED in driver.find_element(By.ID, "turn").text  # the legal answers' table too
        assert "not recorded" in driver.find_element(By.CSS_SELECTOR, ".legal-note").text
        assert driver.execute_script("return window.__pwned") is None
        driver.find_element(By.ID, "turn-next").click()
        assert driver.find_element(By.ID, "turn-pos").text == "turn 2 of 2"
        assert driver.find_element(By.CSS_SELECTOR, "#turn pre.answer").text == "[4]"
        assert "seat 1" in driver.find_element(By.CSS_SELECTOR, "#turn h4").text
        driver.find_element(By.ID, "turn-prev").click()
        assert not driver.find_elements(By.CSS_SELECTOR, "#app img")
        driver.find_element(By.ID, "replay").screenshot(str(shots / "report-replay.png"))
        assert errors(driver) == []
    finally:
        driver.quit()
