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


def _write(tex: str, out_tex, log: NumberLog, out_numbers) -> None:
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(tex)
    Path(out_numbers).parent.mkdir(parents=True, exist_ok=True)
    Path(out_numbers).write_text(json.dumps(log.entries, indent=1, sort_keys=True) + "\n")


def matrix_table(gpu_key: str, stats_files, plan_cells: list[dict], gpu: dict, models: dict, out_tex, out_numbers) -> None:
    """Rows model x ctx, column groups per mode; every configured cell appears, unmeasured ones as such."""
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    log = NumberLog(f"matrix_{gpu_key}")
    modes = list(dict.fromkeys(c["mode"] for c in plan_cells))
    notes, marks = [], _marks()
    rows = []
    n_valid = 0
    row_keys = list(dict.fromkeys((c["model"], c["ctx"], c["attn"], c["quant"]) for c in plan_cells))
    for model, ctx, attn, quant in row_keys:
        cells = []
        for mode in modes:
            cid = _cell_id({"gpu": gpu_key, "model": model, "ctx": ctx, "attn": attn, "quant": quant, "mode": mode})
            s = stats.get(cid)
            if s is None or s["status"] == "not measured" or not s.get("all"):
                cells.append({"ms": NOT_MEASURED, "r": "", "tps": ""})
                continue
            scope = "valid" if s["status"] == "valid" else "all"
            a = s[scope]["arms"][mode]
            meta = {"cell": s["cell"], "arm": mode, "scope": scope, "stats_file": s["_file"]}
            ms = log.num(f"ms_per_step/{cid}/{scope}", a["median_ms"], 2, quantity="ms_per_step", **meta)
            lo = log.num(f"ms_per_step_ci_low/{cid}/{scope}", a["ci_low_ms"], 2, quantity="ms_per_step_ci_low", **meta)
            hi = log.num(f"ms_per_step_ci_high/{cid}/{scope}", a["ci_high_ms"], 2, quantity="ms_per_step_ci_high", **meta)
            r = log.num(f"r_floor/{cid}/{scope}", a["r_floor"], 3, quantity="r_floor", **meta)
            tps = log.num(f"tokens_per_s/{cid}/{scope}", a["tokens_per_s"], 1, quantity="tokens_per_s", **meta)
            if scope == "valid":
                n_valid += 1
                sup = ""
                if s["invalid_reasons"]:  # some sessions were excluded: say which and why
                    mark = next(marks)
                    notes.append({"mark": mark, "text": f"{models[model]['display_name']}, ctx {ctx}, {mode}: "
                                  f"{s['n_valid']} of {s['n_sessions']} sessions valid; excluded " + "; ".join(s["invalid_reasons"])})
                    sup = Markup(rf"\textsuperscript{{{mark}}}")
                cells.append({"ms": Markup(f"{ms} [{lo}, {hi}]{sup}{_host_nominal(log, s, mode, cid)}"), "r": r, "tps": tps})
            else:
                mark = next(marks)
                notes.append({"mark": mark, "text": f"{models[model]['display_name']}, ctx {ctx}, {mode}: " + "; ".join(s["invalid_reasons"])})
                sup = Markup(rf"\textsuperscript{{{mark}}}")
                cells.append({"ms": Markup(f"({ms}){sup}{_host_nominal(log, s, mode, cid)}"), "r": Markup(f"({r})"), "tps": Markup(f"({tps})")})
        rows.append({"model": models[model]["display_name"], "ctx": ctx, "cells": cells})
    b_peak = Markup(rf"{gpu['b_peak_Bps'] / 1e9:.0f}\,GB/s")
    tex = environment().get_template("matrix.tex.j2").render(
        gpu_name=gpu["display_name"], gpu_key=gpu_key, modes=modes, rows=rows, notes=notes,
        n_valid=n_valid, n_cells=len(row_keys) * len(modes), b_peak=b_peak,
    )
    _write(tex, out_tex, log, out_numbers)


def _host_nominal(log: NumberLog, s: dict, arm: str, cid: str) -> Markup | str:
    """'; HN x' beside an op-by-op cell's time: its median over host-nominal steps (stats.py)."""
    a = ((s.get("host_nominal") or {}).get("arms") or {}).get(arm)
    if arm not in ("eager", "static") or not a:
        return ""
    meta = {"cell": s["cell"], "arm": arm, "scope": "host_nominal", "stats_file": s["_file"]}
    return Markup(f"; HN {log.num(f'ms_per_step/{cid}/host_nominal', a['median_ms'], 2, quantity='ms_per_step', **meta)}")


def _ci_text(log, quantity: str, cid: str, ci, meta) -> Markup | str:
    """'[low, high]' for a speedup interval; quantity is speedup_percentile or speedup_bca."""
    if not ci:
        return "--"
    scope = meta["scope"]
    lo = log.num(f"{quantity}_low/{cid}/{scope}", ci[0], 3, quantity=f"{quantity}_low", **meta)
    hi = log.num(f"{quantity}_high/{cid}/{scope}", ci[1], 3, quantity=f"{quantity}_high", **meta)
    return Markup(f"[{lo}, {hi}]")


SCOPES = ("valid", "all", "host_nominal")  # stats.py's scopes, in the order the tables list them
SCOPE_LABEL = {"valid": "valid", "all": "all", "host_nominal": "host-nominal"}


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
                "a": log.num(f"ms_per_step/{cid}/{arms[0]}/{scope}", a["median_ms"], 2, quantity="ms_per_step", arm=arms[0], **meta),
                "b": log.num(f"ms_per_step/{cid}/{arms[1]}/{scope}", b["median_ms"], 2, quantity="ms_per_step", arm=arms[1], **meta),
                "speedup": log.num(f"speedup/{cid}/{scope}", sp["estimate"], 3, quantity="speedup", **meta),
                "pct": _ci_text(log, "speedup_percentile", cid, sp.get("percentile"), meta),
                "bca": _ci_text(log, "speedup_bca", cid, sp.get("bca"), meta),
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
            "pct": f"[{fmt(low['value'], 3)}, {fmt(high['value'], 3)}]" if low and high else "--",
            "ratio": fmt(ours / f["value"], 3) if ours is not None else note,
        })
    from decodegap.analysis.stats import StatsConfig

    factor = next((s["config"]["host_nominal_factor"] for s in stats if "host_nominal_factor" in s.get("config", {})), StatsConfig.host_nominal_factor)
    tex = environment().get_template("ab.tex.j2").render(rows=rows, published=published, host_nominal_factor=factor)
    _write(tex, out_tex, log, out_numbers)


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
            meta = {"cell": s["cell"], "scope": "valid", "stats_file": s["_file"], "published_key": f["key"], "published_value": f["value"]}
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
    note = ("From sessions flagged invalid (no valid session): " + "; ".join(flagged) + ".") if flagged else ""
    tex = environment().get_template("anatomy.tex.j2").render(rows=rows, flagged_note=note)
    _write(tex, out_tex, log, out_numbers)


def cost_table(stats_files, reference: list[dict], gpus: dict, models: dict, out_tex, out_numbers) -> None:
    """$/M tokens of every valid measured cell on a priced GPU, the paper's step times at the same
    prices, and the paper's 'about 6x cheaper' claim checked from its own step times."""
    from decodegap.analysis.stats import cost_per_mtok

    log = NumberLog("cost")
    rows = []
    for s in load_stats(stats_files):
        price = gpus[s["cell"]["gpu"]].get("price_usd_per_hour")
        if not price or s["status"] != "valid":
            continue
        cid = _cell_id(s["cell"])
        for arm, a in s["valid"]["arms"].items():
            if not a:
                continue
            meta = {"cell": s["cell"], "arm": arm, "scope": "valid", "stats_file": s["_file"]}
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
        for arm, a in ((s.get("all") or {}).get("arms") or {}).items():
            m = (a or {}).get("host_model")
            if not m:
                continue
            cid = f"{_cell_id(s['cell'])}/{arm}"
            meta = {"cell": s["cell"], "arm": arm, "scope": "all", "stats_file": s["_file"]}

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
        inputs = {s["_file"]: {"stats_file": s["_file"], "scope": "all", "arm": None} for s in mine}
        meta = {"cell": {"gpu": gpu, "model": "*", "ctx": 0, "attn": "*", "quant": "*", "mode": "*"}, "scope": "all",
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
