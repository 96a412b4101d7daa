"""The cell interval's coverage over simulated cells with a known true median (issue 11): machines
as the top level, with and without a machine effect. benchmarks/bootstrap_coverage.py prints the
same for more designs and for the schemes this one replaced."""

import numpy as np
import pytest

from decodegap.analysis.stats import StatsConfig, median_with_ci
from decodegap.analysis.synthetic import coverage, hierarchical_cell

DRAWS, RESAMPLES = 1000, 400  # coverage SE ~0.7 % at 1000 draws


@pytest.mark.parametrize("sd_machine", [0.02, 0.0], ids=["machine-effect", "no-machine-effect"])
def test_95_interval_covers_the_truth_93_to_97_percent_of_the_time(sd_machine):
    """5 machines x 2 sessions x 64 steps; machine effect 2 % (4x the session effect) or none."""
    r = coverage(StatsConfig(n_resamples=RESAMPLES), 5, 2, 64, sd_machine, 0.005, 0.02, DRAWS, seed=11)
    assert 0.93 <= r["coverage"] <= 0.97, r


def test_ignoring_the_machine_level_undercovers_when_machines_differ():
    """Why machines are the top level: treating 10 sessions on 5 machines as 10 exchangeable
    replicates gives an interval that misses the truth most of the time."""
    r = coverage(StatsConfig(n_resamples=RESAMPLES, levels=("sessions", "steps"), interval="percentile"), 5, 2, 64, 0.02, 0.005, 0.02, 200, seed=11)
    assert r["coverage"] < 0.6, r


def test_two_machines_still_cover_with_a_wide_interval():
    r = coverage(StatsConfig(n_resamples=RESAMPLES), 2, 3, 64, 0.02, 0.005, 0.02, 300, seed=3)
    assert 0.92 <= r["coverage"] <= 0.98 and r["mean_rel_width"] > 0.1, r


def test_one_machine_or_one_session_gets_no_interval_and_says_why():
    sessions, _ = hierarchical_cell(np.random.default_rng(0), 1, 4, 64, 0.02, 0.005, 0.02)
    r = median_with_ci(sessions, StatsConfig(n_resamples=200), np.random.default_rng(0), [0, 0, 0, 0])
    assert r["ci_low_ms"] is None and r["ci_high_ms"] is None and r["no_ci_reason"] == "1 machine"
    assert r["n_machines"] == 1 and r["n_sessions"] == 4 and r["median_ms"] == pytest.approx(np.median(np.concatenate(sessions)))
    r = median_with_ci(sessions[:1], StatsConfig(n_resamples=200), np.random.default_rng(0), [0])
    assert r["ci_low_ms"] is None and r["no_ci_reason"] == "1 session"
    # treating sessions as the replicates (a user's explicit choice) gives one machine's sessions an interval
    r = median_with_ci(sessions, StatsConfig(n_resamples=200, levels=("sessions", "steps")), np.random.default_rng(0), [0, 0, 0, 0])
    assert r["ci_low_ms"] < r["median_ms"] < r["ci_high_ms"] and r["no_ci_reason"] is None


def test_interval_over_two_machines_stays_positive():
    """Far-apart machines and t(1): on the raw scale the interval would cross zero ms."""
    sessions = [np.full(64, 60.0) + np.arange(64) * 0.01, np.full(64, 90.0) + np.arange(64) * 0.01]
    r = median_with_ci(sessions, StatsConfig(n_resamples=400), np.random.default_rng(0), ["a", "b"])
    assert 0 < r["ci_low_ms"] < 60 and r["ci_high_ms"] > 90
