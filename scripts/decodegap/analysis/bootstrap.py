"""The bootstrap and its intervals, for one cell's statistics (decodegap.analysis.stats).

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
- The median: the resampled median is computed without materialising any draw: each resample's
  draw counts are split over halves of the globally sorted steps down to the median's rank
  (binomially when steps are resampled), so memory grows with the cell's total steps (one sort),
  and time with resamples x sessions x log^2(steps).
- A/B speedups: each session's paired ratio median(A)/median(B); the headline is their geometric
  mean (symmetric in A and B; the paper states no estimator), beside the mean and median of the
  ratios and the ratio of pooled medians, all over the same resamples.
- Variance components: machine, session and step standard deviations (one-way ANOVA of session
  medians on the machine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
