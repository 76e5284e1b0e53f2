"""Every figure a run shows anywhere, as plain data: the report's summary.md and the text of its index.html,
the values its charts draw, the end-of-session summary's tables, the figures `ampbench export` writes,
the figure rows a history keeps of it, and what `ampbench compare` says of two runs. A change to how a
run is stored or read is held to this: ``tests/data/before/`` keeps what the suite made of the committed
runs before the run JSON was nested by ratio (``python tests/run_figures.py`` wrote it), and
``test_run_figures.py`` checks the code of now makes the same of them.
"""

from __future__ import annotations

import json
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from unittest import mock

DATA = Path(__file__).parent / "data"
BEFORE = DATA / "before"
# the committed runs, the real and the synthetic ones, and a CPU run of today's suite
RUNS = ("h100_run.json", "h100_speed_device.json", "cpu_smoke.json", "synthetic_h100_quick.json",
        "synthetic_h100_device.json", "cpu_fresh.json")
# two runs compared, old then new
COMPARED = ("synthetic_h100_quick.json", "synthetic_h100_device.json")


class _Text(HTMLParser):
    """The text a reader sees of a page: every non-blank run of text outside style and script, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._hidden += tag in ("style", "script")
        self.lines += [f"@{name}={value}" for name, value in attrs if name == "title" and value]

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("style", "script")

    def handle_data(self, data: str) -> None:
        if not self._hidden and data.strip():
            self.lines.append(data.strip())


def page_text(html: str) -> list[str]:
    parser = _Text()
    parser.feed(html)
    return parser.lines


def flat_names(info: dict) -> dict[str, Any]:
    """A cell of the current schema with each figure of a ratio under the name schema 1 gave it
    (``RatioKind.flat``), and each figure of a group (a side's, the device queue's, a memory cell's search)
    under the name older schemas gave it (``Group.flat``): what the run JSON held before it was nested."""
    from ampbench.results import MODE_SIDE, SIDES_KEY, record_type
    from ampbench.results.ratio_figures import LEGACY_STEPS, OVER
    from ampbench.results.schema import KIND_KEY, RATIOS_KEY

    cls = record_type(info[KIND_KEY])
    kinds = cls.RATIOS if RATIOS_KEY in info else {}
    flat = {k: v for k, v in info.items() if k != RATIOS_KEY and k not in cls.GROUPS}
    for name, figures in (info.get(RATIOS_KEY) or {}).items():
        flat.update({kinds[name].flat(f): v for f, v in figures.items() if f != SIDES_KEY and kinds[name].flat(f)})
        for side, steps in (figures.get(SIDES_KEY) or {}).items():
            legacy = LEGACY_STEPS[MODE_SIDE if side == MODE_SIDE else OVER]
            flat.update({kinds[name].flat(legacy[f]): v for f, v in steps.items() if kinds[name].flat(legacy[f])})
    for key, group in cls.GROUPS.items():
        if not group.flat:  # nested in every schema that held it (a paired cell's figures): as it is
            flat.update({key: info[key]} if key in info else {})
            continue
        held = info.get(key) or {}
        for side, figures in (held.items() if group.by_side else [(None, held)]):
            names = group.flat[side] if group.by_side else group.flat
            flat.update({names[f]: v for f, v in figures.items() if f in names})
    return flat


def _plain(value: Any) -> Any:
    """`value` as JSON holds it (a verdict as its string, a tuple as a list)."""
    return json.loads(json.dumps(value, default=str))


def chart_values(run) -> dict[str, list]:
    """Per chart (by its title), each bar it would draw: test id, value, interval, marker and hatching."""
    from ampbench.report import charts

    drawn: dict[str, list] = {}

    def record(run, kind, value, *, title, interval=None, marker=None, hatched=None, **_):
        bars = [[c.test_id, value(c), interval(c) if interval else None, marker(c) if marker else None,
                 bool(hatched(c)) if hatched else False] for c in run.of_kind(kind) if value(c) is not None]
        drawn[title] = _plain(bars)
        return None

    with mock.patch.object(charts, "_grouped_bars", record):
        charts.run_charts(run)
    return drawn


def history_rows(path: Path) -> list:
    """The figure rows a history keeps of the run: test id, figure, value, interval and verdict."""
    from ampbench.history.ingest import file_run

    return _plain([[c.test_id, c.verdict, [[f.name, f.value, f.low, f.high, f.verdict] for f in c.figures]]
                   for c in file_run(path).cells])


def exported(run) -> dict:
    from ampbench.export.figures import gated_figures
    from ampbench.export.formats import bmf, github

    figures = gated_figures(run)
    return _plain({"github": github(figures), "bmf": bmf(figures), "left_out": figures.left_out})


def session_summary(run) -> list[str]:
    from ampbench.plugin.summary import summary_lines

    return summary_lines([(c.test_id, c) for c in run.cells], {})


def figures(path: Path) -> dict:
    """Everything the suite shows of the run at `path`."""
    from ampbench.report.html import render_html
    from ampbench.report.markdown import render_markdown
    from ampbench.results import load_run

    run = load_run(path)
    return {"summary.md": render_markdown(run).splitlines(), "index.html": page_text(render_html(run, [])),
            "charts": chart_values(run), "session summary": session_summary(run), "export": exported(run),
            "history": history_rows(path)}


def comparison(old: Path, new: Path) -> list[str]:
    from ampbench.report.compare import compare_runs, format_text
    from ampbench.results import load_run

    # the runs' paths as the repository names them, so the figures read the same from any checkout
    text = format_text(compare_runs(load_run(old), load_run(new), cross_device=True))
    return text.replace(str(DATA), "tests/data").splitlines()


def write_before() -> None:
    """Write what the code of now makes of the committed runs into tests/data/before/."""
    BEFORE.mkdir(exist_ok=True)
    for name in RUNS:
        (BEFORE / name).write_text(json.dumps(figures(DATA / name), indent=1) + "\n")
    (BEFORE / "compare.json").write_text(json.dumps(comparison(*(DATA / n for n in COMPARED)), indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent.parent))
    write_before()
