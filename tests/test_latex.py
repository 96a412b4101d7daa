"""LaTeX output: every string escaped, and paper_tables.tex compiles with a real pdflatex."""

import json
import shutil
import subprocess

import pytest

from decodegap.latex import NumberLog, escape, path
from decodegap.tables import matrix_table

NASTY = r"Qwen_2.5 & co. 100% #1 {x} ~y^ $z$ \cmd <a>"


def test_escape_neutralises_every_special_character():
    out = str(escape(NASTY))
    assert out == r"Qwen\_2.5 \& co. 100\% \#1 \{x\} \textasciitilde{}y\textasciicircum{} \$z\$ \textbackslash{}cmd \textless{}a\textgreater{}"


def test_numbers_carry_keys_and_refuse_unsafe_ones():
    log = NumberLog("t")
    assert str(log.num("ms/h200/x", 8.1934, 2, quantity="q")) == r"\dgnum{t/ms/h200/x}{8.19}"
    assert log.entries["t/ms/h200/x"]["value"] == pytest.approx(8.1934)
    with pytest.raises(ValueError, match="LaTeX would act on"):
        log.num("bad%key", 1.0)
    with pytest.raises(ValueError):
        path("tables/my table.tex")


def _compile(tmp_path, body_file):
    pdflatex = shutil.which("pdflatex")
    assert pdflatex, "pdflatex is required (Debian: texlive-latex-base texlive-latex-recommended); .ci/run installs it"
    main = body_file.parent / "_compile_test.tex"
    main.write_text("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
                    "\\begin{document}\n\\input{" + body_file.name + "}\n\\end{document}\n")
    proc = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "-output-directory", str(tmp_path), main.name],
                          cwd=body_file.parent, capture_output=True, text=True)
    main.unlink()
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (tmp_path / "_compile_test.pdf").stat().st_size > 1000
    return proc.stdout


def test_paper_tables_compile(built_workspace, tmp_path):
    log = _compile(tmp_path, built_workspace / "report" / "paper_tables.tex")
    assert "Undefined control sequence" not in log


def test_names_with_latex_specials_render_and_compile(tmp_path, built_workspace):
    stats_file = built_workspace / "results/stats/h200/qwen2.5-7b/ctx2048/sdpa_bf16_graphed/stats.json"
    cells = [json.loads(stats_file.read_text())["cell"]]
    out = tmp_path / "nasty.tex"
    matrix_table("h200", [stats_file], cells, {"display_name": "H200 #1 & 50% off_", "b_peak_Bps": 4.8e12},
                 {"qwen2.5-7b": {"display_name": NASTY}}, out, tmp_path / "numbers.json")
    tex = out.read_text()
    assert str(escape(NASTY)) in tex and "H200 \\#1 \\& 50\\% off\\_" in tex
    _compile(tmp_path, out)
