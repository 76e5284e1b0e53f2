"""What a report is made from: a run as ``ampbench.results`` reads it, and the failed tests of the same
run's JUnit XML. Nothing here imports torch or pytest."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ampbench.files.read import UnreadableFile, read_text
from ampbench.report.figure_text import DASH
from ampbench.results import Run, RunError, order_modes

__all__ = ["DASH", "Run", "RunError", "failed_tests", "order_modes"]



def failed_tests(junit: Path | str) -> list[tuple[str, str]]:
    """(test name, first line of the failure) for each failed or errored test case of a JUnit XML."""
    junit = Path(junit)
    try:
        root = ET.fromstring(read_text(junit, "the XML file written by `pytest --junitxml FILE`"))
    except UnreadableFile as exc:
        raise RunError(junit, exc.problem) from None
    except ET.ParseError as exc:
        raise RunError(junit, f"is not JUnit XML ({exc})") from None
    failed = []
    for case in root.iter("testcase"):
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                name = case.get("name", "?")
                classname = case.get("classname", "")
                message = (node.get("message") or node.text or tag).strip().splitlines()
                failed.append((f"{classname}::{name}" if classname else name, message[0][:300] if message else tag))
                break
    return failed
