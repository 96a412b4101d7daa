r"""Display names as a user writes them in config/models.yaml or under `gpus:` in their config:
with `$`, backslashes, LaTeX specials, accents, Greek, CJK and emoji. Every figure draws them as
typed (no mathtext, no missing glyph) and the report's LaTeX compiles with them under pdflatex.

Needs pdflatex (Debian: texlive-latex-base texlive-latex-recommended), Symbola for the emoji
(fonts-symbola) and a CJK font (fonts-droid-fallback; fonts-noto-cjk or fonts-wqy-zenhei do too):
the glyph tests skip, naming the font, where matplotlib finds none.
"""

import json
import logging
import warnings

import pytest
from matplotlib.text import Text

from decodegap.analysis import figures, tables
from decodegap.core.config import load_gpus, load_models
from decodegap.analysis.latex import escape
from decodegap.analysis.reference import load_reference
from test_latex import OT1, T1, _compile

GPU_NAMES = {  # as under `gpus:` in a user's config.yaml
    "h200": "🚀 rocket-GPU",
    "l4": "Ωmega L4 café ñ",
    "h100-sxm5": r"a\b$c$ \$5",
    "a100-80gb-sxm4": r"$\textbf{x}$ A100 $\frac{1}{$",  # mathtext would raise on this one
    "l40s": "中文模型 L40S",
}
MODEL_NAMES = {  # as a `display_name` in config/models.yaml
    "qwen2.5-7b": r"Qwen $2.5$ \textbf{x} & 100%_#",
    "mistral-7b-v0.3": "Ωmega-7B café ñ",
    "llama-3.1-8b": "中文模型",
}
FONTS_HINT = "(Debian: fonts-symbola for emoji, fonts-droid-fallback for CJK; .ci/run installs them)"


def _cell(gpu, model, ctx, mode):
    return {"gpu": gpu, "model": model, "ctx": ctx, "attn": "sdpa", "quant": "bf16", "mode": mode}


def _arm(ms, b_peak):
    return {"median_ms": ms, "ci_low_ms": 0.97 * ms, "ci_high_ms": 1.04 * ms, "r_floor": 3.0 / ms, "b_peak_Bps": b_peak,
            "tokens_per_s": 1e3 / ms, "n_sessions": 3, "n_machines": 2, "n_steps": 120, "no_ci_reason": None}


def _stats(cell, gpus, ms, status="valid"):
    """The fields of a cell's statistics record (decodegap.analysis.stats.cell_stats) that tables and figures read."""
    b_peak = gpus[cell["gpu"]]["b_peak_Bps"]
    arms = ["eager", "graphed"] if cell["mode"] == "ab-eager-graphed" else [cell["mode"]]
    scope = {"arms": {a: _arm(ms * (1.3 if a == "eager" else 1.0), b_peak) for a in arms}}
    s = {"cell": cell, "kind": "ab" if len(arms) == 2 else "single", "arms": arms, "status": status,
         "n_sessions": 3, "n_valid": 3 if status == "valid" else 0, "n_completed": 3, "config": {"host_nominal_factor": 1.1},
         "invalid_reasons": [] if status == "valid" else ["s00: unstable: eager stdev is 31.0% of the mean (limit 10%)"],
         "valid": scope if status == "valid" else {}, "completed": scope, "host_nominal": {}, "host_blocks": [],
         "sensitivity": {"stability": [], "host_nominal": []}}
    if len(arms) == 2:
        scope["speedup"] = {"of": "graphed", "over": "eager", "estimator": "geomean", "estimate": 1.3, "ci": [1.2, 1.4], "n_sessions": 3,
                            "n_machines": 2, "no_ci_reason": None, "estimators": {"geomean": {"estimate": 1.3, "ci": [1.2, 1.4], "label": "geometric mean of per-session ratios"}}}
        s["host_blocks"] = [{"session": i // 4, "arm": arms[i % 2], "block": i, "median_ms": ms * (1.3 if i % 2 == 0 else 1.0) + 0.01 * i,
                             "probe_ns_per_iter": 2.0 + 0.05 * i, "probe": "step_probe_ns_per_iter"} for i in range(12)]
        s["host_nominal_rule"] = {"probe": "step_probe_ns_per_iter", "reference_ns_per_iter": 2.0, "factor": 1.1, "limit_ns_per_iter": 2.2}
    return s


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Statistics files for a few cells on GPUs and models that carry the nasty names."""
    root = tmp_path_factory.mktemp("names")
    gpus = {k: vars(v) for k, v in load_gpus(overrides={k: {"display_name": n} for k, n in GPU_NAMES.items()}).items()}
    models = {k: {"display_name": MODEL_NAMES.get(k, m.display_name)} for k, m in load_models().items()}
    cells = {
        "matrix_h200": [(_cell("h200", m, ctx, mode), 8.0 * ctx / 2048, "valid") for m in MODEL_NAMES for ctx in (2048, 4096) for mode in ("eager", "graphed")],
        "matrix_l4": [(_cell("l4", "qwen2.5-7b", 2048, "graphed"), 20.0, "valid"), (_cell("l4", "llama-3.1-8b", 2048, "graphed"), 22.0, "invalid")],
        "ab": [(_cell(g, "qwen2.5-7b", 2048, "ab-eager-graphed"), 9.0, "valid") for g in ("h200", "l40s")],
    }
    files = {}
    for group, entries in cells.items():
        files[group] = []
        for cell, ms, status in entries:
            path = root / "results/stats" / tables._cell_id(cell) / "stats.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_stats(cell, gpus, ms, status)))
            files[group].append(path)
    return {"root": root, "gpus": gpus, "models": models, "files": files, "cells": {g: [c for c, _, _ in e] for g, e in cells.items()}}


def _draw(monkeypatch, caplog, call):
    """Run one figure function; return the figure's texts as matplotlib draws them ((text, is_math) pairs)
    and every warning it raised (Python warnings and matplotlib's log)."""
    drawn = []
    save = figures.save

    def keep(fig, outputs):
        save(fig, outputs)  # draws the figure, so the tick labels exist
        drawn.extend(t._preprocess_math(t.get_text()) for t in fig.findobj(Text) if t.get_text())

    monkeypatch.setattr(figures, "save", keep)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="matplotlib"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return drawn, [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]


def _figure_calls(ws, out):
    gpus, models, files, reference = ws["gpus"], ws["models"], ws["files"], load_reference()
    matrix = files["matrix_h200"] + files["matrix_l4"]
    return {
        "ladder": (lambda o: figures.ladder(matrix, reference, gpus, "qwen2.5-7b", 2048, o),
                   [n for k, n in GPU_NAMES.items()]),
        "context": (lambda o: figures.context(matrix, gpus, models, o),
                    [GPU_NAMES["h200"], GPU_NAMES["l4"], *MODEL_NAMES.values()]),
        "ab": (lambda o: figures.ab(files["ab"], reference, gpus, models, o), [GPU_NAMES["h200"], GPU_NAMES["l40s"], GPU_NAMES["h100-sxm5"], MODEL_NAMES["qwen2.5-7b"]]),
        "host": (lambda o: figures.host(files["ab"], gpus, models, o), [GPU_NAMES["h200"], GPU_NAMES["l40s"], MODEL_NAMES["qwen2.5-7b"]]),
    }


def require_glyph_fonts():
    """Skip, naming the missing font, where matplotlib has no font for the names' emoji or CJK (the
    figures then draw boxes and warn); where the fonts exist, the tests that call this stay strict."""
    found = figures.fallback_fonts()
    if "Symbola" not in found:
        pytest.skip(f"no emoji font: matplotlib finds no Symbola for the 🚀 in the names {FONTS_HINT}")
    if not set(found) - {"Symbola", "Noto Sans Symbols", "Noto Sans Symbols2"}:
        pytest.skip(f"no CJK font: matplotlib finds none of {', '.join(figures.FALLBACK_FONTS[:7])} for 中文 {FONTS_HINT}")


@pytest.mark.parametrize("name", ["ladder", "context", "ab", "host"])
def test_figures_draw_display_names_as_typed(workspace, name, tmp_path, monkeypatch, caplog):
    require_glyph_fonts()
    call, expected = _figure_calls(workspace, tmp_path)[name]
    outputs = [tmp_path / f"{name}.pdf", tmp_path / f"{name}.png"]
    drawn, warned = _draw(monkeypatch, caplog, lambda: call(outputs))
    for out in outputs:
        assert out.stat().st_size > 1000
    assert not [w for w in warned if "Glyph" in w or "missing from font" in w or "findfont" in w or "math" in w.lower()], warned
    for display in expected:  # each name is drawn, verbatim, in a text that is not mathtext
        hits = [(s, is_math) for s, is_math in drawn if display in s]
        assert hits, f"{display!r} not drawn in {name}: {drawn}"
        assert not any(is_math for _, is_math in hits), hits
    # the code's own math label still is math
    if name == "ladder":
        assert any(is_math and "R_\\mathrm{floor}" in s for s, is_math in drawn)


@pytest.mark.parametrize("display", [*GPU_NAMES.values(), *MODEL_NAMES.values()])
def test_literal_keeps_mathtext_away(display):
    from matplotlib import cbook

    label = figures.literal(display)
    assert not cbook.is_math_text(label)
    assert Text(text=label)._preprocess_math(label) == (display, False)


@pytest.mark.parametrize("encoding", [OT1, T1], ids=["plain-pdflatex", "T1"])
def test_report_with_display_names_compiles(workspace, tmp_path, monkeypatch, caplog, encoding):
    """The tables and the figures of the report, with every nasty name, \\input into one document."""
    ws = workspace
    monkeypatch.chdir(tmp_path)
    reference = load_reference()
    gpus, models, files = ws["gpus"], ws["models"], ws["files"]
    table_files = []
    for gpu in ("h200", "l4"):
        out = f"report/tables/matrix_{gpu}.tex"
        tables.matrix_table(gpu, files[f"matrix_{gpu}"], ws["cells"][f"matrix_{gpu}"], gpus[gpu], models, out, f"n/{gpu}.json")
        table_files.append(out)
    tables.ab_table(files["ab"], reference, gpus, models, "report/tables/ab.tex", "n/ab.json")
    tables.published_table(files["matrix_h200"] + files["ab"], reference, gpus, models, "report/tables/published.tex", "n/p.json")
    table_files += ["report/tables/ab.tex", "report/tables/published.tex"]
    figs = []
    for name, (call, _) in _figure_calls(ws, tmp_path).items():
        call([f"report/figures/{name}.pdf", f"report/figures/{name}.png"])
        figs.append({"name": name, "path": f"report/figures/{name}.pdf", "caption": f"{name} of {MODEL_NAMES['qwen2.5-7b']} on {GPU_NAMES['h200']}"})
    tables.paper_tables(table_files, figs, "report/paper_tables.tex")

    matrix = (tmp_path / "report/tables/matrix_h200.tex").read_text()
    for display in MODEL_NAMES.values():
        assert str(escape(display)) in matrix
    assert r"{[}rocket{]} rocket-GPU" in matrix and r"{[}greek capital letter omega{]}mega-7B caf\'{e} \~{n}" in matrix
    assert r"\textbackslash{}textbf\{x\}" in matrix  # the backslash is text, not a command
    for tex in (tmp_path / "report").rglob("*.tex"):
        assert tex.read_text().isascii(), tex
    (tmp_path / "out").mkdir()
    log = _compile(tmp_path / "out", tmp_path / "report/paper_tables.tex", encoding)
    assert "Undefined control sequence" not in log and "Missing character" not in log
