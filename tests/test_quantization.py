"""The weight-path experiment's cells, table and figure on fixture records: the speedup over bf16, the
ideal speedup from the bytes each path stores, and a path that cannot run as its reason."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from decodegap.core.config import load_gpus, load_models


def _workspace(tmp_path):
    from conftest import fixture_cell_stats, fixture_models

    from decodegap.analysis import synthetic

    gpus = {k: vars(v) for k, v in load_gpus().items()}
    w_bf16 = load_models()["qwen2.5-7b"].param_count() * 2
    # bf16 at 8 ms; int4 storing a third of W at 5 ms; bnb-nf4 missing its package
    setups = {"bf16": (8.0, None), "int4-tinygemm": (5.0, w_bf16 // 3), "bnb-nf4": None}
    cells, files = [], []
    for quant, setup in setups.items():
        cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant=quant, mode="ab-static-graphed")
        cells.append(cell)
        records = [synthetic.not_possible_record(cell, s, "package not installed: `import bitsandbytes` fails") if setup is None
                   else synthetic.record(cell, s, 64, np.random.default_rng([s, len(quant)]), base_ms=setup[0], weight_bytes=setup[1])
                   for s in range(2)]
        files.append(fixture_cell_stats(tmp_path, cell, records))
    return cells, files, gpus, fixture_models()

def test_the_quantization_table_gives_speedup_ideal_and_reason(tmp_path):
    from decodegap.analysis import provenance, tables
    from decodegap.analysis.reference import load_reference

    cells, files, gpus, models = _workspace(tmp_path)
    tables.quantization_table(files, cells, load_reference(), gpus, models, tmp_path / "q.tex", tmp_path / "q.json")
    tex, numbers = (tmp_path / "q.tex").read_text(), json.loads((tmp_path / "q.json").read_text())
    bf16, int4 = (json.loads(f.read_text())["completed"]["arms"]["graphed"] for f in files[:2])
    key = "quantization/speedup_over_bf16/h200/qwen2.5-7b/ctx2048/sdpa_int4-tinygemm_ab-static-graphed/graphed/completed"
    assert numbers[key]["value"] == pytest.approx(bf16["median_ms"] / int4["median_ms"]) and 1.5 < numbers[key]["value"] < 1.7
    ideal = numbers[key.replace("speedup_over_bf16", "ideal_speedup")]["value"]
    assert ideal == pytest.approx((bf16["weight_bytes"] + bf16["kv_bytes"]) / (int4["weight_bytes"] + int4["kv_bytes"]))
    assert 2.5 < ideal < 3.0  # a third of W, plus the same KV
    gain = numbers[key.replace("speedup_over_bf16", "gain_realised")]["value"]
    assert gain == pytest.approx((numbers[key]["value"] - 1) / (ideal - 1))  # 0: no gain; < 0: slower than bf16
    from decodegap.analysis.tables_experiments import quant_numbers

    slower = {"completed": {"arms": {"graphed": dict(int4, median_ms=bf16["median_ms"] * 1.02)}}}
    assert quant_numbers(slower, {"completed": {"arms": {"graphed": bf16}}}, "graphed")["gain_realised"] < 0
    assert r"\texttt{bnb-nf4} & \multicolumn{7}{l}{cannot run\textsuperscript{a}}" in tex
    assert "bnb-nf4: not possible: package not installed: `import bitsandbytes` fails" in tex
    assert "62.32 (L4)" in tex and "59.36 (L4)" in tex  # the paper's L4 figures beside ours
    # the derived number recomputes from both cells' raw sessions
    entry = {**numbers[key], "digits": 2}
    value, text = provenance.recompute(entry)
    assert value == pytest.approx(numbers[key]["value"]) and text == numbers[key]["text"]
    if shutil.which("pdflatex"):
        doc = tmp_path / "doc.tex"
        doc.write_text("\\documentclass{article}\\usepackage{booktabs,graphicx}\\begin{document}\\input{q.tex}\\end{document}\n")
        proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:]


def test_the_quantization_figure_draws_measured_against_ideal(tmp_path):
    from decodegap.analysis import figures

    cells, files, gpus, models = _workspace(tmp_path)
    out = [tmp_path / "q.pdf", tmp_path / "q.png"]
    figures.quantization(files, gpus, models, out)
    assert all(p.stat().st_size > 1000 for p in out)


def test_the_plan_has_a_cell_per_path_and_group_and_shares_bf16_cells(tmp_path):
    from conftest import small_config

    from decodegap.core.cells import Plan

    config = small_config()
    config["quantization"] = {"gpus": ["h200"], "paths": ["bf16", "int4-tinygemm"], "attn": "sdpa",
                              "cells": [{"models": ["qwen2.5-7b", "llama-3.1-8b"], "ctx": [2048]}, {"models": ["qwen2.5-7b"], "ctx": [16384]}],
                              "modes": ["ab-static-graphed"], "sessions": 3}
    plan = Plan(config, root=tmp_path)
    got = {(c.model, c.ctx, c.quant) for c in plan.quantization}
    assert got == {(m, c, q) for q in ("bf16", "int4-tinygemm") for m, c in
                   (("qwen2.5-7b", 2048), ("llama-3.1-8b", 2048), ("qwen2.5-7b", 16384))}
    assert all(plan.wanted[c] == 3 for c in plan.quantization)
    assert plan.cell_set("quantization") == plan.quantization and "int4-tinygemm" in plan.environment_paths("h200")[1]


def test_the_batch_runner_takes_several_weight_paths_first_sessions_first():
    from argparse import Namespace

    from decodegap.measure.batch import planned

    cells = planned(Namespace(gpu="h200", models=["qwen2.5-7b"], ctx=[2048], modes=["ab-static-graphed"], sessions=[0, 1],
                              attn=["sdpa"], quant=["bf16", "bnb-nf4"]))
    assert [(c["session"], c["quant"]) for c in cells] == [(0, "bf16"), (0, "bnb-nf4"), (1, "bf16"), (1, "bnb-nf4")]
