"""A tool's description and per-parameter help, read from its docstring (Google, NumPy and
reST styles), so a plain documented function becomes a tool without restating itself."""

from __future__ import annotations

import inspect
import re

__all__ = ["docstring_examples", "parse_docstring"]

_GOOGLE_HEADER = re.compile(
    r"(?:args|arguments|parameters|params|keyword args|keyword arguments|other parameters)\s*:",
    re.IGNORECASE,
)
_GOOGLE_ANY_HEADER = re.compile(
    r"(?:args|arguments|parameters|params|keyword args|keyword arguments|other parameters|"
    r"returns?|yields?|raises|examples?|notes?|attributes|warnings?|see also|todo)\s*:",
    re.IGNORECASE,
)
_EXAMPLES_HEADER = re.compile(r"examples?\s*:?", re.IGNORECASE)
_GOOGLE_ENTRY = re.compile(r"\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")
_NUMPY_RULE = re.compile(r"\s*-{3,}\s*")
_NUMPY_ENTRY = re.compile(r"\**(\w+(?:\s*,\s*\**\w+)*)\s*(?::.*)?")
_REST_PARAM = re.compile(r":param\s+(?:[^:]*?\s)?\**(\w+)\s*:\s*(.*)")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its first paragraph and per-parameter descriptions.

    Understands Google (`Args:`), reST (`:param x:`) and numpy (`Parameters` + rule)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    params: dict[str, str] = {}
    summary: list[str] = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith(":") or _GOOGLE_ANY_HEADER.fullmatch(text):
            break
        summary.append(text)
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        if _GOOGLE_HEADER.fullmatch(text):
            i = _google_section(lines, i, params)
        elif (
            i + 1 < len(lines)
            and text.lower() in ("parameters", "other parameters")
            and (_NUMPY_RULE.fullmatch(lines[i + 1]))
        ):
            i = _numpy_section(lines, i + 2, params)
        elif match := _REST_PARAM.fullmatch(text):
            body = [match.group(2).strip()]
            while i + 1 < len(lines) and lines[i + 1][:1].isspace() and lines[i + 1].strip():
                i += 1
                body.append(lines[i].strip())
            params[match.group(1)] = " ".join(b for b in body if b)
            i += 1
        else:
            i += 1
    return " ".join(summary), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_section(lines: list[str], header: int, params: dict[str, str]) -> int:
    base = _indent(lines[header])
    entry_indent: int | None = None
    current: str | None = None
    i = header + 1
    while i < len(lines):
        line = lines[i]
        if line.strip():
            indent = _indent(line)
            if indent <= base:
                break
            entry_indent = indent if entry_indent is None else entry_indent
            match = _GOOGLE_ENTRY.fullmatch(line.strip())
            if indent == entry_indent and match:
                current = match.group(1)
                params[current] = match.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
        i += 1
    return i


def _numpy_section(lines: list[str], start: int, params: dict[str, str]) -> int:
    names: list[str] = []
    i = start
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and _NUMPY_RULE.fullmatch(lines[i + 1]):
            break  # the next section's title
        if line.strip() and not line[:1].isspace():
            match = _NUMPY_ENTRY.fullmatch(line.strip())
            names = [n.strip().lstrip("*") for n in match.group(1).split(",")] if match else []
            for name in names:
                params[name] = ""
        elif line.strip():
            for name in names:
                params[name] = f"{params[name]} {line.strip()}".strip()
        i += 1
    return i


def docstring_examples(doc: str | None) -> list[str]:
    """The lines of a docstring's examples section, dedented ("" for a blank line): a
    Google `Examples:` header and its indented body, or a numpy `Examples` title over a
    rule, up to the next section. [] when there is none."""
    lines = inspect.cleandoc(doc or "").splitlines()
    for i, line in enumerate(lines):
        text = line.strip()
        if not _EXAMPLES_HEADER.fullmatch(text):
            continue
        body: list[str] = []
        if text.endswith(":"):  # Google: the indented block under the header
            for following in lines[i + 1 :]:
                if following.strip() and _indent(following) <= _indent(line):
                    break
                body.append(following)
        elif i + 1 < len(lines) and _NUMPY_RULE.fullmatch(lines[i + 1]):
            rest = lines[i + 2 :]
            for j, following in enumerate(rest):
                if following.strip() and j + 1 < len(rest) and _NUMPY_RULE.fullmatch(rest[j + 1]):
                    break
                body.append(following)
        else:
            continue
        return [b.strip() for b in inspect.cleandoc("\n".join(body)).splitlines()]
    return []
