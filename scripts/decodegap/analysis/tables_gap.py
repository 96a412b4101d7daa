"""Where the fused step's remaining time goes, per cell (re-exported by decodegap.analysis.tables).

The floor experiment's fused arms, taken apart from their own sessions' untimed profiler pass: the
GEMVs' time beside what they would take at the device copy bandwidth measured in the same sessions
(the weights they read as stored, the input embedding table but one row left out), attention's
time beside the KV cache at that bandwidth, the other kernels (GPU busy time less GEMVs and
attention), and what is left of the step outside the GPU's busy time (launch gaps, the token's
read-back)."""

from __future__ import annotations

from decodegap.analysis.latex import NumberLog, environment
from decodegap.analysis.tables_common import LANDSCAPE_LINES, _cell_id, _write, arm_scope, load_stats, paginate

SCOPE, ARM = "completed", "fused"


def gap_parts(a: dict) -> dict | None:
    """The parts of one fused arm's step in ms (None without a profiler pass that classed its kernels)."""
    an = a.get("anatomy") or {}
    k = an.get("kernel_ms_per_step")
    busy = an.get("gpu_busy_ms_per_step")
    copy = a.get("copy_bandwidth_Bps")
    if not k or busy is None or not copy:
        return None
    parts = {"step": a["median_ms"], "gemv": k["gemv"], "gemv_at_copy": a["weight_bytes_no_embedding"] / copy * 1e3,
             "attention": k["attention"], "attention_at_copy": a["kv_bytes"] / copy * 1e3,
             "other": busy - k["gemv"] - k["attention"], "outside": a["median_ms"] - busy}
    if an.get("kernels_overlap"):  # overlapped kernels without their exclusive times (stats.kernels_overlap) split nothing
        parts.update(gemv=None, attention=None, other=None)
    return parts


def gap_table(stats_files, plan_cells: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """A row per fused cell (GPU, model, ctx, weight path): ms/step, TB/s streamed, and the step's
    parts (gap_parts), each with its provenance key."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("gap")
    groups: dict[tuple, dict] = {}
    for c in plan_cells:
        if "fused" not in c["mode"].split("-")[1:]:
            continue
        s = stats.get(_cell_id(c))
        sc = arm_scope(s, ARM, SCOPE) if s else SCOPE  # the newest code's sessions, where the cell spans versions
        a = (((s or {}).get(sc) or {}).get("arms") or {}).get(ARM)
        parts = gap_parts(a) if a else None
        if parts is None:
            continue
        cid = _cell_id(c)
        meta = {"cell": s["cell"], "arm": ARM, "scope": sc, "stats_file": s["_file"]}
        row = {"path": c["quant"], "ctx": c["ctx"],
               "ms": log.num(f"ms_per_step/{cid}/{sc}", parts["step"], 2, quantity="ms_per_step", **meta),
               "tbps": log.num(f"streamed_TBps/{cid}/{sc}", a["streamed_Bps"] * 1e-12, 2, quantity="streamed_Bps", scale=1e-12, **meta)}
        for part in ("gemv", "gemv_at_copy", "attention", "attention_at_copy", "other", "outside"):
            row[part] = log.num(f"{part}_ms/{cid}/{sc}", parts[part], 3, quantity=f"gap:{part}", **meta)
        title = f"{gpus[c['gpu']]['display_name']}, {models[c['model']]['display_name']}"
        groups.setdefault((c["gpu"], c["model"]), {"title": title, "rows": []})["rows"].append(row)
    for g in groups.values():
        g["rows"].sort(key=lambda r: (r["ctx"], r["path"]))
    pages = paginate(list(groups.values()), LANDSCAPE_LINES - 10, LANDSCAPE_LINES - 6)
    tex = environment().get_template("gap.tex.j2").render(pages=pages)
    _write(tex, out_tex, log, out_numbers)
