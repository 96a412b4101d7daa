"""Validity rules: pyperf's spread, foreign processes, throttled clocks, one token per step."""

from decodegap.measure.environment import decode_clock_reasons, foreign_processes
from decodegap.core.protocol import Protocol, judge_arm, judge_session

P = Protocol(min_samples=10, min_duration_s=0.0)


def arm(host_ms, final=10, expected=10):
    return {"mode": "graphed", "timed": {"host_ms": host_ms}, "final_position": final, "expected_position": expected}


def test_steady_samples_are_valid():
    assert judge_arm("graphed", [5.0, 5.1, 4.9] * 10, P) == ([], [])


def test_spread_of_ten_percent_is_unstable():
    reasons, _ = judge_arm("eager", [4.0, 6.0] * 10, P)  # stdev ~20 % of the mean
    assert reasons and reasons[0].startswith("unstable: eager stdev is 20")


def test_single_outlier_is_a_warning_not_a_reason():
    samples = [5.0] * 99 + [8.0]
    reasons, warnings = judge_arm("eager", samples, P)
    assert reasons == [] and warnings and warnings[0].startswith("outliers: eager")


def test_session_reasons():
    foreign = [{"pid": 42, "name": "python", "used_memory_MiB": 1000.0}]
    reasons, _ = judge_session([arm([5.0] * 20, final=9)], P, foreign, ["hw_thermal_slowdown"])
    assert any(r.startswith("not one token per step") for r in reasons)
    assert "foreign GPU process: pid 42 python (1000 MiB)" in reasons
    assert "clocks throttled: hw_thermal_slowdown" in reasons


def test_foreign_processes_and_pid_namespaces():
    own = {"pid": 7, "name": "python", "used_memory_MiB": 1.0}
    other = {"pid": 8, "name": "other", "used_memory_MiB": 2.0}
    assert foreign_processes([own, other], own_pid=7) == ([other], [])
    assert foreign_processes([own], own_pid=7) == ([], [])
    # In a container nvidia-smi shows host pids: one process is ours, a second is foreign.
    found, warnings = foreign_processes([{"pid": 99999, "name": "python", "used_memory_MiB": 1.0}], own_pid=7)
    assert found == [] and warnings
    found, _ = foreign_processes([{**own, "pid": 100}, {**other, "pid": 101}], own_pid=7)
    assert len(found) == 1
    assert foreign_processes(None)[1] == ["nvidia-smi unavailable: foreign GPU processes not checked"]


def test_clock_reason_bits():
    assert decode_clock_reasons(0x1) == ["gpu_idle"]
    assert set(decode_clock_reasons(0x44)) == {"hw_thermal_slowdown", "sw_power_cap"}
