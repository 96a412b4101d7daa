r"""report/paper.pdf: the reproduced paper as one document, and the check that it is typeset cleanly.

`render_paper` writes report/paper.tex from the same lists the paper_tables step gets (the table
files, and the figures as {name, path, caption}): a title, a short summary, then one section per
family of artifacts in the paper's order (the memory floor and the GPU matrix; CUDA Graphs and the
launch tax; attention backends; weight paths; cost per token; the published figures against ours),
then beyond the paper (the floor experiment, anatomy, host model, step model, environment,
sensitivity, variance). A table or figure no section names goes to a last section, so none is lost.

`build_pdf` runs pdflatex twice in a build directory of its own and reads the LaTeX log with
`check_log`: it fails, naming each problem, on a LaTeX error, a float too large for its page, a line
or table wider than the text by more than HBOX_TOLERANCE_PT, any overfull vertical box (a note or
footnote run off the page), a character missing from the font and a reference left undefined.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup

from decodegap.analysis.latex import PREAMBLE_MACROS, environment
from decodegap.analysis.latex import path as latex_path
from decodegap.core.errors import DecodegapError

HBOX_TOLERANCE_PT = 3.0  # an overfull \hbox up to this wide is a rounding matter, not a table off its page
# The page (A4, 2 cm margins): the template's geometry, and what figures are sized against.
_MARGIN_BP, _A4_BP = 2.0 / 2.54 * 72, (595.276, 841.890)  # PDF points (bp), as a figure's MediaBox gives its size
PAGE = {"paper": "a4paper", "margin_cm": 2.0, "textwidth_bp": _A4_BP[0] - 2 * _MARGIN_BP, "textheight_bp": _A4_BP[1] - 2 * _MARGIN_BP}

# (title, intro, table patterns, figure names), in the paper's order, then beyond it.
SECTIONS = [
    (Markup(r"The memory floor and $R_\mathrm{floor}$"),
     Markup(r"Each GPU's cells: the median step of every completed session with its interval over machines, and "
            r"$R_\mathrm{floor} = t_\mathrm{floor}/t_\mathrm{obs}$, the share of the analytic memory floor a step reaches; "
            r"then $R$ in its three forms."),
     ["matrix_*", "floors"], ["ladder", "context"]),
    ("CUDA Graphs and the launch tax",
     "The A/B experiments: both arms in every fresh session, the speedup of the graphed step over the op-by-op one.",
     ["ab"], ["ab"]),
    ("Attention backends",
     "One decode-shaped attention call per layer, launched op by op and replayed from a graph, and the whole step with "
     "each path inside the model.",
     ["attention", "attention_step"], ["attention"]),
    ("Quantization and weight paths",
     "The whole step with each weight path, against bf16 and against the speedup its memory traffic would allow.",
     ["quantization"], ["quantization"]),
    ("Cost per token", "One stream on one GPU rented by the hour.", ["cost"], ["deployment"]),
    ("The published figures against ours",
     "Every figure of the paper that a cell of ours can reproduce, and where it cannot, why.", ["published"], []),
    ("Beyond the paper: closing the gap to the floor",
     "A compiled step and decodegap's own fused step against the graphed one, per weight path; then where the fused step's "
     "remaining time goes.", ["floor", "gap"], []),
    ("Beyond the paper: engines at batch 1",
     "The ways of running the decode step that people deploy, measured under the same protocol on the same cells: "
     "transformers' graphed step, its own generate loop, torch.compile and decodegap's fused step.", ["engines"], ["engines"]),
    ("Beyond the paper: the anatomy of a step",
     "Where each millisecond of a step goes, from the memory floor to the framework's cost.", ["anatomy"], ["anatomy"]),
    ("Beyond the paper: the host as an axis",
     "The host's cost per kernel launch and the core speed an op-by-op step would need.", ["host"], ["host"]),
    ("Beyond the paper: a model of the step", "A model of step time from bytes, kernels and launches, in and out of sample.",
     ["model"], []),
    ("Beyond the paper: the environment", "The stack each GPU type ran under, and which paths run on it.", ["environment"], []),
    ("Beyond the paper: sensitivity", "Whether the headline moves with the estimator or the validity filters.", ["sensitivity"], []),
    ("Beyond the paper: variance", "Where each cell's spread lives: machines, sessions, steps.", ["variance"], []),
]


class LatexError(DecodegapError):
    """pdflatex failed, or its log shows a table or note that does not fit its page."""


def _pdf_size_bp(path) -> tuple[float, float] | None:
    """A PDF's first MediaBox (width, height) in PDF points (bp), where it can be read without a PDF library."""
    try:
        head = Path(path).read_bytes()[:200_000]
    except OSError:
        return None
    m = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", head)
    return (float(m.group(3)) - float(m.group(1)), float(m.group(4)) - float(m.group(2))) if m else None


def _figure_layout(pdf) -> dict:
    """How a figure goes on the page: at its own size where it fits the text width (matplotlib's
    fonts as drawn), else on its side where it is wide and low, else scaled to the text width."""
    size = _pdf_size_bp(pdf)
    w, h = size or (PAGE["textwidth_bp"], PAGE["textwidth_bp"] * 0.75)
    tw, th = PAGE["textwidth_bp"], PAGE["textheight_bp"]
    if w <= tw and h <= 0.8 * th:
        return {"landscape": False, "width": Markup(f"{w:.1f}bp")}
    if w / h >= 2.0 and tw / w < 0.8:
        return {"landscape": True, "width": Markup(f"{min(w, 0.96 * th):.1f}bp")}
    return {"landscape": False, "width": Markup(r"\linewidth")}


def sections(table_names: list[str], figure_names: list[str]) -> list[dict]:
    """Each section's title, intro and the names of its tables and figures, in the order SECTIONS
    gives; names no section claims go to a last section."""
    left_t, left_f, out = list(table_names), list(figure_names), []
    for title, intro, t_patterns, f_names in SECTIONS:
        ts = [t for p in t_patterns for t in left_t if fnmatch.fnmatchcase(t, p)]
        fs = [f for f in f_names if f in left_f]
        left_t = [t for t in left_t if t not in ts]
        left_f = [f for f in left_f if f not in fs]
        if ts or fs:
            out.append({"title": title, "intro": intro, "tables": ts, "figures": fs})
    if left_t or left_f:
        out.append({"title": "Other tables and figures", "intro": "", "tables": left_t, "figures": left_f})
    return out


def render_paper(table_files, figures: list[dict], out_tex, title: str | None = None) -> None:
    """report/paper.tex: title, summary, and a section per family of tables and figures (module doc).
    Paths are written relative to out_tex's folder, where build_pdf compiles it."""
    from decodegap.analysis.reference import PAPER_YAML
    from decodegap.core.config import load_yaml

    base = Path(out_tex).resolve().parent

    def rel(p):
        return latex_path(Path(os.path.relpath(Path(p).resolve(), base)).as_posix())

    tables = {Path(t).stem: rel(t) for t in table_files}
    figs = {f["name"]: {**f, "path": rel(f["path"]), **_figure_layout(f["path"])} for f in figures}
    if title is None:
        title = ((load_yaml(PAPER_YAML) or {}).get("paper") or {}).get("title") or "Batch-1 LLM decode"
    parts = [{**s, "tables": [tables[t] for t in s["tables"]], "figures": [figs[f] for f in s["figures"]]}
             for s in sections(list(tables), list(figs))]
    tex = environment().get_template("paper.tex.j2").render(
        title=title, sections=parts, macros=Markup(PREAMBLE_MACROS), page=PAGE)
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(tex)


@dataclass
class LatexReport:
    """What a LaTeX log says: pages written, problems (each one fails the build) and other warnings."""

    pages: int | None = None
    problems: list[str] = field(default_factory=list)
    warnings: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        said = ", ".join(f"{n} {k}" for k, n in sorted(self.warnings.items())) or "none"
        head = f"{self.pages if self.pages is not None else '?'} pages; problems: {len(self.problems)}; other warnings: {said}"
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])


_HBOX = re.compile(r"^Overfull \\hbox \((?P<pt>[\d.]+)pt too wide\) (?P<where>.*)$")
_VBOX = re.compile(r"^Overfull \\vbox \((?P<pt>[\d.]+)pt too high\) (?P<where>.*)$")
_FLOAT = re.compile(r"Float too large for page by (?P<pt>[\d.]+)pt on input line (?P<line>\d+)")
_PAGES = re.compile(r"^Output written on \S+\.pdf \((?P<n>\d+) pages?")
_FILE = re.compile(r"\((?P<file>(?:\./|/)?[\w./-]+\.tex)")
_MARK = re.compile(r"^decodegap: (?P<what>.+)$")


def check_log(text: str, hbox_tolerance_pt: float = HBOX_TOLERANCE_PT) -> LatexReport:
    """Read a pdflatex log (of the last pass). Problems: "! " errors, "Float too large for page",
    an overfull \\hbox wider than the tolerance, any overfull \\vbox, a missing character, an
    undefined reference. Each problem names where: the last `decodegap: ...` marker the document
    typed out (paper.tex types one before each table and figure), else the last .tex file opened."""
    report, where = LatexReport(), "the document"
    warnings = report.warnings

    def count(kind):
        warnings[kind] = warnings.get(kind, 0) + 1

    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := _MARK.match(line):
            where = m.group("what")
        elif files := _FILE.findall(line):
            if not where.startswith("table ") and not where.startswith("figure "):
                where = files[-1]
        if m := _PAGES.match(line):
            report.pages = int(m.group("n"))
        if line.startswith("! "):
            context = " ".join(x.strip() for x in lines[i + 1:i + 3] if x.strip())
            report.problems.append(f"LaTeX error in {where}: {line[2:].strip()}" + (f" ({context})" if context else ""))
        elif m := _FLOAT.search(line):
            report.problems.append(f"float too large for its page by {m.group('pt')}pt in {where} (input line {m.group('line')})")
        elif m := _HBOX.match(line):
            if float(m.group("pt")) > hbox_tolerance_pt:
                report.problems.append(f"overfull \\hbox, {m.group('pt')}pt too wide (tolerance {hbox_tolerance_pt}pt), in {where} "
                                       f"{m.group('where')}")
            else:
                count("overfull hbox within tolerance")
        elif m := _VBOX.match(line):
            report.problems.append(f"overfull \\vbox, {m.group('pt')}pt too high (a note or footnote runs off the page), in {where} "
                                   f"{m.group('where')}")
        elif line.startswith("Missing character:"):
            report.problems.append(f"{line.strip()} in {where}")
        elif re.match(r"^(LaTeX|pdfTeX) Warning: (Reference|Citation) .* undefined", line) or "There were undefined references" in line:
            report.problems.append(f"{line.strip()} ({where})")
        elif line.startswith(("Underfull \\hbox", "Underfull \\vbox")):
            count(line.split(" (")[0].lower())
        elif m := re.match(r"^(?:LaTeX|Package \w+|pdfTeX|Class \w+) Warning: (.*)", line):
            count("LaTeX warning" if "Label(s) may have changed" not in m.group(1) else "labels changed")
    return report


def build_pdf(tex, out_pdf, hbox_tolerance_pt: float = HBOX_TOLERANCE_PT, keep_log=None) -> LatexReport:
    """Compile `tex` with pdflatex twice (-interaction=nonstopmode -halt-on-error), in a build folder
    of its own, with the .tex file's folder as the working directory (its \\input and figure paths);
    check the last log (check_log); write out_pdf only when it holds no problem, else raise
    LatexError naming each. keep_log: where to copy the LaTeX log (also when it fails)."""
    pdflatex = shutil.which("pdflatex")
    if not pdflatex:
        raise LatexError("pdflatex is not on PATH (Debian: texlive-latex-base texlive-latex-recommended)")
    tex = Path(tex).resolve()
    env = {**os.environ, "max_print_line": "100000"}  # one log line per message, not wrapped at 79 characters
    with tempfile.TemporaryDirectory(prefix="decodegap-paper-") as build:
        for _ in range(2):
            proc = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "-output-directory", build, tex.name],
                                  cwd=tex.parent, capture_output=True, text=True, errors="replace", env=env)
            if proc.returncode != 0:
                break
        log = Path(build) / (tex.stem + ".log")
        text = log.read_text(errors="replace") if log.exists() else proc.stdout
        if keep_log:
            Path(keep_log).parent.mkdir(parents=True, exist_ok=True)
            Path(keep_log).write_text(text)
        report = check_log(text, hbox_tolerance_pt)
        if proc.returncode != 0 and not any(p.startswith("LaTeX error") for p in report.problems):
            report.problems.append(f"pdflatex exited with status {proc.returncode}")
        if report.problems:
            raise LatexError(f"{tex.name} does not typeset cleanly: " + report.summary())
        Path(out_pdf).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(build) / (tex.stem + ".pdf"), out_pdf)
    return report


def paper_pdf(table_files, figures: list[dict], out_tex, out_pdf, latex_log=None) -> LatexReport:
    """render_paper, then build_pdf: the Snakemake rule's body (scripts/rules/paper_pdf.py)."""
    render_paper(table_files, figures, out_tex)
    return build_pdf(out_tex, out_pdf, keep_log=latex_log)
