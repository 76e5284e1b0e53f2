"""GitHub Actions' `${{ }}` expressions, as far as the example workflows use them: literals, context
properties (`github.event.workflow_run.head_sha`, `steps.report.outputs.status`), `!`, `==`, `!=`, `<`,
`>`, `&&`, `||`, parentheses, and the functions `always`, `success`, `failure`, `cancelled`, `format`,
`hashFiles`, `contains`, `startsWith`, `endsWith`, `toJSON` and `fromJSON`, with GitHub's rules: `&&` and
`||` give one of their operands, strings compare ignoring case, operands of different types compare as
numbers (null and '' are 0), a missing property is null, and a step's `if:` without a status function
means `success() && (...)`. Anything else is refused, naming it, so a workflow that needs more fails its
test rather than being evaluated wrongly."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

_TOKEN = re.compile(r"\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<string>'(?:[^']|'')*')"
                    r"|(?P<op>==|!=|<=|>=|&&|\|\||[!<>(),.\[\]])|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")
_EMBEDDED = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_STATUS = re.compile(r"\b(always|success|failure|cancelled)\s*\(")


class ExpressionError(ValueError):
    """An expression the workflow holds that this evaluator cannot evaluate."""


def _tokens(text: str) -> list[tuple[str, str]]:
    found, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if not match or match.end() == at:
            raise ExpressionError(f"cannot read {text[at:]!r} in the expression {text!r}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        at = match.end()
    return found


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip() or 0)
        except ValueError:
            return math.nan
    return math.nan


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    if type(left) is type(right) and not isinstance(left, (int, float)):
        return bool(left is right or left == right)
    return _number(left) == _number(right)


def truthy(value: Any) -> bool:
    """GitHub's truth: null, false, 0, NaN and '' are false, everything else true."""
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def as_text(value: Any) -> str:
    """A value as `${{ }}` writes it into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _member(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping):
        wanted = str(key).casefold()
        return next((item for name, item in value.items() if str(name).casefold() == wanted), None)
    if isinstance(value, list) and isinstance(key, (int, float)) and 0 <= key < len(value):
        return value[int(key)]
    return None


class Evaluator:
    """Evaluates expressions against `contexts` (github, env, steps, ...); `functions` adds or replaces
    functions (the status functions, hashFiles), each called with the evaluated arguments."""

    def __init__(self, contexts: Mapping[str, Any], functions: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.contexts = contexts
        self.functions: dict[str, Callable[..., Any]] = {
            "format": lambda text, *args: re.sub(r"\{(\d+)\}", lambda m: as_text(args[int(m.group(1))]),
                                                 str(text).replace("{{", "\0").replace("}}", "\1"))
            .replace("\0", "{").replace("\1", "}"),
            "contains": lambda hay, needle: (any(_equal(item, needle) for item in hay) if isinstance(hay, list)
                                             else as_text(needle).casefold() in as_text(hay).casefold()),
            "startsWith": lambda text, start: as_text(text).casefold().startswith(as_text(start).casefold()),
            "endsWith": lambda text, end: as_text(text).casefold().endswith(as_text(end).casefold()),
            "toJSON": lambda value: json.dumps(value, indent=2),
            "fromJSON": lambda text: json.loads(text),
            **(functions or {}),
        }

    def evaluate(self, expression: str) -> Any:
        self._tokens, self._at, self._text = _tokens(expression), 0, expression
        value = self._or()
        if self._at != len(self._tokens):
            raise ExpressionError(f"unexpected {self._tokens[self._at][1]!r} in the expression {expression!r}")
        return value

    def interpolate(self, text: str) -> str:
        """`text` with each `${{ expression }}` replaced by its value."""
        return _EMBEDDED.sub(lambda match: as_text(self.evaluate(match.group(1))), text)

    def value(self, raw: Any) -> Any:
        """A workflow key's value (`continue-on-error:`, `cancel-in-progress:`): a literal, or one `${{ }}`."""
        whole = _EMBEDDED.fullmatch(raw.strip()) if isinstance(raw, str) else None
        return self.evaluate(whole.group(1)) if whole else raw

    def condition(self, condition: Any) -> bool:
        """A step's or job's `if:`: a bool, or an expression with or without `${{ }}`, which means
        `success() && (...)` where it calls none of the status functions."""
        if condition is None:
            return truthy(self.evaluate("success()"))
        if isinstance(condition, bool):
            return condition
        text = str(condition).strip()
        whole = _EMBEDDED.fullmatch(text)
        text = whole.group(1) if whole else text
        if not _STATUS.search(text):
            text = f"success() && ({text})"
        return truthy(self.evaluate(text))

    def _peek(self) -> str | None:
        return self._tokens[self._at][1] if self._at < len(self._tokens) else None

    def _take(self, wanted: str | None = None) -> tuple[str, str]:
        if self._at >= len(self._tokens):
            raise ExpressionError(f"the expression {self._text!r} ends early")
        token = self._tokens[self._at]
        if wanted is not None and token[1] != wanted:
            raise ExpressionError(f"expected {wanted!r}, found {token[1]!r} in the expression {self._text!r}")
        self._at += 1
        return token

    def _or(self) -> Any:
        value = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            value = value if truthy(value) else right
        return value

    def _and(self) -> Any:
        value = self._compare()
        while self._peek() == "&&":
            self._take()
            right = self._compare()
            value = right if truthy(value) else value
        return value

    def _compare(self) -> Any:
        value = self._unary()
        operator = self._peek()
        if operator in ("==", "!=", "<", ">", "<=", ">="):
            self._take()
            right = self._unary()
            if operator in ("==", "!="):
                return _equal(value, right) == (operator == "==")
            left, right = _number(value), _number(right)
            return {"<": left < right, ">": left > right, "<=": left <= right, ">=": left >= right}[operator]
        return value

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._unary())
        return self._postfix()

    def _postfix(self) -> Any:
        value = self._primary()
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                kind, name = self._take()
                if kind != "name":
                    raise ExpressionError(f"expected a property name after '.', found {name!r} in {self._text!r}")
                value = _member(value, name)
            else:
                key = self._or()
                self._take("]")
                value = _member(value, key)
        return value

    def _primary(self) -> Any:
        kind, text = self._take()
        if kind == "number":
            return float(text)
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if text == "(":
            value = self._or()
            self._take(")")
            return value
        if kind != "name":
            raise ExpressionError(f"unexpected {text!r} in the expression {self._text!r}")
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self._peek() == "(":
            self._take()
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() == ",":
                    self._take()
            self._take(")")
            if text not in self.functions:
                raise ExpressionError(f"the function {text}() is not one this evaluator knows ({self._text!r})")
            return self.functions[text](*args)
        if text not in self.contexts:
            raise ExpressionError(f"the context {text!r} is not given to this evaluator ({self._text!r})")
        return self.contexts[text]
