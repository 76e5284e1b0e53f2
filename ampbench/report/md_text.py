"""Text from a run's JSON, a store or the environment (device and run names, messages, test ids) made inert
in summary.md, which GitHub renders as a job summary and a pull request comment: it must show as the text
it is, never as HTML, a link, or a pipe or newline that breaks the table or list it sits in. index.html
escapes the same text through its templates."""

from __future__ import annotations

import re

from ampbench.printable import printable

# HTML as entities; a backslash, a backtick and a pipe escaped, so none can open a code span, undo an
# escape of ours or end a table cell
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "`": "\\`", "|": "\\|"}


def _one_line(value: object) -> str:
    # hidden characters (bidi overrides, escapes) as their escapes, each line break a space
    return " ".join(printable(line) for line in str(value).splitlines()) if value is not None else ""


def md_text(value: object) -> str:
    """`value` as plain text in Markdown: one line, no HTML, no link (``](`` is broken), no code span."""
    text = "".join(_ESCAPES.get(ch, ch) for ch in _one_line(value))
    return text.replace("](", "]\\(")


def md_code(value: object, *, in_table: bool = False) -> str:
    """`value` as one code span: fenced by one backtick more than its longest run of them, so none ends it
    early (a code span shows HTML as text). In a table a pipe is escaped, which GitHub's tables read
    inside code spans too."""
    text = _one_line(value) or " "
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", "\\|") if in_table else span
