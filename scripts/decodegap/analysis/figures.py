r"""Figures (seaborn/matplotlib, PDF and PNG), one function per figure, all in the one style of
decodegap.analysis.style: a mode, weight path or attention path has the same colour and marker in
every figure; published points of the paper are hollow beside the filled measured ones, so a GPU
without measurements still has its place; legends sit below the axes; log axes carry plain numbers.

The figures draw statistics (the cells' stats.json and the anatomy's rows); they compute none.

Every string from the user's configuration (display names, keys, modes) reaches matplotlib through
`style.literal` (via `style.short` / `style.join`), which escapes `$` so matplotlib never reads it as
mathtext: `Qwen $2.5$` and `a\b$c$` are drawn as typed (outside mathtext a backslash is an ordinary
character); a very long name is ellipsized. Labels the code writes itself, such as the R_floor axis
label, keep their math. Glyphs DejaVu Sans lacks (emoji, CJK) come from style.FALLBACK_FONTS.
"""

from __future__ import annotations

import dataclasses
import math

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from decodegap.analysis import style as S  # noqa: E402
from decodegap.analysis.style import FALLBACK_FONTS, fallback_fonts, literal, save  # noqa: E402,F401 - the figures' API as before
from decodegap.analysis.tables import SCOPE_LABEL, SCOPES, load_stats  # noqa: E402
from decodegap.analysis.figures_engines import engines  # noqa: E402,F401 - engines at batch 1, in a file of its own

MODE_MARKERS = {m: s.marker for m, s in S.MODE_STYLE.items()}
BEYOND_LINES = {"compiled": "--", "fused": ":"}  # the anatomy's ticks for the steps beyond the paper


def style() -> None:
    S.setup()


def _measured_arms(stats: list[dict]) -> pd.DataFrame:
    rows = []
    for s in stats:
        for scope in ("completed",):  # the headline scope (stats.py)
            for arm, a in ((s.get(scope) or {}).get("arms") or {}).items():
                if a:
                    row = {k: a[k] for k in ("median_ms", "ci_low_ms", "ci_high_ms", "r_floor", "b_peak_Bps")}
                    row.update({k: float("nan") for k in ("ci_low_ms", "ci_high_ms") if row[k] is None})  # no interval: one machine
                    rows.append({**s["cell"], "arm": arm, "scope": scope, "status": s["status"], "no_ci": a.get("no_ci_reason") is not None,
                                 "n_machines": a.get("n_machines"), **row})
    return pd.DataFrame(rows)


def _best_scope(df: pd.DataFrame) -> pd.DataFrame:
    """One row per arm of a cell (the completed scope)."""
    if df.empty:
        return df
    return df.groupby(["gpu", "model", "ctx", "attn", "quant", "mode", "arm"], as_index=False).first()


def _model_table_from_config() -> dict:
    """The model table of config/models.yaml (what the workflow passes as `models`), for a figure
    whose caller passes none: the ladder's title names the headline model by its display name."""
    try:
        from decodegap.core.config import load_models

        return {k: {"display_name": m.display_name} for k, m in load_models().items()}
    except Exception:  # noqa: BLE001 - no readable table: the key stands in
        return {}


def _cross(ax, x, y) -> None:
    """No interval (one machine or session): a black cross beside the marker."""
    S.no_interval(ax, x, y)


# ---------------------------------------------------------------------------------------------- ladder

def ladder(stats_files, reference: list[dict], gpus: dict, headline_model: str, headline_ctx: int, outputs) -> None:
    """R_floor against datasheet bandwidth: the paper's inverted ladder, measured (filled, one marker
    and colour per mode) and published (hollow)."""
    S.setup()
    df = _best_scope(_measured_arms(load_stats(stats_files)))
    if not df.empty:
        # a plain-mode cell's arm, and the compiled and fused arms of the floor experiment's A/B cells
        # (every weight path: the mode's colour, the path's marker beyond bf16)
        beyond = df["arm"].isin(list(BEYOND_LINES))
        df = df[(df["model"] == headline_model) & (df["ctx"] == headline_ctx) & ((df["mode"] == df["arm"]) | beyond)]
    fig, ax = plt.subplots(figsize=(5.4, 4.3), layout="constrained")
    handles, flagged_any = [], False
    for arm in S.ordered("mode", df["arm"] if not df.empty else []):
        for quant in S.ordered("weights", df.loc[df["arm"] == arm, "quant"]):
            st = S.mode_style(arm)
            if quant != "bf16":
                st = dataclasses.replace(st, marker=S.weight_style(quant).marker, label=f"{st.label}, {quant}")
            for _, r in df[(df["arm"] == arm) & (df["quant"] == quant)].iterrows():
                ax.scatter(r["b_peak_Bps"] / 1e9, r["r_floor"], s=S.area(st), zorder=4,
                           gid=S.gid("mode", arm), **S.filled(st))
                if r["no_ci"]:
                    _cross(ax, r["b_peak_Bps"] / 1e9, r["r_floor"])
                    flagged_any = True
            handles.append(S.handle(st, label=f"{st.label}, measured"))
    published = [f for f in reference if f["quantity"] == "r_floor" and f.get("gpu") in gpus
                 and f.get("model") in (None, headline_model) and f.get("ctx") in (None, headline_ctx)]
    for f in published:
        st = S.mode_style(f.get("mode"))
        ax.scatter(gpus[f["gpu"]]["b_peak_Bps"] / 1e9, f["value"], s=S.area(st), zorder=4, gid=S.gid("mode", f.get("mode")), **S.hollow(st))
        handles.append(S.handle(st, hollow=True, label=f"{st.label}, published"))
    if flagged_any:
        handles.append(S.cross_handle("× beside a point: one machine, no interval"))
    shown = sorted((g["b_peak_Bps"] / 1e9, g["display_name"]) for key, g in gpus.items() if key != "cpu")
    ax.set_xscale("log")
    if shown:
        ax.set_xlim(shown[0][0] / 1.4, shown[-1][0] * 1.4)
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([bw for bw, _ in shown]))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter([f"{S.short(name, 30)}\n{bw:.0f}" for bw, name in shown]))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")
    ax.set_xlabel("datasheet peak memory bandwidth (GB/s)")
    ax.set_ylabel(r"$R_\mathrm{floor} = t_\mathrm{floor} / t_\mathrm{obs}$")
    ax.set_ylim(0, 1.05)
    models = _model_table_from_config()
    ax.set_title(S.join([S.display(models, headline_model), f"ctx {headline_ctx}", "batch 1"]))
    S.legend_below(fig, handles, ncol=3)
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- context

def context(stats_files, gpus: dict, models: dict, outputs) -> None:
    """ms/step against context length, one panel per GPU and model, one line per mode (its colour and
    marker), 95 % intervals over machines. The y axis spans the medians (each interval counted up to
    3x from its median): an interval wider than that runs off the axis and ends in an arrowhead at
    its edge; a cell on one machine or session (no interval) has a cross."""
    S.setup()
    df = _best_scope(_measured_arms(load_stats(stats_files)))
    if not df.empty:
        df = df[df["mode"] == df["arm"]]
    panels = []
    if not df.empty:
        gpu_order = [g for g in gpus if g in set(df["gpu"])] + sorted(set(df["gpu"]) - set(gpus))
        model_order = [m for m in models if m in set(df["model"])] + sorted(set(df["model"]) - set(models))
        panels = [(g, m) for g in gpu_order for m in model_order if ((df["gpu"] == g) & (df["model"] == m)).any()]
    fig, axes = S.grid(len(panels), ncols=3 if len(panels) >= 3 else None, panel=(2.9, 2.6), sharex=True, sharey=True)
    if not panels:
        S.not_measured(axes[0])
        save(fig, outputs)
        return
    modes = S.ordered("mode", df["arm"])
    limits = S.span(list(df["median_ms"]), list(df["ci_low_ms"]), list(df["ci_high_ms"]))
    dodge = {m: (i - (len(modes) - 1) / 2) * 0.09 for i, m in enumerate(modes)}  # log2 units: intervals side by side
    cut_any = flagged_any = False
    for ax, (gpu, model) in zip(axes, panels):
        sub = df[(df["gpu"] == gpu) & (df["model"] == model)]
        for arm in S.ordered("mode", sub["arm"]):
            st = S.mode_style(arm)
            g = sub[sub["arm"] == arm].sort_values("ctx")
            xs = [c * 2 ** dodge[arm] for c in g["ctx"]]
            ax.plot(xs, g["median_ms"], color=st.color, marker=st.marker, ms=S.MARKER_SIZE - 1, lw=1.2, ls=st.linestyle,
                    mec="white", mew=0.5, zorder=3, gid=S.gid("mode", arm))
            for x, (_, r) in zip(xs, g.iterrows()):
                cut_any |= S.interval(ax, x, r["ci_low_ms"], r["ci_high_ms"], limits, st.color, gid_=S.gid("mode", arm))
                if r["no_ci"] or not math.isfinite(r["ci_low_ms"]):
                    _cross(ax, x, r["median_ms"])
                    flagged_any = True
        ax.set_title(S.join([S.display(gpus, gpu), S.display(models, model)], width=S.chars(ax.figure.get_figwidth() / min(3, len(panels)))))
    ctxs = sorted(df["ctx"].unique())
    for ax in axes:
        S.fixed_log2_axis(ax, ctxs)
        S.log_axis(ax, "y")
        ax.set_ylim(*limits)
        ax.set_xlim(ctxs[0] / 1.35, ctxs[-1] * 1.35)
    S.outer_labels(fig, axes, "context (tokens)", "ms per step (median, 95 % CI)")
    handles = [S.handle(S.mode_style(m), line=True, label=S.mode_style(m).label) for m in modes]
    if flagged_any:
        handles.append(S.cross_handle())
    if cut_any:
        handles.append(S.off_axis_handle("interval runs off the axis: arrowhead at its edge (its ends: matrix tables)"))
    S.legend_below(fig, handles, ncol=len(handles))
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- ab

def ab(stats_files, reference: list[dict], gpus: dict, models: dict, outputs) -> None:
    """A/B speedups (geometric mean of per-session ratios) with their intervals over machines:
    measured, in each scope, and published. One group of rows per A/B cell; a point has the colour
    and marker of arm A, the arm B is measured against."""
    S.setup()
    groups = []  # (header, [(label, x, lo, hi, published, arm_a, no_ci)])
    for s in load_stats(stats_files):
        c = s["cell"]
        arm_a, arm_b = s["arms"][0], s["arms"][1]
        rows = []
        for scope in SCOPES:
            sp = (s.get(scope) or {}).get("speedup")
            if sp and sp.get("estimate") is not None:
                ci = sp.get("ci")
                m = sp["n_machines"]
                label = f"{SCOPE_LABEL[scope]}: {sp['n_sessions']} sessions, {m} machine{'s' if m != 1 else ''}" + ("" if ci else ", no interval")
                rows.append((label, sp["estimate"], ci[0] if ci else None, ci[1] if ci else None, False, sp.get("over", arm_a), not ci))
        if rows:
            groups.append((S.join([S.display(gpus, c["gpu"]), S.display(models, c["model"]), f"ctx {c['ctx']}: {arm_b} over {arm_a}"],
                                  width=46), rows))
    for f in reference:
        if f["quantity"] == "speedup" and str(f.get("mode") or "").startswith("ab-") and f.get("gpu") in gpus:
            same = [g for g in reference if g.get("gpu") == f["gpu"] and g.get("mode") == f.get("mode")]
            lo = next((g["value"] for g in same if g["quantity"] == "speedup_ci_low"), None)
            hi = next((g["value"] for g in same if g["quantity"] == "speedup_ci_high"), None)
            n = next((g["value"] for g in same if g["quantity"] == "n_sessions"), None)
            a_arm, b_arm = f["mode"][3:].split("-", 1) if "-" in f["mode"][3:] else (None, None)
            label = "published" + (f": {n:g} sessions" if n else "") + ("" if lo is not None else ", no interval stated")
            groups.append((S.join([S.display(gpus, f["gpu"]), f"the paper: {b_arm} over {a_arm}"], width=46),
                           [(label, f["value"], lo, hi, True, a_arm, False)]))
    n_rows = sum(1 + 0.64 * h.count("\n") + len(r) for h, r in groups)
    height = min(S.MAX_SIDE_IN, max(2.8, 0.19 * n_rows + 1.4))
    fig, ax = plt.subplots(figsize=(6.6, height), layout="constrained")
    if not groups:
        S.not_measured(ax)
        save(fig, outputs)
        return
    points = [(x, lo, hi) for _, rows in groups for _, x, lo, hi, *_ in rows]
    limits = S.span([p[0] for p in points], [p[1] for p in points], [p[2] for p in points], pad=1.2)
    limits = (min(limits[0], 0.9), limits[1])  # 1 (no speedup) always in view
    ticks, labels, bold, seps, y = [], [], [], [], 0.0
    arms_seen, hollow_seen, cut_any, flagged_any = [], False, False, False
    for header, rows in groups:
        if y > 0:
            seps.append(y - 0.5)
        half = 0.5 + 0.32 * header.count("\n")  # a header of several lines gets the room it takes
        ticks.append(y + half - 0.5), labels.append(header), bold.append(True)
        y += 2 * half
        for label, x, lo, hi, published, arm_a, no_ci in rows:
            st = S.mode_style(arm_a)
            cut_any |= S.interval(ax, y, lo, hi, limits, "0.25", vertical=False, gid_=None)
            kw = S.hollow(st) if published else S.filled(st)
            ax.scatter(x, y, s=S.area(st), zorder=4, gid=S.gid("mode", arm_a), **kw)
            if no_ci:
                _cross(ax, x, y)
                flagged_any = True
            hollow_seen |= published
            if not published and arm_a not in arms_seen:
                arms_seen.append(arm_a)
            ticks.append(y), labels.append(literal(label)), bold.append(False)
            y += 1
    ax.set_ylim(y - 0.4, -0.6)
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(labels))
    for t, b in zip(ax.get_yticklabels(), bold):  # no bold: the emoji and CJK fallback fonts have none
        t.set_fontsize(7.5 if b else 6.5)
        t.set_color("black" if b else "0.3")
    ax.grid(axis="y", visible=False)
    for t in seps:
        ax.axhline(t, color="0.85", lw=0.6)
    ax.axvline(1.0, color="0.5", lw=0.8, ls=":")
    S.log_axis(ax, "x")
    ax.set_xlim(*limits)
    ax.set_xlabel("speedup of arm B over arm A\n(geometric mean of per-session ratios; 95 % CI over machines)")
    handles = [S.handle(S.mode_style(a), label=f"measured, over {S.mode_style(a).label}") for a in S.ordered("mode", arms_seen)]
    if hollow_seen:
        handles.append(S.handle(S.UNSTATED, hollow=True, label="hollow: published by the paper"))
    if flagged_any:
        handles.append(S.cross_handle())
    if cut_any:
        handles.append(S.off_axis_handle())
    S.legend_below(fig, handles, ncol=2)
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- host

def host(stats_files, gpus: dict, models: dict, outputs) -> None:
    """Per block of steps: its median step time against the host core's speed beside it (the CPU
    probe, ns per iteration). A launch-bound arm (eager, static) climbs as the core slows; a GPU-bound
    arm (graphed) stays flat. One panel per A/B cell whose sessions carry the probe, wrapped in rows."""
    S.setup()
    cells = [s for s in load_stats(stats_files) if s.get("host_blocks")]
    fig, axes = S.grid(len(cells), ncols=2, panel=(3.4, 2.6), sharex=True, sharey=True)
    if not cells:
        S.not_measured(axes[0], "no sessions with the host CPU probe")
        save(fig, outputs)
        return
    arms, kinds, factors = [], set(), set()
    lo, hi = math.inf, 0.0
    for ax, s in zip(axes, cells):
        df = pd.DataFrame(s["host_blocks"])
        for arm in S.ordered("mode", df["arm"]):
            st = S.mode_style(arm)
            g = df[df["arm"] == arm]
            ax.scatter(g["probe_ns_per_iter"], g["median_ms"], marker=st.marker, color=st.color, s=14, alpha=0.75,
                       edgecolors="none", zorder=3, gid=S.gid("mode", arm))
            arms.append(arm)
        lo, hi = min(lo, df["median_ms"].min()), max(hi, df["median_ms"].max())
        rule = s.get("host_nominal_rule")
        if rule:
            ax.axvline(rule["limit_ns_per_iter"], color="0.35", lw=0.9, ls="--", zorder=2)
            factors.add(rule["factor"])
        kinds.add("step" if str(df["probe"].iloc[0]).startswith("step") else "block")
        c = s["cell"]
        vs = " vs ".join(s.get("arms") or [])
        ax.set_title(S.join([S.display(gpus, c["gpu"]), S.display(models, c["model"]), f"ctx {c['ctx']}: {vs}"],
                            width=S.chars(ax.figure.get_figwidth() / min(2, len(cells)))))
    for ax in axes:
        S.log_axis(ax, "y")
        ax.set_ylim(lo / 1.15, hi * 1.15)
    probe = {"step": "median around each step", "block": "before the block"}
    S.outer_labels(fig, axes, f"host CPU probe, ns/iteration ({', '.join(probe[k] for k in sorted(kinds, reverse=True))})\nhigher = slower core",
                   "block median ms per step")
    handles = [S.handle(S.mode_style(a), label=S.mode_style(a).label) for a in S.ordered("mode", arms)]
    if factors:
        f = ", ".join(f"{x:g}" for x in sorted(factors))
        handles.append(Line2D([], [], color="0.35", lw=0.9, ls="--", label=f"host-nominal limit ({f} x the fast tail)"))
    S.legend_below(fig, handles, ncol=4)
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- anatomy

ANATOMY_PARTS = [("floor_ms", "floor (datasheet)"), ("kernel_inefficiency_ms", "kernel inefficiency"),
                 ("graph_gaps_ms", "graph gaps"), ("launch_tax_ms", "launch tax"), ("cache_framework_ms", "cache & framework")]
ANATOMY_COLORS = S.ANATOMY_PART_COLORS


def anatomy(stats_files, gpus: dict, models: dict, outputs) -> None:
    """Stacked parts of the step (decodegap.analysis.anatomy), one panel per GPU, one bar per model
    and context (grouped by model). A bar stops where a part was not measured; a tick in the mode's
    colour marks the graphed step, dashed and dotted ticks the compiled and fused steps where measured."""
    from decodegap.analysis.anatomy import rows as anatomy_rows

    S.setup()
    rows = anatomy_rows(load_stats(stats_files))
    # bars for bf16; another weight path's fused step is a marker on the bf16 bar of its GPU, model and context
    packed = {}
    for r in rows:
        if r["quant"] != "bf16" and r.get("fused_ms") is not None:
            packed.setdefault((r["gpu"], r["model"], r["ctx"]), {})[r["quant"]] = r["fused_ms"]
    rows = [r for r in rows if r["quant"] == "bf16"]
    gpu_keys = list(dict.fromkeys(r["gpu"] for r in rows))
    most = max((sum(r["gpu"] == g for r in rows) for g in gpu_keys), default=1)
    width = min(S.MAX_SIDE_IN / 2, max(4.6, 0.36 * most + 1.2))
    fig, axes = S.grid(len(gpu_keys), ncols=1 if width > 5 else 2, panel=(width, 2.9), sharey=True, extra_h=0.9)
    if not rows:
        S.not_measured(axes[0])
        save(fig, outputs)
        return
    ticks_seen = []
    for ax, gpu in zip(axes, gpu_keys):
        mine = [r for r in rows if r["gpu"] == gpu]
        model_order = [m for m in models if any(r["model"] == m for r in mine)] + sorted({r["model"] for r in mine} - set(models))
        mine = sorted(mine, key=lambda r: (model_order.index(r["model"]), r["ctx"]))
        xs, x, prev, centers = [], 0.0, None, {}
        for r in mine:
            if prev is not None and r["model"] != prev:
                x += 0.6  # a gap between models
            xs.append(x)
            centers.setdefault(r["model"], []).append(x)
            prev, x = r["model"], x + 1
        for xi, r in zip(xs, mine):
            bottom = 0.0
            for part, label in ANATOMY_PARTS:
                value = r[part]
                if value is None:
                    break
                ax.bar(xi, value, bottom=bottom, color=ANATOMY_COLORS[part], width=0.72, edgecolor="white", linewidth=0.4,
                       label=label, zorder=2)
                bottom += value
            for mode in ("graphed", *BEYOND_LINES):  # how far below the graphed step each lever gets
                if r.get(f"{mode}_ms") is not None:
                    st = S.mode_style(mode)
                    ax.plot([xi - 0.42, xi + 0.42], [r[f"{mode}_ms"]] * 2, color=st.color, lw=2.0, ls=st.linestyle,
                            solid_capstyle="butt", zorder=4, gid=S.gid("mode", mode))
                    ticks_seen.append(mode)
            here = packed.get((r["gpu"], r["model"], r["ctx"]), {})
            for i, quant in enumerate(S.ordered("weights", here)):  # side by side across the bar, in the paths' order
                ms, st = here[quant], S.weight_style(quant)
                ax.scatter([xi + 0.24 * (i - (len(here) - 1) / 2)], [ms], marker=st.marker, s=26, color=S.mode_style("fused").color, edgecolors="white", linewidths=0.5,
                           zorder=5, gid=S.gid("weights", quant))
                ticks_seen.append(f"fused:{quant}")
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(xs))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter([S.plain(r["ctx"]) for r in mine]))
        ax.tick_params(axis="x", labelsize=6.5, pad=1)
        ax.grid(axis="x", visible=False)
        # the model under its group of bars, cut to the group's width
        slot_in = (width - 0.8) / (xs[-1] + 1.2)
        sec = ax.secondary_xaxis("bottom")
        sec.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([sum(v) / len(v) for v in centers.values()]))
        sec.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(
            [S.short(S.display(models, m), S.chars(slot_in * (len(v) + 0.5), 7) if len(centers) > 1 else S.LABEL_CHARS)
             for m, v in centers.items()]))
        sec.tick_params(axis="x", length=0, pad=13, labelsize=7)
        sec.spines["bottom"].set_visible(False)
        ax.set_title(S.join([S.display(gpus, gpu)], width=S.chars(width)))
        sec.set_xlabel("context (tokens), by model")
        ax.set_xlim(-0.6, xs[-1] + 0.6)
    S.outer_labels(fig, axes, None, "ms per step")
    handles = [S.patch(ANATOMY_COLORS[p], label) for p, label in ANATOMY_PARTS]
    handles += [Line2D([], [], color=S.mode_style(m).color, lw=2.0, ls=S.mode_style(m).linestyle, label=f"{m} step")
                for m in S.ordered("mode", [t for t in ticks_seen if ":" not in t])]
    handles += [Line2D([], [], color=S.mode_style("fused").color, marker=S.weight_style(q).marker, ls="none", label=f"fused step, {q}")
                for q in S.ordered("weights", [t.split(":", 1)[1] for t in ticks_seen if t.startswith("fused:")])]
    S.legend_below(fig, handles, ncol=4)
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- deployment

def deployment(stats_files, reference: list[dict], gpus: dict, outputs) -> None:
    """Latency against cost per token: every measured cell on a priced GPU (filled, completed
    sessions) and the paper's published step times at the same prices (hollow). Colour: the decode
    mode (grey where the paper does not state it); marker: the weight path. Each GPU's points lie
    on its price line (cost = price x time), drawn grey and labelled with its name and price."""
    from decodegap.analysis.stats import cost_per_mtok

    S.setup()
    fig, ax = plt.subplots(figsize=(5.8, 4.9), layout="constrained")
    pts = []  # (ms, cost, gpu, mode, quant, published)
    for s in load_stats(stats_files):
        for arm, a in ((s.get("completed") or {}).get("arms") or {}).items():
            if a and a.get("cost_usd_per_mtok"):
                c = s["cell"]
                pts.append((a["median_ms"], a["cost_usd_per_mtok"], c["gpu"], arm, c["quant"], False))
    for f in reference:
        price = gpus.get(f.get("gpu"), {}).get("price_usd_per_hour")
        if f["quantity"] == "ms_per_step" and price:
            pts.append((f["value"], cost_per_mtok(price, f["value"]), f["gpu"], f.get("mode"), f.get("quant") or "bf16", True))
    if not pts:
        S.not_measured(ax, "no priced cell")
        save(fig, outputs)
        return
    modes, quants = [], []
    # measured first, published on top
    for ms, cost, gpu, mode, quant, published in sorted(pts, key=lambda p: p[5]):
        mst, qst = S.mode_style(mode), S.weight_style(quant)
        st = S.Style(mst.color, qst.marker, mst.label)
        ax.scatter(ms, cost, s=S.area(st, 1.2 if published else 0.8), zorder=5 if published else 3,
                   gid=f"{S.gid('mode', mode)}|{S.gid('weights', quant, 'marker')}", **(S.hollow(st) if published else S.filled(st)))
        modes.append(mode)
        quants.append(quant)
    S.log_axis(ax, "x")
    S.log_axis(ax, "y")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    xlim = (min(xs) / 1.5, max(xs) * 1.5)
    ylim = (min(ys) / 1.5, max(ys) * 1.5)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    # one price line per GPU with points: every point of a GPU lies on it; labels alternate between
    # the line's right and left ends (cheapest first), so close lines keep their labels apart
    priced = sorted((gpus[g]["price_usd_per_hour"], g) for g in dict.fromkeys(p[2] for p in pts) if gpus.get(g, {}).get("price_usd_per_hour"))
    for i, (price, gpu) in enumerate(priced):
        k = cost_per_mtok(price, 1.0)  # $/Mtok per ms
        ax.plot(xlim, [k * xlim[0], k * xlim[1]], color="0.72", lw=0.8, zorder=1)
        right = i % 2 == 0
        x_lab = min(xlim[1] / 1.1, ylim[1] / 1.1 / k) if right else max(xlim[0] * 1.1, ylim[0] * 1.1 / k)
        if xlim[0] < x_lab < xlim[1] and ylim[0] < k * x_lab < ylim[1]:
            ax.text(x_lab, k * x_lab, literal(f"{S.display(gpus, gpu, 20)} ${price:.2f}/h"), fontsize=6, color="0.35",
                    rotation=math.degrees(math.atan(k)), transform_rotates_text=True, rotation_mode="anchor",
                    ha="right" if right else "left", va="bottom" if right else "top", zorder=2)
    ax.set_xlabel("ms per token (batch 1)")
    ax.set_ylabel(r"\$ per million tokens")  # \$: a dollar sign, not mathtext
    # colour entries as patches (the marker here is the weight path's)
    handles = [S.patch(S.mode_style(m).color, S.mode_style(m).label) for m in S.ordered("mode", [m for m in modes if m])]
    if None in modes:
        handles.append(S.patch(S.UNSTATED.color, "mode unstated"))
    handles += [S.handle(S.Style("0.3", S.weight_style(q).marker, q), label=short_q) for q, short_q in
                ((q, S.short(q, 20)) for q in S.ordered("weights", quants))]
    handles += [S.handle(S.UNSTATED, label="filled: measured"), S.handle(S.UNSTATED, hollow=True, label="hollow: published (the paper's time)")]
    S.legend_below(fig, handles, ncol=3, title="colour: decode mode    marker: weight path    grey line: a GPU's price")
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- attention

def attention(stats_files, reference: list[dict], gpus: dict, models: dict, outputs) -> None:
    """us/layer against KV length, one panel per GPU and head layout, one colour and marker per path:
    graphed (filled, solid) and op by op (hollow, dashed); the paper's H100 figures as stars in a
    column of their own at the left (the paper states no context)."""
    S.setup()
    rows = []
    for s in load_stats(stats_files):
        if s["cell"]["mode"] != "layer":
            continue
        for arm, a in ((s.get("completed") or {}).get("arms") or {}).items():
            if a and a.get("us_per_layer") is not None:
                rows.append({**s["cell"], "arm": arm, "us": a["us_per_layer"]})
    df = pd.DataFrame(rows)
    panels = list(dict.fromkeys(zip(df["gpu"], df["model"]))) if not df.empty else []
    fig, axes = S.grid(len(panels), ncols=2, panel=(3.5, 2.9), sharey=True, extra_h=1.0)
    if df.empty:
        S.not_measured(axes[0])
        save(fig, outputs)
        return
    paper = [f for f in reference if f["quantity"] == "attention_us_per_layer" and f.get("attn")]
    paths = S.ordered("attention", list(df["attn"]) + [f["attn"] for f in paper])
    ticks = sorted(df["ctx"].unique())
    x_paper = ticks[0] / 2.2
    # paths side by side around each KV length (log2 units): two paths on one kernel stay visible
    dodge = {p: (i - (len(paths) - 1) / 2) * 0.035 for i, p in enumerate(paths)}
    lo, hi = min(df["us"].min(), min((f["value"] for f in paper), default=math.inf)), max(df["us"].max(), max((f["value"] for f in paper), default=0))
    for ax, (gpu, model) in zip(axes, panels):
        sub = df[(df["gpu"] == gpu) & (df["model"] == model)]
        for attn in S.ordered("attention", sub["attn"]):
            st = S.attention_style(attn)
            for arm, g in sub[sub["attn"] == attn].groupby("arm", sort=False):
                g = g.sort_values("ctx")
                graphed = arm == "layer-graphed"
                ax.plot(g["ctx"] * 2 ** dodge[attn], g["us"], marker=st.marker, ms=S.MARKER_SIZE - 1, ls="-" if graphed else "--", lw=1.2 if graphed else 0.9,
                        color=st.color, mfc=st.color if graphed else S.HOLLOW_FACE, mec=st.color, zorder=3, gid=S.gid("attention", attn))
        for f in paper:
            ax.scatter([x_paper * 2 ** (2 * dodge.get(f["attn"], 0))], [f["value"]], marker="*", s=70, color=S.attention_style(f["attn"]).color, edgecolors="white",
                       linewidths=0.4, zorder=5, gid=S.gid("attention", f["attn"]))
        ax.axvline(ticks[0] / 1.45, color="0.8", lw=0.8)
        S.fixed_log2_axis(ax, [x_paper, *ticks], labels=["paper", *[S.plain(t) for t in ticks]])
        S.log_axis(ax, "y")
        ax.set_ylim(lo / 1.25, hi * 1.25)
        ax.set_xlim(x_paper / 1.4, ticks[-1] * 1.3)
        ax.set_title(S.join([S.display(gpus, gpu), f"{S.display(models, model)} layout"], width=S.chars(ax.figure.get_figwidth() / min(2, len(panels)))))
        ax.set_xlabel("KV length (tokens)")
    axes[0].set_ylabel("µs per layer (median)")
    for ax in axes:
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel("µs per layer (median)")
    handles = [S.handle(S.attention_style(p), line=True, label=S.short(p, 20)) for p in paths]
    handles += [Line2D([], [], color="0.3", marker="o", ms=4, ls="-", label="graphed (replayed, filled)"),
                Line2D([], [], color="0.3", marker="o", ms=4, mfc="white", ls="--", lw=0.9, label="op by op (launched, hollow)")]
    if paper:
        where = ", ".join(dict.fromkeys(S.display(gpus, f.get("gpu"), 20) for f in paper))
        handles.append(Line2D([], [], color="0.3", marker="*", ms=7, ls="none", label=literal(f"the paper ({where}; no context stated)")))
    S.legend_below(fig, handles, ncol=5)
    save(fig, outputs)


# ---------------------------------------------------------------------------------------------- quantization

def quantization(stats_files, gpus: dict, models: dict, outputs) -> None:
    """The graphed step's speedup over bf16 per weight path (one colour per path), one group of bars
    per cell (GPU, model, ctx), and the ideal speedup if the step were its memory traffic,
    (W_bf16 + K)/(W_q + K), as a black tick over each bar: the gap between bar and tick is what the
    kernel leaves on the table."""
    from decodegap.analysis.tables import quant_numbers

    S.setup()
    stats = load_stats(stats_files)
    by_cell = {(s["cell"]["gpu"], s["cell"]["model"], s["cell"]["ctx"], s["cell"]["attn"], s["cell"]["mode"], s["cell"]["quant"]): s
               for s in stats}
    rows = []
    for key, s in by_cell.items():
        base = by_cell.get((*key[:5], "bf16"))
        if key[5] == "bf16" or base is None:
            continue
        if not all(((x.get("completed") or {}).get("arms") or {}).get("graphed") for x in (s, base)):
            continue
        q = quant_numbers(s, base, "graphed")
        rows.append({"path": key[5], "gpu": key[0], "model": key[1], "ctx": key[2], "speedup": q["speedup_over_bf16"], "ideal": q["ideal_speedup"]})
    df = pd.DataFrame(rows)
    if df.empty:
        fig, axes = S.grid(1)
        S.not_measured(axes[0])
        save(fig, outputs)
        return
    paths = S.ordered("weights", df["path"])
    model_order = {m: i for i, m in enumerate(models)}
    cells = sorted(dict.fromkeys(zip(df["gpu"], df["model"], df["ctx"])), key=lambda c: (list(gpus).index(c[0]) if c[0] in gpus else 99,
                                                                                        c[2], model_order.get(c[1], 99)))
    several_gpus = len({c[0] for c in cells}) > 1
    group_w = 0.16 * len(paths) + 0.35  # inches per cell
    per_row = max(1, int(9.0 // group_w))
    chunks = [cells[i:i + per_row] for i in range(0, len(cells), per_row)]
    panel_w = max(4.5, min(9.5, group_w * len(chunks[0]) + 1.0))
    label_cols = S.chars((panel_w - 0.8) / len(chunks[0]), 6.5)  # a cell's label: as wide as its group of bars
    fig, axes = S.grid(len(chunks), ncols=1, panel=(panel_w, 2.8), sharey=True)
    width = 0.8 / len(paths)
    for ax, chunk in zip(axes, chunks):
        for j, path in enumerate(paths):
            st = S.weight_style(path)
            xs, ys, ideal = [], [], []
            for i, cell in enumerate(chunk):
                hit = df[(df["gpu"] == cell[0]) & (df["model"] == cell[1]) & (df["ctx"] == cell[2]) & (df["path"] == path)]
                if len(hit):
                    xs.append(i - 0.4 + width * (j + 0.5))
                    ys.append(hit["speedup"].iloc[0])
                    ideal.append(hit["ideal"].iloc[0])
            if xs:
                ax.bar(xs, ys, width=width * 0.88, color=st.color, zorder=2, gid=S.gid("weights", path))
                ax.scatter(xs, ideal, marker="_", s=max(30, 900 * width ** 2), color="black", linewidths=1.5, zorder=4)
        ax.axhline(1.0, color="0.4", lw=0.8, ls=":", zorder=1)
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(range(len(chunk))))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(
            ["\n".join(([S.short(S.display(gpus, c[0]), label_cols)] if several_gpus else []) + [S.short(S.display(models, c[1]), label_cols), f"ctx {c[2]}"])
             for c in chunk]))
        ax.tick_params(axis="x", labelsize=6.5)
        ax.grid(axis="x", visible=False)
        ax.set_xlim(-0.55, len(chunk) - 0.45)
        ax.set_ylabel("graphed speedup over bf16")
        ax.set_ylim(0, max(df["ideal"].max(), df["speedup"].max()) * 1.1)
    gpu_names = ", ".join(dict.fromkeys(S.display(gpus, c[0]) for c in cells))
    axes[0].set_title(S.join([gpu_names, "bars: measured", "ticks: ideal (W+K traffic)"], width=60))
    handles = [S.patch(S.weight_style(p).color, S.short(p, 20)) for p in paths]
    handles.append(Line2D([], [], marker="_", color="black", ms=9, mew=1.5, ls="none", label="ideal: (W_bf16 + K) / (W_q + K)"))
    S.legend_below(fig, handles, ncol=len(handles) if len(handles) <= 4 else 4)
    save(fig, outputs)
