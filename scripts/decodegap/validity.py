"""Whether a session's samples can be trusted. Invalid is data: the record keeps its samples and
says why in `reasons`; `warnings` flag what a reader should know but does not void the cell.

Spread follows pyperf: a standard deviation of 10 % of the mean or more means the timing is
unstable (invalid); a minimum or maximum 50 % off the mean is flagged as a warning.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Protocol:
    warmup_steps: int = 8  # labelled, never in the samples
    timed_steps: int = 128  # per single-mode session
    ab_blocks: int = 8  # per arm, A/B sessions
    ab_block_steps: int = 16
    min_samples: int = 64
    min_duration_s: float = 0.2  # timed host time per arm
    max_rel_stdev: float = 0.10  # pyperf: stdev >= 10 % of the mean -> unstable
    outlier_rel: float = 0.50  # pyperf: min or max >= 50 % off the mean -> warning
    step_probe_iterations: int = 2000  # CPU probe before and after every step, outside its timing (0: off)

    def as_record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, stated: dict) -> "Protocol":
        """The protocol a record states (fields it predates take their defaults)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in stated.items() if k in names})


def judge_arm(mode: str, host_ms: list[float], protocol: Protocol) -> tuple[list[str], list[str]]:
    reasons, warnings = [], []
    n = len(host_ms)
    if n < protocol.min_samples:
        reasons.append(f"too few samples: {mode} has {n} < {protocol.min_samples}")
    if n == 0:
        return reasons, warnings
    duration_s = sum(host_ms) / 1e3
    if duration_s < protocol.min_duration_s:
        reasons.append(f"too short: {mode} timed {duration_s:.3f} s < {protocol.min_duration_s} s")
    if n >= 2:
        mean = statistics.fmean(host_ms)
        rel = statistics.stdev(host_ms) / mean
        if rel >= protocol.max_rel_stdev:
            reasons.append(f"unstable: {mode} stdev is {rel:.1%} of the mean (limit {protocol.max_rel_stdev:.0%})")
        lo, hi = min(host_ms), max(host_ms)
        if lo <= mean * (1 - protocol.outlier_rel) or hi >= mean * (1 + protocol.outlier_rel):
            warnings.append(
                f"outliers: {mode} min {lo:.3f} ms / max {hi:.3f} ms against mean {mean:.3f} ms"
            )
    return reasons, warnings


def judge_session(arms: list[dict], protocol: Protocol, foreign: list[dict], throttled: list[str]) -> tuple[list[str], list[str]]:
    """Reasons (invalidating) and warnings for a session whose arms all ran."""
    reasons, warnings = [], []
    for arm in arms:
        r, w = judge_arm(arm["mode"], arm["timed"]["host_ms"], protocol)
        reasons += r
        warnings += w
        if arm["final_position"] != arm["expected_position"]:
            reasons.append(
                f"not one token per step: {arm['mode']} ended at position {arm['final_position']}, "
                f"expected {arm['expected_position']}"
            )
    for proc in foreign:
        reasons.append(f"foreign GPU process: pid {proc['pid']} {proc['name']} ({proc['used_memory_MiB']:.0f} MiB)")
    if throttled:
        reasons.append(f"clocks throttled: {', '.join(sorted(set(throttled)))}")
    return reasons, warnings


def contradictions(record: dict) -> list[str]:
    """Where a record's status disagrees with its own data, judged by the protocol it states: a
    record that says valid must pass every check of its samples (count, duration, spread, one token
    per step) and carry no reason; one that says invalid must say why."""
    if record["status"] == "invalid":
        return [] if record["reasons"] else ["says invalid but gives no reason"]
    out = []
    if record["reasons"]:
        out.append(f"says valid but lists reasons: {'; '.join(record['reasons'])}")
    if record.get("error"):
        out.append(f"says valid but records an error: {record['error'].get('kind')}")
    if not record["arms"]:
        out.append("says valid but has no measured arm")
    protocol = Protocol.from_record(record["protocol"])
    for arm in record["arms"]:
        reasons, _ = judge_arm(arm["mode"], arm["timed"]["host_ms"], protocol)
        out += [f"says valid, but {r}" for r in reasons]
        if arm["final_position"] != arm["expected_position"]:
            out.append(f"says valid, but {arm['mode']} ended at position {arm['final_position']}, expected {arm['expected_position']}")
    return out
