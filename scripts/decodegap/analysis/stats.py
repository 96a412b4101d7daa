"""Statistics of one cell, from its per-cell Parquet tables.

- Replicates and intervals: machines (a GPU on a host boot), resampled by the cluster bootstrap,
  Student-t intervals (decodegap.analysis.bootstrap says how and why).
- ms/step: the median of the steps pooled over sessions.
- R_floor = t_floor / t_obs with t_floor = (W + K) / B_peak: W and K as measured in the session,
  B_peak from the GPU table of the analysis config (a user may correct a datasheet figure without
  re-measuring); also without the input embedding table (a step reads one row of it) and against the
  measured copy ceiling. Its interval maps the ms/step interval through the monotone 1/x.
- tokens/s and cost per million tokens (from the GPU's price per hour, where the table has one).
- A/B cells: the speedup by every estimator (decodegap.analysis.bootstrap), the geometric mean of
  per-session ratios first.
- Variance components per arm and of the speedup's log ratios.

Scopes: completed (the headline: every session whose timed loop ran to the end, however spread;
no selection on the outcome), valid (also passing the protocol's stability rule; a session spent
wholly on a slowed host core passes it, so it selects on the host's state and is reported beside,
not as, the headline) and host_nominal (below); newest_code (a cell whose sessions ran several
versions of the measured code: the newest version with two or more sessions; see NEWEST_CODE). The sensitivity record gives the estimate and
interval as the stability limit and the host-nominal factor move.

Host-nominal steps. An op-by-op step is CPU work on one core, so on a host whose core speed changes
(a shared VM host, a busy SMT sibling, frequency scaling) its time follows the host, not the GPU.
Each session runs a fixed pure-Python probe before every block of steps, and (sessions from
2026-11-29 on) a short one just before and after every step. A step is host-nominal when its
probe (the slower of the two around it; else the one before its block) took at most
host_nominal_factor x the cell's fast tail (1st percentile): the core ran at about its full speed.
The host_nominal scope keeps only those steps of completed sessions. It answers "what is the step
time, or the speedup, when the host is not slowed", beside "completed" (what this host gave).
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pandas as pd

from decodegap.analysis import hostmodel
from decodegap.analysis.bootstrap import (  # noqa: F401 - the statistics' public names, as callers import them
    ESTIMATORS, LEVELS, StatsConfig, hierarchical_bootstrap_medians, interval, median_with_ci, n_units, no_interval_reason,
    session_counts, speedup_estimates, speedup_with_ci, variance_components)
from decodegap.core.cells import LAYER_ARMS, NEWEST_CODE, OP_BY_OP
from decodegap.core.floor import MemoryFloor
from decodegap.core.record import SampleIndex


def _time_column(cfg: StatsConfig, arms=()) -> str:
    """The step time the statistics read. The attention microbenchmark's arms (mode layer) are
    always timed by their CUDA events, which bracket the step's calls: its host clock also holds
    the step's sync and token read, a fixed ~40 us that is not the attention's (it would add 1-2
    us to every layer's figure)."""
    if cfg.time_source == "device" or any(a in LAYER_ARMS for a in ([arms] if isinstance(arms, str) else arms)):
        return "device_ms"
    return "host_ms"


def cost_per_mtok(price_usd_per_hour: float, ms_per_step: float) -> float:
    """Dollars per million tokens of one stream: a token every ms_per_step, the GPU rented by the hour."""
    return price_usd_per_hour * ms_per_step / 3.6


def _steps_by_session(sel: pd.DataFrame, col: str) -> tuple[list[int], list[np.ndarray]]:
    """Session ids and each one's finite step times (sessions without any left out)."""
    ids, out = [], []
    for sid, g in sel.groupby("session", sort=True, observed=True):
        x = g[col].to_numpy(dtype=float)
        x = x[~np.isnan(x)]
        if x.size:
            ids.append(int(sid))
            out.append(x)
    return ids, out


def machine_labels(sessions: pd.DataFrame, ids) -> list[str]:
    """The machine of each session id (sessions.parquet's machine column). A hand-built frame
    without one makes every session its own machine."""
    if "machine" not in sessions:
        return [f"session-{i}" for i in ids]
    first = sessions.drop_duplicates("session").set_index("session")
    if "gpu_uuid" in first and "boot_id" in first:
        # A GPU seen both before and after records carried the boot id is one machine, not two:
        # the boot id splits a GPU's sessions only where every one of them has it.
        partial = {u for u, g in first.groupby("gpu_uuid", dropna=True)["boot_id"] if g.isna().any()}
        return [str(first.at[i, "gpu_uuid"]) if first.at[i, "gpu_uuid"] in partial else str(first.at[i, "machine"]) for i in ids]
    return [str(first.at[i, "machine"]) for i in ids]


def arm_stats(sessions: pd.DataFrame, steps: pd.DataFrame, arm: str, gpu: dict, cfg: StatsConfig, rng) -> dict | None:
    """ms/step, R_floor, tokens/s and cost for one arm over the given sessions; None without steps."""
    col = _time_column(cfg, arm)
    sel = steps[steps["arm"] == arm]
    ids, by_session = _steps_by_session(sel, col)
    if not by_session:
        return None
    machines = machine_labels(sessions, ids)
    out = median_with_ci(by_session, cfg, rng, machines)
    out["machines"] = sorted(set(machines))
    out["variance"] = variance_components(np.array([np.median(x) for x in by_session]), machines,
                                          np.array([np.std(x, ddof=1) if x.size > 1 else 0.0 for x in by_session]))
    srow = sessions[sessions["arm"] == arm].iloc[0]
    w, w_noemb, k = srow["weight_bytes"], srow["weight_bytes_no_embedding"], srow["kv_bytes"]
    b_peak = float(gpu["b_peak_Bps"])  # the analysis config's, as in sessions.parquet
    copy_Bps = float(sessions.loc[sessions["arm"] == arm, "copy_bandwidth_Bps"].median())
    floor = MemoryFloor(int(w), int(w_noemb), int(k), b_peak, copy_Bps if copy_Bps > 0 else None)
    t_floor_ms, t_floor_noemb_ms = floor.t_floor_s * 1e3, floor.t_floor_no_embedding_s * 1e3
    price = gpu.get("price_usd_per_hour")
    out.update(
        t_floor_ms=t_floor_ms,
        t_floor_no_embedding_ms=t_floor_noemb_ms,
        r_floor=t_floor_ms / out["median_ms"],
        r_floor_ci=[t_floor_ms / out["ci_high_ms"], t_floor_ms / out["ci_low_ms"]] if out["ci_low_ms"] else None,
        r_floor_no_embedding=t_floor_noemb_ms / out["median_ms"],
        r_ceiling=floor.t_ceiling_s * 1e3 / out["median_ms"] if floor.t_ceiling_s else None,
        t_ceiling_ms=floor.t_ceiling_s * 1e3 if floor.t_ceiling_s else None,
        copy_bandwidth_Bps=copy_Bps,
        b_peak_Bps=b_peak,
        weight_bytes=int(w),
        weight_bytes_no_embedding=int(w_noemb),
        kv_bytes=int(k),
        tokens_per_s=1e3 / out["median_ms"],
        cost_usd_per_mtok=cost_per_mtok(price, out["median_ms"]) if price else None,
        sessions=sorted(int(s) for s in sel["session"].unique()),
        # the bytes a step streams: every weight as stored but the input embedding (one row of it is
        # read), and the KV cache; over the step, the bandwidth it achieves
        streamed_bytes=int(w_noemb) + int(k),
        streamed_Bps=(int(w_noemb) + int(k)) / (out["median_ms"] / 1e3),
        streamed_Bps_ci=[(int(w_noemb) + int(k)) / (out["ci_high_ms"] / 1e3), (int(w_noemb) + int(k)) / (out["ci_low_ms"] / 1e3)]
        if out["ci_low_ms"] else None,
        streamed_over_copy=(int(w_noemb) + int(k)) / (out["median_ms"] / 1e3) / copy_Bps if copy_Bps > 0 else None,
        session_ms={str(sid): float(np.median(x)) for sid, x in zip(ids, by_session)},
        anatomy=arm_anatomy(sessions[sessions["arm"] == arm]),
    )
    arm_rows = sessions[sessions["arm"] == arm]
    out["attention_kernels"] = attention_families(arm_rows)
    layers = arm_rows["layers_per_step"].dropna() if "layers_per_step" in arm_rows else []
    if len(layers):  # the attention microbenchmark: the paper's unit, per layer
        n = int(layers.iloc[0])
        out.update(layers_per_step=n, us_per_layer=out["median_ms"] * 1e3 / n,
                   us_per_layer_ci=[out["ci_low_ms"] * 1e3 / n, out["ci_high_ms"] * 1e3 / n] if out["ci_low_ms"] else None)
    for column, name, pick in (("compile_s", "compile_s", "median"), ("logit_rel_l2", "logit_rel_l2_max", "max")):
        values = arm_rows[column].dropna() if column in arm_rows else []  # compiled and fused arms only
        out[name] = float(getattr(values, pick)()) if len(values) else None
    launches = (out["anatomy"] or {}).get("kernels_per_step")
    out["host_model"] = hostmodel.fit(sel, launches, col, cfg.n_resamples, cfg.confidence,
                                      np.random.default_rng([cfg.seed, 1])) if arm in OP_BY_OP else None  # its own stream
    return out


def attention_families(rows: pd.DataFrame) -> dict[str, list[str]]:
    """The attention kernels an arm's sessions ran, by family (the dispatcher's actual choice):
    {family: sorted distinct kernel names} over every session that recorded them."""
    import json

    out: dict[str, set] = {}
    for text in (rows["attention_kernels_json"].dropna() if "attention_kernels_json" in rows else []):
        for family, names in json.loads(text).items():
            out.setdefault(family, set()).update(names)
    return {f: sorted(v) for f, v in sorted(out.items())}


def arm_anatomy(rows: pd.DataFrame, top: int = 8) -> dict | None:
    """The profiler pass of an arm over its sessions: medians of kernels and GPU busy time per step,
    and the host operators with the most CPU time per step (median over sessions that list them)."""
    import json

    if "kernels_per_step" not in rows:
        return None
    rows = rows[rows["kernels_per_step"].notna()]
    if rows.empty:
        return None
    ops: dict[str, list[dict]] = {}
    for text in rows["host_ops_json"].dropna():
        for op in json.loads(text):
            ops.setdefault(op["name"], []).append(op)
    host_ops = sorted(
        ({"name": name, "calls_per_step": float(np.median([o["calls_per_step"] for o in v])),
          "cpu_total_ms_per_step": float(np.median([o["cpu_total_ms_per_step"] for o in v])),
          "cpu_self_ms_per_step": float(np.median([o["cpu_self_ms_per_step"] for o in v]))} for name, v in ops.items()),
        key=lambda o: -o["cpu_total_ms_per_step"])[:top]
    busy = rows["gpu_busy_ms_per_step"].dropna()
    listed = rows[rows["kernels_json"].notna()]
    kernels = [json.loads(text) for text in listed["kernels_json"]]
    classes = [kernel_classes(k) for k in kernels]
    overlap = any(kernels_overlap(k, None if pd.isna(b) else float(b)) for k, b in zip(kernels, listed["gpu_busy_ms_per_step"]))
    return {"n_sessions": int(rows["session"].nunique()), "kernels_per_step": float(rows["kernels_per_step"].median()),
            "gpu_busy_ms_per_step": float(busy.median()) if len(busy) else None, "host_ops": host_ops,
            "kernel_ms_per_step": {c: float(np.median([k[c] for k in classes])) for c in KERNEL_CLASSES} if classes else None,
            "kernels_overlap": overlap}


# A step's kernels by what they do, from their names (the fused step's Triton kernels; cuBLAS's,
# tinygemm's, Marlin's GEMVs; SDPA's, FlashAttention's, FlashInfer's attention). The profiler pass
# lists the kernels with the most time: a step whose small kernels fall off that list counts them
# in neither (the gap table takes "other kernels" as busy time less GEMVs and attention).
KERNEL_CLASSES = ("gemv", "attention")
_CLASS_PATTERNS = {"attention": r"attention|attn|flash|fmha|sdpa|cudnn|flashinfer",
                   "gemv": r"_linear_kernel|_gate_up_kernel|_qkv_rope_kernel|gemv|gemm|nvjet|int4pack|marlin|splitkreduce|gemlite"}


def kernel_classes(kernels: list[dict]) -> dict[str, float]:
    """ms per step of a session's listed kernels by class (decodegap.measure.anatomy's top kernels)."""
    import re

    out = dict.fromkeys(KERNEL_CLASSES, 0.0)
    for k in kernels:
        for cls in ("attention", "gemv"):  # attention first: a flash kernel's name may hold "gemm"
            if re.search(_CLASS_PATTERNS[cls], k["name"], re.IGNORECASE):
                out[cls] += float(k.get("exclusive_ms_per_step", k["ms_per_step"]))
                break
    return out


OVERLAP_TOLERANCE = 0.02  # listed kernels' summed time over the busy time beyond which they overlap


def kernels_overlap(kernels: list[dict], busy_ms: float | None) -> bool:
    """Whether a session's per-kernel times cannot be added up: it lacks exclusive times (records
    before 2026-12-02) and its listed kernels' profiler times sum to more than its busy time, so
    kernels ran overlapped (programmatic dependent launch: a kernel waits inside the one before)."""
    if busy_ms is None or all("exclusive_ms_per_step" in k for k in kernels):
        return False
    return sum(float(k["ms_per_step"]) for k in kernels) > busy_ms * (1 + OVERLAP_TOLERANCE)


def _session_list(sessions: pd.DataFrame) -> list[dict]:
    def value(x):  # Parquet nulls come back as NaN in object columns
        return None if x is None or (isinstance(x, float) and np.isnan(x)) else x

    firsts = sessions.sort_values(["session", "arm"]).groupby("session", observed=True).first().reset_index()
    fields = ("status", "reasons", "raw_path", "raw_sha256", "gpu_name", "driver", "torch", "transformers", "code_commit", "sources_sha256", "started_utc",
              "environment_record", "environment_sha256")
    out = []
    for r in firsts.to_dict("records"):
        entry = {"session": int(r["session"]), **{k: value(r.get(k)) for k in fields}}
        dirty = value(r["code_dirty"])
        entry["code_dirty"] = None if dirty is None else bool(dirty)
        out.append(entry)
    return out


PROBE_COLUMNS = ("step_probe_ns_per_iter", "block_probe_ns_per_iter")  # finest first


def host_probe_column(steps: pd.DataFrame) -> str | None:
    """The finest host-speed probe the cell's steps carry: per step where any session has it, else
    per block; None for sessions measured before the probe existed."""
    for col in PROBE_COLUMNS:
        if col in steps and steps[col].notna().any():
            return col
    return None


def host_nominal_steps(steps: pd.DataFrame, factor: float) -> tuple[pd.DataFrame, dict | None]:
    """The steps run while the host core was at about full speed (see the module doc), and how
    they were chosen. The reference is the cell's 1st percentile of the probe: a core cannot run
    the probe faster than its full speed, so the fast tail is that speed, and a session spent
    wholly on a slowed core has no nominal steps (a per-session reference would call them nominal).
    Only sessions with the finest probe the cell has take part, so one rule applies to all."""
    col = host_probe_column(steps)
    if col is None:
        return steps.iloc[0:0], None
    probed = steps[steps[col].notna()]
    reference = float(probed[col].quantile(0.01))
    rule = {"probe": col, "reference_ns_per_iter": reference, "factor": factor, "limit_ns_per_iter": factor * reference}
    return probed[probed[col] <= factor * reference], rule


def host_blocks(steps: pd.DataFrame, cfg: StatsConfig) -> list[dict]:
    """Per block: its median step time and the host speed beside it (the host figure's points):
    the block's median step probe where steps carry one, else the probe before the block."""
    col = host_probe_column(steps)
    if col is None:
        return []
    probed = steps[steps[col].notna()]
    g = probed.groupby(["session", "arm", "block"], observed=True).agg(ms=(_time_column(cfg), "median"), x=(col, "median"))
    g = g.dropna()  # e.g. device time on a CPU, which has none
    return [{"session": int(s), "arm": a, "block": int(b), "median_ms": float(r["ms"]), "probe_ns_per_iter": float(r["x"]), "probe": col}
            for (s, a, b), r in g.iterrows()]


def _only_unstable(reasons) -> bool:
    parts = [r for r in str(reasons or "").split("; ") if r]
    return all(r.startswith("unstable:") for r in parts)


def _speedup(sessions: pd.DataFrame, t_sel: pd.DataFrame, arms: list[str], cfg: StatsConfig, rng, estimators: bool = True) -> dict | None:
    """B over A from each session's own medians (paired), over the sessions that ran both arms."""
    col = _time_column(cfg, arms)
    med = t_sel.groupby(["session", "arm"], observed=True)[col].median().unstack("arm")
    if not all(a in med for a in arms):
        return None
    med = med.dropna(subset=arms)
    if med.empty:
        return None
    ids = [int(i) for i in med.index]
    ratios = (med[arms[0]] / med[arms[1]]).to_numpy(dtype=float)
    by_arm = None
    if estimators:
        by_arm = tuple([g[col].dropna().to_numpy(dtype=float) for _, g in t_sel[(t_sel["arm"] == arm) & t_sel["session"].isin(ids)]
                        .groupby("session", sort=True, observed=True)] for arm in arms)
    machines = machine_labels(sessions, ids)
    out = {"of": arms[1], "over": arms[0], "sessions": ids, **speedup_with_ci(ratios, cfg, rng, machines, by_arm)}
    out["variance"] = variance_components(np.log(ratios), machines, np.array([]))  # of log ratios: SDs are relative
    return out


def _rel_stdev(steps: pd.DataFrame) -> pd.Series:
    """Per session, the largest stdev / mean of host step times over its arms: the quantity the
    protocol's stability rule (max_rel_stdev) judges."""
    g = steps.groupby(["session", "arm"], observed=True)["host_ms"]
    return (g.std(ddof=1) / g.mean()).groupby(level="session").max()


def _light_scope(sessions, t_sel, ids, arms, cfg, rng) -> dict:
    """Estimate and interval of each arm (and the speedup) over the given sessions: one row of a
    sensitivity table."""
    col = _time_column(cfg, arms)
    t_sel = t_sel[t_sel["session"].isin(ids)]
    out = {"n_sessions": int(t_sel["session"].nunique()), "arms": {}, "speedup": None}
    for arm in arms:
        sid, by_session = _steps_by_session(t_sel[t_sel["arm"] == arm], col)
        out["arms"][arm] = median_with_ci(by_session, cfg, rng, machine_labels(sessions, sid)) if by_session else None
    if len(arms) == 2:
        sp = _speedup(sessions, t_sel, arms, cfg, rng, estimators=False)
        out["speedup"] = {k: sp[k] for k in ("estimate", "ci", "no_ci_reason", "n_sessions", "n_machines")} if sp else None
    machines = machine_labels(sessions, sorted(t_sel["session"].unique().tolist()))
    out["n_machines"] = len(set(machines))
    return out


def _unfiltered_row(headline: dict, arms) -> dict:
    """The sensitivity table's unfiltered row: the completed scope's own numbers, not a re-draw."""
    keep = ("median_ms", "ci_low_ms", "ci_high_ms", "no_ci_reason", "n_sessions", "n_machines", "n_steps")
    row = {"arms": {arm: ({k: a[k] for k in keep} if (a := (headline.get("arms") or {}).get(arm)) else None) for arm in arms},
           "speedup": None}
    sp = headline.get("speedup")
    if sp:
        row["speedup"] = {k: sp[k] for k in ("estimate", "ci", "no_ci_reason", "n_sessions", "n_machines")}
    first = next((a for a in row["arms"].values() if a), None)
    row["n_sessions"] = first["n_sessions"] if first else 0
    row["n_machines"] = first["n_machines"] if first else 0
    return row


def sensitivity(sessions, steps, completed: set, arms, headline: dict, cfg: StatsConfig, rng) -> dict:
    """The estimate and its interval as each validity filter's threshold moves: the stability rule
    (sessions whose step stdev stays under the limit; a session spent wholly on a slowed core passes
    it, so the rule selects on the host's state, not on the measurement's quality), and the
    host-nominal factor (steps whose CPU probe stays under factor x the cell's fast tail, the fast
    tail taken over the cell's steps as the host_nominal scope takes it). The unfiltered row (limit
    or factor None) is the completed scope's own record (headline)."""
    done = steps[steps["session"].isin(completed)]
    out = {"stability": [], "host_nominal": []}
    if done.empty:
        return out
    rel = _rel_stdev(done)
    for limit in cfg.stability_limits:
        ids = set(rel.index[rel < limit].tolist())
        out["stability"].append({"limit": limit, **_light_scope(sessions, done, ids, arms, cfg, rng)})
    out["stability"].append({"limit": None, **_unfiltered_row(headline, arms)})
    if host_probe_column(done) is None:
        return out
    for factor in cfg.host_nominal_factors:
        nominal, _ = host_nominal_steps(steps, factor)  # the reference as the scope's: over all the cell's steps
        nominal = nominal[nominal["session"].isin(completed)]
        out["host_nominal"].append({"factor": factor, **_light_scope(sessions, nominal, set(nominal["session"].unique().tolist()), arms, cfg, rng)})
    out["host_nominal"].append({"factor": None, **_unfiltered_row(headline, arms)})
    return out


SCOPES = ("completed", "valid", "host_nominal")  # the headline first
SCOPE_STREAMS = (*SCOPES, NEWEST_CODE, "sensitivity")  # each its own bootstrap stream (scope_rng)
# The scope NEWEST_CODE: in a cell whose completed sessions span several versions of the measured code,
# the sessions of the newest version that has at least NEWEST_CODE_MIN_SESSIONS of them (versions ordered
# by their last session's start). A newer version with fewer sessions waits, footnoted by the floor table,
# rather than being pooled with older code. The readers of decodegap's own kernels (core.cells.OWN_KERNELS)
# take it as that arm's headline, since an interval across kernel versions measures the changes, not the
# machines; the others stay on completed.
NEWEST_CODE_MIN_SESSIONS = 2


def newest_code_sessions(listing: list[dict], completed: set) -> tuple[str, set] | None:
    """(sources hash, session ids) of the newest measured-code version with NEWEST_CODE_MIN_SESSIONS or
    more completed sessions, when the completed sessions span more than one version; else None."""
    by_version: dict[str, list[dict]] = {}
    for s in listing:
        if s["session"] in completed and s.get("sources_sha256"):
            by_version.setdefault(s["sources_sha256"], []).append(s)
    if len(by_version) < 2:
        return None
    last_start = {v: max((s.get("started_utc") or "", s["session"]) for s in ss) for v, ss in by_version.items()}
    for version in sorted(by_version, key=last_start.get, reverse=True):
        if len(by_version[version]) >= NEWEST_CODE_MIN_SESSIONS:
            return version, {s["session"] for s in by_version[version]}
    return None


def cell_stats(sessions: pd.DataFrame, steps: pd.DataFrame, cell: dict, gpu: dict, cfg: StatsConfig) -> dict:
    """The statistics record of one cell (JSON-ready).

    Scopes: completed (the headline: every session whose timed loop ran to the end, whatever its
    spread; no selection on the outcome), valid (the protocol's stability rule as well: reported, but
    it selects on the host's state, see sensitivity), host_nominal (steps run while the host core was
    at full speed: what the step costs on an unslowed host)."""
    from decodegap.core.cells import arms_of

    arms = arms_of(cell["mode"])
    listing = _session_list(sessions) if len(sessions) else []
    valid_ids = {s["session"] for s in listing if s["status"] == "valid"}
    ran_ids = set(steps["session"].unique().tolist()) if len(steps) else set()
    completed = {s["session"] for s in listing if s["status"] == "valid" or _only_unstable(s["reasons"])} & ran_ids
    out = {
        "cell": cell,
        "kind": "ab" if len(arms) == 2 else "single",
        "arms": arms,
        "time_source": cfg.time_source,
        "gpu_spec": gpu,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items() if k != "time_source"},
        "n_sessions": len(listing),
        "n_valid": len(valid_ids),
        "n_completed": len(completed),
        "status": "valid" if valid_ids else ("invalid" if listing else "not measured"),
        "invalid_reasons": [f"s{s['session']:02d}: {s['reasons']}" for s in listing if s["status"] != "valid"],
        "sessions": listing,
        **{scope: {} for scope in SCOPES},
    }
    nominal, out["host_nominal_rule"] = host_nominal_steps(steps, cfg.host_nominal_factor)
    nominal = nominal[nominal["session"].isin(completed)]
    scopes = [("completed", completed, steps), ("valid", valid_ids, steps), ("host_nominal", set(nominal["session"].unique().tolist()), nominal)]
    newest = newest_code_sessions(listing, completed)
    if newest is not None:
        out[NEWEST_CODE] = {"sources_sha256": newest[0]}
        scopes.append((NEWEST_CODE, newest[1], steps))
    out["host_blocks"] = host_blocks(steps, cfg) if len(steps) else []
    for scope, ids, scope_steps in scopes:
        if not ids:
            continue
        s_sel = sessions[sessions["session"].isin(ids)]
        t_sel = scope_steps[scope_steps["session"].isin(ids)]
        rng = scope_rng(cfg, scope, ids)
        per_arm = {arm: arm_stats(s_sel, t_sel, arm, gpu, cfg, rng) for arm in arms}
        out[scope]["arms"] = per_arm
        if len(arms) == 2 and all(per_arm.values()):
            out[scope]["speedup"] = _speedup(s_sel, t_sel, arms, cfg, rng)
    out["sensitivity"] = sensitivity(sessions, steps, completed, arms, out["completed"], cfg, scope_rng(cfg, "sensitivity", completed))
    return out


def scope_rng(cfg: StatsConfig, scope: str, ids) -> np.random.Generator:
    """The bootstrap's random stream for one scope of a cell, seeded by the scope and the sessions it
    covers: an interval is then a function of its own sessions only. With one stream for the whole cell,
    a session added to another scope (an older code version's, say) shifted the draws of every scope
    after it, and a headline interval moved with no change to the sessions it was computed from."""
    return np.random.default_rng([cfg.seed, SCOPE_STREAMS.index(scope), *sorted(int(i) for i in ids)])


def _plain(x):
    """JSON-ready: numpy scalars and arrays to Python numbers and lists."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def frames(sessions_table, steps_table) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The aggregate's Arrow tables as DataFrames, key columns as plain strings (not categoricals)."""
    out = []
    for table in (sessions_table, steps_table):
        df = table.to_pandas()
        for col in ("gpu", "model", "attn", "quant", "mode", "arm", "status"):
            if col in df:
                df[col] = df[col].astype(object)
        out.append(df)
    return out[0], out[1]


def summarize_cell(raw_files, wildcards: dict, gpu: dict, stats_cfg: dict, sessions_out, steps_out, stats_out,
                   protocol: dict | None = None, seen_samples=None) -> dict:
    """Aggregate one cell's raw sessions to Parquet, then write its statistics record. protocol: the
    analysis config's `protocol:` (every session is judged by it); gpu: the cell's GPU type's spec."""
    import json
    from pathlib import Path

    import pyarrow.parquet as pq

    from decodegap.analysis.aggregate import aggregate
    from decodegap.core.protocol import Protocol

    sessions_table, steps_table = aggregate(raw_files, float(gpu["b_peak_Bps"]), Protocol(**(protocol or {})),
                                            gpu.get("device", "cuda"), seen_samples)
    for table, out in ((sessions_table, sessions_out), (steps_table, steps_out)):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
    sessions, steps = frames(sessions_table, steps_table)
    cell = {"gpu": wildcards["gpu"], "model": wildcards["model"], "ctx": int(wildcards["ctx"]),
            "attn": wildcards["attn"], "quant": wildcards["quant"], "mode": wildcards["mode"]}
    result = _plain(cell_stats(sessions, steps, cell, dict(gpu), StatsConfig(**stats_cfg)))
    result["protocol"] = Protocol(**(protocol or {})).as_record()  # what judged its sessions (a recomputation uses it again)
    Path(stats_out).parent.mkdir(parents=True, exist_ok=True)
    Path(stats_out).write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result


def summarize_group(cells: list[dict], gpu: dict, stats_cfg: dict, protocol: dict, say=print) -> None:
    """Every cell of one (gpu, model, ctx) group in one process (the workflow's analysis job: one
    interpreter for a group's cells instead of one per cell). cells: [{"keys": cell keys, "raw":
    its session files}]; each cell's Parquet and statistics go to its own paths (decodegap.core.paths)."""
    import time

    from decodegap.core import paths

    seen_samples = SampleIndex()  # a session's samples filed under another session of the group are refused
    for i, c in enumerate(cells, 1):
        t = time.perf_counter()
        keys = c["keys"]
        summarize_cell(c["raw"], keys, gpu, stats_cfg, paths.CELL_SESSIONS.format(**keys), paths.CELL_STEPS.format(**keys),
                       paths.CELL_STATS.format(**keys), protocol, seen_samples)
        say(f"[{i}/{len(cells)}] {paths.CELL.format(**keys)}: {len(c['raw'])} sessions in {time.perf_counter() - t:.1f} s")
