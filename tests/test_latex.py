"""LaTeX output: every string escaped, and paper_tables.tex compiles with a real pdflatex."""

import json
import shutil
import subprocess

import pytest

from decodegap.analysis.latex import NumberLog, escape, path
from decodegap.analysis.tables import matrix_table

NASTY = r"Qwen_2.5 & co. 100% #1 {x} ~y^ $z$ \cmd <a>"


def test_escape_neutralises_every_special_character():
    out = str(escape(NASTY))
    assert out == r"Qwen\_2.5 \& co. 100\% \#1 \{x\} \textasciitilde{}y\textasciicircum{} \$z\$ \textbackslash{}cmd \textless{}a\textgreater{}"


# The transliteration of non-ASCII text (rule in decodegap/latex.py's module doc).
@pytest.mark.parametrize("text, tex", [
    ("Ωmega-7B café ñ", r"{[}greek capital letter omega{]}mega-7B caf\'{e} \~{n}"),
    ("Über façade, Ångström", r'\"{U}ber fa\c{c}ade, \r{A}ngstr\"{o}m'),
    ("Straße Æsir Øre Œuvre Łódź ð þ", r"Stra\ss{}e \AE{}sir \O{}re \OE{}uvre \L{}\'{o}d\'{z} d th"),
    ("naïve í ǘ ệ ő č", r'na\"{\i}ve \'{\i} \'{\"{u}} \^{\d{e}} \H{o} \v{c}'),
    ("ș ą", "s a"),  # comma below and ogonek have no accent command in OT1: dropped
    ("a–b—c “q” ‘s’ … x\u00a0y", r"a\textendash{}b\textemdash{}c \textquotedblleft{}q\textquotedblright{} "
                                 r"\textquoteleft{}s\textquoteright{} \ldots{} x~y"),
    ("NVIDIA® H100™ ±5°", r"NVIDIA\textregistered{} H100\texttrademark{} \textpm{}5\textdegree{}"),
    ("🚀 rocket-GPU", r"{[}rocket{]} rocket-GPU"),
    ("中文", r"{[}cjk unified ideograph-4e2d{]}{[}cjk unified ideograph-6587{]}"),
    ("❤️ 👨\u200d💻", r"{[}heavy black heart{]} {[}man{]}{[}personal computer{]}"),  # selectors and joiners dropped
    ("\U000f0000 ≠", r"{[}U+F0000{]} {[}not equal to{]}"),
    ("Qwen $2.5$ \\textbf{x} & 100%_#", r"Qwen \$2.5\$ \textbackslash{}textbf\{x\} \& 100\%\_\#"),
])
def test_escape_transliterates_non_ascii(text, tex):
    assert str(escape(text)) == tex
    assert escape(escape(text)) == escape(text)  # Markup passes through unchanged


def test_escape_is_the_same_for_composed_and_decomposed_input():
    assert escape("cafe\u0301 n\u0303") == escape("café ñ") == r"caf\'{e} \~{n}"


def test_every_latin_letter_and_a_sample_of_the_rest_compile(tmp_path):
    """Latin-1 Supplement, Latin Extended-A/B, General Punctuation, Greek, some CJK and emoji: the
    escaped text is ASCII and compiles under plain pdflatex (OT1) and with T1."""
    chars = [chr(c) for r in (range(0xA0, 0x250), range(0x2000, 0x2070), range(0x391, 0x3A0), range(0x4E2D, 0x4E35),
                              range(0x1F680, 0x1F690)) for c in r]
    body = str(escape(" ".join(chars)))
    assert body.isascii()
    for name, encoding in (("ot1", OT1), ("t1", T1)):
        out = tmp_path / name
        out.mkdir()
        (out / "body.tex").write_text(body + "\n")
        log = _compile(out, out / "body.tex", encoding)
        assert "Undefined control sequence" not in log and "Missing character" not in log


def test_numbers_carry_keys_and_refuse_unsafe_ones():
    log = NumberLog("t")
    assert str(log.num("ms/h200/x", 8.1934, 2, quantity="q")) == r"\dgnum{t/ms/h200/x}{8.19}"
    assert log.entries["t/ms/h200/x"]["value"] == pytest.approx(8.1934)
    with pytest.raises(ValueError, match="LaTeX would act on"):
        log.num("bad%key", 1.0)
    with pytest.raises(ValueError):
        path("tables/my table.tex")


T1 = "\\usepackage[T1]{fontenc}\n"
OT1 = ""  # plain pdflatex: LaTeX's default encoding, no fontenc, no inputenc


def _compile(tmp_path, body_file, encoding=T1):
    pdflatex = shutil.which("pdflatex")
    assert pdflatex, "pdflatex is required (Debian: texlive-latex-base texlive-latex-recommended); .ci/run installs it"
    main = body_file.parent / "_compile_test.tex"
    main.write_text("\\documentclass{article}\n" + encoding + "\\usepackage{booktabs}\n\\usepackage{graphicx}\n"
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
