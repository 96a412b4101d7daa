"""Statistics: the hierarchical bootstrap, the paired A/B speedup and its intervals, R_floor."""

import itertools
import tracemalloc
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from decodegap.analysis import bootstrap as stats_module  # the bootstrap and its intervals
from decodegap.analysis.stats import StatsConfig, cell_stats, hierarchical_bootstrap_medians, median_with_ci, speedup_with_ci

CFG = StatsConfig(n_resamples=1000, seed=1)


def test_bootstrap_is_seeded_vectorised_and_respects_session_lengths():
    rng = np.random.default_rng(0)
    sessions = [rng.normal(10, 0.1, 50), rng.normal(12, 0.1, 200)]
    a = hierarchical_bootstrap_medians(sessions, 500, np.random.default_rng(5))
    b = hierarchical_bootstrap_medians(sessions, 500, np.random.default_rng(5))
    assert a.shape == (500,) and np.array_equal(a, b)
    # resampling sessions first: some resamples are all-short-session (~10), some all-long (~12)
    assert a.min() < 10.2 and a.max() > 11.8


def _reference_bootstrap(sessions, n_resamples, rng):
    """The estimator written out: per resample, sessions with replacement, then each chosen
    session's own number of steps with replacement from it; the median of all drawn steps."""
    out = np.empty(n_resamples)
    for b in range(n_resamples):
        chosen = rng.choice(len(sessions), size=len(sessions), replace=True)
        out[b] = np.median(np.concatenate([rng.choice(sessions[j], size=len(sessions[j]), replace=True) for j in chosen]))
    return out


def test_bootstrap_agrees_in_distribution_with_the_reference_loop():
    rng = np.random.default_rng(3)
    sessions = [rng.normal(10, 1, 7), rng.normal(11, 1, 30), rng.normal(12, 2, 120), np.round(rng.normal(10.5, 1, 64), 1)]
    fast = hierarchical_bootstrap_medians(sessions, 4000, np.random.default_rng(1))
    ref = _reference_bootstrap(sessions, 3000, np.random.default_rng(2))
    sd = ref.std()
    assert abs(fast.mean() - ref.mean()) < 4 * sd * np.sqrt(1 / 4000 + 1 / 3000)
    for q in (0.025, 0.5, 0.975):
        assert abs(np.quantile(fast, q) - np.quantile(ref, q)) < 0.1 * sd, q
    assert sps.ks_2samp(fast, ref).pvalue > 0.01


def _exact_median_distribution(sessions):
    """P(median = m) of the hierarchical bootstrap, by enumerating every resample."""
    exact = Counter()
    n = len(sessions)
    for chosen in itertools.product(range(n), repeat=n):
        pools = [itertools.product(sessions[j], repeat=len(sessions[j])) for j in chosen]
        combos = list(itertools.product(*pools))
        for draws in combos:
            exact[float(np.median(np.concatenate(draws)))] += 1 / n**n / len(combos)
    return exact


@pytest.mark.parametrize("chunk_elements", [None, 2000])  # one chunk; many chunks, the last one partial
def test_bootstrap_matches_the_exact_distribution_on_a_tiny_cell(monkeypatch, chunk_elements):
    """Sessions of 2 and 3 steps: odd and even pooled counts (4, 5, 6 draws), ties between middles."""
    if chunk_elements:
        monkeypatch.setattr(stats_module, "_CHUNK_ELEMENTS", chunk_elements)
    sessions = [np.array([0.0, 1.0]), np.array([2.0, 3.0, 5.0])]
    n = 50_001
    boot = hierarchical_bootstrap_medians(sessions, n, np.random.default_rng(7))
    exact = _exact_median_distribution(sessions)
    seen = Counter(boot.tolist())
    assert set(seen) <= set(exact)
    values = sorted(exact)
    observed = np.array([seen[v] for v in values])
    expected = np.array([exact[v] * n for v in values])
    assert sps.chisquare(observed, expected).pvalue > 0.001


def test_bootstrap_of_a_constant_session_is_that_constant():
    boot = hierarchical_bootstrap_medians([np.full(50, 3.7)], 300, np.random.default_rng(0))
    assert boot.shape == (300,) and np.all(boot == 3.7)


def test_bootstrap_memory_grows_with_steps_not_sessions_times_longest():
    """One session of 200,000 steps beside five of 100. Padding every session to the longest would
    allocate 100 x 6 x 200,000 float64 (~960 MB) per array; the traced peak must stay under 64 MB."""
    rng = np.random.default_rng(0)
    sessions = [rng.normal(5.0, 0.2, 200_000)] + [rng.normal(5.1, 0.2, 100) for _ in range(5)]
    tracemalloc.start()
    try:
        boot = hierarchical_bootstrap_medians(sessions, 100, np.random.default_rng(1))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert boot.shape == (100,) and np.isfinite(boot).all()
    assert peak < 64 * 1024**2, f"peak {peak / 1024**2:.0f} MB"


def test_interval_covers_the_true_median_most_of_the_time():
    covered = 0
    for trial in range(40):
        rng = np.random.default_rng(100 + trial)
        sessions = [rng.normal(5.0 + rng.normal(0, 0.05), 0.2, 64) for _ in range(6)]
        r = median_with_ci(sessions, StatsConfig(n_resamples=400), np.random.default_rng(trial))
        covered += r["ci_low_ms"] <= 5.0 <= r["ci_high_ms"]
    assert covered >= 32  # nominal 95 %, some slack for 40 trials


def test_speedup_is_the_geometric_mean_of_session_ratios_with_every_estimator_beside_it():
    ratios = np.array([1.25, 1.26, 1.27, 1.25, 1.26, 1.24, 1.28, 1.26, 1.25, 1.27])
    r = speedup_with_ci(ratios, CFG, np.random.default_rng(0))
    assert r["estimator"] == "geomean" and r["estimate"] == pytest.approx(np.exp(np.log(ratios).mean()))
    lo, hi = r["ci"]
    assert lo < r["estimate"] < hi and hi - lo < 0.03
    est = r["estimators"]
    assert est["mean"]["estimate"] == pytest.approx(ratios.mean()) and est["median"]["estimate"] == pytest.approx(np.median(ratios))
    assert all(e["ci"][0] < e["estimate"] < e["ci"][1] for e in est.values())
    one = speedup_with_ci(np.array([1.3]), CFG, np.random.default_rng(0))
    assert one["ci"] is None and one["no_ci_reason"] == "1 session" and one["estimate"] == pytest.approx(1.3)


def test_headline_speedup_is_symmetric_in_a_and_b():
    """The speedup of B over A is the reciprocal of A over B, interval included (the mean of ratios is not)."""
    ratios = np.array([1.1, 1.4, 2.0, 1.3, 1.7])
    fwd = speedup_with_ci(ratios, CFG, np.random.default_rng(0))
    back = speedup_with_ci(1 / ratios, CFG, np.random.default_rng(0))
    assert fwd["estimate"] == pytest.approx(1 / back["estimate"])
    assert fwd["ci"][0] == pytest.approx(1 / back["ci"][1]) and fwd["ci"][1] == pytest.approx(1 / back["ci"][0])
    assert fwd["estimators"]["mean"]["estimate"] != pytest.approx(1 / back["estimators"]["mean"]["estimate"])


def test_weighted_median_matches_repeating_the_values():
    rng = np.random.default_rng(3)
    values = rng.normal(size=7)
    counts = rng.integers(0, 4, size=(200, 7))
    counts[counts.sum(axis=1) == 0, 0] = 1
    expected = [np.median(np.repeat(values, c)) for c in counts]
    assert np.allclose(stats_module._weighted_median(values, counts), expected)


def test_variance_components_recover_known_machine_and_session_spread():
    rng = np.random.default_rng(0)
    medians, labels = [], []
    for m in range(40):
        effect = rng.normal(0, 2.0)
        for _ in range(5):
            medians.append(100 + effect + rng.normal(0, 0.5))
            labels.append(m)
    v = stats_module.variance_components(np.array(medians), labels, np.array([1.0, 1.2]))
    assert v["machine_sd_ms"] == pytest.approx(2.0, rel=0.25) and v["session_sd_ms"] == pytest.approx(0.5, rel=0.15)
    assert v["step_sd_ms"] == pytest.approx(1.1) and v["machine_share"] > 0.9 and v["n_machines"] == 40
    one = stats_module.variance_components(np.array([1.0, 1.1, 0.9]), [0, 0, 0], np.array([]))
    assert one["machine_sd_ms"] is None and one["session_sd_ms"] == pytest.approx(0.1)


def _frames(arms_ms: dict, sessions=3, steps=40, status=None):
    rows, srows = [], []
    rng = np.random.default_rng(0)
    status = status or {}
    for s in range(sessions):
        for arm, ms in arms_ms.items():
            for i in range(steps):
                rows.append({"session": s, "arm": arm, "host_ms": ms * (1 + 0.01 * rng.standard_normal()), "device_ms": ms})
            srows.append({"session": s, "arm": arm, "status": status.get(s, "valid"), "reasons": "r" if s in status else "",
                          "weight_bytes": 4.8e9, "weight_bytes_no_embedding": 3.8e9, "kv_bytes": 0.0, "copy_bandwidth_Bps": 4.0e12,
                          "raw_path": f"s{s}.json", "raw_sha256": "x", "gpu_name": "g", "driver": "d", "torch": "t",
                          "transformers": "tf", "code_commit": "c", "code_dirty": False, "started_utc": "now"})
    return pd.DataFrame(srows), pd.DataFrame(rows)


def test_cell_stats_r_floor_uses_the_analysis_bandwidth():
    sessions, steps = _frames({"graphed": 2.0})
    cell = dict(gpu="h200", model="m", ctx=2048, attn="sdpa", quant="bf16", mode="graphed")
    r = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12, "price_usd_per_hour": 3.6}, CFG)
    a = r["completed"]["arms"]["graphed"]
    assert a["t_floor_ms"] == pytest.approx(1.0)  # 4.8 GB / 4.8 TB/s
    assert a["r_floor"] == pytest.approx(0.5, rel=0.02)
    assert a["r_ceiling"] == pytest.approx(4.8e9 / 4.0e12 * 1e3 / a["median_ms"])
    assert a["tokens_per_s"] == pytest.approx(500, rel=0.02)
    assert a["cost_usd_per_mtok"] == pytest.approx(3.6 * a["median_ms"] / 3.6)  # $1 per 1M tokens at 1 ms


def test_ab_cell_speedup_and_scopes():
    """completed: every session whose loop ran, flagged unstable or not; valid: the stability rule
    too; a session failed for anything else is in neither."""
    sessions, steps = _frames({"eager": 3.0, "graphed": 2.0}, sessions=5, status={3: "invalid", 4: "invalid"})
    sessions.loc[sessions["session"] == 3, "reasons"] = "unstable: eager stdev is 12% of the mean (limit 10%)"
    sessions.loc[sessions["session"] == 4, "reasons"] = "position mismatch"
    cell = dict(gpu="h200", model="m", ctx=2048, attn="sdpa", quant="bf16", mode="ab-eager-graphed")
    r = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12}, CFG)
    assert r["status"] == "valid" and r["n_valid"] == 3 and r["n_completed"] == 4
    assert r["valid"]["speedup"]["n_sessions"] == 3 and r["completed"]["speedup"]["sessions"] == [0, 1, 2, 3]
    assert r["completed"]["speedup"]["estimate"] == pytest.approx(1.5, rel=0.01)
    assert r["completed"]["speedup"]["of"] == "graphed" and r["completed"]["speedup"]["over"] == "eager"
    # the sensitivity rows: the unfiltered one is the completed scope; a 5 % limit keeps these quiet sessions
    rows = {row["limit"]: row for row in r["sensitivity"]["stability"]}
    assert rows[None]["n_sessions"] == 4 and rows[None]["speedup"]["estimate"] == pytest.approx(r["completed"]["speedup"]["estimate"])
    assert rows[0.05]["n_sessions"] == 4  # steps spread 1 %: every completed session is within 5 %


def test_sessions_on_one_machine_are_one_replicate():
    sessions, steps = _frames({"graphed": 2.0}, sessions=4)
    sessions["machine"] = ["gpu-a", "gpu-a", "gpu-b", "gpu-b"]
    cell = dict(gpu="h200", model="m", ctx=2048, attn="sdpa", quant="bf16", mode="graphed")
    a = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12}, CFG)["completed"]["arms"]["graphed"]
    assert a["n_machines"] == 2 and a["machines"] == ["gpu-a", "gpu-b"] and a["ci_low_ms"] is not None
    sessions["machine"] = "gpu-a"
    a = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12}, CFG)["completed"]["arms"]["graphed"]
    assert a["n_machines"] == 1 and a["ci_low_ms"] is None and a["r_floor_ci"] is None and a["no_ci_reason"] == "1 machine"


def test_host_nominal_scope_keeps_steps_run_at_full_core_speed():
    """Eager slows 1.6x whenever the host core does (probe 2x); graphed does not. The host-nominal
    speedup is the full-speed one, a wholly slowed session has no nominal steps, and a session
    flagged for anything but instability stays out."""
    sessions, steps = _frames({"eager": 3.0, "graphed": 2.0}, sessions=5,
                              status={3: "invalid", 4: "invalid"})
    sessions.loc[sessions["session"] == 3, "reasons"] = "unstable: eager stdev is 30% of the mean (limit 10%)"
    sessions.loc[sessions["session"] == 4, "reasons"] = "foreign GPU process: pid 7"
    steps["block"] = steps.groupby(["session", "arm"]).cumcount() // 8
    slow = (steps["session"] == 3) | ((steps["session"] < 3) & (steps["block"] % 3 == 0))
    steps["step_probe_ns_per_iter"] = np.where(slow, 80.0, 40.0) + np.random.default_rng(1).uniform(0, 2, len(steps))
    steps.loc[slow & (steps["arm"] == "eager"), "host_ms"] *= 1.6
    cell = dict(gpu="h200", model="m", ctx=2048, attn="sdpa", quant="bf16", mode="ab-eager-graphed")
    r = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12}, CFG)

    nominal = r["host_nominal"]["speedup"]
    assert nominal["sessions"] == [0, 1, 2]  # 3: no full-speed step; 4: flagged for a foreign process
    assert nominal["estimate"] == pytest.approx(1.5, rel=0.01)
    assert r["completed"]["speedup"]["estimate"] > 1.6  # what this host gave, slow stretches included
    assert r["completed"]["speedup"]["sessions"] == [0, 1, 2, 3]  # 4: flagged for a foreign process
    rule = r["host_nominal_rule"]
    assert rule["probe"] == "step_probe_ns_per_iter" and 40.0 <= rule["reference_ns_per_iter"] < 41.0
    assert rule["limit_ns_per_iter"] == pytest.approx(1.25 * rule["reference_ns_per_iter"])
    # the figure's points: one per (session, arm, block), with the block's host speed beside it
    points = pd.DataFrame(r["host_blocks"])
    assert len(points) == len(steps.groupby(["session", "arm", "block"]))
    slow_eager = points[(points["arm"] == "eager") & (points["probe_ns_per_iter"] > 60)]
    assert (slow_eager["median_ms"] > 4.5).all()


def test_host_nominal_scope_is_absent_without_probes():
    sessions, steps = _frames({"eager": 3.0, "graphed": 2.0})
    cell = dict(gpu="h200", model="m", ctx=2048, attn="sdpa", quant="bf16", mode="ab-eager-graphed")
    r = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12}, CFG)
    assert r["host_nominal"] == {} and r["host_nominal_rule"] is None and r["host_blocks"] == []


def test_machine_bootstrap_matches_resampling_whole_machines_by_hand():
    """levels (machines,): each resample draws machines with replacement and pools their steps,
    sessions and steps kept as they are."""
    rng = np.random.default_rng(0)
    sessions = [rng.normal(size=5) for _ in range(4)]
    machines = np.array([0, 0, 1, 2])
    boot = hierarchical_bootstrap_medians(sessions, 20000, np.random.default_rng(1), machines, ("machines",))
    groups = [np.concatenate(sessions[:2]), sessions[2], sessions[3]]
    hand = np.random.default_rng(2)
    ref = np.array([np.median(np.concatenate([groups[i] for i in hand.integers(0, 3, 3)])) for _ in range(20000)])
    assert set(np.round(boot, 12)) == set(np.round(ref, 12))  # the same support: medians of whole machines pooled
    assert boot.mean() == pytest.approx(ref.mean(), abs=0.01) and boot.std() == pytest.approx(ref.std(), rel=0.03)
    assert np.quantile(boot, [0.025, 0.975]) == pytest.approx(np.quantile(ref, [0.025, 0.975]), abs=0.02)


def test_session_counts_resample_machines_then_their_sessions():
    machines = np.array([0, 0, 0, 1, 2, 2])
    counts = stats_module.session_counts(500, machines, np.random.default_rng(0), ("machines", "sessions"))
    assert counts.shape == (500, 6)
    per_machine = np.stack([counts[:, machines == m].sum(axis=1) for m in range(3)], axis=1)
    sizes = np.array([3, 1, 2])
    assert (per_machine % sizes == 0).all()  # a machine chosen c times brings c x its session count
    assert ((per_machine // sizes).sum(axis=1) == 3).all()  # three machines drawn per resample
    intact = stats_module.session_counts(50, machines, np.random.default_rng(0), ("machines",))
    assert all((row[machines == m] == row[machines == m][0]).all() for row in intact for m in range(3))


def test_the_unfiltered_sensitivity_row_is_the_headline_itself():
    sessions, steps = _frames({"eager": 3.0, "graphed": 2.0}, sessions=4)
    steps["block"] = steps.groupby(["session", "arm"]).cumcount() // 8
    steps["step_probe_ns_per_iter"] = 40.0 + np.random.default_rng(2).uniform(0, 2, len(steps))
    cell = dict(gpu="h200", model="m", ctx=2048, attn="sdpa", quant="bf16", mode="ab-eager-graphed")
    r = cell_stats(sessions, steps, cell, {"b_peak_Bps": 4.8e12}, CFG)
    head = r["completed"]["speedup"]
    for filt, field in (("stability", "limit"), ("host_nominal", "factor")):
        row = next(x for x in r["sensitivity"][filt] if x[field] is None)
        assert row["speedup"]["estimate"] == head["estimate"] and row["speedup"]["ci"] == head["ci"], filt
        assert row["arms"]["eager"]["ci_low_ms"] == r["completed"]["arms"]["eager"]["ci_low_ms"]


def test_a_gpu_seen_before_and_after_boot_ids_is_one_machine():
    sessions, _ = _frames({"graphed": 2.0}, sessions=4)
    sessions["gpu_uuid"] = ["GPU-a", "GPU-a", "GPU-b", "GPU-b"]
    sessions["boot_id"] = [None, "boot-1", "boot-2", "boot-3"]
    sessions["machine"] = ["GPU-a", "GPU-a/boot-1", "GPU-b/boot-2", "GPU-b/boot-3"]
    from decodegap.analysis.stats import machine_labels

    assert machine_labels(sessions, [0, 1, 2, 3]) == ["GPU-a", "GPU-a", "GPU-b/boot-2", "GPU-b/boot-3"]


def test_newest_code_is_the_newest_version_with_two_sessions_or_more():
    """The fused step's headline scope: the newest measured-code version (by start time, not by session
    number) among those with at least two completed sessions, only where the completed sessions span
    versions; a newer version with one session is never pooled with the older code."""
    from decodegap.analysis.stats import newest_code_sessions

    def listing(*rows):
        return [{"session": i, "sources_sha256": h, "started_utc": t} for i, (h, t) in enumerate(rows)]

    old, new = "a" * 64, "b" * 64
    two_new = listing((old, "2026-01-01"), (new, "2026-01-03"), (old, "2026-01-02"), (new, "2026-01-04"))
    assert newest_code_sessions(two_new, {0, 1, 2, 3}) == (new, {1, 3})
    assert newest_code_sessions(two_new, {0, 1, 2}) == (old, {0, 2})  # one completed session of the newer code: it waits
    assert newest_code_sessions(two_new, {0, 1}) is None  # no version with two: completed is the headline
    assert newest_code_sessions(listing((old, "1"), (old, "2")), {0, 1}) is None  # one version: completed is the headline
    late_old = listing((new, "2026-01-01"), (new, "2026-01-02"), (old, "2026-01-05"), (old, "2026-01-06"))
    assert newest_code_sessions(late_old, {0, 1, 2, 3}) == (old, {2, 3})  # the order sessions started in, not their numbers


def test_a_headline_interval_depends_only_on_the_sessions_it_covers(tmp_path):
    """The newest code's interval (the fused step's headline) must not move when a session of an
    older code version joins the cell: its sessions and their steps are the same. With one bootstrap
    stream for the whole cell, the older session changed how many draws the completed scope took
    before it, and the headline's bounds moved on a rebuild with no change to its own sessions."""
    import json

    from conftest import fixture_cell_stats

    from decodegap.analysis import synthetic

    cell = dict(gpu="h200", model="qwen2.5-7b", ctx=2048, attn="sdpa", quant="bf16", mode="ab-graphed-fused")

    def records(n_old: int) -> list[dict]:
        out = []
        for s in range(2 + n_old):  # s00 and s01: the newer code on two machines, started after every older one
            rec = synthetic.record(cell, s, 64, np.random.default_rng(s), base_ms=8.0)
            rec["time"]["started_utc"] = f"2026-0{1 if s >= 2 else 2}-{s + 1:02d}T00:00:00+00:00"
            rec["environment"]["gpu"]["uuid"] = f"synthetic-{s}"
            if s < 2:
                rec["code"]["sources_sha256"] = "1" * 64
            out.append(rec)
        return out

    stats = {}
    for n_old in (2, 3):
        stats[n_old] = json.loads(fixture_cell_stats(tmp_path / f"old{n_old}", cell, records(n_old)).read_text())
    a, b = stats[2]["newest_code"], stats[3]["newest_code"]
    assert a["sources_sha256"] == b["sources_sha256"] == "1" * 64
    for arm in ("graphed", "fused"):
        assert a["arms"][arm]["sessions"] == b["arms"][arm]["sessions"] == [0, 1]
        assert a["arms"][arm]["ci_low_ms"] is not None
        assert (a["arms"][arm]["ci_low_ms"], a["arms"][arm]["ci_high_ms"]) == (b["arms"][arm]["ci_low_ms"], b["arms"][arm]["ci_high_ms"])
    assert a["speedup"]["ci"] == b["speedup"]["ci"]
    # the completed scope did take the added session (so the two builds differ where they should)
    assert stats[2]["completed"]["arms"]["fused"]["n_sessions"] == 4 and stats[3]["completed"]["arms"]["fused"]["n_sessions"] == 5
