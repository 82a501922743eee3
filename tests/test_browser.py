"""JupyterLab as `make lab` serves it, and the lesson and the explorers in a real browser.

`make lab` (one server for this module: tests/processes.py) runs on 127.0.0.1 at a free port with a token and no
browser of its own, with pkit's extension that colours `%%cuda` cells as C++ (pkit/lesson/labextension), serving a
copy of notebooks/ (so nothing can write to notebooks/). As a client: it answers, serves the lab page, its servers
carry --allow-root exactly as root, and when this module ends its process group stops on SIGTERM, leaving nothing.
In headless Chromium (Debian's `chromium` and `chromium-driver`, driven by Selenium; one for this module), each test
opens its notebook in a workspace of its own and runs every cell through JupyterLab's Run menu, no cell writing an
error or stderr. Then, per notebook:

- `notebooks/08_lesson_multi_gpu_communication.ipynb`: each of the six checks prints its verdict (without GPUs
  `· compiled ...; not run`, on GPUs ✓ or ✗) and the recorded tables show; the six `%%cuda` exercise cells are
  coloured as C++ and every other code cell as Python; screenshot `build/browser/lesson.png`;
- `notebooks/09_explorers.ipynb`: the roofline explorer's message-size slider moved by keyboard, its output read
  before and after; screenshot `build/browser/explorers.png`.

The driver and its Chromium run in a process group of their own, ended by its id, checking that nothing of it is
left. The browser tests skip, saying why, where Chromium, chromedriver or Selenium are missing (`.ci/run` installs
the first two with apt-get; `make install` installs Selenium, the dev extra). Every wait has a deadline; each test
takes well under a minute here.
"""
import contextlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path

import pytest
from processes import Lab, end_group, get, group_members, make_lab

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "08_lesson_multi_gpu_communication.ipynb"
EXPLORERS = ROOT / "notebooks" / "09_explorers.ipynb"
SHOTS = ROOT / "build" / "browser"
CHROMIUM = ("chromium", "chromium-browser")  # Debian's package names the binary chromium; Ubuntu's older one
CHROMEDRIVER = ("chromedriver",)
STDERR_CSS = "[data-mime-type='application/vnd.jupyter.stderr']"  # how JupyterLab renders errors and stderr
MARKS = ("·", "✓", "✗")  # how a lesson check's verdict starts: not run (no GPU), right, wrong



def _which(names) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


def _missing() -> str | None:
    """What this machine lacks to drive Chromium, and how to get it; None where nothing is missing."""
    missing = [name for name, names in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not _which(names)]
    if missing:
        return (f"{' and '.join(missing)} not on PATH: install Debian's packages "
                "(apt-get install -y chromium chromium-driver; .ci/run does)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: pip install -e '.[dev]' (make install does)"
    return None


MISSING = _missing()


def in_chromium(test):
    """Mark a test that drives JupyterLab in headless Chromium: `browser`, at most 180 s, skipped (saying why) where
    MISSING names what this machine lacks."""
    for mark in (pytest.mark.browser, pytest.mark.timeout(180),
                 pytest.mark.skipif(MISSING is not None, reason=str(MISSING))):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` serving a copy of notebooks/ for this module's tests; ended (nothing of it may be left) after them."""
    with make_lab(tmp_path_factory.mktemp("lab")) as server:
        yield server


def test_make_lab_serves_jupyterlab_and_stops_by_its_pid(lab):
    """`make lab` under this uid (root in CI: --allow-root) answers, serves the lab page, and its servers carry
    --allow-root exactly as root; that its process group stops on SIGTERM is checked when the module ends."""
    status, api = get(f"{lab.url}/api")
    assert status == 200 and "version" in json.loads(api)
    status, page = get(f"{lab.url}/lab?token={lab.token}")
    assert status == 200 and "JupyterLab" in page
    servers = [cmd for _, cmd in group_members(lab.pgid) if "jupyter" in cmd]
    assert servers, group_members(lab.pgid)
    assert all(("--allow-root" in cmd) == (os.getuid() == 0) for cmd in servers), servers


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless Chromium through chromedriver, both in a process group of their own, for this module's tests."""
    chromium, chromedriver = _which(CHROMIUM), _which(CHROMEDRIVER)
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    folder = tmp_path_factory.mktemp("chromium")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-proxy-server",
                "--window-size=1400,1600", "--no-first-run", "--disable-extensions", "--disable-background-networking",
                f"--user-data-dir={folder / 'profile'}"):
        options.add_argument(arg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        options.ignore_local_proxy_environment_variables()  # the driver is on 127.0.0.1 too
    # A path to the driver: Selenium does not run Selenium Manager, which would try to download a browser.
    service = Service(executable_path=chromedriver, log_output=str(folder / "chromedriver.log"),
                      popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    pgid = service.process.pid
    try:
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(30)
        yield driver
    finally:
        with contextlib.suppress(WebDriverException, OSError):
            driver.quit()  # ends the browser through the driver; the group is ended below either way
        left = end_group(pgid)[1]
        assert not left, f"chromedriver/chromium processes left behind: {left}"


def _wait(driver, condition, timeout: float, what: str, detail=None):
    """Poll `condition(driver)` until it returns something truthy (returned) or `timeout` s pass: then fail naming
    `what` and `detail()` (what was seen), with a screenshot for the post-mortem."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            got = condition(driver)
            if got:
                return got
        except (StaleElementReferenceException, WebDriverException) as e:  # the page changed under the query
            last = e
        time.sleep(0.25)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / "failed.png"))
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (screenshot build/browser/failed.png)"
                + (f"; last error: {last}" if last else "") + (f"\n{detail()}" if detail else ""))


def _code_prompts(driver) -> list[str]:
    """The input prompt of each code cell: '[3]:' run, '[*]:' running or queued, '[ ]:' not run."""
    return [p.text.strip() for p in driver.find_elements("css selector", ".jp-CodeCell .jp-InputPrompt")]


def _all_ran(driver):
    prompts = _code_prompts(driver)
    return len(prompts) > 0 and all(p[1:-2].isdigit() for p in prompts)


def _run_all(driver, lab: Lab, notebook: Path, timeout: float = 90) -> list[str]:
    """Open the served copy of `notebook`, wait for its kernel, run every cell through Run menu → Run All Cells and
    wait (up to `timeout` s) until every code cell has run; fail on any error or stderr output. Returns each
    output's text."""
    cells = sum(c["cell_type"] == "code" for c in json.loads(notebook.read_text())["cells"])
    driver.get(lab.page(notebook))
    _wait(driver, lambda d: len(_code_prompts(d)) == cells, 90, f"the notebook's {cells} code cells to appear")
    _wait(driver, lambda d: d.find_elements("css selector", ".jp-Notebook-ExecutionIndicator[data-status='idle']"),
          60, "the kernel to start (execution indicator idle)")
    # Run menu → Run All Cells: the menu bar item, then the command's entry in the opened menu
    _wait(driver, lambda d: [e for e in d.find_elements("css selector", ".lm-MenuBar-itemLabel") if e.text == "Run"],
          30, "the Run menu")[0].click()
    _wait(driver, lambda d: [e for e in d.find_elements("css selector", ".lm-Menu-itemLabel")
                             if e.text == "Run All Cells"], 30, "Run All Cells in the Run menu")[0].click()
    _wait(driver, lambda d: _all_ran(d) or d.find_elements("css selector", STDERR_CSS), timeout,
          "every code cell to run (or an error)",
          lambda: f"prompts {_code_prompts(driver)}; JupyterLab's log ends:\n{lab.log.read_text()[-3000:]}")
    stderr = driver.find_elements("css selector", STDERR_CSS)  # an error, a warning or other noise from a cell
    assert not stderr, "\n".join(e.text for e in stderr)[-3000:]
    return [e.text for e in driver.find_elements("css selector", ".jp-OutputArea-output")]


def _screenshot(driver, inside, name: str) -> Path:
    """Scroll the code cell holding element `inside` to the top of the window and save the window as
    build/browser/<name>.png; returns its path."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});",
                          inside.find_element("xpath", "ancestor-or-self::div[contains(@class,'jp-CodeCell')][1]"))
    time.sleep(0.5)  # let images (a redrawn chart) load before the screenshot
    path = SHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path))
    return path


def _cell_languages(driver) -> list | None:
    """(first line, language) of each code cell's editor: CodeMirror names the language it colours the cell in
    (`data-language`: 'python', 'cpp'); None while a cell has none yet (languages load lazily)."""
    pairs = driver.execute_script("return [...document.querySelectorAll('.jp-CodeCell .cm-content')].map("
                                  "e => [e.querySelector('.cm-line').textContent, e.dataset.language || null]);")
    return pairs if pairs and all(language for _, language in pairs) else None


def _roofline(driver):
    """The roofline explorer's message-size slider handle and readout, its text output element, and the source
    of its chart's image (a blob: URL, new with each new picture)."""
    slider = driver.find_element("xpath", "//div[contains(@class,'widget-slider')]"
                                          "[.//label[normalize-space()='message / GPU']]")
    box = slider.find_element("xpath", "ancestor::div[contains(@class,'jp-OutputArea-output')][1]")
    text = next(e for e in box.find_elements("css selector", ".widget-html-content") if "floor" in e.text)
    chart = box.find_element("css selector", "img.widget-image").get_attribute("src")
    return (slider.find_element("css selector", ".noUi-handle"), slider.find_element("css selector", ".widget-readout"),
            text, chart)


@in_chromium
def test_lesson_notebook_runs_in_jupyterlab_and_every_check_answers(browser, lab):
    driver = browser
    start = time.monotonic()
    outputs = _run_all(driver, lab, LESSON)
    verdicts = [t for t in outputs if t[:1] in MARKS and t[1:2] == " "]
    assert len(verdicts) == 6, f"expected the six checks' verdicts, got {verdicts}"
    assert any(t.startswith("recorded on h200x2-nv18") for t in outputs), "no recorded table's provenance line"
    languages = _wait(driver, _cell_languages, 30, "every code cell's editor to have a language",
                      lambda: _cell_languages(driver))
    cuda = [language for line, language in languages if line.startswith("%%cuda ")]
    assert cuda == ["cpp"] * 6, languages
    assert {language for line, language in languages if not line.startswith("%%cuda ")} == {"python"}, languages
    first = next(e for e in driver.find_elements("css selector", ".jp-OutputArea-output") if e.text == verdicts[0])
    shot = _screenshot(driver, first, "lesson")
    print(f"browser: {time.monotonic() - start:.1f} s from opening the notebook; {verdicts[0][:40]}...; "
          f"screenshot {shot}")


@in_chromium
def test_explorers_notebook_runs_in_jupyterlab_and_its_widgets_respond(browser, lab):
    from selenium.webdriver.common.keys import Keys

    driver = browser
    start = time.monotonic()
    outputs = "\n".join(_run_all(driver, lab, EXPLORERS))
    # The three explorers render as widgets (not their text fallback "VBox(children=...)")
    assert "VBox(children" not in outputs
    _wait(driver, lambda d: len(d.find_elements("css selector", ".jp-OutputArea-output .widget-vbox")) >= 3, 30,
          "three explorers drawn as widgets")
    handle, readout, text, before_chart = _wait(driver, _roofline, 30,
                                                "the roofline explorer's message-size slider, text and chart")
    before_size, before = readout.text, text.text
    assert "64 MiB" in before_size and "64 MiB per GPU" in before, (before_size, before)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", handle)
    handle.click()  # focus the handle; each arrow key moves it to the next size (a power of two)
    handle.send_keys(Keys.ARROW_RIGHT)
    after = _wait(driver, lambda d: _roofline(d)[2].text != before and _roofline(d)[2].text, 30,
                  "the roofline explorer's text to follow the slider")
    after_size = _roofline(driver)[1].text
    assert after_size != before_size and f"{after_size} per GPU" in after, (before_size, after_size, after)
    _wait(driver, lambda d: _roofline(d)[3] != before_chart, 30, "the roofline explorer's chart to be redrawn")
    shot = _screenshot(driver, handle, "explorers")
    print(f"browser: {time.monotonic() - start:.1f} s from opening the notebook; slider {before_size} → "
          f"{after_size}; screenshot {shot}")
