"""The course as a learner sees it: JupyterLab in headless Chromium, driven by Playwright; and the lectures'
decks as an instructor presents them, on a 1280x720 screen with no network.

JupyterLab runs from the course environment on loopback with a token and a free port, over a copy of the
notebooks. Every wait is bounded, and JupyterLab is stopped whatever happens. Screenshots of the verdicts
and of each deck's most scaled slide go to runs/browser/ (or $LAUNCHLAB_RESULTS_DIR/browser/). Without
Chromium or Playwright the tests skip, unless LAUNCHLAB_REQUIRE_BROWSER=1 (CI sets it), where they fail; the
deck tests also skip when npm cannot fetch reveal.js and MathJax.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from launchlab import course
from launchlab.results import results_dir

ROOT = Path(__file__).resolve().parents[1]
LAB = "labs/03_torch_compile_graph_breaks.ipynb"
LECTURE = "notebooks/02_pytorch_dispatch.ipynb"
REPLAYED = re.compile(r"^\[reference output\]")  # the line above a GPU cell's replayed outputs
COPIES: dict[str, Path] = {}  # "work": the folder JupyterLab serves, where it saves what it writes
RUN_ALL = ("notebooks/07_overhead_ladder.ipynb", "notebooks/10_graphs_in_real_code.ipynb")  # Run All without a GPU
TWO_GPU_LECTURE = "notebooks/08_graphs_across_gpus.ipynb"  # its multi-gpu cells need two GPUs
START = "START_HERE.ipynb"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WAIT_MS = 60_000
DECK_SCREEN = (1280, 720)  # the screen every slide of every deck must fit

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def _require_browser() -> None:
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("Playwright for Python (pip install playwright)")
    if not CHROMIUM:
        missing.append("Chromium (apt-get install chromium)")
    if missing:
        message = "browser tests need " + " and ".join(missing)
        if os.environ.get("LAUNCHLAB_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server over a copy of one lab, the start page and three lectures: (base URL, token)."""
    _require_browser()
    work = tmp_path_factory.mktemp("course")
    COPIES["work"] = work
    for rel in (LAB, LECTURE, START, TWO_GPU_LECTURE, *RUN_ALL):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, work / rel)
    # Render every cell, not only those in view, so that the test can find any cell.
    settings = work / ".settings" / "@jupyterlab"
    (settings / "notebook-extension").mkdir(parents=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    # No "get notified about Jupyter news?" toast over the screenshots.
    (settings / "apputils-extension").mkdir(parents=True)
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "LAUNCHLAB_ROOT": str(ROOT), "LAUNCHLAB_STRICT": "0",
           "LAUNCHLAB_RESULTS_DIR": str(work / "runs"), "JUPYTER_RUNTIME_DIR": str(work / ".runtime")}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
           f"--LabApp.user_settings_dir={work / '.settings'}", f"--LabApp.workspaces_dir={work / '.workspaces'}",
           "--LabApp.news_url=None",
           "--ContentsManager.pre_save_hook=launchlab.jupyter_hooks.keep_course_metadata",  # as `make lab` runs it
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(work / "jupyterlab.log", "w")  # noqa: SIM115  (closed in the finally below)
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}:\n{(work / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("JupyterLab did not answer within 60 s:\n" + (work / "jupyterlab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
        log.close()


@pytest.fixture
def page(jupyterlab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            tab.set_default_timeout(WAIT_MS)
            yield tab
        finally:
            browser.close()


def _screenshot_dir() -> Path:
    path = results_dir() / "browser"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cell_index(rel: str, needle: str) -> int:
    """Index (among all cells) of the first code cell whose source contains needle."""
    nb = nbformat.read(ROOT / rel, as_version=4)
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and needle in c.source)


def _open(page, jupyterlab, rel: str):
    base, token = jupyterlab
    page.goto(f"{base}/lab/tree/{rel}?reset&token={token}")  # reset: this notebook alone, no tabs restored
    visible = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook's own tab, not one restored behind it
    page.locator(f"{visible} .jp-Notebook .jp-Cell").first.wait_for()
    idle = page.locator(f"{visible} .jp-Notebook-ExecutionIndicator[data-status='idle']").first
    choose = page.locator(".jp-Dialog", has_text="Select Kernel").locator(".jp-mod-accept").first
    deadline = time.monotonic() + WAIT_MS / 1000
    while not idle.is_visible():  # JupyterLab may ask which kernel to start: the notebook's own, as a learner would
        if choose.is_visible():
            choose.click()
        if time.monotonic() > deadline:
            raise AssertionError(f"the kernel of {rel} did not start within {WAIT_MS / 1000:.0f} s")
        page.wait_for_timeout(250)
    return page.locator(f"{visible} .jp-Notebook .jp-Cell")


def _run(page, cell) -> None:
    """Run one cell and wait until it has finished (its prompt shows a new execution count)."""
    prompt = cell.locator(".jp-InputPrompt").first
    before = prompt.inner_text().strip()
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        cell.locator(".jp-InputArea").click()
        page.keyboard.press("Escape")         # command mode: Shift+Enter then runs the whole cell
        page.keyboard.press("Shift+Enter")
        # A press sent before the kernel is ready is lost: if the cell has not even queued ([*]), press again.
        for _ in range(20):
            now = prompt.inner_text().strip()
            if now != before:
                break
            page.wait_for_timeout(250)
        if now != before or time.monotonic() > deadline:
            break
    while "*" in prompt.inner_text() or prompt.inner_text().strip() == before:
        if time.monotonic() > deadline:
            raise AssertionError(f"a cell did not finish within {WAIT_MS / 1000:.0f} s (prompt {prompt.inner_text()!r})")
        page.wait_for_timeout(250)


def _type_into(page, cell, text: str) -> None:
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)       # inserted as is: no auto-indent from the editor


RIGHT = """def run_all(fn, inputs, backend):
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    return [compiled(x) for x in inputs]"""
WRONG = """def run_all(fn, inputs, backend):
    compiled = torch.compile(fn, backend=backend)
    return [compiled(x) for x in inputs]"""


@pytest.fixture
def shot_on_failure(page, request):
    """A screenshot of the whole page when a test fails, to see what the learner would have seen."""
    yield
    if getattr(request.node, "rep_call", None) is None or request.node.rep_call.failed:
        page.screenshot(path=str(_screenshot_dir() / f"FAILED_{request.node.name}.png"))


def test_a_learner_answers_an_exercise_and_sees_the_verdict(page, jupyterlab, shot_on_failure):
    cells = _open(page, jupyterlab, LAB)
    setup = cells.nth(_cell_index(LAB, 'check = for_lab("03")'))
    answer = cells.nth(_cell_index(LAB, "def run_all"))
    checker = cells.nth(_cell_index(LAB, "check.check_recompiles"))
    shots = _screenshot_dir()
    _run(page, setup)

    _type_into(page, answer, RIGHT)
    _run(page, answer)
    _run(page, checker)
    verdict = checker.locator(".jp-OutputArea-output").filter(has_text="PASS [Exercise 2: the recompile hunt]")
    verdict.wait_for()
    assert "2 compiles for 10 shapes" in verdict.inner_text()
    checker.screenshot(path=str(shots / "lab03_exercise2_pass.png"))

    _type_into(page, answer, WRONG)
    _run(page, answer)
    _run(page, checker)
    failed = checker.locator(".jp-OutputArea-output").filter(has_text="FAIL [Exercise 2: the recompile hunt]")
    failed.wait_for()
    shown = checker.locator(".jp-OutputArea").inner_text()
    assert "Hint:" in shown and "dynamic=True" in shown
    assert "Traceback" not in shown and checker.locator(".jp-OutputArea-output[data-mime-type*='error']").count() == 0
    checker.screenshot(path=str(shots / "lab03_exercise2_fail.png"))


def test_a_reader_sees_the_stored_reference_outputs_without_running_anything(page, jupyterlab, shot_on_failure):
    cells = _open(page, jupyterlab, LECTURE)
    outputs = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output")
    plot = outputs.locator("img").first
    plot.wait_for()
    assert plot.evaluate("img => img.complete && img.naturalWidth > 100")
    table = outputs.filter(has_text="yours/reference").first
    assert "eager_gpu_idle_fraction" in table.inner_text()
    # Nothing ran: every prompt still shows the reference run's execution count, none is pending.
    assert page.locator(".jp-InputPrompt", has_text="[*]").count() == 0
    assert cells.count() > 10
    plot.scroll_into_view_if_needed()
    page.screenshot(path=str(_screenshot_dir() / "lecture02_stored_plot.png"))
    table.scroll_into_view_if_needed()
    page.screenshot(path=str(_screenshot_dir() / "lecture02_stored_table.png"))


def test_the_start_page_opens_a_lab_from_its_syllabus(page, jupyterlab, shot_on_failure):
    base, token = jupyterlab
    page.goto(f"{base}/lab/tree/{START}?token={token}")
    visible = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    page.locator(f"{visible} .jp-RenderedMarkdown table").first.wait_for()
    row = page.locator(f"{visible} .jp-RenderedMarkdown tr", has_text="torch.compile and graph breaks")
    row.locator("a").nth(1).click()  # lecture, lab, solution: the lab
    page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1",
                 has_text="Lab 03").first.wait_for()
    page.screenshot(path=str(_screenshot_dir() / "start_page_opened_lab03.png"))


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    """Every lecture's deck, built as `make slides` builds them: reveal.js and MathJax beside the decks."""
    _require_browser()
    from launchlab_tools import slides

    out = tmp_path_factory.mktemp("decks")
    try:
        slides.fetch_reveal(out / "offline")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:   # no npm or no registry: not the browser's fault
        pytest.skip(f"the deck tests need reveal.js and MathJax from the npm registry: {exc}")
    return slides.build(out, reveal=out / "offline")


@pytest.fixture
def deck_page():
    """Chromium on a 1280x720 screen with no network: any request that is not for a file is refused, and
    every page error, console error and refused address is kept in `problems`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": DECK_SCREEN[0], "height": DECK_SCREEN[1]})
            tab.set_default_timeout(WAIT_MS)
            tab.problems = []
            tab.on("pageerror", lambda exc: tab.problems.append(f"page error: {exc}"))
            tab.on("console", lambda msg: tab.problems.append(f"console {msg.type}: {msg.text}")
                   if msg.type == "error" else None)

            def offline(route):
                if route.request.url.startswith(("file:", "data:", "blob:")):
                    route.continue_()
                else:
                    tab.problems.append(f"network request refused: {route.request.url[:200]}")
                    route.abort()

            tab.route("**/*", offline)
            yield tab
        finally:
            browser.close()


def _open_deck(page, deck: Path) -> None:
    """Open a deck and wait (bounded) until reveal.js has laid it out, its plots, fonts and MathJax are in and
    its fit script has measured the first slide; then turn transitions off, so that each slide is measured where
    it stops, not in flight."""
    page.problems.clear()
    page.goto(deck.as_uri())
    page.wait_for_function("""() => document.readyState === 'complete' && document.querySelector('.reveal.ready')
        && window.LaunchLabDeck && Reveal.getCurrentSlide().hasAttribute('data-fit-scale')""")
    page.evaluate("""() => Promise.race([
        Promise.all([document.fonts.ready, window.MathJax && MathJax.startup ? MathJax.startup.promise : null]),
        new Promise(done => setTimeout(done, 10000))])""")
    page.evaluate("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")


# Each slide in turn, as a presenter reaches it: how far the deck's fit script scaled it, and where every
# element of it lies against the slide area (reveal.js's own box, in screen pixels) and the screen.
WALK = """async (onlyThisOne) => {
    const frames = () => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
    const out = [];
    for (const slide of onlyThisOne ? [Reveal.getCurrentSlide()] : Reveal.getSlides()) {
        const at = Reveal.getIndices(slide);
        Reveal.slide(at.h, at.v);
        await frames();
        const area = document.querySelector('.reveal .slides').getBoundingClientRect();
        let top = Infinity, bottom = -Infinity, left = Infinity, right = -Infinity;
        for (const el of slide.querySelectorAll('.ll-fit, .ll-fit *')) {
            const box = el.getBoundingClientRect();
            if (box.width === 0 && box.height === 0) continue;
            top = Math.min(top, box.top); bottom = Math.max(bottom, box.bottom);
            left = Math.min(left, box.left); right = Math.max(right, box.right);
        }
        out.push({h: at.h, v: at.v, present: slide.classList.contains('present'),
                  scale: parseFloat(slide.getAttribute('data-fit-scale')),
                  plots: slide.querySelectorAll('img').length,
                  content: [top, bottom, left, right],
                  area: [area.top, area.bottom, area.left, area.right],
                  screen: [window.innerWidth, window.innerHeight]});
    }
    return out;
}"""


def _overflows(slide: dict) -> str:
    """What of a slide lies outside the slide area or the screen (1 px of rounding allowed), or ''."""
    top, bottom, left, right = slide["content"]
    a_top, a_bottom, a_left, a_right = slide["area"]
    width, height = slide["screen"]
    if top < a_top - 1 or bottom > a_bottom + 1 or left < a_left - 1 or right > a_right + 1:
        return f"content {top:.0f}..{bottom:.0f} x {left:.0f}..{right:.0f} outside the slide area " \
               f"{a_top:.0f}..{a_bottom:.0f} x {a_left:.0f}..{a_right:.0f}"
    if a_top < -1 or a_left < -1 or a_bottom > height + 1 or a_right > width + 1:
        return f"the slide area {a_top:.0f}..{a_bottom:.0f} x {a_left:.0f}..{a_right:.0f} is off the screen"
    return ""


def _small_png(path: Path) -> None:
    """Keep a screenshot small: a palette of 128 colours is plenty for slides."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as shot:
        small = shot.convert("RGB").quantize(colors=128)
    small.save(path, optimize=True)


def test_every_slide_of_every_deck_fits_a_1280x720_screen_offline(deck_page, decks):
    from launchlab_tools import slides

    page, failures, summary = deck_page, [], []
    assert len(decks) == len(slides.lectures()) and decks
    for deck in decks:
        _open_deck(page, deck)
        walked = page.evaluate(WALK, False)
        scales = [s["scale"] for s in walked]
        summary.append(f"{deck.name}: {len(walked)} slides, smallest scale {min(scales):.2f}")
        for slide in walked:
            where = f"{deck.name} #/{slide['h']}/{slide['v']}"
            if not slide["present"]:
                failures.append(f"{where}: reveal.js did not show it")
            elif not slide["scale"] >= slides.MIN_SCALE:
                failures.append(f"{where}: scaled to {slide['scale']} to fit, below {slides.MIN_SCALE}: the rule "
                                "in launchlab_tools.slides must cut this slide instead")
            elif _overflows(slide):
                failures.append(f"{where}: {_overflows(slide)}")
        failures += [f"{deck.name}: {problem}" for problem in dict.fromkeys(page.problems)]
        # the slide scaled the most, to see that it is still legible
        tightest = min(walked, key=lambda s: s["scale"])
        page.evaluate(f"Reveal.slide({tightest['h']}, {tightest['v']})")
        shot = _screenshot_dir() / f"deck_{deck.name.split('_')[0]}_tightest_slide.png"
        page.screenshot(path=str(shot))
        _small_png(shot)
    print("\n".join(summary))
    assert not failures, "\n".join(failures[:40])


def test_a_lecture_deck_shows_a_slide_with_its_stored_plot(deck_page, decks):
    (deck,) = [d for d in decks if d.name == "09_past_graphs.slides.html"]
    _open_deck(deck_page, deck)
    page = deck_page
    assert page.locator(".reveal .slides > section").count() >= 8
    # the title slide, whole, the moment the deck opens
    assert "past graphs" in page.locator(".reveal .slides section.present h1").first.inner_text().lower()
    (first,) = page.evaluate(WALK, True)
    assert first["h"] == 0 and first["v"] == 0 and not _overflows(first), _overflows(first)
    # go to the first slide holding a stored plot, as a presenter would (by its address), and see the plot
    address = page.evaluate("""() => {
        const at = Reveal.getIndices(document.querySelector('.reveal .slides section img').closest('section'));
        return '#/' + at.h + '/' + (at.v || 0);
    }""")
    page.goto(deck.as_uri() + address)
    page.wait_for_function("() => window.LaunchLabDeck && Reveal.getCurrentSlide().hasAttribute('data-fit-scale')")
    plot = page.locator(".reveal .slides section.present img").first
    plot.wait_for(state="visible")
    # decoded, and all of it on screen once the slide transition is over, with no scrolling
    page.wait_for_function("""img => {
        const box = img.getBoundingClientRect();
        return img.complete && img.naturalWidth > 100 && box.width > 300 && box.left >= 0 && box.top >= 0
            && box.right <= window.innerWidth && box.bottom <= window.innerHeight;
    }""", arg=plot.element_handle())
    assert not page.problems, page.problems
    shot = _screenshot_dir() / "deck_09_plot_slide.png"
    page.screenshot(path=str(shot))
    _small_png(shot)


def test_a_deck_typesets_math_with_the_mathjax_beside_it(deck_page, decks, tmp_path):
    from launchlab_tools import slides

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Math\n\nInline $e^{i\\pi} + 1 = 0$, and shown:\n\n$$\\sum_{k=1}^{n} k = "
                                      "\\frac{n(n+1)}{2}$$"),
        nbformat.v4.new_code_cell("price = '$5 and $6'", execution_count=1)])
    nbformat.write(nb, tmp_path / "math.ipynb")
    folder = decks[0].parent                    # beside the lectures' decks, sharing their offline folder
    (deck,) = slides.build(folder, [tmp_path / "math.ipynb"], reveal=folder / "offline")
    _open_deck(deck_page, deck)
    shown = deck_page.locator(".reveal .slides section.present .jp-MarkdownCell mjx-container")
    assert shown.count() == 2 and shown.nth(1).locator("svg").count() == 1
    assert deck_page.locator(".jp-CodeCell mjx-container").count() == 0   # code is not math
    assert not deck_page.problems, deck_page.problems


def _stored_images(path: Path) -> int:
    """How many images a notebook's stored outputs hold."""
    nb = nbformat.read(path, as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if "image/png" in o.get("data", {}))


def _gpu_cells(path: Path) -> int:
    """How many code cells of a notebook are tagged to need a GPU."""
    nb = nbformat.read(path, as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" and {"gpu", "multi-gpu"} & set(c.metadata.get("tags", [])))


def _run_all(page, replayed: int) -> None:
    """Run > Run All Cells, then wait until `replayed` cells show their reference output and none is pending."""
    visible = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    marks = page.locator(f"{visible} .jp-OutputArea-output", has_text=REPLAYED)
    pending = page.locator(f"{visible} .jp-InputPrompt", has_text="[*]")
    choose = page.locator(".jp-Dialog", has_text="Select Kernel").locator(".jp-mod-accept").first
    for _ in range(3):  # a click JupyterLab was not ready for (a kernel still starting, a dialog) starts nothing
        page.locator(f"{visible} .jp-Notebook").first.focus()  # the menu acts on the notebook in focus
        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).first.click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).first.click()
        started = time.monotonic()
        while not (marks.count() or pending.count()) and time.monotonic() - started < 15:
            if choose.is_visible():
                choose.click()
            page.wait_for_timeout(250)
        if marks.count() or pending.count():
            break
    deadline = time.monotonic() + 240  # a cold kernel's start counts too
    while marks.count() < replayed or pending.count():
        if choose.is_visible():  # on a loaded machine JupyterLab may ask again which kernel to use: its own
            choose.click()
        if time.monotonic() > deadline:
            page.screenshot(path=str(_screenshot_dir() / "FAILED_run_all.png"))
            raise AssertionError(f"Run All did not finish within 240 s: {marks.count()} of {replayed} GPU cells "
                                 f"replayed, {pending.count()} cells pending")
        page.wait_for_timeout(500)
    page.locator(f"{visible} .jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for()


@pytest.mark.skipif(os.environ.get("LAUNCHLAB_TIER") != "cpu" and __import__("launchlab.env").env.gpu_count() > 0,
                    reason="shows what a learner without a GPU sees")
@pytest.mark.parametrize("rel", RUN_ALL)
def test_run_all_without_a_gpu_keeps_every_stored_output(page, jupyterlab, rel, shot_on_failure):
    stored = _stored_images(ROOT / rel)
    assert stored, f"{rel} stores no plot to keep"
    replayed = _gpu_cells(ROOT / rel)
    cells = _open(page, jupyterlab, rel)
    _run_all(page, replayed)
    count = cells.count()  # after the run: JupyterLab attaches cells as it renders them
    visible = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    outputs = page.locator(f"{visible} .jp-OutputArea-output")
    # Every cell ran (a new execution count on each code cell, none left at the stored one), none failed, and each
    # GPU cell shows the reference run's outputs under its one-line mark, plots included.
    assert page.locator(f"{visible} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    errors = page.locator(f"{visible} .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()[:2000]
    assert outputs.filter(has_text=REPLAYED).count() == replayed
    assert outputs.locator("img").count() >= stored
    # What JupyterLab writes to disk after Run All keeps every stored plot.
    on_disk = COPIES["work"] / rel
    before = on_disk.stat().st_mtime_ns
    cells.first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while on_disk.stat().st_mtime_ns == before and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert on_disk.stat().st_mtime_ns != before, "JupyterLab did not save the notebook"
    assert _stored_images(on_disk) >= stored
    assert count > 10
    outputs.locator("img").last.scroll_into_view_if_needed()
    page.screenshot(path=str(_screenshot_dir() / f"run_all_without_gpu_{Path(rel).stem}.png"))


def _run_all_without_errors(page, jupyterlab, rel: str):
    """Open `rel`, Run All, and require no cell to show an error; the notebook's cells and output areas."""
    cells = _open(page, jupyterlab, rel)
    _run_all(page, _gpu_cells(ROOT / rel))
    visible = ".jp-NotebookPanel:not(.lm-mod-hidden)"
    errors = page.locator(f"{visible} .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.first.inner_text()[:2000]
    return cells, page.locator(f"{visible} .jp-OutputArea-output")


@pytest.mark.skipif(os.environ.get("LAUNCHLAB_TIER") != "cpu" and __import__("launchlab.env").env.gpu_count() > 1,
                    reason="shows what a learner with fewer than two GPUs sees")
def test_run_all_with_fewer_than_two_gpus_runs_every_cpu_cell_of_lecture_08(page, jupyterlab, shot_on_failure):
    """Its CPU cells (two gloo ranks) run; each two-GPU cell ends with the replay's line instead of stopping Run All."""
    cells, outputs = _run_all_without_errors(page, jupyterlab, TWO_GPU_LECTURE)
    assert outputs.filter(has_text=REPLAYED).count() == _gpu_cells(ROOT / TWO_GPU_LECTURE)
    assert outputs.filter(has_text="CLAIM HELD").count() >= 2  # the gloo cells' claims, run here
    assert cells.count() > 10


@pytest.mark.skipif(os.environ.get("LAUNCHLAB_TIER") != "cpu" and __import__("launchlab.env").env.gpu_count() > 0,
                    reason="shows what a learner without a GPU sees")
def test_run_all_of_a_lab_without_a_gpu_judges_every_cpu_exercise(page, jupyterlab, shot_on_failure):
    """Lab 03 untouched: each CPU exercise prints its FAIL (not implemented yet) and Run All goes on past it; the
    GPU exercise's check says where its verdict is, instead of stopping the run."""
    cells, outputs = _run_all_without_errors(page, jupyterlab, LAB)
    cpu_exercises = [ex for ex in course.chapter("03").exercises if ex.runs_on == "cpu"]
    assert outputs.filter(has_text="not implemented yet").count() == len(cpu_exercises) >= 3
    assert outputs.filter(has_text=REPLAYED).filter(has_text="solution notebook").count() == _gpu_cells(ROOT / LAB)
    last = cells.nth(cells.count() - 1)
    assert "[ ]" not in last.locator(".jp-InputPrompt").inner_text()  # the run reached the last cell
    page.screenshot(path=str(_screenshot_dir() / "run_all_without_gpu_lab03.png"))


def test_a_learners_own_error_shows_its_traceback_without_a_gpu(page, jupyterlab, shot_on_failure):
    cells = _open(page, jupyterlab, LAB)
    setup = cells.nth(_cell_index(LAB, 'check = for_lab("03")'))
    answer = cells.nth(_cell_index(LAB, "def run_all"))
    _run(page, setup)
    _type_into(page, answer, RIGHT + "\n\nprint(undefined_name_in_your_answer)")
    _run(page, answer)
    error = answer.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    error.first.wait_for()
    shown = answer.locator(".jp-OutputArea").inner_text()
    assert "NameError" in shown and "undefined_name_in_your_answer" in shown, shown[:2000]
    assert "[skipped" not in shown and "Cell In[" in shown, shown[:2000]  # the frame of the learner's own cell
    answer.screenshot(path=str(_screenshot_dir() / "lab03_own_error_traceback.png"))


def test_opening_and_saving_a_notebook_changes_nothing_on_disk(page, jupyterlab, shot_on_failure):
    """A learner who opens a lecture, lets its kernel start and saves (as autosave would) leaves the file as the
    repository holds it: JupyterLab's kernel metadata is already what the course stores."""
    path = COPIES["work"] / LECTURE
    before = path.stat().st_mtime_ns
    cells = _open(page, jupyterlab, LECTURE)
    cells.first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 20
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    assert path.stat().st_mtime_ns != before, "Ctrl+S did not save the notebook"
    saved = json.loads(path.read_text())
    held = json.loads((ROOT / LECTURE).read_text())
    assert saved["metadata"] == held["metadata"], (saved["metadata"], held["metadata"])
    assert path.read_bytes() == (ROOT / LECTURE).read_bytes(), "same notebook, written differently: git would show a change"
