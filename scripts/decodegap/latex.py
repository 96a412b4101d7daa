"""LaTeX output: escaping, number formatting, provenance-keyed numbers and the jinja2 environment.

Every string that reaches a .tex file goes through `escape` (the environment's finalize does it), so
a model called `my_model & co. 100%` renders as text, not as broken LaTeX. Every number is written
as \\dgnum{key}{text}: the key is invisible in the PDF and leads, through report/provenance.json,
to the raw sessions behind the number.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import jinja2
from markupsafe import Markup

_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}
_SPECIAL_RE = re.compile("|".join(re.escape(c) for c in _SPECIAL))
KEY_RE = re.compile(r"^[A-Za-z0-9._:/@+\-]+$")  # no character LaTeX would act on inside an argument

PREAMBLE_MACROS = r"\providecommand{\dgnum}[2]{#2}% #1: provenance key (see report/provenance.json)"


def escape(text) -> Markup:
    if isinstance(text, Markup):
        return text
    return Markup(_SPECIAL_RE.sub(lambda m: _SPECIAL[m.group()], str(text)))


_PATH_RE = re.compile(r"^[A-Za-z0-9._/\-]+$")


def path(p) -> Markup:
    """A file path for \\input or \\includegraphics: never escaped, so it must need no escaping."""
    p = str(p)
    if not _PATH_RE.match(p):
        raise ValueError(f"path {p!r} has characters LaTeX cannot take in \\input; rename it")
    return Markup(p)


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "--"
    return f"{value:.{digits}f}"


class NumberLog:
    """Collects every number a table renders, keyed, for report/provenance.json."""

    def __init__(self, table: str):
        self.table = table
        self.entries: dict[str, dict] = {}

    def num(self, key: str, value: float | None, digits: int = 2, **meta) -> Markup:
        full = f"{self.table}/{key}"
        if not KEY_RE.match(full):
            raise ValueError(f"provenance key {full!r} has characters LaTeX would act on")
        text = fmt(value, digits)
        if value is None:
            return Markup(text)
        if full in self.entries and self.entries[full]["text"] != text:
            raise ValueError(f"provenance key {full!r} rendered twice with different values")
        self.entries[full] = {"table": self.table, "text": text, "value": float(value), "digits": digits, **meta}
        return Markup(rf"\dgnum{{{full}}}{{{text}}}")


def environment(template_dir: str | Path | None = None) -> jinja2.Environment:
    template_dir = template_dir or Path(__file__).parent / "templates"
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        block_start_string="((*", block_end_string="*))",
        variable_start_string="(((", variable_end_string=")))",
        comment_start_string="((=", comment_end_string="=))",
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        finalize=escape,  # every value printed into LaTeX is escaped unless already Markup
    )
