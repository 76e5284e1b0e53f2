"""The failed tests of a run's JUnit XML (``pytest --junitxml FILE``), which a report lists at its top.
Nothing here imports torch or pytest."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ampbench.files.read import UnreadableFile, read_text
from ampbench.results import RunError


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
