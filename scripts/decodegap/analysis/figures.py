r"""Figures (seaborn, one shared style, PDF and PNG). Published points of the paper are drawn beside
measured ones, hollow and labelled "published", so a GPU without measurements still has its place.

Every string from the user's configuration (display names, keys, modes) reaches matplotlib through
`literal`, which escapes `$` so matplotlib never reads it as mathtext: `Qwen $2.5$` and `a\b$c$` are
drawn as typed (outside mathtext a backslash is an ordinary character). Labels the code writes
itself, such as the R_floor axis label, keep their math. Glyphs DejaVu Sans lacks (emoji, CJK) come
from the first installed font of FALLBACK_FONTS that has them: a CJK font (Debian: fonts-droid-fallback,
fonts-noto-cjk or fonts-wqy-zenhei) for CJK, Symbola (fonts-symbola) for emoji and other symbols.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.font_manager
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from decodegap.analysis.tables import SCOPE_LABEL, SCOPES, load_stats  # noqa: E402

MODE_MARKERS = {"eager": "o", "static": "D", "graphed": "s", "compiled": "^", "fused": "*"}
BEYOND_LINES = {"compiled": "--", "fused": ":"}  # the anatomy's ticks for the steps beyond the paper

# Tried in this order for a glyph the default sans-serif font (DejaVu Sans) lacks; only the ones
# installed are used, so a machine without them draws what it can and warns about the rest.
# CJK fonts come before Symbola, which has a few ideographs of its own: a name is drawn in one face.
FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Source Han Sans", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
                  "Droid Sans Fallback", "AR PL UMing CN", "Symbola", "Noto Sans Symbols", "Noto Sans Symbols2")
_rescanned = False


def literal(s) -> str:
    """A user's string (display name, key, mode) as matplotlib text: drawn literally, never as math.
    matplotlib parses text with an even number of unescaped `$` as mathtext; escaped, it has none,
    and matplotlib turns each `\\$` back into `$`. Other backslashes are plain characters there."""
    return str(s).replace("$", r"\$")


def fallback_fonts() -> list[str]:
    """The FALLBACK_FONTS matplotlib can find. A font installed after matplotlib built its font
    cache is not in the cache: look for new font files once before giving up on one."""
    global _rescanned
    fm = matplotlib.font_manager.fontManager
    known = {f.name for f in fm.ttflist}
    if not _rescanned and not all(name in known for name in FALLBACK_FONTS):
        _rescanned = True
        cached = {f.fname for f in fm.ttflist}
        for path in matplotlib.font_manager.findSystemFonts():
            if path not in cached:
                try:
                    fm.addfont(path)
                except Exception:  # noqa: BLE001 - an unreadable font file is just not a fallback
                    pass
        known = {f.name for f in fm.ttflist}
    return [name for name in FALLBACK_FONTS if name in known]


def style() -> None:
    sns.set_theme(context="paper", style="whitegrid", palette="colorblind", font_scale=1.0)
    plt.rcParams.update({"figure.dpi": 150, "savefig.bbox": "tight", "pdf.fonttype": 42, "text.usetex": False,
                         "font.family": ["sans-serif", *fallback_fonts()]})


def save(fig, outputs) -> None:
    for out in outputs:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        # No timestamps in the files: a rebuild from the same stats gives the same bytes.
        meta = {"CreationDate": None} if str(out).endswith(".pdf") else {"Software": None}
        fig.savefig(out, metadata=meta)
    plt.close(fig)


def _measured_arms(stats: list[dict]) -> pd.DataFrame:
    rows = []
    for s in stats:
        for scope in ("completed",):  # the headline scope (stats.py)
            for arm, a in ((s.get(scope) or {}).get("arms") or {}).items():
                if a:
                    row = {k: a[k] for k in ("median_ms", "ci_low_ms", "ci_high_ms", "r_floor", "b_peak_Bps")}
                    row.update({k: float("nan") for k in ("ci_low_ms", "ci_high_ms") if row[k] is None})  # no interval: one machine
                    rows.append({**s["cell"], "arm": arm, "scope": scope, "status": s["status"], "no_ci": a.get("no_ci_reason") is not None, **row})
    return pd.DataFrame(rows)


def _best_scope(df: pd.DataFrame) -> pd.DataFrame:
    """One row per arm of a cell (the completed scope)."""
    if df.empty:
        return df
    return df.groupby(["gpu", "model", "ctx", "attn", "quant", "mode", "arm"], as_index=False).first()


def ladder(stats_files, reference: list[dict], gpus: dict, headline_model: str, headline_ctx: int, outputs) -> None:
    """R_floor against datasheet bandwidth: the paper's inverted ladder, measured and published."""
    style()
    df = _best_scope(_measured_arms(load_stats(stats_files)))
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    if not df.empty:
        # a plain-mode cell's arm, and the compiled and fused arms of the floor experiment's A/B cells (bf16)
        beyond = df["arm"].isin(list(BEYOND_LINES)) & (df["quant"] == "bf16")
        df = df[(df["model"] == headline_model) & (df["ctx"] == headline_ctx) & ((df["mode"] == df["arm"]) | beyond)]
    colors = dict(zip(MODE_MARKERS, sns.color_palette(n_colors=len(MODE_MARKERS))))
    for _, r in df.iterrows():
        flagged = bool(r["no_ci"])
        ax.scatter(r["b_peak_Bps"] / 1e9, r["r_floor"], marker=MODE_MARKERS.get(r["arm"], "o"), s=45,
                   color=colors.get(r["arm"]), alpha=0.45 if flagged else 1.0,
                   label=literal(f"measured, {r['arm']}" + (" (one machine: no interval)" if flagged else "")))
    for f in reference:
        if f["quantity"] == "r_floor" and f.get("gpu") in gpus:
            ax.scatter(gpus[f["gpu"]]["b_peak_Bps"] / 1e9, f["value"], marker=MODE_MARKERS.get(f.get("mode") or "eager", "o"),
                       s=45, facecolors="none", edgecolors="black", label=literal(f"published, {f.get('mode') or 'mode unstated'}"))
    shown = sorted((g["b_peak_Bps"] / 1e9, g["display_name"]) for key, g in gpus.items() if key != "cpu")
    ax.set_xscale("log")
    ax.set_xticks([bw for bw, _ in shown], [literal(f"{name}\n{bw:.0f}") for bw, name in shown], fontsize=7, rotation=30, ha="right")
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("datasheet peak memory bandwidth (GB/s)")
    ax.set_ylabel(r"$R_\mathrm{floor} = t_\mathrm{floor} / t_\mathrm{obs}$")
    ax.set_ylim(0, 1.05)
    ax.set_title(literal(f"{headline_model}, ctx {headline_ctx}, batch 1"), fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    if uniq:
        ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="upper right")
    save(fig, outputs)


def context(stats_files, gpus: dict, models: dict, outputs) -> None:
    """ms/step against context length, one panel per GPU, one line per model and mode."""
    style()
    df = _best_scope(_measured_arms(load_stats(stats_files)))
    gpu_keys = list(dict.fromkeys(df["gpu"])) if not df.empty else []
    fig, axes = plt.subplots(1, max(1, len(gpu_keys)), figsize=(4.2 * max(1, len(gpu_keys)), 3.4), squeeze=False)
    if df.empty:
        axes[0][0].text(0.5, 0.5, "not measured", ha="center", va="center", transform=axes[0][0].transAxes)
    palette = dict(zip(models, sns.color_palette(n_colors=len(models))))
    for ax, gpu in zip(axes[0], gpu_keys):
        sub = df[(df["gpu"] == gpu) & (df["mode"] == df["arm"])]
        for (model, arm), g in sub.groupby(["model", "arm"]):
            g = g.sort_values("ctx")
            ax.errorbar(g["ctx"], g["median_ms"], yerr=[g["median_ms"] - g["ci_low_ms"], g["ci_high_ms"] - g["median_ms"]],
                        marker=MODE_MARKERS.get(arm, "o"), ls="-" if arm == "graphed" else "--", color=palette.get(model),
                        label=literal(f"{models[model]['display_name']}, {arm}"), ms=4, capsize=2)
            flagged = g[g["no_ci"]]
            ax.scatter(flagged["ctx"], flagged["median_ms"], marker="x", color="black", s=18, zorder=5,
                       label="one machine or session: no interval" if len(flagged) else None)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted(df["ctx"].unique()), [str(c) for c in sorted(df["ctx"].unique())])
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_title(literal(gpus[gpu]["display_name"]), fontsize=9)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("ms/step (median, 95 % CI)")
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.legend(uniq.values(), uniq.keys(), fontsize=6)
    save(fig, outputs)


def ab(stats_files, reference: list[dict], gpus: dict, models: dict, outputs) -> None:
    """A/B speedups (geometric mean of per-session ratios) with their intervals over machines:
    measured, in each scope, and published."""
    style()
    rows = []
    for s in load_stats(stats_files):
        for scope in SCOPES:
            sp = (s.get(scope) or {}).get("speedup")
            if sp and sp.get("estimate") is not None:
                ci = sp.get("ci")
                arms = "/".join(s["arms"])
                model = models.get(s["cell"]["model"], {}).get("display_name", s["cell"]["model"])
                rows.append({"label": literal(f"{gpus[s['cell']['gpu']]['display_name']} {model} {arms}\n"
                                              f"{SCOPE_LABEL[scope]} (n={sp['n_sessions']}, {sp['n_machines']} machines)"),
                             "x": sp["estimate"], "lo": ci[0] if ci else None, "hi": ci[1] if ci else None, "published": False})
    for f in reference:
        if f["quantity"] == "speedup" and str(f.get("mode") or "").startswith("ab-") and f.get("gpu") in gpus:
            lo = next((g["value"] for g in reference if g["quantity"] == "speedup_ci_low" and g["gpu"] == f["gpu"]), None)
            hi = next((g["value"] for g in reference if g["quantity"] == "speedup_ci_high" and g["gpu"] == f["gpu"]), None)
            rows.append({"label": literal(f"{gpus[f['gpu']]['display_name']}\npublished"), "x": f["value"], "lo": lo, "hi": hi, "published": True})
    fig, ax = plt.subplots(figsize=(5.5, 0.55 * max(3, len(rows)) + 0.8))
    for i, r in enumerate(rows):
        if r["lo"] is not None:
            ax.plot([r["lo"], r["hi"]], [i, i], color="black", lw=1.2)
        ax.scatter(r["x"], i, s=40, marker="o", facecolors="none" if r["published"] else sns.color_palette()[1], edgecolors="black")
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=7)
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("speedup of arm B over arm A (95 % CI over machines; hollow = published)")
    if not rows:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    save(fig, outputs)


def host(stats_files, gpus: dict, models: dict, outputs) -> None:
    """Per block of steps: its median step time against the host core's speed beside it (the CPU
    probe, ns per iteration). A launch-bound arm (eager) climbs as the core slows; a GPU-bound arm
    (graphed) stays flat. One panel per A/B cell whose sessions carry the probe."""
    style()
    cells = [s for s in load_stats(stats_files) if s.get("host_blocks")]
    fig, axes = plt.subplots(1, max(1, len(cells)), figsize=(4.6 * max(1, len(cells)), 3.4), squeeze=False)
    for ax, s in zip(axes[0], cells):
        df = pd.DataFrame(s["host_blocks"])
        sns.scatterplot(data=df, x="probe_ns_per_iter", y="median_ms", hue="arm", style="arm", markers=MODE_MARKERS, ax=ax, s=22, alpha=0.8)
        rule = s.get("host_nominal_rule")
        if rule:
            ax.axvline(rule["limit_ns_per_iter"], color="0.5", lw=0.8, ls="--",
                       label=f"host-nominal limit ({rule['factor']} x the fast tail)")
        c = s["cell"]
        ax.set_title(literal(f"{gpus[c['gpu']]['display_name']}, {models[c['model']]['display_name']}, ctx {c['ctx']}"), fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        probe = "around each step, block median" if df["probe"].iloc[0].startswith("step") else "before the block"
        ax.set_xlabel(f"host CPU probe, ns/iteration ({probe}; higher = slower core)")
        ax.set_ylabel("block median ms/step")
        ax.legend(fontsize=6)
    if not cells:
        axes[0][0].text(0.5, 0.5, "no sessions with the host CPU probe", ha="center", va="center", transform=axes[0][0].transAxes)
    save(fig, outputs)


ANATOMY_PARTS = [("floor_ms", "floor (datasheet)"), ("kernel_inefficiency_ms", "kernel inefficiency"),
                 ("graph_gaps_ms", "graph gaps"), ("launch_tax_ms", "launch tax"), ("cache_framework_ms", "cache & framework")]


def anatomy(stats_files, gpus: dict, models: dict, outputs) -> None:
    """Stacked parts of the step (decodegap.analysis.anatomy), one panel per GPU, one bar per model
    and context. A bar stops where a part was not measured; a tick marks the graphed step, dashed and
    dotted ticks the compiled and fused steps where measured."""
    from decodegap.analysis.anatomy import rows as anatomy_rows

    style()
    rows = anatomy_rows(load_stats(stats_files))
    gpu_keys = list(dict.fromkeys(r["gpu"] for r in rows))
    fig, axes = plt.subplots(1, max(1, len(gpu_keys)), figsize=(max(5.5, 0.45 * len(rows) + 2), 3.8), squeeze=False)
    colors = sns.color_palette(n_colors=len(ANATOMY_PARTS))
    for ax, gpu in zip(axes[0], gpu_keys):
        mine = [r for r in rows if r["gpu"] == gpu]
        for i, r in enumerate(mine):
            bottom = 0.0
            for (part, label), color in zip(ANATOMY_PARTS, colors):
                value = r[part]
                if value is None:
                    break
                ax.bar(i, value, bottom=bottom, color=color, label=label, width=0.7)
                bottom += value
            if r["graphed_ms"] is not None:
                ax.plot([i - 0.4, i + 0.4], [r["graphed_ms"]] * 2, color="black", lw=1, label="graphed step")
            for mode, ls in BEYOND_LINES.items():  # how far below the graphed step each lever gets
                if r.get(f"{mode}_ms") is not None:
                    ax.plot([i - 0.4, i + 0.4], [r[f"{mode}_ms"]] * 2, color="black", lw=1.2, ls=ls, label=f"{mode} step")
        ax.set_xticks(range(len(mine)), [f"{literal(models[r['model']]['display_name'])}\nctx {r['ctx']}" for r in mine], fontsize=6, rotation=45, ha="right")
        ax.set_ylabel("ms per step")
        ax.set_title(literal(gpus[gpu]["display_name"]), fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles))
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # headroom: the legend sits above the bars, not on them
        ax.legend(uniq.values(), uniq.keys(), fontsize=6, ncol=3, loc="upper center")
    if not rows:
        axes[0][0].text(0.5, 0.5, "not measured", ha="center", va="center", transform=axes[0][0].transAxes)
    save(fig, outputs)


def deployment(stats_files, reference: list[dict], gpus: dict, outputs) -> None:
    """Latency against cost per token, one point per GPU, mode and weight path: measured (filled,
    completed sessions on a priced GPU) and the paper's published step times at the same prices (hollow)."""
    from decodegap.analysis.stats import cost_per_mtok

    style()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    palette = dict(zip(gpus, sns.color_palette(n_colors=len(gpus))))
    points = 0
    for s in load_stats(stats_files):
        for arm, a in ((s.get("completed") or {}).get("arms") or {}).items():
            if a and a.get("cost_usd_per_mtok"):
                c = s["cell"]
                ax.scatter(a["median_ms"], a["cost_usd_per_mtok"], marker=MODE_MARKERS.get(arm, "o"), color=palette[c["gpu"]], s=30,
                           label=f"{literal(gpus[c['gpu']]['display_name'])}, {arm} ({c['quant']}), measured")
                points += 1
    for f in reference:
        price = gpus.get(f.get("gpu"), {}).get("price_usd_per_hour")
        if f["quantity"] == "ms_per_step" and price:
            ax.scatter(f["value"], cost_per_mtok(price, f["value"]), marker=MODE_MARKERS.get(f.get("mode") or "graphed", "o"), s=40,
                       facecolors="none", edgecolors=palette[f["gpu"]],
                       label=f"{literal(gpus[f['gpu']]['display_name'])}, {f.get('mode') or 'mode unstated'} ({f.get('quant')}), published")
            points += 1
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ms per token (batch 1)")
    ax.set_ylabel(r"\$ per million tokens")  # \$: a dollar sign, not mathtext
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    if uniq:
        ax.legend(uniq.values(), uniq.keys(), fontsize=5, loc="upper left")
    if not points:
        ax.text(0.5, 0.5, "no priced cell", ha="center", va="center", transform=ax.transAxes)
    save(fig, outputs)


def attention(stats_files, reference: list[dict], gpus: dict, models: dict, outputs) -> None:
    """us/layer against KV length, one panel per GPU and head layout, one colour per path: graphed
    (filled, solid) and op by op (hollow, dashed); the paper's H100 figures as stars at the left."""
    style()
    rows = []
    for s in load_stats(stats_files):
        if s["cell"]["mode"] != "layer":
            continue
        for arm, a in ((s.get("completed") or {}).get("arms") or {}).items():
            if a and a.get("us_per_layer") is not None:
                rows.append({**s["cell"], "arm": arm, "us": a["us_per_layer"]})
    df = pd.DataFrame(rows)
    panels = list(dict.fromkeys(zip(df["gpu"], df["model"]))) if not df.empty else []
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.4 * max(1, len(panels)) + 1.2, 3.6), squeeze=False)
    if df.empty:
        axes[0][0].text(0.5, 0.5, "not measured", ha="center", va="center", transform=axes[0][0].transAxes)
    paper = [f for f in reference if f["quantity"] == "attention_us_per_layer" and f.get("attn")]
    paths = list(dict.fromkeys((list(df["attn"]) if not df.empty else []) + [f["attn"] for f in paper]))  # one colour per path, stars too
    palette = dict(zip(paths, sns.color_palette("tab10", n_colors=max(1, len(paths)))))
    for ax, (gpu, model) in zip(axes[0], panels):
        sub = df[(df["gpu"] == gpu) & (df["model"] == model)]
        for (attn, arm), g in sub.groupby(["attn", "arm"], sort=False):
            g = g.sort_values("ctx")
            graphed = arm == "layer-graphed"
            ax.plot(g["ctx"], g["us"], marker="o", ms=4, ls="-" if graphed else "--", color=palette[attn],
                    mfc=palette[attn] if graphed else "white", label=literal(attn) if graphed else None)
        xmin = sub["ctx"].min() if not sub.empty else 2048
        for f in paper:
            ax.scatter([xmin / 1.6], [f["value"]], marker="*", s=60, color=palette.get(f["attn"], "black"), zorder=5)
            ax.annotate(literal(f"{f['attn']} (paper, {gpus.get(f['gpu'], {}).get('display_name', f['gpu'])})"),
                        (xmin / 1.6, f["value"]), fontsize=5, xytext=(4, 0), textcoords="offset points", va="center")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted(sub["ctx"].unique())
        ax.set_xticks(ticks, [str(c) for c in ticks])
        ax.set_xlim(xmin / 2, max(ticks) * 1.3 if ticks else 32768)
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_title(literal(f"{gpus[gpu]['display_name']}, {models[model]['display_name']} layout"), fontsize=9)
        ax.set_xlabel("KV length (tokens)")
        ax.set_ylabel("µs per layer (median)")
    # one legend for all panels, beside them: inside, it hid the slow paths' lines
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    if handles:
        fig.tight_layout(rect=(0, 0, 0.84, 1))
        fig.legend(list(handles.values()), list(handles), fontsize=7, title="graphed (solid)\nop by op (dashed)", title_fontsize=7,
                   loc="center left", bbox_to_anchor=(0.845, 0.5), frameon=False)
    save(fig, outputs)


def quantization(stats_files, gpus: dict, models: dict, outputs) -> None:
    """The graphed step's speedup over bf16 per weight path, one bar per cell (GPU, model, ctx), and
    the ideal speedup if the step were its memory traffic, (W_bf16 + K)/(W_q + K), as a black tick:
    the gap between bar and tick is what the kernel leaves on the table."""
    from decodegap.analysis.tables import quant_numbers

    style()
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
        rows.append({"path": key[5], "cell": f"{models[key[1]]['display_name']} ctx {key[2]}", "gpu": gpus[key[0]]["display_name"],
                     "speedup": q["speedup_over_bf16"], "ideal": q["ideal_speedup"]})
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    if df.empty:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        save(fig, outputs)
        return
    paths_ = list(dict.fromkeys(df["path"]))
    cells = list(dict.fromkeys(df["cell"]))
    width = 0.8 / len(cells)
    palette = dict(zip(cells, sns.color_palette("tab10", n_colors=len(cells))))
    for j, cell in enumerate(cells):
        sub = df[df["cell"] == cell].set_index("path")
        xs = [i - 0.4 + width * (j + 0.5) for i, p in enumerate(paths_) if p in sub.index]
        present = [p for p in paths_ if p in sub.index]
        ax.bar(xs, sub.loc[present, "speedup"], width=width * 0.9, color=palette[cell], label=literal(cell))
        ax.scatter(xs, sub.loc[present, "ideal"], marker="_", s=120, color="black", zorder=5)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xticks(range(len(paths_)), [literal(p) for p in paths_])
    ax.set_ylabel("graphed speedup over bf16")
    ax.set_title(literal(", ".join(dict.fromkeys(df["gpu"]))) + ": bars measured, ticks ideal (W+K traffic)", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    fig.tight_layout()
    save(fig, outputs)
