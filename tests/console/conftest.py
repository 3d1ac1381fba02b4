"""The console's browser tests' fixtures: one headless Chromium per module, a page per test
(failing on any JavaScript error), and `shots(page, name)` saving a full-page screenshot under
the test's tmp dir and in build/console-screenshots/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from console_process import CHROMIUM

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # No background networking: on a machine without internet Chromium's own
        # connections (updates, sync, lookups of Google's hosts) are refused or hang.
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, timeout=60_000,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    directory = tmp_path_factory.mktemp("console-screenshots")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def shoot(page, name: str) -> None:
        path = directory / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shutil.copy(path, SCREENSHOTS / path.name)

    return shoot


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)  # every wait bounded, a slow CI machine included
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
