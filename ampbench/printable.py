"""Text that came from a file, a store or the environment (a run's label, an acceptance's reason), made
safe to print: a terminal acts on control characters (an escape sequence can set its title or hide what
follows) and bidirectional overrides reorder what it shows, so those are printed as their escapes."""

from __future__ import annotations

import unicodedata

# control, format (bidi overrides, zero-width marks), line and paragraph separators, lone surrogates
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def hidden(text: str) -> list[str]:
    """The characters of `text` a terminal would act on or hide, in order."""
    return [ch for ch in text if unicodedata.category(ch) in _HIDDEN]


def one_line(value: str, limit: int) -> str:
    """`value` stripped, where it is one line of 1 to `limit` characters with none ``hidden`` (a label, a
    reason: what the history stores and prints); else a ValueError saying so."""
    text = value.strip()
    if not text or len(text) > limit or hidden(text):
        raise ValueError(f"expects one line of 1 to {limit} characters without control characters, got "
                         f"{len(value)} characters: {printable(value[:40])!r}")
    return text


def printable(text: str) -> str:
    """`text` with each character ``hidden`` names written as its escape (ESC as '\\x1b', a newline as
    '\\n'); the rest, non-ASCII letters included, as it is."""
    return "".join(ch.encode("unicode_escape", "backslashreplace").decode("ascii")
                   if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """'1 run', '2 runs': `count` with its noun, `nouns` where the plural is not the noun and an s
    ('1 entry', '3 entries')."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"
