"""The notebooks as a learner meets them: in JupyterLab, in a real browser.

The test starts JupyterLab on 127.0.0.1 with a token (in a temporary copy of the notebooks, with
its own settings) and drives Debian's headless Chromium with Playwright for Python -- no browser
download. nbval already executes every notebook; here each notebook is opened, not re-run: before
running, each widget cell says to run the cells and shows a still of its figure. Every widget of
the course then runs in one notebook made from the course's own cells (``tests/gallery.py``):
after Run ▸ Run All Cells no output is an error, the widgets are controls (not text, not "Error
displaying widget"), and moving each one's control changes what it shows (its pixels). For the
runtime widget, on each click of Run: progress shows, then the result in its place (no progress
line left beside it), while the kernel shows busy and Run is disabled until the result is drawn
(and before the first run, no chart: no broken-image icon); shutting its kernel down (it held warm
ranks) prints no traceback. Three notebooks are run, saved, shut down and reopened: each widget
cell shows its still, never "Error displaying widget". No notebook opens marked modified.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser_support import CHROMIUM, FLAGS, offline_page, skip_without_a_browser
from tests.gallery import gallery, widget_cells

pytestmark = pytest.mark.browser

sync_api = skip_without_a_browser()

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
COURSE = sorted(NOTEBOOKS.glob("*.ipynb"))
#: The notebook the test writes beside the course: every widget cell of every notebook.
GALLERY = "widget_gallery.ipynb"
#: Lab settings: every cell in the page (no windowing: a cell off screen is still in the DOM), no
#: question about Jupyter's news popping over the notebook.
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}
#: The notebook's session: its kernel is connected once ``.kernel`` is there (the page can show the
#: cells, and even 'idle', before).
SESSION = "window.jupyterapp.shell.currentWidget?.sessionContext?.session"
KERNEL = "document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status"
RUNNING = (
    f"{KERNEL} === 'idle' && "
    "![...document.querySelectorAll('.jp-InputPrompt')].some(p => p.innerText.includes('*'))"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the notebooks; yields (base URL, token, log path)."""
    root = tmp_path_factory.mktemp("lab")
    work, home = root / "notebooks", root / "jupyter"
    shutil.copytree(NOTEBOOKS, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (work / GALLERY).write_text(json.dumps(gallery(COURSE)))
    for name, value in SETTINGS.items():
        path = home / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
    )
    port, token, log = _free_port(), secrets.token_hex(16), root / "lab.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={work}",
                "--LabApp.expose_app_in_browser=True",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.3)
        yield base, token, log
    finally:
        server.terminate()  # shuts its kernels down, then exits
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def open_notebook(browser, lab, name: str, stills: bool = True):
    base, token, _ = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    if (
        stills
    ):  # outputs render after the cells: wait for the widget cell's line (each notebook has one)
        page.wait_for_selector(".placement-edu-still", state="attached", timeout=30_000)
    else:  # to run it: its kernel connected and idle
        page.wait_for_function(
            f"{KERNEL} === 'idle' && {SESSION}?.kernel?.status === 'idle'", timeout=60_000
        )
    return page


def run_all(page) -> None:
    """Run ▸ Run All Cells, as a learner does; wait until no cell is running."""
    page.locator(".lm-MenuBar-item", has_text="Run").click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(f"!({RUNNING})", timeout=10_000)  # it started
    page.wait_for_function(RUNNING, timeout=180_000, polling=200)


def errors_shown(page) -> list[str]:
    stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    return [stderr.nth(i).inner_text()[:500] for i in range(stderr.count())]


def shut_down_kernel(page) -> None:
    page.evaluate("window.jupyterapp.commands.execute('kernelmenu:shutdown')")
    page.wait_for_function(f"!['idle', 'busy'].includes({KERNEL})", timeout=30_000)


#: A figure is drawn at twice the pixels it is shown at (sharp on a high-density screen or a
#: projector's zoom), and shown whole: not wider than its output area (no cut-off caption).
SHARP_AND_WHOLE = """img => {
  const shown = img.getBoundingClientRect(), area = img.closest('.jp-OutputArea-output');
  return img.naturalWidth >= 2 * shown.width - 2
    && shown.right <= area.getBoundingClientRect().right + 1;
}"""


def assert_sharp_and_whole(images) -> None:
    for image in images.element_handles():
        if image.evaluate("img => img.naturalWidth > 0 && img.checkVisibility()"):
            assert image.evaluate(SHARP_AND_WHOLE), image.evaluate(
                "img => [img.naturalWidth, img.getBoundingClientRect().width]"
            )


def assert_pixels_change(element, act) -> None:
    before = element.screenshot()
    act()
    deadline = time.monotonic() + 15
    while element.screenshot() == before:
        assert time.monotonic() < deadline, "the figure did not change"
        time.sleep(0.2)


def change_a_control(live) -> None:
    """Move the widget's first control: a dropdown to another option, else a slider one step."""
    select = live.locator("select").first
    if select.count():
        options = select.locator("option").evaluate_all("os => os.map(o => o.value)")
        current = select.input_value()
        select.select_option(next(o for o in options if o != current))
        return
    handle = live.locator(".noUi-handle").first
    handle.focus()
    handle.press("ArrowRight")


#: Close the current notebook as it is (opening it may mark it changed: no "save?" dialog).
CLOSE_WITHOUT_SAVING = "window.jupyterapp.shell.currentWidget.dispose()"

#: Whether the current notebook is marked modified -- its model's ``dirty`` flag, and the tab's
#: mark -- once its kernel is connected and has said what it is (JupyterLab writes the kernel's
#: spec and language into the notebook then: a notebook saved with another kernelspec is modified
#: by opening it).
MODIFIED = """async () => {
  const panel = window.jupyterapp.shell.currentWidget;
  await panel.sessionContext.ready;
  await panel.sessionContext.session?.kernel?.info;
  await new Promise(resolve => setTimeout(resolve, 200));
  return {model: panel.context.model.dirty,
          tab: !!document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')};
}"""


def open_in(page, name: str, stills: bool = True) -> None:
    """Open notebook ``name`` in an open JupyterLab page (File ▸ Open, without loading the
    application again); wait as ``open_notebook`` does."""
    page.evaluate(f"void window.jupyterapp.commands.execute('docmanager:open', {{path: '{name}'}})")
    page.wait_for_function(f"window.jupyterapp.shell.currentWidget?.context?.path === '{name}'")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    if stills:
        page.wait_for_selector(".placement-edu-still", state="attached", timeout=30_000)
    else:
        page.wait_for_function(
            f"{KERNEL} === 'idle' && {SESSION}?.kernel?.status === 'idle'", timeout=60_000
        )


def close_current(page) -> None:
    page.evaluate(CLOSE_WITHOUT_SAVING)
    page.wait_for_function("!document.querySelector('.jp-NotebookPanel')")


@pytest.fixture(scope="module")
def course_page(browser, lab):
    """One JupyterLab page the course's notebooks are opened in one after another (loading the
    application once, not once a notebook)."""
    page = open_notebook(browser, lab, COURSE[0].name)
    close_current(page)
    yield page
    page.close()  # (the kernels still running end with the server)


@pytest.mark.parametrize("name", [p.name for p in COURSE])
def test_a_notebook_opened_without_running_says_to_run_shows_its_stills_and_is_unmodified(
    course_page, name
):
    """Every notebook of the course, as saved: each widget cell shows the line and a still, no
    "Error displaying widget" appears, and opening it does not mark it modified (its kernel
    connected)."""
    page = course_page
    open_in(page, name)
    still = page.locator(".placement-edu-still")
    assert still.count() == len(widget_cells(NOTEBOOKS / name)) >= 1
    assert still.first.is_visible() and "Run the cells" in still.first.inner_text()
    assert "Error displaying widget" not in page.inner_text("body")
    assert page.evaluate(MODIFIED) == {"model": False, "tab": False}
    close_current(page)


def test_a_notebook_saved_under_another_python_opens_modified_unless_the_course_restamps_it(
    course_page, lab
):
    """JupyterLab writes the kernel's Python version into ``language_info`` on open: 00 saved
    under 3.11.0 opens marked modified here. The same notebook as ``placement-edu course`` and
    Binder's postBuild copy it (``for_this_python``) opens unmodified."""
    from placement_edu.course import PYTHON, for_this_python

    work = lab[2].parent / "notebooks"
    notebook = json.loads((NOTEBOOKS / COURSE[0].name).read_text())
    notebook["metadata"]["language_info"]["version"] = "3.11.0"
    older = work / "saved_under_3.11.0.ipynb"
    older.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    restamped = work / "restamped.ipynb"
    restamped.write_bytes(for_this_python(older))
    assert PYTHON != "3.11.0"
    page = course_page
    for path, modified in ((older, True), (restamped, False)):
        open_in(page, path.name)
        assert page.evaluate(MODIFIED)["model"] is modified, path.name
        close_current(page)


def test_rise_presents_a_notebook_with_nothing_from_outside_and_its_widgets_as_stills(browser, lab):
    """RISE's slideshow of 00 (the page "Render as Reveal Slideshow" shows beside the notebook):
    its slides, in the "white" theme that the notebooks' metadata asks for, whose font comes with
    RISE (the default theme's comes from Google's servers), and no request leaving the machine.
    RISE does not draw widgets (jupyterlab-rise 0.43.1 with ipywidgets 8: a widget output is its
    text), so each widget cell shows the line and its still -- what docs/instructors.md says."""
    base, token, _ = lab
    watched = offline_page(browser, viewport={"width": 1280, "height": 800})
    page = watched.page
    page.goto(f"{base}/rise/{COURSE[0].name}?token={token}")
    page.wait_for_selector(".reveal .slides section.present .jp-Cell", timeout=60_000)
    assert page.locator(".reveal .slides > section").count() >= 10
    assert page.locator(".placement-edu-still").count() == len(widget_cells(COURSE[0])) >= 1
    assert page.locator(".placement-edu-live").count() == 0
    page.wait_for_function("document.fonts.check('16px \"Source Sans Pro\"')", timeout=10_000)
    assert watched.outside == []
    page.context.close()


#: Notebooks run, saved, shut down and reopened as a learner does: the start, one with several
#: widgets, and one that launches no process.
REOPENED = (
    "00_start_here.ipynb",
    "11_composition_and_planning.ipynb",
    "12_why_numbers_disagree.ipynb",
)


@pytest.mark.parametrize("name", REOPENED)
def test_a_notebook_run_saved_shut_down_and_reopened_shows_its_stills(course_page, lab, name):
    """Run All, save, shut the kernel down, close it and open it again (File ▸ Open, in the same
    JupyterLab): the widgets' models died with the kernel (and JupyterLab saves no widget state by
    default), so each widget cell shows its line and its still -- the figure as this run drew it
    -- and never "Error displaying widget"."""
    page = course_page
    copy = f"reopened_{name}"  # (the other tests open the notebook as committed)
    shutil.copy(lab[2].parent / "notebooks" / name, lab[2].parent / "notebooks" / copy)
    open_in(page, copy, stills=False)
    run_all(page)
    assert errors_shown(page) == []
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("!window.jupyterapp.shell.currentWidget.context.model.dirty")
    shut_down_kernel(page)
    close_current(page)

    open_in(page, copy)
    page.wait_for_function(f"{SESSION}?.kernel?.status === 'idle'", timeout=60_000)
    page.wait_for_function(  # the widget manager has looked for each widget output's model
        "!document.body.textContent.includes('Loading widget')", timeout=30_000
    )
    assert "Error displaying widget" not in page.inner_text("body")
    stills = page.locator(".placement-edu-still")
    assert stills.count() == len(widget_cells(NOTEBOOKS / name)) >= 1
    for i in range(stills.count()):
        assert stills.nth(i).is_visible() and "Run the cells" in stills.nth(i).inner_text()
    for image in page.locator(".placement-edu-still img").element_handles():
        assert image.evaluate("img => img.naturalWidth") > 0  # this run's figure, drawn
    assert_sharp_and_whole(page.locator(".placement-edu-still img"))
    assert_sharp_and_whole(page.locator(".jp-RenderedImage img"))  # the figures between widgets
    close_current(page)


@pytest.fixture(scope="module")
def gallery_page(course_page, lab):
    """The widget gallery, run all; its kernel shut down at the end (it held warm ranks) with no
    traceback in the server's log."""
    page = course_page
    open_in(page, GALLERY, stills=False)
    run_all(page)
    yield page
    before = len(lab[2].read_text())  # (pages closed while their kernel connected log a 500)
    shut_down_kernel(page)
    close_current(page)
    time.sleep(2)
    assert "Traceback" not in lab[2].read_text()[before:], lab[2].read_text()[before:][-4000:]


def test_every_widget_of_the_course_is_controls_and_its_figure_follows_a_control(gallery_page):
    page = gallery_page
    assert errors_shown(page) == []
    widgets = sum(len(widget_cells(p)) for p in COURSE)
    live = page.locator(".placement-edu-live")
    assert live.count() == widgets >= 13
    body = page.inner_text("body")
    assert "VBox(" not in body and "Error displaying widget" not in body
    for i in range(widgets):
        widget = live.nth(i)
        assert widget.locator("select, input, .noUi-handle, button").count() >= 1, (
            f"widget {i} is not rendered as controls"
        )
        assert not page.locator(".placement-edu-still").nth(i).is_visible()
        assert_sharp_and_whole(widget.locator("img"))
        if not widget.locator(
            ".placement-edu-progress"
        ).count():  # the runtime widget changes on Run
            widget.scroll_into_view_if_needed()
            assert_pixels_change(widget, lambda: change_a_control(widget))


# What the learner sees in the runtime widget over a click on Run, recorded by the page itself at
# every DOM change: the kernel indicator, whether Run is disabled, the text shown outside the
# controls (a visible text node, not a label, option or readout), progress (a visible bar, or a line
# of "starting"/"step i/n"), and whether the run's report (``result``, e.g. "dp on data=4: 5 steps")
# is shown.
WATCH = r"""(widget, result) => {
  const controls = 'select, option, button, label, input, .widget-readout';
  window.look = () => {
    const walk = document.createTreeWalker(widget, NodeFilter.SHOW_TEXT);
    let text = '';
    while (walk.nextNode()) {
      const parent = walk.currentNode.parentElement;
      if (!parent.closest(controls) && parent.checkVisibility({visibilityProperty: true}))
        text += walk.currentNode.data + ' ';
    }
    text = text.replace(/\s+/g, ' ').trim();
    const bar = [...widget.querySelectorAll('.widget-progress')].some(
      b => b.checkVisibility({visibilityProperty: true}));
    return {kernel: document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status, text,
            run_disabled: [...widget.querySelectorAll('button')]
                .find(b => b.innerText.trim() === 'Run').disabled,
            progress: bar || /starting|step \d+\/\d+/.test(text), result: text.includes(result)};
  };
  window.seen = [look()];
  new MutationObserver(() => window.seen.push(look())).observe(
    document.body, {subtree: true, childList: true, attributes: true, characterData: true});
}"""


def run_and_watch(page, widget, result: str) -> None:
    """Click Run and check what the learner sees until the run's report ``result`` is shown:
    progress first, the kernel busy and Run disabled meanwhile, and once it is over (Run enabled,
    the kernel idle, a second later) the report in place of the progress."""
    widget.evaluate(WATCH, result)
    widget.get_by_role("button", name="Run", exact=True).click()
    page.wait_for_function(
        "look().result && !look().run_disabled && look().kernel === 'idle'",
        timeout=60_000,
        polling=100,
    )
    time.sleep(1)
    seen, last = page.evaluate("window.seen"), page.evaluate("look()")
    done = next(i for i, s in enumerate(seen) if s["result"])
    shown = [
        s["text"][:100]
        for i, s in enumerate(seen[:done])
        if i == 0 or s["text"] != seen[i - 1]["text"]
    ]
    assert any(s["progress"] for s in seen[:done]), f"no progress shown before the result: {shown}"
    assert any(s["kernel"] == "busy" for s in seen[:done]), (
        "the kernel did not show busy while it ran"
    )
    assert any(s["run_disabled"] for s in seen[:done]), "Run was not disabled while it ran"
    clicked = next(i for i, s in enumerate(seen) if s["run_disabled"])
    assert all(s["run_disabled"] for s in seen[clicked:done]), "Run came back before the result"
    assert not last["progress"], f"the progress stayed beside the result: {last['text'][:300]}"


def test_the_runtime_widget_shows_progress_then_the_result_while_the_kernel_is_busy(gallery_page):
    page = gallery_page
    widget = page.locator(".placement-edu-live").filter(
        has=page.get_by_role("button", name="Run", exact=True)
    )
    widget.wait_for(timeout=30_000)  # (shown once its output renders)
    widget.scroll_into_view_if_needed()
    assert not widget.locator("img").is_visible()  # no chart yet, and no broken-image icon

    widget.locator(".widget-dropdown", has_text="fault").locator("select").select_option(
        "stale-gather"
    )
    run_and_watch(page, widget, "[stale-gather]: 5 steps")
    chart = widget.locator("img")
    page.wait_for_function(
        "img => img.naturalWidth > 0", arg=chart.element_handle(), timeout=10_000
    )  # (an image decodes after it arrives)

    # Another click, another strategy: progress again (not a blank until the result), and the
    # chart's pixels change.
    widget.locator(".widget-dropdown", has_text="strategy").locator("select").select_option("dp")
    assert_pixels_change(chart, lambda: run_and_watch(page, widget, "dp on data=4: 5 steps"))
