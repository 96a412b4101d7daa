"""The anatomy of a decode step: where each millisecond of a cell goes.

For one (gpu, model, ctx, attn, quant) the eager, static and graphed step times and the graphed
step's GPU busy time (from the untimed profiler pass) split the eager step into parts that add up:

    floor               t_floor = (W + K) / B_peak, the datasheet memory floor
    kernel inefficiency GPU busy time - floor: the kernels themselves, slower than the bytes they move
    graph gaps          graphed - GPU busy time: idle device time inside one replayed graph, and the
                        token read back to the host
    launch tax          static - graphed: the same kernels launched op by op from the host
    cache & framework   eager - static: the dynamic KV cache and what it makes the framework do
                        (SDPA's dispatcher picking another attention kernel, for one)

so that floor + inefficiency + gaps = graphed, + launch tax = static, + cache & framework = eager.
The copy ceiling ((W + K) over the measured copy bandwidth) is shown beside the floor.

Each mode's time comes from the cell (a single-mode matrix cell or an arm of an A/B cell) with the
most sessions in its scope: for the op-by-op modes (eager, static) the host-nominal steps, those run
while the host core was at full speed (stats.py), so that a part is the cost on this host and not
on a slowed one; for graphed, whose time does not follow the host, all completed sessions. An
op-by-op mode without the CPU probe falls back to its completed sessions, flagged. A part whose
inputs were not measured is None.
"""

from __future__ import annotations

from decodegap.core.cells import MODE_NAMES as MODES
from decodegap.core.cells import NEWEST_CODE, OP_BY_OP, OWN_KERNELS
PARTS = ("floor_ms", "kernel_inefficiency_ms", "graph_gaps_ms", "launch_tax_ms", "cache_framework_ms")
ATTENTION_OPS = ("aten::scaled_dot_product_attention",)


def group_key(cell: dict) -> tuple:
    return cell["gpu"], cell["model"], cell["ctx"], cell["attn"], cell["quant"]


def estimates(stats_list: list[dict]) -> dict[tuple, dict[str, dict]]:
    """{group: {mode: estimate}}, each estimate the arm with the most sessions in the mode's first scope."""
    out: dict[tuple, dict[str, dict]] = {}
    for s in stats_list:
        for scope in ("host_nominal", NEWEST_CODE, "completed"):
            for arm, a in ((s.get(scope) or {}).get("arms") or {}).items():
                if not a or arm not in MODES or scope not in SCOPE_ORDER[arm]:
                    continue
                est = {"median_ms": a["median_ms"], "n_sessions": a["n_sessions"], "scope": scope, "arm": arm,
                       "stats_file": s.get("_file"), "cell": s["cell"], "t_floor_ms": a["t_floor_ms"],
                       "t_ceiling_ms": a.get("t_ceiling_ms"),
                       "anatomy": a.get("anatomy")}
                mine = out.setdefault(group_key(s["cell"]), {})
                if arm not in mine or _rank(est) > _rank(mine[arm]):
                    mine[arm] = est
    return out


# op-by-op steps follow the host's speed, so their nominal-host scope comes first; a graph-replayed
# step (graphed, compiled, fused) does not, and takes every completed session, except that decodegap's
# own kernels take their newest code's sessions where their cell spans versions (NEWEST_CODE)
SCOPE_ORDER = {m: ("host_nominal", "completed") if m in OP_BY_OP else (NEWEST_CODE, "completed") if m in OWN_KERNELS else ("completed",)
               for m in MODES}


def _rank(est: dict) -> tuple:
    return (-SCOPE_ORDER[est["arm"]].index(est["scope"]), est["n_sessions"], est["anatomy"] is not None)


def decompose(by_mode: dict[str, dict]) -> dict:
    """The parts of one group's step (ms), from its mode estimates; None where an input is missing."""
    t = {m: by_mode[m]["median_ms"] if m in by_mode else None for m in MODES}
    ref = by_mode.get("graphed") or next(iter(by_mode.values()))  # floor and ceiling beside the graphed step
    floor = ref["t_floor_ms"]
    busy_from = next((m for m in ("graphed", "static") if m in by_mode and (by_mode[m]["anatomy"] or {}).get("gpu_busy_ms_per_step") is not None), None)
    busy = by_mode[busy_from]["anatomy"]["gpu_busy_ms_per_step"] if busy_from else None

    def minus(a, b):
        return None if a is None or b is None else a - b

    return {
        "eager_ms": t["eager"], "static_ms": t["static"], "graphed_ms": t["graphed"],
        "compiled_ms": t["compiled"], "fused_ms": t["fused"],  # beyond the paper: the steps below graphed
        "floor_ms": floor, "ceiling_ms": ref["t_ceiling_ms"], "gpu_busy_ms": busy,
        "kernel_inefficiency_ms": minus(busy, floor), "graph_gaps_ms": minus(t["graphed"], busy),
        "launch_tax_ms": minus(t["static"], t["graphed"]), "cache_framework_ms": minus(t["eager"], t["static"]),
        "kernels_per_step": {m: (by_mode[m]["anatomy"] or {}).get("kernels_per_step") for m in by_mode},
        "attention_host_ms": {m: attention_host_ms(by_mode[m]["anatomy"]) for m in by_mode},
        "flagged": sorted(m for m, e in by_mode.items() if m in OP_BY_OP and e["scope"] != SCOPE_ORDER[m][0]),  # op by op without the probe
    }


def attention_host_ms(anatomy: dict | None) -> float | None:
    """Host CPU ms per step spent in the attention dispatch (the SDPA op and all it calls)."""
    if not anatomy:
        return None
    hits = [o["cpu_total_ms_per_step"] for o in anatomy["host_ops"] if o["name"] in ATTENTION_OPS]
    return hits[0] if hits else None


def rows(stats_list: list[dict]) -> list[dict]:
    """One decomposition per group, sorted by gpu, model, ctx."""
    out = []
    for key, by_mode in sorted(estimates(stats_list).items()):
        gpu, model, ctx, attn, quant = key
        out.append({"gpu": gpu, "model": model, "ctx": ctx, "attn": attn, "quant": quant, "inputs": by_mode, **decompose(by_mode)})
    return out
