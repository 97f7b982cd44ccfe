"""Headless Chromium for the tree explorer's page: Debian's package, driven by Playwright.

Playwright drives the Chromium on this machine (`executable_path`) and downloads no
browser of its own; scripts/install-chromium.sh (`make chromium`) installs Debian's
package.  The browser test (tests/jobs/test_explorer_browser.py) and the benchmark
(benchmarks/explorer_open.py) open pages through `chromium_page`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

INSTALL = "scripts/install-chromium.sh"


def chromium_path() -> str | None:
    """The Chromium to drive: $CHROMIUM, else `chromium` on the PATH; None when there is none."""
    named = os.environ.get("CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def chromium_page(width: int = 1280, height: int = 800) -> Iterator[Any]:
    """A Playwright page of a fresh headless Chromium, closed after the block."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError(f"headless Chromium is not installed: run {INSTALL} (make chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()
