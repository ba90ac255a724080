"""Open an `nmt explore` page in Debian's headless chromium and report its size and load time
(navigation start to the page's `window.nmtReady`: data parsed, list and first sentence drawn),
optionally saving a screenshot of a selected sentence.

    python scripts/explorer_load_time.py explore.html [--select N] [--screenshot shot.png] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

READY = "return window.nmtReady !== undefined"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser(width: int, height: int, console_log: bool = False) -> webdriver.Chrome:
    """Debian's headless chromium through its chromedriver (nothing downloads a browser), with a
    fresh profile; `console_log` keeps the page's console messages for `get_log("browser")`."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in [*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={tempfile.mkdtemp()}"]:
        options.add_argument(flag)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("page", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--select", type=int, default=0, help="0-based sentence to select for the screenshot")
    parser.add_argument("--hover", type=int, nargs=2, metavar=("J", "I"), help="hover this cell of system 1")
    parser.add_argument("--screenshot", type=Path)
    parser.add_argument("--size", type=int, nargs=2, default=(1400, 820), metavar=("W", "H"))
    args = parser.parse_args()
    times = []
    for _ in range(args.runs):
        driver = browser(*args.size)
        try:
            driver.get(args.page.resolve().as_uri())
            WebDriverWait(driver, 60).until(lambda d: d.execute_script(READY))
            times.append(driver.execute_script("return window.nmtReady") / 1000)
            if args.screenshot:
                driver.find_element(By.CSS_SELECTOR, f'#rows tr.row[data-n="{args.select}"]').click()
                if args.hover:
                    j, i = args.hover
                    where = f'#panels td.cell[data-j="{j}"][data-i="{i}"]'
                    cell = driver.find_element(By.CSS_SELECTOR, where)
                    ActionChains(driver).move_to_element(cell).perform()
                driver.save_screenshot(str(args.screenshot))
        finally:
            driver.quit()
    size = args.page.stat().st_size / 1e6
    print(
        f"{args.page}: {size:.2f} MB; load to ready {statistics.median(times):.2f} s median of {len(times)} "
        f"({', '.join(f'{t:.2f}' for t in times)})"
    )


if __name__ == "__main__":
    main()
