"""Host speed as a measured axis: what an op-by-op step costs per launch on a core of a given speed.

An op-by-op step (eager, static) is host CPU work: the launching thread runs from the step's start
to its end. Every step carries the CPU probe just before and after it (ns per iteration of a fixed
pure-Python loop: higher is a slower core). Over the steps of an op-by-op arm,

    host cost per launch (us) = slope x probe (ns/iter) + intercept

fitted by least squares, the launches per step being the kernels the untimed profiler pass counted.
Its 95 % interval resamples sessions (seeded). From the fit:
  per_launch_us_nominal  the cost per launch on this host's core at full speed (the cell's 1st
                         percentile of the probe, as the host-nominal scope takes it)
  predicted_ms(s)        launches x cost(s): the step this GPU would show on a core of probe speed
                         s, while the host, not the GPU, sets it
  crossover              the core speed at which launches x cost(s) falls to the graphed step (the
                         GPU's own time for the same kernels): faster than that, the op-by-op step
                         is no longer host-bound. Given as how many times faster than this host's
                         core at full speed, two ways: by the fit (None when its intercept, the
                         part of a launch that does not scale with the probe, already exceeds the
                         budget: no core speed gets there) and proportionally (all of a launch's
                         cost scaling with the core).
A core's speed is measured by one pure-Python loop, so "x times faster" is in that loop's currency:
launch cost scales with it only as far as both are single-thread CPU work.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PROBE = "step_probe_ns_per_iter"


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def fit(steps: pd.DataFrame, launches: float, time_col: str, n_resamples: int, confidence: float,
        rng: np.random.Generator) -> dict | None:
    """The per-launch host cost model of one op-by-op arm's steps; None without per-step probes."""
    if PROBE not in steps or launches is None or launches <= 0:
        return None
    data = steps[[PROBE, time_col, "session"]].dropna()
    if len(data) < 10 or data[PROBE].nunique() < 3:
        return None
    x = data[PROBE].to_numpy(float)
    y = data[time_col].to_numpy(float) * 1e3 / launches  # us per launch
    slope, intercept = _fit(x, y)
    nominal = float(np.quantile(x, 0.01))
    by_session = [g.index.to_numpy() for _, g in data.reset_index(drop=True).groupby("session", sort=True)]
    boot = []
    if len(by_session) >= 2:
        for _ in range(n_resamples):
            pick = np.concatenate([by_session[i] for i in rng.integers(0, len(by_session), len(by_session))])
            if np.ptp(x[pick]) > 0:
                boot.append(_fit(x[pick], y[pick]))
    alpha = (1 - confidence) / 2

    def interval(values):
        return [float(v) for v in np.quantile(values, [alpha, 1 - alpha])] if len(values) >= 20 else None

    boot = np.array(boot) if boot else np.empty((0, 2))
    model = {
        "probe": PROBE, "launches_per_step": float(launches), "n_steps": int(len(data)), "n_sessions": len(by_session),
        "slope_us_per_probe_ns": slope, "intercept_us": intercept, "nominal_probe_ns_per_iter": nominal,
        "per_launch_us_nominal": slope * nominal + intercept,
        "slope_ci": interval(boot[:, 0]) if len(boot) else None,
        "per_launch_us_nominal_ci": interval(boot[:, 0] * nominal + boot[:, 1]) if len(boot) else None,
    }
    model["host_bound_ms_2x_faster"] = predicted_ms(model, nominal / 2)  # the step's host part on a core twice as fast
    return model


def predicted_ms(model: dict, probe_ns_per_iter: float) -> float:
    """The host-bound step time on a core of this probe speed."""
    return model["launches_per_step"] * (model["slope_us_per_probe_ns"] * probe_ns_per_iter + model["intercept_us"]) / 1e3


def crossover_speedup(model: dict, gpu_bound_ms: float) -> float | None:
    """How many times faster than this host's core at full speed a core must be for the op-by-op
    step to fall to `gpu_bound_ms` (the GPU's own time for the same kernels); None where the fit
    says a faster core would not help (a flat or negative slope)."""
    per_launch_needed = gpu_bound_ms * 1e3 / model["launches_per_step"]
    if model["slope_us_per_probe_ns"] <= 0:
        return None
    probe_needed = (per_launch_needed - model["intercept_us"]) / model["slope_us_per_probe_ns"]
    if probe_needed <= 0:
        return None  # below the intercept: no core speed gets there by launching faster alone
    return model["nominal_probe_ns_per_iter"] / probe_needed


def proportional_speedup(model: dict, step_ms: float) -> float:
    """The same, if all of a launch's host cost scaled with the core's speed (no intercept): the
    per-launch cost at full speed over the per-launch budget of `step_ms`."""
    return model["per_launch_us_nominal"] / (step_ms * 1e3 / model["launches_per_step"])
