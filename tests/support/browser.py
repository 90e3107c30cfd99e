"""A real headless Chromium (Debian's ``chromium``) driven by Selenium through ``chromium-driver``.

``make test-only`` installs both when they are missing (the Makefile's ``chromium`` target). The
driver and browser are named by path, so Selenium never tries to download either.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError(f"{names[0]} is not installed: run 'make chromium' (apt-get install chromium chromium-driver)")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=_binary("chromedriver")))
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
