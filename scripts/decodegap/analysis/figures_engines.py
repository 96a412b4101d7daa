"""Engines at batch 1, as a figure (re-exported by decodegap.analysis.figures): the rows of
report/tables/engines.tex (tables_engines: the same arms, chosen the same way) as points on a
milliseconds axis, a panel per GPU, card and context, so a reader sees at a glance how far each way
of running the step is from the bf16 memory floor (the dashed line)."""

from __future__ import annotations

import matplotlib.ticker

from decodegap.analysis import style as S
from decodegap.analysis.tables_common import _cell_id, arm_scope, best_arms, load_stats
from decodegap.analysis.tables_engines import ENGINES, PER_PATH, SCOPE, engine_paths
from decodegap.core.cells import arms_of


def _save(fig, outputs) -> None:
    from decodegap.analysis import figures  # looked up when called: figures.save is the one save (tests wrap it)

    figures.save(fig, outputs)


def engines(stats_files, plan_cells: list[dict], gpus: dict, models: dict, outputs) -> None:
    """ms/step per engine (colour and marker: the mode; the fused step's weight paths: the fused
    colour with the path's marker), median of completed sessions with its 95 % interval over
    machines, against the cell's memory floor; an engine planned but not measured is named at the
    axis, with no point."""
    S.setup()
    stats = {_cell_id(s["cell"]): s for s in load_stats(stats_files)}
    groups = list(dict.fromkeys((c["gpu"], c["model"], c["ctx"]) for c in plan_cells))
    if not groups:
        fig, axes = S.grid(1)
        S.not_measured(axes[0])
        _save(fig, outputs)
        return
    fig, axes = S.grid(len(groups), panel=(3.6, 2.9))
    seen, crossed = {}, False
    for ax, (gpu, model, ctx) in zip(axes, groups):
        cells = [c for c in plan_cells if (c["gpu"], c["model"], c["ctx"]) == (gpu, model, ctx)]
        best = best_arms(cells, stats, SCOPE)
        labels, floor_ms, right, intervals = [], None, 0.0, []
        for engine, arm in ENGINES:
            if not any(arm in arms_of(c["mode"]) for c in cells):
                continue
            for quant in engine_paths(cells, arm):
                y = len(labels)
                labels.append(S.short(f"{S.mode_style(arm).label}" + (f" {quant.removeprefix('gguf-')}" if arm in PER_PATH else ""), 22))
                hit = best.get((quant, arm))
                if hit is None:
                    ax.text(0.02, y, "not measured", transform=ax.get_yaxis_transform(), va="center", fontsize=6.5, color="0.4")
                    continue
                a = hit[0][arm_scope(hit[0], arm, SCOPE)]["arms"][arm]
                if quant == "bf16" and floor_ms is None:
                    floor_ms = a.get("t_floor_ms")  # the bf16 step's floor: the line every row is read against
                st = S.mode_style(arm)
                marker = S.weight_style(quant).marker if arm in PER_PATH and quant != "bf16" else st.marker
                ax.scatter([a["median_ms"]], [y], s=S.area(st), zorder=3, gid=S.gid("mode", arm),
                           **{**S.filled(st), "marker": marker})
                seen[arm] = st
                right = max(right, a["median_ms"], min(a.get("ci_high_ms") or 0.0, 1.5 * a["median_ms"]))
                if a.get("ci_low_ms") is not None:
                    intervals.append((y, a["ci_low_ms"], a["ci_high_ms"], st.color))
                else:
                    S.no_interval(ax, a["median_ms"], y)
                    crossed = True
        limits = (0.0, max(right, floor_ms or 0.0, 1e-3) * 1.1)
        for y, lo, hi, color in intervals:  # drawn once the axis is known: one cut at its edge gets an arrowhead
            S.interval(ax, y, lo, hi, limits, color, vertical=False)
        if floor_ms:
            ax.axvline(floor_ms, color="0.3", lw=0.9, ls="--", zorder=1)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=6.5)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlim(*limits)  # an interval past 1.5x its median ends in an arrowhead at the edge
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        ax.set_title(S.join([S.display(gpus, gpu), S.display(models, model), f"ctx {ctx}"], width=44), fontsize=8)
        ax.set_xlabel("ms per step")
    handles = [S.handle(st, label=st.label) for st in seen.values()]
    handles.append(matplotlib.lines.Line2D([], [], color="0.3", ls="--", lw=0.9, label="bf16 memory floor (W + K at datasheet bandwidth)"))
    if crossed:
        handles.append(S.cross_handle())
    S.legend_below(fig, handles)
    _save(fig, outputs)
