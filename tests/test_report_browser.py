"""index.html opened in a real browser: headless Chromium renders the report of a run with device-time
figures and of one from before them, and of a run with a history's trend charts, takes a screenshot and
dumps the DOM after the page has loaded.
The page fails on a blank or broken render: a uniform or nearly empty screenshot, no chart bars in it, a
chart <img> that did not decode, a speed matrix that lost its cells, or a page wider than the window.

Skipped with the reason where no Chromium is installed (`.ci/run` installs Debian's `chromium` where
the machine allows); `pytest -m browser` selects these tests alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from functools import lru_cache
from html import unescape
from pathlib import Path

import pytest

from ampbench.report import MODE_COLORS, build_report, load_run
from ampbench.report.needs_look import needs_a_look
from ampbench.report.speed_cells import has_figure, matrix
from ampbench.results.ratios import DEVICE, WALL

pytestmark = pytest.mark.browser

DATA = Path(__file__).parent / "data"
# real H100 runs: one as test_speed writes it now (device time, host load, kernel changes; resnet50 amp_fp16
# made 5% slower on the GPU), and one from before device time
RUNS = ("h100_speed_device.json", "h100_run.json")
CHROMIUM_NAMES = ("chromium", "chromium-browser")
WIDTH, HEIGHT = 1280, 4000  # tall enough that the screenshot holds charts below the speed tables
LAUNCH_TIMEOUT_S = 120
# a probe appended to a copy of the page: what the browser made of it, written into the DOM once loaded
PROBE = """<script>
window.addEventListener("load", function () {
  var probe = {images: [], matrices: [], headings: [], scrollWidth: document.documentElement.scrollWidth,
               innerWidth: window.innerWidth, text: document.body.innerText.length};
  document.querySelectorAll("img").forEach(function (img) {
    var box = img.getBoundingClientRect();
    probe.images.push({alt: img.alt, complete: img.complete, naturalWidth: img.naturalWidth,
                       naturalHeight: img.naturalHeight, width: box.width, height: box.height});
  });
  document.querySelectorAll("table.matrix").forEach(function (table) {
    probe.matrices.push(Array.from(table.querySelectorAll("tbody tr"), function (tr) {
      return Array.from(tr.cells, function (td) { return td.innerText; });
    }));
  });
  document.querySelectorAll("h2").forEach(function (h) { probe.headings.push(h.innerText); });
  probe.look = Array.from(document.querySelectorAll("ul.look > li"), function (li) {
    var summary = li.querySelector("summary"), detail = li.querySelector(".look-detail");
    return {summary: summary.innerText, height: summary.getBoundingClientRect().height,
            lineHeight: parseFloat(getComputedStyle(summary).lineHeight), open: li.querySelector("details").open,
            detailShown: detail ? detail.checkVisibility() : null,
            kernelRows: li.querySelectorAll("table.kernels tbody tr").length};
  });
  var look = document.querySelector("ul.look");
  probe.lookHeight = look ? look.getBoundingClientRect().height : 0;
  probe.chips = Array.from(document.querySelectorAll(".chip"), function (chip) {
    var style = getComputedStyle(chip);
    return {text: chip.innerText, color: style.color, background: style.backgroundColor};
  });
  var out = document.createElement("pre");
  out.id = "ampbench-probe";
  out.textContent = JSON.stringify(probe);
  document.body.appendChild(out);
});
</script>"""


def _chromium() -> str:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip(f"no Chromium found: none of {', '.join(CHROMIUM_NAMES)} is on PATH "
                "(Debian: apt-get install -y chromium)")


def _browse(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run on `page`; its whole process group is ended if it outlives the timeout."""
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
               *args, page.as_uri()]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"Chromium did not finish {page.name} within {LAUNCH_TIMEOUT_S} s")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def screenshot(page: Path, tmp: Path) -> Path:
    png = tmp / f"{page.stem}.png"
    done = _browse(page, tmp, f"--screenshot={png}")
    assert png.is_file(), f"Chromium wrote no screenshot of {page} (exit {done.returncode}): {done.stderr[-2000:]}"
    return png


def probe(page: Path, tmp: Path) -> dict:
    """The probe's findings on a copy of `page`, read from the DOM Chromium dumps after the load event."""
    probed = tmp / f"{page.stem}.probe.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    done = _browse(probed, tmp, "--dump-dom")
    found = re.search(r'<pre id="ampbench-probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the page never finished loading in Chromium (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(unescape(found.group(1)))


def _pixels(png: Path):
    """The screenshot's pixels as one int32 0xRRGGBB per pixel."""
    import matplotlib.image
    import numpy as np

    rgb = np.round(matplotlib.image.imread(str(png))[..., :3] * 255).astype(np.int32)  # floats in [0, 1]
    return (rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2]).ravel()


def screenshot_problems(png: Path, min_ink: float = 0.03, min_bar_pixels: int = 400) -> list[str]:
    """Why a screenshot is not a rendered report: a single colour, too little drawn on the background,
    or too few chart bars (pixels of at least four modes' colours, give or take 6 per channel)."""
    import numpy as np

    pixels = _pixels(png)
    colours, counts = np.unique(pixels, return_counts=True)
    if len(colours) == 1:
        return [f"{png.name} is one uniform colour #{int(colours[0]):06x}: a blank page"]
    problems = []
    ink = 1 - counts.max() / len(pixels)
    if ink < min_ink:
        problems.append(f"{png.name}: only {ink:.1%} of the pixels differ from the background; expected at least "
                        f"{min_ink:.0%}")
    channels = np.stack([colours >> 16, colours >> 8 & 255, colours & 255], axis=1)
    bars = {}
    for mode, hex_colour in MODE_COLORS.items():
        target = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
        bars[mode] = int(counts[np.abs(channels - target).max(axis=1) <= 6].sum())
    drawn = [mode for mode, n in bars.items() if n >= min_bar_pixels]
    if len(drawn) < 4:
        problems.append(f"{png.name}: chart bars of only {drawn or 'no'} modes ({bars} pixels); expected at least four")
    return problems


def page_problems(found: dict, charts: int) -> list[str]:
    """Why the loaded page is broken: a chart image missing or undecoded or not laid out, a verdict
    chip's label in its own background colour, or a page wider than the window."""
    problems = []
    if len(found["images"]) != charts:
        problems.append(f"{len(found['images'])} images on the page; expected the report's {charts} charts")
    for img in found["images"]:
        if not (img["complete"] and img["naturalWidth"] > 0 and img["naturalHeight"] > 0):
            problems.append(f"chart {img['alt']!r} did not decode (naturalWidth {img['naturalWidth']})")
        elif img["width"] < 200 or img["height"] < 100:
            problems.append(f"chart {img['alt']!r} is laid out {img['width']:.0f}x{img['height']:.0f} px")
    for chip in found["chips"]:
        if chip["color"] == chip["background"]:
            problems.append(f"verdict chip {chip['text']!r} is drawn in its own background colour {chip['color']}")
    if found["scrollWidth"] > found["innerWidth"] + 1:
        problems.append(f"the page is {found['scrollWidth']} px wide in a {found['innerWidth']} px window")
    return problems


@lru_cache(maxsize=None)
def _report(name: str) -> dict[str, bytes]:
    return build_report(load_run(DATA / name))


@pytest.fixture(scope="module", params=RUNS)
def browsed(request, tmp_path_factory):
    """(run, report files, index.html's path, the probe's findings on it) of one run."""
    _chromium()  # skips before the report is built where there is no browser
    run = load_run(DATA / request.param)
    files = _report(request.param)
    folder = tmp_path_factory.mktemp(Path(request.param).stem)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    page = folder / "index.html"
    return run, files, page, probe(page, folder)


def test_the_report_renders_with_its_charts_in_chromium(browsed, tmp_path):
    run, files, page, found = browsed
    png = screenshot(page, tmp_path)
    problems = screenshot_problems(png)
    assert not problems, f"{problems} (the screenshot: {png})"
    charts = sum(name.endswith(".png") for name in files)
    assert charts >= 2 and not page_problems(found, charts), page_problems(found, charts)
    assert found["text"] > 2000, f"the page shows only {found['text']} characters of text"


def test_the_speed_matrices_render_every_cell_in_chromium(browsed):
    run, _, _, found = browsed
    figures = [DEVICE, WALL] if has_figure(run, DEVICE) else [WALL]
    assert len(found["matrices"]) == len(figures), found["headings"]
    for figure, shown in zip(figures, found["matrices"]):
        modes, rows = matrix(run, figure)
        assert [r[0] for r in shown] == [model for model, _ in rows]
        for (model, entries), texts in zip(rows, shown):
            assert len(texts) == 1 + len(modes), (model, texts)
            for mode, entry, text in zip(modes, entries, texts[1:]):
                expected = "-" if entry is None else f"{entry.value:.2f}x"
                assert text.startswith(expected), (f"{figure.name} matrix, {model} {mode}: shows {text!r}, expected "
                                                   f"{expected}")
                if entry is not None and entry.estimate is not None:
                    assert f"[{entry.estimate.low:.2f}, {entry.estimate.high:.2f}]" in text, (model, mode, text)
                if entry is not None and entry.method:
                    assert entry.method in text, (model, mode, text)
    if has_figure(run, DEVICE):
        assert DEVICE.title in found["headings"] and WALL.title in found["headings"]
        assert any(h.startswith("Host-bound cells (") for h in found["headings"]), found["headings"]
        assert "Kernel changes against the baseline" in found["headings"]


def test_a_blank_or_broken_page_is_told_apart(tmp_path):
    """The checks' teeth: a blank page fails the screenshot check; a chart that cannot decode and chips
    whose labels take the verdict's colour fail the page check."""
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    assert any("uniform" in p for p in screenshot_problems(screenshot(blank, tmp_path)))
    files = _report(RUNS[0])
    html = files["index.html"].decode()
    first = html.index("data:image/png;base64,") + len("data:image/png;base64,")
    broken = tmp_path / "broken.html"
    html = html[:first] + "bm90IGEgcG5n" + html[html.index('"', first):]
    assert ".chips .chip { color: #fff; }" in html
    broken.write_text(html.replace(".chips .chip { color: #fff; }", ""), encoding="utf-8")
    problems = page_problems(probe(broken, tmp_path), sum(name.endswith(".png") for name in files))
    chips = [p for p in problems if "own background colour" in p]
    assert "did not decode" in problems[0] and chips and len(problems) == 1 + len(chips), problems


def _stalled_run(tmp: Path) -> Path:
    """The H100 run with ten cells failing as a GPU stall fails them: each with the real regression's
    message, kernel changes and kernel list (500-1,900 characters of cuDNN and CUTLASS names)."""
    doc = json.loads((DATA / RUNS[0]).read_text())
    failed = next(b["extra_info"] for b in doc["benchmarks"] if b["extra_info"].get("verdict") == "regression")
    for bench in doc["benchmarks"][:10]:
        for key in ("verdict", "device_verdict", "message", "kernel_changes", "kernels"):
            bench["extra_info"][key] = failed[key]
    path = tmp / "stalled.json"
    path.write_text(json.dumps(doc))
    return path


def test_needs_a_look_is_one_line_per_cell_with_the_details_folded(tmp_path):
    """A run of ten failing cells: "Needs a look" shows each in one line (its figure, change, line and the
    kernel that moved most by a short name), its message and kernel table folded until opened."""
    _chromium()
    run = load_run(_stalled_run(tmp_path))
    flagged = needs_a_look(run)
    folder = tmp_path / "report"
    folder.mkdir()
    for name, data in build_report(run).items():
        (folder / name).write_bytes(data)
    found = probe(folder / "index.html", tmp_path)
    assert len(found["look"]) == len(flagged) >= 10, found["look"]
    for line, f in zip(found["look"], flagged):
        assert line["height"] <= 1.5 * line["lineHeight"], (f"{f.cell.test_id}: its line takes {line['height']:.0f} "
                                                            f"px: {line['summary']!r}")
        assert not line["open"] and line["detailShown"] is False, line  # folded: the details not shown
        assert f.figure in line["summary"] and f.kernel.short in line["summary"] and "<" not in line["summary"], line
        assert len(line["summary"]) < 250 and line["kernelRows"] == len(f.kernels) > 0, line
    # the section is as tall as its lines: a wall of messages would be ten times taller
    assert found["lookHeight"] <= len(flagged) * 2 * found["look"][0]["lineHeight"], found["lookHeight"]
    png = screenshot(folder / "index.html", tmp_path)
    assert not screenshot_problems(png), screenshot_problems(png)


def test_the_trend_charts_load_in_chromium(tmp_path):
    """The report with --history's trends: every trend chart decodes and is laid out, beside the run's charts."""
    _chromium()
    from ampbench.history.store import open_history
    from ampbench.report.trends import read_trends
    from history_runs import speed_record, speed_run

    run = load_run(DATA / RUNS[0])
    history = open_history(f"sqlite:///{tmp_path / 'history.sqlite'}")
    for i in range(8):
        history.append(speed_run(f"run{i}", [speed_record("resnet50", "amp_fp16", 3.0 * (0.98 if i >= 4 else 1.0)),
                                             speed_record("gpt", "amp_bf16", 5.6 * (1 + 0.002 * (i % 3)))],
                                 gpu=run.gpu, at=24 * i, torch="2.12.0" if i >= 4 else "2.11.0"))
    files = build_report(run, trends=read_trends(history, run))
    folder = tmp_path / "report"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    found = probe(folder / "index.html", tmp_path)
    charts = sum(name.endswith(".png") for name in files)
    assert not page_problems(found, charts), page_problems(found, charts)
    trends = [img for img in found["images"] if img["alt"].startswith("Trend of ")]
    assert [img["alt"] for img in trends] == ["Trend of test_speed[resnet50-amp_fp16]",
                                              "Trend of test_speed[gpt-amp_bf16]"]
    assert all(img["naturalWidth"] > 0 for img in trends) and "Trends" in found["headings"]
