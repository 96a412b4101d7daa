"""Tables beyond the paper: the anatomy of a step, the host model, the step model, the environment
stage, and the headline's sensitivity and variance (re-exported by decodegap.analysis.tables)."""

from __future__ import annotations

import json
from pathlib import Path

from markupsafe import Markup

from decodegap.analysis.latex import NumberLog, environment, fmt
from decodegap.analysis.tables_common import (
    BELOW_FLOOR_MARK, BELOW_FLOOR_NOTE, LANDSCAPE_CHARS, LANDSCAPE_LINES, PORTRAIT_LINES, _cell_id, _Notes, _pct, _write, below_floor,
    load_stats, paginate, place_notes, room_left, text_lines,
)

ANATOMY_NUMBERS = ("eager_ms", "static_ms", "graphed_ms", "floor_ms", "ceiling_ms", "gpu_busy_ms", "kernel_inefficiency_ms",
                   "graph_gaps_ms", "launch_tax_ms", "cache_framework_ms")


def _grouped(rows: list[dict], key, title) -> list[dict]:
    """Rows in groups of equal key(row), in first-seen order, each titled title(row)."""
    groups: dict = {}
    for r in rows:
        groups.setdefault(key(r), {"title": title(r), "rows": []})["rows"].append(r)
    return list(groups.values())


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
    first, rest = LANDSCAPE_LINES - 12, LANDSCAPE_LINES - 6
    pages = paginate(_grouped(rows, lambda r: (r["gpu"], r["model"]), lambda r: f"{r['gpu']}, {r['model']}"), first, rest)
    notes = ["-- : not measured (a mode without sessions, or sessions from before the profiler pass)."] + ([note] if note else [])
    kept, note_pages = place_notes(notes, room_left(pages, first, rest), PORTRAIT_LINES - 2, LANDSCAPE_CHARS)
    tex = environment().get_template("anatomy.tex.j2").render(pages=pages, notes_below=kept, note_pages=note_pages)
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
    first, rest = LANDSCAPE_LINES - 13, LANDSCAPE_LINES - 6
    pages = paginate(_grouped(rows, lambda r: (r["gpu"], r["model"]), lambda r: f"{r['gpu']}, {r['model']}"), first, rest)
    kept, note_pages = place_notes([note] if note else [], room_left(pages, first, rest), PORTRAIT_LINES - 2, LANDSCAPE_CHARS)
    tex = environment().get_template("host.tex.j2").render(pages=pages, notes_below=kept, note_pages=note_pages)
    _write(tex, out_tex, log, out_numbers)


def sensitivity_table(stats_files, gpus: dict, models: dict, headline: dict, out_tex, out_numbers) -> None:
    """Does the headline move with the estimator or the validity filters? For every A/B cell, each
    speedup estimator with its interval; for every A/B cell and the headline model and context's
    single-mode cells, the estimate as the stability limit and the host-nominal factor move."""
    from decodegap.analysis.stats import ESTIMATORS

    log = NumberLog("sensitivity")
    estimators, filters, below = {}, {}, False
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
                estimators.setdefault(cid, {"title": f"{label}: {sp['n_sessions']} sessions on {sp['n_machines']} machines",
                                            "rows": []})["rows"].append(
                    {"estimator": e["label"] + (" (headline)" if name == "geomean" else ""), "estimate": est, "ci": ci})
        for filt, field in (("stability", "limit"), ("host_nominal", "factor")):
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
                    if arm is not None and below_floor(lo, ((s.get("completed") or {}).get("arms") or {}).get(arm)):
                        ci, below = ci + BELOW_FLOOR_MARK, True
                    filters.setdefault(cid, {"title": f"{label}: {'speedup' if arm is None else 'ms/step'}", "rows": []})["rows"].append(
                        {"filter": "stability rule" if filt == "stability" else "host-nominal",
                         "rule": "none (the completed scope)" if threshold is None else (
                             f"rel. stdev < {shown}" if filt == "stability" else f"probe <= {shown}x fast tail"),
                         "n": t["n_sessions"], "m": t["n_machines"], "estimate": est, "ci": ci})
    # floats, each of parts (the estimators' tabular, the filters'): the filters start under the
    # estimators where room is left, else on a float of their own
    first, rest = PORTRAIT_LINES - 14, PORTRAIT_LINES - 6
    floats = [[{"kind": "estimators", "groups": p}] for p in paginate(list(estimators.values()), first, rest)]
    room = room_left([f[0]["groups"] for f in floats], first, rest) - 5
    filt_pages = paginate(list(filters.values()), room if room >= 10 else rest, rest)
    if room >= 10:
        floats[-1].append({"kind": "filters", "groups": filt_pages.pop(0)})
    floats += [[{"kind": "filters", "groups": p}] for p in filt_pages]
    tex = environment().get_template("sensitivity.tex.j2").render(floats=floats, symbols=[BELOW_FLOOR_NOTE] if below else [])
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
    first, rest = PORTRAIT_LINES - 12, PORTRAIT_LINES - 6
    pages = paginate(_grouped(rows, lambda r: (r["gpu"], r["model"], r["ctx"]), lambda r: f"{r['gpu']}, {r['model']}, ctx {r['ctx']}"),
                     first, rest)
    tex = environment().get_template("variance.tex.j2").render(pages=pages)
    _write(tex, out_tex, log, out_numbers)


def environment_table(record_files, gpus: dict, out_tex, out_numbers) -> None:
    """GPU type x path: runs (with the kernel's package version), or the reason it does not, from
    each GPU type's environment record (decodegap.measure.setup). Each distinct reason is one note."""
    log = NumberLog("environment")
    rows, stacks, notes = [], [], _Notes()
    for f in sorted(record_files):
        with open(f) as fh:
            r = json.load(fh)
        name = gpus.get(r["gpu"], {}).get("display_name", r["gpu"])
        libs = r.get("libraries") or {}
        stacks.append({"gpu": name, "file": Path(f).as_posix(), "created": r.get("created_utc", "--"), "driver": r.get("driver") or "--",
                       "cuda": r.get("cuda") or "--", "torch": libs.get("torch") or "--", "transformers": libs.get("transformers") or "--",
                       "device": (r.get("gpu_device") or {}).get("name") or r.get("device", "--")})

        def runs(ok, reason):
            return "yes" if ok else Markup(rf"no\textsuperscript{{{notes.mark(reason)}}}") if reason else "no"

        for path, a in sorted((r.get("attention") or {}).items()):
            for form, c in sorted(a["checks"].items()):
                rows.append({"gpu": name, "kind": "attention", "path": path, "form": f"{form} cache",
                             "package": f"{a['package']} {a.get('version') or '?'}", "runs": runs(c["runs"], c["reason"])})
        for path, w in sorted((r.get("weights") or {}).items()):
            rows.append({"gpu": name, "kind": "weights", "path": path, "form": "GEMV", "package": f"{w['package']} {w.get('version') or '?'}",
                         "runs": runs(w["runs"], w["reason"])})
    first, rest = PORTRAIT_LINES - 12 - 3 * len(stacks), PORTRAIT_LINES - 6
    pages = paginate(_grouped(rows, lambda r: r["gpu"], lambda r: r["gpu"]), first, rest)
    kept, note_pages = place_notes(notes.notes, room_left(pages, first, rest), PORTRAIT_LINES - 2)
    tex = environment().get_template("environment.tex.j2").render(pages=pages, stacks=stacks, notes_below=kept, note_pages=note_pages)
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
    fail_text = "Where it fails (held-out cells more than 10 % off): " + ("; ".join(failures) + "." if failures else "none.")
    used = 14 + sum(text_lines(c["meaning"], 40) for c in coefficients) + len(errors) + 6
    kept, note_pages = place_notes([fail_text], PORTRAIT_LINES - used, PORTRAIT_LINES - 2)
    tex = environment().get_template("model.tex.j2").render(coefficients=coefficients, errors=errors, notes_below=kept, note_pages=note_pages)
    _write(tex, out_tex, log, out_numbers)
