"""Engines at batch 1 (re-exported by decodegap.analysis.tables): for each GPU, model and context of
the engines experiment, every way of running the decode step the project measures, side by side:
transformers' step replayed from a CUDA graph, transformers' own `generate` loop with a static cache
(its documented fast path, mode generate), the transformers step under torch.compile, llama.cpp on
the card's GGUF file per format (mode llamacpp), and decodegap's fused step per weight path. Each row is one arm of the cell that has the most completed
sessions of it (the graphed, compiled and fused arms come from the floor experiment's A/B cells)."""

from __future__ import annotations

from markupsafe import Markup

from decodegap.analysis.latex import NumberLog, environment
from decodegap.analysis.tables_common import NOT_MEASURED, PORTRAIT_LINES, _cell_id, _write, arm_scope, best_arms, load_stats, paginate
from decodegap.core.cells import OWN_MODEL, arms_of

SCOPE = "completed"
FEW = Markup(r"\textsuperscript{$\dagger$}")
# (engine as the table names it, the arm that runs it); the fused step gets a row per weight path
# (short: the table sits in a portrait column beside an interval per row; the caption says what each is)
ENGINES = (("transformers graphed", "graphed"), ("transformers \\texttt{generate}", "generate"),
           ("transformers compiled", "compiled"), ("llama.cpp", "llamacpp"), ("decodegap fused", "fused"))
PER_PATH = ("fused",) + OWN_MODEL  # arms with a row per weight path or file format (the others: bf16)


def engine_paths(cells: list[dict], arm: str) -> list[str]:
    """The weight paths (or an engine's file formats) an arm gets a row for in one group of cells."""
    if arm not in PER_PATH:
        return ["bf16"]
    return list(dict.fromkeys(c["quant"] for c in cells if arm in arms_of(c["mode"])))


def engines_table(stats_files, plan_cells: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """A group of rows per GPU, model and context: each engine's ms/step with its 95 % interval over
    machines, R_floor, the bytes it streams per second and their share of the copy bandwidth."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("engines")
    groups, any_few = [], False
    for gpu, model, ctx in dict.fromkeys((c["gpu"], c["model"], c["ctx"]) for c in plan_cells):
        cells = [c for c in plan_cells if (c["gpu"], c["model"], c["ctx"]) == (gpu, model, ctx)]
        best = best_arms(cells, stats, SCOPE)
        rows = []
        for engine, arm in ENGINES:
            planned = [c for c in cells if arm in arms_of(c["mode"])]
            if not planned:
                continue  # not part of this configuration
            for quant in engine_paths(cells, arm):
                row = {"engine": Markup(engine), "path": quant}
                hit = best.get((quant, arm))
                if hit is None:
                    rows.append({**row, "reason": NOT_MEASURED})
                    continue
                s, cid = hit
                sc = arm_scope(s, arm, SCOPE)  # the fused step: its newest code's sessions, where the cell spans versions
                a = s[sc]["arms"][arm]
                meta = {"cell": s["cell"], "scope": sc, "stats_file": s["_file"], "arm": arm}
                few = FEW if a["n_sessions"] < 2 or a.get("ci_low_ms") is None else ""
                any_few = any_few or bool(few)
                ms = log.num(f"ms_per_step/{cid}/{arm}/{sc}", a["median_ms"], 2, quantity="ms_per_step", **meta)
                if a.get("ci_low_ms") is not None:
                    ms = Markup(f"{ms} [{log.num(f'ms_per_step_ci_low/{cid}/{arm}/{sc}', a['ci_low_ms'], 2, quantity='ms_per_step_ci_low', **meta)}, "
                                f"{log.num(f'ms_per_step_ci_high/{cid}/{arm}/{sc}', a['ci_high_ms'], 2, quantity='ms_per_step_ci_high', **meta)}]")
                streamed = a.get("streamed_Bps")
                rows.append({**row, "reason": None, "ms": Markup(f"{ms}{few}"),
                             "r_floor": log.num(f"r_floor/{cid}/{arm}/{sc}", a["r_floor"], 2, quantity="r_floor", **meta),
                             "tbps": log.num(f"streamed_TBps/{cid}/{arm}/{sc}", streamed * 1e-12, 2, quantity="streamed_Bps",
                                             scale=1e-12, **meta) if streamed else "--",
                             "of_copy": log.num(f"streamed_over_copy/{cid}/{arm}/{sc}", a["streamed_over_copy"] * 100, 0,
                                                quantity="streamed_over_copy", scale=100.0, **meta) if a.get("streamed_over_copy") else "--"})
        groups.append({"title": f"{gpus[gpu]['display_name']}, {models[model]['display_name']}, ctx {ctx}", "rows": rows})
    pages = paginate(groups, PORTRAIT_LINES - 16, PORTRAIT_LINES - 4)
    tex = environment().get_template("engines.tex.j2").render(pages=pages, any_few=any_few)
    _write(tex, out_tex, log, out_numbers)
