r"""LaTeX output: escaping, number formatting, provenance-keyed numbers and the jinja2 environment.

Every string that reaches a .tex file goes through `escape` (the environment's finalize does it), so
a model called `my_model & co. 100%` renders as text, not as broken LaTeX. Every number is written
as \dgnum{key}{text}: the key is invisible in the PDF and leads, through report/provenance.json,
to the raw sessions behind the number.

Non-ASCII text is transliterated to ASCII LaTeX, so a table compiles under plain pdflatex with the
default OT1 encoding and no inputenc/fontenc as well as under T1, XeLaTeX or LuaLaTeX. The rule,
applied after Unicode NFC normalisation, per letter with its combining marks:

1. ASCII is kept, with the LaTeX specials above replaced (as before).
2. Invisible format characters (zero-width joiner and non-joiner, soft hyphen, direction marks,
   BOM: Unicode category Cf) and emoji variation selectors are dropped.
3. Letters without a decomposition that LaTeX names: ß \ss{}, ẞ \SS{}, æ \ae{}, Æ \AE{},
   œ \oe{}, Œ \OE{}, ø \o{}, Ø \O{}, ł \l{}, Ł \L{}, ı \i{}, ȷ \j{}; letters whose LaTeX command
   needs T1 are spelled out: ð d, Ð D, đ d, Đ D, þ th, Þ Th, ŋ ng, Ŋ Ng.
4. Typography: – (and ‒) \textendash{}, — (and ―) \textemdash{}, ‐ ‑ -, ‘ \textquoteleft{},
   ’ \textquoteright{}, “ \textquotedblleft{}, ” \textquotedblright{}, ‚ a comma, „ two commas,
   « » \textless{}\textless{} and \textgreater{}\textgreater{}, ‹ › \textless{} \textgreater{},
   … \ldots{}, • \textbullet{}, · \textperiodcentered{}, − \textminus{}, no-break space ~, thin and
   narrow no-break space \,, any other Unicode space a plain space; © \textcopyright{},
   ® \textregistered{}, ™ \texttrademark{}, § \S{}, ¶ \P{}, £ \pounds{}, ° \textdegree{},
   × \texttimes{}, ± \textpm{}, µ \textmu{}.
5. A Latin letter with accents (canonical decomposition, NFD: an ASCII letter or a letter of rule 3
   followed by combining marks) becomes LaTeX accent commands, innermost mark first:
   é \'{e}, ü \"{u}, ñ \~{n}, ç \c{c}, å \r{a}, ő \H{o}, č \v{c}, ā \={a}, ă \u{a}, ż \.{z},
   ạ \d{a}, ḇ \b{b}, ǘ \'{\"{u}}, í \'{\i} (i and j lose their dot under an accent above).
   A mark with no accent command in OT1 (ogonek, comma below, horn, ...) is dropped: ą a, ș s.
6. Anything else (Greek, Cyrillic, CJK, emoji, other symbols) becomes a readable ASCII placeholder,
   its Unicode name in lower case in brackets: 🚀 [rocket], 中 [cjk unified ideograph-4e2d],
   Ω [greek capital letter omega]; a code point without a name becomes [U+XXXX]. The brackets are
   written {[} and {]}, so a placeholder at the start of a table row is not read as \\[...].
"""

from __future__ import annotations

import math
import re
import unicodedata
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
    # a bare [ first in a table row or after \midrule would open an optional argument
    "[": "{[}",
    "]": "{]}",
}
_SPECIAL_RE = re.compile("|".join(re.escape(c) for c in _SPECIAL))
KEY_RE = re.compile(r"^[A-Za-z0-9._:/@+\-]+$")  # no character LaTeX would act on inside an argument

# Both generated documents (paper.tex, paper_tables.tex) render these into their preamble.
# \dgfloatbarrier is placeins' \FloatBarrier without the package: a new page only where floats
# still wait, so a section or table file never starts behind them (LaTeX holds at most 18 unplaced
# floats, and the floor and gap tables alone fill a dozen float pages).
PREAMBLE_MACROS = "\n".join([
    r"\providecommand{\dgnum}[2]{#2}% #1: provenance key (see report/provenance.json)",
    r"\makeatletter",
    r"\providecommand{\dgfloatbarrier}{\par\begingroup\let\@elt\relax\edef\@tempa{\@botlist\@deferlist\@dbldeferlist}%",
    r"  \ifx\@tempa\@empty\else\clearpage\fi\endgroup}",
    r"\makeatother",
])


# Rule 3: letters without a canonical decomposition.
_LETTERS = {
    "ß": r"\ss{}", "ẞ": r"\SS{}", "æ": r"\ae{}", "Æ": r"\AE{}", "œ": r"\oe{}", "Œ": r"\OE{}",
    "ø": r"\o{}", "Ø": r"\O{}", "ł": r"\l{}", "Ł": r"\L{}", "ı": r"\i{}", "ȷ": r"\j{}",
    # their LaTeX commands (\dh, \DJ, \th, \ng, ...) exist only in the T1 encoding
    "ð": "d", "Ð": "D", "đ": "d", "Đ": "D", "þ": "th", "Þ": "Th", "ŋ": "ng", "Ŋ": "Ng",
}
# Rule 4: typography and a few common symbols (all defined by the LaTeX kernel in any encoding).
_TYPOGRAPHY = {
    "\u2013": r"\textendash{}", "\u2012": r"\textendash{}", "\u2014": r"\textemdash{}", "\u2015": r"\textemdash{}",
    "\u2010": "-", "\u2011": "-",
    "\u2018": r"\textquoteleft{}", "\u2019": r"\textquoteright{}", "\u201c": r"\textquotedblleft{}",
    "\u201d": r"\textquotedblright{}", "\u201a": ",", "\u201e": ",,",
    "\u00ab": r"\textless{}\textless{}", "\u00bb": r"\textgreater{}\textgreater{}",
    "\u2039": r"\textless{}", "\u203a": r"\textgreater{}",
    "\u2026": r"\ldots{}", "\u2022": r"\textbullet{}", "\u00b7": r"\textperiodcentered{}", "\u2212": r"\textminus{}",
    "\u00a0": "~", "\u2009": r"\,", "\u202f": r"\,",
    "\u00a9": r"\textcopyright{}", "\u00ae": r"\textregistered{}", "\u2122": r"\texttrademark{}",
    "\u00a7": r"\S{}", "\u00b6": r"\P{}", "\u00a3": r"\pounds{}", "\u00b0": r"\textdegree{}",
    "\u00d7": r"\texttimes{}", "\u00b1": r"\textpm{}", "\u00b5": r"\textmu{}",
}
# Rule 5: combining marks with an accent command in every encoding (OT1 included).
_ACCENTS = {
    "\u0300": "\\`", "\u0301": "\\'", "\u0302": "\\^", "\u0303": "\\~", "\u0304": "\\=", "\u0306": "\\u",
    "\u0307": "\\.", "\u0308": '\\"', "\u030a": "\\r", "\u030b": "\\H", "\u030c": "\\v",
    "\u0323": "\\d", "\u0327": "\\c", "\u0331": "\\b",
}


def _dropped(ch: str) -> bool:
    """Rule 2: invisible format characters and variation selectors."""
    o = ord(ch)
    return unicodedata.category(ch) == "Cf" or 0xFE00 <= o <= 0xFE0F or 0xE0100 <= o <= 0xE01EF


def _placeholder(ch: str) -> str:
    """Rule 6: {[}unicode name{]}, or {[}U+XXXX{]} for a code point without a name."""
    name = unicodedata.name(ch, None)
    return "{[}" + (name.lower() if name else f"U+{ord(ch):04X}") + "{]}"


def _clusters(text: str):
    """Each character with the combining marks that follow it."""
    cluster = ""
    for ch in text:
        if cluster and unicodedata.category(ch).startswith("M"):
            cluster += ch
        else:
            if cluster:
                yield cluster
            cluster = ch
    if cluster:
        yield cluster


def _ascii_specials(text: str) -> str:
    return _SPECIAL_RE.sub(lambda m: _SPECIAL[m.group()], text)


def _transliterate(cluster: str) -> str:
    if len(cluster) == 1:
        ch = cluster
        if ch.isascii():
            return _ascii_specials(ch)
        if ch in _LETTERS:
            return _LETTERS[ch]
        if ch in _TYPOGRAPHY:
            return _TYPOGRAPHY[ch]
        if unicodedata.category(ch).startswith("Z"):
            return " "
    decomposed = unicodedata.normalize("NFD", cluster)
    base, marks = decomposed[0], decomposed[1:]
    if marks and ((base.isascii() and base.isalpha()) or base in _LETTERS):
        above = any(unicodedata.combining(m) == 230 and m in _ACCENTS for m in marks)
        out = "\\" + base if above and base in "ij" else _LETTERS.get(base, base)
        for mark in marks:  # NFD orders marks canonically: the innermost comes first
            if mark in _ACCENTS:
                out = f"{_ACCENTS[mark]}{{{out}}}"
        return out
    return "".join(_transliterate(ch) if ch.isascii() else _placeholder(ch) for ch in cluster)


def escape(text) -> Markup:
    """Text for LaTeX: specials escaped, non-ASCII transliterated (module doc). Markup is kept as is."""
    if isinstance(text, Markup):
        return text
    text = str(text)
    if text.isascii():
        return Markup(_ascii_specials(text))
    text = "".join(ch for ch in unicodedata.normalize("NFC", text) if not _dropped(ch))
    return Markup("".join(_transliterate(c) for c in _clusters(text)))


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
