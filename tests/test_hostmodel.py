"""Host speed as a measured axis: the per-launch cost fit, its interval, and the core speed at which
an op-by-op step stops being host-bound."""

import numpy as np
import pandas as pd
import pytest

from decodegap.analysis import hostmodel


def steps(slope_us=0.25, intercept_us=6.0, launches=1500, sessions=8, n=128, seed=0):
    """Per-step host times of an op-by-op arm whose host cost per launch is slope x probe + intercept."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sessions):
        probe = rng.uniform(32, 70, n)  # ns/iter: full speed near 32, a slowed core up to twice that
        ms = launches * (slope_us * probe + intercept_us) / 1e3 * (1 + 0.01 * rng.standard_normal(n))
        rows += [{"session": s, "step_probe_ns_per_iter": p, "host_ms": m} for p, m in zip(probe, ms)]
    return pd.DataFrame(rows)


def test_the_fit_recovers_the_per_launch_cost_with_an_interval_that_covers_it():
    m = hostmodel.fit(steps(), 1500, "host_ms", 300, 0.95, np.random.default_rng(1))
    assert m["slope_us_per_probe_ns"] == pytest.approx(0.25, rel=0.03) and m["intercept_us"] == pytest.approx(6.0, abs=0.4)
    truth = 0.25 * m["nominal_probe_ns_per_iter"] + 6.0
    lo, hi = m["per_launch_us_nominal_ci"]
    assert m["per_launch_us_nominal"] == pytest.approx(truth, rel=0.01)
    assert lo < m["per_launch_us_nominal"] < hi and 0 < hi - lo < 0.05 * truth
    assert hostmodel.predicted_ms(m, 32.0) == pytest.approx(1500 * (0.25 * 32 + 6.0) / 1e3, rel=0.03)
    # on a core twice as fast as this one at full speed, only the part that scales halves
    assert m["host_bound_ms_2x_faster"] == pytest.approx(1500 * (0.25 * m["nominal_probe_ns_per_iter"] / 2 + 6.0) / 1e3, rel=0.03)


def test_crossover_by_the_fit_and_proportionally():
    m = {"launches_per_step": 1000, "slope_us_per_probe_ns": 0.25, "intercept_us": 2.0, "nominal_probe_ns_per_iter": 40.0,
         "per_launch_us_nominal": 12.0}
    # 6 ms over 1000 launches = 6 us per launch: probe (6 - 2) / 0.25 = 16 ns/iter, 40 / 16 = 2.5x faster
    assert hostmodel.crossover_speedup(m, 6.0) == pytest.approx(2.5)
    assert hostmodel.proportional_speedup(m, 6.0) == pytest.approx(2.0)  # 12 us -> 6 us
    assert hostmodel.crossover_speedup(m, 1.5) is None  # 1.5 us per launch: below the 2 us that does not scale
    assert hostmodel.crossover_speedup({**m, "slope_us_per_probe_ns": -0.1}, 6.0) is None


def test_no_fit_without_per_step_probes_or_launches():
    old = steps().drop(columns=["step_probe_ns_per_iter"])
    assert hostmodel.fit(old, 1500, "host_ms", 100, 0.95, np.random.default_rng(0)) is None
    assert hostmodel.fit(steps(), None, "host_ms", 100, 0.95, np.random.default_rng(0)) is None
    one = hostmodel.fit(steps(sessions=1), 1500, "host_ms", 100, 0.95, np.random.default_rng(0))
    assert one["n_sessions"] == 1 and one["per_launch_us_nominal_ci"] is None  # one session: no interval
