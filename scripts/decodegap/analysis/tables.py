"""LaTeX tables (booktabs, via jinja2) from per-cell statistics. Each table writes its .tex and a
sidecar JSON of every number it rendered (key -> value, cell, stats file) for the provenance stage.
"""

from __future__ import annotations

import json
from pathlib import Path

from markupsafe import Markup

from decodegap.analysis.latex import NumberLog, environment, escape, fmt
from decodegap.analysis.latex import path as latex_path
from decodegap.analysis.reference import COMPARABLE, reproduced

NOT_MEASURED = "not measured"


def load_stats(files) -> list[dict]:
    out = []
    for f in files:
        with open(f) as fh:
            s = json.load(fh)
        s["_file"] = Path(f).as_posix()
        out.append(s)
    return out


def _cell_id(cell: dict) -> str:
    return f"{cell['gpu']}/{cell['model']}/ctx{cell['ctx']}/{cell['attn']}_{cell['quant']}_{cell['mode']}"


def _marks():
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while True:
        yield letters[i % 26] * (1 + i // 26)
        i += 1


class _Notes:
    """Footnotes of a table, one mark per distinct text: thirty cells ruled out for one reason share one note."""

    def __init__(self):
        self.notes, self._marks, self._by_text = [], _marks(), {}

    def mark(self, text: str) -> str:
        if text not in self._by_text:
            self._by_text[text] = next(self._marks)
            self.notes.append({"mark": self._by_text[text], "text": text})
        return self._by_text[text]


def _cannot_run(reasons) -> bool:
    """Every session of the cell found the path cannot run here (ruled out by the environment stage, or
    not possible when the session tried), rather than a session that failed or was too short."""
    return all(r.startswith(("ruled out", "not possible")) for r in reasons)


def _no_result(notes: _Notes, path: str, reasons) -> Markup:
    """What a cell (or a row of cells) without a number shows: "cannot run" when every reason says
    the path cannot run here, else "failed", with one footnote per distinct reason."""
    reasons = list(dict.fromkeys(reasons))
    word = "cannot run" if _cannot_run(reasons) else "failed"
    return Markup(rf"{word}\textsuperscript{{{notes.mark(f'{path}: ' + '; '.join(reasons))}}}")


def _write(tex: str, out_tex, log: NumberLog, out_numbers) -> None:
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(tex)
    Path(out_numbers).parent.mkdir(parents=True, exist_ok=True)
    Path(out_numbers).write_text(json.dumps(log.entries, indent=1, sort_keys=True) + "\n")


def _ms_with_ci(log: NumberLog, a: dict, cid: str, meta: dict, scope: str) -> Markup:
    """'ms [lo, hi]', or 'ms' alone where the cell has no interval (one machine or one session)."""
    ms = log.num(f"ms_per_step/{cid}/{scope}", a["median_ms"], 2, quantity="ms_per_step", **meta)
    if a.get("ci_low_ms") is None:
        return Markup(ms)
    lo = log.num(f"ms_per_step_ci_low/{cid}/{scope}", a["ci_low_ms"], 2, quantity="ms_per_step_ci_low", **meta)
    hi = log.num(f"ms_per_step_ci_high/{cid}/{scope}", a["ci_high_ms"], 2, quantity="ms_per_step_ci_high", **meta)
    return Markup(f"{ms} [{lo}, {hi}]")


def matrix_table(gpu_key: str, stats_files, plan_cells: list[dict], gpu: dict, models: dict, out_tex, out_numbers) -> None:
    """Rows model x ctx, column groups per mode; every configured cell appears, unmeasured ones as such.
    Each cell: the completed scope (stats.py), its interval over machines, and notes on what it rests on."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog(f"matrix_{gpu_key}")
    modes = list(dict.fromkeys(c["mode"] for c in plan_cells))
    notes, marks = [], _marks()
    rows = []
    n_measured = 0
    scope = "completed"
    row_keys = list(dict.fromkeys((c["model"], c["ctx"], c["attn"], c["quant"]) for c in plan_cells))
    for model, ctx, attn, quant in row_keys:
        cells = []
        for mode in modes:
            cid = _cell_id({"gpu": gpu_key, "model": model, "ctx": ctx, "attn": attn, "quant": quant, "mode": mode})
            s = stats.get(cid)
            a = ((s or {}).get(scope) or {}).get("arms", {}).get(mode)
            if s is None or not a:
                text = NOT_MEASURED if s is None or s["status"] == "not measured" else "failed"
                if s is not None and s["status"] != "not measured":
                    mark = next(marks)
                    notes.append({"mark": mark, "text": f"{models[model]['display_name']}, ctx {ctx}, {mode}: no completed session: "
                                  + "; ".join(s["invalid_reasons"])})
                    text = Markup(rf"failed\textsuperscript{{{mark}}}")
                cells.append({"ms": text, "r": "", "tps": ""})
                continue
            n_measured += 1
            meta = {"cell": s["cell"], "arm": mode, "scope": scope, "stats_file": s["_file"]}
            r = log.num(f"r_floor/{cid}/{scope}", a["r_floor"], 3, quantity="r_floor", **meta)
            tps = log.num(f"tokens_per_s/{cid}/{scope}", a["tokens_per_s"], 1, quantity="tokens_per_s", **meta)
            said = []
            if a.get("no_ci_reason"):
                said.append(f"no interval ({a['no_ci_reason']})")
            if s["n_valid"] < s["n_completed"]:  # the stability rule would drop some: say how many, not which way
                said.append(f"{s['n_valid']} of {s['n_completed']} sessions within the stability rule; outside it "
                            + "; ".join(s["invalid_reasons"]))
            sup = ""
            if said:
                mark = next(marks)
                notes.append({"mark": mark, "text": f"{models[model]['display_name']}, ctx {ctx}, {mode}: {a['n_sessions']} sessions on "
                              f"{a['n_machines']} machine(s); " + "; ".join(said)})
                sup = Markup(rf"\textsuperscript{{{mark}}}")
            cells.append({"ms": Markup(f"{_ms_with_ci(log, a, cid, meta, scope)}{sup}{_host_nominal(log, s, mode, cid)}"), "r": r, "tps": tps})
        rows.append({"model": models[model]["display_name"], "ctx": ctx, "cells": cells})
    b_peak = Markup(rf"{gpu['b_peak_Bps'] / 1e9:.0f}\,GB/s")
    tex = environment().get_template("matrix.tex.j2").render(
        gpu_name=gpu["display_name"], gpu_key=gpu_key, modes=modes, rows=rows, notes=notes,
        n_measured=n_measured, n_cells=len(row_keys) * len(modes), b_peak=b_peak,
    )
    _write(tex, out_tex, log, out_numbers)


def _host_nominal(log: NumberLog, s: dict, arm: str, cid: str) -> Markup | str:
    """'; HN x' beside an op-by-op cell's time: its median over host-nominal steps (stats.py)."""
    a = ((s.get("host_nominal") or {}).get("arms") or {}).get(arm)
    if arm not in ("eager", "static") or not a:
        return ""
    meta = {"cell": s["cell"], "arm": arm, "scope": "host_nominal", "stats_file": s["_file"]}
    return Markup(f"; HN {log.num(f'ms_per_step/{cid}/host_nominal', a['median_ms'], 2, quantity='ms_per_step', **meta)}")


def _ci_text(log, quantity: str, cid: str, ci, meta, digits: int = 3) -> Markup | str:
    """'[low, high]' for an interval; '--' without one."""
    if not ci:
        return "--"
    scope = meta["scope"]
    lo = log.num(f"{quantity}_low/{cid}/{scope}", ci[0], digits, quantity=f"{quantity}_low", **meta)
    hi = log.num(f"{quantity}_high/{cid}/{scope}", ci[1], digits, quantity=f"{quantity}_high", **meta)
    return Markup(f"[{lo}, {hi}]")


SCOPES = ("completed", "valid", "host_nominal")  # stats.py's scopes, in the order the tables list them
SCOPE_LABEL = {"completed": "completed", "valid": "stability rule", "host_nominal": "host-nominal"}


def ab_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    stats = load_stats(stats_files)
    log = NumberLog("ab")
    rows = []
    for s in stats:
        cid = _cell_id(s["cell"])
        arms = s["arms"]
        for scope in SCOPES:
            sc = s.get(scope) or {}
            sp = sc.get("speedup")
            if not sp:
                continue
            meta = {"cell": s["cell"], "scope": scope, "stats_file": s["_file"]}
            a, b = sc["arms"][arms[0]], sc["arms"][arms[1]]
            rows.append({
                "gpu": gpus[s["cell"]["gpu"]]["display_name"], "model": models[s["cell"]["model"]]["display_name"],
                "ctx": s["cell"]["ctx"], "arms": f"{arms[0]} / {arms[1]}", "scope": SCOPE_LABEL[scope],
                "n": log.num(f"n_sessions/{cid}/{scope}", sp["n_sessions"], 0, quantity="n_sessions", **meta),
                "m": log.num(f"n_machines/{cid}/{scope}", sp["n_machines"], 0, quantity="n_machines", **meta),
                "a": log.num(f"ms_per_step/{cid}/{arms[0]}/{scope}", a["median_ms"], 2, quantity="ms_per_step", arm=arms[0], **meta),
                "b": log.num(f"ms_per_step/{cid}/{arms[1]}/{scope}", b["median_ms"], 2, quantity="ms_per_step", arm=arms[1], **meta),
                "speedup": log.num(f"speedup/{cid}/{scope}", sp["estimate"], 3, quantity="speedup", **meta),
                "ci": _ci_text(log, "speedup_ci", cid, sp.get("ci"), meta) if sp.get("ci") else f"none ({sp.get('no_ci_reason')})",
            })
    published = []
    for f in reference:
        if f["quantity"] != "speedup" or f.get("mode") is None or not str(f["mode"]).startswith("ab-"):
            continue
        low = next((g for g in reference if g["quantity"] == "speedup_ci_low" and g["gpu"] == f["gpu"] and g.get("mode") == f["mode"]), None)
        high = next((g for g in reference if g["quantity"] == "speedup_ci_high" and g["gpu"] == f["gpu"] and g.get("mode") == f["mode"]), None)
        n = next((g for g in reference if g["quantity"] == "n_sessions" and g["gpu"] == f["gpu"] and g.get("mode") == f["mode"]), None)
        ours, _, note = reproduced(f, stats)
        published.append({
            "gpu": gpus.get(f["gpu"], {}).get("display_name", f["gpu"]),
            "model": models.get(f["model"], {}).get("display_name", f["model"]) if f.get("model") else "unstated",
            "ctx": f.get("ctx") or "unstated", "arms": " / ".join(str(f["mode"])[3:].split("-")), "what": "published", "n": n["value"] if n else "--",
            "speedup": fmt(f["value"], 3),
            "ci": f"[{fmt(low['value'], 3)}, {fmt(high['value'], 3)}]" if low and high else "--",
            "ratio": fmt(ours / f["value"], 3) if ours is not None else note,
        })
    from decodegap.analysis.stats import StatsConfig

    cfg = next((s["config"] for s in stats if "host_nominal_factor" in s.get("config", {})), {})
    tex = environment().get_template("ab.tex.j2").render(
        rows=rows, published=published, host_nominal_factor=cfg.get("host_nominal_factor", StatsConfig.host_nominal_factor),
        method=_method_text(cfg))
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
    stats = load_stats(stats_files)
    log = NumberLog("published")
    rows = []
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
            rep, ratio = note, "--"
        rows.append({
            "quantity": QUANTITY_LABEL.get(f["quantity"], f["quantity"]),
            "gpu": gpus.get(f["gpu"], {}).get("display_name", f["gpu"]),
            "model": models.get(f["model"], {}).get("display_name", f["model"]) if f.get("model") else "--",
            "ctx": f.get("ctx") or "--", "quant": f.get("quant") or "--", "mode": f.get("mode") or "--",
            "published": Markup(r"$\approx$") + escape(f["value"]) if f.get("approx") else f["value"],
            "reproduced": rep, "ratio": ratio,
        })
    tex = environment().get_template("published.tex.j2").render(rows=rows)
    _write(tex, out_tex, log, out_numbers)


ANATOMY_NUMBERS = ("eager_ms", "static_ms", "graphed_ms", "floor_ms", "ceiling_ms", "gpu_busy_ms", "kernel_inefficiency_ms",
                   "graph_gaps_ms", "launch_tax_ms", "cache_framework_ms")


def anatomy_table(stats_files, gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """Where each millisecond of a step goes, per GPU, model and context (decodegap.analysis.anatomy)."""
    from decodegap.analysis import anatomy

    log = NumberLog("anatomy")
    rows, flagged = [], []
    for r in anatomy.rows(sorted(load_stats(stats_files), key=lambda s: s["_file"])):  # the order recompute uses: ties break alike
        gid = f"{r['gpu']}/{r['model']}/ctx{r['ctx']}/{r['attn']}_{r['quant']}"
        inputs = {m: {"stats_file": e["stats_file"], "arm": e["arm"], "scope": e["scope"]} for m, e in r["inputs"].items()}
        main = r["inputs"].get("graphed") or next(iter(r["inputs"].values()))
        meta = {"cell": main["cell"], "arm": main["arm"], "scope": main["scope"], "stats_file": main["stats_file"], "inputs": inputs}
        row = {q: log.num(f"{q}/{gid}", r[q], 2, quantity=f"anatomy:{q}", **meta) for q in ANATOMY_NUMBERS}
        kernels = r["kernels_per_step"].get("graphed") or r["kernels_per_step"].get("static")
        row["kernels"] = fmt(kernels, 0)
        row["attention"] = " / ".join(fmt(r["attention_host_ms"].get(m), 2) for m in ("eager", "static"))
        row.update(gpu=gpus[r["gpu"]]["display_name"], model=models[r["model"]]["display_name"], ctx=r["ctx"])
        if r["flagged"]:
            flagged.append(f"{models[r['model']]['display_name']}, ctx {r['ctx']}: {', '.join(r['flagged'])}")
        rows.append(row)
    note = ("Op by op over all completed steps (sessions without the host CPU probe): " + "; ".join(flagged) + ".") if flagged else ""
    tex = environment().get_template("anatomy.tex.j2").render(rows=rows, flagged_note=note)
    _write(tex, out_tex, log, out_numbers)


def cost_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """$/M tokens of every measured cell (completed sessions) on a priced GPU, the paper's step times at the same
    prices, and the paper's 'about 6x cheaper' claim checked from its own step times."""
    from decodegap.analysis.stats import cost_per_mtok

    log = NumberLog("cost")
    rows = []
    for s in load_stats(stats_files):
        price = gpus[s["cell"]["gpu"]].get("price_usd_per_hour")
        if not price or not (s.get("completed") or {}).get("arms"):
            continue
        cid = _cell_id(s["cell"])
        for arm, a in s["completed"]["arms"].items():
            if not a:
                continue
            meta = {"cell": s["cell"], "arm": arm, "scope": "completed", "stats_file": s["_file"]}
            rows.append({"what": "measured", "gpu": gpus[s["cell"]["gpu"]]["display_name"], "model": models[s["cell"]["model"]]["display_name"],
                         "ctx": s["cell"]["ctx"], "mode": f"{arm} ({s['cell']['mode']})" if arm != s["cell"]["mode"] else arm,
                         "ms": log.num(f"ms_per_step/{cid}/{arm}", a["median_ms"], 2, quantity="ms_per_step", **meta),
                         "price": fmt(price, 2), "cost": log.num(f"cost_usd_per_mtok/{cid}/{arm}", a["cost_usd_per_mtok"], 2, quantity="cost_usd_per_mtok", **meta)})
    published = {}
    for f in reference:
        if f["quantity"] != "ms_per_step" or gpus.get(f.get("gpu"), {}).get("price_usd_per_hour") is None:
            continue
        price = gpus[f["gpu"]]["price_usd_per_hour"]
        published[f["key"]] = cost_per_mtok(price, f["value"])
        rows.append({"what": "published", "gpu": gpus[f["gpu"]]["display_name"],
                     "model": models.get(f.get("model"), {}).get("display_name", "unstated"), "ctx": f.get("ctx") or "unstated",
                     "mode": " / ".join(x for x in (f.get("mode"), f.get("quant")) if x), "ms": fmt(f["value"], 2),
                     "price": fmt(price, 2), "cost": fmt(published[f["key"]], 2)})
    claim = ""
    h100, l4 = published.get("ms_per_step.h100-sxm5.bf16.graphed"), published.get("ms_per_step.l4.gptq-exllamav2")
    stated = next((f for f in reference if f["quantity"] == "cost_ratio"), None)
    if h100 and l4 and stated:
        claim = (f"The paper: an L4 with optimised kernels serves tokens about {fmt(stated['value'], 0)}x cheaper than an H100 "
                 f"with CUDA Graphs. From its own step times at these prices (L4 GPTQ+ExLlamaV2 against H100 bf16 graphed): "
                 f"{fmt(h100 / l4, 2)}x.")
    used = sorted({k for k, g in gpus.items() if g.get("price_usd_per_hour") and any(r["gpu"] == g["display_name"] for r in rows)})
    prices = [{"gpu": gpus[k]["display_name"], "price": fmt(gpus[k]["price_usd_per_hour"], 4), "source": gpus[k].get("price_source") or "source not given",
               "date": gpus[k].get("price_date") or "undated"} for k in used]
    tex = environment().get_template("cost.tex.j2").render(rows=rows, claim=claim, prices=prices)
    _write(tex, out_tex, log, out_numbers)


def host_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The per-launch host cost model of every op-by-op arm (decodegap.analysis.hostmodel), the core
    speed at which its step stops being host-bound, and what the paper's H100 eager step implies."""
    from decodegap.analysis import anatomy, hostmodel

    stats = load_stats(stats_files)
    graphed = {k: v["graphed"] for k, v in anatomy.estimates(stats).items() if "graphed" in v}
    log = NumberLog("host")
    rows, eager_models = [], []
    for s in stats:
        for arm, a in ((s.get("completed") or {}).get("arms") or {}).items():
            m = (a or {}).get("host_model")
            if not m:
                continue
            cid = f"{_cell_id(s['cell'])}/{arm}"
            meta = {"cell": s["cell"], "arm": arm, "scope": "completed", "stats_file": s["_file"]}

            def num(field, digits, m=m, cid=cid, meta=meta):
                return log.num(f"{field}/{cid}", m[field], digits, quantity=f"host_model:{field}", **meta)

            ci = m.get("per_launch_us_nominal_ci")
            per_launch = Markup(f"{num('per_launch_us_nominal', 1)} [{fmt(ci[0], 1)}, {fmt(ci[1], 1)}]") if ci else num("per_launch_us_nominal", 1)
            g = graphed.get(anatomy.group_key(s["cell"]))
            row = {"gpu": gpus[s["cell"]["gpu"]]["display_name"], "model": models[s["cell"]["model"]]["display_name"],
                   "ctx": s["cell"]["ctx"], "cell": s["cell"]["mode"], "arm": arm, "n": m["n_sessions"], "launches": fmt(m["launches_per_step"], 0),
                   "per_launch": per_launch, "slope": num("slope_us_per_probe_ns", 3), "intercept": num("intercept_us", 1),
                   "faster": num("host_bound_ms_2x_faster", 2),
                   "gpu_bound": "--", "proportional": "--", "fit": "--"}
            if g:
                row["gpu_bound"] = fmt(g["median_ms"], 2)
                row["proportional"] = log.num(f"host_speedup_proportional/{cid}", hostmodel.proportional_speedup(m, g["median_ms"]), 2,
                                              quantity="host_speedup_proportional", gpu_bound_ms=g["median_ms"], **meta)
                row["fit"] = fmt(hostmodel.crossover_speedup(m, g["median_ms"]), 2)
            rows.append(row)
            if arm == "eager":
                eager_models.append((m["n_steps"], s, m))
    note = ""
    published = next((f for f in reference if f["quantity"] == "ms_per_step" and f.get("gpu") == "h100-sxm5" and f.get("mode") == "eager"), None)
    if published and eager_models:
        _, s, m = max(eager_models, key=lambda t: t[0])
        prop, fit = hostmodel.proportional_speedup(m, published["value"]), hostmodel.crossover_speedup(m, published["value"])
        note = (f"The paper's H100 eager step, {fmt(published['value'], 2)} ms, read with the eager fit of "
                f"{models[s['cell']['model']]['display_name']}, ctx {s['cell']['ctx']} ({fmt(m['launches_per_step'], 0)} launches): "
                f"{fmt(published['value'] * 1e3 / m['launches_per_step'], 1)} us per launch, a core {fmt(prop, 1)}x faster than this host's "
                f"at full speed if all of a launch scaled with the core; "
                + (f"{fmt(fit, 1)}x by the fit." if fit else f"by the fit no core speed gets there (the {fmt(m['intercept_us'], 1)} us per launch "
                   "that does not scale with the probe exceed the budget).")
                + " Single cores differ by well under that factor: the paper's eager step must do less host work per launch than this stack's.")
    tex = environment().get_template("host.tex.j2").render(rows=rows, paper_note=note)
    _write(tex, out_tex, log, out_numbers)


def _pct(x):
    return None if x is None else 100.0 * x


def sensitivity_table(stats_files, gpus: dict, models: dict, headline: dict, out_tex, out_numbers) -> None:
    """Does the headline move with the estimator or the validity filters? For every A/B cell, each
    speedup estimator with its interval; for every A/B cell and the headline model and context's
    single-mode cells, the estimate as the stability limit and the host-nominal factor move."""
    from decodegap.analysis.stats import ESTIMATORS

    log = NumberLog("sensitivity")
    estimators, filters = [], []
    for s in sorted(load_stats(stats_files), key=lambda s: s["_file"]):
        c = s["cell"]
        is_ab = s["kind"] == "ab"
        if not is_ab and not (c["model"] == headline["headline_model"] and c["ctx"] == headline["headline_ctx"]):
            continue
        cid = _cell_id(c)
        label = f"{gpus[c['gpu']]['display_name']}, {models[c['model']]['display_name']}, ctx {c['ctx']}, {c['mode']}"
        sp = (s.get("completed") or {}).get("speedup")
        if sp:
            for name in ESTIMATORS:
                e = sp["estimators"].get(name)
                if not e:
                    continue
                meta = {"cell": c, "scope": "completed", "stats_file": s["_file"]}
                est = log.num(f"estimator/{name}/{cid}", e["estimate"], 3, quantity=f"speedup_estimator:{name}:estimate", **meta)
                ci = ("--" if not e["ci"] else Markup(
                    f"[{log.num(f'estimator/{name}/ci_low/{cid}', e['ci'][0], 3, quantity=f'speedup_estimator:{name}:ci_low', **meta)}, "
                    f"{log.num(f'estimator/{name}/ci_high/{cid}', e['ci'][1], 3, quantity=f'speedup_estimator:{name}:ci_high', **meta)}]"))
                estimators.append({"cell": label, "estimator": e["label"] + (" (headline)" if name == "geomean" else ""), "estimate": est, "ci": ci,
                                   "n": sp["n_sessions"], "m": sp["n_machines"]})
        for filt, field, unit in (("stability", "limit", "rel. stdev <"), ("host_nominal", "factor", "probe <= x fast tail")):
            for row in (s.get("sensitivity") or {}).get(filt, []):
                targets = [(None, row["speedup"])] if is_ab else [(c["mode"], row["arms"].get(c["mode"]))]
                for arm, t in targets:
                    if not t:
                        continue
                    threshold = row[field]
                    shown = "none" if threshold is None else (f"{100 * threshold:.0f} %" if filt == "stability" else f"{threshold:.2f}")
                    meta = {"cell": c, "scope": "completed", "stats_file": s["_file"], "arm": arm, "threshold_field": field, "threshold": threshold}
                    key = f"{filt}/{'none' if threshold is None else threshold}/{cid}"
                    value = t["estimate"] if arm is None else t["median_ms"]
                    lo, hi = (t.get("ci") or [None, None]) if arm is None else (t["ci_low_ms"], t["ci_high_ms"])
                    digits = 3 if arm is None else 2
                    est = log.num(f"{key}/estimate", value, digits, quantity=f"sensitivity:{filt}:estimate", **meta)
                    ci = ("none (" + str(t.get("no_ci_reason")) + ")" if lo is None else Markup(
                        f"[{log.num(f'{key}/ci_low', lo, digits, quantity=f'sensitivity:{filt}:ci_low', **meta)}, "
                        f"{log.num(f'{key}/ci_high', hi, digits, quantity=f'sensitivity:{filt}:ci_high', **meta)}]"))
                    filters.append({"cell": label, "what": "speedup" if arm is None else "ms/step",
                                    "filter": "stability rule" if filt == "stability" else "host-nominal", "rule": unit, "threshold": shown,
                                    "n": t["n_sessions"], "m": t["n_machines"], "estimate": est, "ci": ci})
    tex = environment().get_template("sensitivity.tex.j2").render(estimators=estimators, filters=filters)
    _write(tex, out_tex, log, out_numbers)


def variance_table(stats_files, gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """Where each cell's spread lives: machine, session and step standard deviations (% of the
    median), from the completed sessions (stats.variance_components)."""
    log = NumberLog("variance")
    rows = []
    for s in sorted(load_stats(stats_files), key=lambda s: s["_file"]):
        sc = s.get("completed") or {}
        cid = _cell_id(s["cell"])
        targets = [(arm, a, a["median_ms"] if a else None) for arm, a in (sc.get("arms") or {}).items()]
        if sc.get("speedup"):
            targets.append((None, sc["speedup"], None))
        for arm, a, median in targets:
            if not a or not a.get("variance") or a["variance"]["n_sessions"] < 2:
                continue
            v = a["variance"]
            meta = {"cell": s["cell"], "arm": arm, "scope": "completed", "stats_file": s["_file"]}
            name = arm or "speedup"

            def num(field, v=v, median=median, meta=meta, name=name):
                value = v[field]
                if value is None:
                    return "--"
                scale = 100.0 / median if median else 100.0  # % of the median; log ratios are relative already
                return log.num(f"{field}/{cid}/{name}", value * scale, 2, quantity=f"variance:{field}", scale=scale, **meta)

            rows.append({"gpu": gpus[s["cell"]["gpu"]]["display_name"], "model": models[s["cell"]["model"]]["display_name"],
                         "ctx": s["cell"]["ctx"], "cell": s["cell"]["mode"], "what": f"{arm} ms/step" if arm else "speedup (log ratio)",
                         "n": v["n_sessions"], "m": v["n_machines"], "machine": num("machine_sd_ms"), "session": num("session_sd_ms"),
                         "step": num("step_sd_ms") if arm else "--",
                         "share": fmt(_pct(v["machine_share"]), 0) if v["machine_share"] is not None else "--"})
    tex = environment().get_template("variance.tex.j2").render(rows=rows)
    _write(tex, out_tex, log, out_numbers)


def floors_table(stats_files, gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """R in its three forms for every measured single-mode cell: against the datasheet bandwidth with
    all weights (the paper's), without the input embedding table (a step gathers one row of it), and
    against the copy ceiling measured in the session."""
    log = NumberLog("floors")
    groups: dict[tuple, dict] = {}
    for s in sorted(load_stats(stats_files), key=lambda s: s["_file"]):
        if s["kind"] != "single":
            continue
        a = ((s.get("completed") or {}).get("arms") or {}).get(s["cell"]["mode"])
        if a:
            c = s["cell"]
            groups.setdefault((c["gpu"], c["model"], c["ctx"], c["attn"], c["quant"]), {})[c["mode"]] = (s, a)
    modes = [m for m in ("eager", "static", "graphed") if any(m in g for g in groups.values())]
    rows = []
    for (gpu, model, ctx, attn, quant), by_mode in sorted(groups.items()):
        s0, a0 = by_mode.get("graphed") or next(iter(by_mode.values()))  # floors beside the graphed step, as the anatomy's
        meta0 = {"cell": s0["cell"], "arm": s0["cell"]["mode"], "scope": "completed", "stats_file": s0["_file"]}
        gid = f"{gpu}/{model}/ctx{ctx}/{attn}_{quant}"
        row = {"gpu": gpus[gpu]["display_name"], "model": models[model]["display_name"], "ctx": ctx,
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
        rows.append(row)
    tex = environment().get_template("floors.tex.j2").render(rows=rows, modes=modes)
    _write(tex, out_tex, log, out_numbers)


def environment_table(record_files, gpus: dict, out_tex, out_numbers) -> None:
    """GPU type x path: runs (with the kernel's package version), or the reason it does not, from
    each GPU type's environment record (decodegap.measure.setup)."""
    log = NumberLog("environment")
    rows, stacks = [], []
    for f in sorted(record_files):
        with open(f) as fh:
            r = json.load(fh)
        name = gpus.get(r["gpu"], {}).get("display_name", r["gpu"])
        libs = r.get("libraries") or {}
        stacks.append({"gpu": name, "file": Path(f).as_posix(), "created": r.get("created_utc", "--"), "driver": r.get("driver") or "--",
                       "cuda": r.get("cuda") or "--", "torch": libs.get("torch") or "--", "transformers": libs.get("transformers") or "--",
                       "device": (r.get("gpu_device") or {}).get("name") or r.get("device", "--")})
        for path, a in sorted((r.get("attention") or {}).items()):
            for form, c in sorted(a["checks"].items()):
                rows.append({"gpu": name, "kind": "attention", "path": path, "form": f"{form} cache",
                             "package": f"{a['package']} {a.get('version') or '?'}",
                             "runs": "yes" if c["runs"] else "no", "reason": c["reason"] or ""})
        for path, w in sorted((r.get("weights") or {}).items()):
            rows.append({"gpu": name, "kind": "weights", "path": path, "form": "GEMV", "package": f"{w['package']} {w.get('version') or '?'}",
                         "runs": "yes" if w["runs"] else "no", "reason": w["reason"] or ""})
    tex = environment().get_template("environment.tex.j2").render(rows=rows, stacks=stacks)
    _write(tex, out_tex, log, out_numbers)


def step_model_numbers(stats_list: list[dict]) -> tuple[dict, dict]:
    """The step model of one GPU's cells: ({quantity: value}, details for the table). Quantities:
    coef/<term>, <scheme>/<mode>/{median_abs,max_abs} with scheme in_sample, ctx, model."""
    from decodegap.analysis import stepmodel
    from decodegap.core.config import load_models

    obs = stepmodel.collect(stats_list, load_models())
    model = stepmodel.fit(obs)
    numbers = {f"coef/{t}": c["value"] for t, c in model["coefficients"].items()}
    schemes = {"in_sample": stepmodel.summary(stepmodel.in_sample(model, obs))}
    folds = {g: stepmodel.loo(obs, g) for g in ("ctx", "model")}
    schemes.update({g: f["summary"] for g, f in folds.items()})
    for scheme, summ in schemes.items():
        for mode, v in summ.items():
            numbers[f"{scheme}/{mode}/median_abs"], numbers[f"{scheme}/{mode}/max_abs"] = v["median_abs"], v["max_abs"]
    fails = [r for f in folds.values() for r in f["rows"] if abs(r["rel_err"]) > 0.10]
    return numbers, {"obs": obs, "model": model, "schemes": schemes, "fails": fails}


def model_table(stats_files, gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The predictive step model per GPU: its coefficients and its in-sample and held-out errors."""
    stats = load_stats(stats_files)
    log = NumberLog("model")
    coefficients, errors, failures = [], [], []
    for gpu in sorted({s["cell"]["gpu"] for s in stats}):
        mine = sorted((s for s in stats if s["cell"]["gpu"] == gpu), key=lambda s: s["_file"])  # as recompute orders them
        try:
            numbers, d = step_model_numbers(mine)
        except (ValueError, KeyError, IndexError):  # too few cells of this GPU to fit anything
            continue
        # every cell of the GPU feeds the fit (observations, and kernel counts imputed from other cells)
        inputs = {s["_file"]: {"stats_file": s["_file"], "scope": "completed", "arm": None} for s in mine}
        meta = {"cell": {"gpu": gpu, "model": "*", "ctx": 0, "attn": "*", "quant": "*", "mode": "*"}, "scope": "completed",
                "stats_file": next(iter(inputs.values()))["stats_file"], "inputs": inputs}

        def num(name, value, digits, scale=1.0):  # scale: the unit shown (TB/s, %), which recompute applies too
            return log.num(f"{gpu}/{name}", value * scale, digits, quantity=f"stepmodel:{name}", scale=scale, **meta)

        display = gpus[gpu]["display_name"]
        for t, c in d["model"]["coefficients"].items():
            if c["unit"] == "bytes/s" and c["value"] is not None and c["value"] != float("inf"):
                value = Markup(num(f'coef/{t}', c['value'], 2, 1e-12) + r'\,TB/s')
            elif c["value"] is not None and c["value"] != float("inf"):
                value = Markup(num(f'coef/{t}', c['value'], 2) + r'\,us')
            else:
                value = "not fitted"
            coefficients.append({"gpu": display, "name": t, "value": value, "meaning": c["meaning"]})
        for mode, v in d["schemes"]["in_sample"].items():
            row = {"gpu": display, "mode": mode, "n": v["n"]}
            for scheme, label in (("in_sample", "in"), ("ctx", "ctx"), ("model", "model")):
                w = d["schemes"][scheme].get(mode)
                for stat in ("median", "max"):
                    row[f"{label}_{stat}"] = Markup(num(f'{scheme}/{mode}/{stat}_abs', w[f'{stat}_abs'], 1, 100.0) + r'\,\%') if w else "--"
            errors.append(row)
        failures += [f"{display}, {models[r['model']]['display_name']}, ctx {r['ctx']}, {r['mode']} "
                     f"(held out by {'card' if r['held_out'] == r['model'] else 'context'}: {100 * r['rel_err']:+.1f} %, "
                     f"{r['n_sessions']} session(s), scope {r['scope']})" for r in d["fails"]]
    fail_text = "; ".join(failures) + "." if failures else "none."
    tex = environment().get_template("model.tex.j2").render(coefficients=coefficients, errors=errors, failures=fail_text)
    _write(tex, out_tex, log, out_numbers)


def paper_tables(table_files, figures: list[dict], out_tex) -> None:
    """report/paper_tables.tex: \\input of every table, then every figure; paths relative to report/."""
    from decodegap.analysis.latex import PREAMBLE_MACROS

    def rel(p):  # paths relative to report/, where the including document is compiled
        p = Path(p)
        return latex_path(p.relative_to("report").as_posix() if p.parts[0] == "report" else p.as_posix())

    tables = [rel(t) for t in table_files]
    figs = [{**f, "path": rel(f["path"])} for f in figures]
    tex = environment().get_template("paper_tables.tex.j2").render(macros=Markup(PREAMBLE_MACROS), tables=tables, figures=figs)
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(tex)


def _reason_of(s: dict) -> str:
    """Why a cell has no completed session: its sessions' reasons, each said once."""
    import re

    reasons = [re.sub(r"^s\d+: ", "", r) for r in s.get("invalid_reasons", [])]
    return "; ".join(dict.fromkeys(reasons)) or "no completed session"


def _family_of(a: dict | None) -> str:
    """The attention kernel family an arm's profiled steps ran (the dispatcher's choice, for sdpa)."""
    fams = list((a or {}).get("attention_kernels") or {})
    return "/".join(fams) if fams else "--"


def _paper_us_per_layer(reference: list[dict], gpus: dict) -> dict[str, str]:
    """The paper's per-layer attention figures by path: 'H100 SXM5 36.05'."""
    out = {}
    for f in reference:
        if f["quantity"] == "attention_us_per_layer" and f.get("attn"):
            out[f["attn"]] = f"{fmt(f['value'], 2)} ({gpus.get(f['gpu'], {}).get('display_name', f['gpu'])})"
    return out


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
    groups, notes = [], _Notes()
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
                few = Markup(r"\textsuperscript{$\dagger$}") if s["n_completed"] < 2 else ""
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
        groups.append({"gpu": gpus[gpu_key]["display_name"], "model": models[model]["display_name"], "layout": layout, "rows": rows})
    tex = environment().get_template("attention.tex.j2").render(groups=groups, ctxs=ctxs, notes=notes.notes, ncols=3 + 3 * len(ctxs))
    _write(tex, out_tex, log, out_numbers)


def attention_step_table(stats_files, plan_cells: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The whole decode step with each attention path inside the model: static and graphed ms per
    step (both arms of one session), the launch tax between them, and the kernel that ran. A path
    that cannot run in a model at all gets one row and one note for its reason."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("attention_step")
    cells = [c for c in plan_cells if c["mode"] != "layer"]
    ctxs = sorted({c["ctx"] for c in cells})
    rows, notes = [], _Notes()
    scope = "completed"
    for gpu_key, model, attn in dict.fromkeys((c["gpu"], c["model"], c["attn"]) for c in cells):
        row = {"gpu": gpus[gpu_key]["display_name"], "model": models[model]["display_name"], "path": attn, "cells": [], "kernel": "--",
               "reason": None}
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
                few = Markup(r"\textsuperscript{$\dagger$}") if s["n_completed"] < 2 else few
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
                graphed = found.get("graphed", "--")
                row["cells"].append({"static": found.get("static", "--"), "graphed": Markup(f"{graphed}{few}"), "tax": tax})
        if len(failed) == len(ctxs) and len(set(failed.values())) == 1 and _cannot_run(failed.values()):
            row["reason"] = _no_result(notes, attn, failed.values())
        rows.append(row)
    tex = environment().get_template("attention_step.tex.j2").render(rows=rows, ctxs=ctxs, notes=notes.notes, ncols=4 + 3 * len(ctxs))
    _write(tex, out_tex, log, out_numbers)


def quant_numbers(quant: dict, bf16: dict, arm: str) -> dict:
    """A weight path against bf16 in one arm (cell statistics of the same GPU, model, ctx, attention
    path and mode): the speedup (ratio of the two cells' medians: separate sessions, so no paired
    interval), the ideal speedup if the step were its traffic, (W_bf16 + K) / (W_q + K), and the
    share of that ideal the kernel realises."""
    q, b = quant["completed"]["arms"][arm], bf16["completed"]["arms"][arm]
    speedup = b["median_ms"] / q["median_ms"]
    ideal = (b["weight_bytes"] + b["kv_bytes"]) / (q["weight_bytes"] + q["kv_bytes"])
    return {"speedup_over_bf16": speedup, "ideal_speedup": ideal, "realised": speedup / ideal}


def _paper_quant(reference: list[dict], gpus: dict) -> dict[str, str]:
    """The paper's ms/step per weight path (its L4 comparison): 'bnb-nf4' -> '59.36 (L4)'."""
    out = {}
    for f in reference:
        if f["quantity"] == "ms_per_step" and f.get("quant") and f.get("gpu") == "l4" and f.get("model") is None:
            out[f["quant"]] = f"{fmt(f['value'], 2)} ({gpus.get(f['gpu'], {}).get('display_name', f['gpu'])})"
    return out


def quantization_table(stats_files, plan_cells: list[dict], reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """The weight-path matrix: ms per step per path (static and graphed), the bytes each stores, its
    graphed speedup over bf16 beside the ideal (W_bf16 + K) / (W_q + K) and the share realised, the
    paper's L4 figure. A path that cannot run has its reason."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("quantization")
    paper = _paper_quant(reference, gpus)
    groups, notes, scope = [], _Notes(), "completed"
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
            few = Markup(r"\textsuperscript{$\dagger$}") if s["n_completed"] < 2 else ""
            g = arms["graphed"]
            row.update(
                static=log.num(f"ms_per_step/{cid}/static/{scope}", (arms.get("static") or {}).get("median_ms"), 2, quantity="ms_per_step", arm="static", **meta),
                graphed=Markup(f"{log.num(f'ms_per_step/{cid}/graphed/{scope}', g['median_ms'], 2, quantity='ms_per_step', arm='graphed', **meta)}{few}"),
                w_gb=fmt(g["weight_bytes"] / 1e9, 2),
                r_floor=log.num(f"r_floor/{cid}/graphed/{scope}", g["r_floor"], 2, quantity="r_floor", arm="graphed", **meta),
                speedup_over_bf16="--", ideal_speedup="--", realised="--")
            if base_ok and c["quant"] != "bf16":
                inputs = {"quant": meta, "bf16": {"cell": base["cell"], "scope": scope, "stats_file": base["_file"]}}
                for name, value in quant_numbers(s, base, "graphed").items():
                    row[name] = log.num(f"{name}/{cid}/graphed/{scope}", value, 2, quantity=f"quant:{name}", arm="graphed", inputs=inputs, **meta)
            rows.append(row)
        groups.append({"gpu": gpus[gpu_key]["display_name"], "model": models[model]["display_name"], "ctx": ctx, "attn": attn,
                       "mode": mode, "rows": rows})
    tex = environment().get_template("quantization.tex.j2").render(groups=groups, notes=notes.notes)
    _write(tex, out_tex, log, out_numbers)


BEYOND_ARMS = ("graphed", "compiled", "fused")  # the floor table's rows per weight path, the paper's best first


def over_bf16_graphed(cell: dict, arm: str, bf16: dict, bf16_arm: str = "graphed") -> float:
    """A mode's step against the bf16 graphed step of the same GPU, model and context: the ratio of
    two medians (separate cells, or two arms of one; no paired interval across cells)."""
    return bf16["completed"]["arms"][bf16_arm]["median_ms"] / cell["completed"]["arms"][arm]["median_ms"]


def floor_table(stats_files, plan_cells: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """Beyond the paper: how close to the memory floor the step gets. Per GPU, model and context,
    per weight path: the graphed transformers step, the same step compiled, and decodegap's fused
    step, each as an arm of an A/B session against graphed (ab-graphed-compiled, ab-graphed-fused):
    ms/step, R_floor, kernels and GPU busy ms per step, compile seconds, the paired speedup over the
    session's own graphed arm, and the speedup over the bf16 graphed step."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog("floor")
    groups, notes, scope = [], _Notes(), "completed"
    for gpu_key, model, ctx, attn in dict.fromkeys((c["gpu"], c["model"], c["ctx"], c["attn"]) for c in plan_cells):
        cells = [c for c in plan_cells if (c["gpu"], c["model"], c["ctx"], c["attn"]) == (gpu_key, model, ctx, attn)]
        by_arm = {}  # (quant, arm) -> (stats, cell id) of the cell with the most completed sessions of that arm
        for c in cells:
            s = stats.get(_cell_id(c))
            for arm, a in (((s or {}).get(scope) or {}).get("arms") or {}).items():
                have = by_arm.get((c["quant"], arm))
                if a and (have is None or a["n_sessions"] > have[0][scope]["arms"][arm]["n_sessions"]):
                    by_arm[(c["quant"], arm)] = (s, _cell_id(c))
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
                a = s[scope]["arms"][arm]
                meta = {"cell": s["cell"], "scope": scope, "stats_file": s["_file"], "arm": arm}
                few = Markup(r"\textsuperscript{$\dagger$}") if a["n_sessions"] < 2 else ""
                an = a.get("anatomy") or {}
                row.update(
                    ms=Markup(f"{log.num(f'ms_per_step/{cid}/{arm}/{scope}', a['median_ms'], 2, quantity='ms_per_step', **meta)}{few}"),
                    r_floor=log.num(f"r_floor/{cid}/{arm}/{scope}", a["r_floor"], 2, quantity="r_floor", **meta),
                    kernels=log.num(f"kernels_per_step/{cid}/{arm}/{scope}", an.get("kernels_per_step"), 0, quantity="kernels_per_step", **meta),
                    busy=log.num(f"gpu_busy_ms_per_step/{cid}/{arm}/{scope}", an.get("gpu_busy_ms_per_step"), 2, quantity="gpu_busy_ms_per_step", **meta),
                    compile_s=log.num(f"compile_s/{cid}/{arm}/{scope}", a.get("compile_s"), 0, quantity="compile_s", **meta),
                    paired="--", over_bf16="--")
                sp = s[scope].get("speedup") or {}
                if arm != "graphed" and sp.get("of") == arm and sp.get("estimate") is not None:
                    row["paired"] = log.num(f"speedup/{cid}/{scope}", sp["estimate"], 2, quantity="speedup", cell=s["cell"], scope=scope,
                                            stats_file=s["_file"])
                if base is not None and not (quant == "bf16" and arm == "graphed"):
                    b = base[0]
                    inputs = {"cell": {k: meta[k] for k in ("cell", "scope", "stats_file")}, "bf16": {"cell": b["cell"], "scope": scope, "stats_file": b["_file"]}}
                    row["over_bf16"] = log.num(f"over_bf16_graphed/{cid}/{arm}/{scope}", over_bf16_graphed(s, arm, b), 2,
                                               quantity="floor:over_bf16_graphed", inputs=inputs, bf16_arm="graphed", **meta)
                rows.append(row)
        groups.append({"gpu": gpus[gpu_key]["display_name"], "model": models[model]["display_name"], "ctx": ctx, "attn": attn, "rows": rows})
    tex = environment().get_template("floor.tex.j2").render(groups=groups, notes=notes.notes)
    _write(tex, out_tex, log, out_numbers)
