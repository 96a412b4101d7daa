"""The experiments' tables: attention paths (per layer and in the whole step), weight paths, and the
floor experiment (compiled and fused steps); re-exported by decodegap.analysis.tables."""

from __future__ import annotations

from markupsafe import Markup

from decodegap.analysis.latex import NumberLog, environment, fmt
from decodegap.analysis.tables_common import (
    FEW_SESSIONS_NOTE, LANDSCAPE_CHARS, LANDSCAPE_LINES, NOT_MEASURED, PORTRAIT_CHARS, PORTRAIT_LINES, _cannot_run, _cell_id, _family_of, _no_result,
    _Notes, _reason_of, _write, arm_scope, best_arms, load_stats, paginate, place_notes, room_left, text_lines,
)
from decodegap.core.cells import OWN_KERNELS

FEW = Markup(r"\textsuperscript{$\dagger$}")


def _paper_us_per_layer(reference: list[dict], gpus: dict) -> dict[str, str]:
    """The paper's per-layer attention figures by path: 'H100 SXM5 36.05'."""
    out = {}
    for f in reference:
        if f["quantity"] == "attention_us_per_layer" and f.get("attn"):
            out[f["attn"]] = f"{fmt(f['value'], 2)} ({gpus.get(f['gpu'], {}).get('display_name', f['gpu'])})"
    return out


def _notes_after(pages, first, rest, notes: _Notes, few: bool, chars: int = PORTRAIT_CHARS):
    """The symbol lines and notes under a table's last float, and the floats of notes after it."""
    symbols = [FEW_SESSIONS_NOTE] if few else []
    room = room_left(pages, first, rest) - sum(text_lines(s, chars) for s in symbols)
    kept, note_pages = place_notes(notes.notes, room, PORTRAIT_LINES - 2, chars)
    return {"symbols": symbols, "notes_below": kept, "note_pages": note_pages}


def attention_table(stats_files, plan_cells: list[dict], reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The paper's unit per path: us per layer for one decode-shaped attention call, op by op and
    replayed from a graph, per head layout and KV length; the launch share (1 - graphed/op, from the
    paired per-session ratio); the kernel that really ran; the paper's H100 figure beside it. A path
    that cannot run has one row with its reason."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("attention")
    cells = [c for c in plan_cells if c["mode"] == "layer"]
    ctxs = sorted({c["ctx"] for c in cells})
    paper = _paper_us_per_layer(reference, gpus)
    groups, notes, any_few = [], _Notes(), False
    scope = "completed"
    for gpu_key, model in dict.fromkeys((c["gpu"], c["model"]) for c in cells):
        a = models[model]["architecture"]
        layout = (f"{a['num_hidden_layers']} layers, {a['num_attention_heads']} query / {a['num_key_value_heads']} KV heads of "
                  f"{a.get('head_dim') or a['hidden_size'] // a['num_attention_heads']}")
        rows = []
        for attn in dict.fromkeys(c["attn"] for c in cells if c["gpu"] == gpu_key and c["model"] == model):
            per_ctx, failed, kernel = [], {}, "--"
            for ctx in ctxs:
                cell = {"gpu": gpu_key, "model": model, "ctx": ctx, "attn": attn, "quant": "bf16", "mode": "layer"}
                cid = _cell_id(cell)
                s = stats.get(cid)
                arms = ((s or {}).get(scope) or {}).get("arms") or {}
                op, gr = arms.get("layer-op"), arms.get("layer-graphed")
                if s is None or s["status"] == "not measured":
                    per_ctx.append(None)
                    continue
                if not (op and gr):
                    failed[ctx] = _reason_of(s)
                    per_ctx.append("failed")
                    continue
                meta = {"cell": s["cell"], "scope": scope, "stats_file": s["_file"]}
                kernel = _family_of(gr) if kernel == "--" else kernel
                sp = (s.get(scope) or {}).get("speedup")
                share = log.num(f"launch_share/{cid}/{scope}", 1 - 1 / sp["estimate"], 2, quantity="launch_share", **meta) if sp else "--"
                few = FEW if s["n_completed"] < 2 else ""
                any_few = any_few or bool(few)
                per_ctx.append({
                    "few": few,
                    "op": log.num(f"us_per_layer/{cid}/layer-op/{scope}", op["us_per_layer"], 1, quantity="us_per_layer", arm="layer-op", **meta),
                    "graphed": log.num(f"us_per_layer/{cid}/layer-graphed/{scope}", gr["us_per_layer"], 1, quantity="us_per_layer",
                                       arm="layer-graphed", **meta),
                    "share": share,
                    "n": f"{s['n_completed']}",
                })
            row = {"path": attn, "kernel": kernel, "paper": paper.get(attn, ""), "cells": [], "reason": None}
            if failed and len(failed) == len(ctxs) and len(set(failed.values())) == 1:  # no number at all: one row, one reason
                row["reason"] = _no_result(notes, attn, failed.values())
            else:
                for ctx, c in zip(ctxs, per_ctx):
                    if c is None:
                        row["cells"].append({"op": NOT_MEASURED, "graphed": "", "share": ""})
                    elif c == "failed":
                        row["cells"].append({"op": _no_result(notes, attn, [failed[ctx]]), "graphed": "", "share": ""})
                    else:
                        c["graphed"] = Markup(f"{c['graphed']}{c.pop('few')}")
                        row["cells"].append(c)
            rows.append(row)
        groups.append({"title": f"{gpus[gpu_key]['display_name']}, {models[model]['display_name']}: {layout}", "rows": rows})
    first, rest = LANDSCAPE_LINES - 11, LANDSCAPE_LINES - 5
    pages = paginate(groups, first, rest)
    tex = environment().get_template("attention.tex.j2").render(
        pages=pages, ctxs=ctxs, ncols=3 + 3 * len(ctxs), **_notes_after(pages, first, rest, notes, any_few, LANDSCAPE_CHARS))
    _write(tex, out_tex, log, out_numbers)


def attention_step_table(stats_files, plan_cells: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The whole decode step with each attention path inside the model: static and graphed ms per
    step (both arms of one session), the launch tax between them, and the kernel that ran. A path
    that cannot run in a model at all gets one row and one note for its reason."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("attention_step")
    cells = [c for c in plan_cells if c["mode"] != "layer"]
    ctxs = sorted({c["ctx"] for c in cells})
    groups: dict[str, dict] = {}
    notes, any_few = _Notes(), False
    scope = "completed"
    for gpu_key, model, attn in dict.fromkeys((c["gpu"], c["model"], c["attn"]) for c in cells):
        row = {"model": models[model]["display_name"], "path": attn, "cells": [], "kernel": "--", "reason": None}
        failed = {}
        for ctx in ctxs:
            # static and graphed from the cells of this ctx: one A/B cell (both arms, paired) or single-mode cells
            found, tax, reasons, measured, few = {}, "--", [], False, ""
            for c in (c for c in cells if (c["gpu"], c["model"], c["attn"], c["ctx"]) == (gpu_key, model, attn, ctx)):
                cid = _cell_id(c)
                s = stats.get(cid)
                if s is None or s["status"] == "not measured":
                    continue
                measured = True
                sc = s.get(scope) or {}
                if not sc.get("arms"):
                    reasons.append(_reason_of(s))
                    continue
                meta = {"cell": s["cell"], "scope": scope, "stats_file": s["_file"]}
                few = FEW if s["n_completed"] < 2 else few
                for arm in ("static", "graphed"):
                    a = sc["arms"].get(arm)
                    if a and arm not in found:
                        found[arm] = log.num(f"ms_per_step/{cid}/{arm}/{scope}", a["median_ms"], 2, quantity="ms_per_step", arm=arm, **meta)
                        row["kernel"] = _family_of(a) if row["kernel"] == "--" else row["kernel"]
                if sc.get("speedup") and tax == "--":
                    tax = log.num(f"speedup/{cid}/{scope}", sc["speedup"]["estimate"], 2, quantity="speedup", **meta)
            if not measured:
                row["cells"].append({"static": NOT_MEASURED, "graphed": "", "tax": ""})
            elif not found:
                failed[ctx] = "; ".join(dict.fromkeys(reasons))
                row["cells"].append({"static": _no_result(notes, attn, reasons), "graphed": "", "tax": ""})
            else:
                any_few = any_few or bool(few)
                graphed = found.get("graphed", "--")
                row["cells"].append({"static": found.get("static", "--"), "graphed": Markup(f"{graphed}{few}"), "tax": tax})
        if len(failed) == len(ctxs) and len(set(failed.values())) == 1 and _cannot_run(failed.values()):
            row["reason"] = _no_result(notes, attn, failed.values())
        groups.setdefault(gpu_key, {"title": gpus[gpu_key]["display_name"], "rows": []})["rows"].append(row)
    first, rest = PORTRAIT_LINES - 10, PORTRAIT_LINES - 5
    pages = paginate(list(groups.values()), first, rest)
    tex = environment().get_template("attention_step.tex.j2").render(
        pages=pages, ctxs=ctxs, ncols=3 + 3 * len(ctxs), **_notes_after(pages, first, rest, notes, any_few))
    _write(tex, out_tex, log, out_numbers)


def quant_numbers(quant: dict, bf16: dict, arm: str) -> dict:
    """A weight path against bf16 in one arm (cell statistics of the same GPU, model, ctx, attention
    path and mode): the speedup (ratio of the two cells' medians: separate sessions, so no paired
    interval), the ideal speedup if the step were its traffic, (W_bf16 + K) / (W_q + K), and the
    gain realised, (speedup - 1) / (ideal - 1): the share of the ideal's gain the path delivers, 0
    when it gains nothing, negative when it is slower than bf16 (speedup / ideal would call a path
    that loses time "realised 0.36")."""
    q, b = quant["completed"]["arms"][arm], bf16["completed"]["arms"][arm]
    speedup = b["median_ms"] / q["median_ms"]
    ideal = (b["weight_bytes"] + b["kv_bytes"]) / (q["weight_bytes"] + q["kv_bytes"])
    return {"speedup_over_bf16": speedup, "ideal_speedup": ideal, "gain_realised": (speedup - 1) / (ideal - 1) if ideal != 1 else None}


def _paper_quant(reference: list[dict], gpus: dict) -> dict[str, str]:
    """The paper's ms/step per weight path (its L4 comparison): 'bnb-nf4' -> '59.36 (L4)'."""
    out = {}
    for f in reference:
        if f["quantity"] == "ms_per_step" and f.get("quant") and f.get("gpu") == "l4" and f.get("model") is None:
            out[f["quant"]] = f"{fmt(f['value'], 2)} ({gpus.get(f['gpu'], {}).get('display_name', f['gpu'])})"
    return out


def quantization_table(stats_files, plan_cells: list[dict], reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The weight-path matrix: ms per step per path (static and graphed), the bytes each stores, its
    graphed speedup over bf16 beside the ideal (W_bf16 + K) / (W_q + K) and the gain realised, the
    paper's L4 figure. A path that cannot run has its reason."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("quantization")
    paper = _paper_quant(reference, gpus)
    groups, notes, scope, any_few = [], _Notes(), "completed", False
    keys = list(dict.fromkeys((c["gpu"], c["model"], c["ctx"], c["attn"], c["mode"]) for c in plan_cells))
    for i, (gpu_key, model, ctx, attn, mode) in enumerate(keys):
        cells = [c for c in plan_cells if (c["gpu"], c["model"], c["ctx"], c["attn"], c["mode"]) == (gpu_key, model, ctx, attn, mode)]
        base = stats.get(_cell_id({**cells[0], "quant": "bf16"}))
        base_ok = base is not None and ((base.get(scope) or {}).get("arms") or {}).get("graphed")
        rows = []
        for c in cells:
            cid = _cell_id(c)
            s = stats.get(cid)
            row = {"path": c["quant"],
                   "paper": paper.get(c["quant"], "") if i == 0 else "", "reason": None}  # the paper's figures once, in the first group
            if s is None or s["status"] == "not measured":
                row["reason"] = NOT_MEASURED
                rows.append(row)
                continue
            arms = (s.get(scope) or {}).get("arms") or {}
            if not arms.get("graphed"):
                row["reason"] = _no_result(notes, c["quant"], [_reason_of(s)])
                rows.append(row)
                continue
            meta = {"cell": s["cell"], "scope": scope, "stats_file": s["_file"]}
            few = FEW if s["n_completed"] < 2 else ""
            any_few = any_few or bool(few)
            g = arms["graphed"]
            row.update(
                static=log.num(f"ms_per_step/{cid}/static/{scope}", (arms.get("static") or {}).get("median_ms"), 2, quantity="ms_per_step", arm="static", **meta),
                graphed=Markup(f"{log.num(f'ms_per_step/{cid}/graphed/{scope}', g['median_ms'], 2, quantity='ms_per_step', arm='graphed', **meta)}{few}"),
                w_gb=fmt(g["weight_bytes"] / 1e9, 2),
                r_floor=log.num(f"r_floor/{cid}/graphed/{scope}", g["r_floor"], 2, quantity="r_floor", arm="graphed", **meta),
                speedup_over_bf16="--", ideal_speedup="--", gain_realised="--")
            if base_ok and c["quant"] != "bf16":
                inputs = {"quant": meta, "bf16": {"cell": base["cell"], "scope": scope, "stats_file": base["_file"]}}
                for name, value in quant_numbers(s, base, "graphed").items():
                    row[name] = log.num(f"{name}/{cid}/graphed/{scope}", value, 2, quantity=f"quant:{name}", arm="graphed", inputs=inputs, **meta)
            rows.append(row)
        groups.append({"title": f"{gpus[gpu_key]['display_name']}, {models[model]['display_name']}, ctx {ctx}", "attn": attn, "rows": rows})
    first, rest = PORTRAIT_LINES - 15, PORTRAIT_LINES - 5
    pages = paginate(groups, first, rest)
    tex = environment().get_template("quantization.tex.j2").render(pages=pages, **_notes_after(pages, first, rest, notes, any_few))
    _write(tex, out_tex, log, out_numbers)


BEYOND_ARMS = ("graphed", "compiled", "fused")  # the floor table's rows per weight path, the paper's best first


def code_versions(stats: dict, arm_stats: dict) -> dict[str, list[float]]:
    """An arm's session medians by the version of the measured code (its sources' hash, first 8
    characters): a cell whose sessions span kernel changes says what each version gave."""
    by_session = {str(s["session"]): (s.get("sources_sha256") or "unknown")[:8] for s in stats["sessions"]}
    out: dict[str, list[float]] = {}
    for sid, ms in (arm_stats.get("session_ms") or {}).items():
        out.setdefault(by_session.get(sid, "unknown"), []).append(ms)
    return out


def versions_text(versions: dict[str, list[float]]) -> str:
    """'sessions of 2 versions of the measured code (sources hash): 5ae125a1 4.51 ms (1 session); ... (per version, the median of its sessions' medians)'."""
    import statistics

    parts = [f"{v} {statistics.median(ms):.2f} ms ({len(ms)} session{'s' if len(ms) > 1 else ''})" for v, ms in versions.items()]
    return (f"sessions of {len(versions)} versions of the measured code (sources hash): " + "; ".join(parts)
            + " (per version, the median of its sessions' medians)")


def over_bf16_graphed(cell: dict, arm: str, bf16: dict, bf16_arm: str = "graphed", scope: str = "completed") -> float:
    """A mode's step (from the cell's `scope`) against the bf16 graphed step of the same GPU, model and
    context (completed): the ratio of two medians (separate cells, or two arms of one; no paired
    interval across cells)."""
    return bf16["completed"]["arms"][bf16_arm]["median_ms"] / cell[scope]["arms"][arm]["median_ms"]


def floor_table(stats_files, plan_cells: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """Beyond the paper: how close to the memory floor the step gets. Per GPU, model and context,
    per weight path: the graphed transformers step, the same step compiled, and decodegap's fused
    step, each as an arm of an A/B session against graphed (ab-graphed-compiled, ab-graphed-fused):
    ms/step, R_floor, kernels and GPU busy ms per step, compile seconds, the paired speedup over the
    session's own graphed arm, and the speedup over the bf16 graphed step. One float per GPU and model."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("floor")
    groups, notes, scope, any_few = [], _Notes(), "completed", False
    for gpu_key, model, ctx, attn in dict.fromkeys((c["gpu"], c["model"], c["ctx"], c["attn"]) for c in plan_cells):
        cells = [c for c in plan_cells if (c["gpu"], c["model"], c["ctx"], c["attn"]) == (gpu_key, model, ctx, attn)]
        by_arm = best_arms(cells, stats, scope)  # (quant, arm) -> (stats, cell id) with the most sessions of that arm
        base = by_arm.get(("bf16", "graphed"))
        rows = []
        for quant in dict.fromkeys(c["quant"] for c in cells):
            for arm in BEYOND_ARMS:
                row = {"path": quant, "mode": arm, "reason": None}
                hit = by_arm.get((quant, arm))
                if hit is None:
                    mine = [stats.get(_cell_id(c)) for c in cells if c["quant"] == quant and arm in c["mode"].split("-")[1:]]
                    if arm == "graphed" or not mine or all(s is None or s["status"] == "not measured" for s in mine):
                        row["reason"] = NOT_MEASURED
                    else:
                        row["reason"] = _no_result(notes, f"{quant} {arm}", [_reason_of(s) for s in mine if s])
                    rows.append(row)
                    continue
                s, cid = hit
                sc = arm_scope(s, arm, scope)  # the fused step: its newest code's sessions, where the cell spans versions
                a = s[sc]["arms"][arm]
                meta = {"cell": s["cell"], "scope": sc, "stats_file": s["_file"], "arm": arm}
                few = FEW if a["n_sessions"] < 2 else ""
                any_few = any_few or bool(few)
                an = a.get("anatomy") or {}
                interval = ""
                if a.get("ci_low_ms") is not None and arm != "graphed":  # the levers' steps with their 95 % interval over machines
                    interval = Markup(f" [{log.num(f'ms_per_step_ci_low/{cid}/{arm}/{sc}', a['ci_low_ms'], 2, quantity='ms_per_step_ci_low', **meta)}, "
                                      f"{log.num(f'ms_per_step_ci_high/{cid}/{arm}/{sc}', a['ci_high_ms'], 2, quantity='ms_per_step_ci_high', **meta)}]")
                versions = code_versions(s, s[scope]["arms"][arm]) if arm in OWN_KERNELS else {}
                if len(versions) > 1:  # decodegap's own kernels in several versions in one cell: say what each gave
                    head = (f"the {a['n_sessions']} sessions of the newest code with two or more ({s[sc]['sources_sha256'][:8]}) as the headline; "
                            if sc != scope else "all of them in the headline; ")
                    interval += Markup(rf"\textsuperscript{{{notes.mark(f'{quant} {arm}, ' + head + versions_text(versions))}}}")
                streamed = a.get("streamed_Bps")
                row.update(
                    ms=Markup(f"{log.num(f'ms_per_step/{cid}/{arm}/{sc}', a['median_ms'], 2, quantity='ms_per_step', **meta)}{few}{interval}"),
                    tbps=log.num(f"streamed_TBps/{cid}/{arm}/{sc}", streamed * 1e-12, 2, quantity="streamed_Bps", scale=1e-12, **meta)
                    if streamed else "--",
                    of_copy=log.num(f"streamed_over_copy/{cid}/{arm}/{sc}", a["streamed_over_copy"] * 100, 0, quantity="streamed_over_copy",
                                    scale=100.0, **meta) if a.get("streamed_over_copy") else "--",
                    r_floor=log.num(f"r_floor/{cid}/{arm}/{sc}", a["r_floor"], 2, quantity="r_floor", **meta),
                    kernels=log.num(f"kernels_per_step/{cid}/{arm}/{sc}", an.get("kernels_per_step"), 0, quantity="kernels_per_step", **meta),
                    busy=log.num(f"gpu_busy_ms_per_step/{cid}/{arm}/{sc}", an.get("gpu_busy_ms_per_step"), 2, quantity="gpu_busy_ms_per_step", **meta),
                    compile_s=log.num(f"compile_s/{cid}/{arm}/{sc}", a.get("compile_s"), 0, quantity="compile_s", **meta),
                    paired="--", over_bf16="--")
                sp = s[sc].get("speedup") or {}
                if arm != "graphed" and sp.get("of") == arm and sp.get("estimate") is not None:
                    row["paired"] = log.num(f"speedup/{cid}/{sc}", sp["estimate"], 2, quantity="speedup", cell=s["cell"], scope=sc,
                                            stats_file=s["_file"])
                if base is not None and not (quant == "bf16" and arm == "graphed"):
                    b = base[0]
                    inputs = {"cell": {k: meta[k] for k in ("cell", "scope", "stats_file")}, "bf16": {"cell": b["cell"], "scope": scope, "stats_file": b["_file"]}}
                    row["over_bf16"] = log.num(f"over_bf16_graphed/{cid}/{arm}/{sc}", over_bf16_graphed(s, arm, b, scope=sc), 2,
                                               quantity="floor:over_bf16_graphed", inputs=inputs, bf16_arm="graphed", **meta)
                rows.append(row)
        who = f"{gpus[gpu_key]['display_name']}, {models[model]['display_name']}"
        groups.append({"title": f"{who}, ctx {ctx}", "attn": attn, "rows": rows, "who": who,
                       "break": bool(groups) and groups[-1]["who"] != who})
    # on its side: eleven columns are wider than a portrait page at \footnotesize (the caption takes ~12 lines)
    first, rest = LANDSCAPE_LINES - 14, LANDSCAPE_LINES - 4
    pages = paginate(groups, first, rest)
    tex = environment().get_template("floor.tex.j2").render(pages=pages, **_notes_after(pages, first, rest, notes, any_few, LANDSCAPE_CHARS))
    _write(tex, out_tex, log, out_numbers)
