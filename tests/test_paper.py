"""report/paper.pdf and the tables in it: the LaTeX log checker's rules (canned logs, no pdflatex),
the published table's reasons and the note on intervals below the memory floor (fixture cells),
and the whole document built from a report, its log clean (pdflatex)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import fixture_cell_stats, fixture_models
from decodegap.analysis import paper, synthetic, tables
from decodegap.core.config import load_gpus

needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None,
                                    reason="pdflatex is not on PATH (Debian: texlive-latex-base texlive-latex-recommended)")

# A pdflatex log, cut down: every kind of line the checker reads, in the order pdflatex writes them.
LOG = r"""This is pdfTeX, Version 3.141592653-2.6-1.40.24 (TeX Live 2022/Debian) (preloaded format=pdflatex)
(./paper.tex
LaTeX2e <2022-11-01> patch level 1
decodegap: table tables/matrix_h200.tex
(./tables/matrix_h200.tex
Overfull \hbox (1.2pt too wide) in paragraph at lines 32--32
 [][]
LaTeX Warning: Float too large for page by 384.29308pt on input line 55.
)
decodegap: table tables/model.tex
(./tables/model.tex
Overfull \hbox (134.40216pt too wide) in paragraph at lines 7--17
 [][]
Underfull \hbox (badness 10000) in paragraph at lines 20--20
)
decodegap: figure host
Overfull \vbox (12.5pt too high) has occurred while \output is active
Missing character: There is no ^^e2 in font cmr10!
LaTeX Warning: Reference `tab:floors' on page 3 undefined on input line 12.
LaTeX Warning: There were undefined references.
Output written on tcrm0800.600gf (128 characters, 19132 bytes).
Output written on paper.pdf (34 pages, 502433 bytes).
"""


def test_the_log_checker_names_each_problem_and_where():
    report = paper.check_log(LOG)
    assert report.pages == 34  # the PDF's, not a font's "Output written" line
    problems = "\n".join(report.problems)
    assert "float too large for its page by 384.29308pt in table tables/matrix_h200.tex" in problems
    assert "overfull \\hbox, 134.40216pt too wide (tolerance 3.0pt), in table tables/model.tex" in problems
    assert "1.2pt" not in problems and report.warnings["overfull hbox within tolerance"] == 1  # a rounding matter
    assert "overfull \\vbox, 12.5pt too high" in problems and "in figure host" in problems
    assert "Missing character" in problems and "Reference `tab:floors' on page 3 undefined" in problems
    assert len(report.problems) == 6 and not report.ok
    assert report.warnings["underfull \\hbox"] == 1
    assert "34 pages; problems: 6" in report.summary()


def test_the_log_checker_passes_a_clean_log_and_reads_errors():
    clean = "(./paper.tex\nOverfull \\hbox (2.9pt too wide) in alignment at lines 4--9\nOutput written on paper.pdf (1 page, 9 bytes).\n"
    report = paper.check_log(clean)
    assert report.ok and report.pages == 1
    assert not paper.check_log(clean, hbox_tolerance_pt=2.0).ok  # the tolerance is the caller's
    error = "(./tables/x.tex\n! Undefined control sequence.\nl.12 \\foo\n               bar\n"
    [problem] = paper.check_log(error).problems
    assert problem.startswith("LaTeX error in ./tables/x.tex: Undefined control sequence.") and "l.12 \\foo" in problem


def test_the_sections_keep_the_papers_order_and_lose_nothing():
    names = ["matrix_h200", "ab", "sensitivity", "variance", "floors", "anatomy", "host", "model", "cost", "published",
             "environment", "attention", "attention_step", "quantization", "floor", "matrix_l4", "new_table"]
    parts = paper.sections(names, ["ladder", "context", "ab", "host", "anatomy", "deployment", "attention", "quantization", "new"])
    order = [t for s in parts for t in s["tables"]]
    assert sorted(order) == sorted(names)
    assert order[:3] == ["matrix_h200", "matrix_l4", "floors"]  # the memory floor first, the GPU matrices together
    assert order.index("ab") < order.index("attention") < order.index("quantization") < order.index("cost") < order.index("published")
    assert order.index("published") < order.index("floor") < order.index("anatomy") < order.index("host") < order.index("model")
    assert order.index("model") < order.index("environment") < order.index("sensitivity") < order.index("variance")
    assert parts[-1]["tables"] == ["new_table"] and parts[-1]["figures"] == ["new"]  # nothing dropped
    assert parts[0]["figures"] == ["ladder", "context"]


def _cell(ctx, mode="graphed", gpu="h200", model="qwen2.5-7b"):
    return dict(gpu=gpu, model=model, ctx=ctx, attn="sdpa", quant="bf16", mode=mode)


def _stats(tmp_path):
    """Fixture cells on two machines (sessions 0 and 1): ctx 2048 far apart (its interval reaches below the
    memory floor), ctx 4096 close together (it does not); ctx 8192: sessions that could not run."""
    files = {}
    for ctx, bases in ((2048, (5.0, 60.0)), (4096, (10.0, 10.05))):
        records = [synthetic.record(_cell(ctx), s, 64, np.random.default_rng([s, ctx]), base_ms=b) for s, b in enumerate(bases)]
        files[ctx] = fixture_cell_stats(tmp_path, _cell(ctx), records)
    files[8192] = fixture_cell_stats(tmp_path, _cell(8192), [synthetic.not_possible_record(_cell(8192), s, "no kernel") for s in range(2)])
    return files


def test_an_interval_below_the_memory_floor_is_marked_and_explained(tmp_path):
    files = _stats(tmp_path)
    gpus = {k: vars(v) for k, v in load_gpus().items()}
    wide, close = (json.loads(files[c].read_text())["completed"]["arms"]["graphed"] for c in (2048, 4096))
    assert wide["ci_low_ms"] < wide["t_floor_ms"] < close["ci_low_ms"]  # the fixture is what the test needs
    cells = [_cell(c) for c in (2048, 4096, 8192)]
    tables.matrix_table("h200", list(files.values()), cells, gpus["h200"], fixture_models(), tmp_path / "m.tex", tmp_path / "m.json")
    tex = (tmp_path / "m.tex").read_text()
    rows = {ctx: next(line for line in tex.splitlines() if line.startswith(f"Qwen-2.5-7B & {ctx} &")) for ctx in (2048, 4096)}
    assert rows[2048].count(r"$\ddagger$") == 1 and r"$\ddagger$" not in rows[4096]
    assert tex.count("lies below the cell's physical memory floor") == 1 and "not a possible step time" in tex
    numbers = json.loads((tmp_path / "m.json").read_text())
    low = numbers["matrix_h200/ms_per_step_ci_low/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/completed"]
    assert rf"\dgnum{{matrix_h200/ms_per_step_ci_low/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/completed}}{{{low['text']}}}" in rows[2048]
    assert "failed" in tex and "no completed session: s00: not possible: no kernel" in tex
    assert tex.isascii()


def test_the_published_table_says_why_a_figure_is_not_reproduced(tmp_path):
    files = _stats(tmp_path)
    gpus = {k: vars(v) for k, v in load_gpus().items()}

    def figure(key, **fields):
        return {"key": key, "quantity": "ms_per_step", "value": 9.0, "sources": [], "model": "qwen2.5-7b", "quant": "bf16", **fields}

    reference = [figure("ms.l4", gpu="l4", ctx=2048, mode="graphed"),            # a GPU without any session
                 figure("ms.h200.16k", gpu="h200", ctx=16384, mode="graphed"),   # a measured GPU without the cell
                 figure("ms.h200.8k", gpu="h200", ctx=8192, mode="graphed"),     # a cell whose sessions did not complete
                 figure("ms.h200.2k", gpu="h200", ctx=2048, mode="graphed")]     # reproduced
    tables.published_table(list(files.values()), reference, gpus, fixture_models(), tmp_path / "p.tex", tmp_path / "p.json")
    tex = (tmp_path / "p.tex").read_text()
    assert "not measured: no L4 session in the matrix or A/B cells" in tex
    assert "not measured: H200 SXM has sessions of matrix or A/B cells, but none of a cell with model qwen2.5-7b, ctx 16384, quant bf16, mode graphed" in tex
    assert "not measured: the matching H200 SXM cell has 2 sessions, none completed" in tex
    assert tex.count("not measured\\textsuperscript") == 3  # each row marked, each reason one note
    assert set(json.loads((tmp_path / "p.json").read_text())) == {"published/ms.h200.2k/reproduced", "published/ms.h200.2k/ratio"}


def _figures(report: Path) -> list[dict]:
    return [{"name": p.stem, "path": f"report/figures/{p.name}", "caption": f"The {p.stem} figure (100% of it, W_bf16)."}
            for p in sorted((report / "figures").glob("*.pdf"))]


def _build_and_check(root: Path, tmp_path: Path) -> paper.LatexReport:
    """paper.tex and paper.pdf from a built report, and paper_tables.tex in a plain article: no float too
    large, no line beyond the tolerance, no note off its page, in either."""
    report_dir = root / "report"
    table_files = [f"report/tables/{p.name}" for p in sorted((report_dir / "tables").glob("*.tex"))]
    cwd = os.getcwd()
    os.chdir(root)  # the workflow's working directory: paths as the rule gets them
    try:
        built = paper.paper_pdf(table_files, _figures(report_dir), "report/paper.tex", tmp_path / "paper.pdf", latex_log=tmp_path / "paper.log")
        plain = report_dir / "_plain_article.tex"
        plain.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
                         "\\begin{document}\n\\input{paper_tables.tex}\n\\end{document}\n")
        try:
            plain_report = paper.build_pdf(plain, tmp_path / "plain.pdf")
        finally:
            plain.unlink()
    finally:
        os.chdir(cwd)
    for r in (built, plain_report):
        assert r.ok and r.pages and r.pages > 1, r.summary()
    log = (tmp_path / "paper.log").read_text()
    assert "Float too large" not in log and "Overfull \\vbox" not in log
    tex = (root / "report/paper.tex").read_text()
    assert tex.isascii() and all(f"\\input{{tables/{Path(t).name}}}" in tex for t in table_files)
    assert (tmp_path / "paper.pdf").read_bytes()[:5] == b"%PDF-"
    return built


@needs_pdflatex
def test_the_paper_builds_from_the_small_report(built_workspace, tmp_path):
    _build_and_check(built_workspace, tmp_path)


@needs_pdflatex
def test_a_table_that_does_not_fit_fails_the_build(tmp_path):
    (tmp_path / "tables").mkdir()
    rows = "".join(f"row {i} & {'x' * 60} & {'y' * 60} \\\\\n" for i in range(80))
    (tmp_path / "tables/big.tex").write_text("\\begin{table}[htbp]\\centering\\begin{tabular}{lll}\n" + rows + "\\end{tabular}\\end{table}\n")
    with pytest.raises(paper.LatexError) as err:
        paper.paper_pdf([tmp_path / "tables/big.tex"], [], tmp_path / "paper.tex", tmp_path / "paper.pdf")
    said = str(err.value)
    assert "float too large for its page" in said and "overfull \\hbox" in said and "in table tables/big.tex" in said
    assert not (tmp_path / "paper.pdf").exists()


@pytest.mark.slow
@pytest.mark.xdist_group("bundled_report")  # the worker that built it for test_data_safety
@needs_pdflatex
def test_the_paper_builds_from_the_bundled_report(bundled_report, tmp_path):
    """The whole bundled report (every session under results/raw/), built in a clone, then the paper
    (from a copy of its report/: the paper's files must not reach the other tests' report)."""
    root = tmp_path / "bundled"
    shutil.copytree(bundled_report / "report", root / "report", symlinks=True)
    report = _build_and_check(root, tmp_path)
    assert report.pages >= 20
    for table in ("matrix_h200", "floor", "published"):
        assert f"\\input{{tables/{table}.tex}}" in (root / "report/paper.tex").read_text()
    assert "no L4 session in the matrix or A/B cells" in (root / "report/tables/published.tex").read_text()
