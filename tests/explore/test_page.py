"""`nmt explore`: the page's data, and the page itself in a real headless Chromium."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.cli import app

runner = CliRunner()
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def page(toy_model, toy_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("explore")
    src, ref = folder / "src.txt", folder / "ref.txt"
    src.write_text(
        "".join(line + "\n" for line in (toy_dir / "test.human").read_text().splitlines()[:24]) + "\n"
    )
    ref.write_text(
        "".join(line + "\n" for line in (toy_dir / "test.iso").read_text().splitlines()[:24]) + "\n"
    )
    out = folder / "explore.html"
    args = [
        "explore",
        "-m",
        toy_model.last,
        "-m",
        toy_model.run,
        "--src",
        src,
        "--ref",
        ref,
        "--beam",
        3,
        "--nbest",
        3,
    ]
    result = runner.invoke(app, [*map(str, args), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def page_data(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    match = re.search(r'<script id="nmt-data" type="application/json">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


def test_the_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)  # nothing fetched: no CDN, no server
    assert "http://" not in text and "https://" not in text


def test_the_page_holds_each_systems_outputs_attention_and_nbest(page):
    data = page_data(page)
    assert data["has_ref"] and len(data["systems"]) == 2 and len(data["sentences"]) == 25
    assert {"attention", "decoder", "parameters", "path"} <= set(data["systems"][0])
    first = data["sentences"][0]["sys"][0]
    words = first["forced"]["w"]
    assert words["t"][-1] == "</s>" and "\u2581" not in "".join(words["s"] + words["t"])
    S = len(words["s"])
    for j in range(len(words["t"])):  # each output word's row is a distribution (in thousandths)
        assert sum(words["m"][j * S : (j + 1) * S]) == pytest.approx(1000, abs=S)
    assert len(first["forced"]["links"]) == len(words["t"]) - 1  # argmax: one link per real word
    assert 1 <= len(first["nbest"]) <= 3 and all(0 <= p <= 1 for _, p in first["nbest"][0]["words"])
    assert [system["beam"] for system in data["systems"]] == [3, 3]  # --beam 3
    assert data["sentences"][-1]["src"] == "" and "own" not in data["sentences"][-1]["sys"][0]


def checkpoint_with_beam(checkpoint: Path, beam: int, folder: Path) -> Path:
    """A copy of `checkpoint` whose config decodes with a beam of `beam`."""
    import torch

    from nmt.checkpoint import write_state

    state = torch.load(checkpoint, weights_only=True)
    state["config"]["decode"]["beam"] = beam
    write_state(folder / "beam.pt", state)  # with the edited entries' checksums
    return folder / "beam.pt"


def test_explore_decodes_with_the_models_beam_as_translate_does(toy_model, toy_dir, tmp_path):
    from nmt.decode.translator import load_translator

    model = checkpoint_with_beam(toy_model.last, 3, tmp_path)
    sources = (toy_dir / "test.human").read_text().splitlines()[:4]
    src, out = tmp_path / "src.txt", tmp_path / "explore.html"
    src.write_text("".join(line + "\n" for line in sources))
    args = ["explore", "-m", model, "--src", src, "--nbest", 1, "-o", out]
    result = runner.invoke(app, list(map(str, args)))
    assert result.exit_code == 0, result.output
    data = page_data(out)
    assert data["systems"][0]["beam"] == 3
    translations = load_translator([model], {}).translate(sources)
    assert [s["sys"][0]["out"] for s in data["sentences"]] == [t.text for t in translations]


def test_explore_refuses_a_missing_output_folder(toy_model, toy_dir, tmp_path):
    out = tmp_path / "missing" / "explore.html"
    args = ["explore", "-m", toy_model.last, "--src", toy_dir / "test.human", "-o", out]
    result = runner.invoke(app, list(map(str, args)))
    assert result.exit_code == 2 and "does not exist" in result.stderr and not out.exists()


def chromium():
    """scripts/explorer_load_time.py's `browser`, or a skip that says what is missing."""
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        pytest.skip("no chromium: apt-get install -y chromium chromium-driver (.ci/run does)")
    pytest.importorskip("selenium", reason="selenium missing: pip install -e '.[browser]'")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from explorer_load_time import browser

    return browser


def test_the_page_in_a_real_browser(page, tmp_path):
    browser = chromium()
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser(1500, 1000, console_log=True)
    try:
        driver.get(page.as_uri())
        WebDriverWait(driver, 20).until(lambda d: d.execute_script("return window.nmtReady !== undefined"))
        data = page_data(page)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#rows tr.row")) == len(data["sentences"])

        driver.find_element(By.CSS_SELECTOR, '#rows tr.row[data-n="3"]').click()
        panels = driver.find_elements(By.CSS_SELECTOR, "#panels .panel")
        assert len(panels) == 2
        words = data["sentences"][3]["sys"][0]["forced"]["w"]
        S, T = len(words["s"]), len(words["t"])
        for panel in panels:  # forced on the reference: both systems have the same rows
            assert len(panel.find_elements(By.CSS_SELECTOR, "td.cell")) == T * S
            assert [th.text for th in panel.find_elements(By.CSS_SELECTOR, "th.tgt")] == words["t"]
        cell = panels[0].find_element(By.CSS_SELECTOR, 'td.cell[data-j="0"][data-i="1"]')
        ActionChains(driver).move_to_element(cell).perform()
        info = panels[0].find_element(By.CSS_SELECTOR, ".nmt-hm-info").text
        assert info.endswith(f"{words['m'][1] / 1000:.3f}") or f"{words['m'][1] / 1000:.3f} (aligned)" in info
        assert info.startswith(f"{words['t'][0]} \u2192 {words['s'][1]}")
        row_label = panels[0].find_element(By.CSS_SELECTOR, 'th.tgt[data-j="0"]')
        ActionChains(driver).move_to_element(row_label).perform()
        shaded = [
            th.value_of_css_property("background-color")
            for th in panels[0].find_elements(By.CSS_SELECTOR, "th.src")
        ]
        assert len(set(shaded)) > 1  # the source words are shaded by the row's weights

        driver.find_element(By.ID, "pieces").click()
        pieces = data["sentences"][3]["sys"][0]["forced"]["p"]
        cells = driver.find_elements(By.CSS_SELECTOR, '#panels .panel[data-system="0"] td.cell')
        assert len(cells) == len(pieces["s"]) * len(pieces["t"])
        driver.find_element(By.ID, "pieces").click()

        driver.find_element(By.ID, "filter").send_keys(data["sentences"][5]["src"])
        visible = [r for r in driver.find_elements(By.CSS_SELECTOR, "#rows tr.row") if r.is_displayed()]
        assert 1 <= len(visible) < len(data["sentences"])
        screenshot = tmp_path / "explore.png"
        driver.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        shutil.copy(screenshot, page.parent / "explore.png")  # kept beside the page for a look
    finally:
        driver.quit()
