"""Reading back what a view rendered, as a person reads it: a Markdown table's cells by column, a number as written
in a cell, a figure's traces and axis titles. A view's test compares these with an independent computation, so that
a wrong field in a cell, a swapped column or a missing factor fails (`../shared/notes/testing.md`)."""
from __future__ import annotations

import html
import re
from typing import Any

NUMBER = re.compile(r"[-+−]?(?:\d[\d,]*\.?\d*|\.\d+)(?:e[-+−]?\d+)?%?")


def tables(markdown: str) -> list[list[dict[str, str]]]:
    """Every table in a Markdown text, each a list of rows, each row its cells by the header's column names (the
    text of a cell without its bold and code marks)."""
    found, lines = [], markdown.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            header = _cells(lines[i])
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(dict(zip(header, _cells(lines[i]))))
                i += 1
            found.append(rows)
        else:
            i += 1
    return found


def table_after(markdown: str, words: str) -> list[dict[str, str]]:
    """The first table that comes after `words` in the text."""
    return tables(markdown[markdown.index(words):])[0]


def _cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [plain(cell) for cell in cells]


def plain(text: str) -> str:
    """Text as it is shown: without Markdown's bold and code marks and the backslashes of escaped characters, and with
    each character reference (`text.escape`'s) as its character."""
    return html.unescape(re.sub(r"\\(.)", r"\1", text.replace("**", "").replace("`", ""))).strip()


def number(text: str) -> float:
    """The one number written in a cell or a phrase ("+0.0123", "1,234", "40.5%" as 0.405, "−3e-05")."""
    found = NUMBER.findall(plain(text))
    if len(found) != 1:
        raise AssertionError(f"expected one number in {text!r}, found {found}")
    return _value(found[0])


def numbers(text: str) -> list[float]:
    """Every number written in a text, in order."""
    return [_value(found) for found in NUMBER.findall(plain(text))]


def _value(written: str) -> float:
    written = written.replace("−", "-").replace(",", "")
    return float(written[:-1]) / 100 if written.endswith("%") else float(written)


def after(text: str, words: str) -> float:
    """The first number written after `words` in a text."""
    return numbers(text[text.index(words) + len(words):])[0]


def traces(figure: Any) -> list[dict]:
    """A plotly figure's traces as plain dicts (a go.Figure, or the dict gradio sends)."""
    return [trace.to_plotly_json() if hasattr(trace, "to_plotly_json") else trace for trace in figure.data]


def axis_title(figure: Any, axis: str) -> str:
    """The title text of a figure's axis ("xaxis", "yaxis2")."""
    title = figure.layout[axis].title
    return "" if title is None or title.text is None else title.text
