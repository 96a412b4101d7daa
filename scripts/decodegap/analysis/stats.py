"""Statistics of one cell, from its per-cell Parquet tables.

- ms/step: the median of the steps pooled over sessions, with a 95 % hierarchical bootstrap interval
  (resample sessions with replacement, then steps within each resampled session). The session is
  the unit of replication (a fresh process), so it is resampled first. The drawn steps are never
  materialised: each resample's draw counts are split binomially over halves of the globally sorted
  steps down to the median's rank, so memory grows with the cell's total steps (one sort), not
  sessions x the longest session, and time with resamples x sessions x log^2(steps).
- R_floor = t_floor / t_obs with t_floor = (W + K) / B_peak: W and K as measured in the session,
  B_peak from the GPU table of the analysis config (a user may correct a datasheet figure without
  re-measuring). Its interval maps the ms/step interval through the monotone 1/x.
- tokens/s and cost per million tokens (from the GPU's price per hour, where the table has one).
- A/B cells: the speedup of arm B over arm A is the mean over sessions of each session's paired
  ratio median(A)/median(B); its percentile and BCa intervals resample sessions (scipy, seeded).

Everything is vectorised over resamples (in chunks of bounded size): no Python loop per resample.
Statistics are computed in up to three scopes: over valid sessions (the default the tables show); over all sessions that ran,
so that sessions flagged invalid stay visible instead of silently vanishing; and, where sessions
carry the host CPU probe, over host-nominal steps only (below).

Host-nominal steps. An eager step is CPU work on one core, so on a host whose core speed changes
(a shared VM host, a busy SMT sibling, frequency scaling) its time follows the host, not the GPU.
Each session runs a fixed pure-Python probe before every block of steps, and (sessions from
2026-11-29 on) a short one just before and after every step. A step is host-nominal when its
probe (the slower of the two around it; else the one before its block) took at most
host_nominal_factor x the cell's fast tail (1st percentile): the core ran at about its full speed. The host_nominal scope keeps only those steps, from sessions
that are valid or invalid only for being unstable (the spread this scope addresses). It answers
"what is the step time, or the speedup, when the host is not slowed", beside "all" (what this
host gave).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from decodegap.analysis import hostmodel
from decodegap.core.cells import OP_BY_OP
from decodegap.core.floor import MemoryFloor


@dataclass(frozen=True)
class StatsConfig:
    n_resamples: int = 2000
    seed: int = 20261129
    confidence: float = 0.95
    time_source: str = "host"  # host: launch to token on the host (what a consumer waits); device: events
    host_nominal_factor: float = 1.25  # a step is host-nominal when its CPU probe <= this x the cell's fast tail


_CHUNK_ELEMENTS = 1 << 18  # elements of one (resamples, sessions) array: bounds the bootstrap's working memory


def _descend(keys: np.ndarray, base: np.ndarray, lo: np.ndarray, hi: np.ndarray, d: np.ndarray, k: np.ndarray,
             rng: np.random.Generator, track_successor: bool):
    """The k-th smallest (0-based) of each row's draws inside the global rank interval [lo, hi).

    d[r, j] draws of session j fall in row r's interval, each uniform over session j's steps there.
    Each level halves the interval; the draws that fall in the left half are, per session,
    Binomial(d, share of the session's steps in the interval that lie in the left half), which is
    exactly how iid uniform draws split. Descend into the half holding the k-th. Returns the leaf
    rank, k within the leaf, the leaf's draw count and, with track_successor, the deepest non-empty
    right sibling left behind (interval and per-session draws): the next larger draws lie there.
    """
    f_lo = np.searchsorted(keys, base + lo[:, None])  # session j's steps with rank < r: f(r) - (start of j)
    f_hi = np.searchsorted(keys, base + hi[:, None])
    sib_lo, sib_hi, sib_d = lo.copy(), hi.copy(), np.zeros_like(d)
    while (hi - lo > 1).any():
        mid = np.where(hi - lo > 1, (lo + hi) // 2, hi)  # a single rank: all draws "left", nothing changes
        f_mid = np.searchsorted(keys, base + mid[:, None])
        in_interval, in_left = f_hi - f_lo, f_mid - f_lo
        p = np.divide(in_left, in_interval, out=np.ones(d.shape), where=in_interval > 0)  # no steps there: no draws
        left = rng.binomial(d, p)
        n_left = left.sum(axis=1)
        go_left = k < n_left
        if track_successor:
            keep = go_left & (n_left < d.sum(axis=1))
            sib_lo[keep], sib_hi[keep], sib_d[keep] = mid[keep], hi[keep], (d - left)[keep]
        k = np.where(go_left, k, k - n_left)
        d = np.where(go_left[:, None], left, d - left)
        lo, hi = np.where(go_left, lo, mid), np.where(go_left, mid, hi)
        f_lo, f_hi = np.where(go_left[:, None], f_lo, f_mid), np.where(go_left[:, None], f_mid, f_hi)
    return lo, k, d.sum(axis=1), (sib_lo, sib_hi, sib_d)


def hierarchical_bootstrap_medians(samples_by_session: list[np.ndarray], n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap distribution (n_resamples,) of the pooled median: sessions, then steps, resampled.

    Each resample draws n_sessions sessions with replacement, then from each chosen session as many
    steps as it has, with replacement; its statistic is the median of all drawn steps pooled (for an
    even count the mean of the two middle ones, as np.median). The draws are never materialised:
    a session chosen c times contributes c x its length iid uniform draws from its steps, and the
    median's rank is found by splitting those draw counts over halves of the globally sorted steps
    (binomially, see _descend), ~log2(total steps) levels. Memory grows with the total number of
    steps (one sort) plus a bounded (resamples, sessions) chunk; time with resamples x sessions x
    log^2(steps). Deterministic for a given rng state.
    """
    lengths = np.array([len(s) for s in samples_by_session], dtype=np.int64)
    n_sessions, n_steps = lengths.size, int(lengths.sum())
    if n_sessions == 0:
        raise ValueError("no sessions to resample")
    if n_steps == 0:
        return np.full(n_resamples, np.nan)
    pooled = np.concatenate([np.asarray(s, dtype=float).ravel() for s in samples_by_session])
    order = np.argsort(pooled, kind="stable")
    values = pooled[order]  # the step at each global rank
    session_at_rank = np.repeat(np.arange(n_sessions, dtype=np.int64), lengths)[order]
    del pooled, order
    by_session = np.argsort(session_at_rank, kind="stable")  # ranks grouped by session, ascending in each
    keys = session_at_rank[by_session] * n_steps + by_session  # sorted: session j's ranks live in [j N, (j + 1) N)
    del session_at_rank, by_session
    base = np.arange(n_sessions, dtype=np.int64) * n_steps

    out = np.empty(n_resamples)
    rows = max(1, _CHUNK_ELEMENTS // n_sessions)
    for start in range(0, n_resamples, rows):
        r = min(rows, n_resamples - start)
        chosen = rng.integers(0, n_sessions, size=(r, n_sessions))
        times = np.bincount((np.arange(r)[:, None] * n_sessions + chosen).ravel(), minlength=r * n_sessions)
        d = times.reshape(r, n_sessions) * lengths  # draws from each session in each resample
        total = d.sum(axis=1)
        k = np.maximum(total - 1, 0) // 2  # the lower middle; the upper one is k + 1 when the count is even
        zeros = np.zeros(r, dtype=np.int64)
        leaf, k_in_leaf, n_leaf, (s_lo, s_hi, s_d) = _descend(keys, base, zeros, zeros + n_steps, d, k, rng, True)
        lower = values[np.minimum(leaf, n_steps - 1)]
        upper = lower.copy()
        succ = (total % 2 == 0) & (total > 0) & (k_in_leaf + 1 >= n_leaf)  # the upper middle is a larger step
        if succ.any():
            nxt, *_ = _descend(keys, base, s_lo[succ], s_hi[succ], s_d[succ], np.zeros(int(succ.sum()), dtype=np.int64), rng, False)
            upper[succ] = values[nxt]
        med = (lower + upper) / 2
        med[total == 0] = np.nan  # only empty sessions chosen
        out[start:start + r] = med
    return out


def median_with_ci(samples_by_session: list[np.ndarray], cfg: StatsConfig, rng: np.random.Generator) -> dict:
    pooled = np.concatenate(samples_by_session)
    boot = hierarchical_bootstrap_medians(samples_by_session, cfg.n_resamples, rng)
    alpha = (1 - cfg.confidence) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return {"median_ms": float(np.median(pooled)), "ci_low_ms": float(lo), "ci_high_ms": float(hi),
            "n_sessions": len(samples_by_session), "n_steps": int(pooled.size)}


def speedup_with_ci(per_session: np.ndarray, cfg: StatsConfig, rng: np.random.Generator) -> dict:
    """Mean paired speedup over sessions, with percentile and BCa intervals over sessions."""
    from scipy import stats as sps

    out = {"n_sessions": int(per_session.size), "per_session": [float(x) for x in per_session],
           "estimate": float(per_session.mean()) if per_session.size else None,
           "percentile": None, "bca": None}
    if per_session.size < 2 or np.ptp(per_session) == 0:
        return out  # an interval over fewer than two distinct sessions means nothing
    for method, key in (("percentile", "percentile"), ("BCa", "bca")):
        res = sps.bootstrap(
            (per_session,), np.mean, vectorized=True, n_resamples=cfg.n_resamples,
            confidence_level=cfg.confidence, method=method, rng=rng,
        )
        ci = res.confidence_interval
        out[key] = [float(ci.low), float(ci.high)] if np.isfinite([ci.low, ci.high]).all() else None
    return out


def _time_column(cfg: StatsConfig) -> str:
    return "device_ms" if cfg.time_source == "device" else "host_ms"


def cost_per_mtok(price_usd_per_hour: float, ms_per_step: float) -> float:
    """Dollars per million tokens of one stream: a token every ms_per_step, the GPU rented by the hour."""
    return price_usd_per_hour * ms_per_step / 3.6


def arm_stats(sessions: pd.DataFrame, steps: pd.DataFrame, arm: str, gpu: dict, cfg: StatsConfig, rng) -> dict | None:
    """ms/step, R_floor, tokens/s and cost for one arm over the given sessions; None without steps."""
    col = _time_column(cfg)
    sel = steps[steps["arm"] == arm]
    by_session = [g[col].to_numpy(dtype=float) for _, g in sel.groupby("session", sort=True, observed=True) if len(g)]
    by_session = [s[~np.isnan(s)] for s in by_session]
    by_session = [s for s in by_session if s.size]
    if not by_session:
        return None
    out = median_with_ci(by_session, cfg, rng)
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
        r_floor_ci=[t_floor_ms / out["ci_high_ms"], t_floor_ms / out["ci_low_ms"]],
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
        anatomy=arm_anatomy(sessions[sessions["arm"] == arm]),
    )
    launches = (out["anatomy"] or {}).get("kernels_per_step")
    out["host_model"] = hostmodel.fit(sel, launches, col, cfg.n_resamples, cfg.confidence,
                                      np.random.default_rng([cfg.seed, 1])) if arm in OP_BY_OP else None  # its own stream
    return out


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
    return {"n_sessions": int(rows["session"].nunique()), "kernels_per_step": float(rows["kernels_per_step"].median()),
            "gpu_busy_ms_per_step": float(busy.median()) if len(busy) else None, "host_ops": host_ops}


def _session_list(sessions: pd.DataFrame) -> list[dict]:
    def value(x):  # Parquet nulls come back as NaN in object columns
        return None if x is None or (isinstance(x, float) and np.isnan(x)) else x

    firsts = sessions.sort_values(["session", "arm"]).groupby("session", observed=True).first().reset_index()
    fields = ("status", "reasons", "raw_path", "raw_sha256", "gpu_name", "driver", "torch", "transformers", "code_commit", "started_utc")
    out = []
    for r in firsts.to_dict("records"):
        entry = {"session": int(r["session"]), **{k: value(r[k]) for k in fields}}
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


def cell_stats(sessions: pd.DataFrame, steps: pd.DataFrame, cell: dict, gpu: dict, cfg: StatsConfig) -> dict:
    """The statistics record of one cell (JSON-ready)."""
    from decodegap.core.cells import arms_of

    rng = np.random.default_rng(cfg.seed)
    arms = arms_of(cell["mode"])
    listing = _session_list(sessions) if len(sessions) else []
    valid_ids = {s["session"] for s in listing if s["status"] == "valid"}
    ran_ids = set(steps["session"].unique().tolist()) if len(steps) else set()
    out = {
        "cell": cell,
        "kind": "ab" if len(arms) == 2 else "single",
        "arms": arms,
        "time_source": cfg.time_source,
        "gpu_spec": gpu,
        "config": {"n_resamples": cfg.n_resamples, "seed": cfg.seed, "confidence": cfg.confidence, "host_nominal_factor": cfg.host_nominal_factor},
        "n_sessions": len(listing),
        "n_valid": len(valid_ids),
        "status": "valid" if valid_ids else ("invalid" if listing else "not measured"),
        "invalid_reasons": [f"s{s['session']:02d}: {s['reasons']}" for s in listing if s["status"] != "valid"],
        "sessions": listing,
        "valid": {},
        "all": {},
        "host_nominal": {},
    }
    nominal, out["host_nominal_rule"] = host_nominal_steps(steps, cfg.host_nominal_factor)
    unstable_only = {s["session"] for s in listing if s["status"] == "valid" or _only_unstable(s["reasons"])}
    nominal = nominal[nominal["session"].isin(unstable_only)]
    scopes = [("valid", valid_ids, steps), ("all", ran_ids, steps), ("host_nominal", set(nominal["session"].unique().tolist()), nominal)]
    out["host_blocks"] = host_blocks(steps, cfg) if len(steps) else []
    for scope, ids, scope_steps in scopes:
        if not ids:
            continue
        s_sel = sessions[sessions["session"].isin(ids)]
        t_sel = scope_steps[scope_steps["session"].isin(ids)]
        per_arm = {arm: arm_stats(s_sel, t_sel, arm, gpu, cfg, rng) for arm in arms}
        out[scope]["arms"] = per_arm
        if len(arms) == 2 and all(per_arm.values()):
            col = _time_column(cfg)
            med = t_sel.groupby(["session", "arm"], observed=True)[col].median().unstack("arm")
            med = med.dropna(subset=arms)
            ratios = (med[arms[0]] / med[arms[1]]).to_numpy(dtype=float)
            out[scope]["speedup"] = {"of": arms[1], "over": arms[0], "sessions": [int(i) for i in med.index], **speedup_with_ci(ratios, cfg, rng)}
    return out


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


def summarize_cell(raw_files, wildcards: dict, gpu: dict, stats_cfg: dict, sessions_out, steps_out, stats_out) -> dict:
    """Aggregate one cell's raw sessions to Parquet, then write its statistics record."""
    import json
    from pathlib import Path

    import pyarrow.parquet as pq

    from decodegap.analysis.aggregate import aggregate

    sessions_table, steps_table = aggregate(raw_files, float(gpu["b_peak_Bps"]))
    for table, out in ((sessions_table, sessions_out), (steps_table, steps_out)):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out)
    sessions, steps = frames(sessions_table, steps_table)
    cell = {"gpu": wildcards["gpu"], "model": wildcards["model"], "ctx": int(wildcards["ctx"]),
            "attn": wildcards["attn"], "quant": wildcards["quant"], "mode": wildcards["mode"]}
    result = _plain(cell_stats(sessions, steps, cell, dict(gpu), StatsConfig(**stats_cfg)))
    Path(stats_out).parent.mkdir(parents=True, exist_ok=True)
    Path(stats_out).write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    return result
