"""index.html from hostile data: every string of the run JSON is text, never markup; the templates
ship with the package."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ampbench.report import RunError, build_report, load_run
from ampbench.report.compare import compare_runs
from ampbench.verdict import Verdict
from report_runs import write_run

# ---------------------------------------------------------------------------------------------------
# html from hostile data: every string of the JSON is text, never markup

HOSTILE = [
    "<script>alert(1)</script>",
    "\"><script>alert('x')</script>",
    "x' onmouseover='alert(1)",
    'y" onerror="alert(1)',
    "javascript:alert(1)",
]


def _hostile_run(tmp_path: Path) -> Path:
    h = HOSTILE
    speed = {"ampbench_schema": 1, "kind": "speed", "speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1,
             "rounds": 12, "confidence": 0.99}
    doc = {
        "datetime": h[1],
        "commit_info": {"id": h[0], "dirty": True},
        "machine_info": {"ampbench": {"device": h[0], "torch": h[1], "driver": h[2], "cuda": h[4],
                                      "clocks": {h[0]: h[3]}}},
        "benchmarks": [
            {"name": f"test_speed[{h[0]}-{h[2]}]", "extra_info": dict(
                speed, model=h[0], mode=h[2], device=h[1], verdict="improved", message=h[4], device_speedup=2.5,
                device_speedup_low=2.4, device_speedup_high=2.6, device_method=h[0], kernel_changes=f"{h[2]}; {h[3]}",
                host_bound=True, idle_share=0.5, host_overhead_ms=1.0)},
            {"name": f"test_speed[{h[3]}-{h[4]}]", "extra_info": dict(
                speed, model=h[3], mode=h[4], verdict="regression", message=h[0])},
            {"name": f"test_memory[{h[3]}-{h[4]}]", "extra_info": {
                "ampbench_schema": 1, "kind": "memory", "model": h[3], "mode": h[4], "memory_ratio": 0.6,
                "device": h[3], "verdict": "non-finite", "message": h[2]}},
            {"name": f"test_x[{h[4]}-{h[1]}]", "extra_info": {
                "ampbench_schema": 1, "kind": h[0], "verdict": "input-bound", "message": h[3]}},
            {"name": h[0], "extra_info": {}},
        ],
    }
    return write_run(tmp_path, h[0].replace("/", "_") + ".json", doc)


class _Page(__import__("html.parser").parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def test_html_from_hostile_json_holds_only_the_templates_markup(tmp_path):
    from ampbench.report import VERDICT_CLASSES

    run = load_run(_hostile_run(tmp_path))
    comparison = compare_runs(run, run)
    html = build_report(run, comparison, failures=[(HOSTILE[0], HOSTILE[3])])["index.html"].decode()
    page = _Page()
    page.feed(html)
    page.close()
    allowed_tags = {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "code", "div",
                    "span", "b", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "details", "summary",
                    "figure", "img", "figcaption", "footer"}
    allowed_classes = {"sub", "software", "chips", "chip", "kind", "msg", "reference", "v", "flag", "note", "wide",
                       "matrix", "iv", "method", "changes", "look", "look-detail", "kernel", "kernels",
                       *VERDICT_CLASSES.values(), "v-other"}
    for tag, attrs in page.tags:
        assert tag in allowed_tags, tag
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert name in {"lang", "charset", "name", "content", "class", "title", "alt", "src"}, (tag, name)
            assert not "".join((value or "").split()).lower().startswith("javascript:"), (tag, name, value)
            if name == "class":
                assert set((value or "").split()) <= allowed_classes, value
            if name == "src":
                assert (value or "").startswith("data:image/png;base64,")
    text = "".join(page.text)
    for s in HOSTILE:
        assert s in text, f"{s!r} is not shown as text"
    assert "<script" not in html.lower()


def test_a_verdict_outside_the_vocabulary_is_refused_naming_file_and_field(tmp_path):
    doc = json.loads(_hostile_run(tmp_path).read_text())
    doc["benchmarks"][3]["extra_info"]["verdict"] = 'x" onclick="alert(1)'
    path = write_run(tmp_path, "crafted.json", doc)
    with pytest.raises(RunError, match=re.escape("benchmarks[3].extra_info.verdict is 'x\" onclick=")) as info:
        load_run(path)
    assert str(path) in str(info.value) and "expected one of 'pass'" in str(info.value)


def test_verdicts_map_to_a_fixed_set_of_classes():
    from ampbench.report import VERDICT_CLASSES, verdict_class

    assert verdict_class("regression") == verdict_class(Verdict.NON_FINITE) == "v-regression"
    assert verdict_class('x" onclick="alert(1)') == "v-other"
    assert all(verdict_class(v) != "v-other" for v in Verdict), "every verdict of the vocabulary has its class"
    assert ({verdict_class(v) for v in Verdict if v.failing} == {"v-regression"}
            and "v-regression" in VERDICT_CLASSES.values())


def test_the_template_and_css_ship_with_the_package():
    from importlib.resources import files

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    templates = files("ampbench") / "templates"
    assert (templates / "report.html.j2").is_file() and (templates / "report.css").is_file()
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert any(d.replace(" ", "").startswith("jinja2>=3.1") for d in project["project"]["dependencies"])
    shipped = project["tool"]["setuptools"]["package-data"]["ampbench"]
    assert "templates/*.j2" in shipped and "templates/*.css" in shipped

