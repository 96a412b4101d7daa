"""The paper's own tables: the per-GPU cell matrix, the A/B experiments, R_floor in three forms, the
published figures beside ours, and the cost per token (re-exported by decodegap.analysis.tables)."""

from __future__ import annotations

import re

from markupsafe import Markup

from decodegap.analysis.latex import NumberLog, environment, escape, fmt
from decodegap.analysis.reference import COMPARABLE, candidates, reproduced
from decodegap.analysis.tables_common import (
    BELOW_FLOOR_MARK, BELOW_FLOOR_NOTE, LANDSCAPE_CHARS, LANDSCAPE_LINES, NOT_MEASURED, PORTRAIT_LINES, SCOPE_LABEL, SCOPES, _cell_id, _ci_text,
    _Notes, _write, below_floor, load_stats, measured_gpus, no_session_reason, paginate, place_notes, room_left, text_lines,
)

_LIMIT_RE = re.compile(r" \(limit ([^)]*)\)$")


def _sessions_on(n: int, m: int) -> str:
    return f"{n} session{'s' if n != 1 else ''} on {m} machine{'s' if m != 1 else ''}"


def _stability_limit(stats: list[dict]) -> str | None:
    """The stability rule's limit when every unstable session of these cells names the same one: it is
    then said once above the notes, not after each session."""
    limits = {m.group(1) for s in stats for r in s.get("invalid_reasons", []) for part in r.split("; ")
              if (m := _LIMIT_RE.search(part))}
    return next(iter(limits)) if len(limits) == 1 else None


def _session_reasons(s: dict, limit: str | None) -> str:
    """A cell's session reasons, the common '(limit x)' left out."""
    out = []
    for r in s.get("invalid_reasons", []):
        out.append("; ".join(_LIMIT_RE.sub("", part) if limit else part for part in r.split("; ")))
    return "; ".join(out)


def matrix_table(gpu_key: str, stats_files, plan_cells: list[dict], gpu: dict, models: dict, out_tex, out_numbers) -> None:
    """A row per model, context and mode; every configured cell appears, unmeasured ones as such (a GPU
    without any session: one row saying so). Each cell: the completed scope (stats.py), its interval
    over machines (marked where it reaches below the memory floor), and notes on what it rests on."""
    stats_list = load_stats(stats_files)
    stats = {_cell_id(s["cell"]): s for s in stats_list}
    log = NumberLog(f"matrix_{gpu_key}")
    modes = list(dict.fromkeys(c["mode"] for c in plan_cells))
    notes, groups, n_measured, below = _Notes(), [], 0, False
    limit = _stability_limit(stats_list)
    scope = "completed"
    row_keys = list(dict.fromkeys((c["model"], c["ctx"], c["attn"], c["quant"]) for c in plan_cells))
    has_sessions = gpu_key in measured_gpus(stats_list)
    for model, ctx, attn, quant in row_keys if has_sessions else []:
        rows = []
        for i, mode in enumerate(modes):
            cid = _cell_id({"gpu": gpu_key, "model": model, "ctx": ctx, "attn": attn, "quant": quant, "mode": mode})
            s = stats.get(cid)
            a = ((s or {}).get(scope) or {}).get("arms", {}).get(mode)
            row = {"model": models[model]["display_name"] if i == 0 else "", "ctx": ctx if i == 0 else "", "mode": mode,
                   "ms": NOT_MEASURED, "ci": "", "hn": "", "r": "", "tps": "", "lines": 1.3 if i == 0 else 1}
            rows.append(row)
            if s is None or not a:
                if s is not None and s["status"] != "not measured":
                    mark = notes.mark("no completed session: " + _session_reasons(s, limit))
                    row["ms"] = Markup(rf"failed\textsuperscript{{{mark}}}")
                continue
            n_measured += 1
            meta = {"cell": s["cell"], "arm": mode, "scope": scope, "stats_file": s["_file"]}
            row["r"] = log.num(f"r_floor/{cid}/{scope}", a["r_floor"], 3, quantity="r_floor", **meta)
            row["tps"] = log.num(f"tokens_per_s/{cid}/{scope}", a["tokens_per_s"], 1, quantity="tokens_per_s", **meta)
            row["ms"] = log.num(f"ms_per_step/{cid}/{scope}", a["median_ms"], 2, quantity="ms_per_step", **meta)
            if a.get("ci_low_ms") is None:
                row["ci"] = f"none ({a['no_ci_reason']})" if a.get("no_ci_reason") else "--"
            else:
                lo = log.num(f"ms_per_step_ci_low/{cid}/{scope}", a["ci_low_ms"], 2, quantity="ms_per_step_ci_low", **meta)
                hi = log.num(f"ms_per_step_ci_high/{cid}/{scope}", a["ci_high_ms"], 2, quantity="ms_per_step_ci_high", **meta)
                row["ci"] = Markup(f"[{lo}, {hi}]")
                if below_floor(a["ci_low_ms"], a):
                    row["ci"], below = row["ci"] + BELOW_FLOOR_MARK, True
            if s["n_valid"] < s["n_completed"]:  # the stability rule would drop some: say how many, not which way
                mark = notes.mark(f"{_sessions_on(a['n_sessions'], a['n_machines'])}; {s['n_valid']} of {s['n_completed']} "
                                  f"within the stability rule; outside it: {_session_reasons(s, limit)}")
                row["ms"] = Markup(rf"{row['ms']}\textsuperscript{{{mark}}}")
            row["hn"] = _host_nominal(log, s, mode, cid) or "--"
        groups.append({"title": None, "rows": rows, "new_model": not groups or groups[-1]["model"] != model, "model": model})
    first, rest = PORTRAIT_LINES - 13, PORTRAIT_LINES - 6  # under the caption, under "continued"; the header
    pages = paginate(groups, first, rest)
    symbols = [BELOW_FLOOR_NOTE] if below else []
    if notes.notes and limit:
        symbols.append(escape(f"Unstable: a session whose step stdev exceeds {limit} of its mean (the protocol's stability rule)."))
    kept, note_pages = place_notes(notes.notes, room_left(pages, first, rest) - sum(text_lines(s) for s in symbols), PORTRAIT_LINES - 2)
    b_peak = Markup(rf"{gpu['b_peak_Bps'] / 1e9:.0f}\,GB/s")
    tex = environment().get_template("matrix.tex.j2").render(
        gpu_name=gpu["display_name"], gpu_key=gpu_key, pages=pages, symbols=symbols, notes_below=kept, note_pages=note_pages,
        n_measured=n_measured, n_cells=len(row_keys) * len(modes), b_peak=b_peak,
        not_measured=None if has_sessions else no_session_reason(gpu["display_name"], "matrix"),
    )
    _write(tex, out_tex, log, out_numbers)


def _host_nominal(log: NumberLog, s: dict, arm: str, cid: str) -> Markup | str:
    """An op-by-op cell's median over host-nominal steps (stats.py); '' for others."""
    a = ((s.get("host_nominal") or {}).get("arms") or {}).get(arm)
    if arm not in ("eager", "static") or not a:
        return ""
    meta = {"cell": s["cell"], "arm": arm, "scope": "host_nominal", "stats_file": s["_file"]}
    return log.num(f"ms_per_step/{cid}/host_nominal", a["median_ms"], 2, quantity="ms_per_step", **meta)


def not_reproduced_reason(figure: dict, note: str, stats: list[dict], gpus: dict, cells: str) -> str:
    """Why a published figure has no reproduced value: a GPU without any session of the `cells` read (its
    sessions of other experiments do not count), a GPU with some of them but not the figure's cell, or a
    cell whose sessions did not complete."""
    if note != NOT_MEASURED:
        return note
    name = gpus.get(figure["gpu"], {}).get("display_name", figure["gpu"])
    if figure["gpu"] not in measured_gpus(stats):
        return no_session_reason(name, cells)
    found = [s for s in candidates(figure, stats) if s.get("n_sessions", 0) > 0]
    if found:
        n = sum(s["n_sessions"] for s in found)
        return f"{NOT_MEASURED}: the matching {name} cell has {n} session{'s' if n != 1 else ''}, none completed"
    said = ", ".join(f"{k} {figure[k]}" for k in ("model", "ctx", "quant", "mode") if figure.get(k) is not None)
    return f"{NOT_MEASURED}: {name} has sessions of {cells} cells, but none of a cell with {said or 'these fields'}"


def ab_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    stats = load_stats(stats_files)
    log = NumberLog("ab")
    groups = []
    for s in stats:
        cid = _cell_id(s["cell"])
        arms = s["arms"]
        rows = []
        for scope in SCOPES:
            sc = s.get(scope) or {}
            sp = sc.get("speedup")
            if not sp:
                continue
            meta = {"cell": s["cell"], "scope": scope, "stats_file": s["_file"]}
            a, b = sc["arms"][arms[0]], sc["arms"][arms[1]]
            rows.append({
                "scope": SCOPE_LABEL[scope],
                "n": log.num(f"n_sessions/{cid}/{scope}", sp["n_sessions"], 0, quantity="n_sessions", **meta),
                "m": log.num(f"n_machines/{cid}/{scope}", sp["n_machines"], 0, quantity="n_machines", **meta),
                "a": log.num(f"ms_per_step/{cid}/{arms[0]}/{scope}", a["median_ms"], 2, quantity="ms_per_step", arm=arms[0], **meta),
                "b": log.num(f"ms_per_step/{cid}/{arms[1]}/{scope}", b["median_ms"], 2, quantity="ms_per_step", arm=arms[1], **meta),
                "speedup": log.num(f"speedup/{cid}/{scope}", sp["estimate"], 3, quantity="speedup", **meta),
                "ci": _ci_text(log, "speedup_ci", cid, sp.get("ci"), meta) if sp.get("ci") else f"none ({sp.get('no_ci_reason')})",
            })
        if rows:
            c = s["cell"]
            groups.append({"title": f"{gpus[c['gpu']]['display_name']}, {models[c['model']]['display_name']}, ctx {c['ctx']}: "
                                    f"A {arms[0]}, B {arms[1]}", "rows": rows, "published": False})
    published = []
    for f in reference:
        if f["quantity"] != "speedup" or f.get("mode") is None or not str(f["mode"]).startswith("ab-"):
            continue
        low = next((g for g in reference if g["quantity"] == "speedup_ci_low" and g["gpu"] == f["gpu"] and g.get("mode") == f["mode"]), None)
        high = next((g for g in reference if g["quantity"] == "speedup_ci_high" and g["gpu"] == f["gpu"] and g.get("mode") == f["mode"]), None)
        n = next((g for g in reference if g["quantity"] == "n_sessions" and g["gpu"] == f["gpu"] and g.get("mode") == f["mode"]), None)
        ours, _, note = reproduced(f, stats)
        arms = str(f["mode"])[3:].split("-")
        model = models.get(f["model"], {}).get("display_name", f["model"]) if f.get("model") else "model unstated"
        published.append({
            "title": f"Published: {gpus.get(f['gpu'], {}).get('display_name', f['gpu'])}, {model}, ctx {f.get('ctx') or 'unstated'}: "
                     f"A {arms[0]}, B {arms[-1]}",
            "rows": [{"n": n["value"] if n else "--", "speedup": fmt(f["value"], 3),
                      "ci": f"[{fmt(low['value'], 3)}, {fmt(high['value'], 3)}]" if low and high else "--",
                      "ratio": fmt(ours / f["value"], 3) if ours is not None else not_reproduced_reason(f, note, stats, gpus, "A/B"), "lines": 2}],
        })
    from decodegap.analysis.stats import StatsConfig

    cfg = next((s["config"] for s in stats if "host_nominal_factor" in s.get("config", {})), {})
    first, rest = PORTRAIT_LINES - 19, PORTRAIT_LINES - 5
    pages = paginate(groups + [{**p, "published": True} for p in published], first, rest)
    tex = environment().get_template("ab.tex.j2").render(
        pages=pages, host_nominal_factor=cfg.get("host_nominal_factor", StatsConfig.host_nominal_factor), method=_method_text(cfg))
    _write(tex, out_tex, log, out_numbers)


def _method_text(cfg: dict) -> str:
    """How the intervals were made, from the settings the statistics recorded."""
    levels = cfg.get("levels") or ["machines"]
    what = "machines (their sessions and steps intact)" if levels == ["machines"] else ", then ".join(levels)
    how = ("Student-t on the bootstrap standard error, U$-$1 degrees of freedom for U replicates"
           if cfg.get("interval", "student-t") == "student-t" else "bootstrap percentiles")
    return Markup(rf"95\,\% intervals: bootstrap resampling {escape(what)}; {how}")


QUANTITY_LABEL = {
    "r_floor": Markup(r"$R_\mathrm{floor}$"), "ms_per_step": "ms/step", "speedup": "speedup",
    "speedup_ci_low": "speedup CI low", "speedup_ci_high": "speedup CI high", "n_sessions": "sessions",
}


def published_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """Every published figure we can compare, beside ours for the same cell; where ours is missing, why:
    no session of that GPU at all, no cell of those fields on a measured GPU, or none completed."""
    stats = load_stats(stats_files)
    log = NumberLog("published")
    rows, notes = [], _Notes()
    for f in reference:
        if f["quantity"] not in COMPARABLE or f.get("gpu") is None:
            continue
        ours, s, note = reproduced(f, stats)
        digits = 0 if f["quantity"] == "n_sessions" else 3 if f["quantity"] != "ms_per_step" else 2
        if ours is not None:
            meta = {"cell": s["cell"], "scope": "completed", "stats_file": s["_file"], "published_key": f["key"], "published_value": f["value"]}
            rep = log.num(f"{f['key']}/reproduced", ours, digits, quantity=f["quantity"], **meta)
            ratio = log.num(f"{f['key']}/ratio", ours / f["value"], 3, quantity="ratio_to_published", reproduces=f["quantity"], **meta)
        else:
            why = not_reproduced_reason(f, note, stats, gpus, "matrix or A/B")  # one note per distinct reason
            rep, ratio = Markup(rf"{escape(why.split(':')[0])}\textsuperscript{{{notes.mark(why)}}}"), "--"
        rows.append({
            "quantity": QUANTITY_LABEL.get(f["quantity"], f["quantity"]),
            "gpu": gpus.get(f["gpu"], {}).get("display_name", f["gpu"]),
            "model": models.get(f["model"], {}).get("display_name", f["model"]) if f.get("model") else "--",
            "ctx": f.get("ctx") or "--", "quant": f.get("quant") or "--", "mode": f.get("mode") or "--",
            "published": Markup(r"$\approx$") + escape(f["value"]) if f.get("approx") else f["value"],
            "reproduced": rep, "ratio": ratio,
        })
    first, rest = LANDSCAPE_LINES - 7, LANDSCAPE_LINES - 5
    pages = paginate([{"title": None, "rows": rows}], first, rest)
    kept, note_pages = place_notes(notes.notes, room_left(pages, first, rest), PORTRAIT_LINES - 2, LANDSCAPE_CHARS)
    tex = environment().get_template("published.tex.j2").render(pages=pages, notes_below=kept, note_pages=note_pages)
    _write(tex, out_tex, log, out_numbers)


def floors_table(stats_files, gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """R in its three forms for every measured single-mode cell: against the datasheet bandwidth with
    all weights (the paper's), without the input embedding table (a step gathers one row of it), and
    against the copy ceiling measured in the session."""
    log = NumberLog("floors")
    found: dict[tuple, dict] = {}
    for s in sorted(load_stats(stats_files), key=lambda s: s["_file"]):
        if s["kind"] != "single":
            continue
        a = ((s.get("completed") or {}).get("arms") or {}).get(s["cell"]["mode"])
        if a:
            c = s["cell"]
            found.setdefault((c["gpu"], c["model"], c["ctx"], c["attn"], c["quant"]), {})[c["mode"]] = (s, a)
    modes = [m for m in ("eager", "static", "graphed") if any(m in g for g in found.values())]
    groups: dict[tuple, dict] = {}
    for (gpu, model, ctx, attn, quant), by_mode in sorted(found.items()):
        s0, a0 = by_mode.get("graphed") or next(iter(by_mode.values()))  # floors beside the graphed step, as the anatomy's
        meta0 = {"cell": s0["cell"], "arm": s0["cell"]["mode"], "scope": "completed", "stats_file": s0["_file"]}
        gid = f"{gpu}/{model}/ctx{ctx}/{attn}_{quant}"
        row = {"ctx": ctx,
               **{k: log.num(f"{q}/{gid}", a0[q], 2, quantity=q, **meta0) if a0.get(q) is not None else "--"
                  for k, q in (("floor", "t_floor_ms"), ("floor_noemb", "t_floor_no_embedding_ms"), ("ceiling", "t_ceiling_ms"))},
               "cells": []}
        for m in modes:
            if m not in by_mode:
                row["cells"] += ["--"] * 3
                continue
            s, a = by_mode[m]
            cid = _cell_id(s["cell"])
            meta = {"cell": s["cell"], "arm": m, "scope": "completed", "stats_file": s["_file"]}
            row["cells"] += [log.num(f"{q}/{cid}", a[q], 3, quantity=q, **meta) if a.get(q) is not None else "--"
                             for q in ("r_floor", "r_floor_no_embedding", "r_ceiling")]
        title = f"{gpus[gpu]['display_name']}, {models[model]['display_name']}" + ("" if (attn, quant) == ("sdpa", "bf16") else f", {attn}, {quant}")
        groups.setdefault((gpu, model, attn, quant), {"title": title, "rows": []})["rows"].append(row)
    pages = paginate(list(groups.values()), LANDSCAPE_LINES - 9, LANDSCAPE_LINES - 6)
    tex = environment().get_template("floors.tex.j2").render(pages=pages, modes=modes, ncols=4 + 3 * len(modes))
    _write(tex, out_tex, log, out_numbers)


def cost_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """$/M tokens of every measured cell (completed sessions) on a priced GPU, the paper's step times at the same
    prices, and the paper's 'about 6x cheaper' claim checked from its own step times."""
    from decodegap.analysis.stats import cost_per_mtok

    log = NumberLog("cost")
    groups: dict[tuple, dict] = {}

    def add(what, gpu, model, row):
        groups.setdefault((what, gpu, model), {"title": f"{what}: {gpu}, {model}", "rows": []})["rows"].append(row)

    for s in load_stats(stats_files):
        price = gpus[s["cell"]["gpu"]].get("price_usd_per_hour")
        if not price or not (s.get("completed") or {}).get("arms"):
            continue
        cid = _cell_id(s["cell"])
        for arm, a in s["completed"]["arms"].items():
            if not a:
                continue
            meta = {"cell": s["cell"], "arm": arm, "scope": "completed", "stats_file": s["_file"]}
            add("Measured", gpus[s["cell"]["gpu"]]["display_name"], models[s["cell"]["model"]]["display_name"],
                {"ctx": s["cell"]["ctx"], "mode": f"{arm} ({s['cell']['mode']})" if arm != s["cell"]["mode"] else arm,
                 "ms": log.num(f"ms_per_step/{cid}/{arm}", a["median_ms"], 2, quantity="ms_per_step", **meta),
                 "price": fmt(price, 2), "cost": log.num(f"cost_usd_per_mtok/{cid}/{arm}", a["cost_usd_per_mtok"], 2, quantity="cost_usd_per_mtok", **meta)})
    published = {}
    for f in reference:
        if f["quantity"] != "ms_per_step" or gpus.get(f.get("gpu"), {}).get("price_usd_per_hour") is None:
            continue
        price = gpus[f["gpu"]]["price_usd_per_hour"]
        published[f["key"]] = cost_per_mtok(price, f["value"])
        add("Published", gpus[f["gpu"]]["display_name"], models.get(f.get("model"), {}).get("display_name", "model unstated"),
            {"ctx": f.get("ctx") or "unstated", "mode": " / ".join(x for x in (f.get("mode"), f.get("quant")) if x), "ms": fmt(f["value"], 2),
             "price": fmt(price, 2), "cost": fmt(published[f["key"]], 2)})
    claim = ""
    h100, l4 = published.get("ms_per_step.h100-sxm5.bf16.graphed"), published.get("ms_per_step.l4.gptq-exllamav2")
    stated = next((f for f in reference if f["quantity"] == "cost_ratio"), None)
    if h100 and l4 and stated:
        claim = (f"The paper: an L4 with optimised kernels serves tokens about {fmt(stated['value'], 0)}x cheaper than an H100 "
                 f"with CUDA Graphs. From its own step times at these prices (L4 GPTQ+ExLlamaV2 against H100 bf16 graphed): "
                 f"{fmt(h100 / l4, 2)}x.")
    shown = {k[1] for k in groups}
    used = sorted(k for k, g in gpus.items() if g.get("price_usd_per_hour") and g["display_name"] in shown)
    prices = [f"{gpus[k]['display_name']}: ${fmt(gpus[k]['price_usd_per_hour'], 4)}/hour, {gpus[k].get('price_source') or 'source not given'}; "
              f"price date {gpus[k].get('price_date') or 'undated'}." for k in used]
    first, rest = PORTRAIT_LINES - 9, PORTRAIT_LINES - 5
    pages = paginate(list(groups.values()), first, rest)
    kept, note_pages = place_notes([claim, *prices] if claim else prices, room_left(pages, first, rest), PORTRAIT_LINES - 2)
    tex = environment().get_template("cost.tex.j2").render(pages=pages, notes_below=kept, note_pages=note_pages)
    _write(tex, out_tex, log, out_numbers)
