"""Statistics of one cell, from its per-cell Parquet tables.

- Replicates. A session is a fresh process; a machine is a GPU (its UUID) on a host boot (its boot
  id): sessions on one machine share its GPU and its host core, so they are not independent
  replicates of "an H200". The bootstrap resamples the configured levels (stats.levels, default
  machines: each resample draws machines with replacement and keeps their sessions and steps
  intact, the cluster bootstrap; machines, sessions, steps resamples all three). A cell measured on
  one machine, or with one session, gets no interval: only its value and why.
- Interval (stats.interval, default student-t): estimate +- t_{U-1} x bootstrap SE x sqrt(U/(U-1))
  over U machines. benchmarks/bootstrap_coverage.py measures coverage over simulated cells with a
  known truth: 94-96 % from 2 to 10 machines, with or without a machine effect, where the
  percentile interval covers 48-95 % and the three-level percentile interval 64-99 %.
- ms/step: the median of the steps pooled over sessions. The resampled median is computed without
  materialising any draw: each resample's draw counts are split over halves of the globally sorted
  steps down to the median's rank (binomially when steps are resampled), so memory grows with the
  cell's total steps (one sort), and time with resamples x sessions x log^2(steps).
- R_floor = t_floor / t_obs with t_floor = (W + K) / B_peak: W and K as measured in the session,
  B_peak from the GPU table of the analysis config (a user may correct a datasheet figure without
  re-measuring); also without the input embedding table (a step reads one row of it) and against the
  measured copy ceiling. Its interval maps the ms/step interval through the monotone 1/x.
- tokens/s and cost per million tokens (from the GPU's price per hour, where the table has one).
- A/B cells: each session's paired ratio median(A)/median(B); the headline speedup is their
  geometric mean (symmetric in A and B; the paper states no estimator), beside the mean and median
  of the ratios and the ratio of pooled medians, all over the same resamples.
- Variance components: machine, session and step standard deviations per arm (one-way ANOVA of
  session medians on the machine).

Scopes: completed (the headline: every session whose timed loop ran to the end, however spread;
no selection on the outcome), valid (also passing the protocol's stability rule; a session spent
wholly on a slowed host core passes it, so it selects on the host's state and is reported beside,
not as, the headline) and host_nominal (below). The sensitivity record gives the estimate and
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

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from decodegap.analysis import hostmodel
from decodegap.core.cells import LAYER_ARMS, OP_BY_OP
from decodegap.core.floor import MemoryFloor

LEVELS = ("machines", "sessions", "steps")  # the bootstrap's levels, outermost first


@dataclass(frozen=True)
class StatsConfig:
    n_resamples: int = 2000
    seed: int = 20261129
    confidence: float = 0.95
    time_source: str = "host"  # host: launch to token on the host (what a consumer waits); device: events
    host_nominal_factor: float = 1.25  # a step is host-nominal when its CPU probe <= this x the cell's fast tail
    # Which levels the bootstrap resamples with replacement (the others stay intact), outermost first,
    # and the interval built from the resamples (see the module doc; benchmarks/bootstrap_coverage.py).
    levels: tuple = ("machines",)
    interval: str = "student-t"  # student-t: estimate +- t(U-1) x bootstrap SE x sqrt(U/(U-1)); or percentile
    stability_limits: tuple = (0.05, 0.10, 0.15, 0.20, 0.30)  # rel. stdev limits of the sensitivity table
    host_nominal_factors: tuple = (1.10, 1.25, 1.50, 2.00)  # host-nominal factors of the sensitivity table

    def __post_init__(self):
        object.__setattr__(self, "levels", tuple(self.levels))
        bad = [x for x in self.levels if x not in LEVELS]
        if bad or not self.levels or list(self.levels) != [x for x in LEVELS if x in self.levels]:
            raise ValueError(f"stats.levels: {list(self.levels)}: a non-empty subset of {list(LEVELS)}, in that order")
        if self.interval not in ("student-t", "percentile"):
            raise ValueError(f"stats.interval: {self.interval!r}: student-t or percentile")
        object.__setattr__(self, "stability_limits", tuple(self.stability_limits))
        object.__setattr__(self, "host_nominal_factors", tuple(self.host_nominal_factors))

    @property
    def unit(self) -> str:
        """The outermost resampled level: what counts as one independent replicate."""
        return "machines" if self.levels[0] == "machines" else "sessions"


_CHUNK_ELEMENTS = 1 << 18  # elements of one (resamples, sessions) array: bounds the bootstrap's working memory


def _descend(keys: np.ndarray, base: np.ndarray, lo: np.ndarray, hi: np.ndarray, d: np.ndarray, k: np.ndarray,
             rng: np.random.Generator, track_successor: bool, by_step: bool = True):
    """The k-th smallest (0-based) of each row's draws inside the global rank interval [lo, hi).

    d[r, j] draws of session j fall in row r's interval, each uniform over session j's steps there.
    Each level halves the interval; the draws that fall in the left half are, per session,
    Binomial(d, share of the session's steps in the interval that lie in the left half), which is
    exactly how iid uniform draws split. Without step resampling (by_step False) a session chosen c
    times holds c copies of each of its steps, so exactly c x its steps in the left half go left. Descend into the half holding the k-th. Returns the leaf
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
        left = rng.binomial(d, p) if by_step else (d // np.maximum(in_interval, 1)) * in_left
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


def session_counts(r: int, machine_of_session: np.ndarray, rng: np.random.Generator, levels=LEVELS) -> np.ndarray:
    """(r, n_sessions): how often each session is chosen in each of r resamples.

    "machines" in levels: n_machines draws of machines with replacement (else each machine once).
    "sessions" in levels: each time a machine is chosen, as many of its sessions as it has, with
    replacement (a machine chosen c times with n sessions contributes Multinomial(c n, uniform over
    its sessions)); else all its sessions, c times each. With one session per machine and both
    levels this is the plain session bootstrap (n_sessions draws with replacement)."""
    machines, index = np.unique(machine_of_session, return_inverse=True)
    n_sessions, n_machines = index.size, machines.size
    by_machine, by_session = "machines" in levels, "sessions" in levels
    if n_machines == n_sessions and (by_machine or by_session):  # every session its own machine: one level
        chosen = rng.integers(0, n_sessions, size=(r, n_sessions))
        return np.bincount((np.arange(r)[:, None] * n_sessions + chosen).ravel(), minlength=r * n_sessions).reshape(r, n_sessions)
    if by_machine:
        chosen = rng.integers(0, n_machines, size=(r, n_machines))
        per_machine = np.bincount((np.arange(r)[:, None] * n_machines + chosen).ravel(), minlength=r * n_machines).reshape(r, n_machines)
    else:
        per_machine = np.ones((r, n_machines), dtype=np.int64)
    out = np.zeros((r, n_sessions), dtype=np.int64)
    for m in range(n_machines):
        members = np.flatnonzero(index == m)
        if by_session:
            out[:, members] = rng.multinomial(per_machine[:, m] * members.size, np.full(members.size, 1.0 / members.size))
        else:
            out[:, members] = per_machine[:, m:m + 1]
    return out


def hierarchical_bootstrap_medians(samples_by_session: list[np.ndarray], n_resamples: int, rng: np.random.Generator,
                                   machine_of_session=None, levels=LEVELS, counts: np.ndarray | None = None) -> np.ndarray:
    """Bootstrap distribution (n_resamples,) of the pooled median: sessions, then steps, resampled.

    Each resample draws n_sessions sessions with replacement, then from each chosen session as many
    steps as it has, with replacement; its statistic is the median of all drawn steps pooled (for an
    even count the mean of the two middle ones, as np.median). The draws are never materialised:
    a session chosen c times contributes c x its length iid uniform draws from its steps, and the
    median's rank is found by splitting those draw counts over halves of the globally sorted steps
    (binomially, see _descend), ~log2(total steps) levels. Memory grows with the total number of
    steps (one sort) plus a bounded (resamples, sessions) chunk; time with resamples x sessions x
    log^2(steps). Deterministic for a given rng state.

    machine_of_session (one label per session) adds the machine level; levels says which levels are
    resampled (session_counts); counts (n_resamples, n_sessions), if given, are the session counts
    to use (so that two arms, or two estimators, see the same resampled sessions).
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
    machines = np.arange(n_sessions) if machine_of_session is None else np.asarray(machine_of_session)
    by_step = "steps" in levels
    if machines.size != n_sessions:
        raise ValueError(f"machine_of_session has {machines.size} entries for {n_sessions} sessions")

    out = np.empty(n_resamples)
    rows = max(1, _CHUNK_ELEMENTS // n_sessions)
    for start in range(0, n_resamples, rows):
        r = min(rows, n_resamples - start)
        chunk = counts[start:start + r] if counts is not None else session_counts(r, machines, rng, levels)
        d = chunk * lengths  # draws from each session in each resample
        total = d.sum(axis=1)
        k = np.maximum(total - 1, 0) // 2  # the lower middle; the upper one is k + 1 when the count is even
        zeros = np.zeros(r, dtype=np.int64)
        leaf, k_in_leaf, n_leaf, (s_lo, s_hi, s_d) = _descend(keys, base, zeros, zeros + n_steps, d, k, rng, True, by_step)
        lower = values[np.minimum(leaf, n_steps - 1)]
        upper = lower.copy()
        succ = (total % 2 == 0) & (total > 0) & (k_in_leaf + 1 >= n_leaf)  # the upper middle is a larger step
        if succ.any():
            nxt, *_ = _descend(keys, base, s_lo[succ], s_hi[succ], s_d[succ], np.zeros(int(succ.sum()), dtype=np.int64), rng, False, by_step)
            upper[succ] = values[nxt]
        med = (lower + upper) / 2
        med[total == 0] = np.nan  # only empty sessions chosen
        out[start:start + r] = med
    return out


def n_units(machine_of_session, cfg: StatsConfig) -> int:
    """Independent replicates: machines when the bootstrap resamples machines, else sessions."""
    labels = np.asarray(machine_of_session)
    return int(np.unique(labels).size) if cfg.unit == "machines" else int(labels.size)


def no_interval_reason(n_sessions: int, n_machines: int, cfg: StatsConfig) -> str | None:
    """Why a cell gets no confidence interval: an interval from fewer than two replicates would
    show only the noise inside one of them."""
    if n_sessions < 2:
        return f"{n_sessions} session"
    if cfg.unit == "machines" and n_machines < 2:
        return "1 machine"
    return None


def interval(estimate: float, boot: np.ndarray, units: int, cfg: StatsConfig, log: bool = False) -> list[float] | None:
    """The confidence interval from bootstrap replicates of an estimate over `units` replicates.

    student-t (default): estimate +- t_{U-1} x SE x sqrt(U / (U - 1)), SE the bootstrap standard
    deviation. The bootstrap of U clusters underestimates the variance by (U - 1) / U, and with few
    clusters the normal quantile is too narrow; with both corrections the interval holds its
    coverage from U = 2 machines on (benchmarks/bootstrap_coverage.py, tests/test_coverage.py),
    where the percentile interval covers 50-90 %. log: on the log scale, back-transformed: step
    times and speedups are positive and their spread multiplicative, so an interval over few
    machines stays positive (and a speedup's is the reciprocal of the inverse speedup's).
    """
    from scipy import stats as sps

    boot = boot[np.isfinite(boot)]
    if units < 2 or boot.size < 2:
        return None
    alpha = (1 - cfg.confidence) / 2
    if cfg.interval == "percentile":
        lo, hi = np.quantile(boot, [alpha, 1 - alpha])
        return [float(lo), float(hi)]
    if log and (boot <= 0).any():
        log = False  # a zero or negative resample (a synthetic cell, say): the raw scale
    center, sample = (np.log(estimate), np.log(boot)) if log else (estimate, boot)
    half = sps.t.ppf(1 - alpha, units - 1) * np.std(sample, ddof=1) * np.sqrt(units / (units - 1))
    lo, hi = center - half, center + half
    return [float(np.exp(lo)), float(np.exp(hi))] if log else [float(lo), float(hi)]


def median_with_ci(samples_by_session: list[np.ndarray], cfg: StatsConfig, rng: np.random.Generator,
                   machine_of_session=None) -> dict:
    """The pooled median of a cell's steps with its interval (None, with the reason, when the cell
    has fewer than two sessions or, resampling machines, one machine)."""
    machines = np.arange(len(samples_by_session)) if machine_of_session is None else np.asarray(machine_of_session)
    pooled = np.concatenate(samples_by_session)
    median = float(np.median(pooled))
    n_machines = int(np.unique(machines).size)
    reason = no_interval_reason(len(samples_by_session), n_machines, cfg)
    ci = None
    if reason is None:
        boot = hierarchical_bootstrap_medians(samples_by_session, cfg.n_resamples, rng, machines, cfg.levels)
        ci = interval(median, boot, n_units(machines, cfg), cfg, log=median > 0)
    return {"median_ms": median, "ci_low_ms": ci[0] if ci else None, "ci_high_ms": ci[1] if ci else None,
            "no_ci_reason": reason, "n_sessions": len(samples_by_session), "n_machines": n_machines,
            "n_steps": int(pooled.size)}


def _weighted_median(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per row of counts (r, n): the median of values, each repeated counts[i] times (np.median's
    convention: the mean of the two middle ones for an even total)."""
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[:, order]
    cum = np.cumsum(c, axis=1)
    total = cum[:, -1]
    lower = (total - 1) // 2
    upper = total // 2
    lo_idx = (cum <= lower[:, None]).sum(axis=1)
    hi_idx = (cum <= upper[:, None]).sum(axis=1)
    return (v[np.minimum(lo_idx, v.size - 1)] + v[np.minimum(hi_idx, v.size - 1)]) / 2


ESTIMATORS = {  # A/B speedup estimators: the headline first
    "geomean": "geometric mean of per-session ratios",
    "mean": "mean of per-session ratios",
    "median": "median of per-session ratios",
    "pooled": "ratio of pooled step medians",
}


def speedup_estimates(ratios: np.ndarray, machine_of_session, by_arm: tuple[list, list] | None, cfg: StatsConfig,
                      rng: np.random.Generator) -> dict:
    """Every A/B speedup estimator over the same resampled sessions, each with its interval.

    ratios: per session, median(A) / median(B) of its own steps (paired: same process, ABBA blocks).
    The headline, geomean, is exp(mean(log ratio)): symmetric in A and B (the speedup of B over A is
    the reciprocal of A over B), and the paper states no estimator. by_arm: each arm's steps per
    session, for the ratio of pooled medians. Intervals on the log scale (see interval)."""
    machines = np.arange(ratios.size) if machine_of_session is None else np.asarray(machine_of_session)
    n_machines = int(np.unique(machines).size)
    reason = no_interval_reason(int(ratios.size), n_machines, cfg)
    point = {"geomean": float(np.exp(np.mean(np.log(ratios)))), "mean": float(np.mean(ratios)),
             "median": float(np.median(ratios))}
    if by_arm is not None:
        point["pooled"] = float(np.median(np.concatenate(by_arm[0])) / np.median(np.concatenate(by_arm[1])))
    boots: dict[str, np.ndarray] = {}
    if reason is None:
        counts = session_counts(cfg.n_resamples, machines, rng, tuple(x for x in cfg.levels if x != "steps") or ("sessions",))
        total = counts.sum(axis=1)
        boots["geomean"] = np.exp(counts @ np.log(ratios) / total)
        boots["mean"] = counts @ ratios / total
        boots["median"] = _weighted_median(ratios, counts)
        if by_arm is not None:
            a = hierarchical_bootstrap_medians(by_arm[0], cfg.n_resamples, rng, machines, cfg.levels, counts)
            b = hierarchical_bootstrap_medians(by_arm[1], cfg.n_resamples, rng, machines, cfg.levels, counts)
            boots["pooled"] = a / b
    units = n_units(machines, cfg)
    return {name: {"estimate": value, "ci": interval(value, boots[name], units, cfg, log=True) if name in boots else None,
                   "label": ESTIMATORS[name]} for name, value in point.items()}


def speedup_with_ci(ratios: np.ndarray, cfg: StatsConfig, rng: np.random.Generator, machine_of_session=None,
                    by_arm=None) -> dict:
    """The headline speedup (geometric mean of per-session ratios) with its interval, and every
    estimator beside it (speedup_estimates)."""
    machines = np.arange(ratios.size) if machine_of_session is None else np.asarray(machine_of_session)
    out = {"n_sessions": int(ratios.size), "n_machines": int(np.unique(machines).size) if ratios.size else 0,
           "per_session": [float(x) for x in ratios], "estimator": "geomean", "estimate": None, "ci": None,
           "no_ci_reason": no_interval_reason(int(ratios.size), int(np.unique(machines).size), cfg), "estimators": {}}
    if not ratios.size:
        return out
    est = speedup_estimates(ratios, machines, by_arm, cfg, rng)
    out.update(estimate=est["geomean"]["estimate"], ci=est["geomean"]["ci"], estimators=est)
    return out


def variance_components(session_medians: np.ndarray, machine_of_session, step_sd_ms: np.ndarray) -> dict:
    """Where a cell's spread lives: machine, session (within machine) and step (within session)
    standard deviations in ms, from a one-way random-effects ANOVA of the session medians on the
    machine (method of moments for unbalanced groups, negative estimates set to 0). The step SD is
    the median over sessions of each session's step SD. None where a level has too few units."""
    y = np.asarray(session_medians, dtype=float)
    labels = np.asarray(machine_of_session)
    groups = [y[labels == m] for m in np.unique(labels)]
    n_total, k = y.size, len(groups)
    out = {"n_sessions": int(n_total), "n_machines": int(k), "machine_sd_ms": None, "session_sd_ms": None,
           "step_sd_ms": float(np.median(step_sd_ms)) if len(step_sd_ms) else None, "machine_share": None}
    if n_total > k:
        msw = sum(((g - g.mean()) ** 2).sum() for g in groups) / (n_total - k)
        out["session_sd_ms"] = float(np.sqrt(msw))
        if k >= 2:
            sizes = np.array([g.size for g in groups])
            msb = (sizes * (np.array([g.mean() for g in groups]) - y.mean()) ** 2).sum() / (k - 1)
            n0 = (n_total - (sizes ** 2).sum() / n_total) / (k - 1)
            var_m = max(0.0, (msb - msw) / n0)
            out["machine_sd_ms"] = float(np.sqrt(var_m))
            out["machine_share"] = float(var_m / (var_m + msw)) if var_m + msw > 0 else 0.0
    elif k >= 2:  # one session per machine: machines and sessions cannot be told apart
        out["machine_sd_ms"] = float(np.std(y, ddof=1))
    return out


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
    return {"n_sessions": int(rows["session"].nunique()), "kernels_per_step": float(rows["kernels_per_step"].median()),
            "gpu_busy_ms_per_step": float(busy.median()) if len(busy) else None, "host_ops": host_ops}


def _session_list(sessions: pd.DataFrame) -> list[dict]:
    def value(x):  # Parquet nulls come back as NaN in object columns
        return None if x is None or (isinstance(x, float) and np.isnan(x)) else x

    firsts = sessions.sort_values(["session", "arm"]).groupby("session", observed=True).first().reset_index()
    fields = ("status", "reasons", "raw_path", "raw_sha256", "gpu_name", "driver", "torch", "transformers", "code_commit", "started_utc",
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


def cell_stats(sessions: pd.DataFrame, steps: pd.DataFrame, cell: dict, gpu: dict, cfg: StatsConfig) -> dict:
    """The statistics record of one cell (JSON-ready).

    Scopes: completed (the headline: every session whose timed loop ran to the end, whatever its
    spread; no selection on the outcome), valid (the protocol's stability rule as well: reported, but
    it selects on the host's state, see sensitivity), host_nominal (steps run while the host core was
    at full speed: what the step costs on an unslowed host)."""
    from decodegap.core.cells import arms_of

    rng = np.random.default_rng(cfg.seed)
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
    out["host_blocks"] = host_blocks(steps, cfg) if len(steps) else []
    for scope, ids, scope_steps in scopes:
        if not ids:
            continue
        s_sel = sessions[sessions["session"].isin(ids)]
        t_sel = scope_steps[scope_steps["session"].isin(ids)]
        per_arm = {arm: arm_stats(s_sel, t_sel, arm, gpu, cfg, rng) for arm in arms}
        out[scope]["arms"] = per_arm
        if len(arms) == 2 and all(per_arm.values()):
            out[scope]["speedup"] = _speedup(s_sel, t_sel, arms, cfg, rng)
    out["sensitivity"] = sensitivity(sessions, steps, completed, arms, out["completed"], cfg, rng)
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
